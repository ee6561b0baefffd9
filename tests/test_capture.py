"""Capture beyond one-input functional models: subclassed models and custom blocks, nested
models named by path, several inputs and outputs, sequence outputs, and the same numbers
on the TensorFlow and JAX backends. Every trace is checked against a naive computation:
the layers called one by one (or a sub-model), reduced by Python loops."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_sadl.errors import SadlLayerError, SadlModelError

pytestmark = pytest.mark.tf

keras = pytest.importorskip("keras")
from keras import layers  # noqa: E402

from pytest_sadl.capture import TraceModel  # noqa: E402
from pytest_sadl.criteria.neurons import fit_ranges, kmnc, nbc, nc, snac  # noqa: E402
from tests import _models, naive  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def loop_reduce(out: Any) -> np.ndarray:
    """One value per feature: the mean over every position (and time step) of the
    feature's channel, input by input, written as loops."""
    out = keras.ops.convert_to_numpy(out).astype(np.float64)  # a torch tensor may require grad
    if out.ndim == 2:
        return out
    res = np.zeros((out.shape[0], out.shape[-1]))
    for i in range(out.shape[0]):
        for f in range(out.shape[-1]):
            res[i, f] = out[i, ..., f].mean()
    return res


def test_subclassed_model_with_a_custom_block_equals_its_layers_called_one_by_one(digits: Any) -> None:
    keras.utils.set_random_seed(3)
    model = _models.build_kind("subclassed")
    x = digits.x_test[:40]
    model(x[:1])
    tm = TraceModel(model, extrema=True)
    # defaults follow the call order (the head is declared first on purpose)
    assert tm.coverage_layers == ["block/conv_a", "block/conv_b", "hidden", "probs"]
    assert tm.sa_layers == ["hidden"] and tm.classifier
    t = tm.traces(x, batch_size=16)
    a = model.block.conv_a(x)
    b = model.block.conv_b(a)
    h = model.hidden(model.flat(b))
    p = model.probs(h)
    for got, want in zip(t.coverage, (a, b, h, p), strict=True):
        np.testing.assert_allclose(got, loop_reduce(want), atol=1e-5)
    np.testing.assert_allclose(t.output, keras.ops.convert_to_numpy(p), atol=1e-5)
    # NC with the captured extrema equals the naive NC on the full maps
    full = [keras.ops.convert_to_numpy(v) for v in (a, b, h, p)]
    assert nc(t.coverage, 0.3, extrema=t.coverage_extrema) == pytest.approx(naive.neuron_coverage(full, 0.3))
    assert "call" not in model.block.conv_a.__dict__  # the tap is gone after the pass
    # a path or a unique name
    assert TraceModel(model, sa_layers=["conv_b"]).sa_layers == ["block/conv_b"]


def test_nested_model_layers_by_path(digits: Any) -> None:
    keras.utils.set_random_seed(4)
    model = _models.build_kind("nested")
    tm = TraceModel(model, sa_layers=["encoder/conv2"], coverage_layers=["encoder/conv1", "encoder/pool", 2])
    assert tm.coverage_layers == ["encoder/conv1", "encoder/pool", "probs"]
    assert TraceModel(model).coverage_layers == ["encoder/conv1", "encoder/conv2", "encoder/pool", "hidden", "probs"]
    x = digits.x_test[:30]
    t = tm.traces(x)
    encoder = model.get_layer("encoder")
    sub = keras.Model(encoder.inputs[0], encoder.get_layer("conv2").output)
    np.testing.assert_allclose(t.sa, loop_reduce(sub(x)), atol=1e-5)
    with pytest.raises(SadlLayerError, match=r"no layer 'conv9'.*encoder/conv1 \(Conv2D\)"):
        TraceModel(model, sa_layers=["conv9"])


def test_a_layer_that_runs_twice_has_no_single_trace() -> None:
    inp = keras.Input((4,))
    shared = layers.Dense(4, name="shared")
    out = layers.Dense(2, activation="softmax", name="out")(shared(shared(inp)))
    model = keras.Model(inp, out)
    with pytest.raises(SadlLayerError, match="'shared'.*runs 2 times"):
        TraceModel(model, sa_layers=["shared"])
    assert "shared" not in TraceModel(model, sa_layers=["out"]).coverage_layers


def test_two_inputs_and_two_outputs(digits: Any) -> None:
    keras.utils.set_random_seed(5)
    model = _models.build_kind("two_input")
    x = {"image": digits.x_test[:50], "aux": digits.x_test[:50].mean(axis=2)[..., 0]}
    tm = TraceModel(model)
    assert tm.input_names == ["aux", "image"] and tm.output_names == ["digit", "value"]
    assert tm.output_name == "digit" and tm.classifier and tm.sa_layers == ["hidden"]
    t = tm.traces(x, batch_size=16)
    listed = tm.traces([x["aux"], x["image"]])  # a list in model.inputs order
    np.testing.assert_allclose(listed.sa, t.sa, atol=1e-6)
    sub = keras.Model(model.inputs, model.get_layer("hidden").output)
    np.testing.assert_allclose(t.sa, keras.ops.convert_to_numpy(sub(x)), atol=1e-5)
    out, t2 = tm.call_and_trace(x, batch_size=20)
    ref = model.predict(x, verbose=0)
    assert isinstance(out, dict) and set(out) == {"digit", "value"}
    np.testing.assert_allclose(out["value"], ref["value"], atol=1e-5)
    np.testing.assert_array_equal(t2.pred, ref["digit"].argmax(1))
    value = TraceModel(model, output="value")
    assert not value.classifier and value.sa_layers == ["hidden"]
    np.testing.assert_allclose(value.traces(x).pred, ref["value"], atol=1e-5)
    assert TraceModel(model, output=1).output_name == "value"
    with pytest.raises(SadlModelError, match=r"sadl_output='nope'.*0:digit, 1:value"):
        TraceModel(model, output="nope")
    with pytest.raises(Exception, match=r"missing \['image'\]"):
        tm.traces({"aux": x["aux"]})


def test_a_recorded_call_with_more_arrays_than_inputs_fails_as_the_model_does(digits: Any) -> None:
    """``model([aux, image, extra])`` on a two-input model is Keras' ValueError. Recorded,
    the call once paired the input names with the first two arrays and returned an output
    (recording it), so under --sadl-coverage a test saw a call succeed that fails without."""
    from pytest_sadl.plugin.recorder import Recorder

    keras.utils.set_random_seed(5)
    model = _models.build_kind("two_input")
    aux, image = digits.x_test[:8].mean(axis=2)[..., 0], digits.x_test[:8]
    with pytest.raises(ValueError, match=r"expect(s|ed) 2"):
        model([aux, image, aux])
    with pytest.raises(ValueError):
        TraceModel(model, jit=False).call_tensors([aux, image, aux])
    recorder = Recorder(lambda m: TraceModel(m, jit=False, extrema=True))
    rec = recorder.record_for("t.py::test", 0, "g")
    with recorder.recording(rec, model):
        with pytest.raises(ValueError, match=r"expect(s|ed) 2"):
            model([aux, image, aux])
        model([aux, image])
    assert rec.n_inputs == 8  # the call with the right arrays only


def test_sequence_outputs_reduce_over_time_and_space_as_the_naive_loop() -> None:
    keras.utils.set_random_seed(6)
    model = _models.build_kind("chauffeur")
    _, _, x = _models.kind_data("chauffeur")
    x = x[:24]
    tm = TraceModel(model, extrema=True)
    assert tm.coverage_layers == ["td_conv", "td_pool", "lstm1", "lstm2", "steering"]  # td_flat only moves values
    assert not tm.classifier and tm.sa_layers == ["lstm2"]
    t = tm.traces(x, batch_size=10)
    full = [
        keras.ops.convert_to_numpy(keras.Model(model.inputs[0], model.get_layer(n).output)(x))
        for n in tm.coverage_layers
    ]
    assert full[0].ndim == 5 and full[2].ndim == 3  # (n, t, h, w, c) and (n, t, f)
    for got, want in zip(t.coverage, full, strict=True):
        np.testing.assert_allclose(got, loop_reduce(want), atol=1e-5)
    # NC scales the whole (time x space) output of each input, then averages per feature
    for threshold in (0.1, 0.4):
        assert nc(t.coverage, threshold, extrema=t.coverage_extrema) == pytest.approx(
            naive.neuron_coverage(full, threshold)
        )
    ranges = fit_ranges(t.coverage)
    lows, highs = naive.ranges(full)
    half = [f[:12] for f in full]
    reduced = [c[:12] for c in t.coverage]
    assert kmnc(reduced, ranges, k=7) == pytest.approx(naive.kmnc(half, lows, highs, 7))
    assert nbc(reduced, ranges) == pytest.approx(naive.nbc(half, lows, highs))
    assert snac(reduced, ranges) == pytest.approx(naive.snac(half, lows, highs))


# ----------------------------------------------------------------------------- backends

_SCRIPT = """
import json, sys
import numpy as np
sys.path.insert(0, {root!r})
from tests import _models
_models._subclassed_class()
from pytest_sadl.capture.model import load_model
from pytest_sadl.capture import TraceModel
from pytest_sadl.capture.data import load_training_data
from pytest_sadl.profile.build import model_fingerprint
import keras
out = {{}}
for name, path in {paths!r}.items():
    model = load_model(path)
    x = np.load({x!r})
    tm = TraceModel(model, extrema=True, jit=True)
    t = tm.traces(x, batch_size=64)
    np.savez({npz!r}.format(name), sa=t.sa, pred=t.pred, output=t.output, *t.coverage)
    out[name] = {{"model": model_fingerprint(model), "data": load_training_data(x).fingerprint(),
                 "sa_layers": tm.sa_layers, "coverage_layers": tm.coverage_layers, "backend": keras.backend.backend()}}
print("RESULT" + json.dumps(out))
"""


@pytest.mark.parametrize("other", ["jax", "torch"])
def test_the_other_backend_gives_the_same_traces_and_fingerprints(
    conv_model_path: Path, dense_model_path: Path, kind_model_path: Any, digits: Any, tmp_path: Path, other: str
) -> None:
    """The same saved models and inputs on TensorFlow (this process) and, in a
    subprocess, JAX or torch: traces equal to 1e-5, the same classes, the same layers and
    the same model and data fingerprints (so the same cached profile)."""
    from pytest_sadl.capture.data import load_training_data
    from pytest_sadl.capture.model import load_model
    from pytest_sadl.profile.build import model_fingerprint

    _models._subclassed_class()
    if keras.backend.backend() != "tensorflow":  # run once, from the TensorFlow pass (scripts/test.sh)
        pytest.skip("the backends are compared from the TensorFlow pass")
    pytest.importorskip(other)
    x = digits.x_test[:100]
    np.save(tmp_path / "x.npy", x)
    paths = {"conv": str(conv_model_path), "subclassed": str(kind_model_path("subclassed"))}
    if other == "torch":
        paths["dense"] = str(dense_model_path)
    script = _SCRIPT.format(root=str(ROOT), paths=paths, x=str(tmp_path / "x.npy"), npz=str(tmp_path / "{}.npz"))
    env = dict(os.environ, KERAS_BACKEND=other, TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    theirs = json.loads(run.stdout.split("RESULT", 1)[1])
    for name, path in paths.items():
        assert theirs[name]["backend"] == other
        model = load_model(path)
        tm = TraceModel(model, extrema=True, jit=True)
        t = tm.traces(x, batch_size=64)
        with np.load(tmp_path / f"{name}.npz") as other_t:
            np.testing.assert_allclose(other_t["sa"], t.sa, atol=1e-5, rtol=1e-5)
            np.testing.assert_allclose(other_t["output"], t.output, atol=1e-5, rtol=1e-5)
            np.testing.assert_array_equal(other_t["pred"], t.pred)
            for i, cov in enumerate(t.coverage):
                np.testing.assert_allclose(other_t[f"arr_{i}"], cov, atol=1e-5, rtol=1e-5)
        assert theirs[name]["sa_layers"] == tm.sa_layers and theirs[name]["coverage_layers"] == tm.coverage_layers
        assert theirs[name]["model"] == model_fingerprint(model)
        assert theirs[name]["data"] == load_training_data(np.load(tmp_path / "x.npy")).fingerprint()


def test_calls_on_traced_tensors_are_not_recordable(conv_model: Any, digits: Any) -> None:
    """``model(x)`` inside ``tf.function`` or ``jax.jit``/``jax.grad`` has no values to record."""
    tm = TraceModel(conv_model)
    x = digits.x_test[:2]
    assert tm.unrecordable(x) is None
    seen: list[Any] = []

    def body(t: Any) -> Any:
        seen.append(tm.unrecordable(t))
        return t

    if keras.backend.backend() == "jax":
        import jax

        jax.jit(body)(x)
    else:
        import tensorflow as tf

        tf.function(body)(x)
    assert seen and "symbolic" in seen[0]
    out, t = tm.call_tensors(x)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(out), conv_model.predict(x, verbose=0), atol=1e-5)
    assert len(t) == 2


def test_sadl_profile_layers_lists_paths_shapes_and_defaults(
    kind_model_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_sadl.cli.main import main

    _models._subclassed_class()
    assert main(["profile", "layers", "--model", str(kind_model_path("subclassed"))]) == 0
    out = capsys.readouterr().out
    assert "outputs probs (measured: probs, classifier)" in out
    assert any(
        line.split()[:2] == ["block/conv_b", "Conv2D"] and "(n, 6, 6, 8)" in line and "coverage default" in line
        for line in out.splitlines()
    )
    assert any(line.split()[0] == "hidden" and "SA default" in line for line in out.splitlines())
    assert main(["profile", "layers", "--model", str(kind_model_path("two_input")), "--output", "nope"]) == 2
    assert "sadl_output='nope'" in capsys.readouterr().err
