"""Neuron coverage criteria on NumPy arrays: NC (DeepXplore), KMNC, NBC and SNAC (DeepGauge).

``layers`` is a list of per-layer outputs ``(n_inputs, ...)`` as a model gives them; an
output with more than two axes (conv/pool ``(n, h, w, c)``) counts one neuron per channel,
its value the spatial mean (:func:`reduce_layer`).

Each criterion has a one-shot function (``nc``, ``kmnc``, ``nbc``, ``snac``) and a
cumulative class of one shape (:class:`NeuronCoverage`, :class:`KMultisectionCoverage`,
:class:`NeuronBoundaryCoverage`, :class:`StrongNeuronActivationCoverage`)::

    cov = KMultisectionCoverage(ranges, k=1000)
    new = cov.update(layers)      # targets newly covered by this batch
    cov.merge(other)              # e.g. another xdist worker's state
    cov.value, cov.covered, cov.total, cov.per_layer()

Semantics, per neuron with training range ``[low, high]``:

* NC: per input and layer, the layer's output is min-max scaled to [0, 1] over all its
  values (the whole feature map for a conv layer, as DeepXplore's ``scale``), then averaged
  per channel; a neuron is covered when that value exceeds ``threshold``. An input whose
  layer output is constant scales to 0 (DeepXplore would divide by zero). When the layer
  output was reduced before it reached here, its per-input minimum and maximum must come
  with it so the scaling stays that of the full map: pass ``extrema=``, or pass the
  :class:`~pytest_sadl.capture.Traces` themselves (traced with ``extrema=True``, as
  ``TrainingProfile.trace_model()`` and the plugin do), which carry them. ``Traces`` traced
  without extrema are refused: scaling over the channel means instead of the map gives
  another, larger number than DeepXplore's definition.
* KMNC: ``[low, high]`` is cut into ``k`` equal sections, section ``j`` being
  ``[low + j (high-low)/k, low + (j+1) (high-low)/k)`` and the last one closed so that the
  training maximum falls in it; values outside ``[low, high]`` cover no section.
  A neuron with ``low == high`` (constant over the training set, e.g. a dead ReLU) has no
  sections and is left out of KMNC's total: KMNC = covered / (k * neurons with low < high),
  where DeepGauge divides by ``k * |N|``. Its k sections would all have width zero, so no
  test could cover them apart, and counting them would cap KMNC below 100% by the share of
  dead neurons, a property of the model and not of the tests. NBC and SNAC count it as usual.
* NBC: the upper corner is ``value > high``, the lower ``value < low``;
  ``NBC = (|upper| + |lower|) / (2 |N|)``.
* SNAC: ``|upper| / |N|``.
* NBC and SNAC with ``std_scale = s > 0`` (dnn-tip's ``scaler``, Weiss and Tonella, ISSTA
  2022): ``high + s * std`` and ``low - s * std`` in place of ``high`` and ``low``, ``std``
  the neuron's training standard deviation (``ddof=0``, :attr:`NeuronRanges.std`); the
  comparisons stay strict (dnn-tip's are ``>=`` and ``<=``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from pytest_sadl.criteria.checks import as_layers, finite_or_raise, reduce_layer
from pytest_sadl.criteria.shape import Batch

if TYPE_CHECKING:
    from pytest_sadl.results import Metric

__all__ = [
    "NeuronRanges",
    "fit_ranges",
    "RangeFit",
    "NonFiniteTraces",
    "reduce_layer",
    "nc",
    "kmnc",
    "nbc",
    "snac",
    "NeuronCoverage",
    "KMultisectionCoverage",
    "NeuronBoundaryCoverage",
    "StrongNeuronActivationCoverage",
]

Extrema = Sequence["tuple[np.ndarray, np.ndarray] | None"]


@dataclass(frozen=True)
class NeuronRanges:
    """Per-neuron ``[low, high]`` of each layer over the training set, and the per-neuron
    standard deviation (``ddof=0``) of the training traces (``std``; ``None`` when fitted
    with ``fit_ranges(..., std=False)`` or in a profile stored before it was kept: NBC's and
    SNAC's ``std_scale`` then needs it)."""

    low: tuple[np.ndarray, ...]
    high: tuple[np.ndarray, ...]
    names: tuple[str, ...] = ()
    std: tuple[np.ndarray, ...] | None = None

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(int(a.size) for a in self.low)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Flat arrays for an ``.npz`` file (no pickles): concatenated bounds and layer sizes."""
        arrays = {
            "low": np.concatenate(self.low),
            "high": np.concatenate(self.high),
            "sizes": np.asarray(self.sizes, dtype=np.int64),
        }
        if self.names:
            arrays["names"] = np.asarray(self.names, dtype=np.str_)
        if self.std is not None:
            arrays["std"] = np.concatenate(self.std)
        return arrays

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> NeuronRanges:
        sizes = np.asarray(arrays["sizes"], dtype=np.int64)
        low, high = np.asarray(arrays["low"], np.float64), np.asarray(arrays["high"], np.float64)
        if low.shape != high.shape or low.ndim != 1 or low.size != int(sizes.sum()):
            raise ValueError("saved neuron ranges are inconsistent: low/high must be 1-D with sum(sizes) values")
        cuts = np.cumsum(sizes)[:-1]
        names = tuple(str(n) for n in arrays["names"]) if "names" in arrays else ()
        std = None
        if "std" in arrays:
            flat = np.asarray(arrays["std"], np.float64)
            if flat.shape != low.shape:
                raise ValueError("saved neuron ranges are inconsistent: std must have one value per neuron")
            std = tuple(np.split(flat, cuts))
        return cls(tuple(np.split(low, cuts)), tuple(np.split(high, cuts)), names, std)

    def widened(self, i: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
        """Layer ``i``'s ``(low - scale * std, high + scale * std)``: NBC's and SNAC's
        boundaries (dnn-tip's ``scaler``); ``scale == 0``: ``(low, high)`` themselves.
        Raises ``ValueError`` when ``scale > 0`` and the ranges carry no ``std``."""
        if scale == 0:
            return self.low[i], self.high[i]
        if self.std is None:
            raise ValueError(
                "the boundaries scaled by the training standard deviation need the per-neuron "
                "standard deviations, which these ranges were stored without; rebuild it "
                "(sadl profile build --rebuild; in code, fit_ranges(..., std=True)) or leave the std scale at 0"
            )
        return self.low[i] - scale * self.std[i], self.high[i] + scale * self.std[i]


def fit_ranges(
    train_layers: object, names: Sequence[str] = (), *, chunk_bytes: int = 16 * 2**20, std: bool = True
) -> NeuronRanges:
    """Per-neuron minimum and maximum of each layer over the training inputs, and (``std``,
    the default) each neuron's standard deviation, which only NBC's and SNAC's
    ``std_scale`` uses: ``std=False`` leaves out its two passes (KMNC, NBC and SNAC at
    scale 0 need only the minimum and maximum).

    A layer may be a ``np.memmap``: it is read ``chunk_bytes`` of rows at a time (the
    finiteness check included), so nothing of the size of the training set is allocated."""
    # float32 traces stay float32 (no float64 copy of every layer): their minimum and
    # maximum are float32 values, exactly representable in the float64 ranges
    # finiteness: RangeFit.update reads it off each block's minimum and maximum (a NaN
    # propagates into both, an inf is one of them), with the error as_layers would give
    layers = as_layers(
        "train_layers", train_layers, allow_empty=False, keep_float=True, chunk_bytes=chunk_bytes, finite=False
    )
    if names and len(names) != len(layers):
        raise ValueError(f"names has {len(names)} entries for {len(layers)} layers")
    fit = RangeFit([a.shape[1] for a in layers], names, std=std)
    for i, a in enumerate(layers):
        step = max(1, chunk_bytes // max(1, a.shape[1] * a.itemsize))
        for s in range(0, len(a), step):
            fit.update(i, np.asarray(a[s : s + step]), s)
    return fit.result()


#: values per row of the folded view :func:`column_reduce` and :func:`_moments` work on
FOLD = 2048


def _fold_rows(a: np.ndarray) -> int:
    """Rows of the C-contiguous ``(n, d)`` array ``a`` joined into one row of about
    :data:`FOLD` values (1: not C-contiguous, or rows already that long). A NumPy pass
    over ``(n, 32)`` calls its inner loop once per row of 32 values; over the folded
    ``(n / r, 32 r)`` view, once per ``32 r`` (1,200 x 32: 50 us to 9 us a pass)."""
    n, d = (int(v) for v in a.shape)
    if not a.flags.c_contiguous or d >= FOLD // 2:
        return 1
    return max(1, min(n, FOLD // max(1, d)))


def column_reduce(ufunc: np.ufunc, a: np.ndarray) -> np.ndarray:
    """``ufunc.reduce(a, axis=0)`` for ``np.minimum`` or ``np.maximum`` (whose result does
    not depend on the order: the same values, a NaN propagated) over the folded view of
    ``a`` (:func:`_fold_rows`), the rows left over reduced apart."""
    r = _fold_rows(a)
    if r < 2:
        return np.asarray(ufunc.reduce(a, axis=0))
    n, d = a.shape
    m = n - n % r
    out = np.asarray(ufunc.reduce(ufunc.reduce(a[:m].reshape(-1, r * d), axis=0).reshape(r, d), axis=0))
    if m < n:
        ufunc(out, ufunc.reduce(a[m:], axis=0), out=out)
    return out


def _moments(block: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """(rows, mean, sum of squared deviations) of ``block``'s columns in float64, bit for
    bit ``block.mean(axis=0, dtype=float64)`` and ``np.square(block - mean).sum(axis=0)``:
    the sums by ``einsum("ij->j")``, which adds the rows in order as ``sum(axis=0)`` does on
    a C-contiguous array of two or more columns, without its per-row call; the deviations
    over the folded view (an element-wise pass: the same values). One float64 temporary
    of the block's size (a float32 block is not copied first)."""
    n, d = block.shape
    if not block.flags.c_contiguous or d < 2:  # sum(axis=0) then sums pairwise, einsum not
        mean = block.mean(axis=0, dtype=np.float64)
        dev = np.subtract(block, mean, dtype=np.float64)
        np.square(dev, out=dev)
        return n, mean, dev.sum(axis=0)
    mean = np.einsum("ij->j", block, dtype=np.float64)
    mean /= n
    dev = np.empty((n, d))
    r = _fold_rows(block)
    m = n - n % r
    np.subtract(block[:m].reshape(-1, r * d), np.tile(mean, r), out=dev[:m].reshape(-1, r * d))
    np.subtract(block[m:], mean, out=dev[m:])
    np.square(dev, out=dev)
    return n, mean, np.einsum("ij->j", dev)


class NonFiniteTraces(ValueError):
    """A layer's traces hold NaN or inf (:meth:`RangeFit.result`): which layer (its index
    and, when the fit was given names, its name), how many rows, the first of them."""

    def __init__(self, message: str, *, index: int, layer: str | None, rows: int, first: int, kind: str) -> None:
        super().__init__(message)
        self.index, self.layer, self.rows, self.first, self.kind = index, layer, rows, first, kind


class RangeFit:
    """:func:`fit_ranges` folded batch by batch: per-neuron minimum and maximum of each
    layer's ``(rows, neurons)`` traces, seen in consecutive batches, without the whole
    training set's traces in memory (51,739 neurons x 60,000 inputs would be 12 GB).
    The same ranges as :func:`fit_ranges` over the batches joined (a minimum or maximum
    does not depend on the order), and the same error for NaN or inf values. ``std``
    False: no moments are folded and the result carries no ``std``."""

    def __init__(self, sizes: Sequence[int], names: Sequence[str] = (), *, std: bool = True) -> None:
        if names and len(names) != len(sizes):
            raise ValueError(f"names has {len(names)} entries for {len(sizes)} layers")
        self.names = tuple(str(n) for n in names)
        self._low = [np.full(int(s), np.inf) for s in sizes]
        self._high = [np.full(int(s), -np.inf) for s in sizes]
        self._bad = [(-1, 0, False)] * len(sizes)  # (first row, rows, any NaN) of non-finite values
        self.rows = 0
        # per layer: (rows, mean, sum of squared deviations), folded by Chan et al.'s rule
        self._moments = [(0, np.zeros(int(s)), np.zeros(int(s))) for s in sizes]
        self._std = std

    def update(self, i: int, block: np.ndarray, offset: int) -> None:
        """Fold layer ``i``'s traces of the rows ``offset, offset + 1, ...`` in."""
        low, high = column_reduce(np.minimum, block), column_reduce(np.maximum, block)
        finite = np.isfinite(low).all() and np.isfinite(high).all()  # NaN propagates to both
        if not finite:
            bad = np.flatnonzero(~np.isfinite(block).all(axis=1))
            self._note_bad(i, offset + int(bad[0]), bad.size, bool(np.isnan(block).any()))
        np.minimum(self._low[i], low, out=self._low[i])
        np.maximum(self._high[i], high, out=self._high[i])
        self.rows = max(self.rows, offset + len(block))
        if self._std and len(block) and finite:  # a fit with NaN/inf is refused (result): no moments
            self._fold(i, _moments(block))

    def _fold(self, i: int, other: tuple[int, np.ndarray, np.ndarray]) -> None:
        """Layer ``i``'s moments with ``other``'s (rows, mean, squared deviations) folded in
        (Chan, Golub and LeVeque's pairwise update: exact up to rounding, any split)."""
        n_a, mean_a, m2_a = self._moments[i]
        n_b, mean_b, m2_b = other
        if n_b == 0:
            return
        n = n_a + n_b
        delta = mean_b - mean_a
        self._moments[i] = (n, mean_a + delta * (n_b / n), m2_a + m2_b + np.square(delta) * (n_a * n_b / n))

    def merge(self, other: RangeFit, offset: int) -> None:
        """Fold in ``other``, a fit of the same layers over the rows ``offset, offset + 1,
        ...`` made elsewhere (a Dask worker's shard): the ranges of both, exactly (a
        minimum of minima), and its non-finite rows counted at their place in the whole."""
        if [len(a) for a in other._low] != [len(a) for a in self._low]:
            raise ValueError("RangeFit.merge needs a fit of the same layers and neurons")
        for i, (first, count, nan) in enumerate(other._bad):
            np.minimum(self._low[i], other._low[i], out=self._low[i])
            np.maximum(self._high[i], other._high[i], out=self._high[i])
            self._fold(i, other._moments[i])
            if count:
                self._note_bad(i, offset + first, count, nan)
        if other.rows:
            self.rows = max(self.rows, offset + other.rows)

    def _note_bad(self, i: int, row: int, count: int, nan: bool) -> None:
        first, seen, any_nan = self._bad[i]
        self._bad[i] = (row if first < 0 else min(first, row), seen + count, any_nan or nan)

    def result(self) -> NeuronRanges:
        """The ranges; raises ``ValueError`` as :func:`fit_ranges` does (non-finite traces,
        no inputs)."""
        for i, (first, count, nan) in enumerate(self._bad):
            if count:
                raise NonFiniteTraces(
                    f"train_layers[{i}] contains {'NaN' if nan else 'inf'} values in {count} row(s) "
                    f"(first: row {first}); traces must be finite: check the model's inputs and weights for NaN/inf",
                    index=i,
                    layer=self.names[i] if self.names else None,
                    rows=count,
                    first=first,
                    kind="NaN" if nan else "inf",
                )
        if self.rows == 0:
            raise ValueError("train_layers holds no inputs; at least one is needed")
        std = tuple(np.sqrt(m2 / max(n, 1)) for n, _, m2 in self._moments) if self._std else None
        return NeuronRanges(tuple(self._low), tuple(self._high), self.names, std)


class _LayerCoverage:
    """The shape every neuron criterion shares: a boolean array of targets per layer."""

    #: targets per neuron (KMNC: k; NBC: 2 corners; NC/SNAC: 1)
    per_neuron = 1
    #: whether a run's :class:`~pytest_sadl.criteria.shape.Batch` gives it its extrema (NC)
    uses_extrema = False

    def __init__(self, sizes: Sequence[int]) -> None:
        self.sizes = tuple(int(s) for s in sizes)
        if not self.sizes or min(self.sizes) < 1:
            raise ValueError(f"every layer needs at least one neuron, got sizes {self.sizes}")
        self._covered = [np.zeros((s, self.per_neuron), dtype=bool) for s in self.sizes]
        self.count = 0

    # subclasses: which targets of each layer a batch hits, (n_neurons, per_neuron) bools;
    # ``values`` float32 or float64 as given, not yet checked for NaN/inf (_refuse_nonfinite)
    def _hits(self, i: int, values: np.ndarray, extrema: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
        raise NotImplementedError

    def _valid(self, i: int) -> np.ndarray:
        """Neurons that count towards the total (all, except KMNC's constant neurons)."""
        return np.ones(self.sizes[i], dtype=bool)

    def _key(self) -> tuple[Any, ...]:
        return (type(self).__name__, self.sizes)

    def update(self, layers: object, extrema: Extrema | None = None) -> int:
        """Add a batch of per-layer outputs (or a run's :class:`~pytest_sadl.criteria.shape.Batch`);
        return the number of targets it newly covered.

        A batch of zero inputs is allowed and covers nothing.
        """
        layers, extrema = self._unbatch(layers, extrema)
        # 2-D layers as given (float32 not copied to float64 first) and their NaN/inf
        # refused by ``_hits``, off a pass it makes anyway where it can
        arrays = as_layers("layers", layers, sizes=self.sizes, keep_float=True, finite=False)
        if extrema is not None and len(extrema) != len(arrays):
            raise ValueError(f"extrema has {len(extrema)} entries for {len(arrays)} layers")
        n = arrays[0].shape[0]
        if n == 0:
            return 0
        # every layer's hits before any is counted: a refused layer leaves the state as it was
        hits = [self._hits(i, v, extrema[i] if extrema is not None else None) for i, v in enumerate(arrays)]
        self.count += n
        new = 0
        for i, hit in enumerate(hits):
            hit &= self._valid(i)[:, None]
            new += int(np.count_nonzero(hit & ~self._covered[i]))
            self._covered[i] |= hit
        return new

    def _unbatch(self, layers: object, extrema: Extrema | None) -> tuple[object, Extrema | None]:
        """A run's batch as layers and extrema (the extrema only where the criterion uses them)."""
        if isinstance(layers, Batch):
            return layers.layers, layers.extrema if self.uses_extrema else None
        return layers, extrema

    def metric(self) -> Metric:
        """The results' entry: value, covered and total targets."""
        from pytest_sadl.results import Metric

        return Metric(self.value, self.covered_count, self.total)

    def merge(self, other: _LayerCoverage) -> None:
        """Add another instance's coverage (same criterion, layers and parameters)."""
        if other._key() != self._key():
            raise ValueError(f"cannot merge {other._key()} into {self._key()}: criterion, layers or parameters differ")
        for mine, theirs in zip(self._covered, other._covered, strict=True):
            mine |= theirs
        self.count += other.count

    def copy(self) -> _LayerCoverage:
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._covered = [c.copy() for c in self._covered]
        return new

    @property
    def covered(self) -> np.ndarray:
        """Covered targets of all layers, concatenated: shape (sum of neurons, per_neuron)."""
        return np.concatenate(self._covered)

    def layer_counts(self) -> list[tuple[int, int]]:
        """(covered, total) targets per layer."""
        out = []
        for i, c in enumerate(self._covered):
            valid = self._valid(i)
            out.append((int(np.count_nonzero(c[valid])), int(valid.sum()) * self.per_neuron))
        return out

    @property
    def covered_count(self) -> int:
        return sum(c for c, _ in self.layer_counts())

    @property
    def total(self) -> int:
        return sum(t for _, t in self.layer_counts())

    @property
    def value(self) -> float:
        """Fraction of targets covered, in [0, 1] (0 when there are no targets)."""
        counts = self.layer_counts()  # once: covered and total from the same pass
        total = sum(t for _, t in counts)
        return sum(c for c, _ in counts) / total if total else 0.0

    def per_layer(self) -> list[float]:
        return [c / t if t else 0.0 for c, t in self.layer_counts()]

    def covered_sets(self) -> tuple[list[Any], list[int], dict[str, int]]:
        """Each layer's covered targets (flat) and the targets that count on it (KMNC:
        not its constant neurons): what ``pytest_sadl.covered`` stores per test."""
        return [c.reshape(-1).copy() for c in self._covered], [t for _, t in self.layer_counts()], {}


def _sizes_of(ranges_or_sizes: NeuronRanges | Sequence[int]) -> tuple[int, ...]:
    if isinstance(ranges_or_sizes, NeuronRanges):
        return ranges_or_sizes.sizes
    return tuple(int(s) for s in ranges_or_sizes)


class NeuronCoverage(_LayerCoverage):
    """DeepXplore's neuron coverage, cumulative. Needs no training ranges, only layer sizes."""

    uses_extrema = True

    def __init__(self, ranges_or_sizes: NeuronRanges | Sequence[int], threshold: float = 0.5) -> None:
        threshold = float(threshold)
        if not np.isfinite(threshold):
            raise ValueError(f"threshold must be a finite number, got {threshold!r}")
        super().__init__(_sizes_of(ranges_or_sizes))
        self.threshold = threshold

    def _key(self) -> tuple[Any, ...]:
        return super()._key() + (self.threshold,)

    def update(self, layers: object, extrema: Extrema | None = None) -> int:
        """As for every criterion; a conv output given unreduced is scaled over its whole map,
        and ``layers`` may be :class:`~pytest_sadl.capture.Traces` carrying their extrema."""
        layers, extrema = _with_extrema(*self._unbatch(layers, extrema))
        if extrema is None and isinstance(layers, (list, tuple)):
            raw = [np.asarray(a) for a in layers]
            if any(a.ndim > 2 and a.shape[0] > 0 for a in raw):
                extrema = [_map_extrema(a) if a.ndim > 2 and a.shape[0] > 0 else None for a in raw]
            layers = raw
        return super().update(layers, extrema)

    def _hits(self, i: int, values: np.ndarray, extrema: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
        by_neuron, owned = _by_neuron(values)  # (neurons, inputs): the per-input passes run along rows
        if extrema is None:
            lo, hi = by_neuron.min(axis=0), by_neuron.max(axis=0)
            _refuse_nonfinite(i, values, lo, hi)  # a NaN propagates into both, an inf is one of them
        else:
            _refuse_nonfinite(i, values)
            lo = np.asarray(extrema[0], np.float64).reshape(-1)
            hi = np.asarray(extrema[1], np.float64).reshape(-1)
            if lo.shape != (len(values),) or hi.shape != (len(values),):
                raise ValueError(f"extrema[{i}] must hold one minimum and one maximum per input ({len(values)})")
        span = hi - lo
        safe = np.where(span > 0, span, 1.0)
        # DeepXplore's (values - lo) / span per input, element by element as before
        scaled = np.subtract(by_neuron, lo, out=by_neuron if owned else None)
        scaled /= safe
        flat = span <= 0
        if flat.any():
            scaled[:, flat] = 0.0
        hit: np.ndarray = (scaled > self.threshold).any(axis=1)
        return hit[:, None]


#: the widest layer whose traces the per-neuron passes copy to ``(neurons, inputs)`` first
BY_NEURON_MAX = 512


def _by_neuron(values: np.ndarray) -> tuple[np.ndarray, bool]:
    """``values`` ``(inputs, neurons)`` as float64 ``(neurons, inputs)``, and whether it is
    a copy (which the caller may overwrite). Narrow rows (under :data:`BY_NEURON_MAX`
    neurons) are copied C-contiguous, in one pass with the cast: a pass broadcasting one
    value per neuron (or per input) over ``(1,194, 32)`` calls its inner loop once per
    row of 32 values, over ``(32, 1,194)`` once per neuron (a row minimum: 90 us to 11
    us). Wider rows: the transposed view (no copy; float32 cast to float64)."""
    n, d = values.shape
    if d < BY_NEURON_MAX and n > 1:
        return np.array(values.T, dtype=np.float64, order="C"), True
    return np.asarray(values.T, dtype=np.float64), values.dtype != np.float64


def _refuse_nonfinite(i: int, values: np.ndarray, *extremes: np.ndarray) -> None:
    """The clear error when layer ``i``'s ``values`` hold NaN or inf (as :func:`as_layers`
    gives it), read off ``extremes`` when given (minima and maxima over ``values``: a NaN
    propagates into them, an inf is one of them), else off one pass."""
    ok = all(np.isfinite(e).all() for e in extremes) if extremes else np.isfinite(values).all()
    if not ok:
        finite_or_raise(f"layers[{i}]", values)


def _with_extrema(layers: object, extrema: Extrema | None) -> tuple[object, Extrema | None]:
    """Layers and extrema from a ``Traces`` object (which carries both), else as given."""
    if not (hasattr(layers, "coverage") and hasattr(layers, "coverage_extrema")):
        return layers, extrema
    carried = layers.coverage_extrema
    if extrema is None and carried is None:
        raise ValueError(
            "NC needs the per-input minimum and maximum of each layer's whole output, and these "
            "traces were made without them (their conv outputs are already channel means); trace "
            "with TraceModel(..., extrema=True) (TrainingProfile.trace_model() does) or pass extrema="
        )
    return list(layers.coverage), extrema if extrema is not None else carried


def _map_extrema(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-input minimum and maximum over a whole (unreduced) layer output."""
    flat = a.reshape(a.shape[0], -1)
    return flat.min(axis=1), flat.max(axis=1)


class _RangeCoverage(_LayerCoverage):
    def __init__(self, ranges: NeuronRanges) -> None:
        if not isinstance(ranges, NeuronRanges):
            raise ValueError(
                "pass the NeuronRanges fitted on the training set (pytest_sadl.criteria.neurons.fit_ranges)"
            )
        super().__init__(ranges.sizes)
        self.ranges = ranges

    def _key(self) -> tuple[Any, ...]:
        lows = tuple(a.tobytes() for a in self.ranges.low)
        highs = tuple(a.tobytes() for a in self.ranges.high)
        return super()._key() + (lows, highs)


class KMultisectionCoverage(_RangeCoverage):
    """DeepGauge's k-multisection neuron coverage, cumulative."""

    def __init__(self, ranges: NeuronRanges, k: int = 1000) -> None:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be an integer >= 1, got {k!r}")
        self.k = int(k)
        self.per_neuron = self.k
        super().__init__(ranges)

    def _key(self) -> tuple[Any, ...]:
        return super()._key() + (self.k,)

    def _valid(self, i: int) -> np.ndarray:
        return self.ranges.high[i] > self.ranges.low[i]

    def sections(self, i: int, values: np.ndarray) -> np.ndarray:
        """Section index per value of layer ``i`` (``-1`` outside the training range)."""
        return _sections(self.ranges.low[i], self.ranges.high[i], self.k, values)

    def _hits(self, i: int, values: np.ndarray, extrema: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
        _refuse_nonfinite(i, values)
        size, k = self.sizes[i], self.k
        # (neuron, section) as one id; outside: the neuron's own sink, column 0
        ids = _section_ids(self.ranges.low[i], self.ranges.high[i], k, np.asarray(values, np.float64))
        hit = np.zeros(size * (k + 1), dtype=bool)
        hit[ids.reshape(-1)] = True
        return hit.reshape(size, k + 1)[:, 1:]


def _sections(low: np.ndarray, high: np.ndarray, k: int, values: np.ndarray) -> np.ndarray:
    """:meth:`KMultisectionCoverage.sections`: the section of each value of ``values``
    ``(inputs, neurons)``, ``-1`` outside ``[low, high]`` (:func:`_section_ids`)."""
    ids = _section_ids(low, high, k, np.asarray(values, np.float64))
    ids -= np.arange(low.size) * (k + 1) + 1
    return ids.astype(np.int64, copy=False)


def _edges(low: np.ndarray, high: np.ndarray, k: int) -> np.ndarray:
    """Each neuron's section edges ``low + width * j / k``, ``j = 0 .. k - 1``, then
    ``+inf`` (nothing is above the last section), flat: neuron ``i``'s at ``i * (k + 1)``."""
    edges = np.multiply((high - low)[:, None], np.arange(k + 1, dtype=np.float64))
    edges /= k
    edges += low[:, None]
    edges[:, k] = np.inf
    flat: np.ndarray = edges.reshape(-1)
    return flat


def _section_ids(low: np.ndarray, high: np.ndarray, k: int, values: np.ndarray) -> np.ndarray:
    """``neuron * (k + 1) + 1 + section`` of each value of ``values`` ``(inputs, neurons)``
    (float64), ``neuron * (k + 1)`` (the neuron's sink) outside ``[low, high]`` and for a
    neuron of ``low == high``: the section ``floor((v - low) / width * k)`` settled by the
    edges' definition, ``low + width * j / k`` (:func:`_edges`: the same operations on the
    same numbers as edge by edge, looked up rather than computed per value)."""
    width = high - low
    safe = np.where(width > 0, width, 1.0)
    # Clipped before the cast: a huge (1e30), infinite or NaN value must not reach the
    # integer cast (NumPy warns "invalid value encountered in cast", an error under -W
    # error); such values are outside the range and go to the sink below anyway.
    # fmax(NaN, 0) is 0; +-inf clip to k - 1 and 0.
    with np.errstate(over="ignore", invalid="ignore"):
        pos = np.subtract(values, low)
        pos /= safe
        pos *= k
    np.fmax(pos, 0.0, out=pos)
    np.minimum(pos, k - 1, out=pos)
    sink = np.arange(low.size) * (k + 1)
    ids = pos.astype(np.intp)  # non-negative: truncation is the floor
    ids += sink + 1
    edges = _edges(low, high, k)
    # Settle values within rounding of an edge (both edges of the section found first);
    # the last section's upper edge is +inf: nothing goes up from it
    down = values < np.concatenate([[np.nan], edges])[ids]
    up = values >= edges[ids]  # never with down (the edges do not decrease)
    ids += np.subtract(up.view(np.int8), down.view(np.int8))
    # below low: section 0's lower edge is low itself, so "down" took it to the sink;
    # above high (or NaN): to the sink here, with a neuron of low == high (no sections)
    keep = values <= high
    if not (width > 0).all():
        keep &= width > 0
    return np.where(keep, ids, sink)


class _CornerCoverage(_RangeCoverage):
    """NBC's and SNAC's shape: corners beyond each neuron's training range, widened by
    ``std_scale`` training standard deviations on each side (dnn-tip's ``scaler``; 0: the
    range itself, DeepGauge's definition)."""

    def __init__(self, ranges: NeuronRanges, std_scale: float = 0.0) -> None:
        scale = float(std_scale)
        if not np.isfinite(scale) or scale < 0:
            raise ValueError(f"std_scale must be a finite number >= 0, got {std_scale!r}")
        super().__init__(ranges)
        self.std_scale = scale
        self._bounds = [ranges.widened(i, scale) for i in range(len(self.sizes))]

    def _key(self) -> tuple[Any, ...]:
        return super()._key() + (self.std_scale,)

    def bounds(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Layer ``i``'s (lower, upper) boundaries: a value below the first (above the
        second) reaches the lower (upper) corner."""
        return self._bounds[i]


class NeuronBoundaryCoverage(_CornerCoverage):
    """DeepGauge's neuron boundary coverage, cumulative: targets are (lower, upper) corners."""

    per_neuron = 2

    def _hits(self, i: int, values: np.ndarray, extrema: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
        low, high = self._bounds[i]
        # (values < low).any(axis=0) is min(values) < low: one reduction, no n x d booleans
        least, most = column_reduce(np.minimum, values), column_reduce(np.maximum, values)
        _refuse_nonfinite(i, values, least, most)
        return np.stack([least < low, most > high], axis=1)

    def corners(self) -> tuple[int, int]:
        """(lower corner, upper corner) neurons covered."""
        c = self.covered
        return int(c[:, 0].sum()), int(c[:, 1].sum())


class StrongNeuronActivationCoverage(_CornerCoverage):
    """DeepGauge's strong neuron activation coverage, cumulative: the upper corner only."""

    def _hits(self, i: int, values: np.ndarray, extrema: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
        least, most = column_reduce(np.minimum, values), column_reduce(np.maximum, values)
        _refuse_nonfinite(i, values, least, most)  # the minimum too: a -inf shows there only
        upper: np.ndarray = most > self._bounds[i][1]
        return upper[:, None]


def nc(layers: object, threshold: float = 0.5, *, extrema: Extrema | None = None) -> float:
    """Neuron coverage (DeepXplore) of a set of inputs, in [0, 1].

    ``layers``: per-layer outputs (a conv output unreduced, or reduced with ``extrema``),
    or :class:`~pytest_sadl.capture.Traces` that carry their extrema."""
    layers, extrema = _with_extrema(layers, extrema)
    as_layers("layers", layers, allow_empty=False, finite=False)  # before anything is computed; update: NaN/inf
    raw = [layers] if isinstance(layers, np.ndarray) else list(cast("Iterable[Any]", layers))  # as_layers checked it
    cov = NeuronCoverage([np.shape(a)[-1] for a in raw], threshold)
    cov.update(raw, extrema)
    return cov.value


def kmnc(layers: object, ranges: NeuronRanges, k: int = 1000) -> float:
    """k-multisection neuron coverage (DeepGauge), in [0, 1]."""
    cov = KMultisectionCoverage(ranges, k)
    cov.update(as_layers("layers", layers, sizes=cov.sizes, allow_empty=False, keep_float=True, finite=False))
    return cov.value


def nbc(layers: object, ranges: NeuronRanges, std_scale: float = 0.0) -> float:
    """Neuron boundary coverage (DeepGauge), in [0, 1]; ``std_scale``: the corners beyond
    ``low - std_scale * std`` and ``high + std_scale * std`` (dnn-tip's ``scaler``)."""
    cov = NeuronBoundaryCoverage(ranges, std_scale)
    cov.update(as_layers("layers", layers, sizes=cov.sizes, allow_empty=False, keep_float=True, finite=False))
    return cov.value


def snac(layers: object, ranges: NeuronRanges, std_scale: float = 0.0) -> float:
    """Strong neuron activation coverage (DeepGauge), in [0, 1]; ``std_scale`` as :func:`nbc`'s."""
    cov = StrongNeuronActivationCoverage(ranges, std_scale)
    cov.update(as_layers("layers", layers, sizes=cov.sizes, allow_empty=False, keep_float=True, finite=False))
    return cov.value
