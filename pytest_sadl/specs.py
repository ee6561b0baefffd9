"""Objects named in configuration: ``"package.module:function"`` specs and relative paths.

The plugin's options, the ``sadl`` commands and the loaders of models and data name
callables and files the same way; this is where those names are resolved.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from pytest_sadl.errors import SadlConfigError, SadlModelError
from pytest_sadl.text import one_line

__all__ = ["call_spec", "import_object", "is_callable_spec", "resolve_path"]


def import_object(spec: str, *, what: str = "object", error: type[SadlConfigError] | None = None) -> Any:
    """Import ``"package.module:attr.sub"`` and return the attribute.

    Raises ``error`` (default :class:`SadlConfigError`) naming the module or attribute
    that is missing.
    """
    error = error or SadlConfigError
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise error(f"{what} {spec!r} is not of the form 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise error(
            f"{what} {spec!r}: cannot import module {module_name!r} ({exc}); "
            "check the spelling and that the module is importable from the rootdir "
            "(e.g. add it to the Python path)"
        ) from exc
    try:
        return _attribute(module, attr)
    except AttributeError:
        raise error(f"{what} {spec!r}: module {module_name!r} has no attribute {attr!r}") from None


def _attribute(obj: Any, dotted: str) -> Any:
    """``obj``'s attribute ``dotted`` (``"attr.sub"``), one part after another."""
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def call_spec(spec: str, *, what: str, error: type[SadlConfigError]) -> Any:
    """Import the ``"package.module:function"`` callable and return what it returns.

    Anything it raises (other than a :class:`SadlConfigError`) becomes ``error`` naming
    the callable and the exception; so does ``sys.exit(...)`` (a ``SystemExit`` would end
    pytest with an ``INTERNALERROR``). ``KeyboardInterrupt`` is not caught: pytest ends
    the run as interrupted (exit 2).
    """
    fn = import_object(spec, what=what, error=error)
    if not callable(fn):
        raise error(f"{what} {spec!r} is not callable")
    try:
        return fn()
    except SadlConfigError:
        raise
    except SystemExit as exc:  # the user's loader ended the process: say so, as a usage error
        raise error(_exit_message(spec, what, error, exc)) from None
    except Exception as exc:
        # the loader's own message (Keras': several lines, terminal colours) kept to one line
        raise error(f"{what}: calling {spec!r} raised {type(exc).__name__}: {one_line(exc, 600)}") from exc
    # KeyboardInterrupt (Ctrl-C in a slow loader) passes: pytest ends the run as interrupted


def _exit_message(spec: str, what: str, error: type[SadlConfigError], exc: SystemExit) -> str:
    """What a loader's ``sys.exit(...)`` while loading the model or the data is said as."""
    noun = "the model" if issubclass(error, SadlModelError) else "the training data"
    code = "" if exc.code is None else repr(exc.code)
    return (
        f"{spec} called sys.exit({code}) while loading {noun} ({what}); a loader must return "
        f"{noun} or raise an exception that says what is wrong"
    )


def resolve_path(source: str | os.PathLike[str], base_dir: str | os.PathLike[str] | None) -> Path:
    """``source`` as a path, relative ones taken from ``base_dir`` when it is given."""
    path = Path(source)
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    return path


def is_callable_spec(text: str) -> bool:
    module_name, sep, attr = text.partition(":")
    if not sep or "/" in text or "\\" in text:
        return False
    return _dotted_name(module_name) and _dotted_name(attr)


def _dotted_name(text: str) -> bool:
    """Identifiers joined by dots (``"package.module"``)."""
    return all(p.isidentifier() for p in text.split("."))
