"""PyTorch objects recognised without importing torch, and PyTorch training data as NumPy.

What :mod:`~pytest_sadl.capture.data`, :mod:`~pytest_sadl.capture.model` and the
profile ask before they know whether torch is involved: ``is_torch_module(obj)`` (a
native ``nn.Module``, not a Keras model on the torch backend), ``is_torch_tensor``,
``is_torch_data`` (a ``Dataset`` or ``DataLoader``); each looks torch up in
``sys.modules``, so a run without PyTorch objects never imports it. ``to_numpy`` detaches
a tensor from autograd and its device; ``arrays_from_torch_data`` reads a dataset once.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from pytest_sadl.errors import SadlDataError, SadlModelError

__all__ = ["import_torch", "is_torch_module", "is_torch_tensor", "is_torch_data", "to_numpy", "arrays_from_torch_data"]


def import_torch() -> Any:
    try:
        import torch
    except ImportError:  # pragma: no cover - only reached with a torch object, so torch is there
        raise SadlModelError('PyTorch is not installed; pip install "pytest-sadl[torch]"') from None
    return torch


def is_torch_module(obj: Any) -> bool:
    """Whether ``obj`` is a native ``torch.nn.Module``, not a Keras model (on Keras' torch
    backend those are modules too); torch is not imported when it is not loaded."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.nn.Module):
        return False
    keras = sys.modules.get("keras")
    return keras is None or not isinstance(obj, keras.Model)


def is_torch_tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def is_torch_data(obj: Any) -> bool:
    """A ``torch.utils.data.Dataset`` or ``DataLoader``."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    data = torch.utils.data
    return isinstance(obj, (data.Dataset, data.DataLoader))


def to_numpy(value: Any) -> np.ndarray:
    """A tensor (on any device, requiring grad or not) or an array as NumPy."""
    if hasattr(value, "detach"):
        array: np.ndarray = value.detach().cpu().numpy()
        return array
    return np.asarray(value)


def arrays_from_torch_data(value: Any, source: str) -> tuple[np.ndarray, np.ndarray | None]:
    """``(x, y)`` as NumPy from a ``Dataset`` (items ``x`` or ``(x, y)``) or a ``DataLoader``
    (batches ``x`` or ``(x, y)``), read once in the order it yields; ``y`` is ``None``
    when no labels come with the inputs."""
    torch = import_torch()
    data = torch.utils.data
    loader = value if isinstance(value, data.DataLoader) else data.DataLoader(value, batch_size=256, shuffle=False)
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    labelled: bool | None = None
    for batch in loader:
        if isinstance(batch, dict):
            batch = (batch["x"], batch.get("y")) if "x" in batch else batch
        if isinstance(batch, (tuple, list)):
            if not batch or len(batch) > 2:
                raise SadlDataError(f"{source} yields {len(batch)} items per batch; yield x or (x, y)")
            x, y = batch[0], (batch[1] if len(batch) == 2 else None)
        else:
            x, y = batch, None
        if not hasattr(x, "shape"):
            raise SadlDataError(f"{source} yields {type(x).__name__}, not tensors; yield x or (x, y) tensors")
        if labelled is None:
            labelled = y is not None
        xs.append(to_numpy(x))
        if labelled and y is not None:
            ys.append(to_numpy(y))
    if not xs:
        raise SadlDataError(f"{source} is empty (0 inputs); give at least one input")
    x_all = np.concatenate(xs)
    y_all = np.concatenate(ys) if labelled and len(ys) == len(xs) else None
    return x_all, y_all
