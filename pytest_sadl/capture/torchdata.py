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


_LABELS = ("y", "label", "labels", "target", "targets")


def _split_batch(batch: Any, source: str) -> tuple[Any, Any]:
    """``(x, y)`` of one item or batch: ``x``, ``(x,)``, ``(x, y)`` or a dict with ``x``
    (or one tensor per input name) and ``y``; ``x`` itself a tuple or list of tensors for
    a model with several positional inputs (``((image, aux), y)``)."""
    if isinstance(batch, dict):
        return _split_mapping(batch)
    if isinstance(batch, (tuple, list)):
        if not batch or len(batch) > 2:
            raise SadlDataError(
                f"{source} yields {len(batch)} items per batch; yield x or (x, y), and ((x1, x2, ...), y) "
                "for a model with several positional inputs"
            )
        return batch[0], (batch[1] if len(batch) == 2 else None)
    return batch, None


def _split_mapping(batch: dict[Any, Any]) -> tuple[Any, Any]:
    """``(x, y)`` of a dict: its ``x`` (else one tensor per input name) and its labels."""
    y = next((batch[k] for k in _LABELS if k in batch), None)
    if "x" in batch:
        return batch["x"], y
    return {str(k): v for k, v in batch.items() if k not in _LABELS}, y


def _parts(x: Any) -> dict[str, Any] | list[Any] | None:
    if isinstance(x, dict):
        return x
    if isinstance(x, (tuple, list)):
        return list(x)
    return None


def arrays_from_torch_data(
    value: Any, source: str
) -> tuple[np.ndarray | list[np.ndarray] | dict[str, np.ndarray], np.ndarray | None]:
    """``(x, y)`` as NumPy from a ``Dataset`` (items ``x`` or ``(x, y)``) or a ``DataLoader``
    (batches ``x`` or ``(x, y)``), read once in the order it yields; ``y`` is ``None``
    when no labels come with the inputs. For several positional inputs ``x`` is a list of
    arrays (items ``((x1, x2), y)``) or a dict by name (items ``{"image": ..., "y": ...}``)."""
    xs, ys = _read_batches(_loader(value), source)
    if not xs:
        raise SadlDataError(f"{source} is empty (0 inputs); give at least one input")
    return _joined(xs, source), (None if ys is None else np.concatenate(ys))


def _loader(value: Any) -> Any:
    """A ``DataLoader`` as it is; a ``Dataset`` in a loader of its items in order, 256 at a time."""
    data = import_torch().utils.data
    return value if isinstance(value, data.DataLoader) else data.DataLoader(value, batch_size=256, shuffle=False)


def _read_batches(loader: Any, source: str) -> tuple[list[Any], list[np.ndarray] | None]:
    """Every batch's inputs as NumPy, and their labels (``None`` unless every batch has
    them: the first batch says whether the data is labelled)."""
    xs: list[Any] = []
    ys: list[np.ndarray] = []
    labelled: bool | None = None
    for batch in loader:
        x, y = _split_batch(batch, source)
        xs.append(_inputs_numpy(x, source))
        if labelled is None:
            labelled = y is not None
        if labelled and y is not None:
            ys.append(to_numpy(y))
    return xs, (ys if labelled and len(ys) == len(xs) else None)


def _inputs_numpy(x: Any, source: str) -> Any:
    """One batch's inputs as NumPy: one array, a list of them or a dict by name."""
    parts = _parts(x)
    _check_tensors(x, parts, source)
    if isinstance(parts, dict):
        return {k: to_numpy(v) for k, v in parts.items()}
    if parts is not None:
        return [to_numpy(v) for v in parts]
    return to_numpy(x)


def _check_tensors(x: Any, parts: dict[str, Any] | list[Any] | None, source: str) -> None:
    """Raise unless a batch's inputs ``x`` (split into ``parts``) are tensors or arrays."""
    each = list(parts.values()) if isinstance(parts, dict) else (parts if parts is not None else [x])
    if not each or any(not hasattr(p, "shape") for p in each):
        raise SadlDataError(
            f"{source} yields {type(x).__name__}, not tensors; yield x or (x, y) tensors "
            "(((x1, x2), y) for several inputs)"
        )


def _same_structure(b: Any, first: Any) -> bool:
    """Whether batch ``b``'s inputs have the first batch's structure (type and count)."""
    return type(b) is type(first) and (isinstance(b, np.ndarray) or len(b) == len(first))


def _joined(xs: list[Any], source: str) -> np.ndarray | list[np.ndarray] | dict[str, np.ndarray]:
    first = xs[0]
    if not all(_same_structure(b, first) for b in xs):
        raise SadlDataError(f"{source} yields batches of different structure; yield the same inputs in every batch")
    return _concatenated(xs, first)


def _concatenated(xs: list[Any], first: Any) -> np.ndarray | list[np.ndarray] | dict[str, np.ndarray]:
    """Batches of one structure (the first's) joined: one array, a list or a dict of them."""
    if isinstance(first, dict):
        return {k: np.concatenate([b[k] for b in xs]) for k in first}
    if isinstance(first, list):
        return [np.concatenate([b[i] for b in xs]) for i in range(len(first))]
    return np.concatenate(xs)
