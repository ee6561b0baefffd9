"""A Keras model's recorded calls: ``__call__``, ``predict``, ``predict_on_batch``,
``evaluate`` and ``test_on_batch`` while a marked test runs.

Each runs the model's own multi-output twin (:class:`~pytest_sadl.capture.TraceModel`),
returns the model's output to the test unchanged, and hands the traces of the same
forward pass to the :class:`~pytest_sadl.capture.calls.Ledger`, so recording costs no
second inference. ``predict`` on a dataset, generator or ``PyDataset`` (or with ``steps``
or ``callbacks``), ``evaluate`` and ``test_on_batch`` run Keras' own method with its step
traced (:mod:`pytest_sadl.capture.loops`); the ``y`` they are given becomes the inputs'
labels. What cannot be recorded runs as the plain call, with a warning naming the test,
once per test and reason. ``__call__`` keeps gradients flowing (``tf.GradientTape``
around ``model(x)`` works as before). Calls with ``training=True`` and calls on symbolic
tensors (inside ``tf.function``, ``jax.jit``) are passed through unrecorded. A model with
several inputs is recorded from a dict keyed by input name or a list in ``model.inputs``
order, row by row across all its inputs.

How (:func:`recording_calls`): ``predict``, ``predict_on_batch``, ``evaluate`` and
``test_on_batch`` are set on the model instance; its ``__class__`` becomes a subclass of
its own class with the same name, qualname and module (so ``model.save`` and ``repr``
are as before) whose ``__call__`` records, and whose ``predict_step``/``test_step`` and
``predict_function``/``test_function`` are a traced loop's *in the thread running it*
(:class:`~pytest_sadl.capture.loops.Loop`) and the model's own everywhere else. All is
restored when the block ends.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from pytest_sadl.capture.calls import Ledger, attempt, parts, short_reason
from pytest_sadl.capture.loops import Loop, run_traced, unsupported

__all__ = ["recording_calls"]

METHODS = ("predict", "predict_on_batch", "evaluate", "test_on_batch")

#: ``.loop``: the traced loop running in this thread (:class:`~pytest_sadl.capture.loops.Loop`),
#: for every recorded class. One for the process, not one per :func:`recording_calls` block:
#: a compiled loop function is kept on the trace model across tests, and Keras' JAX trainer
#: binds it to the ``test_step``/``predict_step`` of the recorded class it was built with (an
#: earlier test's); when a later test's batches of another shape make JAX retrace that step,
#: its dispatch must still find the loop running now, or the step runs untraced and the loop
#: unpacks the plain step's result as the traced one's (issue 37).
_RUNNING = threading.local()


@contextlib.contextmanager
def recording_calls(ledger: Ledger, model: Any, tm: Any) -> Iterator[None]:
    """``model``'s entry points record through ``ledger`` while the block runs."""
    original_cls = type(model)
    entry = _EntryPoints(ledger, model, tm, original_cls)

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
            **entry.loop_dispatch(),
        },
    )
    for name in METHODS:
        object.__setattr__(model, name, getattr(entry, name))
    object.__setattr__(model, "__class__", recorded_cls)
    try:
        yield
    finally:
        with ledger.lock:  # a call another thread is still making finishes first
            object.__setattr__(model, "__class__", original_cls)
            for name in METHODS:
                with contextlib.suppress(AttributeError):
                    object.__delattr__(model, name)


class _EntryPoints:
    """The recorded entry points of one Keras model while :func:`recording_calls` runs:
    ``predict``, ``predict_on_batch``, ``evaluate`` and ``test_on_batch`` are set on the
    model instance as this object's bound methods, ``__call__`` on the recorded class
    calls :meth:`call`. Each takes Keras' own signature and returns what Keras returns."""

    def __init__(self, ledger: Ledger, model: Any, tm: Any, original_cls: type) -> None:
        self.ledger, self.model, self.tm = ledger, model, tm
        self.cls: Any = original_cls  # the model's own class: its methods are the plain calls

    def _unrecorded(self, rec: Any, why: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        """The model's own ``method``, unrecorded, with a warning naming ``why``."""
        self.ledger.warn_unrecorded(rec, why)
        with self.ledger.lock, self.ledger.paused():
            return method(self.model, *args, **kwargs)

    # -- the entry points ------------------------------------------------------

    def predict(
        self, x: Any, batch_size: Any = None, verbose: Any = "auto", steps: Any = None, callbacks: Any = None, **kw: Any
    ) -> Any:
        rec = self.ledger.target()
        model, own = self.model, self.cls.predict
        args = {"batch_size": batch_size, "verbose": verbose, "steps": steps, "callbacks": callbacks, **kw}
        if rec is not None and kw:
            why = "model.predict() was called with arguments Keras' predict does not take"
            return self._unrecorded(rec, why, own, x, **args)
        if rec is not None and _is_inputs(x) and steps is None and callbacks is None and not _numpy_text(x):
            if not _finite(x):
                return self._unrecorded(rec, "model.predict() got non-finite values", own, x, **args)
            return attempt(
                self.ledger,
                rec,
                x,
                lambda: own(model, x, **args),
                lambda: self.tm.call_and_trace(x, batch_size=batch_size or 32),
            )
        # a dataset, generator or PyDataset, steps= or callbacks: Keras' own loop, traced;
        # NumPy str/bytes arrays too, which Keras' predict refuses ("Invalid dtype: str288")
        return self._loop(rec, "predict", x, lambda: own(model, x, **args))

    def predict_on_batch(self, x: Any) -> Any:
        rec = self.ledger.target()
        own = self.cls.predict_on_batch
        if rec is not None and (not _is_inputs(x) or not _finite(x)):
            return self._unrecorded(rec, "model.predict_on_batch() got a non-array or non-finite input", own, x)
        return attempt(self.ledger, rec, x, lambda: own(self.model, x), lambda: self.tm.call_and_trace(x))

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
        rec = self.ledger.target()
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
        return self._loop(rec, "test", x, lambda: self.cls.evaluate(self.model, x, y, **args))

    def test_on_batch(self, x: Any, y: Any = None, sample_weight: Any = None, return_dict: bool = False) -> Any:
        rec = self.ledger.target()
        plain = lambda: self.cls.test_on_batch(  # noqa: E731
            self.model, x, y, sample_weight=sample_weight, return_dict=return_dict
        )
        if not getattr(self.model, "compiled", False):
            rec = None
        return self._loop(rec, "test", x, plain)

    def call(self, instance: Any, *args: Any, **kwargs: Any) -> Any:
        """``instance(*args, **kwargs)``: the recorded class's ``__call__`` (``instance`` is
        the model, or an object of a subclass Keras made of it: those are not recorded)."""
        rec = self.ledger.target() if instance is self.model else None
        if rec is None:
            return self.cls.__call__(instance, *args, **kwargs)
        return self._call(rec, instance, args, kwargs)

    # -- model(x) -----------------------------------------------------------------

    def _call(self, rec: Any, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        x = args[0] if args else kwargs.get("inputs")

        def plain() -> Any:
            return self.cls.__call__(model, *args, **kwargs)

        if kwargs.get("training", args[1] if len(args) > 1 else None):  # a training step, not a test input
            with self.ledger.lock, self.ledger.paused():
                return plain()
        why = _unrecordable_call(self.tm, x, args, kwargs)
        if why is not None:
            self.ledger.warn_unrecorded(rec, why)
            with self.ledger.lock, self.ledger.paused():
                return plain()
        return attempt(self.ledger, rec, x, plain, lambda: self.tm.call_tensors(x))

    # -- Keras' own loops ----------------------------------------------------------

    def _loop(self, rec: Any, kind: str, x: Any, plain: Callable[[], Any]) -> Any:
        """``predict``/``evaluate``/``test_on_batch`` run by Keras' own loop with each step
        traced (:mod:`pytest_sadl.capture.loops`): the steps' traces kept for ``rec``, the
        targets of the steps as the inputs' labels, Keras' own result returned.

        Not under the ledger's lock while Keras waits for data (only while a step is
        traced with the layers tapped): a generator that calls the model from tf.data's
        thread must not wait for the loop that waits for it."""
        tm, ledger = self.tm, self.ledger
        why = None if rec is None else unsupported(tm.model, kind)
        if rec is None or why is not None:
            if why is not None:
                ledger.warn_unrecorded(rec, why)
            with ledger.paused():
                return plain()
        failure: Exception | None = None
        plain_step = functools.partial(getattr(self.cls, f"{kind}_step"), tm.model)
        try:
            with ledger.paused():
                out, batches = run_traced(
                    tm, kind, plain, plain_step=plain_step, activate=self._activating, lock=ledger.lock
                )
        except Exception as exc:
            if _one_shot(x):  # a generator is consumed: running it again would see other data
                raise
            failure = exc
        except BaseException as exc:  # a timeout or Ctrl-C mid-loop: the steps done count
            self._keep(rec, getattr(exc, "sadl_batches", []))
            raise
        else:
            self._keep(rec, batches)
            return out
        with ledger.paused():  # outside the except block: the model's own error, unchained
            out = plain()
        ledger.warn_unrecorded(rec, f"an input the model accepts could not be recorded ({short_reason(failure)})")
        return out

    def _keep(self, rec: Any, batches: list[Any]) -> None:
        """The traces of a traced loop's steps, and their targets as labels."""
        tm = self.tm
        for b in batches:
            self.ledger.add(b.traces, b.x, rec)
            if b.y is not None:
                self.ledger.add_targets(
                    b.x,
                    b.y,
                    rec,
                    n=len(b.traces),
                    classifier=tm.classifier,
                    output=tm.output_name,
                    outputs=tm.output_names,
                )

    def loop_dispatch(self) -> dict[str, Any]:
        """Class attributes of the recorded class: ``predict_step``/``test_step`` and
        ``predict_function``/``test_function`` that are this thread's traced loop's
        (:class:`pytest_sadl.capture.loops.Loop`) while it runs, else the model's own."""
        original_cls = self.cls
        out: dict[str, Any] = {}
        for kind in ("predict", "test"):
            step_name, fn_name = f"{kind}_step", f"{kind}_function"

            def step(model: Any, *args: Any, _kind: str = kind, _name: str = step_name) -> Any:
                loop = self._active_loop(model, _kind)
                if loop is not None:
                    return loop.step(*args)
                return getattr(original_cls, _name)(model, *args)

            def get(model: Any, _kind: str = kind, _name: str = fn_name) -> Any:
                loop = self._active_loop(model, _kind)
                if loop is not None and loop.fn is not None:
                    return loop.fn
                return model.__dict__.get(_name)

            def put(model: Any, value: Any, _kind: str = kind, _name: str = fn_name) -> None:
                loop = self._active_loop(model, _kind)
                if loop is not None and loop.building:
                    loop.built = value  # Keras' make_<kind>_function building ours
                else:
                    model.__dict__[_name] = value

            if hasattr(original_cls, step_name):
                out[step_name] = step
                out[fn_name] = property(get, put)
        return out

    def _active_loop(self, model: Any, kind: str) -> Loop | None:
        loop: Loop | None = getattr(_RUNNING, "loop", None)
        return loop if loop is not None and loop.model is model and loop.kind == kind else None

    @contextlib.contextmanager
    def _activating(self, loop: Loop) -> Iterator[None]:
        """``loop`` is this thread's traced loop while the block runs."""
        previous = getattr(_RUNNING, "loop", None)
        _RUNNING.loop = loop
        try:
            yield
        finally:
            _RUNNING.loop = previous


def _unrecordable_call(tm: Any, x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Why ``model(*args, **kwargs)`` cannot be recorded (symbolic tensors, a mask or
    other arguments, non-finite values), or ``None``."""
    why: str | None = None if x is None else tm.unrecordable(x)
    extra = set(kwargs) - {"training", "inputs"}
    if why is None and (len(args) > 2 or extra or x is None or not _is_inputs(x) or not _finite(x)):
        why = "model(x) was called with a mask, non-finite values or other arguments"
    return why


def _one_shot(x: Any) -> bool:
    """Data that a second pass cannot see again: a generator or other iterator."""
    return hasattr(x, "__next__")


def _finite(x: Any) -> bool:
    """True when the inputs hold no NaN/inf (checked before tracing them)."""
    for part in parts(x):
        try:
            arr = np.asarray(part)
        except Exception:
            continue
        if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
            return False
    return True


def _numpy_text(x: Any) -> bool:
    """NumPy arrays of a ``str``/``bytes`` dtype among the inputs (``model(x)`` takes them,
    Keras' ``predict`` does not: its own loop must answer). A list of NumPy strings
    (``np.str_``/``np.bytes_`` scalars, a keras-hub task's raw text) counts: each looks like an
    array but is one text, for the task's preprocessor."""
    return any(isinstance(p, (np.ndarray, np.generic)) and p.dtype.kind in "US" for p in parts(x))


def _is_array_like(x: Any) -> bool:
    if isinstance(x, np.ndarray):
        return True
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, (dict, list, tuple))


def _is_inputs(x: Any) -> bool:
    """An array, or a non-empty dict/list/tuple of arrays (a model with several inputs)."""
    if isinstance(x, (dict, list, tuple)):
        each = parts(x)
        return bool(each) and all(_is_array_like(p) for p in each)
    return _is_array_like(x)
