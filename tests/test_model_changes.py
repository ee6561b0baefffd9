"""The model the profile describes is the model that is measured (issue 15).

A marked test that trains the model (``fit`` on one batch) changes the weights every later
input is traced with; those inputs are left out of every metric and listed apart, with one
warning naming the test where the change was first seen. Real Keras models, real ``fit``,
a real pytest-xdist run.
"""

from __future__ import annotations

import numpy as np
import pytest

try:
    from tests.test_plugin import _warm_imports, project, results, run  # noqa: F401  (fixtures)
except ImportError:  # pragma: no cover - tests/ itself on sys.path
    from test_plugin import _warm_imports, project, results, run  # type: ignore[no-redef]  # noqa: F401

pytestmark = pytest.mark.tf

CHANGING_TESTS = """
import os

import numpy as np
import pytest

X = np.load("inputs.npy")
MODE = os.environ.get("SADL_MODE", "fit")


@pytest.mark.sadl(group="before")
def test_1_before(sadl_model):
    sadl_model.predict(X[:30], verbose=0)


@pytest.mark.sadl(group="fit")
def test_2_fit(sadl_model):
    if MODE == "fit":  # one batch of training: the weights every later input meets change
        sadl_model.fit(X[:8], np.load("labels.npy")[:8], batch_size=8, epochs=1, verbose=0)
    if MODE != "reference":
        sadl_model.predict(X[30:40], verbose=0)


@pytest.mark.sadl(group="after")
def test_3_after(sadl_model):
    if MODE != "reference":
        sadl_model.predict(X[40:60], verbose=0)
"""

OTHER_TESTS = """
import numpy as np
import pytest

X = np.load("inputs.npy")


@pytest.mark.sadl(group="other")
def test_other(sadl_model):
    sadl_model.predict(X[50:58], verbose=0)
"""

REPORTS = (
    "--sadl-coverage",
    "--sadl-report=json:out.json",
    "--sadl-report=markdown:out.md",
    "--sadl-report=html:out.html",
    "--sadl-report=term",
)
SEEN = (
    "warning: pytest-sadl: the model changed during the session (its weights or layers: fit, set_weights, "
    "load_weights, a new layer), first seen at the end of test_project.py::test_2_fit; the inputs of that "
    "test and of every later one were measured on another model than the profile's, so they are left out "
    "of every metric and listed apart"
)


def _metrics(data: dict) -> dict:
    return {name: (m["value"], m["covered"], m.get("count")) for name, m in data["metrics"].items()}


def test_inputs_after_a_fit_are_left_out_and_listed_apart_serially_and_under_xdist(project, monkeypatch):
    pytester = project(CHANGING_TESTS)
    pytester.makepyfile(test_other=OTHER_TESTS)

    monkeypatch.setenv("SADL_MODE", "reference")  # the run that never had the later inputs
    res = run(pytester, *REPORTS)
    assert res.ret == 0, res.stdout.str()
    reference = results(pytester)
    assert reference["outcome"]["stale"] == [] and "model changed" not in res.stdout.str()

    monkeypatch.setenv("SADL_MODE", "unchanged")  # the same inputs on an unchanged model: no warning
    res = run(pytester, *REPORTS)
    assert res.ret == 0 and "model changed" not in res.stdout.str(), res.stdout.str()
    assert results(pytester)["outcome"]["stale"] == [] and results(pytester)["metrics"]["lsc"]["count"] == 68

    monkeypatch.setenv("SADL_MODE", "fit")
    # serially, and with the fitting file on one worker and the other file on the other
    for args in (
        ("-p", "no:benchmark", "-W", "error::pytest_sadl.errors.SadlRecordingWarning"),
        ("-n", "2", "--dist", "loadfile"),
    ):
        res = run(pytester, *REPORTS, *args)
        out = res.stdout.str()
        assert res.ret == 0, out
        assert " ".join(out.split()).count(SEEN) == 1, out  # the terminal wraps it at its width
        data = results(pytester)
        assert data["outcome"]["stale"] == [
            {"nodeid": "test_project.py::test_2_fit", "group": "fit", "outcome": "passed", "inputs": 10},
            {"nodeid": "test_project.py::test_3_after", "group": "after", "outcome": "passed", "inputs": 20},
        ], args
        assert SEEN.removeprefix("warning: ") in data["outcome"]["warnings"]
        # every number is that of the run in which those inputs were never fed
        assert _metrics(data) == _metrics(reference), args
        assert [(g["name"], g["inputs"]) for g in data["groups"]] == [("other", 8), ("before", 30)]
        assert len(data["inputs"]["test"]) == 38
        assert "left out (model changed): test_project.py::test_3_after, 20 inputs" in out
        md = (pytester.path / "out.md").read_text()
        assert "**The model changed during the session:** the inputs of 2 tests" in md
        assert (
            "> - test\\_project.py::test\\_3\\_after: 20 inputs" in md
            or "> - test_project.py::test_3_after: 20 inputs" in md
        )
        html = (pytester.path / "out.html" / "index.html").read_text()
        assert 'id="stale"' in html and "<code>test_project.py::test_2_fit</code>: 10 inputs" in html


def test_the_digest_sees_fit_set_weights_load_weights_and_a_new_layer_not_predict(dense_model, digits, tmp_path):
    import keras

    from pytest_sadl.capture.identity import model_digest

    model = keras.models.clone_model(dense_model)
    model.set_weights(dense_model.get_weights())
    model.compile("sgd", "sparse_categorical_crossentropy")
    original = model_digest(model)
    model.predict(digits.x_test[:16], verbose=0)
    model(digits.x_test[:4], training=False)
    assert model_digest(model) == original  # measuring does not change it
    weights = model.get_weights()
    model.save_weights(tmp_path / "w.weights.h5")

    model.fit(digits.x_train[:8], digits.y_train[:8], epochs=1, verbose=0)
    assert model_digest(model) != original
    model.load_weights(tmp_path / "w.weights.h5")
    assert model_digest(model) == original  # the same weights again

    swapped = [w.copy() for w in weights]
    swapped[0][[0, 1]] = swapped[0][[1, 0]]  # two rows of the first kernel swapped: same sum
    model.set_weights(swapped)
    assert model_digest(model) != original
    model.set_weights(weights)
    assert model_digest(model) == original

    seq = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    before = model_digest(seq)
    seq.add(keras.layers.Dense(2))
    assert model_digest(seq) != before

    bn = keras.Sequential([keras.Input((4,)), keras.layers.BatchNormalization()])
    before = model_digest(bn)
    x = np.arange(8, dtype="float32").reshape(2, 4)
    bn(x, training=False)
    assert model_digest(bn) == before
    bn(x, training=True)  # moves the moving mean and variance: another model now
    assert model_digest(bn) != before


@pytest.mark.filterwarnings("ignore::pytest_sadl.errors.SadlRecordingWarning")
def test_the_recorder_flags_every_record_from_the_first_change_on_and_survives_an_unreadable_model():
    from pytest_sadl.plugin.recorder import Recorder
    from pytest_sadl.records import Batch, from_bytes, to_bytes

    weights = {"w": 1}
    calls = []

    def digest(model):
        calls.append(1)
        if model.get("broken"):
            raise RuntimeError("no weights here")
        return str(model["w"])

    def record(rec, name):
        r = rec.record_for(name, 0, "g")
        r.batches.append(Batch(np.zeros((2, 3), np.float32), [], np.zeros(2, np.int64)))
        return r

    rec = Recorder(lambda m: None, digest)
    rec.bind(weights)
    first = record(rec, "t1")
    rec.check_model(weights, first)
    weights["w"] = 2  # changed during t2
    second, third = record(rec, "t2"), record(rec, "t3")
    rec.check_model(weights, second)
    weights["w"] = 1  # changed back: t3 still ran after a change
    n = len(calls)
    rec.check_model(weights, third)
    assert (first.stale, second.stale, third.stale) == (False, True, True)
    assert len(calls) == n, "no digest after the first change"
    assert rec.changed_in == "t2" and len(rec.messages) == 1 and "first seen at the end of t2" in rec.messages[0]
    empty = rec.record_for("t4", 0, "g")
    rec.check_model(weights, empty)
    assert not empty.stale  # nothing recorded: nothing to leave out
    (back,) = from_bytes(to_bytes([second]))
    assert back.stale  # travels through the xdist transport

    broken = Recorder(lambda m: None, digest)
    broken.bind({"broken": True})
    r = record(broken, "t1")
    broken.check_model({"broken": True}, r)
    assert not r.stale and "changes to the model during the session are not detected" in broken.messages[0]


def test_the_digest_of_a_native_torch_module_sees_training_and_batch_norm_statistics():
    torch = pytest.importorskip("torch")
    from pytest_sadl.capture.identity import model_digest

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).eval()
    before = model_digest(module)
    with torch.no_grad():
        module(torch.zeros(2, 4))  # inference: nothing moves
    assert model_digest(module) == before
    module.train()(torch.randn(5, 4))  # the batch-norm buffers move
    assert model_digest(module) != before
    module.to(torch.bfloat16)  # a dtype NumPy lacks is still digested
    assert model_digest(module) != before
