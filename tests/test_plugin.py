"""The plugin end to end, in real pytest runs (pytester) of small projects on real models.

Most runs are in process: TensorFlow is already imported here, and importing it again in
a subprocess costs ~10 s a run. pytest-xdist runs start real worker processes anyway, and
the check that the plugin off imports no TensorFlow needs a fresh interpreter: those go
through ``runpytest_subprocess``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import naive
import numpy as np
import pytest

from pytest_sadl.criteria.registry import METRICS
from pytest_sadl.results import Results
from tests._recorded import KEEP_RECORDED, recorded

pytestmark = pytest.mark.tf

INI = """
[pytest]
sadl_model = model.keras
sadl_train = train.npz
sadl_layers = hidden
{extra}
"""

RECORDING_TESTS = """
import numpy as np
import pytest

from pytest_sadl.criteria.registry import METRICS
import tensorflow as tf

X = np.load("inputs.npy")


@pytest.mark.sadl(group="held-out")
def test_predict(sadl_model, sadl_labels):
    sadl_labels(X[:10].astype(np.float64), np.load("labels.npy")[:10])  # matched by value, not dtype
    assert sadl_model.predict(X[:10], verbose=0).shape == (10, 10)


@pytest.mark.sadl(group="attack")
def test_call_keeps_gradients(sadl_model):
    x = tf.constant(X[10:15])
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(sadl_model(x, training=False)[:, 0])
    assert tape.gradient(loss, x) is not None
    assert getattr(type(sadl_model), "_sadl_recording", False)


@pytest.mark.sadl(group="attack")
def test_predict_on_batch(sadl_model):
    assert np.asarray(sadl_model.predict_on_batch(X[15:18])).shape == (3, 10)


@pytest.mark.sadl
def test_explicit_record(sadl_record):
    sadl_record(X[18:20])


@pytest.mark.sadl(group="held-out")
def test_failing_still_counts(sadl_model):
    sadl_model.predict(X[20:25], verbose=0)
    assert False, "this test fails on purpose"


def test_unmarked_is_not_recorded(sadl_model):
    sadl_model.predict(X[25:40], verbose=0)
    assert not getattr(type(sadl_model), "_sadl_recording", False)


@pytest.mark.sadl(group="held-out")
def test_model_saves_and_behaves_as_before_while_recorded(sadl_model, tmp_path):
    import keras

    assert type(sadl_model).__name__ == "Sequential"
    sadl_model.save(tmp_path / "copy.keras")
    copy = keras.models.load_model(tmp_path / "copy.keras")
    np.testing.assert_allclose(copy.predict(X[:2], verbose=0), sadl_model.predict(X[:2], verbose=0), rtol=1e-6)
    nan = np.full((1, 8, 8, 1), np.nan, np.float32)
    # passed through to the model itself, not recorded: the same output as the unwrapped
    # copy gives (NaN or not: TensorFlow 2.21's oneDNN conv/pool kernels turn NaN into numbers)
    np.testing.assert_array_equal(sadl_model.predict(nan, verbose=0), copy.predict(nan, verbose=0))
"""


@pytest.fixture(scope="session", autouse=True)
def _warm_imports(conv_model_path: Path, digits, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Import everything an in-process run will, before any pytester snapshot of sys.modules.

    pytester restores ``sys.modules`` after each in-process run, dropping modules the run
    imported first; TensorFlow cannot be imported twice in one process (it aborts on
    re-registering its ops), so the modules must already be there.
    """
    import keras
    import tensorflow as tf

    from pytest_sadl import capture as traces
    from pytest_sadl import engine  # noqa: F401
    from pytest_sadl.plugin import hooks as plugin  # noqa: F401
    from pytest_sadl.profile import files, lookup
    from pytest_sadl.profile.build import ProfileOptions
    from pytest_sadl.report import badge, compare, html, markdown, terminal  # noqa: F401

    model = keras.models.load_model(conv_model_path)
    tm = traces.TraceModel(model, ["hidden"], None, jit=False, extrema=True)
    tm.call_and_trace(digits.x_test[:4], batch_size=2)
    x = tf.constant(digits.x_test[:2])
    with tf.GradientTape() as tape:
        tape.watch(x)
        out, _ = tm.call_tensors(x)
    tape.gradient(out, x)
    model.save(tmp_path_factory.mktemp("warm") / "m.keras")
    cache = tmp_path_factory.mktemp("warm-cache")
    prof = lookup.load_or_build(model, digits.x_train, ProfileOptions(sa_layers=("hidden",)), cache)
    files.load_profile(prof.path)
    html.render_html(
        Results.from_dict(json.loads((Path(__file__).parent / "data" / "results-classifier.json").read_text()))
    )


@pytest.fixture
def project(pytester: pytest.Pytester, conv_model_path: Path, digits):
    """A project configured for the conv model, with its training data and test inputs."""

    def make(tests: str = RECORDING_TESTS, extra: str = "", model: Path = conv_model_path, layers: str = "hidden"):
        shutil.copy(model, pytester.path / "model.keras")
        np.savez(pytester.path / "train.npz", x=digits.x_train, y=digits.y_train)
        np.save(pytester.path / "inputs.npy", digits.x_test[:60])
        np.save(pytester.path / "labels.npy", digits.y_test[:60])
        ini = INI.format(extra=extra).replace("sadl_layers = hidden", f"sadl_layers = {layers}")
        pytester.makefile(".ini", pytest=ini)
        pytester.makepyfile(test_project=tests)
        return pytester

    return make


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    base = ("-p", "no:cacheprovider", "-p", "no:randomly")
    if "-n" in args:  # xdist starts its own worker processes: keep the controller apart too
        return pytester.runpytest_subprocess(*base, *args, timeout=300)
    return pytester.runpytest_inprocess(*base, *args)


def run_fresh(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """In a new interpreter (nothing imported yet)."""
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", *args, timeout=300)


def results(pytester: pytest.Pytester, name: str = "out.json") -> dict:
    return json.loads((pytester.path / name).read_text())


def project_profile(path: Path) -> Any:
    """The profile a ``project`` run built in its ``.sadl-cache`` (loaded: the same options)."""
    from pytest_sadl.profile.build import ProfileOptions
    from pytest_sadl.profile.lookup import load_or_build

    return load_or_build(
        str(path / "model.keras"), str(path / "train.npz"), ProfileOptions(sa_layers=("hidden",)), path / ".sadl-cache"
    )


def test_recording_groups_failures_and_values(project, digits):
    pytester = project()
    res = run(pytester, "--sadl-coverage", "--sadl-report=json:out.json", "--sadl-report=term")
    res.assert_outcomes(passed=6, failed=1)
    assert res.ret == 1
    data = results(pytester)
    tests = {t["nodeid"].split("::")[1]: t for t in data["tests"]}
    assert {k: v["inputs"] for k, v in tests.items()} == {
        "test_predict": 10,
        "test_call_keeps_gradients": 5,
        "test_predict_on_batch": 3,
        "test_explicit_record": 2,
        "test_failing_still_counts": 5,
        "test_model_saves_and_behaves_as_before_while_recorded": 2,  # the NaN input is not recorded
    }
    assert tests["test_failing_still_counts"]["outcome"] == "failed"
    assert tests["test_explicit_record"]["group"] == "default"
    # groups by the node id of their first test (not by the order they ran in)
    assert [g["name"] for g in data["groups"]] == ["attack", "default", "held-out"]
    assert [g["inputs"] for g in data["groups"]] == [8, 2, 17]
    # Each input's SA equals the engine's on traces computed here by hand, layer by layer.
    import keras

    from pytest_sadl.criteria.surprise import DSA, LSA

    model = keras.models.load_model(pytester.path / "model.keras")
    hidden = keras.Model(model.inputs, model.get_layer("hidden").output)
    train_ats = hidden.predict(digits.x_train, verbose=0)
    train_pred = model.predict(digits.x_train, verbose=0).argmax(1)
    # the tests by node id: call, explicit record, failing, save, predict, predict_on_batch
    x_in = np.concatenate(
        [
            digits.x_test[10:15],
            digits.x_test[18:20],
            digits.x_test[20:25],
            digits.x_test[:2],
            digits.x_test[0:10],
            digits.x_test[15:18],
        ]
    )
    ats = hidden.predict(x_in, verbose=0)
    pred = model.predict(x_in, verbose=0).argmax(1)
    assert data["inputs"]["pred"] == pred.tolist()
    np.testing.assert_allclose(data["inputs"]["lsa"], LSA(train_ats, train_pred)(ats, pred), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(data["inputs"]["dsa"], DSA(train_ats, train_pred)(ats, pred), rtol=1e-4, atol=1e-4)
    # NC as DeepXplore on the full feature maps, every default coverage layer
    from pytest_sadl.criteria.neurons import fit_ranges, kmnc, nc

    names = data["config"]["coverage_layers"]
    assert names[:3] == ["conv1", "pool1", "conv2"] and "dropout" not in names and "flatten" not in names
    full = [keras.Model(model.inputs, model.get_layer(n).output).predict(x_in, verbose=0) for n in names]
    assert data["metrics"]["nc"]["value"] == pytest.approx(nc(full, 0.5))
    train_full = [
        keras.Model(model.inputs, model.get_layer(n).output).predict(digits.x_train, verbose=0) for n in names
    ]
    assert data["metrics"]["kmnc"]["value"] == pytest.approx(kmnc(full, fit_ranges(train_full), 1000), abs=2e-3)
    assert data["metrics"]["lsc"]["count"] == 27
    assert any("non-finite" in w for w in data["outcome"]["warnings"])
    out = res.stdout.str()
    assert "pytest-sadl: surprise adequacy and neuron coverage" in out
    assert "27 inputs recorded: 6 of 6 marked tests fed the model, in 3 group(s)" in out
    # labels: test_predict's ten inputs, matched by value, also where the save test feeds
    # two of them again; and the figures in every report
    # (by node id: call 5, record 2, failing 5, save 2, predict 10, predict_on_batch 3)
    labels = [None] * 12 + digits.y_test[:2].tolist() + digits.y_test[:10].tolist() + [None] * 3
    assert data["inputs"]["label"] == labels
    labelled = [i for i, v in enumerate(labels) if v is not None]
    assert data["mistakes"]["overall"]["labelled"] == 12
    assert data["mistakes"]["overall"]["errors"] == int(
        (pred[labelled] != np.array([labels[i] for i in labelled])).sum()
    )
    assert "does surprise predict this model's mistakes?" in out
    assert re.search(r"^attack\s+2\s+8\s", out, re.M) and re.search(r"^\+ held-out\s+3\s+17\s", out, re.M)


THRESHOLD_TESTS = """
import numpy as np
import pytest

from pytest_sadl.criteria.registry import METRICS

X = np.load("inputs.npy")


@pytest.mark.sadl(group="held-out")
def test_predict(sadl_model):
    sadl_model.predict(X, verbose=0)
"""


def test_thresholds_met_and_missed_set_the_exit_code(project):
    pytester = project(THRESHOLD_TESTS)
    res = run(pytester, "--sadl-coverage", "--sadl-fail-under=lsc:100,nc:1", "--sadl-report=json:out.json")
    assert res.ret == 1  # every test passed: the exit code is the threshold's
    res.assert_outcomes(passed=1)
    data = results(pytester)
    lsc = round(data["metrics"]["lsc"]["value"] * 100, 2)
    res.stdout.fnmatch_lines([f"FAIL LSC {lsc:.2f}% is below --sadl-fail-under=lsc:100 (100.00%)"])
    assert "FAIL NC" not in res.stdout.str()  # met
    assert [f["metric"] for f in data["outcome"]["failures"]] == ["lsc"] and data["outcome"]["passed"] is False


def test_no_recorded_inputs_fails_a_threshold(project):
    pytester = project("def test_nothing():\n    pass\n")
    res = run(pytester, "--sadl-coverage", "--sadl-fail-under=lsc:10")
    assert res.ret == 1
    res.stdout.fnmatch_lines(["*no inputs were recorded*", "FAIL LSC: no inputs were recorded*"])


REPORT_LOG = """
import json

CONFIG = []


def pytest_configure(config):
    CONFIG.append(config)


def pytest_runtest_logreport(report):
    # what --report-log (pytest-reportlog) writes of each report, on the controller (xdist
    # sets report.node there: pytest-reportlog writes what JSON cannot hold as a string)
    config = CONFIG[-1]
    if hasattr(config, "workerinput"):  # not the environment: this suite may run under xdist itself
        return
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    with open("report-log.jsonl", "a") as fh:
        fh.write(json.dumps(data, default=str) + "\\n")  # as pytest-reportlog cleans up
"""


def test_xdist_equals_serial_and_its_reports_stay_small(project):
    """``-n 2`` gives the serial run's numbers, and the workers' records travel outside the
    test reports: a ``--report-log`` of the run is as small as without measuring."""
    pytester = project()
    pytester.makeconftest(REPORT_LOG)
    serial = run(pytester, "--sadl-coverage", "--sadl-report=json:serial.json")
    serial_log = (pytester.path / "report-log.jsonl").read_text().splitlines()
    (pytester.path / "report-log.jsonl").unlink()
    dist = run(pytester, "--sadl-coverage", "-n", "2", "--sadl-report=json:dist.json")
    assert serial.ret == dist.ret == 1
    a, b = results(pytester, "serial.json"), results(pytester, "dist.json")
    for key in ("metrics", "groups", "tests", "inputs", "layers", "config"):
        assert a[key] == b[key], key
    log = (pytester.path / "report-log.jsonl").read_text().splitlines()
    lines = [json.loads(line) for line in log]
    assert len(lines) == len(serial_log) >= 3 * len(a["tests"])  # setup, call, teardown of each test
    # a reference is a few hundred bytes; one test's records as base64 were tens of KB
    assert sum(map(len, log)) < sum(map(len, serial_log)) + 500 * len(log), "no recording rides on a report"
    refs = [line["sadl_record"] for line in lines if "sadl_record" in line]
    assert len(refs) >= len(a["tests"]) and all(r["version"] == 3 for r in refs)
    assert sum("file" in r for r in refs) == sum(t["inputs"] > 0 for t in a["tests"])  # collocated: spooled


def test_the_xdist_payload_travels_by_file_or_at_the_end_and_refuses_strangers(tmp_path):
    """The transport without pytest: a collocated worker's reference names a spool file the
    controller reads once (and removes); without a spool the records wait for the worker's
    end; a payload of another version, or a file outside the spool, is a one-line error."""
    from pytest_sadl.plugin import transport
    from pytest_sadl.plugin.recorder import Recorder
    from pytest_sadl.records import Batch

    rec = Recorder(lambda m: None, lambda m: "w")
    r = rec.record_for("t.py::a", 0, "g")
    r.batches.append(Batch(np.arange(6, dtype=np.float32).reshape(2, 3), [], np.zeros(2, np.int64)))
    spool = tmp_path / "gw0"
    spool.mkdir()
    ref = transport.reference([r], spool, 1)
    assert ref["file"] == "gw0/000001.npz" and len(json.dumps(ref)) < 200
    [back] = transport.read_reference(ref, tmp_path)
    assert back.nodeid == "t.py::a" and np.array_equal(back.batches[0].sa, r.batches[0].sa)
    assert not list(spool.iterdir())  # read once, then gone
    assert transport.read_reference(transport.reference([], spool, 2), tmp_path) == []
    assert transport.read_reference(transport.reference([r], None, 3), tmp_path) is None  # at the end
    [end] = transport.unpack(transport.worker_end([r], ["w1"], None, False))
    assert end.nodeid == "t.py::a"
    with pytest.raises(ValueError, match="outside this controller's spool"):
        transport.read_reference({**ref, "file": "../x.npz"}, tmp_path)
    with pytest.raises(ValueError, match="unknown format.*run one pytest-sadl version everywhere"):
        transport.read_reference({**ref, "version": 2}, tmp_path)


def test_dsa_distances_are_kept_between_runs_and_equal_a_full_precompute(project):
    """The default profile computes DSA's dist_b only for the training traces the recorded
    inputs land next to and keeps them; the next run reuses them, and the numbers equal a
    profile built with every dist_b (--sadl-dsa-precompute, which completes the file)."""
    pytester = project(extra="sadl_cache_dir = .sadl-cache")
    run(pytester, "--sadl-coverage", "--sadl-report=json:first.json")
    (folder,) = [p for p in (pytester.path / ".sadl-cache").glob("profile-*") if p.is_dir()]
    (kept_file,) = folder.glob("extra.dsa-dist_b.*.npy")
    kept = np.load(kept_file)
    known = int((~np.isnan(kept)).sum())
    assert 0 < known < len(kept), "only the x_a of recorded inputs (and of nothing else)"
    assert not json.loads((folder / "meta.json").read_text())["meta"]["dsa_precomputed"]
    run(pytester, "--sadl-coverage", "--sadl-report=json:second.json")
    assert list(folder.glob("extra.dsa-dist_b.*.npy")) == [kept_file], "nothing new to keep: not rewritten"
    # every dist_b at build, in a cache of its own: it never saw the kept distances
    run(
        pytester,
        "--sadl-coverage",
        "--sadl-dsa-precompute",
        "--sadl-cache-dir=full-cache",
        "--sadl-report=json:full.json",
    )
    (full_folder,) = [p for p in (pytester.path / "full-cache").glob("profile-*") if p.is_dir()]
    assert json.loads((full_folder / "meta.json").read_text())["meta"]["dsa_precomputed"]
    other_dist = np.load(full_folder / "dsa.other_dist.npy")
    np.testing.assert_array_equal(kept[~np.isnan(kept)], other_dist[~np.isnan(kept)])
    # and the flag completes the lazy profile in place
    run(pytester, "--sadl-coverage", "--sadl-dsa-precompute", "--sadl-report=json:completed.json")
    assert json.loads((folder / "meta.json").read_text())["meta"]["dsa_precomputed"]
    names = ("first", "second", "full", "completed")
    first, second, full, completed = (results(pytester, f"{name}.json") for name in names)
    assert len(first["inputs"]["dsa"]) > 0 and all(v is not None for v in first["inputs"]["dsa"])
    for key in ("metrics", "inputs", "tests"):
        assert first[key] == second[key] == full[key] == completed[key], key


def test_damaged_kept_dsa_distances_are_one_line_even_under_filterwarnings_error(project):
    pytester = project(extra="sadl_cache_dir = .sadl-cache\nfilterwarnings = error::pytest_sadl.errors.SadlWarning")
    assert run(pytester, "--sadl-coverage", "--sadl-report=json:first.json").ret == 1  # one test fails on purpose
    (kept_file,) = pytester.path.glob(".sadl-cache/profile-*/extra.dsa-dist_b.*.npy")
    raw = bytearray(kept_file.read_bytes())
    raw[-1] ^= 0xFF
    kept_file.write_bytes(bytes(raw))
    res = run(pytester, "--sadl-coverage", "--sadl-report=json:second.json")
    assert res.ret == 1, res.stdout.str()
    second = results(pytester, "second.json")
    (line,) = [w for w in second["outcome"]["warnings"] if "DSA distances kept in" in w]
    assert "does not match its digest" in line and "computing them anew" in line
    assert second["metrics"] == results(pytester, "first.json")["metrics"]


def test_dsa_precompute_from_the_flag_the_ini_and_its_no_flag(pytester: pytest.Pytester):
    from pytest_sadl.plugin.options import read_options

    pytester.makefile(".ini", pytest="[pytest]\nsadl_dsa_precompute = true\n")
    assert read_options(pytester.parseconfig("--sadl-coverage")).dsa_precompute is True
    assert read_options(pytester.parseconfig("--sadl-coverage", "--no-sadl-dsa-precompute")).dsa_precompute is False
    pytester.makefile(".ini", pytest="[pytest]\n")
    assert read_options(pytester.parseconfig("--sadl-coverage")).dsa_precompute is False
    assert read_options(pytester.parseconfig("--sadl-coverage", "--sadl-dsa-precompute")).dsa_precompute is True


def test_strict_config_and_markers_pass_with_every_ini_option(project):
    extra = "\n".join(
        [
            "sadl_coverage = true",
            "sadl_coverage_layers = conv1,hidden",
            "sadl_sc_bounds = lsc:-50:500:100",
            "    mdsc::40",
            "sadl_dsc_lower = 0",  # the deprecated aliases, for one release
            "sadl_dsc_upper = 3",
            "sadl_dsc_buckets = 100",
            "sadl_nc_threshold = 0.25",
            "sadl_kmnc_k = 10",
            "sadl_var_threshold = 1e-6",
            "sadl_batch_size = 64",
            "sadl_report = json:ini.json",
            "sadl_fail_under = nc:1",
            "sadl_cache_dir = .sadl-cache",
            "sadl_dsa_precompute = false",
        ]
    )
    pytester = project(THRESHOLD_TESTS, extra=extra)
    res = run(pytester, "--strict-config", "--strict-markers")
    assert res.ret == 0, res.stdout.str() + res.stderr.str()
    data = results(pytester, "ini.json")
    assert data["config"]["lsc"] == {"lower": -50.0, "upper": 500.0, "buckets": 100, "rule": "configured"}
    assert data["config"]["dsc"] == {"lower": 0.0, "upper": 3.0, "buckets": 100, "rule": "configured"}
    assert data["config"]["mdsc"]["upper"] == 40.0 and data["config"]["mdsc"]["buckets"] == 1000
    assert data["config"]["coverage_layers"] == ["conv1", "hidden"] and data["config"]["kmnc_k"] == 10
    kmnc_total = data["metrics"]["kmnc"]["total"]  # k x neurons, less neurons constant in training
    assert kmnc_total % 10 == 0 and 0 < kmnc_total <= 10 * (8 + 32)
    assert [p for p in (pytester.path / ".sadl-cache").glob("profile-*") if p.is_dir()]
    # the header: paths relative to the rootdir, lines that fit 80 columns
    header = [line for line in res.stdout.lines if line.startswith("sadl: ") and "=" in line]
    assert (
        " ".join(header)
        .replace("; sadl: ", "; ")
        .startswith("sadl: model=model.keras; train=train.npz; SA layers=hidden")
    ), header
    assert "reports=json:ini.json" in " ".join(header) and all(len(line) <= 80 for line in header), header
    assert str(pytester.path) not in "".join(header)


def test_plugin_off_imports_no_tensorflow(pytester: pytest.Pytester):
    pytester.makefile(".ini", pytest=INI.format(extra=""))
    pytester.makepyfile(
        """
        import sys

        def test_no_tf():
            assert "tensorflow" not in sys.modules and "keras" not in sys.modules
            assert "torch" not in sys.modules and "jax" not in sys.modules
        """
    )
    res = run_fresh(pytester)
    res.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sadl-model=missing.keras"], "--sadl-model: '*missing.keras' does not exist*"),
        (
            ["--sadl-fail-under=lsc:30,foo:2"],
            "*unknown metric 'foo'; known metrics are lsc, dsc, mdsc, *nc, kmnc, nbc, snac*",
        ),
        (["--sadl-fail-under=lsc"], "*'lsc' is not METRIC:PERCENT*"),
        (["--sadl-lsc-lower=10", "--sadl-lsc-upper=5"], "*--sadl-lsc-upper=5 is not above --sadl-lsc-lower=10*"),
        (
            ["--sadl-sc-bounds=dsc:0:1,lsc:10:5"],
            "--sadl-sc-bounds: lsc's upper bound 5 is not above its lower bound 10; LSC's buckets divide (lower, upper]*",
        ),
        (
            ["--sadl-sc-bounds=lsc:0"],
            "--sadl-sc-bounds: 'lsc:0' is not METRIC:LOWER:UPPER?:BUCKETS?; write e.g. lsc:0:100*",
        ),
        (
            ["--sadl-sc-bounds=nc:0:1"],
            "--sadl-sc-bounds: 'nc' is not a surprise coverage; bounds are for lsc, dsc, mdsc*",
        ),
        (["--sadl-sc-bounds=lsc:a:1"], "--sadl-sc-bounds: 'a' for the lower bound of lsc is not a number*"),
        (["--sadl-sc-bounds=lsc:::0"], "--sadl-sc-bounds: lsc:...:0 needs at least 1 bucket"),
        (["--sadl-sc-bounds=dsc:::10000000"], "--sadl-sc-bounds: dsc with 10000000 buckets: at most 1,000,000*"),
        (["--sadl-sc-bounds=lsc::1e400"], "--sadl-sc-bounds: the upper bound of lsc '1e400' must be finite"),
        (
            ["--sadl-sc-bounds=lsc:0:9", "--sadl-lsc-upper=3"],
            "--sadl-lsc-upper and --sadl-sc-bounds both set the upper of LSC's buckets; keep --sadl-sc-bounds*",
        ),
        (["--sadl-kmnc-k=0"], "*KMNC needs k >= 1*"),
        (["--sadl-tknc-k=0"], "*--sadl-tknc-k=0: TKNC needs k >= 1 neurons per layer*"),
        (["--sadl-tknp-k=two"], "*--sadl-tknp-k='two' is not an integer*"),
        (["--sadl-cc-threshold=-1"], "*--sadl-cc-threshold=-1: CC's distance threshold must be >= 0*"),
        (["--sadl-report=pdf"], "*unknown report type 'pdf'*"),
        (["--sadl-dsc-buckets=many"], "*--sadl-dsc-buckets='many' is not an integer*"),
        (["--sadl-kmnc-k=100000"], "*--sadl-kmnc-k=100000: at most 10,000 (KMNC keeps neurons x k flags*"),
        (["--sadl-kmnc-k=" + "9" * 5000], "*--sadl-kmnc-k='999*' is not an integer*"),
        (["--sadl-lsc-buckets=10000000"], "*--sadl-lsc-buckets=10000000: at most 1,000,000*"),
        (["--sadl-batch-size=1000000"], "*--sadl-batch-size=1000000: at most 65,536*"),
        (["--sadl-lsc-upper=1e400"], "*--sadl-lsc-upper='1e400' must be finite*"),
        (
            ["--sadl-metrics=lsc,foo"],
            "--sadl-metrics='lsc,foo': unknown metric(s) 'foo'; choose from lsc, dsc, mdsc, *nc, kmnc, nbc, snac*(or all)",
        ),
        (
            ["--sadl-metrics=nc", "--sadl-fail-under=lsc:30"],
            "--sadl-fail-under sets lsc, which this run does not compute (--sadl-metrics=nc); add lsc*",
        ),
    ],
)
def test_bad_configuration_is_a_usage_error(pytester: pytest.Pytester, args, message):
    pytester.makefile(".ini", pytest="[pytest]\n")
    pytester.makepyfile("def test_never_runs():\n    raise AssertionError\n")
    res = pytester.runpytest_inprocess("--sadl-coverage", *args)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([f"ERROR: {message}"])


@pytest.mark.parametrize(
    "line, message",
    [
        # the same message on every pytest (< 9.2 hands the plugin a ValueError, 9.2+ a UsageError)
        (
            'sadl_coverage = "maybe"',
            "sadl_coverage (ini) is not a boolean: invalid truth value 'maybe'; write true or false",
        ),
        (
            "sadl_cache_dir = true",
            "sadl_cache_dir = true in pyproject.toml: expected a path or 'package.module:function' (a string)",
        ),
        ("sadl_compare = 3", "sadl_compare = 3 in pyproject.toml: expected a path*"),
        (
            'sadl_model = ["a.keras", "b.keras"]',
            "sadl_model = ['a.keras', 'b.keras'] in pyproject.toml: expected a path*",
        ),
        ('sadl_fail_under = ["lsc:30", "foo:2"]', "sadl_fail_under (ini): unknown metric 'foo'*"),
        ("sadl_kmnc_k = 20000", "sadl_kmnc_k (ini)=20000: at most 10,000*"),
        ("sadl_kmnc_k = 1.5", "sadl_kmnc_k = 1.5 in pyproject.toml: expected an integer"),
    ],
)
def test_bad_toml_configuration_names_the_option(pytester: pytest.Pytester, line, message):
    pytester.makepyprojecttoml(f"[tool.pytest.ini_options]\n{line}\n")
    pytester.makepyfile("def test_never_runs():\n    raise AssertionError\n")
    res = pytester.runpytest_inprocess("--sadl-coverage")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: {message.rstrip('*')}" in res.stderr.str()


def test_a_bad_boolean_in_an_ini_file_names_the_option(pytester: pytest.Pytester):
    """pytest.ini hands the plugin text, not a TOML type: the value reaches pytest's own
    truth-value parser, whose error (a ValueError before pytest 9.2, a UsageError since)
    must still come out naming the option."""
    pytester.makeini("[pytest]\nsadl_coverage = maybe\n")
    pytester.makepyfile("def test_never_runs():\n    raise AssertionError\n")
    res = pytester.runpytest_inprocess()
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    err = res.stderr.str()
    assert "ERROR: sadl_coverage (ini) is not a boolean: invalid truth value 'maybe'; write true or false" in err
    assert err.count("ERROR:") == 1


@pytest.mark.parametrize(
    "name, text",
    [
        ("pytest.ini", "[pytest]\nsadl_coverage = true\nsadl_fail_under =\n    lsc:30\n    nc:10\nsadl_kmnc_k = 20\n"),
        ("pyproject.toml", '[tool.pytest]\nsadl_coverage = true\nsadl_fail_under = "lsc:30,nc:10"\nsadl_kmnc_k = 20\n'),
        (
            "pyproject.toml",
            '[tool.pytest]\nsadl_coverage = true\nsadl_fail_under = ["lsc:30", "nc:10"]\nsadl_kmnc_k = 20\n',
        ),
    ],
    ids=["ini-lines", "native-toml-string", "native-toml-list"],
)
def test_list_options_read_alike_in_every_config_format(pytester: pytest.Pytester, name, text):
    """A multi-line ini value and pytest 9's native [tool.pytest] table (which checks TOML
    types itself) give the thresholds a TOML list gives, with no deprecation warning."""
    if name == "pyproject.toml" and int(pytest.__version__.split(".")[0]) < 9:
        pytest.skip("the native [tool.pytest] table is pytest 9's")
    (pytester.path / name).write_text(text)
    pytester.makepyfile("def test_ok():\n    pass\n")
    res = pytester.runpytest_inprocess("--co", "-W", "error::pytest.PytestDeprecationWarning")
    assert res.ret == 0, res.stdout.str() + res.stderr.str()
    res.stdout.fnmatch_lines(["sadl: *fail-under=lsc:30,nc:10"])
    assert "warning" not in res.stdout.str().lower()


def test_a_toml_list_of_thresholds_works(pytester: pytest.Pytester):
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\nsadl_fail_under = ["lsc:30", "nc:10"]\nsadl_coverage = true\n'
    )
    pytester.makepyfile("def test_ok():\n    pass\n")
    res = pytester.runpytest_inprocess("--co")
    assert res.ret == 0
    res.stdout.fnmatch_lines(["sadl: *fail-under=lsc:30,nc:10"])


def test_training_data_that_is_not_a_zip_is_named_so(project):
    pytester = project(THRESHOLD_TESTS)
    (pytester.path / "train.npz").write_text("x,y\n0.1,3\n")
    res = run(pytester, "--sadl-coverage")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    err = res.stderr.str()
    assert "train.npz' is not a .npz file (a zip archive of arrays" in err and "(pickled)" not in err


def test_unknown_layer_is_a_usage_error_before_tests_run(project):
    pytester = project(THRESHOLD_TESTS, layers="hiden")
    res = run(pytester, "--sadl-coverage")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    err = res.stderr.str()
    assert "hiden" in err and "hidden" in err and "Traceback" not in err
    assert "test_predict" not in res.stdout.str()


REGRESSION_TESTS = """
import numpy as np
import pytest

from pytest_sadl.criteria.registry import METRICS

X = np.load("inputs.npy")


@pytest.mark.sadl(group="held-out")
def test_predict(sadl_model):
    sadl_model.predict(X, verbose=0)
"""


def test_regression_model_has_no_dsa(project, regression_model_path):
    pytester = project(REGRESSION_TESTS, model=regression_model_path, layers="rhidden")
    res = run(
        pytester, "--sadl-coverage", "--sadl-report=json:out.json", "--sadl-report=term", "--sadl-fail-under=dsc:10"
    )
    assert res.ret == 1
    data = results(pytester)
    assert data["metrics"]["dsc"]["applicable"] is False and data["metrics"]["dsc"]["value"] is None
    assert data["metrics"]["lsc"]["count"] == 60 and data["model"]["classifier"] is False
    assert set(data["inputs"]["dsa"]) == {None} and set(data["inputs"]["pred"]) == {None}
    res.stdout.fnmatch_lines(["*DSC*not applicable*", "FAIL DSC is not applicable to this model*"])


def test_chosen_metrics_only_are_computed_and_reported(project):
    """--sadl-metrics: the run computes and every report shows only the chosen metrics; a
    surprise measure not chosen is not set up (no held-out scores are stored for it)."""
    pytester = project(THRESHOLD_TESTS, extra="sadl_cache_dir = .sadl-cache\nsadl_metrics = nc,dsc")
    res = run(
        pytester,
        "--sadl-coverage",
        "--sadl-fail-under=nc:1",
        "--sadl-compare-fail=all:-100",
        "--sadl-compare=" + str(Path(__file__).parent / "data" / "results-classifier.json"),
        "--sadl-report=json:out.json",
        "--sadl-report=html:html",
        "--sadl-report=markdown:out.md",
        "--sadl-report=badge:badges",
        "--sadl-report=term",
    )
    assert res.ret == 0, res.stdout.str()
    data = results(pytester)
    assert list(data["metrics"]) == ["dsc", "nc"]  # report order, whatever order was given
    assert "lsa" not in data["inputs"] and "mdsa" not in data["inputs"] and len(data["inputs"]["dsa"]) == 60
    assert set(data["layers"][0]) == {"name", "neurons", "nc"} and "lsc" not in data["config"]
    assert set(data["groups"][0]["metrics"]) == {"dsc", "nc"} and set(data["tests"][0]["new"]) == {"dsc", "nc"}
    (folder,) = [p for p in (pytester.path / ".sadl-cache").glob("profile-*") if p.is_dir()]
    assert [p.name.split(".")[1] for p in folder.glob("extra.heldout-*")] == ["heldout-dsa-1000"]
    md = (pytester.path / "out.md").read_text()
    assert "| DSC |" in md and "| NC |" in md and "| LSC |" not in md
    assert sorted(p.name for p in (pytester.path / "badges").glob("*.json")) == [
        "sadl-badge-dsc.json",
        "sadl-badge-nc.json",
    ]
    html_text = (pytester.path / "html" / "index.html").read_text()
    assert 'id="card-nc"' in html_text and 'id="card-lsc"' not in html_text
    term = res.stdout.str()
    assert re.search(r"^NC\s", term, re.M) and not re.search(r"^LSC\s", term, re.M)
    # the command line wins over the ini
    res = run(pytester, "--sadl-coverage", "--sadl-metrics=all", "--sadl-report=json:all.json")
    assert list(results(pytester, "all.json")["metrics"]) == list(METRICS)


def test_sa_components_project_lsa_and_mdsa_onto_the_principal_axes(project):
    """--sadl-sa-components=N: LSA and MDSA on the first N principal axes of the SA layer's
    training traces, equal to the definition on traces projected by NumPy's SVD of the
    centred traces (the axes' signs do not change a KDE or a Mahalanobis distance); DSA
    unprojected; the axes and the projected held-out scores kept in the profile under their
    own names; in the results' config. N above the layer's width makes the projected metrics
    not available with a one-line reason; N = 0 is a usage error."""

    pytester = project(THRESHOLD_TESTS, extra="sadl_cache_dir = .sadl-cache")
    pytester.makeconftest(KEEP_RECORDED)  # the reference projects the traces the run recorded
    res = run(pytester, "--sadl-coverage", "--sadl-metrics=lsc,dsc,mdsc", "--sadl-report=json:plain.json")
    assert res.ret == 0, res.stdout.str()
    res = run(
        pytester,
        "--sadl-coverage",
        "--sadl-metrics=lsc,dsc,mdsc",
        "--sadl-sa-components=4",
        "--sadl-report=json:out.json",
        "--sadl-report=term",
    )
    assert res.ret == 0, res.stdout.str()
    assert "SA layers: hidden (LSA/MDSA on 4 principal axes)" in res.stdout.str()
    data, plain = results(pytester), results(pytester, "plain.json")
    assert data["config"]["sa_components"] == 4 and "sa_components" not in plain["config"]
    # the run's own float32 traces on both sides (the profile it built, the inputs it recorded):
    # what remains is float64 rounding of the plugin's chunked PCA against NumPy's SVD
    profile = project_profile(pytester.path)
    test_sa, test_pred = recorded(pytester.path)
    sa, train_pred = np.asarray(profile.sa_traces, dtype=np.float64), profile.sa_pred
    centred = sa - sa.mean(axis=0)
    axes = np.linalg.svd(centred, full_matrices=False)[2][:4].T
    p_train, p_tests = centred @ axes, (test_sa.astype(np.float64) - sa.mean(axis=0)) @ axes
    np.testing.assert_allclose(data["inputs"]["lsa"], naive.lsa(p_train, train_pred, p_tests, test_pred), rtol=1e-6)
    np.testing.assert_allclose(data["inputs"]["mdsa"], naive.mdsa(p_train, train_pred, p_tests, test_pred), rtol=1e-6)
    assert data["inputs"]["dsa"] == plain["inputs"]["dsa"]  # DSA measures every neuron
    assert data["inputs"]["lsa"] != plain["inputs"]["lsa"]
    (folder,) = [p for p in (pytester.path / ".sadl-cache").glob("profile-*") if p.is_dir()]
    extras = {p.name.split(".")[1] for p in folder.glob("extra.*")}
    assert {"pca4-mean", "pca4-axes", "pca4-variances", "heldout-lsa-pca4-1000", "heldout-lsa-1000"} <= extras
    assert "heldout-dsa-pca4-1000" not in extras
    res = run(
        pytester, "--sadl-coverage", "--sadl-metrics=lsc,dsc", "--sadl-sa-components=33", "--sadl-report=json:wide.json"
    )
    assert res.ret == 0, res.stdout.str()
    wide = results(pytester, "wide.json")
    assert wide["metrics"]["lsc"]["value"] is None and wide["metrics"]["dsc"]["value"] is not None
    assert "--sadl-sa-components=33 is more than the SA layers' 32 neurons" in wide["metrics"]["lsc"]["reason"]
    res = run(pytester, "--sadl-coverage", "--sadl-sa-components=0")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "--sadl-sa-components=0: project onto at least 1 principal axis" in res.stderr.str() + res.stdout.str()


def test_the_peers_criteria_run_end_to_end_and_counts_read_as_numbers(project):
    """TKNC, TKNP, NLC and CC (opt-in): computed by a run, with their parameters in the
    config; the count criteria (TKNP, NLC, CC) are numbers, not percentages, in every report
    and in their thresholds, and the results file passes its schema."""
    from pytest_sadl.resultsfile import validate_results

    pytester = project(THRESHOLD_TESTS)
    res = run(
        pytester,
        "--sadl-coverage",
        "--sadl-metrics=nc,tknc,tknp,nlc,cc",
        "--sadl-tknc-k=1",
        "--sadl-cc-threshold=0.5",
        "--sadl-fail-under=tknc:1,tknp:1000000",
        "--sadl-report=json:out.json",
        "--sadl-report=html:html",
        "--sadl-report=markdown:out.md",
        "--sadl-report=badge:badges",
        "--sadl-report=term",
    )
    assert res.ret == 1, res.stdout.str()  # the tests pass; TKNP's threshold fails
    data = results(pytester)
    validate_results(data)
    assert list(data["metrics"]) == ["nc", "tknc", "tknp", "nlc", "cc"]
    n = len(data["inputs"]["test"])
    tknp, cc, nlc = (data["metrics"][m]["value"] for m in ("tknp", "cc", "nlc"))
    assert 1 <= tknp <= n and float(tknp).is_integer() and data["metrics"]["tknp"]["covered"] == tknp
    assert 1 <= cc <= n * len(data["config"]["coverage_layers"]) and float(cc).is_integer()
    assert nlc > 0 and 0 < data["metrics"]["tknc"]["value"] <= 1
    assert {k: data["config"][k] for k in ("tknc_k", "tknp_k", "cc_threshold")} == {
        "tknc_k": 1,
        "tknp_k": 2,
        "cc_threshold": 0.5,
    }
    assert set(data["layers"][0]) == {"name", "neurons", "nc", "tknc"}
    (failure,) = data["outcome"]["failures"]
    assert failure["metric"] == "tknp" and failure["message"] == (
        f"TKNP {tknp:.2f} is below --sadl-fail-under=tknp:1e+06 (1000000.00)"
    )
    term = res.stdout.str()
    assert re.search(rf"^TKNP\s+{int(tknp)}\s", term, re.M), term
    assert re.search(r"^TKNC\s+\d+\.\d\d%", term, re.M)
    md = (pytester.path / "out.md").read_text()
    assert f"| TKNP | {int(tknp):,} | 1000000.00 | ❌ fail |" in md
    badge = json.loads((pytester.path / "badges" / "sadl-badge-tknp.json").read_text())
    assert badge["message"] == f"{int(tknp):,}" and badge["color"] == "red"
    page = (pytester.path / "html" / "index.html").read_text()
    card = page[page.index('id="card-tknp"') :]
    card = card[: card.index("vs baseline") if "vs baseline" in card else card.index("</div>\n</div>")]
    assert f'<div class="value">{int(tknp):,}</div>' in card and 'class="meter"' not in card


def test_a_metric_that_cannot_be_set_up_is_not_available_and_the_others_are_computed(project, monkeypatch):
    """Issue 21: a variance threshold no neuron meets (as a briefly trained MobileNetV2's
    pooled features meet the default one) leaves LSA and MDSA without a KDE or covariance:
    they are reported as not available with the reason in every report, DSA and the neuron
    coverages are computed, only the threshold on LSC fails, and the profile is cached, so
    the next run traces nothing."""
    from pytest_sadl.profile import lookup

    pytester = project(THRESHOLD_TESTS, extra="sadl_cache_dir = .sadl-cache\nsadl_var_threshold = 1e9")
    args = ["--sadl-coverage", "--sadl-fail-under=lsc:10,nc:1", "--sadl-report=json:out.json"]
    reports = [
        "--sadl-report=html:html",
        "--sadl-report=markdown:out.md",
        "--sadl-report=badge:b",
        "--sadl-report=term",
    ]
    res = run(pytester, *args, *reports)
    assert res.ret == 1, res.stdout.str()  # the tests passed: the LSC threshold fails the run
    res.assert_outcomes(passed=1)
    data = results(pytester)
    reason = "LSA cannot be set up on SA layers ['hidden']: LSA: every one of the"
    for name in ("lsc", "mdsc"):
        metric = data["metrics"][name]
        assert metric["value"] is None and metric["applicable"] is False and "var_threshold=1e+09" in metric["reason"]
    assert data["metrics"]["lsc"]["reason"].startswith(reason)
    assert data["metrics"]["mdsc"]["reason"].startswith("MDSA cannot be set up on SA layers ['hidden']")
    assert data["config"]["lsc"]["rule"].startswith("not available: " + reason)
    for name in ("dsc", "nc", "kmnc", "nbc", "snac"):
        assert data["metrics"][name]["applicable"] is True and data["metrics"][name]["value"] is not None, name
    assert set(data["inputs"]["lsa"]) == {None} and None not in data["inputs"]["dsa"]
    assert [f["metric"] for f in data["outcome"]["failures"]] == ["lsc"]
    assert data["outcome"]["failures"][0]["message"].startswith(
        "LSC is not available, so --sadl-fail-under=lsc:10 cannot be met: " + reason
    )
    from pytest_sadl.resultsfile import validate_results

    validate_results(data)  # the schema knows "reason"
    # (no brackets in the patterns: fnmatch reads them as character sets)
    res.stdout.fnmatch_lines(
        ["LSC: not available (LSA cannot be set up on SA layers *", "FAIL LSC is not available*every one of the*"]
    )
    md = (pytester.path / "out.md").read_text()
    assert "n/a (not available)" in md and "- ⚠️ LSC not available: LSA cannot be set up on SA layers" in md
    assert "not available: " + reason.replace("'", "&#39;") in (pytester.path / "html" / "index.html").read_text()
    assert json.loads((pytester.path / "b" / "sadl-badge-lsc.json").read_text())["message"] == "n/a"
    (folder,) = [p for p in (pytester.path / ".sadl-cache").glob("profile-*") if p.is_dir()]
    assert (folder / "meta.json").exists()

    def never(*_a, **_k):
        raise AssertionError("the training set was traced again")

    monkeypatch.setattr(lookup, "build_profile", never)
    res = run(pytester, "--sadl-coverage", "--sadl-report=json:again.json")
    assert res.ret == 0, res.stdout.str()
    again = results(pytester, "again.json")
    assert again["metrics"]["dsc"] == data["metrics"]["dsc"] and again["metrics"]["lsc"]["reason"].startswith(reason)


def test_training_data_of_one_predicted_class_leaves_only_dsa_out(project, conv_model_path, digits):
    """DSA needs two predicted classes; with training inputs the model predicts as one
    class only, DSC is not available and LSC, MDSC and the neuron coverages are computed."""
    import keras

    model = keras.saving.load_model(conv_model_path)
    pred = model.predict(digits.x_train, verbose=0).argmax(axis=1)
    pytester = project(THRESHOLD_TESTS)
    np.savez(pytester.path / "train.npz", x=digits.x_train[pred == 0])
    res = run(pytester, "--sadl-coverage", "--sadl-report=json:out.json", "--sadl-report=term")
    assert res.ret == 0, res.stdout.str()
    data = results(pytester)
    assert data["metrics"]["dsc"]["reason"].startswith(
        "DSA cannot be set up on SA layers ['hidden']: DSA needs training traces of at least two predicted classes"
    )
    for name in ("lsc", "mdsc", "nc", "kmnc", "nbc", "snac"):
        assert data["metrics"][name]["value"] is not None, name
    res.stdout.fnmatch_lines(["DSC: not available (DSA cannot be set up*"])


MODEL_FIXTURE = """
import keras
import pytest

from pytest_sadl.criteria.registry import METRICS

@pytest.fixture(scope="session")
def sadl_model():
    return keras.models.load_model({path!r})
"""

TRAIN_FIXTURE = """
import numpy as np
import pytest

from pytest_sadl.criteria.registry import METRICS

@pytest.fixture(scope="session")
def sadl_train():
    return np.load("train.npz")["x"]
"""


ELSEWHERE = """
import json


@pytest.hookimpl(trylast=True)
def pytest_configure_node(node):  # as a worker started with --tx ssh=... would see it
    node.workerinput["sadl_host"] = "another-machine"


def pytest_runtest_logreport(report):
    ref = getattr(report, "sadl_record", None)
    if ref is not None:
        with open("refs.txt", "a") as fh:
            fh.write(json.dumps(ref) + "\\n")
"""


@pytest.mark.parametrize("from_fixture", ["model", "train"])
def test_project_fixtures_under_xdist(pytester: pytest.Pytester, conv_model_path, digits, from_fixture):
    """Only the workers have a project fixture's model or data: they build the profile.
    (With the data from a fixture, the workers also act as if on another machine: their
    records travel once, at their end, not through the spool folder.)"""
    np.savez(pytester.path / "train.npz", x=digits.x_train)
    np.save(pytester.path / "inputs.npy", digits.x_test[:20])
    shutil.copy(conv_model_path, pytester.path / "model.keras")
    if from_fixture == "model":
        pytester.makefile(".ini", pytest="[pytest]\nsadl_train = train.npz\n")
        pytester.makeconftest(MODEL_FIXTURE.format(path=str(pytester.path / "model.keras")))
    else:  # and the workers as if on another machine: their records come at their end
        pytester.makefile(".ini", pytest="[pytest]\nsadl_model = model.keras\n")
        pytester.makeconftest(TRAIN_FIXTURE + ELSEWHERE)
    pytester.makepyfile(test_project=THRESHOLD_TESTS)
    dist = run(pytester, "--sadl-coverage", "-n", "2", "--sadl-report=json:dist.json")
    assert dist.ret == 0, dist.stdout.str() + dist.stderr.str()
    data = results(pytester, "dist.json")
    assert data["metrics"]["lsc"]["count"] == 20 and data["model"]["n_train"] == len(digits.x_train)
    assert data["model"]["name"] == "digits_conv" and data["config"]["sa_layers"] == ["hidden"]
    assert data["model"]["source"] == ("fixture" if from_fixture == "model" else str(pytester.path / "model.keras"))
    assert not data["outcome"]["missing"] and not any("pytest-sadl:" in w for w in data["outcome"]["warnings"])
    if from_fixture == "train":
        refs = [json.loads(line) for line in (pytester.path / "refs.txt").read_text().splitlines()]
        assert any(r["records"] for r in refs)
        assert all(r.get("at_end") and "file" not in r for r in refs if r["records"])


CRASHING_TESTS = """
import numpy as np
import pytest

from pytest_sadl.criteria.registry import METRICS

X = np.load("inputs.npy")


@pytest.mark.sadl(group="before")
@pytest.mark.parametrize("i", range(3))
def test_before_the_crash(sadl_model, i):
    sadl_model.predict(X[i * 10:(i + 1) * 10], verbose=0)


@pytest.mark.sadl(group="crash")
def test_worker_dies(sadl_model):
    import os

    sadl_model.predict(X[:5], verbose=0)
    os._exit(1)
"""

OTHER_WORKER_TESTS = """
import numpy as np
import pytest

from pytest_sadl.criteria.registry import METRICS

X = np.load("inputs.npy")


@pytest.mark.sadl(group="other")
def test_on_the_other_worker(sadl_model):
    sadl_model.predict(X[30:37], verbose=0)


@pytest.mark.sadl
@pytest.mark.skip(reason="skipped before it records: not missing")
def test_skipped():
    pass
"""


def test_a_crashed_worker_loses_only_the_crashing_tests_inputs(project):
    """A real ``-n 2`` run: the tests that ran on the worker before it died keep their inputs
    (they went with their reports; xdist hands each worker two of the four first), the
    reports name the test whose inputs are missing, and the terminal says so before the
    tables. (Not ``--dist=loadfile``: xdist reruns a crashing test's file there.)"""
    pytester = project(CRASHING_TESTS)
    pytester.makepyfile(test_other=OTHER_WORKER_TESTS)
    res = run(
        pytester,
        "--sadl-coverage",
        "-n",
        "2",
        "--sadl-report=json:out.json",
        "--sadl-report=term",
        "--sadl-report=markdown:out.md",
        "--sadl-report=html:html",
    )
    assert res.ret == 1  # the crashed test failed
    data = results(pytester)
    inputs = {t["nodeid"].split("::")[1]: t["inputs"] for t in data["tests"]}
    assert inputs == {
        "test_before_the_crash[0]": 10,
        "test_before_the_crash[1]": 10,
        "test_before_the_crash[2]": 10,
        "test_on_the_other_worker": 7,
    }
    assert data["metrics"]["lsc"]["count"] == 37
    [missing] = data["outcome"]["missing"]
    assert missing["nodeid"] == "test_project.py::test_worker_dies" and "crashed while running it" in missing["reason"]
    assert "incomplete: test_project.py::test_worker_dies" in data["outcome"]["warnings"][0]
    out = res.stdout.lines
    warning = next(
        i for i, line in enumerate(out) if line.startswith("warning: pytest-sadl: the inputs of 1 test(s) are missing")
    )
    table = next(i for i, line in enumerate(out) if line.startswith("metric  coverage"))
    assert warning < table
    assert (
        "test\\_project.py::test\\_worker\\_dies: worker" in (pytester.path / "out.md").read_text().split("| Metric")[0]
    )
    html = (pytester.path / "html" / "index.html").read_text()
    assert 'id="missing"' in html and "test_project.py::test_worker_dies" in html


def test_reports_are_independent_and_the_exit_status_says_one_failed(project):
    pytester = project(THRESHOLD_TESTS)
    res = run(
        pytester,
        "--sadl-coverage",
        "--sadl-report=html:/proc/sadl-x",
        "--sadl-report=json:ok.json",
        "--sadl-report=markdown:ok.md",
        "--sadl-report=term",
        "--junitxml=junit.xml",
    )
    assert res.ret == pytest.ExitCode.USAGE_ERROR  # every test passed: the code is the report's
    res.assert_outcomes(passed=1)
    assert results(pytester, "ok.json")["metrics"]["lsc"]["count"] == 60
    assert "| LSC |" in (pytester.path / "ok.md").read_text()
    out = res.stdout.str()
    assert "metric  coverage" in out and "sadl: json report written to" in out
    [line] = [line for line in res.stdout.lines if "could not write" in line]
    assert line.startswith("pytest-sadl: could not write the html report to /proc/sadl-x: ")
    assert "Traceback" not in out + res.stderr.str() and "could not compute" not in out
    assert (pytester.path / "junit.xml").exists()  # the hooks after ours still ran


def _baseline(pytester: pytest.Pytester, **model: object) -> Path:
    doc = json.loads((Path(__file__).parent / "data" / "results-baseline.json").read_text())
    doc["model"].update(model)
    path = pytester.path / "base.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_bad_baseline_is_a_usage_error_naming_file_and_field(project):
    pytester = project(THRESHOLD_TESTS)
    base = _baseline(pytester, fingerprint=12345)
    res = run(pytester, "--sadl-coverage", f"--sadl-compare={base}", "--sadl-report=json:out.json")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(
        [f"ERROR: --sadl-compare: {base}: model.fingerprint must be a string or null, got an integer 12345"]
    )
    deep = pytester.path / "deep.json"
    deep.write_text(
        '{"schema": "pytest-sadl/results", "version": 1, "metrics": {"lsc": ' + "[" * 200_000 + "]" * 200_000 + "}}"
    )
    res = run(pytester, "--sadl-coverage", f"--sadl-compare={deep}")
    assert res.ret == pytest.ExitCode.USAGE_ERROR and "nested more than 32 levels deep" in res.stderr.str()


BASELINE_BREAKING_TESTS = (
    THRESHOLD_TESTS
    + """

def test_breaks_the_baseline():
    with open("base.json", "w") as fh:
        fh.write('{"schema": "pytest-sadl/results", "version": 1, "metrics": {"lsc": {"value": 1e308}}}')
"""
)


def test_a_baseline_broken_during_the_run_loses_no_report(project):
    pytester = project(BASELINE_BREAKING_TESTS)
    base = _baseline(pytester)
    res = run(
        pytester,
        "--sadl-coverage",
        f"--sadl-compare={base}",
        "--sadl-compare-fail=lsc:-5",
        "--sadl-report=json:out.json",
        "--sadl-report=term",
    )
    assert res.ret == 1  # the comparison gate cannot be checked: it fails
    data = results(pytester)
    assert data["metrics"]["lsc"]["count"] == 60
    assert any(
        "cannot compare with the baseline" in w and "metrics.lsc.value must be a fraction" in w
        for w in data["outcome"]["warnings"]
    )
    assert "metric  coverage" in res.stdout.str()
    res.stdout.fnmatch_lines(["FAIL --sadl-compare-fail cannot be checked: *"])


def test_plugin_off_ignores_broken_sadl_settings(pytester: pytest.Pytester):
    pytester.makefile(".ini", pytest="[pytest]\nsadl_fail_under = lsc30\nsadl_compare = missing.json\n")
    pytester.makepyfile("def test_ok():\n    pass\n")
    pytester.runpytest_inprocess().assert_outcomes(passed=1)
    assert pytester.runpytest_inprocess("--help").ret == 0
    res = pytester.runpytest_inprocess("--sadl-coverage")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["ERROR: sadl_fail_under (ini): 'lsc30' is not METRIC:PERCENT*"])


def test_a_marked_test_without_any_model_is_a_usage_error_not_a_test_error(pytester: pytest.Pytester):
    """No sadl_model in the ini and no project fixture: the run ends at the first marked test
    as a usage error (exit 4) in one line saying where to configure the model, instead of an
    error per test with a traceback (and "1 passed" for the unmarked ones, exit 1)."""
    pytester.makefile(".ini", pytest="[pytest]\n")
    pytester.makepyfile(
        "import pytest\n\ndef test_plain():\n    pass\n\n@pytest.mark.sadl\ndef test_marked():\n    pass\n"
    )
    res = pytester.runpytest_inprocess("--sadl-coverage", "-p", "no:randomly")
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str()
    text = res.stdout.str() + res.stderr.str()
    lines = [line for line in text.splitlines() if "no model configured" in line]
    assert len(lines) == 1 and "sadl_model" in lines[0] and "conftest.py" in lines[0], lines
    assert "Traceback" not in text and "UsageError" not in text


def test_no_sadl_coverage_switches_an_ini_default_off(pytester: pytest.Pytester):
    pytester.makefile(".ini", pytest="[pytest]\nsadl_coverage = true\nsadl_model = missing.keras\n")
    pytester.makepyfile("def test_ok():\n    pass\n")
    assert pytester.runpytest_inprocess().ret == pytest.ExitCode.USAGE_ERROR  # on, and the model is missing
    res = pytester.runpytest_inprocess("--no-sadl-coverage")
    res.assert_outcomes(passed=1)
    assert "sadl:" not in res.stdout.str()


def test_collect_only_measures_nothing(pytester: pytest.Pytester):
    (pytester.path / "model.keras").write_bytes(b"not loaded when only collecting")
    pytester.makefile(".ini", pytest="[pytest]\nsadl_model = model.keras\n")
    pytester.makepyfile("import pytest\n\n@pytest.mark.sadl\ndef test_marked():\n    pass\n")
    res = pytester.runpytest_inprocess(
        "--co", "--sadl-coverage", "--sadl-fail-under=nc:10", "--sadl-report=json:co.json"
    )
    assert res.ret == 0 and not (pytester.path / "co.json").exists()
    assert "FAIL" not in res.stdout.str()


def test_marker_is_registered_without_the_plugin_on(pytester: pytest.Pytester):
    pytester.makepyfile(
        textwrap.dedent(
            """
            import pytest

            @pytest.mark.sadl(group="g")
            def test_marked():
                pass
            """
        )
    )
    res = pytester.runpytest_inprocess("--strict-markers")
    res.assert_outcomes(passed=1)
    res = pytester.runpytest_inprocess("--markers")
    res.stdout.fnmatch_lines(["@pytest.mark.sadl(group='name'): record every input*"])


# ----------------------------------------------------------------------------- properties of the option parsers

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from pytest_sadl.config import REPORT_KINDS  # noqa: E402
from pytest_sadl.plugin.options import parse_report, parse_thresholds  # noqa: E402
from pytest_sadl.report.compare import parse_compare_fail  # noqa: E402

_spec_parts = st.one_of(
    st.text(max_size=12),
    st.tuples(
        st.sampled_from([*METRICS, "all", "LSC", "foo", ""]),
        st.sampled_from([":", "=", ""]),
        st.one_of(
            st.floats(allow_nan=True, allow_infinity=True).map(repr),
            st.integers(-(10**30), 10**30).map(str),
            st.text(max_size=5),
        ),
    ).map("".join),
)
_specs = st.lists(_spec_parts, max_size=5).map(",".join)


@settings(max_examples=300, deadline=None)
@given(spec=_specs)
def test_property_thresholds_are_percentages_or_a_usage_error(spec):
    """A coverage's threshold is a percentage in [0, 100]; a count criterion's (TKNP, NLC,
    CC) a finite number >= 0; anything else a one-line usage error."""
    from pytest_sadl.criteria.registry import COUNT

    try:
        parsed = parse_thresholds(spec)
    except pytest.UsageError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("--sadl-fail-under")
        return
    assert set(parsed) <= set(METRICS)
    assert all(0 <= v <= 100 for m, v in parsed.items() if m not in COUNT)
    assert all(0 <= v < float("inf") for m, v in parsed.items() if m in COUNT)


@settings(max_examples=300, deadline=None)
@given(spec=_specs)
def test_property_compare_limits_are_finite_drops_or_a_value_error(spec):
    try:
        parsed = parse_compare_fail(spec)
    except ValueError as exc:
        assert "\n" not in str(exc) and "--sadl-compare-fail" in str(exc)
        return
    assert parsed and set(parsed) <= set(METRICS)
    assert all(v <= 0 and v == v and v != float("-inf") for v in parsed.values())


@settings(max_examples=200, deadline=None)
@given(
    kind=st.one_of(st.sampled_from(REPORT_KINDS), st.text(max_size=8)),
    sep=st.sampled_from(["", ":"]),
    path=st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12),
)
def test_property_report_specs_parse_to_a_known_kind_or_a_usage_error(kind, sep, path):
    base = Path("/base")
    try:
        report = parse_report(f"{kind}{sep}{path}", base)
    except pytest.UsageError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("--sadl-report=")
        return
    assert report.kind in REPORT_KINDS
    assert (report.path is None) == report.kind.startswith("term")
    assert report.path is None or report.path.is_absolute()


def test_one_layer_list_parser_for_options_and_the_sadl_command():
    from pytest_sadl.cli.args import parse_layers as command_layers
    from pytest_sadl.config import parse_layers

    assert parse_layers(["a", " b,c ", "3", "-1"]) == ("a", "b", "c", 3, -1)
    assert parse_layers("+1, 1_0, ²") == ("+1", "1_0", "²")  # int() would take the first two; not indices
    assert parse_layers(None) is None and parse_layers([" , "]) is None
    # the sadl commands parse --sa-layers/--coverage-layers with the same rules
    assert command_layers(["dense_1,0", "+1", "²"]) == ("dense_1", 0, "+1", "²")


def test_the_documented_switch_quiets_tensorflows_start_up_lines():
    """The switch for a quiet CI log (docs/ci.md) holds on the TensorFlow this project locks,
    on any x86_64 CPU: TensorFlow prints its absl line on stderr whatever the CPU, and its
    "oneDNN custom operations are on" line where oneDNN's kernels are on (by default only on
    CPUs with AVX512_VNNI/AVX512_BF16/AMX, e.g. Intel Cascade Lake and newer; never by
    default on AMD). TF_CPP_MIN_LOG_LEVEL=3 does not silence the oneDNN line (forced on
    here, so the claim is checked on every CPU); both variables together silence them all."""
    code = "import keras, tensorflow as tf; print(float(tf.reduce_sum(tf.ones((2, 2)))))"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CPP", "TF_ENABLE_ONEDNN"))}
    env["KERAS_BACKEND"] = "tensorflow"

    def python(**extra: str) -> subprocess.CompletedProcess:
        run = subprocess.run
        return run([sys.executable, "-c", code], env={**env, **extra}, capture_output=True, text=True, timeout=300)

    loud = python()
    level_only = python(TF_CPP_MIN_LOG_LEVEL="3", TF_ENABLE_ONEDNN_OPTS="1")
    quiet = python(TF_CPP_MIN_LOG_LEVEL="3", TF_ENABLE_ONEDNN_OPTS="0")
    assert loud.stdout.strip() == level_only.stdout.strip() == quiet.stdout.strip() == "4.0"
    assert "absl::InitializeLog" in loud.stderr, "TensorFlow no longer prints the line docs/ci.md talks about"
    assert "oneDNN custom operations are on" in level_only.stderr, "docs/ci.md: the oneDNN line is no longer printed"
    assert quiet.stderr.strip() == "", quiet.stderr


def test_multimodal_surprise_metrics_end_to_end(project, digits):
    """--sadl-metrics=mlsc,mmdsc: MLSA and MMDSA set up with their options, the inputs'
    scores equal to the criteria on the profile's traces, the same on a second run (seeded)."""
    from pytest_sadl.criteria.mixture import MLSA
    from pytest_sadl.criteria.modes import MMDSA

    pytester = project(THRESHOLD_TESTS, extra="sadl_cache_dir = .sadl-cache\nsadl_mmdsa_modes = 3")
    pytester.makeconftest(KEEP_RECORDED)  # the reference scores the traces the run recorded
    args = ("--sadl-coverage", "--sadl-metrics=mlsc,mmdsc", "--sadl-mlsa-components=3", "--sadl-report=json:out.json")
    reports = ("--sadl-report=html:html", "--sadl-report=markdown:out.md", "--sadl-report=badge:badges")
    res = run(pytester, *args, *reports, "--sadl-report=term")
    assert res.ret == 0, res.stdout.str()
    data = results(pytester)
    assert list(data["metrics"]) == ["mlsc", "mmdsc"]
    assert re.search(r"^MLSC\s", res.stdout.str(), re.M) and re.search(r"^MMDSC\s", res.stdout.str(), re.M)
    assert "| MLSC |" in (pytester.path / "out.md").read_text()
    assert 'id="card-mmdsc"' in (pytester.path / "html" / "index.html").read_text()
    assert sorted(p.name for p in (pytester.path / "badges").glob("*.json")) == [
        "sadl-badge-mlsc.json",
        "sadl-badge-mmdsc.json",
    ]
    assert all(0 < data["metrics"][m]["value"] <= 1 for m in ("mlsc", "mmdsc"))
    profile = project_profile(pytester.path)
    sa, sa_pred = recorded(pytester.path)
    assert len(sa) == 60
    train, pred = profile.sa_traces, profile.sa_pred
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the singular modes' note: the run said it too
        mlsa = MLSA(train, pred, components=3)(sa, sa_pred)
        mmdsa = MMDSA(train, pred, modes=3)(sa, sa_pred)
    # The same traces, the same seeded fits in the same process: equal but for the float64
    # order of the run's scoring (a test's inputs at a time, here all 60 at once): 1e-12.
    np.testing.assert_allclose(data["inputs"]["mlsa"], mlsa, rtol=1e-12)
    np.testing.assert_allclose(data["inputs"]["mmdsa"], mmdsa, rtol=1e-12)
    assert run(pytester, *args).ret == 0
    assert results(pytester)["inputs"]["mlsa"] == data["inputs"]["mlsa"], "seeded: a second run repeats"
    # the held-out scores (default bounds) are stored under the options they depend on
    (folder,) = [p for p in (pytester.path / ".sadl-cache").glob("profile-*") if p.is_dir()]
    assert sorted(p.name.split(".")[1] for p in folder.glob("extra.heldout-*")) == [
        "heldout-mlsa-k3-1000",
        "heldout-mmdsa-m3-1000",
    ]


def test_the_profile_lines_come_after_pytests_header_and_before_the_tests(project):
    """The profile is built when the session starts, before pytest writes its header; its
    status lines are held and written with the header (the plugins' lines), and with -q,
    which has no header, before the first test's result: never above "test session starts"."""
    pytester = project(THRESHOLD_TESTS, extra="sadl_cache_dir = .sadl-cache")
    res = run(pytester, "--sadl-coverage")
    assert res.ret == 0, res.stdout.str()
    out = res.stdout.lines
    start = next(i for i, line in enumerate(out) if "test session starts" in line)
    tracing = next(i for i, line in enumerate(out) if line.startswith("sadl: tracing "))
    collected = next(i for i, line in enumerate(out) if line.startswith("collected "))
    assert start < tracing < collected, "\n".join(out[:20])
    shutil.rmtree(pytester.path / ".sadl-cache")
    res = run(pytester, "--sadl-coverage", "-q")
    out = res.stdout.lines
    tracing = next(i for i, line in enumerate(out) if line.startswith("sadl: tracing "))
    first_result = next(i for i, line in enumerate(out) if line.startswith("."))
    assert tracing < first_result and not any("test session starts" in line for line in out)


def test_a_progress_bar_is_drawn_on_a_terminal_and_erased_and_none_in_a_log(pytester: pytest.Pytester):
    """The tracing pass's bar: redrawn in place on a TTY (pytest's own terminal reporter on
    a stream that is a terminal) and erased at the end; on a log stream there is none."""
    import io

    from _pytest.terminal import TerminalReporter

    from pytest_sadl.plugin.status import Status

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    config = pytester.parseconfigure()
    for stream, expect_bar in ((Tty(), True), (io.StringIO(), False)):
        config.pluginmanager.unregister(name="terminalreporter")
        config.pluginmanager.register(TerminalReporter(config, stream), "terminalreporter")
        status = Status(config)
        status.header()  # the header is out: lines are written at once
        draw = status.progress()
        assert (draw is not None) == expect_bar
        if draw is not None:
            draw(0, 600)
            draw(600, 600)  # the end: always drawn, then erased
        status.say("writing /x/profile", False)
        text = stream.getvalue()
        assert text.endswith("sadl: writing /x/profile\n")
        if expect_bar:
            assert "sadl: [" in text and "600/600 inputs 100%" in text and "\r" in text
        else:
            assert "\r" not in text and "inputs" not in text


def test_the_end_of_a_session_says_what_it_is_doing_only_when_it_takes_a_while():
    """``Phases``: nothing for an end quicker than ``after`` seconds; past it, the step in
    progress at once (from the timer thread) and every later step as it starts."""
    import time

    from pytest_sadl.plugin.status import Phases

    said: list[str] = []
    with Phases(said.append, after=5.0) as phase:
        phase("setting LSA up")
        phase("scoring 10 recorded inputs")
    assert said == []
    with Phases(said.append, after=0.05) as phase:
        phase("setting LSA up")
        phase("setting DSA up")
        deadline = time.monotonic() + 5
        while not said and time.monotonic() < deadline:
            time.sleep(0.01)
        phase("scoring 10 recorded inputs")
    assert said == ["setting DSA up", "scoring 10 recorded inputs"]
    time.sleep(0.1)
    assert len(said) == 2  # the timer is gone


def test_dnn_tips_options_end_to_end(project, digits):
    """dnn-tip's options (issue 36) in one run: NBC/SNAC boundaries scaled by the training
    std (one from the ini file), LSA on 4 highest-variance neurons, DSA on a seeded
    subsample, MMDSA's modes by silhouette; the config records them, the scores and
    coverages equal the naive references on the profile's traces."""
    import keras

    pytester = project(THRESHOLD_TESTS, extra="sadl_cache_dir = .sadl-cache\nsadl_nbc_std = 0.5")
    pytester.makeconftest(KEEP_RECORDED)
    args = (
        "--sadl-coverage",
        "--sadl-metrics=lsc,dsc,nbc,snac,mmdsc",
        "--sadl-snac-std=1",
        "--sadl-lsa-max-features=4",
        "--sadl-dsa-subsample=300",
        "--sadl-dsa-seed=1",
        "--sadl-mmdsa-silhouette=3",
        "--sadl-report=json:out.json",
    )
    res = run(pytester, *args)
    assert res.ret == 0, res.stdout.str()
    data = results(pytester)
    config = data["config"]
    assert (config["nbc_std"], config["snac_std"], config["lsa_max_features"]) == (0.5, 1.0, 4)
    assert (config["dsa_subsample"], config["dsa_seed"], config["mmdsa_silhouette"]) == (300, 1, 3)
    profile = project_profile(pytester.path)
    sa, sa_pred = recorded(pytester.path)
    x, p = np.asarray(profile.sa_traces, np.float64), np.asarray(profile.sa_pred)
    np.testing.assert_allclose(data["inputs"]["lsa"], naive.lsa_max_features(x, p, sa, sa_pred, 4), rtol=1e-9)
    np.testing.assert_allclose(data["inputs"]["dsa"], naive.dsa_subsample(x, p, sa, sa_pred, 300, 1), rtol=1e-10)
    from pytest_sadl.criteria.modes import MMDSA

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mmdsa = MMDSA(x, p, silhouette=3)
        expected = mmdsa(sa, sa_pred)
    np.testing.assert_allclose(data["inputs"]["mmdsa"], expected, rtol=1e-12)
    model = keras.models.load_model(pytester.path / "model.keras")
    cov = profile.trace_model(model).traces(np.load(pytester.path / "inputs.npy")).coverage
    r = profile.ranges
    assert data["metrics"]["nbc"]["value"] == pytest.approx(naive.nbc_std(cov, r.low, r.high, r.std, 0.5), abs=1e-12)
    assert data["metrics"]["snac"]["value"] == pytest.approx(naive.snac_std(cov, r.high, r.std, 1.0), abs=1e-12)
