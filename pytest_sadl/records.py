"""What a test fed the model, as plain data: the records every part of the package shares.

:class:`Batch` (the traces of one call, :meth:`Batch.of` a pass's traces and inputs),
:class:`TestRecord` (one test's batches, group, outcome, labels), and what is kept of the
inputs themselves: :func:`input_digests` (a 64-bit digest per input, how labels find their
inputs), :func:`thumbnails` (small images for the reports) and :func:`snippets` (the first
characters of a text input); the inputs' labels (:func:`given_labels` of ``sadl_labels(x,
y)``, :func:`target_labels` of the targets a test gave Keras); and the records' wire format
(:func:`to_bytes`, :func:`from_bytes`: one ``.npz``, no pickles, for pytest-xdist workers
to send to the controller). The recorder (:mod:`pytest_sadl.plugin.recorder`) makes them,
the engine and ``sadl select`` read them; NumPy only, no pytest and no backend.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

THUMB_MAX = 32  # thumbnails of image-like inputs are at most this many pixels a side
# Batch.of keeps a snapshot of numeric inputs of at most this many bytes a row (or twice the
# row's traces, if more) and makes their thumbnails and digests when first read (the
# session's end), not in the recorded call; larger inputs are digested in the call.
DEFER_ROW_BYTES = 4096
_KEEP_LOCK = threading.Lock()


class _Kept:
    """A :class:`Batch` field made from its inputs (thumbnails, digests, snippets): when
    :meth:`Batch.of` deferred it, made from the inputs' snapshot on first read or write."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return None  # the dataclass field's default
        if "_inputs" in obj.__dict__:
            obj._keep()
        return obj.__dict__.get(self.slot)

    def __set__(self, obj: Any, value: Any) -> None:
        if "_inputs" in obj.__dict__:
            obj._keep()
        obj.__dict__[self.slot] = value


@dataclass
class Batch:
    """The traces of one call to the model."""

    sa: np.ndarray  # (n, d) float32
    coverage: list[np.ndarray]  # per coverage layer (n, c) float32
    pred: np.ndarray  # (n,) int64, or (n, k) float32 for a regression model
    thumbs: np.ndarray | None = _Kept()  # type: ignore[assignment]  # (n, h, w, c) uint8 for image-like inputs
    # per coverage layer, the per-input (min, max) over its whole output (conv maps), or None
    extrema: list[tuple[np.ndarray, np.ndarray] | None] | None = None
    output: np.ndarray | None = None  # (n, k) float32: a classifier's outputs (the confidence baselines)
    # (n,) uint64: each input's digest (input_digests), None if unhashable
    digests: np.ndarray | None = _Kept()  # type: ignore[assignment]
    texts: np.ndarray | None = _Kept()  # type: ignore[assignment]  # (n,) str: a snippet of each text input

    def __len__(self) -> int:
        return int(self.sa.shape[0])

    @classmethod
    def of(cls, traces: Any, x: Any, *, channels_first: bool = False) -> Batch:
        """The batch of one pass: its traces (a :class:`~pytest_sadl.capture.Traces`) as
        float32, with what is kept of its inputs ``x`` (thumbnails of images, else snippets
        of text; each input's digest when there is one per trace); ``channels_first``: image
        inputs are ``(n, c, h, w)``, as a native PyTorch model takes them."""
        sa = np.asarray(traces.sa, dtype=np.float32)
        pred = np.asarray(traces.pred)
        batch = cls(
            sa=sa,
            coverage=[np.asarray(c, dtype=np.float32) for c in traces.coverage],
            pred=pred,
            extrema=getattr(traces, "coverage_extrema", None),
            output=np.asarray(traces.output, dtype=np.float32) if pred.ndim == 1 else None,
        )
        snapshot = _snapshot(x, max(DEFER_ROW_BYTES, 2 * batch.row_bytes()))
        if snapshot is None:
            batch._kept_of(x, channels_first)
        else:  # the thumbnails and digests of a copy, when first read
            batch.__dict__["_inputs"] = (snapshot, channels_first)
        return batch

    def row_bytes(self) -> int:
        """The bytes of one input's traces (SA and coverage)."""
        return (
            int(self.sa.itemsize * self.sa[0].size + sum(c.itemsize * c[0].size for c in self.coverage))
            if len(self)
            else 0
        )

    def _kept_of(self, x: Any, channels_first: bool) -> None:
        """The thumbnails (else text snippets) and digests of the inputs ``x``."""
        thumbs = thumbnails(x, channels_first=channels_first)
        digests = input_digests(x)
        self.__dict__["_thumbs"] = thumbs
        self.__dict__["_digests"] = digests if digests is not None and len(digests) == len(self) else None
        self.__dict__["_texts"] = None if thumbs is not None else snippets(x)

    def _keep(self) -> None:
        """Make what :meth:`of` deferred, from the inputs' snapshot (once, in any thread)."""
        with _KEEP_LOCK:
            pending = self.__dict__.pop("_inputs", None)
            if pending is not None:
                self._kept_of(*pending)

    def finite(self) -> np.ndarray:
        """``(n,)`` bool: the inputs whose SA and coverage traces hold no NaN/inf (each
        array checked whole first: per row only when one holds any, as a row-wise ``all``
        of short rows costs ~10x the whole-array one)."""
        if np.isfinite(self.sa).all() and all(np.isfinite(c).all() for c in self.coverage):
            return np.ones(len(self), dtype=bool)
        ok: np.ndarray = np.isfinite(self.sa).all(axis=1)
        for c in self.coverage:
            ok &= np.isfinite(c).all(axis=1)
        return ok

    def take(self, rows: np.ndarray) -> Batch:
        """The batch of the inputs ``rows`` (indices) only."""

        def pick(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[rows]

        extrema = self.extrema
        if extrema is not None:
            extrema = [None if e is None else (e[0][rows], e[1][rows]) for e in extrema]
        return Batch(
            sa=self.sa[rows],
            coverage=[c[rows] for c in self.coverage],
            pred=self.pred[rows],
            thumbs=pick(self.thumbs),
            extrema=extrema,
            output=pick(self.output),
            digests=pick(self.digests),
            texts=pick(self.texts),
        )


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
        return _joined_digests(_each_input(x))
    raw = _as_array(x)
    if raw is None:
        return None
    text = _text_digests(raw) if raw.ndim and raw.dtype.kind in "USO" else None
    if text is not None:
        return text
    return _number_digests(raw)


def _each_input(x: dict[Any, Any] | list[Any] | tuple[Any, ...]) -> list[np.ndarray | None]:
    """:func:`input_digests` of each of several inputs: a dict's by sorted name, a list's in order."""
    parts = [x[k] for k in sorted(x)] if isinstance(x, dict) else list(x)
    return [input_digests(p) for p in parts]


def _joined_digests(each: list[np.ndarray | None]) -> np.ndarray | None:
    """The digests of rows across several inputs, from each input's own digests."""
    parts = [p for p in each if p is not None]
    if not _aligned(parts, len(each)):
        return None
    joined = np.ascontiguousarray(np.stack(parts, axis=1))
    return np.array(
        [int.from_bytes(hashlib.blake2b(row.tobytes(), digest_size=8).digest(), "little") for row in joined],
        dtype=np.uint64,
    )


def _aligned(parts: list[np.ndarray], inputs: int) -> bool:
    """Whether every one of ``inputs`` inputs has digests (``parts``), one per row of the same rows."""
    return bool(parts) and len(parts) == inputs and all(len(p) == len(parts[0]) for p in parts)


def _number_digests(raw: np.ndarray) -> np.ndarray | None:
    """:func:`input_digests` of numbers: each row as C-ordered float32, keyed by the row's shape."""
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
        return _first_of(x, snippets)
    from pytest_sadl.capture.data import is_text

    arr = _as_array(x)
    if arr is None or arr.ndim == 0 or arr.shape[0] == 0 or not is_text(arr):
        return None
    rows = [_snippet(row) for row in arr.reshape(arr.shape[0], -1)]
    return np.array(rows, dtype=f"<U{SNIPPET_MAX}")


def _snippet(row: np.ndarray) -> str:
    """One text input's strings joined by `` | ``, white space collapsed, cut at ``SNIPPET_MAX``."""
    from pytest_sadl.capture.data import text_bytes

    text = " | ".join(text_bytes(v).decode("utf-8", "replace") for v in row)
    text = " ".join(text.split())
    return text if len(text) <= SNIPPET_MAX else text[: SNIPPET_MAX - 1] + "\u2026"


def _first_of(
    x: dict[Any, Any] | list[Any] | tuple[Any, ...], each: Callable[[Any], np.ndarray | None]
) -> np.ndarray | None:
    """``each`` of the first of several inputs (a dict's values, a list's items) it gives one for."""
    parts = list(x.values()) if isinstance(x, dict) else list(x)
    return next((t for t in (each(p) for p in parts) if t is not None), None)


def _as_array(x: Any) -> np.ndarray | None:
    """``np.asarray(x)``, ``None`` when ``x`` is no array."""
    try:
        return np.asarray(x)
    except Exception:
        return None


def thumbnails(x: Any, *, channels_first: bool = False) -> np.ndarray | None:
    """uint8 thumbnails ``(n, h, w, c)`` of image-like inputs (``(n, h, w)``, ``(n, h, w, 1|3|4)``,
    or with ``channels_first`` PyTorch's ``(n, 1|3|4, h, w)``), each min-max scaled on its
    own and strided down to at most ``THUMB_MAX`` pixels a side. Of several inputs (a dict
    or list), the first image-like one."""
    if isinstance(x, (dict, list, tuple)):
        return _first_of(x, lambda p: thumbnails(p, channels_first=channels_first))
    arr = _image(x, channels_first)
    if arr is None:
        return None
    step = max(1, -(-max(arr.shape[1:3]) // THUMB_MAX))
    small = arr[:, ::step, ::step, : min(arr.shape[-1], 3)].astype(np.float32)
    lo = small.min(axis=(1, 2, 3), keepdims=True)
    hi = small.max(axis=(1, 2, 3), keepdims=True)
    span = np.where(hi > lo, hi - lo, 1.0)
    scaled: np.ndarray = np.round((small - lo) / span * 255)
    return scaled.astype(np.uint8)


def _image(x: Any, channels_first: bool) -> np.ndarray | None:
    """``x`` as images ``(n, h, w, 1|3|4)`` (channels last), or ``None`` when it is not image-like."""
    arr = _as_array(x)
    if arr is None or not _batch_of_grids(arr):
        return None
    arr = _channels_last(arr, channels_first)
    if arr is None or arr.shape[-1] not in (1, 3, 4) or min(arr.shape[1:3]) < 2:
        return None
    return arr


def _batch_of_grids(arr: np.ndarray) -> bool:
    """Whether ``arr`` is a non-empty batch of numeric 2-D or 3-D inputs (perhaps images)."""
    return arr.dtype.kind in "fiub" and arr.ndim in (3, 4) and arr.shape[0] > 0


def _channels_last(arr: np.ndarray, channels_first: bool) -> np.ndarray | None:
    """Images ``(n, h, w, c)``: grey ``(n, h, w)`` given a channel, PyTorch's ``(n, c, h, w)``
    transposed (``None`` when its channels are not 1, 3 or 4)."""
    if channels_first and arr.ndim == 4:
        if arr.shape[1] not in (1, 3, 4):
            return None
        return np.transpose(arr, (0, 2, 3, 1))
    return arr[..., None] if arr.ndim == 3 else arr


def _snapshot(x: Any, row_limit: int) -> Any:
    """A copy of numeric inputs ``x`` (an array on the host, or a dict, list or tuple of
    them) of at most ``row_limit`` bytes a row, else ``None`` (anything else)."""
    if isinstance(x, (dict, list, tuple)):
        return _snapshot_parts(x, row_limit)
    if not _numeric_rows(x) or x.nbytes // len(x) > row_limit:
        return None
    return np.array(x, copy=True)


def _numeric_rows(x: Any) -> bool:
    """Whether ``x`` is a host array of numbers with at least one row."""
    return isinstance(x, np.ndarray) and x.dtype.kind in "fiub" and x.ndim > 0 and len(x) > 0


def _snapshot_parts(x: dict[Any, Any] | list[Any] | tuple[Any, ...], row_limit: int) -> Any:
    """:func:`_snapshot` of several inputs: all of them, of at most ``row_limit`` bytes a row together."""
    each = [_snapshot(v, row_limit) for v in (x.values() if isinstance(x, dict) else x)]
    if not each or any(v is None for v in each) or _row_bytes(each) > row_limit:
        return None
    return dict(zip(x, each, strict=True)) if isinstance(x, dict) else tuple(each)


def _row_bytes(arrays: list[np.ndarray]) -> int:
    """The bytes of one row across ``arrays``."""
    return sum(v.nbytes // len(v) for v in arrays)


# ----------------------------------------------------------------------------- labels


def given_labels(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    """``sadl_labels(x, y)``: the digests of the inputs ``x`` and their labels ``y`` as
    ``(n, k)`` float64; ``ValueError`` naming what is wrong with ``x`` or ``y``."""
    digests = input_digests(x)
    if digests is None:
        raise ValueError("sadl_labels(x, y): x must be an array of the inputs, numbers or strings (one row per input)")
    labels = np.asarray(y)
    if labels.dtype.kind not in "biuf" or labels.ndim == 0 or labels.shape[0] != digests.shape[0]:
        raise ValueError(
            f"sadl_labels(x, y): y must hold one numeric label per input of x ({digests.shape[0]}), "
            f"got shape {labels.shape} of dtype {labels.dtype}; pass class ids, not one-hot rows, for a classifier"
        )
    return digests, labels.reshape(labels.shape[0], -1).astype(np.float64)


def target_labels(y: Any, *, n: int, classifier: bool, output: str, outputs: list[str]) -> np.ndarray | None:
    """The labels ``(n, k)`` float64 of ``n`` inputs from the targets ``y`` a test gave Keras
    (``evaluate(x, y)``, a dataset's ``(x, y)``): class ids for a classifier (one-hot or
    soft rows become their argmax), the target values for a regression model; of a model
    with several outputs, the measured ``output``'s targets (``y`` a dict by output name
    or a list in ``outputs`` order). ``None`` when ``y`` holds no numeric target per input."""
    arr = _target_rows(_measured_targets(y, output, outputs), n)
    if arr is None:
        return None
    if classifier and arr.shape[1] > 1:  # one-hot (categorical_crossentropy) or soft labels
        arr = np.argmax(arr, axis=1).reshape(n, 1)
    return arr.astype(np.float64)


def _target_rows(y: Any, n: int) -> np.ndarray | None:
    """``y`` as ``(n, k)`` numbers, one row per input; ``None`` when it is not that."""
    arr = None if y is None else _as_array(y)
    if arr is None or arr.dtype.kind not in "biuf" or arr.ndim == 0 or arr.shape[0] != n:
        return None
    return arr.reshape(n, -1)


def _measured_targets(y: Any, output: str, outputs: list[str]) -> Any:
    """The measured ``output``'s targets of a model's ``y``: by name from a dict, by place
    from a list of one per output (``None`` when it is not one per output); else ``y``."""
    if isinstance(y, dict):
        return y.get(output)
    if isinstance(y, (list, tuple)) and len(outputs) > 1:
        return y[outputs.index(output)] if len(y) == len(outputs) else None
    return y


# ----------------------------------------------------------------------------- the wire format

# A batch's optional arrays: the .npz key prefix of each, and the Batch field it fills.
_OPTIONAL = (("thumbs", "thumbs"), ("output", "output"), ("digests", "digests"), ("texts", "texts"))


def to_bytes(records: Iterable[TestRecord]) -> bytes:
    """``records`` as one ``.npz`` (no pickles: text snippets are a ``str`` array), for
    pytest-xdist workers to send to the controller; :func:`from_bytes` reads it back."""
    arrays: dict[str, np.ndarray] = {}
    meta = []
    for r, rec in enumerate(records):
        meta.append(_meta(rec))
        for j, (digests, values) in enumerate(rec.labels):
            arrays[f"labeldig_{r}_{j}"], arrays[f"labelval_{r}_{j}"] = digests, values
        for b, batch in enumerate(rec.batches):
            _put_batch(arrays, f"{r}_{b}", batch)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]  # the keys are array names, never savez's allow_pickle
    return buf.getvalue()


def _meta(rec: TestRecord) -> dict[str, Any]:
    """What the wire format keeps of a record besides its arrays."""
    return {
        "nodeid": rec.nodeid,
        "index": rec.index,
        "group": rec.group,
        "outcome": rec.outcome,
        "attempt": rec.attempt,
        "stale": rec.stale,
        "batches": len(rec.batches),
        "layers": len(rec.batches[0].coverage) if rec.batches else 0,
        "labels": len(rec.labels),
    }


def _put_batch(arrays: dict[str, np.ndarray], key: str, batch: Batch) -> None:
    arrays[f"sa_{key}"] = batch.sa
    arrays[f"pred_{key}"] = batch.pred
    for i, cov in enumerate(batch.coverage):
        arrays[f"cov_{key}_{i}"] = cov
        ext = None if batch.extrema is None else batch.extrema[i]
        if ext is not None:
            arrays[f"min_{key}_{i}"], arrays[f"max_{key}_{i}"] = ext
    for prefix, name in _OPTIONAL:
        value = getattr(batch, name)
        if value is not None:
            arrays[f"{prefix}_{key}"] = value


def from_bytes(data: bytes) -> list[TestRecord]:
    """The records of a :func:`to_bytes` ``.npz``."""
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        meta = json.loads(npz["meta"].tobytes().decode())
        out = []
        for r, m in enumerate(meta):
            rec = TestRecord(
                m["nodeid"],
                m["index"],
                m["group"],
                m["outcome"],
                attempt=int(m.get("attempt", 1)),
                stale=bool(m.get("stale", False)),
            )
            rec.labels = [(npz[f"labeldig_{r}_{j}"], npz[f"labelval_{r}_{j}"]) for j in range(m.get("labels", 0))]
            rec.batches = [_read_batch(npz, f"{r}_{b}", m["layers"]) for b in range(m["batches"])]
            out.append(rec)
    return out


def _read_batch(npz: Any, key: str, layers: int) -> Batch:
    def get(name: str) -> np.ndarray | None:
        return npz[name] if name in npz.files else None

    return Batch(
        npz[f"sa_{key}"],
        [npz[f"cov_{key}_{i}"] for i in range(layers)],
        npz[f"pred_{key}"],
        extrema=_read_extrema(npz, key, layers),
        **{name: get(f"{prefix}_{key}") for prefix, name in _OPTIONAL},
    )


def _read_extrema(npz: Any, key: str, layers: int) -> list[tuple[np.ndarray, np.ndarray] | None] | None:
    """A batch's per-layer ``(min, max)`` (``None`` for a layer without), ``None`` when no layer has them."""
    extrema = [
        (npz[f"min_{key}_{i}"], npz[f"max_{key}_{i}"]) if f"min_{key}_{i}" in npz.files else None for i in range(layers)
    ]
    return extrema if any(e is not None for e in extrema) else None
