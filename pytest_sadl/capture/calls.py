"""One recorded call of the model, whatever its backend: kept for a test, or run plain.

:mod:`~pytest_sadl.capture.keras_calls` (a Keras model's ``__call__``, ``predict``,
``evaluate``...) and :mod:`~pytest_sadl.capture.torch_calls` (a ``torch.nn.Module``'s
``forward``) decide what a call's inputs are and how the trace model runs it; both go
through :func:`attempt`, which runs the call once with its traces taken, hands them to
the :class:`Ledger` (the plugin's recorder, :class:`pytest_sadl.plugin.recorder.Recorder`)
and returns the model's own output. What cannot be recorded runs as the plain call, so
the test sees what the model gives without the plugin: an empty batch's output, the
model's own exception for an input it rejects.

The ledger is named by its protocol only: this room never imports the plugin.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["Ledger", "attempt", "parts", "short_reason"]


class Ledger(Protocol):
    """What a recorded call needs of the recorder: which test a call made now belongs to,
    where its traces and labels go, its warnings, its lock and its pause."""

    @property
    def lock(self) -> Any:
        """The reentrant lock of the recorder's state and of every recorded call."""

    def target(self) -> Any:
        """The running test's record, or ``None`` (no test, or a nested call)."""

    def paused(self) -> contextlib.AbstractContextManager[None]:
        """Calls made in this thread while the block runs are not recorded."""

    def add(self, traces: Any, x: Any, record: Any = None, *, channels_first: bool = False) -> None:
        """Keep one pass's traces and inputs for ``record``."""

    def add_targets(
        self, x: Any, y: Any, record: Any, *, n: int, classifier: bool, output: str, outputs: list[str]
    ) -> None:
        """Keep the targets ``y`` a test gave Keras as the labels of the ``n`` inputs ``x``."""

    def warn_once(self, key: str, message: str) -> None:
        """One warning per ``key``."""

    def warn_unrecorded(self, record: Any, why: str) -> None:
        """Once per test and reason: inputs of ``record``'s test ran unrecorded."""


def parts(x: Any) -> list[Any]:
    """The arrays of one input structure: an array, or a dict/list/tuple of them."""
    if isinstance(x, dict):
        return list(x.values())
    if isinstance(x, (list, tuple)):
        return list(x)
    return [x]


def _rows(x: Any) -> int | None:
    """The number of inputs (rows) of a batch, ``None`` when unknown."""
    for part in parts(x):
        shape = getattr(part, "shape", None)
        if shape is None:
            continue
        try:
            return int(shape[0]) if len(shape) else None
        except (TypeError, ValueError):  # an unknown (symbolic) batch size
            return None
    return None


def _head(x: Any, n: int) -> Any:
    """The first ``n`` rows of ``x`` (an array, or a list, tuple or dict of arrays, one per
    input), or ``None`` for anything else."""
    if isinstance(x, dict):
        return _mapping_head(x, n)
    if isinstance(x, (list, tuple)):
        each = [_head(v, n) for v in x]
        return None if any(v is None for v in each) else type(x)(each)
    return _array_head(x, n)


def _mapping_head(x: dict[Any, Any], n: int) -> dict[Any, Any] | None:
    """The first ``n`` rows of each input of a dict, or ``None`` when one has fewer."""
    heads = {k: _head(v, n) for k, v in x.items()}
    return None if any(v is None for v in heads.values()) else heads


def _array_head(x: Any, n: int) -> Any:
    """The first ``n`` rows of one array, or ``None`` when it has fewer or no length."""
    try:
        return x[:n] if len(x) >= n else None
    except TypeError:
        return None


def attempt(
    ledger: Ledger,
    rec: Any,
    x: Any,
    plain: Callable[[], Any],
    recorded: Callable[[], tuple[Any, Any]],
    *,
    channels_first: bool = False,
) -> Any:
    """One call of the recorded model: ``recorded()`` (the output and its traces, kept
    for ``rec``), or ``plain()`` where there is nothing to record (no test, an empty
    batch) or the plugin cannot record it, so the caller sees what the plain call gives.
    Interrupted (a timeout, Ctrl-C), the batches the pass finished count."""
    with ledger.lock:
        if rec is None or _rows(x) == 0:
            with ledger.paused():
                return plain()
        failure: Exception | None = None
        try:
            with ledger.paused():
                out, traces = recorded()
        except Exception as exc:  # bad input, or one the trace model cannot take
            failure = exc
        except BaseException as exc:  # a timeout or Ctrl-C mid-call: the batches done count
            partial = getattr(exc, "sadl_partial", None)
            head = None if partial is None else _head(x, len(partial))
            if head is not None:
                ledger.add(partial, head, rec, channels_first=channels_first)
            raise
        else:
            ledger.add(traces, x, rec, channels_first=channels_first)
            return out
        with ledger.paused():  # outside the except block: the model's own error, unchained
            out = plain()
        ledger.warn_unrecorded(rec, f"an input the model accepts could not be recorded ({short_reason(failure)})")
        return out


def short_reason(exc: BaseException | None) -> str:
    """An exception as one short line, for a warning."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
