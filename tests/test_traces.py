"""Traces of real Keras models against a manual per-layer computation; layer resolution,
model kinds, bad inputs; and model loading (pytest_sadl.capture.model)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_sadl.errors import SadlDataError, SadlLayerError, SadlModelError, SadlModelWarning

pytestmark = pytest.mark.tf

keras = pytest.importorskip("keras")
from keras import layers  # noqa: E402

from pytest_sadl.capture import (  # noqa: E402
    TraceModel,
    Traces,
    default_coverage_layers,
    default_sa_layers,
    is_classifier,
    resolve_layers,
)
from pytest_sadl.capture.forward import has_accelerator  # noqa: E402
from pytest_sadl.capture.model import load_model  # noqa: E402

tf_backend = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="TensorFlow backend only (GradientTape, XLA)"
)


def manual_layer(model: Any, name: str, x: np.ndarray) -> np.ndarray:
    """The layer's output computed alone (its own sub-model), reduced in NumPy by the
    spatial mean per channel: the naive reference the traces must equal."""
    sub = keras.Model(model.inputs, model.get_layer(name).output)
    out = np.asarray(sub.predict(x, batch_size=64, verbose=0), dtype=np.float64)
    if out.ndim > 2:
        out = out.mean(axis=tuple(range(1, out.ndim - 1)))
    return out


MODELS = ["dense_model", "conv_model", "functional_model", "regression_model"]


@pytest.mark.parametrize("fixture", MODELS)
def test_traces_equal_manual_per_layer(fixture: str, request: pytest.FixtureRequest, digits: Any) -> None:
    model = request.getfixturevalue(fixture)
    x = digits.x_test[:200]
    tm = TraceModel(model)
    t = tm.traces(x, batch_size=64)
    assert isinstance(t, Traces) and len(t) == len(x)
    for name, got in zip(tm.coverage_layers, t.coverage, strict=True):
        want = manual_layer(model, name, x)
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=name)
    want_sa = np.concatenate([manual_layer(model, n, x) for n in tm.sa_layers], axis=1)
    np.testing.assert_allclose(t.sa, want_sa, rtol=1e-5, atol=1e-5)
    ref = model.predict(x, verbose=0)
    np.testing.assert_allclose(t.output, ref, rtol=1e-5, atol=1e-5)
    if tm.classifier:
        assert t.pred.dtype == np.int64 and t.pred.shape == (len(x),)
        np.testing.assert_array_equal(t.pred, t.output.argmax(axis=1))
    else:
        assert t.pred.shape == (len(x), 1) and t.pred.dtype.kind == "f"
        np.testing.assert_allclose(t.pred, ref, rtol=1e-5, atol=1e-5)


def test_extrema_equal_manual_min_max(conv_model: Any, digits: Any) -> None:
    x = digits.x_test[:45]
    tm = TraceModel(conv_model, extrema=True)
    t = tm.traces(x, batch_size=16)
    assert t.coverage_extrema is not None and len(t.coverage_extrema) == len(tm.coverage_layers)
    for name, ext in zip(tm.coverage_layers, t.coverage_extrema, strict=True):
        full = keras.Model(conv_model.inputs, conv_model.get_layer(name).output).predict(x, verbose=0)
        if full.ndim <= 2:
            assert ext is None
            continue
        lo, hi = ext
        flat = full.reshape(len(x), -1)
        np.testing.assert_allclose(lo, flat.min(axis=1), atol=1e-5)
        np.testing.assert_allclose(hi, flat.max(axis=1), atol=1e-5)
    joined = Traces.concatenate([tm.traces(x[:20]), tm.traces(x[20:])])
    np.testing.assert_allclose(joined.coverage_extrema[0][1], t.coverage_extrema[0][1], atol=1e-5)
    assert TraceModel(conv_model).traces(x).coverage_extrema is None


def test_conv_layers_are_reduced_and_sa_layers_concatenate(conv_model: Any, digits: Any) -> None:
    tm = TraceModel(conv_model, sa_layers=["conv2", "hidden"], coverage_layers=["conv1", "pool1"])
    t = tm.traces(digits.x_test[:50])
    assert tm.sa_sizes == [16, 32] and t.sa.shape == (50, 48)
    assert [a.shape for a in t.coverage] == [(50, 8), (50, 8)]
    np.testing.assert_allclose(t.sa[:, :16], manual_layer(conv_model, "conv2", digits.x_test[:50]), atol=1e-5)
    np.testing.assert_allclose(t.layer("pool1"), manual_layer(conv_model, "pool1", digits.x_test[:50]), atol=1e-5)
    with pytest.raises(SadlLayerError, match="not a coverage layer"):
        t.layer("hidden")


def test_defaults(conv_model: Any, functional_model: Any, dense_model: Any, regression_model: Any) -> None:
    assert default_coverage_layers(conv_model) == ["conv1", "pool1", "conv2", "hidden", "probs"]
    assert default_sa_layers(conv_model) == ["hidden"]
    assert default_coverage_layers(functional_model) == ["fconv", "gap", "fdense", "fhidden", "fprobs"]
    assert default_sa_layers(functional_model) == ["fhidden"]
    assert default_sa_layers(dense_model) == ["hidden2"]
    assert default_sa_layers(regression_model) == ["rhidden"]
    assert is_classifier(conv_model) and not is_classifier(regression_model)


def test_default_sa_skips_a_bare_output_activation() -> None:
    inp = keras.Input((4,))
    h = layers.Dense(5, activation="relu", name="h")(inp)
    logits = layers.Dense(3, name="logits")(h)
    out = layers.Activation("softmax", name="act")(logits)
    model = keras.Model(inp, out)
    assert default_sa_layers(model) == ["h"]
    assert default_coverage_layers(model) == ["h", "act"]  # the logits' neurons, after their softmax


def _chains() -> Any:
    """Conv -> BatchNorm -> ReLU, a linear bottleneck (Conv -> BatchNorm) into an Add
    activated by an Activation layer, a Dense with its own activation then a
    BatchNormalization, and logits activated by a Softmax layer."""
    x = keras.Input((8, 8, 3))
    r = layers.ReLU(name="r")(layers.BatchNormalization(name="bn")(layers.Conv2D(4, 3, name="c")(x)))
    b2 = layers.BatchNormalization(name="bn2")(layers.Conv2D(4, 1, name="c2")(r))
    r2 = layers.Activation("relu", name="r2")(layers.Add(name="add")([r, b2]))
    d = layers.Dense(5, activation="relu", name="d")(layers.GlobalAveragePooling2D(name="gap")(r2))
    out = layers.Softmax(name="sm")(layers.Dense(3, name="logits")(layers.BatchNormalization(name="bn3")(d)))
    return keras.Model(x, out)


def test_each_neuron_is_measured_once_after_its_activation() -> None:
    """A layer whose output is not yet activated (a linear Conv/Dense, a BatchNormalization,
    an Add) and goes to an activation or BatchNormalization layer is measured after it, as
    Dense(activation="relu") is: a chain once, at its end; an activated layer is kept."""
    model = _chains()
    tm = TraceModel(model)
    assert tm.coverage_layers == ["r", "bn2", "r2", "gap", "d", "bn3", "sm"]
    assert tm.sa_layers == ["bn3"]  # as before the rule: the last hidden layer before the logits
    x = np.random.default_rng(0).normal(size=(6, 8, 8, 3)).astype("float32")
    t = tm.traces(x)
    for name in ("r", "r2", "bn3", "sm"):
        np.testing.assert_allclose(t.layer(name), manual_layer(model, name, x), atol=1e-5)
    assert (t.layer("r") >= 0).all()  # after the ReLU
    # named, a layer of a chain is measured where it is: the Conv before its BatchNorm
    pre = TraceModel(model, coverage_layers=["c", "bn"])
    np.testing.assert_allclose(pre.traces(x).layer("c"), manual_layer(model, "c", x), atol=1e-5)
    assert (pre.traces(x).layer("c") < 0).any()
    # the same on a Sequential model and a subclassed one (the probe sees the chain run)
    seq = keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            layers.Conv2D(4, 3, name="c"),
            layers.BatchNormalization(name="bn"),
            layers.LeakyReLU(name="lrelu"),
            layers.Flatten(name="flat"),
            layers.Dense(3, name="logits"),
            layers.Activation("softmax", name="act"),
        ]
    )
    assert default_coverage_layers(seq) == ["lrelu", "act"] and default_sa_layers(seq) == ["lrelu"]

    class Block(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.c = layers.Conv2D(4, 3, name="c")
            self.bn = layers.BatchNormalization(name="bn")
            self.r = layers.ReLU(name="r")
            self.pool = layers.GlobalAveragePooling2D(name="pool")
            self.out = layers.Dense(3, activation="softmax", name="out")

        def call(self, x: Any) -> Any:
            c = self.c(x)
            return self.out(self.pool(self.r(self.bn(c)))) + 0.0 * keras.ops.mean(c)

    sub = Block()
    sub(np.zeros((1, 8, 8, 3), "float32"))
    assert default_coverage_layers(sub) == ["r", "pool", "out"]


def test_the_defaults_do_not_depend_on_how_the_model_is_built() -> None:
    """A Dropout between a layer and its activation hands its input back (the probe of a
    Sequential model sees one tensor, a functional graph two): no fold across it either
    way; a linear Activation is a layer of the chain (Dense -> linear -> BatchNorm once)."""

    def stack() -> list[Any]:
        return [
            layers.Dense(8, name="h"),
            layers.Dropout(0.5, name="drop"),
            layers.ReLU(name="r"),
            layers.Dense(6, name="h2"),
            layers.Activation("linear", name="lin"),
            layers.BatchNormalization(name="bn"),
            layers.Dense(3, activation="softmax", name="out"),
        ]

    seq = keras.Sequential([keras.Input((10,)), *stack()])
    x = keras.Input((10,))
    y = x
    for layer in stack():
        y = layer(y)
    functional = keras.Model(x, y)
    assert default_coverage_layers(seq) == default_coverage_layers(functional) == ["h", "r", "bn", "out"]


def test_default_sa_skips_the_logits_behind_a_reshape_or_a_block() -> None:
    """An output activation reached through a pass-through layer (MobileNet's head:
    Conv2D logits -> Reshape -> Activation) or a block of the user's own: the logits are
    the output's, not the SA layer."""
    x = keras.Input((8, 8, 3))
    g = layers.GlobalAveragePooling2D(keepdims=True, name="gap")(layers.Conv2D(4, 3, activation="relu", name="c")(x))
    logits = layers.Reshape((3,), name="reshape")(layers.Conv2D(3, 1, name="conv_preds")(g))
    assert default_sa_layers(keras.Model(x, layers.Activation("softmax", name="pred")(logits))) == ["gap"]

    class Head(layers.Layer):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.dense = layers.Dense(3, name="logits")

        def call(self, x: Any) -> Any:
            return self.dense(x) / 2.0

    i = keras.Input((6,))
    h = layers.Dense(5, activation="relu", name="hidden")(i)
    assert default_sa_layers(keras.Model(i, layers.Softmax(name="sm")(Head(name="head")(h)))) == ["hidden"]
    mobilenet = keras.applications.MobileNet(weights=None, input_shape=(32, 32, 3), alpha=0.25, classes=3)
    (sa,) = default_sa_layers(mobilenet)  # its global_average_pooling2d (the name is numbered per process)
    assert isinstance(mobilenet.get_layer(sa), layers.GlobalAveragePooling2D)


def test_a_batch_norm_over_another_axis_is_no_fold() -> None:
    """A BatchNormalization over the rows of a channels-last map is no affine map of each
    channel: the convolution before it keeps its own trace."""
    x = keras.Input((6, 6, 3))
    c = layers.Conv2D(4, 3, padding="same", name="c")(x)
    b = layers.BatchNormalization(axis=1, name="bn_rows")(c)
    out = layers.Dense(2, activation="softmax", name="out")(layers.GlobalAveragePooling2D(name="gap")(b))
    assert default_coverage_layers(keras.Model(x, out)) == ["c", "bn_rows", "gap", "out"]


def test_an_output_or_an_activated_layer_is_not_folded() -> None:
    """A layer that gives a model output keeps its own trace (it is what the model
    returns), and so does one already after a non-linear activation."""
    x = keras.Input((4,))
    logits = layers.Dense(3, name="logits")(layers.Dense(5, activation="tanh", name="h")(x))
    probs = layers.Softmax(name="sm")(logits)
    model = keras.Model(x, [probs, logits])
    assert TraceModel(model).coverage_layers == ["h", "logits", "sm"]
    activated = keras.Sequential(
        [keras.Input((4,)), layers.Dense(5, activation="relu", name="h"), layers.BatchNormalization(name="bn")]
        + [layers.Dense(2, activation="softmax", name="out")]
    )
    assert default_coverage_layers(activated) == ["h", "bn", "out"]


def test_is_classifier_rule() -> None:
    def head(units: int, activation: str | None) -> Any:
        return keras.Sequential([keras.Input((4,)), layers.Dense(3), layers.Dense(units, activation=activation)])

    assert is_classifier(head(10, None))  # logits
    assert is_classifier(head(1, "sigmoid"))
    assert not is_classifier(head(1, None))
    reg = head(3, None)
    reg.compile(loss="mse")
    assert not is_classifier(reg)  # the compiled loss decides


def test_sigmoid_binary_predictions(digits: Any) -> None:
    model = keras.Sequential(
        [keras.Input((8, 8, 1)), layers.Flatten(), layers.Dense(4, name="h"), layers.Dense(1, activation="sigmoid")]
    )
    t = TraceModel(model).traces(digits.x_test[:40])
    np.testing.assert_array_equal(t.pred, (t.output[:, 0] > 0.5).astype(np.int64))


def test_layers_by_name_and_index(conv_model: Any) -> None:
    names = [layer.name for layer in conv_model.layers]
    assert resolve_layers(conv_model, [0, -3, "hidden", "hidden"], purpose="x") == [names[0], names[-3], "hidden"]
    assert resolve_layers(conv_model, "3", purpose="x") == [names[3]]
    assert resolve_layers(conv_model, None, purpose="x") == []
    with pytest.raises(SadlLayerError) as err:
        resolve_layers(conv_model, ["hiden"], purpose="--sadl-layers")
    msg = str(err.value)
    assert "--sadl-layers" in msg and "'hiden'" in msg and "hidden" in msg and "conv1" in msg
    with pytest.raises(SadlLayerError, match="out of range"):
        resolve_layers(conv_model, [99], purpose="x")
    assert issubclass(SadlLayerError, ValueError)
    with pytest.raises(SadlLayerError, match="no layer 'nope'"):
        TraceModel(conv_model, sa_layers=["nope"])


def test_batching_and_call_and_trace_agree(conv_model: Any, digits: Any) -> None:
    tm = TraceModel(conv_model)
    x = digits.x_test[:130]
    a = tm.traces(x, batch_size=7)
    b = tm.traces(x, batch_size=1000)
    np.testing.assert_allclose(a.sa, b.sa, atol=1e-5)
    for u, v in zip(a.coverage, b.coverage, strict=True):
        np.testing.assert_allclose(u, v, atol=1e-5)
    out, c = tm.call_and_trace(x, verbose=0)
    np.testing.assert_allclose(out, conv_model.predict(x, verbose=0), atol=1e-5)
    assert out is c.output
    np.testing.assert_allclose(c.sa, a.sa, atol=1e-5)
    out_t, _ = tm.call_and_trace(keras.ops.convert_to_tensor(x), batch_size=50)
    np.testing.assert_allclose(out_t, out, atol=1e-5)
    with pytest.raises(TypeError, match="unexpected"):
        tm.call_and_trace(x, bogus=1)
    joined = Traces.concatenate([tm.traces(x[:60]), tm.traces(x[60:])])
    np.testing.assert_allclose(joined.sa, a.sa, atol=1e-5)


@tf_backend
def test_call_tensors_keeps_gradients(conv_model: Any, digits: Any) -> None:
    import tensorflow as tf

    tm = TraceModel(conv_model)
    x = digits.x_test[:20]
    a = tm.traces(x)
    out = conv_model.predict(x, verbose=0)
    xt = tf.constant(x[:20])
    with tf.GradientTape() as tape:
        tape.watch(xt)
        out_tensor, tt = tm.call_tensors(xt)
        loss = tf.reduce_sum(out_tensor[:, 3])
    grad = tape.gradient(loss, xt)
    assert grad is not None and grad.shape == xt.shape and float(tf.reduce_max(tf.abs(grad))) > 0
    np.testing.assert_allclose(out_tensor.numpy(), out[:20], atol=1e-5)
    np.testing.assert_allclose(tt.sa, a.sa[:20], atol=1e-5)
    np.testing.assert_array_equal(tt.pred, a.pred[:20])


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="Keras on the torch backend only")
def test_call_tensors_keeps_gradients_on_torch(conv_model: Any, digits: Any) -> None:
    """Keras on torch: ``model(x)`` recorded through ``call_tensors`` returns a tensor
    that autograd differentiates back to the input, as a plain ``model(x)`` does."""
    import torch

    tm = TraceModel(conv_model)
    x = digits.x_test[:20]
    a = tm.traces(x)
    xt = torch.tensor(x, requires_grad=True)
    out_tensor, tt = tm.call_tensors(xt)
    out_tensor[:, 3].sum().backward()
    assert xt.grad is not None and xt.grad.shape == xt.shape and float(xt.grad.abs().max()) > 0
    np.testing.assert_allclose(out_tensor.detach().cpu().numpy(), conv_model.predict(x, verbose=0), atol=1e-5)
    np.testing.assert_allclose(tt.sa, a.sa, atol=1e-5)
    np.testing.assert_array_equal(tt.pred, a.pred)


def test_call_tensors_matches_the_eager_pass_and_compiles_a_few_times(conv_model: Any, digits: Any) -> None:
    """Many ``model(x)`` calls of different batch sizes: each output and trace equals
    the model's own eager pass with the layers tapped, and the compiled pass is traced
    a bounded number of times (no retrace per call, no retracing-warning flood)."""
    from pytest_sadl.capture.forward import tapped, to_numpy

    tm = TraceModel(conv_model, sa_layers=["hidden"])
    before = tm.compiled_passes  # a pass shared with an earlier trace model of the fixture
    taps = [conv_model.get_layer(p) for p in tm.coverage_layers]
    sizes = [1, 2, 3, 5, 7, 8, 13, 20, 20, 31, 32, 33, 50, 64, 3, 20, 1] * 3
    for n in sizes:
        x = digits.x_test[:n]
        out, t = tm.call_tensors(x)
        seen: dict[int, Any] = {}
        with tapped(taps, lambda i, o, seen=seen: seen.__setitem__(i, to_numpy(o))):
            plain = to_numpy(conv_model(x, training=False))
        assert to_numpy(out).shape == plain.shape == (n, 10) and len(t) == n
        # the compiled pass runs other batch shapes than the eager call (JAX pads 33 to 64), so
        # its kernels may sum in another order: float32 agrees to ulps of the values (~9 here)
        close = {"rtol": 1e-5, "atol": 1e-6}
        np.testing.assert_allclose(to_numpy(out), plain, **close)
        for i, cov in enumerate(t.coverage):
            ref = seen[i].mean(axis=tuple(range(1, seen[i].ndim - 1))) if seen[i].ndim > 2 else seen[i]
            np.testing.assert_allclose(cov, ref, **close)
        np.testing.assert_allclose(t.sa, seen[tm.coverage_layers.index("hidden")], **close)
    # TensorFlow: one trace, then one with the batch size relaxed; JAX: one per power of two
    # to 64; torch: the eager call, nothing compiled
    bounds = {"tensorflow": (1, 2), "jax": (1, 7), "torch": (0, 0)}[keras.backend.backend()]
    new = tm.compiled_passes - before
    assert (0 if before else bounds[0]) <= new <= bounds[1]  # a pass traced before may need none


@tf_backend
def test_call_tensors_runs_eagerly_a_model_that_cannot_be_traced(digits: Any) -> None:
    """A layer whose Python only runs eagerly (the symbolic probe passes, a
    ``tf.function`` does not): ``model(x)`` is still recorded, by the eager call."""
    import tensorflow as tf
    from keras.src.backend.common.symbolic_scope import in_symbolic_scope

    class EagerOnly(layers.Layer):
        def call(self, x: Any) -> Any:
            if not in_symbolic_scope() and not tf.executing_eagerly():
                raise RuntimeError("this layer runs eagerly only")
            return x

    model = keras.Sequential(
        [
            keras.Input(shape=(8, 8, 1)),
            layers.Flatten(),
            EagerOnly(),
            layers.Dense(4, activation="relu", name="h"),
            layers.Dense(10, activation="softmax"),
        ]
    )
    tm = TraceModel(model, sa_layers=["h"])
    for n in (5, 9):
        x = digits.x_test[:n]
        out, t = tm.call_tensors(x)
        np.testing.assert_allclose(np.asarray(out), np.asarray(model(x, training=False)), atol=1e-6)
        assert t.sa.shape == (n, 4)


@tf_backend
def test_xla_and_plain_passes_agree(conv_model: Any, digits: Any) -> None:
    x = digits.x_test[:70]
    xla, plain = TraceModel(conv_model, jit=True), TraceModel(conv_model, jit=False)
    a, b = xla.traces(x, batch_size=32), plain.traces(x, batch_size=32)  # 32, 32, 6 (padded to 8)
    assert xla.jit is True and plain.jit is False
    np.testing.assert_allclose(a.sa, b.sa, atol=1e-5)
    np.testing.assert_allclose(a.output, b.output, atol=1e-5)
    for u, v in zip(a.coverage, b.coverage, strict=True):
        np.testing.assert_allclose(u, v, atol=1e-5)
    # "auto": XLA for large passes only, and only with an accelerator (as Keras' predict)
    assert TraceModel(conv_model)._use_jit(100) is False
    assert TraceModel(conv_model)._use_jit(5000) is has_accelerator()


@tf_backend
@pytest.mark.parametrize("accelerator", [True, False])
def test_auto_jit_compiles_large_passes_only_with_an_accelerator(
    conv_model: Any, monkeypatch: pytest.MonkeyPatch, accelerator: bool
) -> None:
    """No GPU here: the device check is replaced, the rule around it is what is tested."""
    from pytest_sadl.capture import traces as capture_traces

    monkeypatch.setattr(capture_traces, "has_accelerator", lambda: accelerator)
    tm = TraceModel(conv_model)
    assert tm._use_jit(5000) is accelerator and tm._use_jit(100) is False
    assert TraceModel(conv_model, jit=True)._use_jit(100) is True
    assert TraceModel(conv_model, jit=False)._use_jit(5000) is False


@tf_backend
def test_model_xla_cannot_compile_falls_back(digits: Any) -> None:
    import tensorflow as tf

    class HostAbs(layers.Layer):
        def call(self, t: Any) -> Any:
            out = tf.numpy_function(np.abs, [t], tf.float32)  # no XLA kernel
            return tf.reshape(out, tf.shape(t))

        def compute_output_shape(self, shape: Any) -> Any:
            return shape

    inp = keras.Input((8, 8, 1))
    h = layers.Dense(4, name="h")(layers.Flatten()(HostAbs()(inp)))
    model = keras.Model(inp, layers.Dense(3, activation="softmax")(h))
    tm = TraceModel(model, jit=True)
    t = tm.traces(digits.x_test[:20])
    assert tm.jit is False
    np.testing.assert_allclose(t.output, model.predict(digits.x_test[:20], verbose=0), atol=1e-5)


def test_datasets_and_memmaps_equal_arrays(conv_model: Any, digits: Any, tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")  # tf.data (a Keras-on-JAX install may have no TensorFlow)

    tm = TraceModel(conv_model)
    x = digits.x_test[:90]
    ref = tm.traces(x, batch_size=32)
    batched = tf.data.Dataset.from_tensor_slices((x, digits.y_test[:90])).batch(25)
    single = tf.data.Dataset.from_tensor_slices(x)
    np.save(tmp_path / "x.npy", x)
    from pytest_sadl.capture.data import load_training_data

    mm = load_training_data(tmp_path / "x.npy")
    assert isinstance(mm.x, np.memmap)
    for source in (batched, single, mm):
        got = tm.traces(source, batch_size=32)
        np.testing.assert_allclose(got.sa, ref.sa, atol=1e-5)
        np.testing.assert_array_equal(got.pred, ref.pred)


def test_bad_inputs_name_the_problem(conv_model: Any, digits: Any) -> None:
    tm = TraceModel(conv_model)
    # a functional model takes an input without its last axis of 1, as Keras does (issue 21)
    np.testing.assert_array_equal(tm.traces(digits.x_test[:10, :, :, 0]).sa, tm.traces(digits.x_test[:10]).sa)
    with pytest.raises(SadlDataError, match=r"\(8, 7, 1\).*expects \(8, 8, 1\)"):
        tm.traces(digits.x_test[:10, :, :7])
    x = digits.x_test[:300].copy()
    x[261, 3, 3, 0] = np.nan
    with pytest.raises(SadlDataError, match="input 261 contains NaN"):
        tm.traces(x, batch_size=100)
    x[261, 3, 3, 0] = np.inf
    with pytest.raises(SadlDataError, match="input 261 contains inf"):
        tm.traces(x, batch_size=100)
    with pytest.raises(SadlDataError, match="empty"):
        tm.traces(digits.x_test[:0])
    with pytest.raises(SadlDataError, match="holds strings but the model's input .* takes float32"):
        tm.traces(np.array([["a"] * 64]).reshape(1, 8, 8, 1))
    # integer images are accepted and cast to the model's dtype
    ints = (digits.x_test[:5] * 16).astype(np.uint8)
    np.testing.assert_allclose(tm.traces(ints).output, tm.traces(ints.astype(np.float32)).output)


def test_unbuilt_and_non_models_get_clear_errors() -> None:
    class Sub(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.d = layers.Dense(3)

        def call(self, x: Any) -> Any:
            return self.d(x)

    with pytest.raises(SadlModelError, match="not built.*call the model once"):
        TraceModel(Sub())
    unbuilt = keras.Sequential([layers.Dense(3)])
    with pytest.raises(SadlModelError, match="not built|keras.Input"):
        TraceModel(unbuilt)
    with pytest.raises(SadlModelError, match="keras.Model"):
        TraceModel("not a model")
    built = Sub()
    built(np.zeros((1, 4), np.float32))
    with pytest.raises(SadlLayerError, match="no hidden layer"):
        TraceModel(built)  # one Dense layer: nothing hidden to measure surprise on


# ----------------------------------------------------------------------------- modelio


def test_load_model_keras_file(conv_model_path: Path, conv_model: Any, digits: Any) -> None:
    m = load_model(str(conv_model_path.name), base_dir=conv_model_path.parent)
    np.testing.assert_allclose(
        m.predict(digits.x_test[:5], verbose=0), conv_model.predict(digits.x_test[:5], verbose=0), atol=1e-6
    )
    assert load_model(m) is m


def test_load_model_errors(tmp_path: Path) -> None:
    with pytest.raises(SadlModelError, match="does not exist"):
        load_model(tmp_path / "missing.keras")
    (tmp_path / "m.h5").write_bytes(b"\x89HDF\r\n")
    with pytest.raises(SadlModelError, match=r"HDF5.*\.save\('model.keras'\)"):
        load_model(tmp_path / "m.h5")
    (tmp_path / "m.pkl").write_bytes(b"x")
    with pytest.raises(SadlModelError, match="unknown model format '.pkl'"):
        load_model(tmp_path / "m.pkl")
    (tmp_path / "broken.keras").write_bytes(b"not a zip")
    with pytest.raises(SadlModelError, match="not a .keras archive"):
        load_model(tmp_path / "broken.keras")
    (tmp_path / "saved_model").mkdir()
    with pytest.raises(SadlModelError, match="directory"):
        load_model(tmp_path / "saved_model")
    with pytest.raises(SadlModelError, match="cannot import module"):
        load_model("no_such_module_xyz:make")
    assert issubclass(SadlModelError, ValueError)


def test_safe_mode_stays_on(tmp_path: Path) -> None:
    model = keras.Sequential([keras.Input((3,)), layers.Lambda(lambda t: t * 2.0), layers.Dense(2)])
    path = tmp_path / "lambda.keras"
    model.save(path)
    with pytest.raises(SadlModelError, match="safe mode"):
        load_model(path)


def test_a_model_file_loads_compiled_as_keras_loads_it(dense_model_path: Path, digits: Any) -> None:
    """evaluate() works on the loaded model and gives what keras.saving.load_model gives."""
    ours, theirs = load_model(dense_model_path), keras.saving.load_model(dense_model_path)
    x, y = digits.x_test[:64], digits.y_test[:64]
    assert ours.compiled
    np.testing.assert_allclose(ours.evaluate(x, y, verbose=0), theirs.evaluate(x, y, verbose=0), rtol=1e-6)


def test_an_unrestorable_compile_configuration_loads_uncompiled_with_one_warning(tmp_path: Path) -> None:
    def unregistered_loss(y_true, y_pred):
        return keras.ops.mean((y_true - y_pred) ** 2)

    model = keras.Sequential([keras.Input((3,)), layers.Dense(2)])
    model.compile("adam", unregistered_loss)
    model.fit(np.ones((4, 3)), np.ones((4, 2)), verbose=0)
    path = tmp_path / "custom_loss.keras"
    model.save(path)
    with pytest.raises(TypeError, match="unregistered_loss"):
        keras.saving.load_model(path)  # what a plain load does
    with pytest.warns(
        SadlModelWarning, match="compile configuration .* cannot be restored.*register_keras_serializable"
    ) as caught:
        loaded = load_model(path)
    assert len(caught) == 1 and not loaded.compiled
    np.testing.assert_array_equal(loaded.get_weights()[0], model.get_weights()[0])


def test_load_model_from_callable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mk_model_mod.py").write_text(
        "import keras\n"
        "def make():\n    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])\n"
        "def bad():\n    return 42\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_model("mk_model_mod:make").output_shape == (None, 2)
    with pytest.raises(SadlModelError, match="not a keras.Model"):
        load_model("mk_model_mod:bad")


@pytest.mark.skipif(
    bool(os.environ.get("ONEDNN_MAX_CPU_ISA")),
    reason="oneDNN's ISA capped below the CPU's (simulating another CPU): TensorFlow still routes float16 "
    "to oneDNN, which aborts the process; a real CPU without AVX512-FP16 never takes that path",
)
@pytest.mark.filterwarnings("ignore::pytest_sadl.errors.SadlWarning")  # an untrained model's small classes
def test_mixed_precision_traces_are_the_float16_activations_in_float32(digits: Any, tmp_path: Path) -> None:
    """A ``mixed_float16`` model (its layers compute in float16, the softmax in float32, as
    Keras' mixed-precision guide builds one): traces are float32 arrays holding exactly the
    layer's float16 activations (a cast, no rounding beyond float16's own ~3 significant
    digits), and a profile of them gives finite LSA (computed in float64)."""
    from pytest_sadl.profile.build import ProfileOptions
    from pytest_sadl.profile.lookup import load_or_build

    inputs = keras.Input((64,))
    hidden = layers.Dense(32, activation="relu", name="hidden", dtype="mixed_float16")(inputs)
    logits = layers.Dense(10, name="logits", dtype="mixed_float16")(hidden)
    probs = layers.Activation("softmax", dtype="float32", name="probs")(logits)
    model = keras.Model(inputs, probs)
    model.save(tmp_path / "mp.keras")
    model = load_model(str(tmp_path / "mp.keras"))
    assert model.get_layer("hidden").dtype_policy.name == "mixed_float16"
    x = digits.x_train.reshape(len(digits.x_train), -1)[:300].astype("float32")
    t = TraceModel(model, ["hidden"]).traces(x)
    direct = keras.ops.convert_to_numpy(
        keras.Model(inputs=model.inputs[0], outputs=model.get_layer("hidden").output)(x)
    )
    assert direct.dtype == np.float16 and t.sa.dtype == np.float32
    # the traces are float16 values cast to float32 exactly (a cast adds no rounding) ...
    np.testing.assert_array_equal(t.sa, t.sa.astype(np.float16).astype(np.float32))
    # ... and the direct call's, to one float16 ulp: the pass runs batches of 256 + 44 (padded
    # on JAX), the direct call one of 300, and a float32 ulp of difference in another kernel's
    # sum can round a float16 the other way
    np.testing.assert_allclose(t.sa, direct.astype(np.float32), rtol=2**-10, atol=2**-14)
    assert all(c.dtype == np.float32 for c in t.coverage)
    prof = load_or_build(model, x, ProfileOptions(sa_layers=("hidden",)), tmp_path / "cache")
    assert prof.sa_traces.dtype == np.float32
    assert np.isfinite(prof.lsa()(t.sa[:20], t.pred[:20])).any()


@pytest.mark.parametrize("fixture", ["conv_model", "functional_model"])
def test_traces_and_ranges_equal_traces_and_fit_ranges(
    fixture: str, request: pytest.FixtureRequest, digits: Any
) -> None:
    """The profile build's pass (coverage folded into running minima and maxima, batch by
    batch) gives the same SA traces, predictions and ranges, bit for bit, as the traces
    kept whole and ``fit_ranges`` on them; and the plain graph is traced once on
    TensorFlow, the smaller last batch included."""
    from pytest_sadl.criteria.neurons import fit_ranges

    model = request.getfixturevalue(fixture)
    x = digits.x_train[:300]
    tm = TraceModel(model)
    before = tm.compiled_passes  # the fixture's pass, shared with earlier tests' trace models
    full = TraceModel(model).traces(x, batch_size=128)
    t, ranges = tm.traces_and_ranges(x, batch_size=128)
    want = fit_ranges(full.coverage, names=tm.coverage_layers)
    assert t.coverage == [] and ranges.names == want.names
    np.testing.assert_array_equal(t.sa, full.sa)
    np.testing.assert_array_equal(t.pred, full.pred)
    np.testing.assert_array_equal(t.output, full.output)
    for lo, hi, wlo, whi in zip(ranges.low, ranges.high, want.low, want.high, strict=True):
        assert lo.dtype == wlo.dtype == np.float64
        np.testing.assert_array_equal(lo, wlo)
        np.testing.assert_array_equal(hi, whi)
    if keras.backend.backend() == "tensorflow" and not tm.jit:
        assert tm.compiled_passes - before == (0 if before else 1)  # once, if not traced before


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_the_build_pass_reports_non_finite_traces_as_fit_ranges_does(bad: str) -> None:
    """The profile build's pass (coverage folded batch by batch) reports a NaN or inf
    trace at its row and with its count, as ``fit_ranges`` over the whole traces does.
    Rows 70 and 300 of 340 (the second and the last batch of 128) are bad."""
    from pytest_sadl.criteria.neurons import fit_ranges

    model = keras.Sequential(
        [
            keras.Input(shape=(4,)),
            layers.Dense(3, name="a"),
            layers.Activation(keras.ops.log, name="log"),
            layers.Dense(2, activation="softmax", name="b"),
        ]
    )
    model.get_layer("a").set_weights([np.eye(4, 3, dtype=np.float32), np.zeros(3, np.float32)])
    x = np.random.default_rng(0).uniform(1, 2, size=(340, 4)).astype(np.float32)
    x[[70, 300], 0] = 0.0 if bad == "inf" else -1.0  # log(0) = -inf, log(-1) = NaN
    with pytest.raises(ValueError) as wanted:
        fit_ranges(TraceModel(model, sa_layers=["b"]).traces(x, batch_size=128).coverage)
    with pytest.raises(ValueError) as got:
        TraceModel(model, sa_layers=["b"]).traces_and_ranges(x, batch_size=128)
    assert str(got.value) == str(wanted.value)
    assert f"{'NaN' if bad == 'nan' else 'inf'} values in 2 row(s) (first: row 70)" in str(got.value)


def test_range_fit_reports_non_finite_traces_as_fit_ranges_does() -> None:
    """Folded batch by batch, NaN and inf traces raise the error ``fit_ranges`` raises on
    the whole arrays (the first bad layer, its bad rows counted over every batch)."""
    from pytest_sadl.criteria.neurons import RangeFit, fit_ranges

    rng = np.random.default_rng(0)
    layers_ = [rng.normal(size=(50, 3)).astype(np.float32), rng.normal(size=(50, 4)).astype(np.float32)]
    layers_[1][[7, 31, 32], 2] = np.nan
    layers_[1][40, 0] = np.inf
    fit = RangeFit([3, 4], ["a", "b"])
    for s in range(0, 50, 16):
        for i, a in enumerate(layers_):
            fit.update(i, a[s : s + 16], s)
    with pytest.raises(ValueError) as want:
        fit_ranges(layers_, names=["a", "b"])
    with pytest.raises(ValueError) as got:
        fit.result()
    assert str(got.value) == str(want.value) and "4 row(s) (first: row 7)" in str(got.value)
    layers_[1][:] = 1.0
    fit = RangeFit([3, 4], ["a", "b"])
    for i, a in enumerate(layers_):
        fit.update(i, a[:20], 0)
        fit.update(i, a[20:], 20)
    for lo, hi, a in zip(fit.result().low, fit.result().high, layers_, strict=True):
        np.testing.assert_array_equal(lo, a.min(axis=0))
        np.testing.assert_array_equal(hi, a.max(axis=0))


def test_range_fits_of_shards_merge_into_the_ranges_and_error_of_the_whole() -> None:
    """A Dask build's workers each fold their shard into a fit of their own; merged at the
    shards' offsets, in any order, they give fit_ranges' ranges of the whole bit for bit,
    and its error, the first bad row counted in the whole set."""
    from pytest_sadl.criteria.neurons import RangeFit, fit_ranges

    rng = np.random.default_rng(1)
    layers_ = [rng.normal(size=(60, 3)).astype(np.float32), rng.normal(size=(60, 5)).astype(np.float32)]
    cuts = [(0, 25), (25, 40), (40, 60)]

    def shard_fits() -> list[tuple[int, RangeFit]]:
        fits = []
        for a, b in cuts:
            fit = RangeFit([3, 5], ["a", "b"])
            for i, layer in enumerate(layers_):
                fit.update(i, layer[a:b], 0)  # a worker counts its shard's rows from 0
            fits.append((a, fit))
        return fits

    last = RangeFit([3, 5], ["a", "b"])  # the driver's, the shards merged in any order
    for a, fit in reversed(shard_fits()):
        last.merge(fit, a)
    want = fit_ranges(layers_, names=["a", "b"])
    for got_lo, got_hi, lo, hi in zip(last.result().low, last.result().high, want.low, want.high, strict=True):
        np.testing.assert_array_equal(got_lo, lo)
        np.testing.assert_array_equal(got_hi, hi)
    assert last.rows == 60
    layers_[0][[44, 27], 1] = np.inf
    (_, first), *rest = shard_fits()
    for a, fit in rest:
        first.merge(fit, a)
    with pytest.raises(ValueError) as wanted:
        fit_ranges(layers_, names=["a", "b"])
    with pytest.raises(ValueError) as got:
        first.result()
    assert str(got.value) == str(wanted.value) and "inf values in 2 row(s) (first: row 27)" in str(got.value)
    with pytest.raises(ValueError, match="same layers"):
        first.merge(RangeFit([3]), 0)


def test_a_model_is_probed_once_for_its_trace_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """The symbolic probe of a model is reused by its later trace models (a session makes
    the build's and the recording's) while its layers and inputs are the same, and runs
    again when they change."""
    import pytest_sadl.capture.traces as traces_module

    calls: list[int] = []
    real = traces_module.probe

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(traces_module, "probe", counting)
    model = keras.Sequential([keras.Input(shape=(4,)), layers.Dense(3, name="a"), layers.Dense(2, name="b")])
    first = TraceModel(model)
    again = TraceModel(model, sa_layers=["a"], extrema=True)
    assert len(calls) == 1 and again.coverage_layers == first.coverage_layers == ["a", "b"]
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_array_equal(again.traces(x).sa, first.traces(x).coverage[0])
    model.add(layers.Dense(2, name="c"))
    grown = TraceModel(model)
    assert len(calls) == 2 and grown.coverage_layers == ["a", "b", "c"]


def test_trace_models_of_one_model_and_layers_share_the_traced_pass(digits: Any) -> None:
    """A second trace model of the same model, layers, output and extrema runs the pass the
    first traced (as a second ``predict`` reuses ``model.predict_function``): no second
    trace, the same traces; another selection or extrema gets a pass of its own, a layer
    whose ``call`` was replaced gets a new one, and the passes kept on the model do not
    keep it alive."""
    import gc
    import weakref

    import pytest_sadl.capture.traces as traces_module

    def make() -> Any:
        return keras.Sequential(
            [
                keras.Input(shape=(8, 8, 1)),
                layers.Conv2D(4, 3, activation="relu", name="conv"),
                layers.Flatten(),
                layers.Dense(6, activation="relu", name="hidden"),
                layers.Dense(10, activation="softmax", name="out"),
            ]
        )

    model = make()
    x = digits.x_train[:70]
    first = TraceModel(model)
    want = first.traces(x, batch_size=32)
    second = TraceModel(model)
    assert second._forward is first._forward
    got = second.traces(x, batch_size=32)
    np.testing.assert_array_equal(got.sa, want.sa)
    for a, b in zip(got.coverage, want.coverage, strict=True):
        np.testing.assert_array_equal(a, b)
    if keras.backend.backend() == "tensorflow":
        assert second.compiled_passes == 1  # the first's one trace, with the batch size unknown
    other = TraceModel(model, sa_layers=["conv"])
    assert other._forward is not first._forward  # the same taps, in another order
    extrema = TraceModel(model, extrema=True)
    assert extrema._forward is not first._forward
    np.testing.assert_array_equal(extrema.traces(x).coverage[0], want.coverage[0])
    with_more = [TraceModel(model, sa_layers=[p]) for p in ("hidden", "conv", "out")]  # ("hidden" is first's)
    assert with_more[0]._forward is first._forward
    passes = model.__dict__[traces_module._PASSES]
    assert list(passes.values()) == [extrema._forward, first._forward, other._forward, with_more[2]._forward]
    fifth = TraceModel(model, sa_layers=["conv", "out"])  # taps conv, out, hidden: the least recently used goes
    assert list(passes.values()) == [first._forward, other._forward, with_more[2]._forward, fifth._forward]
    if keras.backend.backend() == "tensorflow":  # whether XLA ran is each trace model's own
        xla = TraceModel(model, jit=True)
        auto = TraceModel(model)
        assert xla._forward is auto._forward is first._forward
        xla.traces(x[:8])
        auto.traces(x[:8])
        assert xla.jit is True and auto.jit is None  # "auto" on a CPU-only machine: the plain graph
        del xla, auto

    seen: list[int] = []
    dense = model.get_layer("hidden")

    def counted(*args: Any, _layer: Any = dense, **kwargs: Any) -> Any:
        seen.append(1)
        return type(_layer).call(_layer, *args, **kwargs)

    object.__setattr__(dense, "call", counted)
    patched = TraceModel(model)
    assert patched._forward is not first._forward
    patched.traces(x)
    assert seen  # the replaced call runs in the new pass
    object.__delattr__(dense, "call")

    ref = weakref.ref(model)
    del model, dense, counted, first, second, other, extrema, with_more, patched, passes, fifth
    gc.collect()
    assert ref() is None


def test_each_run_reads_the_weights_as_they_are_then() -> None:
    """The pass reads the model's variables once a run, not once a batch (JAX: the
    ``jax.jit`` pass's state held for the run's batches): weights set between two runs of
    one trace model are the second run's, equal to a new trace model's; the first run's
    batches all used the weights of its start."""
    model = keras.Sequential(
        [keras.Input(shape=(4,)), layers.Dense(3, activation="relu", name="a"), layers.Dense(2, name="b")]
    )
    x = np.random.default_rng(1).normal(size=(100, 4)).astype(np.float32)
    tm = TraceModel(model, sa_layers=["a"])
    before = tm.traces(x, batch_size=16).sa
    again = tm.traces(x, batch_size=16).sa
    np.testing.assert_array_equal(before, again)
    kernel, bias = model.get_layer("a").get_weights()
    model.get_layer("a").set_weights([kernel * -2.0, bias + 1.0])
    after = tm.traces(x, batch_size=16).sa
    np.testing.assert_allclose(after, TraceModel(model, sa_layers=["a"]).traces(x, batch_size=16).sa, rtol=1e-6)
    np.testing.assert_allclose(after, np.maximum(x @ (kernel * -2.0) + bias + 1.0, 0.0), rtol=1e-5, atol=1e-6)
    assert not np.allclose(before, after)
