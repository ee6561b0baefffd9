"""What a test fed the model, as plain data: the records every part of the package shares.

:class:`Batch` (the traces of one call), :class:`TestRecord` (one test's batches, group,
outcome, labels), and what is kept of the inputs themselves: :func:`input_digests` (a
64-bit digest per input, how labels find their inputs), :func:`thumbnails` (small images
for the reports) and :func:`snippets` (the first characters of a text input). The recorder
(:mod:`pytest_sadl.plugin.recorder`) makes them, the engine and ``sadl select`` read them;
NumPy only, no pytest and no backend.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

THUMB_MAX = 32  # thumbnails of image-like inputs are at most this many pixels a side


@dataclass
class Batch:
    """The traces of one call to the model."""

    sa: np.ndarray  # (n, d) float32
    coverage: list[np.ndarray]  # per coverage layer (n, c) float32
    pred: np.ndarray  # (n,) int64, or (n, k) float32 for a regression model
    thumbs: np.ndarray | None = None  # (n, h, w, c) uint8 for image-like inputs
    # per coverage layer, the per-input (min, max) over its whole output (conv maps), or None
    extrema: list[tuple[np.ndarray, np.ndarray] | None] | None = None
    output: np.ndarray | None = None  # (n, k) float32: a classifier's outputs (the confidence baselines)
    digests: np.ndarray | None = None  # (n,) uint64: each input's digest (input_digests), None if unhashable
    texts: np.ndarray | None = None  # (n,) str: a short snippet of each text input (raw-string models)

    def __len__(self) -> int:
        return int(self.sa.shape[0])


@dataclass
class TestRecord:
    """What one test fed the model."""

    __test__ = False  # not a pytest test class, despite the name

    nodeid: str
    index: int  # position in the collection order: runs merge in this order
    group: str
    outcome: str = "passed"
    batches: list[Batch] = field(default_factory=list)
    # which run of the test this is (pytest-rerunfailures runs a failed test again): only
    # the last counts, so a later attempt's record replaces an earlier one's
    attempt: int = 1
    # sadl_labels(x, y): (digests of x's rows, y) pairs, matched to recorded inputs by digest
    labels: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    # measured on a model that had changed since the profile's was bound (fit, set_weights):
    # left out of every metric, reported apart
    stale: bool = False

    @property
    def n_inputs(self) -> int:
        return sum(len(b) for b in self.batches)


def input_digests(x: Any) -> np.ndarray | None:
    """A 64-bit digest of each input (row of ``x``): BLAKE2b of its shape and its values as
    C-ordered float32, so the same values match whether they arrive as float64, float32 or a
    tensor (raw text: each row's strings as UTF-8, ``str`` or ``bytes`` alike). How
    ``sadl_labels(x, y)`` finds the recorded inputs its labels belong to, and how the reports
    tell one input fed by several tests from several inputs. ``None`` when ``x`` is neither
    a numeric array nor one of strings. Several inputs (a dict, by sorted name, or a list) digest each
    row across all of them."""
    if isinstance(x, (dict, list, tuple)):
        each = [input_digests(x[k]) for k in sorted(x)] if isinstance(x, dict) else [input_digests(p) for p in x]
        parts = [p for p in each if p is not None]
        if not parts or len(parts) != len(each) or any(len(p) != len(parts[0]) for p in parts):
            return None
        joined = np.ascontiguousarray(np.stack(parts, axis=1))
        return np.array(
            [int.from_bytes(hashlib.blake2b(row.tobytes(), digest_size=8).digest(), "little") for row in joined],
            dtype=np.uint64,
        )
    try:
        raw = np.asarray(x)
    except Exception:
        return None
    text = _text_digests(raw) if raw.ndim and raw.dtype.kind in "USO" else None
    if text is not None:
        return text
    try:
        arr = np.ascontiguousarray(raw, dtype=np.float32)
    except Exception:
        return None
    if arr.ndim == 0:
        return None
    rows = arr.reshape(arr.shape[0], -1)
    shape = repr(tuple(arr.shape[1:])).encode()
    out = np.empty(arr.shape[0], dtype=np.uint64)
    for i, row in enumerate(rows):
        out[i] = int.from_bytes(hashlib.blake2b(row.tobytes(), digest_size=8, key=shape[:64]).digest(), "little")
    return out


def _text_digests(x: np.ndarray) -> np.ndarray | None:
    """:func:`input_digests` of raw text (a text model's inputs): each row's strings as
    UTF-8, so ``str`` from NumPy and ``bytes`` from a TensorFlow string tensor match;
    ``None`` for objects that are not all strings."""
    from pytest_sadl.capture.data import is_text, text_rows

    if not is_text(x):
        return None
    return np.array(
        [int.from_bytes(hashlib.blake2b(row, digest_size=8, key=b"text").digest(), "little") for row in text_rows(x)],
        dtype=np.uint64,
    )


SNIPPET_MAX = 80  # characters of a text input the reports show in place of a thumbnail


def snippets(x: Any) -> np.ndarray | None:
    """``(n,)`` str: the start of each text input (its strings joined by `` | ``, cut at
    ``SNIPPET_MAX`` characters with an ellipsis), for inputs that are strings; of several
    inputs, the first that is text; ``None`` for anything else."""
    if isinstance(x, (dict, list, tuple)):
        parts = list(x.values()) if isinstance(x, dict) else list(x)
        return next((t for t in (snippets(p) for p in parts) if t is not None), None)
    from pytest_sadl.capture.data import is_text, text_bytes

    try:
        arr = np.asarray(x)
    except Exception:
        return None
    if arr.ndim == 0 or arr.shape[0] == 0 or not is_text(arr):
        return None
    rows = []
    for row in arr.reshape(arr.shape[0], -1):
        text = " | ".join(text_bytes(v).decode("utf-8", "replace") for v in row)
        text = " ".join(text.split())
        rows.append(text if len(text) <= SNIPPET_MAX else text[: SNIPPET_MAX - 1] + "\u2026")
    return np.array(rows, dtype=f"<U{SNIPPET_MAX}")


def thumbnails(x: Any, *, channels_first: bool = False) -> np.ndarray | None:
    """uint8 thumbnails ``(n, h, w, c)`` of image-like inputs (``(n, h, w)``, ``(n, h, w, 1|3|4)``,
    or with ``channels_first`` PyTorch's ``(n, 1|3|4, h, w)``), each min-max scaled on its
    own and strided down to at most ``THUMB_MAX`` pixels a side. Of several inputs (a dict
    or list), the first image-like one."""
    if isinstance(x, (dict, list, tuple)):
        parts = list(x.values()) if isinstance(x, dict) else list(x)
        return next((t for t in (thumbnails(p, channels_first=channels_first) for p in parts) if t is not None), None)
    try:
        arr = np.asarray(x)
    except Exception:
        return None
    if arr.dtype.kind not in "fiub" or arr.ndim not in (3, 4) or arr.shape[0] == 0:
        return None
    if channels_first and arr.ndim == 4:
        if arr.shape[1] not in (1, 3, 4):
            return None
        arr = arr.transpose(0, 2, 3, 1)
    if arr.ndim == 3:
        arr = arr[..., None]
    if arr.shape[-1] not in (1, 3, 4) or min(arr.shape[1:3]) < 2:
        return None
    step = max(1, -(-max(arr.shape[1:3]) // THUMB_MAX))
    small = arr[:, ::step, ::step, : min(arr.shape[-1], 3)].astype(np.float32)
    lo = small.min(axis=(1, 2, 3), keepdims=True)
    hi = small.max(axis=(1, 2, 3), keepdims=True)
    span = np.where(hi > lo, hi - lo, 1.0)
    scaled: np.ndarray = np.round((small - lo) / span * 255)
    return scaled.astype(np.uint8)
