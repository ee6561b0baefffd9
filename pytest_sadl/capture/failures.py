"""A failure of the user's model while pytest-sadl traces it, as one line.

The model and the data are the user's: an exception from a pass (a layer name TensorFlow
refuses as a scope, a shape a layer refuses, an op with no kernel) is a
:class:`~pytest_sadl.errors.SadlModelError` naming the model, what it was run on, the
backend's own message on one line (its terminal escapes removed, its controls escaped)
and the fix; the plugin makes it a usage error (exit 4), ``sadl`` exit 2. Never a
traceback: the message is the part of the traceback the user can act on.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from pytest_sadl.errors import SadlModelError
from pytest_sadl.text import one_line, plain, terminal

__all__ = ["pass_failure", "message"]

#: TensorFlow's words for a name it refuses as a (root) name scope.
_SCOPE = re.compile(r"'((?:[^'\\]|\\.)*)' is not a valid (?:root )?scope name")


def message(exc: BaseException) -> str:
    """The line of the backend's message that says what is wrong: TensorFlow's traced
    errors start with "in user code:" and a stack, and end with the error itself."""
    lines = [line.strip() for line in plain(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    name = type(exc).__name__
    for start, read in _READERS:
        if lines[0].startswith(start):
            found = read(name, lines)
            if found is not None:
                return found
    return f"{name}: {lines[0]}"


def _traced(name: str, lines: list[str]) -> str:
    """A traced call's error: the stack, then the error."""
    return f"{name}: {lines[-1]}"


def _graph_op(name: str, lines: list[str]) -> str:
    """A failed graph op's error: its node's stack, then why."""
    after = [i + 1 for i, line in enumerate(lines) if line.startswith('File "')]
    return f"{name}: {lines[after[-1] if after and after[-1] < len(lines) else -1]}"


def _layer_call(name: str, lines: list[str]) -> str | None:
    """Keras' error of a layer's call: the layer, then the error (``None`` without one)."""
    if len(lines) < 2:
        return None
    return f"{name} in {lines[0].split('calling ', 1)[1].rstrip('.')}: {lines[1]}"


#: the first line of a backend's message -> the reader of the line that says what is wrong
_READERS: tuple[tuple[str, Callable[[str, list[str]], str | None]], ...] = (
    ("in user code", _traced),
    ("Graph execution error", _graph_op),
    ("Exception encountered when calling", _layer_call),
)


def pass_failure(model_name: object, what: str, exc: BaseException) -> SadlModelError:
    """``exc``, raised while the model named ``model_name`` ran on ``what`` (``"the
    training data (train.npz)"``), as one line naming both and the fix."""
    model = terminal(repr(str(model_name)))
    scope = _SCOPE.search(plain(exc))
    if scope is not None:
        return SadlModelError(
            f"model {model} has a layer (or model) name TensorFlow refuses as a name scope, "
            f"{terminal(repr(scope.group(1)))} (only letters, digits and _ . / > - are allowed, and not _ "
            "or - first), so the model cannot be traced: Keras' own model.predict fails on it too; rename it"
        )
    return SadlModelError(
        f"model {model} failed on {terminal(what)} ({one_line(message(exc))}); check that model.predict runs on them"
    )
