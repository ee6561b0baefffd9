"""Keras' own ``predict`` and ``evaluate`` loops, with the traces of every step's pass.

A test's ``model.predict(dataset)``, ``model.evaluate(x, y)`` or ``model.test_on_batch(x, y)``
is recorded by running *Keras' own method*, unchanged, with one difference: the step it
compiles (``predict_step`` / ``test_step``) runs with the trace model's layers tapped
(:func:`pytest_sadl.capture.forward.tapped`) and returns, besides what it returned, the
traces of that step's forward pass and the step's ``x`` and ``y``. A thin wrapper around
the compiled function takes those extras off before Keras sees the step's result. So the
data is iterated by Keras' own data adapter (``tf.data.Dataset``, a Python generator,
``keras.utils.PyDataset``, arrays; ``steps=`` and ``batch_size=`` as Keras reads them, a
generator consumed exactly as far as Keras consumes it), the callbacks, progress bar,
metrics and return value are Keras' own, and the traces come from the same single
forward pass: no input is run twice, which a generator could not be.

Keras internals this relies on (Keras 3, TensorFlow and JAX backends): the trainer's
``predict_step``/``test_step`` methods, ``make_predict_function``/``make_test_function``
building ``predict_function``/``test_function`` from them, and a JAX step returning
``(outputs, state)``. The augmented functions are built once per trace model and
compile configuration and kept; the model's own cached functions are never replaced:
the caller makes the augmented step and function the model's in the running thread
only (``activate``), so a plain ``predict`` in another thread is never affected.

Public API
----------
``LoopBatch``
    ``traces`` (:class:`~pytest_sadl.capture.traces.Traces`), ``x`` (the step's inputs,
    NumPy, in the structure the model takes) and ``y`` (its targets, or ``None``).
``unsupported(model, kind) -> str | None``
    Why Keras' ``kind`` loop (``"predict"``, ``"test"``) cannot be recorded for this
    model (``None``: it can).
``run_traced(trace_model, kind, run, *, plain_step, activate, lock=None) -> (result, [LoopBatch])``
    ``run()`` calls the Keras method; its result is returned as it is.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_sadl.capture.forward import backend, tapped, to_numpy

__all__ = ["Loop", "LoopBatch", "unsupported", "run_traced"]

KINDS = ("predict", "test")


@dataclass
class LoopBatch:
    """One step of a recorded loop: its traces, inputs and targets (NumPy)."""

    traces: Any
    x: Any
    y: Any = None


def unsupported(model: Any, kind: str) -> str | None:
    """Why the ``kind`` loop of ``model`` cannot be recorded, ``None`` when it can."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if backend() not in ("tensorflow", "jax"):
        return f"model.{'evaluate' if kind == 'test' else kind}() is recorded on the TensorFlow and JAX backends only"
    missing = _missing_step(model, kind)
    if missing is not None:
        return missing
    if kind == "test" and int(getattr(model, "steps_per_execution", 1) or 1) != 1:
        # Keras keeps only the last step's logs of an execution: the others' traces would be lost
        return "model.evaluate() was called on a model compiled with steps_per_execution > 1"
    return None


def _missing_step(model: Any, kind: str) -> str | None:
    """Why this Keras has no ``kind`` step to record (``None``: it has its step and functions)."""
    for name in (f"{kind}_step", f"make_{kind}_function", f"{kind}_function"):
        if not hasattr(model, name):
            return f"this Keras has no model.{name} to record {kind} from"
    return None


def _key(model: Any, kind: str) -> tuple[Any, ...]:
    """What the compiled step depends on: a new compile() (new loss, metrics) rebuilds it."""
    return (
        kind,
        id(getattr(model, "_compile_loss", None)),
        id(getattr(model, "_compile_metrics", None)),
        id(getattr(model, "optimizer", None)),
        getattr(model, "steps_per_execution", 1),
        getattr(model, "jit_compile", None),
        getattr(model, "run_eagerly", None),
    )


def _augmented(tm: Any, step: Callable[..., Any], lock: Any = None) -> Callable[..., Any]:
    """``step`` (a bound ``predict_step``/``test_step``) with the taps: it returns
    ``(result, extras)`` (JAX: ``((outputs, extras), state)``)."""
    from keras.src.trainers.data_adapters import data_adapter_utils

    model, taps, is_jax = tm.model, tm.taps, backend() == "jax"

    def augmented(*args: Any) -> Any:
        x, y, _ = data_adapter_utils.unpack_x_y_sample_weight(args[-1])
        captured: list[Any] = [None] * len(taps)
        outputs: list[Any] = []
        me = threading.get_ident()

        def sink(i: int, out: Any) -> None:
            if threading.get_ident() != me:  # another thread's call through a tapped layer
                return
            if i < len(taps):
                captured[i] = out
            else:  # the model's own call: its output, the measured output's source
                outputs.append(out)

        with lock if lock is not None else contextlib.nullcontext(), tapped(list(taps) + [model], sink):
            result = step(*args)
        if not outputs or any(c is None for c in captured):
            raise RuntimeError("the step did not run the model's layers once each; it cannot be traced")
        # tuples, not lists: TensorFlow's Optional (the test loop's) would stack a list
        extras = {"flat": tuple(tm.flat_captures(outputs[0], captured)), "x": _tuples(x)}
        if y is not None:
            extras["y"] = _tuples(y)
        if is_jax:
            first, state = result
            return (first, extras), state
        return result, extras

    return augmented


def _tuples(value: Any) -> Any:
    """``value`` with every list made a tuple (dicts and leaves as they are)."""
    if isinstance(value, (list, tuple)):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


def _lists(value: Any) -> Any:
    """Back from :func:`_tuples`: several inputs or targets as a list, as Keras takes them."""
    if isinstance(value, tuple):
        return [_lists(v) for v in value]
    return value


def _stripping(fn: Callable[..., Any], keep: Callable[[Any], None]) -> Callable[..., Any]:
    """``fn`` (an augmented compiled function) returning what the plain one returns; the
    extras go to ``keep`` as NumPy."""
    from keras import tree

    is_jax = backend() == "jax"

    def function(*args: Any) -> Any:
        out = fn(*args)
        if is_jax:
            (first, extras), state = out
            keep(tree.map_structure(to_numpy, extras))
            return first, state
        first, extras = out
        keep(tree.map_structure(to_numpy, extras))
        return first

    return function


@dataclass
class Loop:
    """One traced Keras loop in one thread: what the model's ``<kind>_step`` and
    ``<kind>_function`` are *for that thread* while it runs (see :func:`run_traced`)."""

    kind: str
    model: Any
    step: Callable[..., Any]  # the augmented step
    fn: Any = None  # the function Keras calls: the augmented one, extras stripped
    building: bool = False  # Keras' make_<kind>_function is running: what it sets is ours
    built: Any = None


def run_traced(
    tm: Any,
    kind: str,
    run: Callable[[], Any],
    *,
    plain_step: Callable[..., Any],
    activate: Callable[[Loop], Any],
    lock: Any = None,
) -> tuple[Any, list[LoopBatch]]:
    """Run ``run()`` (Keras' ``predict``/``evaluate``/``test_on_batch`` of ``tm.model``,
    ``kind`` ``"predict"`` or ``"test"``) with the step traced; return its result
    unchanged and the traces of every step it ran, in order. Interrupted by a
    ``BaseException`` that is no ``Exception`` (pytest-timeout's failure, Ctrl-C), the
    traces of the steps that ran are on the exception as ``sadl_batches``.

    ``plain_step`` is the model's own step (bound); ``activate(loop)`` is a context
    manager during which the model's ``<kind>_step`` is ``loop.step`` and its
    ``<kind>_function`` is ``loop.fn`` in this thread only, and an assignment to
    ``<kind>_function`` while ``loop.building`` goes to ``loop.built`` (the recorded
    class of :mod:`pytest_sadl.capture.keras_calls` does this with a per-thread dispatch,
    so other threads keep the model's own). ``lock`` (a context manager) is held while the step is traced with the
    layers tapped, never while the loop waits for data: a generator that calls the model
    from tf.data's thread does not deadlock."""
    why = unsupported(tm.model, kind)
    if why is not None:
        raise ValueError(why)
    model = tm.model
    kept: list[Any] = []
    loop = Loop(kind, model, _augmented(tm, plain_step, lock))
    with activate(loop):
        key = _key(model, kind)
        fn = tm._loop_fns.get(key)
        if fn is None:
            loop.building = True
            try:
                getattr(model, f"make_{kind}_function")(force=True)
            finally:
                loop.building = False
            fn = tm._loop_fns[key] = loop.built
        loop.fn = _stripping(fn, kept.append)
        try:
            result = run()
        except Exception:
            raise
        except BaseException as exc:  # a timeout, Ctrl-C, SystemExit: the steps done go with it
            exc.sadl_batches = _batches(tm, kept)  # type: ignore[attr-defined]
            raise
    return result, _batches(tm, kept)


def _batches(tm: Any, kept: list[Any]) -> list[LoopBatch]:
    return [LoopBatch(tm.split(list(e["flat"])), _lists(e["x"]), _lists(e.get("y"))) for e in kept]
