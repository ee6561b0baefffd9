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
    mapping with an ``"x"`` key, a ``tf.data.Dataset`` (batched or not; elements ``x``,
    ``(x, y)``, ``(x, y, w)``), a ``keras.utils.PyDataset`` or another re-iterable
    object with a length (streamed, like a dataset), a generator or iterator of batches
    (read once into arrays, to its end or its ``len()``) or a :class:`TrainingData`.
    The ``y`` of a stream's elements is kept as ``.y`` after a full pass.
    For a model with several inputs: an ``.npz`` with one array per input keyed by the
    input names, a dict of arrays keyed by input names, or a list of arrays in
    ``model.inputs`` order (a *tuple* stays ``(x, y)``).
``TrainingData``
    ``.x`` (array or read-only memmap for ``.npy``; a dict of arrays by input name for
    several inputs; a list until :meth:`TrainingData.bind` names it), ``.y`` (labels or ``None``; the
    profile never uses them: classes are the model's predictions, as in the paper),
    ``.dataset``, ``.source``, ``len()`` (``None`` from :attr:`TrainingData.n` for a
    dataset), ``.batches(batch_size)``, ``.fingerprint()`` (order-independent),
    ``.row_digests()``, ``.check_shape(shape)``, ``.bind(input_names)`` (the data for a
    model with those inputs).
``digest_batches(batches) -> (fingerprint, row digests)``
    The same fingerprint for a stream of batches (one pass of a dataset).
``row_format(x)``, ``batch_row_digests(x)``, ``take_rows(x, rows)``
    The row format, per-row digests and selected rows of one input array, a dict of
    arrays by input name or a list of arrays (several inputs: one row is the inputs'
    rows together).
``adjust_rank(x, expected_shape)``
    A column array ``(n,)`` for an ``Input((1,))`` as ``(n, 1)``, as Keras takes it.
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

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from pytest_sadl.errors import SadlDataError
from pytest_sadl.specs import call_spec, is_callable_spec, resolve_path

__all__ = [
    "TrainingData",
    "digest_batches",
    "row_format",
    "batch_row_digests",
    "take_rows",
    "load_training_data",
    "check_batch",
    "shape_matches",
    "adjust_rank",
    "is_text",
    "text_rows",
]


_HASH_CHUNK = 1 << 24  # 16 MiB per hash update


def _is_dataset(obj: Any) -> bool:
    """True for a ``tf.data.Dataset`` without importing TensorFlow when it is not loaded."""
    tf = _loaded_tf()
    return tf is not None and isinstance(obj, tf.data.Dataset)


def _is_pydataset(obj: Any) -> bool:
    """True for a ``keras.utils.PyDataset`` (Keras is loaded when one exists)."""
    import sys

    keras = sys.modules.get("keras")
    kind = getattr(getattr(keras, "utils", None), "PyDataset", None)
    return kind is not None and isinstance(obj, kind)


def _is_stream(obj: Any) -> bool:
    """A source of batches the profile streams: a ``tf.data.Dataset``, a ``PyDataset``,
    or a re-iterable object with a length (each ``iter()`` a new pass: a Sequence)."""
    return _is_dataset(obj) or _is_pydataset(obj) or _is_reiterable(obj)


def _is_reiterable(obj: Any) -> bool:
    """An object with a length whose each ``iter()`` is a new pass (a Sequence), that is
    neither an iterator, a container of inputs nor an array."""
    return (
        hasattr(obj, "__iter__")
        and hasattr(obj, "__len__")
        and not hasattr(obj, "__next__")
        and not isinstance(obj, (str, bytes, list, tuple, dict, Mapping, np.ndarray))
        and not hasattr(obj, "shape")
    )


def _loaded_tf() -> Any:
    import sys

    return sys.modules.get("tensorflow")


def shape_matches(actual: tuple[int, ...], expected: tuple[int | None, ...]) -> bool:
    """True when ``actual`` (one input, no batch axis) fits ``expected`` (``None`` = any)."""
    return len(actual) == len(expected) and all(e is None or a == e for a, e in zip(actual, expected, strict=True))


def _fmt_shape(shape: tuple[int | None, ...]) -> str:
    return "(" + ", ".join("any" if s is None else str(s) for s in shape) + (",)" if len(shape) == 1 else ")")


def is_text(x: Any) -> bool:
    """An array of strings: a ``str``/``bytes`` dtype, or objects that are all ``str`` or
    ``bytes`` (how Keras takes raw text: ``np.array([...], dtype=object)``)."""
    if not isinstance(x, np.ndarray):
        return False
    if x.dtype.kind in "US":
        return True
    return x.dtype == object and x.size > 0 and all(isinstance(v, (str, bytes)) for v in x.flat)


RAGGED_FIX = (
    "pad the rows to one length (keras.utils.pad_sequences, or padded_batch for a dataset), "
    "or give raw strings to a model whose first layer is TextVectorization"
)


def _ragged(what: str) -> SadlDataError:
    return SadlDataError(
        f"{what} is ragged (rows of different lengths), which pytest-sadl does not measure; {RAGGED_FIX}"
    )


def _is_ragged_tensor(value: Any) -> bool:
    return type(value).__name__ in ("RaggedTensor", "RaggedTensorValue")


def text_bytes(value: Any) -> bytes:
    """One string as UTF-8 (``bytes`` as they are): the same text gives the same bytes
    whether NumPy holds it as ``str`` or TensorFlow hands it back as ``bytes``."""
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


def text_rows(x: np.ndarray) -> list[bytes]:
    """Each row of an array of strings as one canonical byte string (each string's length
    and UTF-8 bytes, and the row's shape): independent of the array's dtype and width."""
    n = int(x.shape[0])
    shape = repr(tuple(int(d) for d in x.shape[1:])).encode()
    return [_text_row(shape, row) for row in x.reshape(n, -1)]


def _text_row(shape: bytes, row: np.ndarray) -> bytes:
    """One row of strings as bytes: its shape, then each string's length and UTF-8 bytes."""
    parts = [shape]
    for v in row:
        b = text_bytes(v)
        parts += [len(b).to_bytes(8, "little"), b]
    return b"".join(parts)


def _text_row_digests(x: np.ndarray) -> np.ndarray:
    """``(n, 16)`` uint8 digests of the rows of an array of strings (:func:`text_rows`),
    as :func:`pytest_sadl.fingerprint.row_digests` gives of numbers."""
    n = int(x.shape[0])
    out = np.empty((n, 16), dtype=np.uint8)
    joined = b"".join(hashlib.sha256(b"text\0" + r).digest()[:16] for r in text_rows(x))
    out[:] = np.frombuffer(joined, dtype=np.uint8).reshape(n, 16)
    return out


def adjust_rank(x: np.ndarray, expected: tuple[int | None, ...]) -> np.ndarray:
    """``x`` (one input, batch axis first) with the rank the model expects, by the rule
    Keras' functional models apply to their inputs: a column array ``(n,)`` for an
    ``Input((1,))`` (generally: one axis short of a shape ending in 1) gains the last
    axis; one axis of size 1 too many loses it. Anything else is returned as it is."""
    rank = x.ndim - 1
    if rank == len(expected) - 1 and expected and expected[-1] == 1:
        return x.reshape(x.shape + (1,))
    if rank == len(expected) + 1 and x.shape[-1] == 1:
        return x.reshape(x.shape[:-1])
    return x


def _check_shape(actual: tuple[int, ...], expected: tuple[int | None, ...], what: str) -> None:
    if shape_matches(actual, expected):
        return
    hint = ""
    if shape_matches(actual + (1,), expected):
        hint = "; add the channel axis with x[..., None]"
    elif len(actual) == 1 and len(expected) > 1:
        hint = "; reshape the rows to the model's input shape"
    raise SadlDataError(
        f"{what} has inputs of shape {_fmt_shape(actual)} but the model expects {_fmt_shape(expected)}{hint}"
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
    text = _check_kind(x, what)
    if expected_shape is not None:
        _check_shape(tuple(x.shape[1:]), expected_shape, what)
    if finite and not text and x.dtype.kind == "f" and x.size:
        _check_finite(x, what, offset)


def _check_kind(x: np.ndarray, what: str) -> bool:
    """Whether ``x`` is text; raises for objects that are neither numbers nor text."""
    if x.dtype.kind in "biuf":
        return False
    text = is_text(x)
    if not text:
        _refuse_objects(x, what)
    return text


def _check_finite(x: np.ndarray, what: str, offset: int) -> None:
    """Raise naming the first input of a float batch that holds a NaN or an inf."""
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
    x: np.ndarray | dict[str, np.ndarray] | list[np.ndarray] | None = None
    y: np.ndarray | None = None
    dataset: Any = None
    file: Path | None = None
    _fingerprint: str | None = field(default=None, repr=False)
    _row_digests: np.ndarray | None = field(default=None, repr=False)
    #: already run through a keras-hub task's preprocessor (images stay images: not again)
    preprocessed: bool = field(default=False, repr=False)

    @property
    def n(self) -> int | None:
        """Number of inputs, ``None`` for a dataset (unknown until iterated)."""
        if self.x is None:
            return None
        first = _first(self.x)
        return int(first.shape[0]) if first is not None else 0

    def __len__(self) -> int:
        if self.x is None:
            raise TypeError("the length of a tf.data.Dataset source is unknown until iterated")
        return self.n or 0

    def adjusted(self, expected_shape: tuple[int | None, ...] | dict[str, tuple[int | None, ...]]) -> TrainingData:
        """These inputs with each array's rank adjusted to the model's (:func:`adjust_rank`:
        column arrays ``(n,)`` for ``Input((1,))`` inputs, as Keras takes them)."""
        x = self.x
        if isinstance(x, np.ndarray) and not isinstance(expected_shape, dict):
            new: Any = adjust_rank(x, expected_shape)
        elif isinstance(x, dict) and isinstance(expected_shape, dict):
            new = _adjusted_inputs(x, expected_shape)
        else:
            return self
        return self if new is x else replace(self, x=new, _fingerprint=None, _row_digests=None)

    def check_shape(self, expected_shape: tuple[int | None, ...] | dict[str, tuple[int | None, ...]]) -> None:
        """Check the whole arrays' shapes (cheap; NaN is checked batch by batch).

        ``expected_shape`` is one input's shape, or a dict of shapes by input name."""
        if self.x is None:
            return
        if isinstance(expected_shape, dict):
            self._check_shapes(expected_shape)
        elif isinstance(self.x, np.ndarray):
            _check_shape(tuple(self.x.shape[1:]), expected_shape, self.source)

    def _check_shapes(self, expected: dict[str, tuple[int | None, ...]]) -> None:
        """Check each input's array against its shape, for a model of several inputs."""
        if not isinstance(self.x, dict):
            raise SadlDataError(
                f"{self.source} is one array but the model has {len(expected)} inputs "
                f"({', '.join(expected)}); give one array per input, keyed by input name"
            )
        for name, shape in expected.items():
            _check_shape(tuple(self.x[name].shape[1:]), shape, f"{self.source} (input {name!r})")

    def bind(self, names: list[str]) -> TrainingData:
        """These inputs for a model whose inputs are ``names`` (in ``model.inputs`` order):
        one array for one input, else a dict of arrays by name, all of one length.

        Raises :class:`SadlDataError` naming the inputs the model has and what the data holds.
        """
        if self.x is None:
            return self
        if len(names) == 1:
            return self._bind_one(names[0])
        return self._bind_several(names)

    def _bind_one(self, name: str) -> TrainingData:
        """These inputs for a model of one input ``name``: one array."""
        x = self.x
        if isinstance(x, np.ndarray):
            return self
        if isinstance(x, list):
            return replace(self, x=_numeric(np.asarray(x), self.source), _fingerprint=None)
        assert isinstance(x, dict)
        return replace(self, x=x[_chosen_input(x, name, self.source)], _fingerprint=None)

    def _bind_several(self, names: list[str]) -> TrainingData:
        """These inputs for a model of several inputs ``names``: a dict of arrays by name."""
        x = self._keyed(names)
        missing = [n for n in names if n not in x]
        if missing:
            raise SadlDataError(
                f"{self.source} holds arrays {sorted(x)} but the model's inputs are {names}: "
                f"missing {missing}; key the arrays by input name"
            )
        bound = {n: _numeric(_ndarray(x[n]), f"{self.source} (input {n!r})") for n in names}
        _check_lengths(bound, self.source)
        return replace(self, x=bound, _fingerprint=None)

    def _keyed(self, names: list[str]) -> Any:
        """The arrays by input name (a list is taken in ``names`` order); raises for one array."""
        x = self.x
        if isinstance(x, np.ndarray):
            raise SadlDataError(
                f"{self.source} is one array but the model has {len(names)} inputs ({', '.join(names)}); "
                f"give one array per input keyed by input name, e.g. np.savez(path, "
                f"{', '.join(f'{n}=...' for n in names)})"
            )
        if isinstance(x, list):
            if len(x) != len(names):
                raise SadlDataError(
                    f"{self.source} is a list of {len(x)} arrays but the model has {len(names)} inputs "
                    f"({', '.join(names)}); give one array per input, in model.inputs order"
                )
            return dict(zip(names, x, strict=True))
        return x

    def batches(self, batch_size: int) -> Iterator[Any]:
        """Yield the inputs in order, ``batch_size`` at a time (a dataset's own batches
        are re-cut to ``batch_size`` only when it yields single inputs); a dict of arrays
        by input name for several inputs."""
        x = self.x
        if isinstance(x, (dict, np.ndarray)):
            for start in range(0, self.n or 0, batch_size):
                yield _slice_rows(x, start, start + batch_size)
            return
        if x is not None:
            raise SadlDataError(f"{self.source}: a list of arrays needs binding to the model's inputs first")
        yield from self._dataset_pass(batch_size)

    def _dataset_pass(self, batch_size: int) -> Iterator[Any]:
        """One pass over the dataset's batches; the targets of the whole pass are kept as
        ``.y`` (in that pass's order), as an array's are."""
        labels: list[Any] = []
        yield from _dataset_batches(self.dataset, batch_size, labels)
        if labels and all(v is not None for v in labels):
            try:
                self.y = np.concatenate([_label_rows(v) for v in labels])
            except ValueError:  # targets of varying shapes: not labels
                self.y = None

    def fingerprint(self) -> str:
        """sha256 hex of the *multiset* of inputs (:mod:`pytest_sadl.fingerprint`): the
        row format and the sorted digests of the rows, so that the same inputs in any
        order (a shuffled dataset, a re-ordered array) give the same fingerprint. Labels
        are not included: the profile does not use them. A dataset is streamed once."""
        if self._fingerprint is None:
            from pytest_sadl.fingerprint import multiset_fingerprint

            if self.x is not None:
                dtype, shape = row_format(self.x)
                self._fingerprint = multiset_fingerprint(self.row_digests(), dtype=dtype, row_shape=shape)
            else:
                self._fingerprint = digest_batches(_dataset_batches(self.dataset, None))[0]
        return self._fingerprint

    def row_digests(self) -> np.ndarray:
        """``(n, 16)`` uint8 digests of the rows of ``x`` in their order (computed once;
        for a dataset, whose order may change from pass to pass, use
        :func:`digest_batches` on the pass itself). With several inputs, a row is the
        inputs' rows together (:func:`batch_row_digests`)."""
        if self.x is None:
            raise TypeError("row digests of a tf.data.Dataset depend on the pass; use digest_batches()")
        if self._row_digests is None:
            n = self.n or 0
            step = max(1, _HASH_CHUNK // max(1, _row_bytes(self.x)))
            parts = [batch_row_digests(_slice_rows(self.x, i, i + step)) for i in range(0, n, step)]
            self._row_digests = np.concatenate(parts) if parts else np.zeros((0, 16), np.uint8)
        return self._row_digests


def _adjusted_inputs(x: dict[str, np.ndarray], expected: dict[str, tuple[int | None, ...]]) -> dict[str, np.ndarray]:
    """Arrays by input name with their ranks adjusted (:func:`adjust_rank`); ``x`` itself when none changes."""
    out = {k: adjust_rank(v, expected[k]) if k in expected else v for k, v in x.items()}
    return out if any(out[k] is not x[k] for k in x) else x


def _chosen_input(x: dict[str, Any], name: str, source: str) -> str:
    """The key of the one model input ``name`` in arrays by name: ``name``, or the only key."""
    chosen = name if name in x else (next(iter(x)) if len(x) == 1 else None)
    if chosen is None:
        raise SadlDataError(
            f"{source} holds arrays {sorted(x)}; name the model's input {name!r} "
            f"(or 'x'), e.g. np.savez(path, {name}=x, y=y)"
        )
    return chosen


def _check_lengths(bound: dict[str, np.ndarray], source: str) -> None:
    """Raise when the inputs' arrays have different numbers of rows."""
    lengths = {n: int(a.shape[0]) for n, a in bound.items()}
    if len(set(lengths.values())) > 1:
        raise SadlDataError(
            f"{source}: the inputs have different numbers of rows {lengths}; give one row per input in every array"
        )


def _ndarray(value: Any) -> np.ndarray:
    """``value`` as an array; an array (or a subclass such as a memmap) as it is."""
    return value if isinstance(value, np.ndarray) else np.asarray(value)


def _label_rows(v: Any) -> np.ndarray:
    """One batch's targets with one row per input (flattened past the first axis)."""
    return np.asarray(v).reshape(len(v), -1) if np.ndim(v) > 1 else np.asarray(v)


def _row_bytes(x: Any) -> int:
    """The bytes of one row of the inputs (of every input together); 1 with no array."""
    if _first(x) is None:
        return 1
    return sum(int(np.prod(a.shape[1:], dtype=np.int64)) * a.dtype.itemsize for a in _arrays(x))


def _arrays(x: Any) -> list[np.ndarray]:
    """The input arrays of one array, a dict of arrays (in its order) or a list of arrays."""
    if isinstance(x, dict):
        return [np.asarray(v) for v in x.values()]
    if isinstance(x, list):
        return [np.asarray(v) for v in x]
    return [np.asarray(x)]


def _slice_rows(x: Any, start: int, stop: int) -> Any:
    """Rows ``start:stop`` of one array, of every array of a dict, or of a list."""
    return _index_rows(x, slice(start, stop))


def take_rows(x: Any, rows: np.ndarray) -> Any:
    """Rows ``rows`` (indices) of one array, of every array of a dict, or of a list."""
    return _index_rows(x, rows)


def _index_rows(x: Any, index: Any) -> Any:
    """``a[index]`` of one array, of every array of a dict, or of a list, as NumPy."""
    if isinstance(x, dict):
        return {k: np.asarray(v[index]) for k, v in x.items()}
    if isinstance(x, list):
        return [np.asarray(v[index]) for v in x]
    return np.asarray(x[index])


def row_format(x: Any) -> tuple[str, tuple[int, ...]]:
    """``(dtype, row shape)`` that the fingerprint records with the row digests; for
    several inputs the names, dtypes and shapes of every input go into the dtype text."""
    if isinstance(x, (dict, list)):
        return _inputs_format(x), ()
    a = np.asarray(x)
    return _dtype_text(a), tuple(int(d) for d in a.shape[1:])


def _inputs_format(x: dict[str, Any] | list[Any]) -> str:
    """The dtype text of several inputs: each input's name (or index), dtype and row shape."""
    named = x.items() if isinstance(x, dict) else enumerate(x)
    text = ";".join(
        f"{name}:{_dtype_text(np.asarray(a))}:{tuple(int(d) for d in np.shape(a)[1:])}" for name, a in named
    )
    return f"inputs[{text}]"


def batch_row_digests(x: Any) -> np.ndarray:
    """``(n, 16)`` uint8 row digests of one batch: of the array's rows, or, for several
    inputs (a dict by name or a list), the digest of each row's inputs' digests in order."""
    if not isinstance(x, (dict, list)):
        return _digests_of(np.asarray(x))
    per_input = [_digests_of(a) for a in _arrays(x)]
    if not per_input:
        return np.zeros((0, 16), np.uint8)
    from pytest_sadl.fingerprint import row_digests

    return row_digests(np.concatenate(per_input, axis=1))


def _digests_of(x: np.ndarray) -> np.ndarray:
    from pytest_sadl.fingerprint import row_digests

    return _text_row_digests(x) if is_text(x) else row_digests(x)


def _dtype_text(a: np.ndarray) -> str:
    """The dtype the fingerprint records: ``"text"`` for strings of any width or kind."""
    return "text" if is_text(a) else a.dtype.str


def digest_batches(batches: Iterator[Any]) -> tuple[str, np.ndarray]:
    """(multiset fingerprint, row digests in the order seen) of a stream of batches
    (arrays, or dicts of arrays by input name)."""
    from pytest_sadl.fingerprint import multiset_fingerprint

    parts: list[np.ndarray] = []
    header: tuple[str, tuple[int, ...]] | None = None
    for batch in map(_batch_value, batches):
        if header is None:
            header = row_format(batch)
        parts.append(batch_row_digests(batch))
    dtype, shape = header or ("", ())
    digests = np.concatenate(parts) if parts else np.zeros((0, 16), np.uint8)
    return multiset_fingerprint(digests, dtype=dtype, row_shape=shape), digests


def _batch_value(batch: Any) -> Any:
    """A batch as an array, or as it is for several inputs (a dict or a list)."""
    return batch if isinstance(batch, (dict, list)) else np.asarray(batch)


def _first(x: Any) -> Any:
    """The first array of an array, a dict or a list of arrays (``None`` when empty)."""
    if isinstance(x, dict):
        return next(iter(x.values()), None)
    if isinstance(x, list):
        return np.asarray(x[0]) if x else None
    return x


def _numeric(x: np.ndarray, source: str) -> np.ndarray:
    """``x`` when it holds numbers or strings (a text model's inputs), else one line saying why not."""
    if x.dtype.kind not in "biuf" and not is_text(x):
        _refuse_objects(x, source)
    return x


def _refuse_objects(x: np.ndarray, what: str) -> None:
    """The error for inputs that are neither numbers nor strings: rows of sequences of
    different lengths (ragged) or other objects."""
    if x.dtype == object and any(isinstance(v, (list, tuple, np.ndarray)) or _is_ragged_tensor(v) for v in x.flat):
        raise _ragged(what)
    raise SadlDataError(
        f"{what} has dtype {x.dtype}, neither numbers nor strings; convert it to float32 "
        "(or to strings, for a model whose first layer is TextVectorization or StringLookup)"
    )


def _dataset_element_x(element: Any) -> Any:
    """The inputs of one dataset element: ``x``, ``x`` of ``(x, y)``, ``element["x"]``, or
    a dict of inputs by name."""
    if isinstance(element, (tuple, list)):
        if not element:
            raise SadlDataError("the tf.data.Dataset yields empty tuples; yield x or (x, y)")
        return element[0]
    if isinstance(element, Mapping):
        return element["x"] if "x" in element else dict(element)
    return element


def _dataset_element_y(element: Any) -> Any:
    """The targets of one element: ``y`` of ``(x, y)``/``(x, y, w)`` or ``element["y"]``, else ``None``."""
    if isinstance(element, (tuple, list)):
        return element[1] if len(element) > 1 else None
    if isinstance(element, Mapping) and "x" in element:
        return element.get("y")
    return None


def _stream_elements(stream: Any) -> Iterator[Any]:
    """The batches of a ``PyDataset`` (by index) or of one pass of a re-iterable object."""
    if _is_pydataset(stream):
        yield from _pydataset_batches(stream)
    else:
        yield from stream


def _pydataset_batches(stream: Any) -> Iterator[Any]:
    """A ``PyDataset``'s batches by index, then its ``on_epoch_end``."""
    count = stream.num_batches
    if count is None:
        raise SadlDataError(
            "the training PyDataset has no length (num_batches is None); give it a __len__, "
            "the profile reads the training data to its end"
        )
    for i in range(count):
        yield stream[i]
    if hasattr(stream, "on_epoch_end"):
        stream.on_epoch_end()


def _element_arrays(element: Any) -> Any:
    """A dataset element's inputs as NumPy arrays (a dict of them for several inputs)."""
    x = _dataset_element_x(element)
    return {k: np.asarray(v) for k, v in x.items()} if isinstance(x, dict) else np.asarray(x)


def _element_target(element: Any) -> Any:
    """A dataset element's target as a NumPy array; ``None`` when it has none (or a structured one)."""
    y = _dataset_element_y(element)
    return None if y is None or isinstance(y, (dict, list, tuple)) else np.asarray(y)


def _dataset_batches(dataset: Any, batch_size: int | None, labels: list[Any] | None = None) -> Iterator[np.ndarray]:
    """Iterate a dataset as NumPy batches; single inputs are grouped into batches.

    A dataset is taken to yield single inputs when its element's rank is one less than
    the batches seen so far would need; we cannot know the model here, so the rule is:
    an element of rank ``r`` is a batch when its leading dimension is unknown (``None``)
    in the ``element_spec``, i.e. the dataset was ``.batch()``-ed. A ``PyDataset`` or
    another re-iterable source yields batches. ``labels``, when given, gets each
    yielded batch's targets (``None`` where an element has none).
    """
    if not _is_dataset(dataset):
        yield from _element_batches(_stream_elements(dataset), labels)
    elif _is_batched(dataset):
        yield from _element_batches(dataset.as_numpy_iterator(), labels)
    else:
        yield from _grouped_batches(dataset.as_numpy_iterator(), batch_size or 256, labels)


def _is_batched(dataset: Any) -> bool:
    """Whether a ``tf.data.Dataset`` yields batches: its element's leading dimension is
    unknown (``None``) in the ``element_spec``, i.e. it was ``.batch()``-ed."""
    spec = _first(_dataset_element_x(dataset.element_spec))
    shape = getattr(spec, "shape", None)
    return shape is not None and len(shape) > 0 and shape[0] is None


def _element_batches(elements: Iterable[Any], labels: list[Any] | None) -> Iterator[Any]:
    """Elements that are batches, as NumPy batches (their targets into ``labels``)."""
    for element in elements:
        if labels is not None:
            labels.append(_element_target(element))
        yield _element_arrays(element)


def _grouped_batches(elements: Iterable[Any], size: int, labels: list[Any] | None) -> Iterator[Any]:
    """Elements that are single inputs, stacked ``size`` at a time (their targets into ``labels``)."""
    buf: list[Any] = []
    ys: list[Any] = []
    for element in elements:
        buf.append(_element_arrays(element))
        ys.append(_element_target(element))
        if len(buf) == size:
            yield _stacked(buf, ys, labels)
            buf, ys = [], []
    if buf:
        yield _stacked(buf, ys, labels)


def _stacked_targets(ys: list[Any]) -> np.ndarray | None:
    """Single inputs' targets as one batch's; ``None`` when one has none."""
    return None if any(v is None for v in ys) else np.stack(ys)


def _stacked(buf: list[Any], ys: list[Any], labels: list[Any] | None) -> Any:
    """Single inputs ``buf`` as one batch; their targets ``ys`` as one (or ``None``) into ``labels``."""
    if labels is not None:
        labels.append(_stacked_targets(ys))
    if isinstance(buf[0], dict):
        return {k: np.stack([b[k] for b in buf]) for k in buf[0]}
    return np.stack(buf)


_LABEL_KEYS = ("y", "y_train", "Y", "labels")


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
    raise SadlDataError(f"{source} is not a {kind} file ({_FILE_KINDS[kind]}); it starts with {head!r}")


#: what a file of each suffix is
_FILE_KINDS = {
    ".npz": "a zip archive of arrays, as np.savez(path, x=x, y=y) writes",
    ".npy": "a NumPy array file, as np.save writes",
}


def _npz_keys(keys: list[str]) -> tuple[str | None, str | None]:
    """The keys of the inputs (``None``: one array per input) and of the labels in a ``.npz``."""
    xkey = _pick(keys, ("x", "x_train", "X", "inputs"))
    if xkey is None and len(keys) == 1:
        xkey = keys[0]
    ykey = _pick(keys, _LABEL_KEYS) if xkey != keys[0] or len(keys) > 1 else None
    return xkey, ykey


def _npz_arrays(f: Any, source: str) -> tuple[Any, np.ndarray | None]:
    """The inputs and labels of an open ``.npz``: its ``x`` (or only) array, else one array
    per input keyed by input name (chosen by bind()); the labels by their usual keys."""
    keys = list(f.files)
    xkey, ykey = _npz_keys(keys)
    y = f[ykey] if ykey else None
    if xkey is not None:
        return f[xkey], y
    names = [k for k in keys if k != ykey]
    if not names:
        raise SadlDataError(
            f"{source}: the .npz holds only labels {keys}; add the inputs as 'x' (one "
            "input) or one array per input keyed by input name"
        )
    return {k: f[k] for k in names}, y


def _from_npz(path: Path, source: str) -> TrainingData:
    _check_magic(path, source, ".npz")
    try:
        with np.load(path, allow_pickle=False) as f:
            x, y = _npz_arrays(f, source)
    except SadlDataError:
        raise
    except ValueError as exc:
        if "pickle" in str(exc).lower():
            raise SadlDataError(
                f"{source} holds Python objects (pickled); pytest-sadl loads data with "
                "allow_pickle=False: save plain numeric arrays, and text as strings (x.astype(str))"
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
                "allow_pickle=False: save a plain numeric array, or text as strings (x.astype(str))"
            ) from exc
        raise SadlDataError(f"{source} is not a readable .npy file: {exc}") from exc
    except Exception as exc:
        raise SadlDataError(f"{source} is not a readable .npy file: {exc}") from exc
    return TrainingData(source=source, x=x, file=path)


def _is_torch_data(obj: Any) -> bool:
    from pytest_sadl.capture.torchdata import is_torch_data  # imports no torch

    return is_torch_data(obj)


def _is_hf_dataset(obj: Any) -> bool:
    from pytest_sadl.capture.hf import is_hf_dataset  # imports no datasets

    return is_hf_dataset(obj)


def _from_torch_data(value: Any, source: str) -> TrainingData:
    """A torch ``Dataset`` or ``DataLoader``, read once, as arrays."""
    from pytest_sadl.capture.torchdata import arrays_from_torch_data

    x, y = arrays_from_torch_data(value, source)
    return TrainingData(source=source, x=x, y=y)


def _from_hf_dataset(value: Any, source: str) -> TrainingData:
    """A Hugging Face ``datasets.Dataset``: its numeric columns, by name."""
    from pytest_sadl.capture.hf import dataset_columns

    return _from_value(dataset_columns(value, source), source)


def _from_stream(value: Any, source: str) -> TrainingData:
    """A ``tf.data.Dataset``, a ``PyDataset`` or a re-iterable with a length: streamed."""
    return TrainingData(source=source, dataset=value)


def _from_array_list(value: list[Any], source: str) -> TrainingData:
    """Arrays in model.inputs order (several inputs) or rows of one input: bind() decides."""
    return TrainingData(source=source, x=[_as_array(v, source) for v in value])


def _is_training_data(value: Any) -> bool:
    return isinstance(value, TrainingData)


def _given(value: TrainingData, source: str) -> TrainingData:
    return value


def _is_iterator(value: Any) -> bool:
    """A generator or iterator (read once, to its end)."""
    return hasattr(value, "__next__")


def _is_mapping(value: Any) -> bool:
    return isinstance(value, Mapping)


def _is_tuple(value: Any) -> bool:
    return isinstance(value, tuple)


def _from_value(value: Any, source: str) -> TrainingData:
    """Training data from a Python value, read by the first reader whose kind it is
    (:data:`_VALUE_READERS`), else as one array."""
    for kind, read in _VALUE_READERS:
        if kind(value):
            return read(value, source)
    return TrainingData(source=source, x=_as_array(value, source))


def _is_array_list(value: Any) -> bool:
    """Whether ``value`` is a non-empty list of arrays (or tensors)."""
    return isinstance(value, list) and bool(value) and all(hasattr(v, "shape") for v in value)


def _optional_array(y: Any) -> np.ndarray | None:
    return None if y is None else np.asarray(y)


def _from_mapping(value: Mapping[Any, Any], source: str) -> TrainingData:
    """``{"x": ..., "y": ...}``, or one array per input keyed by input name (and labels)."""
    if "x" in value:
        return _from_value((value["x"], value.get("y")), source)
    inputs = _mapping_inputs(value, source)
    y = next((value[k] for k in _LABEL_KEYS if k in value), None)
    if not inputs:
        raise SadlDataError(
            f"{source} is a mapping with keys {sorted(map(str, value))}; it needs an 'x' key "
            "(one input) or one array per input keyed by input name"
        )
    return TrainingData(source=source, x=inputs, y=_optional_array(y))


def _mapping_inputs(value: Mapping[Any, Any], source: str) -> dict[str, np.ndarray]:
    """A mapping's arrays by input name (its labels left out)."""
    return {str(k): _as_array(v, f"{source} (input {k!r})") for k, v in value.items() if k not in _LABEL_KEYS}


def _from_tuple(value: tuple[Any, ...], source: str) -> TrainingData:
    """``(x,)`` or ``(x, y)``; ``x`` one array, ``{input: array}`` or ``[arrays in model.inputs order]``."""
    if len(value) not in (1, 2):
        raise SadlDataError(f"{source} is a tuple of {len(value)} items; give x or (x, y)")
    x, y = value[0], (value[1] if len(value) == 2 else None)
    if isinstance(x, Mapping) or _is_array_list(x):
        return replace(_from_value(x, source), y=_optional_array(y))
    return TrainingData(source=source, x=_as_array(x, source), y=_optional_array(y))


def _from_iterator(it: Any, source: str) -> TrainingData:
    """A generator's batches (``x``, ``(x,)``, ``(x, y)``, ``(x, y, w)``, dicts for several
    inputs) read once into arrays: it cannot be read again for the profile's second pass.
    ``len()`` or ``__length_hint__``, when the iterator has one, is how many batches it has."""
    batches = _read_out(it)
    if not batches:
        raise SadlDataError(f"{source} is an empty generator (0 batches); give at least one input")
    xs = [_dataset_element_x(b) for b in batches]
    ys = [_dataset_element_y(b) for b in batches]
    try:
        x = _joined_inputs(xs, source)
        y = _joined_targets(ys)
    except ValueError as exc:
        raise SadlDataError(
            f"{source}: the generator's batches cannot be joined ({exc}); yield batches of one shape"
        ) from None
    return TrainingData(source=source, x=x, y=y)


def _read_out(it: Any) -> list[Any]:
    """An iterator's items to its end, or as many as its ``len()`` or ``__length_hint__`` says."""
    import itertools
    import operator

    known = operator.length_hint(it, -1)
    return list(itertools.islice(it, known) if known >= 0 else it)


def _joined_inputs(xs: list[Any], source: str) -> Any:
    """A generator's input batches as one array (a dict of them for several inputs)."""
    if isinstance(xs[0], Mapping):
        return {k: np.concatenate([np.asarray(b[k]) for b in xs]) for k in xs[0]}
    return np.concatenate([_as_array(b, source) for b in xs])


def _joined_targets(ys: list[Any]) -> np.ndarray | None:
    """A generator's target batches as one array; ``None`` when one has none (or a structured one)."""
    if any(v is None or isinstance(v, (dict, list, tuple)) for v in ys):
        return None
    return np.concatenate([np.asarray(v) for v in ys])


def _as_array(value: Any, source: str) -> np.ndarray:
    """``value`` (an array, a tensor, nested lists) as a NumPy array of numbers."""
    value = _tensor_numpy(value)
    if _is_ragged_tensor(value):
        raise _ragged(f"{source} (a tf.RaggedTensor)")
    try:
        x = np.asarray(value)
    except Exception as exc:
        if "inhomogeneous" in str(exc):  # NumPy on rows of different lengths
            raise _ragged(source) from None
        raise SadlDataError(f"{source} ({type(value).__name__}) cannot be converted to an array: {exc}") from exc
    if x.dtype == object and not is_text(x):
        _refuse_object_array(x, value, source)
    return x


def _tensor_numpy(value: Any) -> Any:
    """A tensor as a NumPy array (a torch tensor detached, on the CPU); anything else as it is.

    A symbolic tensor raises here, and ``np.asarray`` in :func:`_as_array` names the problem."""
    if not isinstance(value, np.ndarray) and hasattr(value, "numpy") and callable(value.numpy):
        with contextlib.suppress(Exception):
            value = value.detach().cpu().numpy() if hasattr(value, "detach") else value.numpy()
    return value


def _refuse_object_array(x: np.ndarray, value: Any, source: str) -> None:
    """Raise for an array of objects: rows of different lengths, or neither numbers nor strings."""
    if any(isinstance(v, (list, tuple, np.ndarray)) for v in x.flat):
        raise _ragged(source)
    raise SadlDataError(
        f"{source} ({type(value).__name__}) holds objects, neither numbers nor strings; give an array of "
        "shape (n, *input_shape), an (x, y) tuple, a path or a tf.data.Dataset"
    )


#: (is it this kind of value, its reader), in the order they are asked
_VALUE_READERS: tuple[tuple[Callable[[Any], bool], Callable[[Any, str], TrainingData]], ...] = (
    (_is_training_data, _given),
    (_is_torch_data, _from_torch_data),
    (_is_hf_dataset, _from_hf_dataset),
    (_is_stream, _from_stream),
    (_is_iterator, _from_iterator),
    (_is_mapping, _from_mapping),
    (_is_array_list, _from_array_list),
    (_is_tuple, _from_tuple),
)


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
        data = _from_file(source, base_dir, what)
    else:
        data = _from_value(source, what)
    _check_loaded(data)
    return data


#: the reader of each data file's suffix
_FILE_READERS = {".npz": _from_npz, ".npy": _from_npy}


def _from_file(source: str | os.PathLike[str], base_dir: str | os.PathLike[str] | None, what: str) -> TrainingData:
    """A ``.npz`` or ``.npy`` file, relative to ``base_dir``, read by its suffix's reader."""
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
    reader = _FILE_READERS.get(suffix)
    if reader is None:
        raise SadlDataError(
            f"{label}: unknown format {suffix or '(no suffix)'!r}; save the inputs with "
            "np.savez(path, x=x, y=y) as .npz, or np.save as .npy"
        )
    return reader(path, label)


def _check_loaded(data: TrainingData) -> None:
    """Raise when an input array of loaded data is a scalar, empty or not numeric."""
    arrays = {"": data.x} if isinstance(data.x, np.ndarray) else (data.x if isinstance(data.x, dict) else {})
    for name, x in arrays.items():
        _check_rows(x, f"{data.source} (input {name!r})" if name else data.source)


def _check_rows(x: np.ndarray, label: str) -> None:
    """Raise when one loaded input array is a scalar, empty or not numeric."""
    if x.ndim < 1:
        raise SadlDataError(f"{label} is a scalar; expected (n, *input_shape) with one row per input")
    if x.shape[0] == 0:
        raise SadlDataError(f"{label} is empty (0 inputs); give at least one input")
    _numeric(x, label)
