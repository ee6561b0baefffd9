"""Which test fed which inputs to the model, in which group.

While a test marked ``@pytest.mark.sadl`` runs (its call phase, not its fixtures), the
model's ``predict``, ``predict_on_batch`` and ``__call__`` are wrapped: each runs the
model's own multi-output twin (:class:`~pytest_sadl.capture.TraceModel`), returns the
model's output to the test unchanged, and keeps the traces of the same forward pass, so
recording costs no second inference. ``__call__`` keeps gradients flowing
(``tf.GradientTape`` around ``model(x)`` works as before). Calls with ``training=True``
and calls on symbolic tensors (inside ``tf.function``, ``jax.jit``) are passed through
unrecorded. A model with several inputs is recorded from a dict keyed by input name or a
list in ``model.inputs`` order, row by row across all its inputs.

A recorded call behaves as the plain call: an empty batch runs the model's own method
(nothing to record), and an input the trace model refuses runs the plain call too, so
the test sees the model's own output or the model's own exception (a
:class:`SadlRecordingWarning` when the model took what the plugin could not record).

Threads: calls from threads a test starts count for that test. "The running test" is
process-wide (pytest runs one test at a time per process): :attr:`Recorder.current`
is set for the test's call phase and read once at the start of each call, so a call
is attributed to the test during which it began. What is per thread is only whether
the thread is inside a pass already (the trace model calls the model; Keras' own
``predict`` calls ``self(x)``): those nested calls are not a test's. One lock
serialises the recorded model's calls and the recorder's shared state, so no append is
lost and the layers a pass taps are never tapped by two threads at once.

No backend is imported here: the trace model (:mod:`pytest_sadl.capture`) runs the pass.

Only plain data leaves this module: :class:`TestRecord` with NumPy arrays, serialisable
to bytes (``.npz``, no pickles) for pytest-xdist workers to send to the controller.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytest_sadl.errors import SadlRecordingWarning

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

    @property
    def n_inputs(self) -> int:
        return sum(len(b) for b in self.batches)


def input_digests(x: Any) -> np.ndarray | None:
    """A 64-bit digest of each input (row of ``x``): BLAKE2b of its shape and its values as
    C-ordered float32, so the same values match whether they arrive as float64, float32 or a
    tensor. How ``sadl_labels(x, y)`` finds the recorded inputs its labels belong to, and how
    the reports tell one input fed by several tests from several inputs. ``None`` when ``x``
    is not a numeric array. Several inputs (a dict, by sorted name, or a list) digest each
    row across all of them."""
    if isinstance(x, (dict, list, tuple)):
        parts = [input_digests(x[k]) for k in sorted(x)] if isinstance(x, dict) else [input_digests(p) for p in x]
        if not parts or any(p is None or len(p) != len(parts[0]) for p in parts):
            return None
        joined = np.ascontiguousarray(np.stack(parts, axis=1))  # type: ignore[arg-type]
        return np.array(
            [int.from_bytes(hashlib.blake2b(row.tobytes(), digest_size=8).digest(), "little") for row in joined],
            dtype=np.uint64,
        )
    try:
        arr = np.ascontiguousarray(np.asarray(x), dtype=np.float32)
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


def thumbnails(x: Any) -> np.ndarray | None:
    """uint8 thumbnails ``(n, h, w, c)`` of image-like inputs (``(n, h, w)``, ``(n, h, w, 1|3|4)``),
    each min-max scaled on its own and strided down to at most ``THUMB_MAX`` pixels a side.
    Of several inputs (a dict or list), the first image-like one."""
    if isinstance(x, (dict, list, tuple)):
        parts = list(x.values()) if isinstance(x, dict) else list(x)
        return next((t for t in map(thumbnails, parts) if t is not None), None)
    try:
        arr = np.asarray(x)
    except Exception:
        return None
    if arr.dtype.kind not in "fiub" or arr.ndim not in (3, 4) or arr.shape[0] == 0:
        return None
    if arr.ndim == 3:
        arr = arr[..., None]
    if arr.shape[-1] not in (1, 3, 4) or min(arr.shape[1:3]) < 2:
        return None
    step = max(1, -(-max(arr.shape[1:3]) // THUMB_MAX))
    small = arr[:, ::step, ::step, : min(arr.shape[-1], 3)].astype(np.float32)
    lo = small.min(axis=(1, 2, 3), keepdims=True)
    hi = small.max(axis=(1, 2, 3), keepdims=True)
    span = np.where(hi > lo, hi - lo, 1.0)
    return np.round((small - lo) / span * 255).astype(np.uint8)


class Recorder:
    """Collects :class:`TestRecord` objects for a session (safe to call from many threads)."""

    def __init__(self, trace_model_factory: Any) -> None:
        self._factory = trace_model_factory  # model -> TraceModel
        self._trace_models: dict[int, Any] = {}
        self.records: dict[str, TestRecord] = {}
        #: the running test's record (process-wide: pytest runs one test at a time here)
        self.current: TestRecord | None = None
        self._warned: set[str] = set()
        self.messages: list[str] = []  # warnings worth a line in the reports
        self._models: set[int] = set()
        # The recorder's shared state and every call of the recorded model: reentrant, as
        # a pass calls the model (and Keras' predict calls self(x)) in the same thread.
        self._lock = threading.RLock()
        self._local = threading.local()  # .depth: this thread is inside a pass

    # -- set-up ---------------------------------------------------------------

    def trace_model(self, model: Any) -> Any:
        """The trace model of ``model`` (one at a time: a new model object replaces the last)."""
        with self._lock:
            key = id(model)
            tm = self._trace_models.get(key)
            if tm is None or tm.model is not model:
                tm = self._factory(model)
                self._trace_models = {key: tm}
                self._models.add(key)
                if len(self._models) == 2:
                    self._warn_once(
                        "models",
                        "pytest-sadl: marked tests used more than one model object (a sadl_model fixture "
                        "that is not session-scoped?); all inputs are measured against one training "
                        "profile, so give every marked test the same model",
                    )
            return tm

    def record_for(self, nodeid: str, index: int, group: str, attempt: int = 1) -> TestRecord:
        """The record of ``nodeid``'s run number ``attempt``; an earlier attempt's is dropped."""
        with self._lock:
            rec = self.records.get(nodeid)
            if rec is None or rec.attempt < attempt:
                rec = self.records[nodeid] = TestRecord(nodeid, index, group, attempt=attempt)
            return rec

    def _warn_once(self, key: str, message: str) -> None:
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
            self.messages.append(message)
        warnings.warn(message, SadlRecordingWarning, stacklevel=4)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Run the model's own methods unrecorded in this thread (Keras' predict calls
        ``self(x)`` inside; the trace model calls the model). Other threads still record."""
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth

    def target(self) -> TestRecord | None:
        """The record a call made now, from this thread, belongs to: the running test's,
        unless this thread is inside a pass (a nested call is not a test's)."""
        return None if getattr(self._local, "depth", 0) else self.current

    # -- recording ------------------------------------------------------------

    def add(self, traces: Any, x: Any, record: TestRecord | None = None) -> None:
        """Keep ``traces`` (a :class:`~pytest_sadl.capture.Traces`) for ``record`` (default:
        the running test's)."""
        rec = record if record is not None else self.current
        if rec is None:
            return
        sa = np.asarray(traces.sa, dtype=np.float32)
        coverage = [np.asarray(c, dtype=np.float32) for c in traces.coverage]
        extrema = getattr(traces, "coverage_extrema", None)
        finite = np.isfinite(sa).all(axis=1)
        for c in coverage:
            finite &= np.isfinite(c).all(axis=1)
        thumbs = thumbnails(x)
        pred = np.asarray(traces.pred)
        digests = input_digests(x)
        if digests is not None and len(digests) != len(sa):
            digests = None
        output = np.asarray(traces.output, dtype=np.float32) if pred.ndim == 1 else None
        if not finite.all():
            self._warn_once(
                "nonfinite",
                f"pytest-sadl: {int((~finite).sum())} input(s) of {rec.nodeid} gave NaN/inf "
                "activations; they are not counted",
            )
            keep = np.flatnonzero(finite)
            sa, pred, coverage = sa[keep], pred[keep], [c[keep] for c in coverage]
            thumbs = None if thumbs is None else thumbs[keep]
            digests = None if digests is None else digests[keep]
            output = None if output is None else output[keep]
            if extrema is not None:
                extrema = [None if e is None else (e[0][keep], e[1][keep]) for e in extrema]
        if len(sa):
            batch = Batch(sa=sa, coverage=coverage, pred=pred, thumbs=thumbs, extrema=extrema, output=output, digests=digests)
            with self._lock:
                rec.batches.append(batch)

    def add_labels(self, x: Any, y: Any, record: TestRecord | None = None) -> None:
        """``sadl_labels(x, y)``: the true labels ``y`` of the inputs ``x``, for ``record``
        (default: the running test's)."""
        rec = record if record is not None else self.current
        if rec is None:
            raise RuntimeError("sadl_labels(x, y) is for tests marked @pytest.mark.sadl, while they run")
        digests = input_digests(x)
        if digests is None:
            raise ValueError("sadl_labels(x, y): x must be a numeric array of the inputs (one row per input)")
        labels = np.asarray(y)
        if labels.dtype.kind not in "biuf" or labels.ndim == 0 or labels.shape[0] != digests.shape[0]:
            raise ValueError(
                f"sadl_labels(x, y): y must hold one numeric label per input of x ({digests.shape[0]}), "
                f"got shape {labels.shape} of dtype {labels.dtype}; pass class ids, not one-hot rows, for a classifier"
            )
        with self._lock:
            rec.labels.append((digests, labels.reshape(labels.shape[0], -1).astype(np.float64)))

    def record_inputs(self, model: Any, x: Any, batch_size: int = 256, record: TestRecord | None = None) -> None:
        """``sadl_record(x)``: trace ``x`` now and keep it for ``record`` (default: the running test's)."""
        rec = record if record is not None else self.current
        tm = self.trace_model(model)
        with self._lock, self.paused():
            traces = tm.traces(x, batch_size=batch_size, what="sadl_record(x)")
        self.add(traces, x, rec)

    def _attempt(self, rec: TestRecord | None, x: Any, plain: Callable[[], Any], recorded: Callable[[], tuple[Any, Any]]) -> Any:
        """One call of the recorded model: ``recorded()`` (the output and its traces, kept
        for ``rec``), or ``plain()`` where there is nothing to record or the plugin cannot
        record it, so the caller sees what the plain call gives: an empty batch's output,
        the model's own exception for an input it rejects."""
        with self._lock:
            if rec is None or _rows(x) == 0:
                with self.paused():
                    return plain()
            failure: Exception | None = None
            try:
                with self.paused():
                    out, traces = recorded()
            except Exception as exc:  # bad input, or one the trace model cannot take
                failure = exc
            else:
                self.add(traces, x, rec)
                return out
            with self.paused():  # outside the except block: the model's own error, unchained
                out = plain()
            why = " ".join(f"{type(failure).__name__}: {failure}".split())[:300]
            self._warn_once(
                f"failed:{type(failure).__name__}",
                f"pytest-sadl: an input the model accepts could not be recorded ({why}); it ran unrecorded (use sadl_record(x))",
            )
            return out

    @contextlib.contextmanager
    def recording(self, record: TestRecord, model: Any) -> Iterator[None]:
        """Wrap ``model``'s entry points while the block runs; restore them after."""
        tm = self.trace_model(model)
        if getattr(tm, "records", "keras") == "forward":  # a torch.nn.Module
            with self._recording_forward(record, model, tm):
                yield
            return
        original_cls = type(model)
        recorder = self

        def unrecorded(why: str, method: Any, *args: Any, **kwargs: Any) -> Any:
            recorder._warn_once(why, f"pytest-sadl: {why}; those inputs ran unrecorded (use sadl_record(x))")
            with recorder._lock, recorder.paused():
                return method(model, *args, **kwargs)

        def predict(x: Any, batch_size: Any = None, verbose: Any = "auto", steps: Any = None, callbacks: Any = None, **kw: Any) -> Any:
            rec = recorder.target()
            plain = lambda: original_cls.predict(model, x, batch_size=batch_size, verbose=verbose, steps=steps, callbacks=callbacks, **kw)  # noqa: E731
            if rec is not None and (kw or steps is not None or not _is_inputs(x) or not _finite(x)):
                why = "model.predict() was called with steps, a generator, non-finite values or other arguments"
                return unrecorded(why, original_cls.predict, x, batch_size=batch_size, verbose=verbose, steps=steps, callbacks=callbacks, **kw)
            return recorder._attempt(rec, x, plain, lambda: tm.call_and_trace(x, batch_size=batch_size or 32))

        def predict_on_batch(x: Any) -> Any:
            rec = recorder.target()
            if rec is not None and (not _is_inputs(x) or not _finite(x)):
                return unrecorded("model.predict_on_batch() got a non-array or non-finite input", original_cls.predict_on_batch, x)
            return recorder._attempt(rec, x, lambda: original_cls.predict_on_batch(model, x), lambda: tm.call_and_trace(x))

        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            rec = recorder.target() if self is model else None
            if rec is None:
                return original_cls.__call__(self, *args, **kwargs)
            return recorder._call(rec, tm, original_cls, self, args, kwargs)

        # The same name, qualname and module as the model's class, so that Keras serialises
        # (model.save) and prints it as before; only __call__ differs.
        recorded_cls = type(
            original_cls.__name__,
            (original_cls,),
            {"__call__": call, "__module__": original_cls.__module__, "__qualname__": original_cls.__qualname__, "_sadl_recording": True},
        )
        self.current = record
        object.__setattr__(model, "predict", predict)
        object.__setattr__(model, "predict_on_batch", predict_on_batch)
        object.__setattr__(model, "__class__", recorded_cls)
        try:
            yield
        finally:
            with self._lock:  # a call another thread is still making finishes first
                object.__setattr__(model, "__class__", original_cls)
                for name in ("predict", "predict_on_batch"):
                    with contextlib.suppress(AttributeError):
                        object.__delattr__(model, name)
                self.current = None

    @contextlib.contextmanager
    def _recording_forward(self, record: TestRecord, model: Any, tm: Any) -> Iterator[None]:
        """A ``torch.nn.Module``: its ``forward`` is wrapped on the instance, so that
        ``model(x)`` (which calls it) and ``model.forward(x)`` both record, from the one
        pass the test makes (``tm.call_tensors`` runs the original ``forward`` with the
        trace model's hooks on); the instance's own ``forward`` is restored after."""
        recorder = self
        own = "forward" in model.__dict__
        saved = model.__dict__.get("forward")
        inner = model.forward

        def forward(*args: Any, **kwargs: Any) -> Any:
            rec = recorder.target()
            if rec is None:
                return inner(*args, **kwargs)
            x = args[0] if len(args) == 1 and not kwargs else None
            why = "model(x) was called with several arguments or keywords" if x is None else tm.unrecordable(x)
            if why is not None:
                recorder._warn_once(why, f"pytest-sadl: {why}; those inputs ran unrecorded (use sadl_record(x))")
                with recorder._lock, recorder.paused():
                    return inner(*args, **kwargs)
            return recorder._attempt(rec, tm.host(x), lambda: inner(x), lambda: tm.call_tensors(x, forward=inner))

        self.current = record
        object.__setattr__(model, "forward", forward)
        try:
            yield
        finally:
            with self._lock:
                if own:
                    object.__setattr__(model, "forward", saved)
                else:
                    with contextlib.suppress(AttributeError):
                        object.__delattr__(model, "forward")
                self.current = None

    def _call(self, rec: TestRecord, tm: Any, original_cls: type, model: Any, args: tuple, kwargs: dict) -> Any:
        x = args[0] if args else kwargs.get("inputs")
        training = kwargs.get("training", args[1] if len(args) > 1 else None)
        extra = set(kwargs) - {"training", "inputs"}
        plain = lambda: original_cls.__call__(model, *args, **kwargs)  # noqa: E731
        if training:  # a training step, not a test input
            with self._lock, self.paused():
                return plain()
        why = None if x is None else tm.unrecordable(x)
        if why is None and (len(args) > 2 or extra or x is None or not _is_inputs(x) or not _finite(x)):
            why = "model(x) was called with a mask, non-finite values or other arguments"
        if why is not None:
            self._warn_once(why, f"pytest-sadl: {why}; those inputs ran unrecorded (use sadl_record(x))")
            with self._lock, self.paused():
                return plain()
        return self._attempt(rec, x, plain, lambda: tm.call_tensors(x))

    # -- transport (pytest-xdist) ---------------------------------------------

    def to_bytes(self, records: list[TestRecord] | None = None) -> bytes:
        """``records`` (default: all) as one ``.npz`` (no pickles), for pytest-xdist transport."""
        arrays: dict[str, np.ndarray] = {}
        meta = []
        for r, rec in enumerate(self.records.values() if records is None else records):
            meta.append({"nodeid": rec.nodeid, "index": rec.index, "group": rec.group, "outcome": rec.outcome, "attempt": rec.attempt, "batches": len(rec.batches), "layers": len(rec.batches[0].coverage) if rec.batches else 0, "labels": len(rec.labels)})
            for j, (digests, values) in enumerate(rec.labels):
                arrays[f"labeldig_{r}_{j}"], arrays[f"labelval_{r}_{j}"] = digests, values
            for b, batch in enumerate(rec.batches):
                key = f"{r}_{b}"
                arrays[f"sa_{key}"] = batch.sa
                arrays[f"pred_{key}"] = batch.pred
                for i, cov in enumerate(batch.coverage):
                    arrays[f"cov_{key}_{i}"] = cov
                    if batch.extrema is not None and batch.extrema[i] is not None:
                        arrays[f"min_{key}_{i}"], arrays[f"max_{key}_{i}"] = batch.extrema[i]
                if batch.thumbs is not None:
                    arrays[f"thumbs_{key}"] = batch.thumbs
                if batch.output is not None:
                    arrays[f"output_{key}"] = batch.output
                if batch.digests is not None:
                    arrays[f"digests_{key}"] = batch.digests
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        return buf.getvalue()

    @staticmethod
    def records_from_bytes(data: bytes) -> list[TestRecord]:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            meta = json.loads(npz["meta"].tobytes().decode())
            out = []
            for r, m in enumerate(meta):
                rec = TestRecord(m["nodeid"], m["index"], m["group"], m["outcome"], attempt=int(m.get("attempt", 1)))
                rec.labels = [(npz[f"labeldig_{r}_{j}"], npz[f"labelval_{r}_{j}"]) for j in range(m.get("labels", 0))]
                for b in range(m["batches"]):
                    key = f"{r}_{b}"
                    thumbs = npz[f"thumbs_{key}"] if f"thumbs_{key}" in npz.files else None
                    layers = range(m["layers"])
                    extrema = [
                        (npz[f"min_{key}_{i}"], npz[f"max_{key}_{i}"]) if f"min_{key}_{i}" in npz.files else None
                        for i in layers
                    ]
                    rec.batches.append(
                        Batch(npz[f"sa_{key}"], [npz[f"cov_{key}_{i}"] for i in layers], npz[f"pred_{key}"], thumbs,
                              extrema if any(e is not None for e in extrema) else None,
                              npz[f"output_{key}"] if f"output_{key}" in npz.files else None,
                              npz[f"digests_{key}"] if f"digests_{key}" in npz.files else None)
                    )
                out.append(rec)
        return out

    def merge(self, records: list[TestRecord]) -> None:
        """Add records from elsewhere (a worker): a later attempt of a test replaces an
        earlier one's record, an earlier one is ignored, the same attempt's add up."""
        with self._lock:
            for rec in records:
                mine = self.records.get(rec.nodeid)
                if mine is None or rec.attempt > mine.attempt:
                    self.records[rec.nodeid] = rec
                elif rec.attempt == mine.attempt:
                    mine.batches.extend(rec.batches)
                    mine.labels.extend(rec.labels)


def _parts(x: Any) -> list[Any]:
    """The arrays of one input structure: an array, or a dict/list/tuple of them."""
    if isinstance(x, dict):
        return list(x.values())
    if isinstance(x, (list, tuple)):
        return list(x)
    return [x]


def _rows(x: Any) -> int | None:
    """The number of inputs (rows) of a batch, ``None`` when unknown."""
    for part in _parts(x):
        shape = getattr(part, "shape", None)
        if shape is None:
            continue
        try:
            return int(shape[0]) if len(shape) else None
        except (TypeError, ValueError):  # an unknown (symbolic) batch size
            return None
    return None


def _finite(x: Any) -> bool:
    """True when the inputs hold no NaN/inf (checked before tracing them)."""
    for part in _parts(x):
        try:
            arr = np.asarray(part)
        except Exception:
            continue
        if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
            return False
    return True


def _is_array_like(x: Any) -> bool:
    if isinstance(x, np.ndarray):
        return True
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, (dict, list, tuple))


def _is_inputs(x: Any) -> bool:
    """An array, or a non-empty dict/list/tuple of arrays (a model with several inputs)."""
    if isinstance(x, (dict, list, tuple)):
        parts = _parts(x)
        return bool(parts) and all(_is_array_like(p) for p in parts)
    return _is_array_like(x)
