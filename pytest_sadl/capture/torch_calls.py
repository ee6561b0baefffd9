"""A native ``torch.nn.Module``'s recorded calls: its ``forward`` wrapped on the instance.

While a marked test runs, the module's ``forward`` is, on the instance, a wrapper that
records: ``model(x)`` (which calls ``forward``) and ``model.forward(x)`` both run the one
pass the test makes (:meth:`~pytest_sadl.capture.torch.TorchTraceModel.call_tensors` runs
the original ``forward`` with the trace model's hooks on), so the test gets the module's
own output tensor and the ledger gets its traces. The instance's own ``forward`` (set on
it, or its class's) is restored after.

:func:`recorded_inputs` says what a call's inputs are (``TorchTraceModel.call_inputs``:
one positional tensor per model input, or the tensors passed by keyword, ``model(**inputs)``,
``model(input_ids=..., attention_mask=...)``, by ``forward``'s parameter names; a call it
cannot read runs unrecorded, with a warning naming why), and :func:`forward_call` is the
recorded call itself.
torch is not imported here: the trace model runs the pass.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from pytest_sadl.capture.calls import Ledger, attempt

__all__ = ["recording_forward", "forward_call", "recorded_inputs"]


def recorded_inputs(tm: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, str | None]:
    """``(x, None)``: the inputs of ``forward(*args, **kwargs)`` as the trace model takes
    them (one tensor, or a tuple of one per input), or ``(None, why)`` when the call cannot
    be recorded."""
    x, why = tm.call_inputs(args, kwargs)  # positional, or by keyword (capture.torch, capture.hf)
    if x is None:
        return None, why
    return x, tm.unrecordable(x)


def forward_call(
    ledger: Ledger, tm: Any, inner: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """One call of the wrapped ``forward``: recorded for the running test (its output the
    module's own), or ``inner(*args, **kwargs)`` as it is (no test, a nested call, or a call
    that cannot be recorded: then with one warning per reason)."""
    rec = ledger.target()
    if rec is None:
        return inner(*args, **kwargs)
    x, why = recorded_inputs(tm, args, kwargs)
    if why is not None:
        ledger.warn_once(why, f"pytest-sadl: {why}; those inputs ran unrecorded (use sadl_record(x))")
        with ledger.lock, ledger.paused():
            return inner(*args, **kwargs)
    return attempt(
        ledger,
        rec,
        tm.host(x),
        lambda: inner(*args, **kwargs),
        lambda: tm.call_tensors(x, forward=inner),
        channels_first=True,
    )


@contextlib.contextmanager
def recording_forward(ledger: Ledger, model: Any, tm: Any) -> Iterator[None]:
    """``model.forward`` records through ``ledger`` while the block runs."""
    own = "forward" in model.__dict__
    saved = model.__dict__.get("forward")
    inner = model.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        return forward_call(ledger, tm, inner, args, kwargs)

    object.__setattr__(model, "forward", forward)
    try:
        yield
    finally:
        with ledger.lock:  # a call another thread is still making finishes first
            if own:
                object.__setattr__(model, "forward", saved)
            else:
                with contextlib.suppress(AttributeError):
                    object.__delattr__(model, "forward")
