"""The graph probe (``capture.layers.graph_probe``): what the symbolic probe finds by
running a model, read from a plain functional model's graph instead, must be the same
answer on every kind of graph model; any other model gets ``None`` (the probe runs)."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import pytest
from keras import layers

import pytest_sadl.capture.traces as traces_module
from pytest_sadl.capture import TraceModel
from pytest_sadl.capture.layers import graph_probe
from tests import _models


def _ops_model() -> Any:
    a = keras.Input((6,), name="a")
    b = keras.Input((6,), name="b")
    h = layers.Dense(5, activation="relu", name="ha")(a)
    g = layers.Dense(5, activation="relu", name="hb")(b)
    s = keras.ops.add(h, keras.ops.multiply(g, 2.0))  # keras ops: graph nodes, not layers
    z = layers.Concatenate(name="cat")([s, h])
    return keras.Model({"a": a, "b": b}, layers.Dense(3, activation="softmax", name="out")(z))


def _two_outputs(kind: str) -> Any:
    x = keras.Input((8, 8, 1))
    c = layers.Conv2D(4, 3, activation="relu", name="conv")(x)
    p = layers.GlobalAveragePooling2D(name="gap")(c)
    h = layers.Dense(6, activation="relu", name="hidden")(p)
    cls = layers.Dense(4, activation="softmax", name="cls")(h)
    reg = layers.Dense(1, name="reg")(h)
    outputs = {"cls": cls, "reg": reg} if kind == "dict" else [reg, cls, h]
    return keras.Model(x, outputs)


def _rnn_state() -> Any:
    x = keras.Input((5, 3))
    seq, h, _ = layers.LSTM(4, return_sequences=True, return_state=True, name="lstm")(x)
    mean = layers.GlobalAveragePooling1D(name="pool")(seq)
    z = layers.Concatenate(name="cat")([mean, h])
    return keras.Model(x, layers.Dense(2, activation="softmax", name="out")(z))


def _singleton_list() -> Any:
    x = keras.Input((4,))
    return keras.Model([x], [layers.Dense(3, activation="softmax", name="out")(layers.Dense(5, name="h")(x))])


def _text() -> Any:
    vec = layers.TextVectorization(max_tokens=20, output_sequence_length=6, name="vec")
    vec.adapt(np.array(["a b c", "b c d e", "x y"], dtype=object))
    x = keras.Input((1,), dtype="string")
    e = layers.Embedding(20, 4, name="emb")(vec(x))
    return keras.Model(x, layers.Dense(2, activation="softmax", name="out")(layers.GlobalAveragePooling1D()(e)))


def _masked_with_input_output() -> Any:
    """An Embedding with mask_zero (masks pass through the graph), and a model input
    given back as an output (the probe owns it to no layer)."""
    ids = keras.Input((5,), dtype="int32")
    side = keras.Input((3,), name="side")
    e = layers.Embedding(10, 4, mask_zero=True, name="emb")(ids)
    h = layers.LSTM(4, name="lstm")(e)
    out = layers.Dense(2, activation="softmax", name="out")(layers.Concatenate(name="cat")([h, side]))
    return keras.Model([ids, side], [out, side])


def _hands_back() -> Any:
    """Layers that hand their input back (Dropout and Identity at inference, a linear
    Activation, a no-op Flatten on JAX): the layer called next names them, as the graph
    does, not the layer before them."""
    x = keras.Input((10,))
    h = layers.Dropout(0.5, name="drop")(layers.Dense(8, name="h")(x))
    r = layers.ReLU(name="r")(h)
    lin = layers.Activation("linear", name="lin")(layers.Dense(6, name="h2")(r))
    bn = layers.BatchNormalization(name="bn")(layers.Identity(name="same")(lin))
    f = layers.Flatten(name="flat")(layers.Dense(5, name="h3")(bn))
    return keras.Model(x, layers.Dense(3, activation="softmax", name="out")(layers.ReLU(name="r3")(f)))


def _mixed_precision() -> Any:
    """mixed_float16 convolutions into a float32 BatchNormalization and activation (Keras'
    mixed-precision recipe keeps such layers in float32): the input is cast on its way in,
    the probe's ``call`` gets another tensor, so neither probe names a layer."""
    x = keras.Input((8, 8, 3))
    c = layers.Conv2D(4, 3, name="c", dtype="mixed_float16")(x)
    r = layers.ReLU(name="r", dtype="mixed_float16")(layers.BatchNormalization(name="bn", dtype="float32")(c))
    r = layers.Activation("relu", name="r2", dtype="float32")(layers.Conv2D(4, 1, name="c2", dtype="mixed_float16")(r))
    out = layers.Dense(3, activation="softmax", name="probs", dtype="float32")(
        layers.GlobalAveragePooling2D(name="gap")(r)
    )
    return keras.Model(x, out)


def _mobilenet() -> Any:
    return keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3), alpha=0.35, classes=3)


BUILDERS = {
    "ops-and-dict-inputs": _ops_model,
    "list-outputs": lambda: _two_outputs("list"),
    "dict-outputs": lambda: _two_outputs("dict"),
    "rnn-with-state": _rnn_state,
    "singleton-lists": _singleton_list,
    "mask-and-input-output": _masked_with_input_output,
    "mobilenet-v2": _mobilenet,
    "hands-back": _hands_back,
    "mixed-precision": _mixed_precision,
}


def _probes(model: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, TraceModel, TraceModel]:
    """(the symbolic probe's answer, the graph's, a trace model made with each)."""
    recorded: list[Any] = []
    real = traces_module.probe

    def recording(*args: Any) -> Any:
        recorded.append(real(*args))
        return recorded[-1]

    with monkeypatch.context() as m:
        m.setattr(traces_module, "probe", recording)
        m.setattr(traces_module, "graph_probe", lambda *args: None)
        model.__dict__.pop(traces_module._PROBE, None)
        dynamic_tm = TraceModel(model)
    model.__dict__.pop(traces_module._PROBE, None)
    static_tm = TraceModel(model)
    return recorded[-1], graph_probe(model, [n.layer for n in static_tm._nodes]), dynamic_tm, static_tm


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_the_graph_gives_what_the_probe_finds(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = BUILDERS[kind]()
    dynamic, static, dynamic_tm, static_tm = _probes(model, monkeypatch)
    assert static is not None
    (d_spec, d_seen, d_owners), (s_spec, s_seen, s_owners) = dynamic, static
    assert s_owners == d_owners
    keras.tree.assert_same_structure(s_spec, d_spec)
    assert [tuple(t.shape) for t in keras.tree.flatten(s_spec)] == [tuple(t.shape) for t in keras.tree.flatten(d_spec)]
    for layer, d, s in zip((n.layer for n in static_tm._nodes), d_seen, s_seen, strict=True):
        assert (s.calls, s.order, s.shape, s.structured, s.after) == (
            d.calls,
            d.order,
            d.shape,
            d.structured,
            d.after,
        ), layer.name
    # and what a trace model makes of it: the same defaults, outputs and sizes
    for attr in ("sa_layers", "coverage_layers", "output_names", "output_name", "classifier", "sa_sizes"):
        assert getattr(static_tm, attr) == getattr(dynamic_tm, attr), attr
    assert static_tm.coverage_sizes == dynamic_tm.coverage_sizes


def test_the_probe_runs_for_other_models(conv_model: Any) -> None:
    """Sequential, subclassed and nested models, and functional models with a shared
    layer, a replaced call, string inputs, an output given by a layer that returns its
    input (Dropout, Identity, linear Activation), a Lambda, or a wrapper of a top-level
    layer: no graph answer."""
    from pytest_sadl.capture.layers import walk

    def answer(model: Any) -> Any:
        return graph_probe(model, [n.layer for n in walk(model)])

    assert answer(conv_model) is None  # Sequential
    if keras.backend.backend() == "tensorflow":
        assert answer(_text()) is None
    for kind in ("subclassed", "nested"):
        assert answer(_models.build_kind(kind)) is None, kind
    x = keras.Input((4,))
    shared = layers.Dense(4, name="shared")
    model = keras.Model(x, layers.Dense(2, name="out")(shared(shared(x))))
    assert answer(model) is None
    x = keras.Input((4,))
    h = layers.Dense(5, name="h")(x)
    # an output given by a layer that returns its input itself: the probe names the Dense
    for last in (layers.Dropout(0.5), layers.Identity(), layers.Activation("linear")):
        assert answer(keras.Model(x, last(layers.Dense(1, activation="sigmoid")(h)))) is None, last
    # layers that run the user's code, and a wrapper of a top-level layer
    assert answer(keras.Model(x, layers.Lambda(lambda t: [t * 2.0])(h))) is None
    seq = keras.Input((3, 4))
    inner = layers.Dense(4, name="inner")
    wrapped = layers.TimeDistributed(inner, name="td")(inner(seq))
    assert answer(keras.Model(seq, wrapped)) is None
    plain = _singleton_list()
    assert answer(plain) is not None
    dense = plain.get_layer("h")
    object.__setattr__(dense, "call", dense.call)
    assert answer(plain) is None
