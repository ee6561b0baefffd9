"""Loading the model under test, with Keras' safe mode left on and clear errors.

Public API
----------
``load_model(source, *, base_dir=None, what="model") -> keras.Model | torch.nn.Module``
    ``source`` is a ``.keras`` file (str or :class:`pathlib.Path`; relative paths are
    resolved against ``base_dir``), a ``"package.module:function"`` string naming a
    callable that returns a model (a Keras model or a ``torch.nn.Module``), or a
    ``keras.Model`` or ``torch.nn.Module`` (returned as it is). Keras is imported only
    when this is called. PyTorch files (``.pt``, ``.pth``, ``.pt2``...) are refused with
    the way to give such a model: a pickle runs code when loaded.

A legacy ``.h5`` (HDF5) file is loaded when Keras can load it with safe mode on (a model
of built-in layers, or of registered custom layers); one holding a ``Lambda`` layer is
refused, as in a ``.keras`` file.

A model file is loaded as ``keras.saving.load_model(path)`` loads it, compiled when it
holds a compile configuration (``evaluate``/``fit`` work on the ``sadl_model`` fixture);
when only that configuration cannot be restored (an unregistered custom loss) the model
is loaded uncompiled with one :class:`SadlModelWarning`.

Errors are :class:`~pytest_sadl.errors.SadlModelError` (a ``ValueError``) naming the file
and the fix: a missing file, a directory (a TensorFlow SavedModel), an ``.h5`` file Keras
cannot load safely, a file that is not a ``.keras`` archive, a model whose custom classes are not
registered, and a model that needs ``safe_mode=False`` (a ``Lambda`` layer holding
Python bytecode) — which pytest-sadl never turns off: loading a model file must not be
able to run code.
"""

from __future__ import annotations

import os
import warnings
import zipfile
from pathlib import Path
from typing import Any

from pytest_sadl.capture.backend import backend_error, import_backend
from pytest_sadl.errors import SadlModelError, SadlModelWarning
from pytest_sadl.specs import call_spec, is_callable_spec, resolve_path

__all__ = ["load_model", "SadlModelError", "SadlModelWarning"]


def _is_keras_model(obj: Any) -> bool:
    import sys

    keras = sys.modules.get("keras")
    return keras is not None and isinstance(obj, keras.Model)


def _is_torch_module(obj: Any) -> bool:
    from pytest_sadl.capture.torchdata import is_torch_module  # imports no torch

    return is_torch_module(obj)


_TORCH_SUFFIXES = (".pt", ".pth", ".pt2", ".bin", ".ckpt")


def load_model(source: Any, *, base_dir: str | os.PathLike[str] | None = None, what: str = "model") -> Any:
    """Return the Keras model or ``torch.nn.Module`` ``source`` names (see the module docstring)."""
    if _is_keras_model(source) or _is_torch_module(source):
        return source
    if isinstance(source, str) and is_callable_spec(source) and not Path(source).exists():
        return _from_loader(source, what)
    if not isinstance(source, (str, os.PathLike)):
        raise SadlModelError(
            f"{what}: expected a .keras path, 'package.module:function' or a keras.Model, got {type(source).__name__}"
        )
    return _from_file(resolve_path(source, base_dir), f"{what} {str(source)!r}")


def _from_loader(source: str, what: str) -> Any:
    """The model a ``"package.module:function"`` loader returns."""
    try:
        model = call_spec(source, what=what, error=SadlModelError)
    except SadlModelError as exc:  # the loader's own import of Keras/TensorFlow/JAX/torch failed
        missing = backend_error(exc.__cause__) if exc.__cause__ is not None else None
        if missing is not None:
            raise missing from None
        raise
    if not (_is_keras_model(model) or _is_torch_module(model)):
        raise SadlModelError(
            f"{what}: {source!r} returned {type(model).__name__}, not a keras.Model or torch.nn.Module"
        )
    return model


def _from_file(path: Path, label: str) -> Any:
    """The model in the file ``path`` (``label`` names it in errors)."""
    if not path.exists():
        raise SadlModelError(
            f"{label}: file {str(path)!r} does not exist; save the model with "
            "model.save('model.keras') and point to that file (relative to the rootdir)"
        )
    if path.is_dir():
        raise SadlModelError(
            f"{label}: {str(path)!r} is a directory (a TensorFlow SavedModel?); Keras 3 "
            "loads only .keras files: re-save the model with model.save('model.keras')"
        )
    suffix = path.suffix.lower()
    _refuse_torch_file(suffix, label)
    import_backend()  # a model file needs Keras: missing or broken, one line saying what to install
    if suffix in (".h5", ".hdf5"):
        return _load_h5(path, label)
    if suffix != ".keras":
        raise SadlModelError(
            f"{label}: unknown model format {suffix or '(no suffix)'!r}; give a .keras file (model.save('model.keras'))"
        )
    return _from_keras_file(path, label)


def _refuse_torch_file(suffix: str, label: str) -> None:
    """Raise for a PyTorch file: a pickled model runs code when loaded."""
    if suffix in _TORCH_SUFFIXES:
        raise SadlModelError(
            f"{label}: pytest-sadl does not load PyTorch files ({suffix}): a pickled model runs code when "
            "loaded. Give 'package.module:function' returning the nn.Module (build it and load a state dict "
            "with torch.load(path, weights_only=True)), or a sadl_model fixture in conftest.py"
        )


def _from_keras_file(path: Path, label: str) -> Any:
    """The model in a ``.keras`` archive, each way Keras fails to load it said in one line."""
    if not zipfile.is_zipfile(path):
        raise SadlModelError(
            f"{label}: {str(path)!r} is not a .keras archive (not a zip file; truncated or "
            "another format); re-save the model with model.save('model.keras')"
        )
    try:
        return _load_compiled(path, label)
    except ValueError as exc:
        raise _refused(exc, label) from exc
    except TypeError as exc:
        raise SadlModelError(
            f"{label}: Keras cannot rebuild the model ({exc}); if it uses custom layers, "
            "decorate them with @keras.saving.register_keras_serializable() and import "
            "their module before loading (e.g. in conftest.py), or provide the model from "
            "a 'sadl_model' fixture"
        ) from exc
    except Exception as exc:
        raise SadlModelError(
            f"{label}: Keras cannot load it ({type(exc).__name__}: {exc}); re-save the "
            "model with model.save('model.keras')"
        ) from exc


def _refused(exc: ValueError, label: str) -> SadlModelError:
    """The error for a ``ValueError`` of Keras' loader: safe mode refusing Python code, or another."""
    msg = str(exc)
    if "safe_mode" in msg or "unsafe" in msg.lower() or "lambda" in msg.lower():
        return SadlModelError(
            f"{label}: the model holds Python code (e.g. a Lambda layer) that Keras' "
            "safe mode refuses to deserialise, and pytest-sadl keeps safe mode on. "
            "Replace the Lambda with a registered custom layer, or provide the model "
            "from a 'sadl_model' fixture in conftest.py"
        )
    return SadlModelError(f"{label}: Keras cannot load it: {msg}")


def _load_compiled(path: Path, label: str) -> Any:
    """The model as ``keras.saving.load_model(path)`` gives it: compiled when the file holds a
    compile configuration, so ``evaluate`` and ``fit`` work in the tests as without the
    plugin. When only the compile configuration cannot be restored (a custom loss or
    metric that is not registered), the model is loaded uncompiled with one warning."""
    import keras

    try:
        return keras.saving.load_model(path, safe_mode=True)
    except Exception as compiled_exc:
        try:
            model = keras.saving.load_model(path, compile=False, safe_mode=True)
        except Exception:
            raise compiled_exc from None  # the model itself cannot be loaded: say why
        reason = str(compiled_exc).splitlines()[0] if str(compiled_exc) else type(compiled_exc).__name__
        warnings.warn(
            f"pytest-sadl: {label}: its compile configuration (loss, metrics) cannot be "
            f"restored ({reason[:200]}); the model is loaded uncompiled, so evaluate() and fit() "
            "need model.compile(...) first. Register the custom loss or metric with "
            "@keras.saving.register_keras_serializable() and import it in conftest.py",
            SadlModelWarning,
            stacklevel=2,
        )
        return model


def _load_h5(path: Path, label: str) -> Any:
    """A legacy HDF5 model, loaded with safe mode on (Keras refuses ``Lambda`` layers)."""
    with open(path, "rb") as fh:
        if fh.read(8) != b"\x89HDF\r\n\x1a\n":
            raise SadlModelError(
                f"{label}: {str(path)!r} is not an HDF5 file (truncated or another format); "
                "re-save the model with model.save('model.keras')"
            )
    try:
        return _load_compiled(path, label)
    except Exception as exc:
        raise _h5_refused(exc, label) from None


_H5_CONVERT = (
    "Convert it once where the model's code is at hand: "
    "keras.saving.load_model('model.h5', safe_mode=False).save('model.keras'), "
    "after replacing any Lambda layer with a registered custom layer"
)


def _h5_refused(exc: Exception, label: str) -> SadlModelError:
    """The error for a legacy HDF5 model Keras cannot load: safe mode refusing Python code, or another."""
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "safe_mode" in msg or "unsafe" in msg.lower() or "lambda" in msg.lower():
        return SadlModelError(
            f"{label}: the legacy HDF5 model holds Python code (a Lambda layer) that Keras' safe "
            f"mode refuses, and pytest-sadl keeps safe mode on. {_H5_CONVERT}"
        )
    return SadlModelError(f"{label}: Keras cannot load this legacy HDF5 model ({msg}). {_H5_CONVERT}")
