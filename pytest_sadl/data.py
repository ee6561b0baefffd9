"""Training data for the profile: a path, a ``"package.module:function"`` callable, an
array, or a ``tf.data.Dataset``; and the error classes the rest of the package raises.

Everything here imports NumPy only; TensorFlow is touched only when the data *is* a
``tf.data.Dataset`` (it is then already imported by whoever made it).

Public API
----------
``load_training_data(source, *, base_dir=None, what="training data") -> TrainingData``
    Accepts a ``.npz``/``.npy`` path (str or :class:`pathlib.Path`, relative paths
    resolved against ``base_dir``), a ``"package.module:function"`` string naming a
    callable that returns any of the other forms, an array, an ``(x, y)`` tuple, a
    mapping with an ``"x"`` key, a ``tf.data.Dataset`` or a :class:`TrainingData`.
``TrainingData``
    ``.x`` (array or read-only memmap for ``.npy``), ``.y`` (labels or ``None``; the
    profile never uses them: classes are the model's predictions, as in the paper),
    ``.dataset``, ``.source``, ``len()`` (``None`` from :attr:`TrainingData.n` for a
    dataset), ``.batches(batch_size)``, ``.fingerprint()`` (order-independent),
    ``.row_digests()``, ``.check_shape(shape)``.
``digest_batches(batches) -> (fingerprint, row digests)``
    The same fingerprint for a stream of batches (one pass of a dataset).
``check_batch(x, expected_shape, *, what, offset=0)``
    Raises :class:`SadlDataError` for an empty batch, a wrong shape, a non-numeric
    dtype, NaN or inf, naming the input index and what was expected.

Errors (all subclass :class:`ValueError`, so callers can turn them into a usage error)
--------------------------------------------------------------------------------------
``SadlConfigError``  base: a configuration problem the user can fix; the message says how.
``SadlModelError``   the model cannot be loaded or is not supported.
``SadlLayerError``   a layer name or index that does not exist (the message lists them).
``SadlDataError``    training or test data that cannot be used.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "SadlConfigError",
    "SadlModelError",
    "SadlLayerError",
    "SadlDataError",
    "TrainingData",
    "digest_batches",
    "load_training_data",
    "import_object",
    "is_callable_spec",
    "call_spec",
    "resolve_path",
    "check_batch",
    "shape_matches",
]


class SadlConfigError(ValueError):
    """A configuration problem the user can fix; the message names the problem and the fix."""


class SadlModelError(SadlConfigError):
    """The model cannot be loaded, or is of a kind pytest-sadl cannot trace."""


class SadlLayerError(SadlConfigError):
    """A layer name or index that the model does not have; the message lists the layers."""


class SadlDataError(SadlConfigError):
    """Training or test inputs that cannot be used (missing, empty, wrong shape, NaN...)."""


_HASH_CHUNK = 1 << 24  # 16 MiB per hash update


def import_object(spec: str, *, what: str = "object", error: type[SadlConfigError] | None = None) -> Any:
    """Import ``"package.module:attr.sub"`` and return the attribute.

    Raises ``error`` (default :class:`SadlConfigError`) naming the module or attribute
    that is missing.
    """
    error = error or SadlConfigError
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise error(
            f"{what} {spec!r} is not of the form 'package.module:function'"
        )
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise error(
            f"{what} {spec!r}: cannot import module {module_name!r} ({exc}); "
            "check the spelling and that the module is importable from the rootdir "
            "(e.g. add it to the Python path)"
        ) from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise error(
                f"{what} {spec!r}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    return obj


def call_spec(spec: str, *, what: str, error: type[SadlConfigError]) -> Any:
    """Import the ``"package.module:function"`` callable and return what it returns.

    Anything it raises (other than a :class:`SadlConfigError`) becomes ``error`` naming
    the callable and the exception.
    """
    fn = import_object(spec, what=what, error=error)
    if not callable(fn):
        raise error(f"{what} {spec!r} is not callable")
    try:
        return fn()
    except SadlConfigError:
        raise
    except Exception as exc:
        raise error(f"{what}: calling {spec!r} raised {type(exc).__name__}: {exc}") from exc


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
    return all(p.isidentifier() for p in module_name.split(".")) and all(
        p.isidentifier() for p in attr.split(".")
    )


def _is_dataset(obj: Any) -> bool:
    """True for a ``tf.data.Dataset`` without importing TensorFlow when it is not loaded."""
    tf = _loaded_tf()
    return tf is not None and isinstance(obj, tf.data.Dataset)


def _loaded_tf() -> Any:
    import sys

    return sys.modules.get("tensorflow")


def shape_matches(actual: tuple[int, ...], expected: tuple[int | None, ...]) -> bool:
    """True when ``actual`` (one input, no batch axis) fits ``expected`` (``None`` = any)."""
    return len(actual) == len(expected) and all(
        e is None or a == e for a, e in zip(actual, expected)
    )


def _fmt_shape(shape: tuple[int | None, ...]) -> str:
    return "(" + ", ".join("any" if s is None else str(s) for s in shape) + (",)" if len(shape) == 1 else ")")


def _check_shape(actual: tuple[int, ...], expected: tuple[int | None, ...], what: str) -> None:
    if shape_matches(actual, expected):
        return
    hint = ""
    if shape_matches(actual + (1,), expected):
        hint = "; add the channel axis with x[..., None]"
    elif len(actual) == 1 and len(expected) > 1:
        hint = "; reshape the rows to the model's input shape"
    raise SadlDataError(
        f"{what} has inputs of shape {_fmt_shape(actual)} but the model expects "
        f"{_fmt_shape(expected)}{hint}"
    )


def check_batch(
    x: np.ndarray,
    expected_shape: tuple[int | None, ...] | None = None,
    *,
    what: str = "inputs",
    offset: int = 0,
    finite: bool = True,
) -> None:
    """Validate one batch of model inputs ``x`` of shape ``(n, *expected_shape)``.

    ``offset`` is the index of ``x[0]`` in the whole data, so that a NaN is reported
    at its index in the user's data, not in the batch.
    """
    if x.ndim == 0:
        raise SadlDataError(f"{what}: a scalar, not a batch of inputs; expected shape (n, ...)")
    if x.shape[0] == 0 and offset == 0:
        raise SadlDataError(f"{what} is empty (0 inputs); give at least one input")
    if x.dtype.kind not in "biuf":
        raise SadlDataError(
            f"{what} has dtype {x.dtype}, not a numeric array; convert it to float32"
        )
    if expected_shape is not None:
        _check_shape(tuple(x.shape[1:]), expected_shape, what)
    if finite and x.dtype.kind == "f" and x.size:
        bad = ~np.isfinite(x.reshape(x.shape[0], -1)).all(axis=1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            kind = "NaN" if np.isnan(x[i]).any() else "inf"
            raise SadlDataError(
                f"{what}: input {offset + i} contains {kind} "
                f"({int(bad.sum())} input(s) in this batch are not finite); "
                "clean or drop them"
            )


@dataclass
class TrainingData:
    """Training inputs from one source; see :func:`load_training_data`.

    Exactly one of ``x`` and ``dataset`` is set. ``file`` is the file the data came from
    (its bytes are what :meth:`fingerprint` hashes), or ``None``.
    """

    source: str
    x: np.ndarray | None = None
    y: np.ndarray | None = None
    dataset: Any = None
    file: Path | None = None
    _fingerprint: str | None = field(default=None, repr=False)
    _row_digests: np.ndarray | None = field(default=None, repr=False)

    @property
    def n(self) -> int | None:
        """Number of inputs, ``None`` for a dataset (unknown until iterated)."""
        return None if self.x is None else int(self.x.shape[0])

    def __len__(self) -> int:
        if self.x is None:
            raise TypeError("the length of a tf.data.Dataset source is unknown until iterated")
        return int(self.x.shape[0])

    def check_shape(self, expected_shape: tuple[int | None, ...]) -> None:
        """Check the whole array's shape (cheap; NaN is checked batch by batch)."""
        if self.x is not None:
            _check_shape(tuple(self.x.shape[1:]), expected_shape, self.source)

    def batches(self, batch_size: int) -> Iterator[np.ndarray]:
        """Yield the inputs in order, ``batch_size`` at a time (a dataset's own batches
        are re-cut to ``batch_size`` only when it yields single inputs)."""
        if self.x is not None:
            for start in range(0, self.x.shape[0], batch_size):
                yield np.asarray(self.x[start : start + batch_size])
            return
        yield from _dataset_batches(self.dataset, batch_size)

    def fingerprint(self) -> str:
        """sha256 hex of the *multiset* of inputs (:mod:`pytest_sadl.fingerprint`): the
        row format and the sorted digests of the rows, so that the same inputs in any
        order (a shuffled dataset, a re-ordered array) give the same fingerprint. Labels
        are not included: the profile does not use them. A dataset is streamed once."""
        if self._fingerprint is None:
            from pytest_sadl.fingerprint import multiset_fingerprint

            if self.x is not None:
                x = np.asarray(self.x)
                self._fingerprint = multiset_fingerprint(
                    self.row_digests(), dtype=x.dtype.str, row_shape=tuple(x.shape[1:])
                )
            else:
                self._fingerprint = digest_batches(_dataset_batches(self.dataset, None))[0]
        return self._fingerprint

    def row_digests(self) -> np.ndarray:
        """``(n, 16)`` uint8 digests of the rows of ``x`` in their order (computed once;
        for a dataset, whose order may change from pass to pass, use
        :func:`digest_batches` on the pass itself)."""
        if self.x is None:
            raise TypeError("row digests of a tf.data.Dataset depend on the pass; use digest_batches()")
        if self._row_digests is None:
            from pytest_sadl.fingerprint import row_digests

            x = self.x
            step = max(1, _HASH_CHUNK // max(1, int(np.prod(x.shape[1:], dtype=np.int64)) * x.dtype.itemsize))
            parts = [row_digests(np.asarray(x[i : i + step])) for i in range(0, x.shape[0], step)]
            self._row_digests = np.concatenate(parts) if parts else np.zeros((0, 16), np.uint8)
        return self._row_digests


def digest_batches(batches: Iterator[np.ndarray]) -> tuple[str, np.ndarray]:
    """(multiset fingerprint, row digests in the order seen) of a stream of batches."""
    from pytest_sadl.fingerprint import multiset_fingerprint, row_digests

    parts: list[np.ndarray] = []
    header: tuple[str, tuple[int, ...]] | None = None
    for batch in batches:
        batch = np.asarray(batch)
        if header is None:
            header = (batch.dtype.str, tuple(batch.shape[1:]))
        parts.append(row_digests(batch))
    dtype, shape = header or ("", ())
    digests = np.concatenate(parts) if parts else np.zeros((0, 16), np.uint8)
    return multiset_fingerprint(digests, dtype=dtype, row_shape=shape), digests


def _dataset_element_x(element: Any) -> Any:
    if isinstance(element, (tuple, list)):
        if not element:
            raise SadlDataError("the tf.data.Dataset yields empty tuples; yield x or (x, y)")
        return element[0]
    if isinstance(element, Mapping):
        if "x" not in element:
            raise SadlDataError(
                f"the tf.data.Dataset yields dicts with keys {sorted(element)}; "
                "yield x, (x, y) or a dict with an 'x' key"
            )
        return element["x"]
    return element


def _dataset_batches(dataset: Any, batch_size: int | None) -> Iterator[np.ndarray]:
    """Iterate a dataset as NumPy batches; single inputs are grouped into batches.

    A dataset is taken to yield single inputs when its element's rank is one less than
    the batches seen so far would need; we cannot know the model here, so the rule is:
    an element of rank ``r`` is a batch when its leading dimension is unknown (``None``)
    in the ``element_spec``, i.e. the dataset was ``.batch()``-ed.
    """
    spec = _dataset_element_x(dataset.element_spec)
    shape = getattr(spec, "shape", None)
    batched = shape is not None and len(shape) > 0 and shape[0] is None
    if batched:
        for element in dataset.as_numpy_iterator():
            yield np.asarray(_dataset_element_x(element))
        return
    size = batch_size or 256
    buf: list[np.ndarray] = []
    for element in dataset.as_numpy_iterator():
        buf.append(np.asarray(_dataset_element_x(element)))
        if len(buf) == size:
            yield np.stack(buf)
            buf = []
    if buf:
        yield np.stack(buf)


def _pick(keys: list[str], names: tuple[str, ...]) -> str | None:
    for name in names:
        if name in keys:
            return name
    return None


_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_NPY_MAGIC = b"\x93NUMPY"


def _check_magic(path: Path, source: str, kind: str) -> None:
    """NumPy takes any file that is neither a zip nor a ``.npy`` for a pickle and says so;
    name what the file is not instead (the zip magic for ``.npz``, NumPy's for ``.npy``)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
    except OSError:
        return  # np.load reports it
    if head.startswith(_ZIP_MAGIC) or head.startswith(_NPY_MAGIC):
        return
    what = "a zip archive of arrays, as np.savez(path, x=x, y=y) writes" if kind == ".npz" else "a NumPy array file, as np.save writes"
    raise SadlDataError(f"{source} is not a {kind} file ({what}); it starts with {head!r}")


def _from_npz(path: Path, source: str) -> TrainingData:
    _check_magic(path, source, ".npz")
    try:
        with np.load(path, allow_pickle=False) as f:
            keys = list(f.files)
            xkey = _pick(keys, ("x", "x_train", "X", "inputs"))
            if xkey is None and len(keys) == 1:
                xkey = keys[0]
            if xkey is None:
                raise SadlDataError(
                    f"{source}: the .npz holds {keys}; name the inputs 'x' (and the labels "
                    "'y'), e.g. np.savez(path, x=x, y=y)"
                )
            x = f[xkey]
            ykey = _pick(keys, ("y", "y_train", "Y", "labels")) if xkey != keys[0] or len(keys) > 1 else None
            y = f[ykey] if ykey else None
    except SadlDataError:
        raise
    except ValueError as exc:
        if "pickle" in str(exc).lower():
            raise SadlDataError(
                f"{source} holds Python objects (pickled); pytest-sadl loads data with "
                "allow_pickle=False: save plain numeric arrays"
            ) from exc
        raise SadlDataError(f"{source} is not a readable .npz file: {exc}") from exc
    except Exception as exc:  # zipfile.BadZipFile, OSError, EOFError...
        raise SadlDataError(f"{source} is not a readable .npz file: {exc}") from exc
    return TrainingData(source=source, x=x, y=y, file=path)


def _from_npy(path: Path, source: str) -> TrainingData:
    _check_magic(path, source, ".npy")
    try:
        x = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as exc:
        if "pickle" in str(exc).lower() or "object" in str(exc).lower():
            raise SadlDataError(
                f"{source} holds Python objects; pytest-sadl loads data with "
                "allow_pickle=False: save a plain numeric array"
            ) from exc
        raise SadlDataError(f"{source} is not a readable .npy file: {exc}") from exc
    except Exception as exc:
        raise SadlDataError(f"{source} is not a readable .npy file: {exc}") from exc
    return TrainingData(source=source, x=x, file=path)


def _from_value(value: Any, source: str) -> TrainingData:
    if isinstance(value, TrainingData):
        return value
    if _is_dataset(value):
        return TrainingData(source=source, dataset=value)
    if isinstance(value, Mapping):
        if "x" not in value:
            raise SadlDataError(
                f"{source} is a mapping with keys {sorted(map(str, value))}; it needs an 'x' key"
            )
        return _from_value((value["x"], value.get("y")), source)
    y = None
    if isinstance(value, tuple):
        if len(value) not in (1, 2):
            raise SadlDataError(
                f"{source} is a tuple of {len(value)} items; give x or (x, y)"
            )
        value, y = value[0], (value[1] if len(value) == 2 else None)
    try:
        x = np.asarray(value)
    except Exception as exc:
        raise SadlDataError(
            f"{source} ({type(value).__name__}) cannot be converted to an array: {exc}"
        ) from exc
    if x.dtype == object:
        raise SadlDataError(
            f"{source} ({type(value).__name__}) is not a numeric array; give an array of "
            "shape (n, *input_shape), an (x, y) tuple, a path or a tf.data.Dataset"
        )
    return TrainingData(source=source, x=x, y=None if y is None else np.asarray(y))


def load_training_data(
    source: Any, *, base_dir: str | os.PathLike[str] | None = None, what: str = "training data"
) -> TrainingData:
    """Resolve ``source`` to :class:`TrainingData` (see the module docstring for the forms).

    ``what`` names the data in error messages (``"training data"``, ``"--sadl-train"``).
    Raises :class:`SadlDataError` for a missing file, an unknown suffix, an unreadable or
    pickled file, a callable that fails or returns something else, or an empty array.
    """
    if isinstance(source, TrainingData):
        return source
    if isinstance(source, str) and is_callable_spec(source) and not Path(source).exists():
        value = call_spec(source, what=what, error=SadlDataError)
        data = _from_value(value, f"{what} from {source}")
    elif isinstance(source, (str, os.PathLike)):
        path = resolve_path(source, base_dir)
        label = f"{what} {str(source)!r}"
        if not path.exists():
            raise SadlDataError(
                f"{label}: file {str(path)!r} does not exist; give a .npz/.npy path "
                "(relative to the rootdir) or 'package.module:function'"
            )
        if path.is_dir():
            raise SadlDataError(f"{label}: {str(path)!r} is a directory; give a .npz or .npy file")
        suffix = path.suffix.lower()
        if suffix == ".npz":
            data = _from_npz(path, label)
        elif suffix == ".npy":
            data = _from_npy(path, label)
        else:
            raise SadlDataError(
                f"{label}: unknown format {suffix or '(no suffix)'!r}; save the inputs with "
                "np.savez(path, x=x, y=y) as .npz, or np.save as .npy"
            )
    else:
        data = _from_value(source, what)
    if data.x is not None:
        if data.x.ndim < 2:
            raise SadlDataError(
                f"{data.source} has shape {tuple(data.x.shape)}; expected (n, *input_shape) "
                "with one row per input"
            )
        if data.x.shape[0] == 0:
            raise SadlDataError(f"{data.source} is empty (0 inputs); give at least one input")
        if data.x.dtype.kind not in "biuf":
            raise SadlDataError(
                f"{data.source} has dtype {data.x.dtype}, not a numeric array; convert it to float32"
            )
    return data
