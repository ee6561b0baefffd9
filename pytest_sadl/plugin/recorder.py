"""Which test fed which inputs to the model, in which group.

While a test marked ``@pytest.mark.sadl`` runs (its call phase, not its fixtures), the
model's ``predict``, ``predict_on_batch``, ``__call__``, ``evaluate`` and ``test_on_batch``
are wrapped: each runs the model's own multi-output twin
(:class:`~pytest_sadl.capture.TraceModel`), returns the model's output to the test
unchanged, and keeps the traces of the same forward pass, so recording costs no second
inference. ``predict`` on a dataset, generator or ``PyDataset`` (or with ``steps`` or
``callbacks``), ``evaluate`` and ``test_on_batch`` run Keras' own method with its step
traced (:mod:`pytest_sadl.capture.loops`); the ``y`` they are given becomes the inputs'
labels (:func:`target_labels`). What cannot be recorded runs as the plain call, with a
warning naming the test, once per test and reason. ``__call__`` keeps gradients flowing
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

A model that changes during the session (``fit``, ``set_weights``, ``load_weights``, a
new layer) is no longer the model the profile describes. :meth:`Recorder.bind` keeps a
digest of the model's layers and weights when the profile's model is bound (the digest
function is given, :func:`pytest_sadl.capture.weights.model_digest`);
:meth:`Recorder.check_model` compares it at the end of each marked test that recorded
inputs. From the first test whose end sees a change on, every record is marked
``stale`` (one :class:`SadlRecordingWarning` names that test), and the engine leaves
stale records' inputs out of every metric and reports them apart.

No backend is imported here: the trace model (:mod:`pytest_sadl.capture`) runs the pass.

Only plain data leaves this module: :class:`TestRecord` with NumPy arrays, serialisable
to bytes (``.npz``, no pickles) for pytest-xdist workers to send to the controller.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from pytest_sadl.errors import SadlRecordingWarning
from pytest_sadl.records import Batch, TestRecord, input_digests, snippets, thumbnails


def _head(x: Any, n: int) -> Any:
    """The first ``n`` rows of ``x`` (an array, or a list, tuple or dict of arrays, one per
    input), or ``None`` for anything else."""
    if isinstance(x, dict):
        heads = {k: _head(v, n) for k, v in x.items()}
        return None if any(v is None for v in heads.values()) else heads
    if isinstance(x, (list, tuple)):
        parts = [_head(v, n) for v in x]
        return None if any(v is None for v in parts) else type(x)(parts)
    try:
        return x[:n] if len(x) >= n else None
    except TypeError:
        return None


class Recorder:
    """Collects :class:`TestRecord` objects for a session (safe to call from many threads)."""

    def __init__(self, trace_model_factory: Any, digest: Callable[[Any], str] | None = None) -> None:
        self._factory = trace_model_factory  # model -> TraceModel
        self._digest = digest  # model -> digest of its layers and weights (None: never checked)
        self._bound: tuple[int, str] | None = None  # (id of the profile's model, its digest then)
        #: the node id of the test at whose end the model was first seen changed
        self.changed_in: str | None = None
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

    def bind(self, model: Any) -> None:
        """Remember ``model``'s digest as that of the model the profile describes (once per
        model object: the first binding is the one the profile was made from)."""
        if self._digest is None:
            return
        with self._lock:
            if self._bound is None or self._bound[0] != id(model):
                digest = self._model_digest(model)
                if digest is not None:
                    self._bound = (id(model), digest)

    def _model_digest(self, model: Any) -> str | None:
        """The digest, or ``None`` (and checking off, with one warning) when the model's
        weights cannot be read: never a failed test or an INTERNALERROR for it."""
        try:
            with self.paused():
                return self._digest(model)  # type: ignore[misc]
        except Exception as exc:
            self._digest = None
            self._bound = None
            why = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
            self._warn_once(
                "digest",
                f"pytest-sadl: the model's weights cannot be read ({why}); changes to the model during the session are not detected",
                in_hook=True,
            )
            return None

    def check_model(self, model: Any, record: TestRecord) -> None:
        """At the end of a marked test: mark ``record`` stale when the model changed since
        it was bound, now or in an earlier test (only records with inputs are checked)."""
        if not record.batches:
            return
        with self._lock:
            if self._bound is None or self._bound[0] != id(model) or self._digest is None:
                return
            if self.changed_in is None:
                digest = self._model_digest(model)
                if digest is None or digest == self._bound[1]:
                    return
                self.changed_in = record.nodeid
                self._warn_once(
                    "changed",
                    f"pytest-sadl: the model changed during the session (its weights or layers: fit, "
                    f"set_weights, load_weights, a new layer), first seen at the end of {record.nodeid}; "
                    "the inputs of that test and of every later one were measured on another model "
                    "than the profile's, so they are left out of every metric and listed apart",
                    in_hook=True,
                )
            record.stale = True

    def record_for(self, nodeid: str, index: int, group: str, attempt: int = 1) -> TestRecord:
        """The record of ``nodeid``'s run number ``attempt``; an earlier attempt's is dropped."""
        with self._lock:
            rec = self.records.get(nodeid)
            if rec is None or rec.attempt < attempt:
                rec = self.records[nodeid] = TestRecord(nodeid, index, group, attempt=attempt)
            return rec

    def _warn_once(self, key: str, message: str, *, in_hook: bool = False) -> None:
        """One warning per ``key``: kept for the reports and emitted. ``in_hook``: emitted
        from a pytest hook, not a test, where ``-W error`` would make it an INTERNALERROR;
        there the reports carry it and the run goes on."""
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
            self.messages.append(message)
        try:
            warnings.warn(message, SadlRecordingWarning, stacklevel=4)
        except Warning:
            if not in_hook:
                raise

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

    def add(self, traces: Any, x: Any, record: TestRecord | None = None, *, channels_first: bool = False) -> None:
        """Keep ``traces`` (a :class:`~pytest_sadl.capture.Traces`) for ``record`` (default:
        the running test's); ``channels_first``: image inputs are ``(n, c, h, w)``, as a
        native PyTorch model takes them."""
        rec = record if record is not None else self.current
        if rec is None:
            return
        sa = np.asarray(traces.sa, dtype=np.float32)
        coverage = [np.asarray(c, dtype=np.float32) for c in traces.coverage]
        extrema = getattr(traces, "coverage_extrema", None)
        finite = np.isfinite(sa).all(axis=1)
        for c in coverage:
            finite &= np.isfinite(c).all(axis=1)
        thumbs = thumbnails(x, channels_first=channels_first)
        texts = None if thumbs is not None else snippets(x)
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
            texts = None if texts is None else texts[keep]
            digests = None if digests is None else digests[keep]
            output = None if output is None else output[keep]
            if extrema is not None:
                extrema = [None if e is None else (e[0][keep], e[1][keep]) for e in extrema]
        if len(sa):
            batch = Batch(
                sa=sa,
                coverage=coverage,
                pred=pred,
                thumbs=thumbs,
                extrema=extrema,
                output=output,
                digests=digests,
                texts=texts,
            )
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
            raise ValueError(
                "sadl_labels(x, y): x must be an array of the inputs, numbers or strings (one row per input)"
            )
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
        self.add(traces, x, rec, channels_first=tm.channels_first)

    def _attempt(
        self,
        rec: TestRecord | None,
        x: Any,
        plain: Callable[[], Any],
        recorded: Callable[[], tuple[Any, Any]],
        *,
        channels_first: bool = False,
    ) -> Any:
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
            except BaseException as exc:  # a timeout or Ctrl-C mid-call: the batches done count
                partial = getattr(exc, "sadl_partial", None)
                head = None if partial is None else _head(x, len(partial))
                if head is not None:
                    self.add(partial, head, rec, channels_first=channels_first)
                raise
            else:
                self.add(traces, x, rec, channels_first=channels_first)
                return out
            with self.paused():  # outside the except block: the model's own error, unchained
                out = plain()
            why = " ".join(f"{type(failure).__name__}: {failure}".split())[:300]
            self._warn_unrecorded(rec, f"an input the model accepts could not be recorded ({why})")
            return out

    @contextlib.contextmanager
    def recording(self, record: TestRecord, model: Any) -> Iterator[None]:
        """Wrap ``model``'s entry points while the block runs; restore them after."""
        tm = self.trace_model(model)
        if tm.records == "forward":  # a torch.nn.Module
            with self._recording_forward(record, model, tm):
                yield
            return
        original_cls = type(model)
        entry = _EntryPoints(self, model, tm, original_cls)

        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            return entry.call(self, *args, **kwargs)

        # The same name, qualname and module as the model's class, so that Keras serialises
        # (model.save) and prints it as before; only __call__ differs, and the steps and
        # step functions Keras' loops use, which are a traced loop's in the thread running
        # it (capture.loops) and the model's own everywhere else.
        recorded_cls = type(
            original_cls.__name__,
            (original_cls,),
            {
                "__call__": call,
                "__module__": original_cls.__module__,
                "__qualname__": original_cls.__qualname__,
                "_sadl_recording": True,
                **self._loop_dispatch(original_cls),
            },
        )
        self.current = record
        for name in _EntryPoints.METHODS:
            object.__setattr__(model, name, getattr(entry, name))
        object.__setattr__(model, "__class__", recorded_cls)
        try:
            yield
        finally:
            with self._lock:  # a call another thread is still making finishes first
                object.__setattr__(model, "__class__", original_cls)
                for name in _EntryPoints.METHODS:
                    with contextlib.suppress(AttributeError):
                        object.__delattr__(model, name)
                self.current = None

    def _loop_dispatch(self, original_cls: type) -> dict[str, Any]:
        """Class attributes of the recorded class: ``predict_step``/``test_step`` and
        ``predict_function``/``test_function`` that are this thread's traced loop's
        (:class:`pytest_sadl.capture.loops.Loop`) while it runs, else the model's own."""
        recorder = self
        out: dict[str, Any] = {}
        for kind in ("predict", "test"):
            step_name, fn_name = f"{kind}_step", f"{kind}_function"

            def step(model: Any, *args: Any, _kind: str = kind, _name: str = step_name) -> Any:
                loop = recorder._active_loop(model, _kind)
                if loop is not None:
                    return loop.step(*args)
                return getattr(original_cls, _name)(model, *args)

            def get(model: Any, _kind: str = kind, _name: str = fn_name) -> Any:
                loop = recorder._active_loop(model, _kind)
                if loop is not None and loop.fn is not None:
                    return loop.fn
                return model.__dict__.get(_name)

            def put(model: Any, value: Any, _kind: str = kind, _name: str = fn_name) -> None:
                loop = recorder._active_loop(model, _kind)
                if loop is not None and loop.building:
                    loop.built = value  # Keras' make_<kind>_function building ours
                else:
                    model.__dict__[_name] = value

            if hasattr(original_cls, step_name):
                out[step_name] = step
                out[fn_name] = property(get, put)
        return out

    def _active_loop(self, model: Any, kind: str) -> Any:
        loop = getattr(self._local, "loop", None)
        return loop if loop is not None and loop.model is model and loop.kind == kind else None

    @contextlib.contextmanager
    def _activating(self, loop: Any) -> Iterator[None]:
        """``loop`` is this thread's traced loop while the block runs."""
        previous = getattr(self._local, "loop", None)
        self._local.loop = loop
        try:
            yield
        finally:
            self._local.loop = previous

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
            x, why = tm.call_inputs(args, kwargs)  # positional, or by keyword (capture.torch, capture.hf)
            if x is not None:
                why = tm.unrecordable(x)
            if why is not None:
                recorder._warn_once(why, f"pytest-sadl: {why}; those inputs ran unrecorded (use sadl_record(x))")
                with recorder._lock, recorder.paused():
                    return inner(*args, **kwargs)
            return recorder._attempt(
                rec,
                tm.host(x),
                lambda: inner(*args, **kwargs),
                lambda: tm.call_tensors(x, forward=inner),
                channels_first=True,
            )

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

    def _call(
        self, rec: TestRecord, tm: Any, original_cls: type, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        x = args[0] if args else kwargs.get("inputs")
        training = kwargs.get("training", args[1] if len(args) > 1 else None)
        extra = set(kwargs) - {"training", "inputs"}

        def plain() -> Any:
            return original_cls.__call__(model, *args, **kwargs)

        if training:  # a training step, not a test input
            with self._lock, self.paused():
                return plain()
        why = None if x is None else tm.unrecordable(x)
        if why is None and (len(args) > 2 or extra or x is None or not _is_inputs(x) or not _finite(x)):
            why = "model(x) was called with a mask, non-finite values or other arguments"
        if why is not None:
            self._warn_unrecorded(rec, why)
            with self._lock, self.paused():
                return plain()
        return self._attempt(rec, x, plain, lambda: tm.call_tensors(x))

    def _loop(
        self, rec: TestRecord | None, tm: Any, kind: str, x: Any, plain: Callable[[], Any], original_cls: type
    ) -> Any:
        """``predict``/``evaluate``/``test_on_batch`` run by Keras' own loop with each step
        traced (:mod:`pytest_sadl.capture.loops`): the steps' traces kept for ``rec``, the
        targets of the steps as the inputs' labels, Keras' own result returned.

        Not under the recorder's lock while Keras waits for data (only while a step is
        traced with the layers tapped): a generator that calls the model from tf.data's
        thread must not wait for the loop that waits for it."""
        from pytest_sadl.capture.loops import run_traced, unsupported

        why = None if rec is None else unsupported(tm.model, kind)
        if rec is None or why is not None:
            if why is not None:
                self._warn_unrecorded(rec, why)  # type: ignore[arg-type]
            with self.paused():
                return plain()
        failure: Exception | None = None
        plain_step = functools.partial(getattr(original_cls, f"{kind}_step"), tm.model)
        try:
            with self.paused():
                out, batches = run_traced(
                    tm, kind, plain, plain_step=plain_step, activate=self._activating, lock=self._lock
                )
        except Exception as exc:
            if _one_shot(x):  # a generator is consumed: running it again would see other data
                raise
            failure = exc
        except BaseException as exc:  # a timeout or Ctrl-C mid-loop: the steps done count
            self._keep(rec, tm, getattr(exc, "sadl_batches", []))
            raise
        else:
            self._keep(rec, tm, batches)
            return out
        with self.paused():  # outside the except block: the model's own error, unchained
            out = plain()
        self._warn_unrecorded(
            rec,
            "an input the model accepts could not be recorded ("
            + " ".join(f"{type(failure).__name__}: {failure}".split())[:300]
            + ")",
        )
        return out

    def _keep(self, rec: TestRecord, tm: Any, batches: list[Any]) -> None:
        """The traces of a traced loop's steps, and their targets as labels."""
        for b in batches:
            self.add(b.traces, b.x, rec)
            if b.y is None:
                continue
            labels = target_labels(
                b.y, n=len(b.traces), classifier=tm.classifier, output=tm.output_name, outputs=tm.output_names
            )
            digests = input_digests(b.x)
            if labels is None or digests is None or len(digests) != len(labels):
                self._warn_once(
                    f"labels:{rec.nodeid}",
                    f"pytest-sadl: {rec.nodeid}: the targets y of its "
                    "inputs could not be used as labels (not one numeric target per input)",
                )
                continue
            with self._lock:
                rec.labels.append((digests, labels))

    def _warn_unrecorded(self, rec: TestRecord, why: str) -> None:
        """Once per test and reason: ``why`` inputs of ``rec``'s test ran unrecorded."""
        self._warn_once(
            f"{why}\0{rec.nodeid}",
            f"pytest-sadl: {rec.nodeid}: {why}; those inputs ran unrecorded (use sadl_record(x))",
        )

    # -- transport (pytest-xdist) ---------------------------------------------

    def to_bytes(self, records: list[TestRecord] | None = None) -> bytes:
        """``records`` (default: all) as one ``.npz`` (no pickles), for pytest-xdist transport."""
        arrays: dict[str, np.ndarray] = {}
        meta = []
        for r, rec in enumerate(self.records.values() if records is None else records):
            meta.append(
                {
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
            )
            for j, (digests, values) in enumerate(rec.labels):
                arrays[f"labeldig_{r}_{j}"], arrays[f"labelval_{r}_{j}"] = digests, values
            for b, batch in enumerate(rec.batches):
                key = f"{r}_{b}"
                arrays[f"sa_{key}"] = batch.sa
                arrays[f"pred_{key}"] = batch.pred
                for i, cov in enumerate(batch.coverage):
                    arrays[f"cov_{key}_{i}"] = cov
                    ext = None if batch.extrema is None else batch.extrema[i]
                    if ext is not None:
                        arrays[f"min_{key}_{i}"], arrays[f"max_{key}_{i}"] = ext
                if batch.thumbs is not None:
                    arrays[f"thumbs_{key}"] = batch.thumbs
                if batch.output is not None:
                    arrays[f"output_{key}"] = batch.output
                if batch.digests is not None:
                    arrays[f"digests_{key}"] = batch.digests
                if batch.texts is not None:
                    arrays[f"texts_{key}"] = batch.texts  # a str array: no pickle
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        buf = io.BytesIO()
        np.savez(buf, **arrays)  # type: ignore[arg-type]  # the keys are array names, never savez's allow_pickle
        return buf.getvalue()

    @staticmethod
    def records_from_bytes(data: bytes) -> list[TestRecord]:
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
                for b in range(m["batches"]):
                    key = f"{r}_{b}"
                    thumbs = npz[f"thumbs_{key}"] if f"thumbs_{key}" in npz.files else None
                    layers = range(m["layers"])
                    extrema = [
                        (npz[f"min_{key}_{i}"], npz[f"max_{key}_{i}"]) if f"min_{key}_{i}" in npz.files else None
                        for i in layers
                    ]
                    rec.batches.append(
                        Batch(
                            npz[f"sa_{key}"],
                            [npz[f"cov_{key}_{i}"] for i in layers],
                            npz[f"pred_{key}"],
                            thumbs,
                            extrema if any(e is not None for e in extrema) else None,
                            npz[f"output_{key}"] if f"output_{key}" in npz.files else None,
                            npz[f"digests_{key}"] if f"digests_{key}" in npz.files else None,
                            npz[f"texts_{key}"] if f"texts_{key}" in npz.files else None,
                        )
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
                    mine.stale |= rec.stale


class _EntryPoints:
    """The recorded entry points of one Keras model while :meth:`Recorder.recording` runs:
    ``predict``, ``predict_on_batch``, ``evaluate`` and ``test_on_batch`` are set on the
    model instance as this object's bound methods, ``__call__`` on the recorded class
    calls :meth:`call`. Each takes Keras' own signature and returns what Keras returns."""

    METHODS = ("predict", "predict_on_batch", "evaluate", "test_on_batch")

    def __init__(self, recorder: Recorder, model: Any, tm: Any, original_cls: type) -> None:
        self.recorder, self.model, self.tm = recorder, model, tm
        self.cls: Any = original_cls  # the model's own class: its methods are the plain calls

    def _unrecorded(self, rec: TestRecord, why: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        """The model's own ``method``, unrecorded, with a warning naming ``why``."""
        self.recorder._warn_unrecorded(rec, why)
        with self.recorder._lock, self.recorder.paused():
            return method(self.model, *args, **kwargs)

    def predict(
        self, x: Any, batch_size: Any = None, verbose: Any = "auto", steps: Any = None, callbacks: Any = None, **kw: Any
    ) -> Any:
        rec = self.recorder.target()
        model, own = self.model, self.cls.predict
        args = {"batch_size": batch_size, "verbose": verbose, "steps": steps, "callbacks": callbacks, **kw}
        if rec is not None and kw:
            why = "model.predict() was called with arguments Keras' predict does not take"
            return self._unrecorded(rec, why, own, x, **args)
        if rec is not None and _is_inputs(x) and steps is None and callbacks is None and not _numpy_text(x):
            if not _finite(x):
                return self._unrecorded(rec, "model.predict() got non-finite values", own, x, **args)
            return self.recorder._attempt(
                rec, x, lambda: own(model, x, **args), lambda: self.tm.call_and_trace(x, batch_size=batch_size or 32)
            )
        # a dataset, generator or PyDataset, steps= or callbacks: Keras' own loop, traced;
        # NumPy str/bytes arrays too, which Keras' predict refuses ("Invalid dtype: str288")
        return self.recorder._loop(rec, self.tm, "predict", x, lambda: own(model, x, **args), self.cls)

    def predict_on_batch(self, x: Any) -> Any:
        rec = self.recorder.target()
        own = self.cls.predict_on_batch
        if rec is not None and (not _is_inputs(x) or not _finite(x)):
            return self._unrecorded(rec, "model.predict_on_batch() got a non-array or non-finite input", own, x)
        return self.recorder._attempt(rec, x, lambda: own(self.model, x), lambda: self.tm.call_and_trace(x))

    def evaluate(
        self,
        x: Any = None,
        y: Any = None,
        batch_size: Any = None,
        verbose: Any = "auto",
        sample_weight: Any = None,
        steps: Any = None,
        callbacks: Any = None,
        return_dict: bool = False,
        **kw: Any,
    ) -> Any:
        rec = self.recorder.target()
        args = {
            "batch_size": batch_size,
            "verbose": verbose,
            "sample_weight": sample_weight,
            "steps": steps,
            "callbacks": callbacks,
            "return_dict": return_dict,
            **kw,
        }
        if kw or not getattr(self.model, "compiled", False):  # fit()'s validation pass; or Keras' own error
            rec = None
        plain = lambda: self.cls.evaluate(self.model, x, y, **args)  # noqa: E731
        return self.recorder._loop(rec, self.tm, "test", x, plain, self.cls)

    def test_on_batch(self, x: Any, y: Any = None, sample_weight: Any = None, return_dict: bool = False) -> Any:
        rec = self.recorder.target()
        plain = lambda: self.cls.test_on_batch(  # noqa: E731
            self.model, x, y, sample_weight=sample_weight, return_dict=return_dict
        )
        if not getattr(self.model, "compiled", False):
            rec = None
        return self.recorder._loop(rec, self.tm, "test", x, plain, self.cls)

    def call(self, instance: Any, *args: Any, **kwargs: Any) -> Any:
        """``instance(*args, **kwargs)``: the recorded class's ``__call__`` (``instance`` is
        the model, or an object of a subclass Keras made of it: those are not recorded)."""
        rec = self.recorder.target() if instance is self.model else None
        if rec is None:
            return self.cls.__call__(instance, *args, **kwargs)
        return self.recorder._call(rec, self.tm, self.cls, instance, args, kwargs)


def target_labels(y: Any, *, n: int, classifier: bool, output: str, outputs: list[str]) -> np.ndarray | None:
    """The labels ``(n, k)`` float64 of ``n`` inputs from the targets ``y`` a test gave Keras
    (``evaluate(x, y)``, a dataset's ``(x, y)``): class ids for a classifier (one-hot or
    soft rows become their argmax), the target values for a regression model; of a model
    with several outputs, the measured ``output``'s targets (``y`` a dict by output name
    or a list in ``outputs`` order). ``None`` when ``y`` holds no numeric target per input."""
    if isinstance(y, dict):
        y = y.get(output)
    elif isinstance(y, (list, tuple)) and len(outputs) > 1:
        y = y[outputs.index(output)] if len(y) == len(outputs) else None
    if y is None:
        return None
    try:
        arr = np.asarray(y)
    except Exception:
        return None
    if arr.dtype.kind not in "biuf" or arr.ndim == 0 or arr.shape[0] != n:
        return None
    arr = arr.reshape(n, -1)
    if classifier and arr.shape[1] > 1:  # one-hot (categorical_crossentropy) or soft labels
        arr = np.argmax(arr, axis=1).reshape(n, 1)
    return arr.astype(np.float64)


def _one_shot(x: Any) -> bool:
    """Data that a second pass cannot see again: a generator or other iterator."""
    return hasattr(x, "__next__")


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


def _numpy_text(x: Any) -> bool:
    """NumPy arrays of a ``str``/``bytes`` dtype among the inputs (``model(x)`` takes them,
    Keras' ``predict`` does not: its own loop must answer)."""
    return any(isinstance(p, np.ndarray) and p.dtype.kind in "US" for p in _parts(x))


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
