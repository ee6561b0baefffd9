"""Every exception and warning pytest-sadl raises for its users.

Errors are :class:`ValueError` subclasses whose message is one line naming the problem
and the fix, so that the plugin can turn any of them into a usage error (exit 4) and
``sadl`` into exit 2. Warnings all derive from :class:`SadlWarning`, so
``-W error::pytest_sadl.errors.SadlWarning`` (or ``ignore::``) covers them all.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

__all__ = [
    "SadlConfigError",
    "SadlModelError",
    "SadlLayerError",
    "SadlDataError",
    "SadlBackendError",
    "ResultsFileError",
    "SadlWarning",
    "SadlModelWarning",
    "SadlCacheWarning",
    "SadlRecordingWarning",
    "sadl_warnings_into",
]


class SadlConfigError(ValueError):
    """A configuration problem the user can fix; the message names the problem and the fix."""


class SadlModelError(SadlConfigError):
    """The model cannot be loaded, or is of a kind pytest-sadl cannot trace."""


class SadlLayerError(SadlConfigError):
    """A layer name or index that the model does not have; the message lists the layers."""


class SadlDataError(SadlConfigError):
    """Training or test inputs that cannot be used (missing, empty, wrong shape, NaN...)."""


class SadlBackendError(SadlConfigError):
    """Keras or its backend (TensorFlow, JAX) cannot be imported; the message says what to
    install (see :func:`pytest_sadl.capture.backend.backend_error`)."""


class ResultsFileError(ValueError):
    """A results file that cannot be used: unreadable, not JSON, another schema, a newer
    version, or a field of the wrong type or out of its range. The message is one line
    naming the file and the field."""


class SadlWarning(UserWarning):
    """A result was computed, but with a fallback the user should know about."""


class SadlModelWarning(SadlWarning):
    """The model loaded, but not all of it: its compile configuration could not be restored."""


class SadlCacheWarning(SadlWarning):
    """The profile cache could not be used or written; the run goes on without it."""


class SadlRecordingWarning(SadlWarning):
    """An input reached the model but could not be recorded."""


@contextlib.contextmanager
def sadl_warnings_into(lines: list[str]) -> Iterator[None]:
    """pytest-sadl's own warnings raised inside, each appended to ``lines`` (a report's
    lines) once the block ends; every other warning warned again as it was raised. A
    block that raises passes its exception on and its warnings are dropped."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        if issubclass(w.category, SadlWarning):
            lines.append(str(w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
