"""Which model this is: one reader of a model's weights, and the two hashes made from it.

Both hashes read the same weights the same way (:func:`named_weights`, :func:`weight_array`):
a Keras model's ``model.weights`` (trainable and non-trainable, so the batch-norm
statistics ``fit`` moves count; no optimizer, metric or seed-generator state, which
predicting does not change either), each by its path, read as ``np.asarray(weight.value)``
(TensorFlow or JAX alike: the same weights give the same bytes; a torch value detached
and moved to the CPU first, a dtype NumPy lacks such as ``bfloat16`` as float32); a native
``torch.nn.Module``'s ``state_dict`` (parameters and buffers) by name. They differ in
what they are for, and so in what they hash:

:func:`model_fingerprint`
    The profile's key (sha256 hex, part of every stored profile's fingerprint, so its
    value must never change for the same model): the model's class, its architecture
    (``get_config()`` as sorted JSON; a torch module's ``repr``) and every weight's path,
    dtype, shape and bytes. Changing one weight or one layer option changes it; loading
    the same ``.keras`` file twice does not.
:func:`model_digest`
    How the plugin notices that a test changed the model (``fit``, ``set_weights``,
    ``load_weights``, a new layer): computed when the profile's model is bound and at the
    end of each marked test that recorded inputs, a short hex digest of the layers' names
    (a torch module's ``repr``) and every weight's path, shape, dtype and bytes. zlib's
    CRC-32 chained from weight to weight rather than a cryptographic hash: it is not a
    defence against someone forging weights, only a check that they did not change, and
    every change of a byte changes it (a burst up to 32 bits always, any other change but
    with a chance of 2**-32); ``benchmarks/bench_model_digest.py`` measures it against
    BLAKE2b and a NumPy sum (which misses weights that are swapped).

No backend is imported here: the model's own objects are read.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from pytest_sadl.capture.torchdata import is_torch_module  # imports no torch

__all__ = ["model_fingerprint", "model_digest", "named_weights", "weight_array"]


def weight_array(weight: Any) -> np.ndarray:
    """A weight's values as NumPy, without a backend import: a Keras variable by its backend
    value (``np.asarray`` of it: Keras' JAX and torch ``Variable.numpy()`` go through an
    ``__array__`` without NumPy 2's ``copy`` keyword, a DeprecationWarning per weight), a
    torch tensor (Keras on torch, or a native module's parameter or buffer) detached from
    autograd and its device, a dtype NumPy lacks (``bfloat16``) as float32; anything else
    (a ``tf.Variable``, an array) as it is."""
    value = getattr(weight, "value", weight)
    if callable(value):  # a tf.Variable's value() method, not a Keras variable's property
        value = weight
    if hasattr(value, "detach"):
        return _tensor_array(value)
    return np.asarray(value)


def _tensor_array(value: Any) -> np.ndarray:
    """A torch tensor detached, on the CPU, as NumPy (a dtype NumPy lacks as float32)."""
    value = value.detach().cpu()
    try:
        array: np.ndarray = value.numpy()
    except TypeError:  # bfloat16 and other dtypes NumPy lacks
        array = value.float().numpy()
    return array


def named_weights(model: Any) -> Iterator[tuple[str, np.ndarray]]:
    """Every weight of ``model`` with its name, as NumPy (:func:`weight_array`): a native
    ``torch.nn.Module``'s ``state_dict`` tensors by key, a Keras model's ``model.weights``
    by path (or name)."""
    if is_torch_module(model):
        for name, value in model.state_dict().items():
            if hasattr(value, "detach"):
                yield name, weight_array(value)
        return
    for weight in model.weights:
        yield str(getattr(weight, "path", getattr(weight, "name", ""))), weight_array(weight)


def _bytes(value: np.ndarray) -> memoryview:
    """The bytes of ``value`` in C order (a view of them when it is C-contiguous)."""
    return np.ascontiguousarray(value).reshape(-1).view(np.uint8).data


def model_fingerprint(model: Any) -> str:
    """sha256 hex of the model's architecture and every weight (see the module docstring).
    A profile's key: the same model gives the same value in every version of the package."""
    h = hashlib.sha256(_architecture(model))
    for name, value in named_weights(model):
        h.update(f"\0{name}\0{value.dtype.str}\0{value.shape}\0".encode())
        h.update(_bytes(value))  # the bytes, not a copy of them
    digest: str = h.hexdigest()
    return digest


def _architecture(model: Any) -> bytes:
    """What the fingerprint holds of the architecture: the class, and a torch module's
    ``repr`` or a Keras model's configuration."""
    kind = f"{type(model).__module__}.{type(model).__qualname__}"
    if is_torch_module(model):
        return f"torch\0{kind}\0{model!r}\0".encode()
    return f"{kind}\0".encode() + json.dumps(_config(model), sort_keys=True, default=str).encode()


def _config(model: Any) -> Any:
    """``model.get_config()``; a subclassed model without one: its layers' names and classes
    (the weights still count)."""
    try:
        return model.get_config()
    except Exception:
        return {"layers": [(layer.name, type(layer).__qualname__) for layer in getattr(model, "layers", [])]}


def _layers_crc(model: Any) -> int:
    """The CRC-32 of a torch module's ``repr``, or of a Keras model's layers' classes and names."""
    if is_torch_module(model):
        return zlib.crc32(repr(model).encode())
    layers = getattr(model, "layers", None) or []
    return zlib.crc32(repr([f"{type(layer).__name__}:{getattr(layer, 'name', '')}" for layer in layers]).encode())


def model_digest(model: Any) -> str:
    """A short hex digest of ``model``'s layers and weights (see the module docstring)."""
    crc = _layers_crc(model)
    count = 0
    for name, weight in named_weights(model):
        value = np.ascontiguousarray(weight)  # a 0-d weight is hashed as shape (1,), as it always was
        crc = zlib.crc32(f"{name}|{value.shape}|{value.dtype}".encode(), crc)
        crc = zlib.crc32(_bytes(value), crc)
        count += 1
    return f"{crc:08x}-{count}"
