"""A cheap digest of what a model computes with: its structure and every weight's bytes.

The profile describes the model as it was when the profile was bound to it; a test that
calls ``fit``, ``set_weights`` or ``load_weights``, or adds a layer, changes the model
the later inputs are measured on. :func:`model_digest` is how the plugin notices:
computed when the model is bound and at the end of each marked test that recorded
inputs, it changes whenever a weight's value, a weight's shape, the set of weights or
the layers change.

The digest reads each weight (``model.weights``: trainable and non-trainable, so the
batch-norm statistics ``fit`` moves count; no optimizer, metric or seed-generator state,
which predicting does not change either) as ``np.asarray(weight.value)`` (TensorFlow or
JAX alike: the same weights give the same digest; a torch value detached first) and runs zlib's CRC-32 over its bytes,
chained from weight to weight with the weights' paths, shapes and dtypes and the layers'
names. CRC-32 rather than a cryptographic hash: it is
not a defence against someone forging weights, only a check that they did not change,
and every change of a byte changes it (a burst up to 32 bits always, any other change but
with a chance of 2**-32); ``benchmarks/bench_model_digest.py`` measures it against
BLAKE2b and a NumPy sum (which misses weights that are swapped).

A native ``torch.nn.Module`` is digested from its ``repr`` (the modules and their
options) and its ``state_dict`` (parameters and buffers) the same way.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

__all__ = ["model_digest"]


def _layer_names(model: Any) -> list[str]:
    layers = getattr(model, "layers", None) or []
    return [f"{type(layer).__name__}:{getattr(layer, 'name', '')}" for layer in layers]


def _array(value: Any) -> np.ndarray:
    """A weight's value as NumPy: a torch tensor (Keras on torch, or a native module's
    parameter or buffer) detached from autograd and its device, anything else as it is."""
    if hasattr(value, "detach"):
        return np.ascontiguousarray(value.detach().cpu().numpy())
    return np.ascontiguousarray(np.asarray(value))


def _module_digest(model: Any) -> str:
    """A native ``torch.nn.Module``: its structure (``repr``) and its ``state_dict``
    (parameters and buffers, so batch-norm statistics count too)."""
    items = [(name, t) for name, t in model.state_dict().items() if hasattr(t, "detach")]
    crc = zlib.crc32(repr(model).encode())
    for name, t in items:
        value = _array(t)
        crc = zlib.crc32(f"{name}|{value.shape}|{value.dtype}".encode(), crc)
        crc = zlib.crc32(value.reshape(-1).view(np.uint8).data, crc)
    return f"{crc:08x}-{len(items)}"


def model_digest(model: Any) -> str:
    """A short hex digest of ``model``'s layers and weights (see the module docstring)."""
    from pytest_sadl.capture.torchdata import is_torch_module  # imports no torch

    if is_torch_module(model):
        return _module_digest(model)
    crc = zlib.crc32(repr(_layer_names(model)).encode())
    for weight in model.weights:
        # np.asarray of the backend value: convert_to_numpy (TensorFlow) and Variable.numpy() (JAX)
        # make NumPy 2 warn about the copy keyword; a torch value is detached first
        value = _array(weight.value)
        head = f"{getattr(weight, 'path', getattr(weight, 'name', ''))}|{value.shape}|{value.dtype}".encode()
        crc = zlib.crc32(head, crc)
        crc = zlib.crc32(value.reshape(-1).view(np.uint8).data, crc)
    return f"{crc:08x}-{len(model.weights)}"
