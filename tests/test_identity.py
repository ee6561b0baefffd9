"""One model-identity module (:mod:`pytest_sadl.capture.identity`), one weight reader.

The profile's key (``model_fingerprint``) must not change when the code that computes it
moves: every stored profile is found by it. The references below are the three hashes
as they were written before they shared a reader (``profile.build.model_fingerprint``,
``capture.torch.module_fingerprint``, ``capture.weights.model_digest``), frozen here, and
each hash must give their values bit for bit, on the trained test models, on weights of
rank 0 (a scalar; torch's ``num_batches_tracked``), integer, boolean and float16 ones.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
keras = pytest.importorskip("keras")

from pytest_sadl.capture.identity import model_digest, model_fingerprint, named_weights, weight_array  # noqa: E402

# ----------------------------------------------------------------------------- frozen references


def _old_weight_array(w: Any) -> np.ndarray:
    value = getattr(w, "value", None)
    if value is not None and type(value).__module__.startswith(("jax", "jaxlib")):
        return np.asarray(value)
    if value is not None and hasattr(value, "detach"):
        array: np.ndarray = value.detach().cpu().numpy()
        return array
    return np.asarray(w.numpy() if hasattr(w, "numpy") else w)


def _old_module_fingerprint(model: Any) -> str:
    h = hashlib.sha256()
    h.update(f"torch\0{type(model).__module__}.{type(model).__qualname__}\0{model!r}\0".encode())
    for name, value in model.state_dict().items():
        if not hasattr(value, "detach"):
            continue
        a = value.detach().cpu().numpy()
        h.update(f"\0{name}\0{a.dtype.str}\0{a.shape}\0".encode())
        h.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8).data)
    return h.hexdigest()


def _old_model_fingerprint(model: Any) -> str:
    if isinstance(model, torch.nn.Module) and not isinstance(model, keras.Model):
        return _old_module_fingerprint(model)
    h = hashlib.sha256()
    h.update(f"{type(model).__module__}.{type(model).__qualname__}\0".encode())
    try:
        config = model.get_config()
    except Exception:
        config = {"layers": [(layer.name, type(layer).__qualname__) for layer in getattr(model, "layers", [])]}
    h.update(json.dumps(config, sort_keys=True, default=str).encode())
    for w in model.weights:
        value = _old_weight_array(w)
        h.update(f"\0{getattr(w, 'path', getattr(w, 'name', ''))}\0{value.dtype.str}\0{value.shape}\0".encode())
        h.update(np.ascontiguousarray(value).reshape(-1).view(np.uint8).data)
    return h.hexdigest()


def _old_array(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        try:
            return np.ascontiguousarray(value.numpy())
        except TypeError:
            return np.ascontiguousarray(value.float().numpy())
    return np.ascontiguousarray(np.asarray(value))


def _old_model_digest(model: Any) -> str:
    if isinstance(model, torch.nn.Module) and not isinstance(model, keras.Model):
        items = [(name, t) for name, t in model.state_dict().items() if hasattr(t, "detach")]
        crc = zlib.crc32(repr(model).encode())
        for name, t in items:
            value = _old_array(t)
            crc = zlib.crc32(f"{name}|{value.shape}|{value.dtype}".encode(), crc)
            crc = zlib.crc32(value.reshape(-1).view(np.uint8).data, crc)
        return f"{crc:08x}-{len(items)}"
    layers = getattr(model, "layers", None) or []
    crc = zlib.crc32(repr([f"{type(layer).__name__}:{getattr(layer, 'name', '')}" for layer in layers]).encode())
    for weight in model.weights:
        value = _old_array(weight.value)
        head = f"{getattr(weight, 'path', getattr(weight, 'name', ''))}|{value.shape}|{value.dtype}".encode()
        crc = zlib.crc32(head, crc)
        crc = zlib.crc32(value.reshape(-1).view(np.uint8).data, crc)
    return f"{crc:08x}-{len(model.weights)}"


# ----------------------------------------------------------------------------- models


class _Scalar(keras.layers.Layer):
    """A layer with rank-0 weights, one of them an integer."""

    def build(self, shape: Any) -> None:
        self.s = self.add_weight(shape=(), initializer="ones", name="s")
        self.n = self.add_weight(shape=(), initializer="zeros", name="n", dtype="int64", trainable=False)

    def call(self, x: Any) -> Any:
        return x * self.s


def _keras_odd() -> Any:
    """Scalar, integer and float16 weights, set to values of their own."""
    x = keras.Input((6, 6, 1))
    h = keras.layers.Conv2D(2, 3)(x)
    h = _Scalar()(h)
    h = keras.layers.Flatten()(h)
    model = keras.Model(x, keras.layers.Dense(2, dtype="float16")(h))
    for i, w in enumerate(model.weights):
        size = int(np.prod(w.shape))
        w.assign((np.arange(size, dtype="float64").reshape(tuple(w.shape)) * 0.01 + i).astype(w.dtype))
    return model


def _torch_modules() -> list[Any]:
    torch.manual_seed(0)
    conv = torch.nn.Sequential(
        torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(32, 3)
    )
    conv.train()
    conv(torch.rand(4, 1, 6, 6))  # num_batches_tracked (rank 0, int64) and the running stats move
    text = torch.nn.Sequential(torch.nn.Embedding(5, 3), torch.nn.LayerNorm(3))
    text.register_buffer("flag", torch.tensor(True))
    half = torch.nn.Linear(3, 2).to(torch.float16)
    return [conv, text, half]


def test_the_fingerprint_and_digest_are_the_old_ones_bit_for_bit(dense_model: Any, conv_model: Any) -> None:
    models = [dense_model, conv_model, _keras_odd(), *_torch_modules()]
    for model in models:
        assert model_fingerprint(model) == _old_model_fingerprint(model), type(model).__name__
        assert model_digest(model) == _old_model_digest(model), type(model).__name__
    assert len({model_fingerprint(m) for m in models}) == len(models)


def test_the_profile_module_takes_the_one_fingerprint() -> None:
    from pytest_sadl.profile import build

    assert build.model_fingerprint is model_fingerprint


def test_one_reader_reads_every_kind_of_weight() -> None:
    """A Keras variable, a torch parameter with autograd, a bfloat16 buffer NumPy lacks,
    an array: the same values as NumPy."""
    v = keras.Variable(np.arange(6, dtype="float32").reshape(2, 3))
    np.testing.assert_array_equal(weight_array(v), np.arange(6, dtype="float32").reshape(2, 3))
    p = torch.nn.Parameter(torch.arange(4, dtype=torch.float32))
    assert weight_array(p).dtype == np.float32 and weight_array(p).tolist() == [0, 1, 2, 3]
    b = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
    assert weight_array(b).dtype == np.float32 and weight_array(b).tolist() == [1.5, -2.0]
    assert weight_array(np.int8(3)).shape == ()
    names = [name for name, _ in named_weights(_torch_modules()[0])]
    assert "1.num_batches_tracked" in names and "4.weight" in names


def test_a_changed_weight_changes_both_and_only_a_real_change(conv_model_path: Any) -> None:
    from tests._models import load_model

    model = load_model(conv_model_path)
    fp, digest = model_fingerprint(model), model_digest(model)
    w = model.weights[-1]
    before = np.asarray(w.value).copy()
    w.assign(before + 1e-3)
    assert model_fingerprint(model) != fp and model_digest(model) != digest
    w.assign(before)
    assert model_fingerprint(model) == fp and model_digest(model) == digest
