"""Importing Keras and its backend, and the one line that says what to install when that fails.

pytest-sadl's TensorFlow, Keras and JAX are optional extras (``pytest-sadl[tensorflow]``,
``pytest-sadl[jax]``). When one is missing or broken (a partial install, a wheel for
another CPU, a low ``ulimit -v`` under which the native library cannot be mapped), the
import fails deep inside the backend with an ``ImportError``, ``ModuleNotFoundError``,
``OSError``, ``MemoryError``, ``SystemError`` or an ``AttributeError`` of a "partially
initialized module", whatever the backend's module code raised. :func:`backend_error` turns any of those into one :class:`SadlBackendError`
naming the module, the cause and the ``pip install`` that fixes it; the plugin raises it
as a ``pytest.UsageError`` (exit 4) and ``sadl`` prints it (exit 2), never a traceback.

Imports no backend itself: :func:`import_backend` does, when called.
"""

from __future__ import annotations

import os
import types
from typing import Any

from pytest_sadl.errors import SadlBackendError

__all__ = ["SadlBackendError", "backend_error", "import_backend", "install_hint"]

#: Top-level modules whose failing import is "the backend is not (properly) installed".
BACKEND_MODULES = frozenset(
    {"keras", "tensorflow", "tf_keras", "tensorboard", "jax", "jaxlib", "ml_dtypes", "h5py", "optree", "torch"}
)
_JAX = frozenset({"jax", "jaxlib"})


def install_hint(module: str | None = None) -> str:
    """The ``pip install`` of the extra that provides ``module`` (or the backend Keras is
    set to use: ``KERAS_BACKEND``, TensorFlow by default)."""
    top = (module or "").split(".")[0]
    if top == "torch":
        return _TORCH_HINT
    if module in (None, "keras"):  # the backend Keras is set to use
        backend = os.environ.get("KERAS_BACKEND", "tensorflow").strip().lower()
        return _KERAS_HINTS.get(backend, _TENSORFLOW_HINT)
    return _JAX_HINT if top in _JAX else _TENSORFLOW_HINT


_TORCH_HINT = 'pip install "pytest-sadl[torch]" (native torch.nn.Module models, or Keras 3 with KERAS_BACKEND=torch)'
_JAX_HINT = 'pip install "pytest-sadl[jax]" (Keras 3 on JAX, with KERAS_BACKEND=jax)'
_TENSORFLOW_HINT = 'pip install "pytest-sadl[tensorflow]" (or "pytest-sadl[jax]" with KERAS_BACKEND=jax)'
#: the install of Keras on each backend it may be set to use
_KERAS_HINTS = {
    "torch": 'pip install keras "pytest-sadl[torch]" (Keras 3 on torch, with KERAS_BACKEND=torch)',
    "jax": _JAX_HINT,
}


def _top(name: Any) -> str | None:
    return name.split(".")[0] if isinstance(name, str) and name else None


def _failing_import(exc: BaseException) -> str | None:
    """The backend module whose import ``exc`` ended, or ``None`` when ``exc`` is not a
    failed import of a backend (an error of the user's own code, of a file, ...)."""
    named = _top(getattr(exc, "name", None)) if isinstance(exc, ImportError) else None
    if named in BACKEND_MODULES:
        return named
    backend = _importing_backend(exc.__traceback__)
    # Whatever a backend's module code raised while it was imported is a broken import:
    # under a low ulimit -v TensorFlow and JAX fail with ImportError, MemoryError,
    # SystemError ("error return without exception set") or an AttributeError of the
    # half-made module an earlier failure left behind, depending on where memory ran out.
    return backend


def _importing_backend(tb: types.TracebackType | None) -> str | None:
    """The backend whose module code the traceback ``tb`` runs, or ``None``: a module being
    imported runs its "<module>" code (importlib's own frames are cut from the
    traceback), and the first such frame of a backend is the import that failed."""
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "<module>":
            top = _top(frame.f_globals.get("__name__"))
            if top in BACKEND_MODULES:
                return top
        tb = tb.tb_next
    return None


def _cause(exc: BaseException) -> str:
    """An exception as one line of at most 300 characters."""
    cause = " ".join((f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__).split())
    return cause[:297] + "..." if len(cause) > 300 else cause


def backend_error(exc: BaseException) -> SadlBackendError | None:
    """``exc`` as one line saying what to install, when it is a missing or broken import of
    Keras, TensorFlow or JAX (see the module docstring); ``None`` for anything else."""
    if isinstance(exc, SadlBackendError):
        return exc
    module = _failing_import(exc)
    if module is None:
        return None
    cause = _cause(exc)
    hint = install_hint(module)
    limit = ""
    if not isinstance(exc, ModuleNotFoundError):
        limit = "; if it is installed, the install is broken or the process is short of memory (ulimit -v)"
    return SadlBackendError(
        f"cannot import {module} ({cause}): pytest-sadl measures Keras 3 models and needs Keras "
        f"with a backend; install it with {hint}{limit}"
    )


def import_backend() -> Any:
    """``import keras`` (which imports the backend it is set to use); a failure is a
    :class:`SadlBackendError`."""
    try:
        import keras
    except Exception as exc:  # ImportError, OSError, MemoryError, a half-made module
        err = backend_error(exc)
        if err is None:  # pragma: no cover - keras failed in a way that is not an import
            raise
        raise err from None
    return keras
