"""Validation shared by the criteria: one place that turns bad arrays into clear errors.

Every check raises :class:`ValueError` with a message that names the argument, what is
wrong with it and what was expected, so that a caller never meets a traceback from deep
inside NumPy or SciPy.
"""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from pytest_sadl.errors import SadlWarning

__all__ = [
    "as_traces",
    "as_train_traces",
    "as_pred",
    "as_layers",
    "finite_or_raise",
    "available_bytes",
    "check_fits",
    "check_var_threshold",
    "class_moments",
    "class_list",
    "class_scatter",
    "classes_of",
    "examples",
    "one_blas_thread",
    "low_variance_filter",
    "VAR_RULES",
    "check_var_rule",
    "variance_filter",
    "reduce_layer",
    "row_chunks",
    "usable_classes",
    "warn",
]


def warn(message: str, *, depth: int = 0) -> None:
    """Issue a :class:`SadlWarning` attributed to the caller of the public API: three
    frames up from the function calling this one (a set-up function called by a measure's
    ``__init__``), ``depth`` more from a helper of that function."""
    warnings.warn(message, SadlWarning, stacklevel=4 + depth)


def _finite_or_raise(name: str, a: np.ndarray, chunk_bytes: int = 16 * 2**20) -> None:
    """A clear error when ``a`` holds NaN or inf: how many rows, the first. Checked a chunk
    of at most ``chunk_bytes`` rows at a time, so a memory-mapped array is read once and
    no ``n x d`` boolean array is made (2.5 GiB for 1.28M x 2,048 traces)."""
    if a.size == 0:
        return
    row_bytes = max(1, (a.size // max(1, len(a))) * a.itemsize)
    step = max(1, chunk_bytes // row_bytes)
    first, count, nan = -1, 0, False
    for s, rows, has_nan in _nonfinite_chunks(a, step):
        first = s + int(rows[0]) if first < 0 else first
        count += rows.size
        nan = nan or has_nan
    if count:
        raise ValueError(
            f"{name} contains {'NaN' if nan else 'inf'} values in {count} row(s) (first: row {first}); "
            "traces must be finite: check the model's inputs and weights for NaN/inf"
        )


def finite_or_raise(name: str, a: np.ndarray) -> None:
    """The clear error of :func:`as_layers` when ``a`` (named ``name``) holds NaN or inf."""
    _finite_or_raise(name, a)


def _nonfinite_chunks(a: np.ndarray, step: int) -> Iterator[tuple[int, np.ndarray, bool]]:
    """Of each chunk of ``step`` rows of ``a`` holding a NaN or an inf: its first row, the
    indices (in the chunk) of its rows that do, and whether a NaN is among them."""
    for s in range(0, len(a), step):
        block = np.asarray(a[s : s + step])
        if not np.isfinite(block).all():
            yield s, _bad_rows(block), bool(np.isnan(block).any())


def _bad_rows(block: np.ndarray) -> np.ndarray:
    """The indices of the rows of ``block`` holding a NaN or an inf."""
    bad = ~np.isfinite(block)
    return np.flatnonzero(bad.reshape(len(block), -1).any(axis=1)) if block.ndim > 1 else np.flatnonzero(bad)


def _check_size(name: str, shape: tuple[int, ...], allow_empty: bool) -> None:
    """Refuse traces of shape ``(n, d)`` without neurons, or without inputs unless ``allow_empty``."""
    if shape[1] == 0:
        raise ValueError(f"{name} has no neurons (shape {shape})")
    if not allow_empty and shape[0] == 0:
        raise ValueError(f"{name} is empty (shape {shape}); at least one input is needed")


def as_traces(name: str, a: object, *, dims: int | None = None, allow_empty: bool = False) -> np.ndarray:
    """Return ``a`` as a finite 2-D float64 array ``(n, d)``.

    ``dims``, when given, is the number of columns expected (the training traces' width).
    """
    try:
        arr = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric array of shape (n_inputs, n_neurons): {exc}") from None
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D (n_inputs, n_neurons), got shape {arr.shape}; "
            "reduce conv outputs per channel first (pytest_sadl.criteria.neurons.reduce_layer) "
            "or concatenate the layers' traces along axis 1"
        )
    _check_size(name, arr.shape, allow_empty)
    if dims is not None and arr.shape[1] != dims:
        raise ValueError(
            f"{name} has {arr.shape[1]} neurons per input but the training traces have {dims}; "
            "use traces of the same layers as the training profile"
        )
    _finite_or_raise(name, arr)
    return arr


def row_chunks(n: int, row_bytes: int, chunk_bytes: int) -> range:
    """Start rows of consecutive chunks of at most ``chunk_bytes`` (at least one row each)."""
    return range(0, n, max(1, chunk_bytes // max(1, row_bytes)))


def as_train_traces(name: str, a: object, *, chunk_bytes: int = 16 * 2**20) -> np.ndarray:
    """Return training traces ``(n, d)`` as they are when they are float32 or float64
    (a ``np.memmap`` stays a memmap: nothing is copied whole), else as a float64 copy.

    Finiteness is checked chunk by chunk, so a memory-mapped file is read once and never
    held in memory; the engine converts the rows it works on, a chunk at a time.
    """
    if isinstance(a, np.ndarray) and a.dtype in (np.float32, np.float64) and a.ndim == 2:
        _check_size(name, a.shape, allow_empty=False)
        _finite_or_raise(name, a, chunk_bytes)
        return a
    return as_traces(name, a)


def check_var_threshold(var_threshold: object) -> float:
    """``var_threshold`` as a float, or a clear error when it is not a finite number >= 0."""
    if not (isinstance(var_threshold, (int, float)) and var_threshold >= 0 and math.isfinite(var_threshold)):
        raise ValueError(f"var_threshold must be a finite number >= 0, got {var_threshold!r}")
    return float(var_threshold)


def classes_of(pred: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Distinct classes and, for each, the indices of its rows (in input order)."""
    order = np.argsort(pred, kind="stable")
    classes, starts = np.unique(pred[order], return_index=True)
    bounds = list(starts[1:]) + [len(pred)]
    return classes, [order[s:e] for s, e in zip(starts, bounds, strict=True)]


def examples(labels: Sequence[object], limit: int = 5) -> str:
    """The first ``limit`` of ``labels``, comma-separated, ``...`` when there are more."""
    shown = ", ".join(str(c) for c in list(labels)[:limit])
    return shown + (", ..." if len(labels) > limit else "")


def class_list(labels: Sequence[int], limit: int = 5) -> str:
    """``[7, 9]``; past ``limit`` classes the first few and the count, ``[0, 1, 2, 3, 4, ...] (1,000 classes)``."""
    if len(labels) <= limit:
        return "[" + ", ".join(str(c) for c in labels) + "]"
    return f"[{examples(labels, limit)}] ({len(labels):,d} classes)"


def usable_classes(who: str, classes: np.ndarray, members: list[np.ndarray], what: str) -> list[int]:
    """Indices of the classes with two or more training traces (the per-class criteria,
    LSA and MDSA, need a variance); the other classes get one :class:`SadlWarning` (a
    count and the first few, however many there are) saying ``what`` they lack, and none
    usable is an error. ``what`` reads after "it": "it has no covariance"."""
    lone = [int(classes[i]) for i, m in enumerate(members) if len(m) < 2]
    if lone:
        warn(_lone_classes(who, lone, what))
    usable = [i for i, m in enumerate(members) if len(m) >= 2]
    if not usable:
        raise ValueError(f"{who} needs at least one class with two or more training traces")
    return usable


def _lone_classes(who: str, lone: list[int], what: str) -> str:
    """The warning of :func:`usable_classes` about the classes ``lone`` of one training trace."""
    if len(lone) == 1:
        return f"{who}: class {lone[0]} has 1 training trace; {what} and its inputs score NaN"
    they = what.replace("it has", "they have").replace("it gets", "they get")
    return f"{who}: {len(lone):,d} classes have 1 training trace each (e.g. {examples(lone)}); {they} and their inputs score NaN"


#: How LSA/MDSA drop neurons of too little variance: ``"class"`` per class (the default),
#: ``"paper"`` the paper's filter (below the threshold in any class: dropped from all).
VAR_RULES = ("class", "paper")


def check_var_rule(var_rule: object) -> str:
    """``var_rule`` as given, or a clear error when it is not one of :data:`VAR_RULES`."""
    if var_rule not in VAR_RULES:
        raise ValueError(f"var_rule must be 'class' or 'paper', got {var_rule!r}")
    return str(var_rule)


def variance_filter(
    who: str, variances: Mapping[int, np.ndarray], var_threshold: float, var_rule: str, hint: str
) -> dict[int, np.ndarray]:
    """The neurons each class keeps (variance ``>= var_threshold``): with ``"paper"`` one
    set for all (:func:`low_variance_filter`); with ``"class"`` each class's own, a class
    in which no neuron varies left out with one warning; none kept anywhere is an error."""
    labels = list(variances)
    if var_rule == "paper":
        kept = low_variance_filter(who, [variances[c] for c in labels], var_threshold, hint)
        return {c: kept for c in labels}
    return _each_class_filter(who, variances, var_threshold, hint)


def _each_class_filter(
    who: str, variances: Mapping[int, np.ndarray], var_threshold: float, hint: str
) -> dict[int, np.ndarray]:
    """The ``"class"`` rule of :func:`variance_filter`: each class keeps its own neurons."""
    labels = list(variances)
    out = {c: np.flatnonzero(variances[c] >= var_threshold) for c in labels}
    empty = [c for c in labels if out[c].size == 0]
    if len(empty) == len(labels):
        raise _nothing_varies(who, len(variances[labels[0]]), var_threshold, hint)
    if empty:
        warn(
            f"{who}: no neuron has a training variance of at least var_threshold={var_threshold:g} in class(es) "
            f"{class_list(empty)}; their inputs score NaN",
            depth=1,  # from variance_filter's helper
        )
    return {c: v for c, v in out.items() if v.size}


def _nothing_varies(who: str, d: int, var_threshold: float, hint: str) -> ValueError:
    """The error of a layer none of whose ``d`` neurons varies enough in any class."""
    return ValueError(
        f"{who}: every one of the {d} neurons has a training variance below var_threshold={var_threshold:g} "
        f"in every class (the layer's outputs do not vary with the input); lower var_threshold or {hint}"
    )


def low_variance_filter(who: str, variances: Sequence[np.ndarray], var_threshold: float, hint: str) -> np.ndarray:
    """The neurons kept by the paper's filter: those whose training variance (``ddof=0``) is
    at least ``var_threshold`` in every usable class; none kept is an error ending in ``hint``."""
    low_var = np.zeros(len(variances[0]), dtype=bool)
    for var in variances:
        low_var |= var < var_threshold
    kept = np.flatnonzero(~low_var)
    if kept.size == 0:
        raise ValueError(
            f"{who}: every one of the {low_var.size} neurons has a training variance below "
            f"var_threshold={var_threshold:g} in some class; lower var_threshold or {hint}"
        )
    return kept


def class_moments(
    x: np.ndarray, rows: np.ndarray, chunk_bytes: int, *, scatter: bool = True
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """(mean, centred scatter matrix, variance with ``ddof=0``) of ``x[rows]``, in float64.

    Two passes of at most ``chunk_bytes`` of float64 rows each (mean, then scatter), so a
    memory-mapped training set is read a chunk at a time and no class is held whole.
    ``scatter=False``: no ``d x d`` matrix (``None`` in its place), the variance from the
    centred squares; :func:`class_scatter` makes the matrix later, one class at a time.
    """
    d = x.shape[1]
    step = max(1, chunk_bytes // (8 * d))
    total = np.zeros(d)
    for s in range(0, len(rows), step):
        total += np.asarray(x[rows[s : s + step]], dtype=np.float64).sum(axis=0)
    mean = total / len(rows)
    if not scatter:
        squares = np.zeros(d)
        for s in range(0, len(rows), step):
            centred = np.asarray(x[rows[s : s + step]], dtype=np.float64) - mean
            squares += np.einsum("ij,ij->j", centred, centred)
        return mean, None, squares / len(rows)
    matrix = np.zeros((d, d))
    for s in range(0, len(rows), step):
        centred = np.asarray(x[rows[s : s + step]], dtype=np.float64) - mean
        matrix += centred.T @ centred
    return mean, matrix, np.diag(matrix) / len(rows)


def class_scatter(x: np.ndarray, rows: np.ndarray, mean: np.ndarray, cols: np.ndarray, chunk_bytes: int) -> np.ndarray:
    """The centred scatter matrix of ``x[rows][:, cols]`` about ``mean`` (over every
    column), float64, a chunk of rows at a time: one class's ``len(cols)`` squared matrix."""
    step = max(1, chunk_bytes // (8 * x.shape[1]))
    out = np.zeros((cols.size, cols.size))
    for s in range(0, len(rows), step):
        centred = np.asarray(x[rows[s : s + step]], dtype=np.float64)[:, cols] - mean[cols]
        out += centred.T @ centred
    return out


_MEMINFO = "/proc/meminfo"


def available_bytes() -> int | None:
    """The memory the system can give this process now (``MemAvailable``), or ``None``
    where it does not say (not Linux)."""
    try:
        with open(_MEMINFO) as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def _budget(max_bytes: int | None) -> int | None:
    """The bytes a set-up may take: ``max_bytes``, else half the memory available now
    (``None`` where the system does not say)."""
    if max_bytes is not None:
        return int(max_bytes)
    available = available_bytes()
    return None if available is None else available // 2


def check_fits(
    who: str, what: str, *, classes: int, neurons: int, columns: int | None = None, max_bytes: int | None = None
) -> None:
    """Refuse in one line, before the work starts, a set-up that keeps one float64
    ``neurons x columns`` matrix per class (``columns``: ``neurons``) and makes four
    ``neurons x neurons`` ones for the class being fitted, when they need more than
    ``max_bytes`` (default: half the memory available now, leaving the other half to the
    rest of the run: the memory-mapped training traces' pages, which count as available,
    the model, the other criteria), saying what would fit instead: fewer classes at this
    width, or this many classes at a smaller width."""
    budget = _budget(max_bytes)
    matrix = neurons * (neurons if columns is None else max(1, columns)) * 8
    need = classes * matrix + 4 * neurons * neurons * 8
    if budget is None or need <= budget:
        return
    fit_k = max(0, (budget - 4 * neurons * neurons * 8) // matrix)
    fit_d = math.isqrt(max(0, budget // (8 * (classes + 4))))
    where = "that half the available memory allows" if max_bytes is None else "allowed (max_bytes)"
    raise ValueError(
        f"{who}: {what} need {gib(need)}, more than the {gib(budget)} {where}; at most {fit_k:,d} classes fit at "
        f"{neurons:,d} neurons, or all {classes:,d} at up to {fit_d:,d} neurons: project the traces to fewer "
        "dimensions first or measure a narrower layer"
    )


_BLAS_LOCK = threading.RLock()
_CONTROLLER: list[Any] = []


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS limited to one thread for the block. The limit is process-wide, so set-ups in
    several threads take turns (one saving the limit another set would leave the process
    on one thread); the controller, which scans the loaded libraries and may warn about
    them, is made once, its warnings silenced. The per-class set-ups of LSA and MDSA run
    in it: their small products and factorisations gain nothing from more threads, and
    waiting BLAS threads made them 5-25x slower on a busy 2-core machine."""
    from threadpoolctl import ThreadpoolController

    with _BLAS_LOCK:
        if not _CONTROLLER:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _CONTROLLER.append(ThreadpoolController())
        with _CONTROLLER[0].limit(limits=1, user_api="blas"):
            yield


def as_pred(name: str, pred: object, n: int) -> np.ndarray:
    """Return predicted classes as a 1-D int64 array of length ``n``."""
    given = np.asarray(pred)
    arr = _one_column(name, given, n)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name} must have one class per input: expected shape ({n},), got {given.shape}")
    if arr.size and not _whole_numbers(arr):
        raise ValueError(f"{name} must hold integer class labels, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _one_column(name: str, arr: np.ndarray, n: int) -> np.ndarray:
    """``arr`` flattened when it is a column ``(n, 1)``; probabilities ``(n, k)`` refused."""
    if arr.ndim != 2:
        return arr
    if arr.shape[1] > 1 and arr.shape[0] == n:
        raise ValueError(
            f"{name} has shape {arr.shape}: pass predicted classes (n,), e.g. np.argmax(probabilities, axis=1)"
        )
    return arr.reshape(-1) if arr.shape[1] == 1 else arr


def _whole_numbers(arr: np.ndarray) -> bool:
    """Integers, or finite numbers with no fractional part (``3.0``)."""
    if np.issubdtype(arr.dtype, np.integer):
        return True
    if not np.issubdtype(arr.dtype, np.number):
        return False
    return bool(np.all(np.isfinite(arr))) and not np.any(arr != np.round(arr))


def scoring_inputs(
    who: str, ats: object, pred: object | None, *, dims: int, classifier: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``(traces, classes)`` of the inputs a per-class measure (``who``: "LSA", "MDSA")
    scores: ``pred`` is required when it was built per class and refused when it was not
    (every input is then class 0)."""
    x = as_traces("ats", ats, dims=dims, allow_empty=True)
    name = who.lower()
    if classifier:
        if pred is None:
            raise ValueError(f"this {who} was built per class: pass the predicted classes, {name}(ats, pred)")
        return x, as_pred("pred", pred, len(x))
    if pred is not None:
        raise ValueError(f"this {who} was built without classes (train_pred=None): call {name}(ats) without pred")
    return x, np.zeros(len(x), np.int64)


def reduce_layer(a: np.ndarray) -> np.ndarray:
    """One value per neuron: the spatial mean over every axis but the first (inputs) and last (channels).

    A conv/pool output ``(n, h, w, c)`` becomes ``(n, c)``; ``(n, t, c)`` becomes ``(n, c)``;
    a 2-D output ``(n, units)`` is returned as it is.
    """
    if a.ndim <= 2:
        return a
    return np.asarray(a.mean(axis=tuple(range(1, a.ndim - 1))))


def _one_layer(
    name: str,
    i: int,
    layer: object,
    size: int | None,
    keep_float: bool,
    chunk_bytes: int,
    n: int | None,
    finite: bool = True,
) -> np.ndarray:
    """Layer ``i`` of :func:`as_layers` checked (at least 2-D, ``n`` inputs when ``n`` is
    known, finite, ``size`` neurons when given) and reduced to ``(n, neurons)``;
    ``finite=False``: a 2-D layer's finiteness left to the caller."""
    arr = np.asarray(layer)
    keep = keep_float and arr.ndim == 2 and arr.dtype.kind == "f"
    arr = arr if keep else np.asarray(arr, dtype=np.float64)
    if arr.ndim < 2:
        raise ValueError(f"{name}[{i}] must be at least 2-D (n_inputs, neurons), got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(
            f"{name}[{i}] has {arr.shape[0]} inputs but {name}[0] has {n}; all layers need the same inputs"
        )
    if finite or arr.ndim > 2:
        _finite_or_raise(f"{name}[{i}]", arr, chunk_bytes)
    arr = reduce_layer(arr)
    _check_neurons(f"{name}[{i}]", arr.shape, size)
    return arr


def _check_neurons(where: str, shape: tuple[int, ...], size: int | None) -> None:
    """Refuse a reduced layer ``(n, neurons)`` without neurons, or of other than ``size`` when given."""
    if shape[1] == 0:
        raise ValueError(f"{where} has no neurons (shape {shape})")
    if size is not None and shape[1] != size:
        raise ValueError(
            f"{where} has {shape[1]} neurons but the ranges were fitted on {size}; "
            "pass the outputs of the same layers, in the same order"
        )


def _layer_list(name: str, layers: object, sizes: Sequence[int] | None) -> list[Any] | tuple[Any, ...]:
    """The per-layer arrays of :func:`as_layers` (one array: one layer), as many as ``sizes``."""
    if isinstance(layers, np.ndarray):
        layers = [layers]
    if not isinstance(layers, (list, tuple)) or len(layers) == 0:
        raise ValueError(f"{name} must be a non-empty list of per-layer arrays (n_inputs, ...)")
    if sizes is not None and len(layers) != len(sizes):
        raise ValueError(
            f"{name} has {len(layers)} layer(s) but the neuron ranges were fitted on {len(sizes)}; "
            "pass the outputs of the same layers, in the same order"
        )
    return layers


def as_layers(
    name: str,
    layers: object,
    *,
    sizes: Sequence[int] | None = None,
    allow_empty: bool = True,
    keep_float: bool = False,
    chunk_bytes: int = 16 * 2**20,
    finite: bool = True,
) -> list[np.ndarray]:
    """Validate a list of per-layer outputs; return them reduced to ``(n, neurons)`` float64.

    ``keep_float``: a 2-D floating-point layer is returned in its own dtype rather than
    copied to float64, for callers whose result does not depend on it (a minimum or a
    maximum is the same value in either precision); layers that need the spatial mean
    are still reduced in float64. ``finite=False``: 2-D layers are not checked for NaN
    and inf, for callers that read it off a pass they make anyway and then raise
    :func:`finite_or_raise` (layers of more axes are, before their spatial mean)."""
    layers = _layer_list(name, layers, sizes)
    out: list[np.ndarray] = []
    n = None
    for i, layer in enumerate(layers):
        size = None if sizes is None else sizes[i]
        arr = _one_layer(name, i, layer, size, keep_float, chunk_bytes, n, finite)
        n = arr.shape[0] if n is None else n
        out.append(arr)
    if not allow_empty and n == 0:
        raise ValueError(f"{name} holds no inputs; at least one is needed")
    return out


#: rows per matrix product when scoring inputs (:func:`by_fixed_rows`)
SCORE_ROWS = 8


def by_fixed_rows(a: np.ndarray, b: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """``a @ b`` computed ``SCORE_ROWS`` rows of ``a`` at a time, the last block padded
    with zero rows, so that every product BLAS sees has the same shape. A BLAS product's
    last bits depend on its shape (its kernels and blocking change with the number of
    rows), so scoring a test's inputs alone or among other inputs gave LSA and MDSA
    scores that differed in their last bits; with one shape, each input's row of the
    product is the same whichever inputs share its call (``sadl combine`` of shards
    equals one run, bit for bit). On one BLAS thread: OpenBLAS splits a product between
    its threads by shape and load, and a row's bits then depend on its place in the
    block (measured: 1 score in 300 differed on 2 threads). Blocks of 8 rows: on
    OpenBLAS' SkylakeX kernels a row's bits in blocks of 16 or more depended on its place
    for some widths, in blocks of 8 for none (tests/test_ci.py checks it on the machine
    it runs on); the cost, measured on 2,000 inputs x 20,000 training traces x 102
    neurons: 2.2 s against 0.8 s for one product. The blocks go to BLAS as one stack
    (``np.matmul`` of ``(blocks, 8, d) @ (d, w)`` calls one product per block, in C), a
    chunk of ``chunk`` rows at a time: the same products and bits as a Python loop over
    the blocks, without its per-block cost (10,000 x 64 @ 64 x 63: 41 ms to 17 ms)."""
    m = len(a)
    dtype = np.result_type(a, b)
    out = np.empty((m, b.shape[1]), dtype=dtype)
    with one_blas_thread():
        for c0 in range(0, m, chunk):
            c1 = min(m, c0 + chunk)
            blocks = -(-(c1 - c0) // SCORE_ROWS)
            padded = np.zeros((blocks * SCORE_ROWS, a.shape[1]), dtype=dtype)
            padded[: c1 - c0] = a[c0:c1]
            product = np.matmul(padded.reshape(blocks, SCORE_ROWS, -1), b)
            out[c0:c1] = product.reshape(-1, b.shape[1])[: c1 - c0]
    return out
