"""The recording side of "right numbers however pytest runs the tests" (issue 15), in real
pytest runs: threads, recorded calls that behave as the plain ones, reruns
(pytest-rerunfailures), an order that does not depend on execution order (pytest-randomly,
pytest-xdist), and a model whose weights change during the session.

The project, the model and the runners are ``tests/test_plugin.py``'s.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.test_plugin import _warm_imports, project, results, run  # noqa: F401  (fixtures and helpers)

pytestmark = pytest.mark.tf

# -------------------------------------------------------------------------- threads

THREAD_TESTS = '''
import threading

import numpy as np
import pytest
import tensorflow as tf

X = np.load("inputs.npy")
THREADS, CALLS = 8, 32


def call(model, t, k):
    """Call k of thread t: a slice of 1 to 3 rows, by predict, predict_on_batch or model(x)."""
    j = t * CALLS + k
    x = X[j % 57 : j % 57 + 1 + j % 3]
    kind = j % 3
    if kind == 0:
        return np.asarray(model.predict(x, verbose=0))
    if kind == 1:
        return np.asarray(model.predict_on_batch(x))
    return np.asarray(model(tf.constant(x), training=False))


@pytest.mark.sadl(group="threads")
def test_threads(sadl_model):
    outputs = {}
    errors = []

    def work(t):
        try:
            for k in range(CALLS):
                outputs[t, k] = call(sadl_model, t, k)
        except BaseException as exc:  # reported by the test, not lost in a thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert len(outputs) == THREADS * CALLS


@pytest.mark.sadl(group="threads")
def test_serial(sadl_model):
    for t in range(THREADS):
        for k in range(CALLS):
            call(sadl_model, t, k)
'''


def test_calls_from_many_threads_are_all_recorded_as_a_serial_loop(project):  # noqa: F811  (project: the fixture imported from test_plugin)
    """8 threads x 32 calls (predict, predict_on_batch, model(x)) in one marked test: every
    input is recorded for that test, and its numbers equal the same calls in one loop."""
    pytester = project(THREAD_TESTS)
    res = run(
        pytester,
        "--sadl-coverage",
        "--sadl-report=json:out.json",
        "-W",
        "error::pytest_sadl.errors.SadlRecordingWarning",
    )
    res.assert_outcomes(passed=2)
    data = results(pytester)
    tests = {t["nodeid"].split("::")[1]: t for t in data["tests"]}
    expected = sum(1 + j % 3 for j in range(8 * 32))
    assert tests["test_serial"]["inputs"] == expected
    assert tests["test_threads"]["inputs"] == expected
    owner = np.array(data["inputs"]["test"])
    names = [t["nodeid"].split("::")[1] for t in data["tests"]]
    threaded, serial = (owner == names.index("test_threads")), (owner == names.index("test_serial"))
    for key in ("lsa", "dsa", "mdsa", "pred"):
        values = np.array(data["inputs"][key], dtype=np.float64)
        np.testing.assert_allclose(np.sort(values[threaded]), np.sort(values[serial]), rtol=1e-5, atol=1e-5)
    for key in ("lsa_mean", "lsa_max", "dsa_mean", "dsa_max"):
        assert tests["test_threads"][key] == pytest.approx(tests["test_serial"][key], rel=1e-5)
    # the second test by node id (test_threads) feeds the same inputs: nothing new beyond
    # float noise in the traces
    assert names == ["test_serial", "test_threads"]
    assert tests["test_threads"]["new"]["nc"] == tests["test_threads"]["new"]["snac"] == 0
    assert not [w for w in data["outcome"]["warnings"] if "unrecorded" in w]


# -------------------------------------------------------------------------- as the plain call

PLAIN_TESTS = '''
import keras
import numpy as np
import pytest
import tensorflow as tf

X = np.load("inputs.npy")
EMPTY = np.zeros((0, 8, 8, 1), np.float32)
WIDE = np.zeros((2, 8, 7, 1), np.float32)  # a width the model rejects


def outcome(fn):
    """What a call gives: ("value", shape, values) or ("raises", exception type)."""
    try:
        out = np.asarray(fn())
    except Exception as exc:
        return ("raises", type(exc))
    return ("value", out.shape, out.round(5).tolist())


@pytest.mark.sadl
def test_recorded_calls_behave_as_the_plain_ones(sadl_model):
    plain = keras.models.load_model("model.keras")  # the same model, never wrapped
    assert getattr(type(sadl_model), "_sadl_recording", False) and not getattr(type(plain), "_sadl_recording", False)
    cases = {
        "model(empty)": lambda m: m(EMPTY),
        "model(tf empty)": lambda m: m(tf.constant(EMPTY)),
        "predict_on_batch(empty)": lambda m: m.predict_on_batch(EMPTY),
        "predict(empty)": lambda m: m.predict(EMPTY, verbose=0),
        "model(wide)": lambda m: m(WIDE),
        "predict_on_batch(wide)": lambda m: m.predict_on_batch(WIDE),
        "predict(wide)": lambda m: m.predict(WIDE, verbose=0),
    }
    seen = {name: (outcome(lambda: case(sadl_model)), outcome(lambda: case(plain))) for name, case in cases.items()}
    for name, (recorded, unwrapped) in seen.items():
        assert recorded == unwrapped, name
    assert seen["model(empty)"][0][:2] == ("value", (0, 10))
    assert seen["predict_on_batch(empty)"][0][:2] == ("value", (0, 10))
    assert seen["model(wide)"][0][0] == "raises"
    sadl_model.predict(X[:3], verbose=0)  # recorded as ever
'''


def test_a_recorded_call_gives_what_the_plain_call_gives(project, dense_model_path):  # noqa: F811  (project: the fixture imported from test_plugin)
    """Empty batches return what Keras returns and record nothing; inputs Keras rejects raise
    Keras' own exception (not SadlDataError); a recorded call otherwise records."""
    pytester = project(PLAIN_TESTS, model=dense_model_path, layers="hidden2")
    res = run(pytester, "--sadl-coverage", "--sadl-report=json:out.json")
    res.assert_outcomes(passed=1)
    data = results(pytester)
    assert [t["inputs"] for t in data["tests"]] == [3]
    assert not [w for w in data["outcome"]["warnings"] if "could not be recorded" in w or "unrecorded" in w]


# -------------------------------------------------------------------------- reruns

RERUN_TESTS = '''
import os
from pathlib import Path

import numpy as np
import pytest

X = np.load("inputs.npy")


def attempts(name):
    """How many times this test has started, in this run (a file per run mode)."""
    path = Path(f"attempts-{name}-{os.environ['SADL_RERUN_MODE']}")
    n = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(n))
    return n


@pytest.mark.sadl(group="flaky")
def test_flaky(sadl_model):
    sadl_model.predict(X[:50], verbose=0)
    assert attempts("flaky") > 1, "fails on its first run only"


@pytest.mark.sadl(group="flaky")
def test_always_fails(sadl_model):
    attempts("always")
    sadl_model.predict(X[50:55], verbose=0)
    assert False


@pytest.mark.sadl(group="steady")
def test_steady(sadl_model):
    sadl_model.predict(X[55:60], verbose=0)
'''


def test_under_rerunfailures_only_the_last_attempt_counts_serially_and_under_xdist(project):  # noqa: F811  (project: the fixture imported from test_plugin)
    """pytest-rerunfailures (the real plugin) runs a failed test again: the record is the
    last attempt's, its inputs once (50, not 100) and its outcome (a flaky test "passed"),
    and -n 2 gives the serial run's numbers."""
    pytester = project(RERUN_TESTS)
    args = ("-p", "rerunfailures", "--reruns=1", "--sadl-coverage")
    # the mode names each run's attempt counters (PYTEST_XDIST_WORKER cannot: this suite
    # itself may run under xdist, and the serial run is in its process)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SADL_RERUN_MODE", "serial")
        serial = run(pytester, *args, "--sadl-report=json:serial.json")
        mp.setenv("SADL_RERUN_MODE", "xdist")
        dist = run(pytester, *args, "-n", "2", "--sadl-report=json:dist.json")
    for res in (serial, dist):
        outcomes = res.parseoutcomes()
        assert (outcomes.get("passed"), outcomes.get("failed"), outcomes.get("rerun")) == (2, 1, 2), outcomes
    a, b = results(pytester, "serial.json"), results(pytester, "dist.json")
    for data in (a, b):
        tests = {t["nodeid"].split("::")[1]: (t["inputs"], t["outcome"]) for t in data["tests"]}
        assert tests == {"test_flaky": (50, "passed"), "test_always_fails": (5, "failed"), "test_steady": (5, "passed")}
        assert len(data["inputs"]["test"]) == 60
    for key in ("metrics", "groups", "tests", "inputs"):
        assert a[key] == b[key], key
    assert (
        (pytester.path / "attempts-flaky-serial").read_text()
        == (pytester.path / "attempts-flaky-xdist").read_text()
        == "2"
    )


# -------------------------------------------------------------------------- order

ORDER_TESTS = """
import numpy as np
import pytest

X = np.load("inputs.npy")


def noisy(rows, seed):
    return np.clip(X[rows] + np.random.default_rng(seed).normal(scale=0.4, size=X[rows].shape), 0, 1).astype(np.float32)


@pytest.mark.sadl(group="noise")
def test_b_noise(sadl_model):
    sadl_model.predict(noisy(slice(0, 20), 0), verbose=0)


@pytest.mark.sadl(group="clean")
def test_a_clean(sadl_model):
    sadl_model.predict(X[:20], verbose=0)


@pytest.mark.sadl(group="noise")
def test_c_noise(sadl_model):
    sadl_model.predict(noisy(slice(20, 40), 1), verbose=0)


@pytest.mark.sadl(group="clean")
def test_d_clean(sadl_model):
    sadl_model.predict(X[20:40], verbose=0)


@pytest.mark.sadl(group="blur")
def test_0_blur(sadl_model):
    sadl_model.predict((X[40:60] + np.roll(X[40:60], 1, axis=1)) / 2, verbose=0)


@pytest.mark.sadl(group="clean")
def test_e_clean(sadl_model):
    sadl_model.predict(X[40:60], verbose=0)
"""


def _table_vi(res: pytest.RunResult) -> list[str]:
    lines = res.stdout.lines
    start = next(i for i, line in enumerate(lines) if "cumulative coverage by group" in line)
    end = next(
        (i for i in range(start + 1, len(lines)) if not lines[i].strip() or lines[i].startswith("sadl:")), len(lines)
    )
    return lines[start:end]


def test_the_report_does_not_depend_on_execution_order(project):  # noqa: F811  (project: the fixture imported from test_plugin)
    """Serial, shuffled by pytest-randomly (two seeds) and split over -n 2: the same results
    (but the time they were made) and the same Table VI, tests by node id and groups by
    their first test's id; sadl_groups / --sadl-groups put the groups they name first."""
    pytester = project(ORDER_TESTS)
    base = ("-v", "--sadl-coverage", "--sadl-report=term")
    runs = {
        "serial": run(pytester, *base, "--sadl-report=json:serial.json"),
        "dist": run(pytester, *base, "-n", "2", "--sadl-report=json:dist.json"),
    }
    for seed in (1, 2):  # pytest-randomly on: not through run(), which switches it off
        runs[f"seed{seed}"] = pytester.runpytest_inprocess(
            "-p",
            "no:cacheprovider",
            "-p",
            "randomly",
            f"--randomly-seed={seed}",
            *base,
            f"--sadl-report=json:seed{seed}.json",
        )
    executed = {}
    for name, res in runs.items():
        res.assert_outcomes(passed=6)
        executed[name] = [
            m.group(1) for line in res.stdout.lines if "PASSED" in line for m in [re.search(r"::(test_\w+)", line)] if m
        ]
    # the two seeds ran the tests in orders of their own (xdist's order may be any)
    assert len({tuple(executed[name]) for name in ("serial", "seed1", "seed2")}) == 3, executed
    seen = {}
    for name in runs:
        data = results(pytester, f"{name}.json")
        data.pop("created")
        seen[name] = data
    for name in ("dist", "seed1", "seed2"):
        assert seen[name] == seen["serial"], name
        assert _table_vi(runs[name]) == _table_vi(runs["serial"]), name
    data = seen["serial"]
    assert [t["nodeid"].split("::")[1] for t in data["tests"]] == [
        "test_0_blur",
        "test_a_clean",
        "test_b_noise",
        "test_c_noise",
        "test_d_clean",
        "test_e_clean",
    ]
    assert [g["name"] for g in data["groups"]] == ["blur", "clean", "noise"]
    # the ini list (and the flag over it) orders the groups it names; the rest follow
    listed = project(ORDER_TESTS, extra="sadl_groups = noise")
    ini = run(listed, *base, "--sadl-report=json:ini.json")
    flag = run(listed, *base, "--sadl-groups=clean,nosuch", "--sadl-report=json:flag.json")
    assert [g["name"] for g in results(listed, "ini.json")["groups"]] == ["noise", "blur", "clean"]
    flagged = results(listed, "flag.json")
    assert [g["name"] for g in flagged["groups"]] == ["clean", "blur", "noise"]
    assert "sadl_groups names 'nosuch', which no recorded test is in" in flagged["outcome"]["warnings"]
    assert results(listed, "ini.json")["groups"][-1]["cumulative"] == data["groups"][-1]["cumulative"]
    assert _table_vi(ini) != _table_vi(runs["serial"]) != _table_vi(flag)
