"""Which test fed which inputs to the model, in which group: the session's ledger.

While a test marked ``@pytest.mark.sadl`` runs (its call phase, not its fixtures),
:meth:`Recorder.recording` has the model's calls recorded: a Keras model's ``__call__``,
``predict``, ``predict_on_batch``, ``evaluate`` and ``test_on_batch``
(:mod:`pytest_sadl.capture.keras_calls`), a native ``torch.nn.Module``'s ``forward``
(:mod:`pytest_sadl.capture.torch_calls`). Those modules run each call once through the
model's trace model and hand its traces here (:meth:`Recorder.add`), with the targets
a loop was given as labels (:meth:`Recorder.add_targets`); ``sadl_record(x)`` and
``sadl_labels(x, y)`` come here directly. This module keeps the records: one per test
and attempt (reruns: the last counts), merged from pytest-xdist workers
(:meth:`Recorder.merge`; the wire format is :func:`pytest_sadl.records.to_bytes`).

Threads: calls from threads a test starts count for that test. "The running test" is
process-wide (pytest runs one test at a time per process): :attr:`Recorder.current`
is set for the test's call phase and read once at the start of each call, so a call
is attributed to the test during which it began. What is per thread is only whether
the thread is inside a pass already (the trace model calls the model; Keras' own
``predict`` calls ``self(x)``): those nested calls are not a test's
(:meth:`Recorder.paused`, :meth:`Recorder.target`). One lock (:attr:`Recorder.lock`)
serialises the recorded model's calls and the recorder's shared state, so no append is
lost and the layers a pass taps are never tapped by two threads at once.

A model that changes during the session (``fit``, ``set_weights``, ``load_weights``, a
new layer) is no longer the model the profile describes. :meth:`Recorder.bind` keeps a
digest of the model's layers and weights when the profile's model is bound (the digest
function is given, :func:`pytest_sadl.capture.identity.model_digest`);
:meth:`Recorder.check_model` compares it at the end of each marked test that recorded
inputs. From the first test whose end sees a change on, every record is marked
``stale`` (one :class:`SadlRecordingWarning` names that test), and the engine leaves
stale records' inputs out of every metric and reports them apart.

No backend is imported here: the trace model (:mod:`pytest_sadl.capture`) runs the pass.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from pytest_sadl.errors import SadlRecordingWarning
from pytest_sadl.records import Batch, TestRecord, given_labels, input_digests, target_labels


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
        self.lock = threading.RLock()
        self._local = threading.local()  # .depth: this thread is inside a pass

    # -- set-up ---------------------------------------------------------------

    def trace_model(self, model: Any) -> Any:
        """The trace model of ``model`` (one at a time: a new model object replaces the last)."""
        with self.lock:
            key = id(model)
            tm = self._trace_models.get(key)
            if tm is None or tm.model is not model:
                tm = self._factory(model)
                self._trace_models = {key: tm}
                self._models.add(key)
                if len(self._models) == 2:
                    self.warn_once(
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
        with self.lock:
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
            self.warn_once(
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
        with self.lock:
            if self._bound is None or self._bound[0] != id(model) or self._digest is None:
                return
            if self.changed_in is None:
                digest = self._model_digest(model)
                if digest is None or digest == self._bound[1]:
                    return
                self.changed_in = record.nodeid
                self.warn_once(
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
        with self.lock:
            rec = self.records.get(nodeid)
            if rec is None or rec.attempt < attempt:
                rec = self.records[nodeid] = TestRecord(nodeid, index, group, attempt=attempt)
            return rec

    def warn_once(self, key: str, message: str, *, in_hook: bool = False) -> None:
        """One warning per ``key``: kept for the reports and emitted. ``in_hook``: emitted
        from a pytest hook, not a test, where ``-W error`` would make it an INTERNALERROR;
        there the reports carry it and the run goes on."""
        with self.lock:
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

    def warn_unrecorded(self, rec: TestRecord, why: str) -> None:
        """Once per test and reason: ``why`` inputs of ``rec``'s test ran unrecorded."""
        self.warn_once(
            f"{why}\0{rec.nodeid}",
            f"pytest-sadl: {rec.nodeid}: {why}; those inputs ran unrecorded (use sadl_record(x))",
        )

    # -- recording ------------------------------------------------------------

    @contextlib.contextmanager
    def recording(self, record: TestRecord, model: Any) -> Iterator[None]:
        """``model``'s calls are recorded for ``record`` while the block runs (a Keras model's
        entry points, a ``torch.nn.Module``'s ``forward``); restored after."""
        tm = self.trace_model(model)
        if tm.records == "forward":  # a torch.nn.Module
            from pytest_sadl.capture.torch_calls import recording_forward as calls
        else:
            from pytest_sadl.capture.keras_calls import recording_calls as calls
        self.current = record
        try:
            with calls(self, model, tm):
                yield
        finally:
            with self.lock:  # a call another thread is still making finishes first
                self.current = None

    def add(self, traces: Any, x: Any, record: TestRecord | None = None, *, channels_first: bool = False) -> None:
        """Keep ``traces`` (a :class:`~pytest_sadl.capture.Traces`) of the inputs ``x`` for
        ``record`` (default: the running test's); ``channels_first``: image inputs are
        ``(n, c, h, w)``, as a native PyTorch model takes them. Inputs whose traces hold
        NaN/inf are left out, with one warning."""
        rec = record if record is not None else self.current
        if rec is None:
            return
        batch = Batch.of(traces, x, channels_first=channels_first)
        finite = batch.finite()
        if not finite.all():
            self.warn_once(
                "nonfinite",
                f"pytest-sadl: {int((~finite).sum())} input(s) of {rec.nodeid} gave NaN/inf "
                "activations; they are not counted",
            )
            batch = batch.take(np.flatnonzero(finite))
        if len(batch):
            with self.lock:
                rec.batches.append(batch)

    def add_labels(self, x: Any, y: Any, record: TestRecord | None = None) -> None:
        """``sadl_labels(x, y)``: the true labels ``y`` of the inputs ``x``, for ``record``
        (default: the running test's)."""
        rec = record if record is not None else self.current
        if rec is None:
            raise RuntimeError("sadl_labels(x, y) is for tests marked @pytest.mark.sadl, while they run")
        labelled = given_labels(x, y)
        with self.lock:
            rec.labels.append(labelled)

    def add_targets(
        self, x: Any, y: Any, record: TestRecord, *, n: int, classifier: bool, output: str, outputs: list[str]
    ) -> None:
        """The targets ``y`` a test gave Keras (``evaluate(x, y)``, a dataset's ``(x, y)``)
        as the labels of its ``n`` inputs ``x`` (:func:`pytest_sadl.records.target_labels`);
        targets that are no numeric target per input are left, with one warning per test."""
        labels = target_labels(y, n=n, classifier=classifier, output=output, outputs=outputs)
        digests = input_digests(x)
        if labels is None or digests is None or len(digests) != len(labels):
            self.warn_once(
                f"labels:{record.nodeid}",
                f"pytest-sadl: {record.nodeid}: the targets y of its "
                "inputs could not be used as labels (not one numeric target per input)",
            )
            return
        with self.lock:
            record.labels.append((digests, labels))

    def record_inputs(self, model: Any, x: Any, batch_size: int = 256, record: TestRecord | None = None) -> None:
        """``sadl_record(x)``: trace ``x`` now and keep it for ``record`` (default: the running test's)."""
        rec = record if record is not None else self.current
        tm = self.trace_model(model)
        with self.lock, self.paused():
            traces = tm.traces(x, batch_size=batch_size, what="sadl_record(x)")
        self.add(traces, x, rec, channels_first=tm.channels_first)

    # -- merging (pytest-xdist) -----------------------------------------------

    def merge(self, records: list[TestRecord]) -> None:
        """Add records from elsewhere (a worker): a later attempt of a test replaces an
        earlier one's record, an earlier one is ignored, the same attempt's add up."""
        with self.lock:
            for rec in records:
                mine = self.records.get(rec.nodeid)
                if mine is None or rec.attempt > mine.attempt:
                    self.records[rec.nodeid] = rec
                elif rec.attempt == mine.attempt:
                    mine.batches.extend(rec.batches)
                    mine.labels.extend(rec.labels)
                    mine.stale |= rec.stale
