"""Each input's coverage targets, read from the traces for a block of inputs at once, on NumPy arrays.

A target is a criterion's unit of coverage: an SC bucket (an input covers at most one), a
neuron (NC, SNAC, TKNC), a neuron's section (KMNC) or corner (NBC), a pattern of top-k
neurons (TKNP). For the registry's own shapes of :mod:`~pytest_sadl.criteria.shape` (a
surprise coverage, a neuron coverage over traces already one value per neuron, TKNC and
TKNP) the targets each input covers on its own are computed here for a block of inputs at
once, equal to what the criterion's ``update`` counts input by input:

* :func:`target_pairs` — the (input, target id) pairs, rows ascending;
* :func:`target_counts` — the number of targets each input covers, counted without
  listing them (CTM's counts);
* :func:`input_targets` — the pairs as one array of target ids per input;
* :func:`dense_profile` — the pairs as a boolean ``(targets, inputs)`` matrix, when it is
  small enough (``DENSE``, ``DENSE_TARGETS``: CAM's dense profile).

Each gives ``None`` for any other criterion; :mod:`~pytest_sadl.criteria.prioritise` then
asks the criterion's ``update``, input by input. No TensorFlow, no pytest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_sadl.criteria.surprise import bucket_edges, bucket_index

if TYPE_CHECKING:
    from pytest_sadl.criteria.shape import Batch

__all__ = ["target_pairs", "target_counts", "input_targets", "dense_profile"]


#: each input's targets as (inputs, rows, target ids): one pair per input and target it covers
Pairs = tuple[int, np.ndarray, np.ndarray]
#: values per block of rows when a layer's per-input hits are computed (bounds the memory)
BLOCK = 1 << 22


def target_pairs(cov: Any, batch: Batch, by_row: bool = True) -> Pairs | None:
    """The targets (integer ids) each input of ``batch`` covers on its own, as ``(n, rows,
    ids)``, rows ascending, for the shapes of :mod:`~pytest_sadl.criteria.shape` whose
    targets are known here: a surprise coverage's bucket, a neuron coverage's (neuron,
    section/corner) flags over traces that are already one value per neuron; ``None`` for
    any other criterion (then the generic path asks its ``update``). Equal to what
    ``update`` counts, input by input, computed for a block of inputs at once. ``by_row``
    False: the pairs in any order (layer by layer), for a caller that does not need them
    sorted by input."""
    from pytest_sadl.criteria.surprise import SurpriseCoverage

    if isinstance(cov, SurpriseCoverage) and cov.sa is not None:
        return _bucket_pairs(cov, batch)
    top = _top_k_targets(cov, batch)
    if top is not None:
        return top
    if not _vectorised_neurons(cov, batch):
        return None
    pairs = _neuron_pairs(cov, batch)
    return _by_row(pairs) if by_row else pairs


def _top_k_targets(cov: Any, batch: Batch) -> Pairs | None:
    """TKNC's and TKNP's targets as pairs: TKNC's the neurons of each input's top-k masks
    (one per layer, :func:`~pytest_sadl.criteria.metrics.tknc.top_k`, whose rows are each
    input's own), TKNP's one pattern per input (its masks, numbered by their distinct
    rows: equal masks, one target; ``update`` tells them apart by a 128-bit digest of
    the same masks). ``None`` for any other criterion, or layers not one value per
    neuron of the criterion's sizes (left to ``update`` and its errors)."""
    from pytest_sadl.criteria.metrics.tknc import TopKCoverage, top_k
    from pytest_sadl.criteria.metrics.tknp import TopKPatterns

    if type(cov) not in (TopKCoverage, TopKPatterns) or not _one_value_per_neuron(cov.sizes, batch):
        return None
    masks = np.concatenate([top_k(np.asarray(a), cov.k) for a in batch.layers], axis=1)
    n = len(masks)
    if isinstance(cov, TopKPatterns):
        packed = np.ascontiguousarray(np.packbits(masks, axis=1))
        rows = packed.view(np.dtype((np.void, packed.shape[1]))).reshape(n)
        ids = np.unique(rows, return_inverse=True)[1].reshape(-1)
        return n, np.arange(n, dtype=np.int64), ids.astype(np.int64)
    flat = np.flatnonzero(masks)
    rows, ids = np.divmod(flat, masks.shape[1])
    return n, rows, ids


def _one_value_per_neuron(sizes: tuple[int, ...], batch: Batch) -> bool:
    layers = batch.layers
    return len(layers) == len(sizes) > 0 and all(
        np.ndim(a) == 2 and np.shape(a)[1] == size for a, size in zip(layers, sizes, strict=True)
    )


def _vectorised_neurons(cov: Any, batch: Batch) -> bool:
    """Whether ``cov`` is a neuron criterion whose per-input targets are computed here
    (its traces already one value per neuron; unreduced maps: NC scales them whole, left
    to ``update``)."""
    from pytest_sadl.criteria.neurons import _LayerCoverage

    if not isinstance(cov, _LayerCoverage) or type(cov) not in _input_hits():
        return False
    return all(np.ndim(a) == 2 for a in batch.layers)


def _by_row(pairs: Pairs) -> Pairs:
    """The pairs sorted by input, each input's ids in the order they came (ascending)."""
    n, rows, ids = pairs
    if rows.size and np.all(rows[1:] >= rows[:-1]):
        return pairs
    order = np.argsort(rows, kind="stable")
    return n, rows[order], ids[order]


def _bucket_pairs(cov: Any, batch: Batch) -> Pairs:
    n = len(batch.layers[0]) if batch.layers else len(next(iter(batch.scores.values()), []))
    scores = batch.scores.get(cov.sa)
    if scores is None:
        return n, np.zeros(0, np.int64), np.zeros(0, np.int64)
    sc = cov
    idx = bucket_index(np.asarray(scores, dtype=np.float64), bucket_edges(sc.lower, sc.upper, sc.buckets))
    rows = np.flatnonzero((idx >= 0) & (idx < sc.buckets))
    return n, rows.astype(np.int64), idx[rows].astype(np.int64)


def _neuron_pairs(inner: Any, batch: Batch) -> Pairs:
    arrays = _neuron_layers(inner, batch)
    pairs_of = _input_hits()[type(inner)][0]
    rows: list[np.ndarray] = []
    ids: list[np.ndarray] = []
    for li, s, values, block, valid, offset in _layer_blocks(inner, batch, arrays):
        r, t = pairs_of(inner, li, values, block, valid)
        rows.append(r + s)
        ids.append(t + offset)
    n = arrays[0].shape[0]
    if not rows:  # no inputs
        return n, np.zeros(0, np.int64), np.zeros(0, np.int64)
    return n, np.concatenate(rows).astype(np.int64, copy=False), np.concatenate(ids).astype(np.int64, copy=False)


def _neuron_counts(inner: Any, batch: Batch) -> np.ndarray:
    arrays = _neuron_layers(inner, batch)
    count_of = _input_hits()[type(inner)][1]
    counts = np.zeros(arrays[0].shape[0], dtype=np.int64)
    for li, s, values, block, valid, _ in _layer_blocks(inner, batch, arrays):
        counts[s : s + len(values)] += count_of(inner, li, values, block, valid)
    return counts


def _neuron_profile(inner: Any, batch: Batch) -> np.ndarray | None:
    """The boolean ``(targets, inputs)`` profile of a neuron criterion (a row per
    (neuron, section/corner) of every layer, in :func:`target_pairs`' id order), or
    ``None`` when it would be larger than :func:`_dense_fits` allows."""
    arrays = _neuron_layers(inner, batch)
    n = arrays[0].shape[0]
    m = sum(inner.sizes) * inner.per_neuron
    if not _dense_fits(m, n):
        return None
    profile_of = _input_hits()[type(inner)][2]
    profile = np.zeros((m, n), dtype=bool) if n == 0 else None
    for li, s, values, block, valid, offset in _layer_blocks(inner, batch, arrays):
        rows = profile_of(inner, li, values, block, valid)
        if rows.shape == (m, n):
            return rows  # one layer in one block: the whole profile, not copied again
        if profile is None:
            profile = np.empty((m, n), dtype=bool)
        profile[offset : offset + len(rows), s : s + len(values)] = rows
    return profile


def _neuron_layers(inner: Any, batch: Batch) -> list[np.ndarray]:
    from pytest_sadl.criteria.checks import as_layers

    return as_layers("layers", batch.layers, sizes=inner.sizes)


def _layer_blocks(
    inner: Any, batch: Batch, arrays: list[np.ndarray]
) -> Iterator[tuple[int, int, np.ndarray, Any, np.ndarray, int]]:
    """Each layer's traces in blocks of rows (``BLOCK`` values at most): the layer, the
    block's first row, its values, its rows' extrema (NC) or None, the layer's valid
    neurons and the layer's first target id."""
    n = arrays[0].shape[0]
    offset = 0
    for li, values in enumerate(arrays):
        valid = inner._valid(li)
        ext = batch.extrema[li] if inner.uses_extrema and li < len(batch.extrema) else None
        step = max(1, BLOCK // max(1, values.shape[1] * inner.per_neuron))
        for s in range(0, n, step):
            block = None if ext is None else _extrema_rows(ext, li, n, s, s + step)
            yield li, s, values[s : s + step], block, valid, offset
        offset += inner.sizes[li] * inner.per_neuron


def _extrema_rows(ext: tuple[np.ndarray, np.ndarray], li: int, n: int, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    lo = np.asarray(ext[0], np.float64).reshape(-1)
    hi = np.asarray(ext[1], np.float64).reshape(-1)
    if lo.shape != (n,) or hi.shape != (n,):
        raise ValueError(f"extrema[{li}] must hold one minimum and one maximum per input ({n})")
    return lo[a:b], hi[a:b]


#: a block of inputs of one layer: (criterion, layer, values, the rows' extrema, valid neurons)
HitPairs = Callable[[Any, int, np.ndarray, Any, np.ndarray], tuple[np.ndarray, np.ndarray]]
HitCounts = Callable[[Any, int, np.ndarray, Any, np.ndarray], np.ndarray]
HitFlags = Callable[[Any, int, np.ndarray, Any, np.ndarray], np.ndarray]


def _input_hits() -> dict[type, tuple[HitPairs, HitCounts, HitFlags]]:
    """Per neuron criterion: a block of inputs' hits as (row, target-in-layer) pairs, as
    the number of hits per row, and as a boolean ``(targets of the layer, rows)`` profile,
    each row's hits exactly what the criterion's ``_hits`` gives for that input alone."""
    from pytest_sadl.criteria import neurons

    return {
        neurons.NeuronCoverage: _of_flags(_nc_flags),
        neurons.KMultisectionCoverage: (_kmnc_pairs, _kmnc_counts, _kmnc_profile),
        neurons.NeuronBoundaryCoverage: _of_flags(_nbc_flags),
        neurons.StrongNeuronActivationCoverage: _of_flags(_snac_flags),
    }


def _of_flags(flags: HitFlags) -> tuple[HitPairs, HitCounts, HitFlags]:
    """The pairs, the counts and the profile of a criterion whose hits are a ``(rows,
    neurons, per_neuron)`` boolean array."""

    def pairs(cov: Any, li: int, values: np.ndarray, extrema: Any, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _flags(flags(cov, li, values, extrema, valid))

    def counts(cov: Any, li: int, values: np.ndarray, extrema: Any, valid: np.ndarray) -> np.ndarray:
        hit = flags(cov, li, values, extrema, valid)
        return _row_counts(hit.reshape(len(hit), -1))

    def profile(cov: Any, li: int, values: np.ndarray, extrema: Any, valid: np.ndarray) -> np.ndarray:
        hit = flags(cov, li, values, extrema, valid)
        by_target: np.ndarray = np.ascontiguousarray(hit.reshape(len(hit), -1).T)
        return by_target

    return pairs, counts, profile


def _flags(hit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, flat id) of the True values of a ``(rows, neurons, per_neuron)`` array."""
    rows, flat = np.divmod(np.flatnonzero(hit), hit.shape[1] * hit.shape[2])
    return rows, flat


def _nc_flags(
    cov: Any, li: int, values: np.ndarray, extrema: tuple[np.ndarray, np.ndarray] | None, valid: np.ndarray
) -> np.ndarray:
    lo, hi = (values.min(axis=1), values.max(axis=1)) if extrema is None else extrema
    span = hi - lo
    safe = np.where(span > 0, span, 1.0)
    scaled = (values - lo[:, None]) / safe[:, None]
    scaled[span <= 0] = 0.0
    hit: np.ndarray = (scaled > cov.threshold) & valid
    return hit[:, :, None]


def _kmnc_pairs(
    cov: Any, li: int, values: np.ndarray, extrema: tuple[np.ndarray, np.ndarray] | None, valid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    idx = cov.sections(li, values)
    flat = np.flatnonzero((idx >= 0) & valid)  # row by row: rows ascending
    rows, cols = np.divmod(flat, idx.shape[1])
    return rows, cols * cov.k + idx.reshape(-1)[flat]


def _kmnc_profile(
    cov: Any, li: int, values: np.ndarray, extrema: tuple[np.ndarray, np.ndarray] | None, valid: np.ndarray
) -> np.ndarray:
    """A block of inputs' sections as a boolean ``(neurons * k, rows)`` profile."""
    idx = cov.sections(li, values)
    (rows, size), k = idx.shape, cov.k
    flat = idx + np.arange(size) * k  # (neuron, section) as one id; none: a sink id
    flat[(idx < 0) | ~valid] = size * k
    flat *= rows
    flat += np.arange(rows)[:, None]  # the position of (id, row) in the profile
    profile = np.zeros((size * k + 1) * rows, dtype=bool)
    profile[flat] = True
    return profile.reshape(size * k + 1, rows)[:-1]


def _kmnc_counts(
    cov: Any, li: int, values: np.ndarray, extrema: tuple[np.ndarray, np.ndarray] | None, valid: np.ndarray
) -> np.ndarray:
    """The valid neurons whose value has a section: inside ``[low, high]`` (the sections
    themselves are not needed to count them)."""
    inside = values >= cov.ranges.low[li]
    inside &= values <= cov.ranges.high[li]
    inside &= valid
    return _row_counts(inside)


def _row_counts(hit: np.ndarray) -> np.ndarray:
    """The True values of each row of a boolean matrix (added as bytes while they fit)."""
    counts: np.ndarray = (
        np.add.reduce(hit.view(np.uint8), axis=1, dtype=np.uint8)
        if hit.shape[1] < 256
        else np.count_nonzero(hit, axis=1)
    )
    return counts


def _nbc_flags(
    cov: Any, li: int, values: np.ndarray, extrema: tuple[np.ndarray, np.ndarray] | None, valid: np.ndarray
) -> np.ndarray:
    low, high = cov.bounds(li)  # widened by --sadl-nbc-std
    hit: np.ndarray = np.stack([values < low, values > high], axis=2) & valid[:, None]
    return hit


def _snac_flags(
    cov: Any, li: int, values: np.ndarray, extrema: tuple[np.ndarray, np.ndarray] | None, valid: np.ndarray
) -> np.ndarray:
    hit: np.ndarray = (values > cov.bounds(li)[1]) & valid
    return hit[:, :, None]


def target_counts(cov: Any, batch: Batch) -> np.ndarray | None:
    """The number of targets each input of ``batch`` covers on its own (what
    :func:`input_counts` gives, each input's :func:`target_pairs`), counted from the
    traces without listing the targets; ``None`` for a criterion whose targets are not
    known here."""
    from pytest_sadl.criteria.surprise import SurpriseCoverage

    if isinstance(cov, SurpriseCoverage) and cov.sa is not None:
        return _bucket_counts(cov, batch)
    top = _top_k_targets(cov, batch)
    if top is not None:
        return np.bincount(top[1], minlength=top[0]).astype(np.int64)
    if not _vectorised_neurons(cov, batch):
        return None
    return _neuron_counts(cov, batch)


def _bucket_counts(cov: Any, batch: Batch) -> np.ndarray:
    """1 for each input whose score lands in a bucket, else 0: ``edge[0] < score <=
    edge[-1]``, exactly where :func:`bucket_index` gives a bucket (NaN in none)."""
    n = len(batch.layers[0]) if batch.layers else len(next(iter(batch.scores.values()), []))
    scores = batch.scores.get(cov.sa)
    if scores is None:
        return np.zeros(n, dtype=np.int64)
    edges = bucket_edges(cov.lower, cov.upper, cov.buckets)
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    inside: np.ndarray = (s > edges[0]) & (s <= edges[-1])
    return inside.astype(np.int64)


def input_targets(cov: Any, batch: Batch) -> list[np.ndarray] | None:
    """:func:`target_pairs` as one array of target ids per input (``None`` where the
    criterion's targets are not known here)."""
    pairs = target_pairs(cov, batch)
    if pairs is None:
        return None
    n, rows, ids = pairs
    return np.split(ids, np.cumsum(np.bincount(rows, minlength=n))[:-1]) if n else []


def _dense_ids(ids: np.ndarray) -> tuple[np.ndarray, int]:
    """Target ids as columns ``0..m-1``, the ids that occur numbered in their order (by a
    count of each id when they are not much sparser than the pairs, else by their ranks),
    and ``m``."""
    top = int(ids.max()) + 1 if ids.size else 0
    if top > 4 * ids.size + 1024:
        targets, col = np.unique(ids, return_inverse=True)
        return col.reshape(-1), int(targets.size)
    present = np.bincount(ids, minlength=top) > 0
    number = np.cumsum(present) - 1
    return number[ids], int(number[-1]) + 1 if top else 0


#: the most values, and the most targets, a dense boolean (targets x inputs) profile may
#: hold; CAM over more keeps to the sparse pairs (:func:`cam_of_pairs`), which is faster
#: there: a pick reads its input's column, strided, of every target (measured: KMNC
#: k = 30 on 32 neurons, 960 targets, equal; k = 50 the sparse pairs 1.2x faster)
DENSE = 1 << 24
DENSE_TARGETS = 1024


def _dense_fits(m: int, n: int) -> bool:
    return m <= DENSE_TARGETS and m * n <= DENSE


def dense_profile(n: int, rows: np.ndarray, ids: np.ndarray) -> np.ndarray | None:
    """The pairs (``rows[j]`` covers ``ids[j]``, in any order) as a boolean ``(targets,
    inputs)`` matrix, the targets renumbered as by :func:`_dense_ids`; ``None`` when it
    would be larger than :func:`_dense_fits` allows."""
    col, m = _dense_ids(ids)
    if not _dense_fits(m, n):
        return None
    profile = np.zeros((m, n), dtype=bool)
    profile[col, rows] = True
    return profile
