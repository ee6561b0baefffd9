"""The per-shard halves of DSA and of the class moments, and their exact reductions.

A shard is the training rows ``[offset, offset + n)`` (in the profile's order) with their
classes. Each function here works on one shard and returns what the reductions combine
into the answer over the whole training set; nothing here knows where a shard lives (the
Dask side is :mod:`pytest_sadl.profile.cluster`). Pure NumPy.

DSA (:class:`DSAShard`, :func:`reduce_nearest`, :func:`dsa_scores`): each shard finds, for
each query, its nearest row of the query's class (global index and exact float64
distance, by :class:`~pytest_sadl.criteria.neighbours.ClassNeighbours`' public methods)
and, for each ``x_a``, its nearest row of another class. The reduction keeps the smallest
distance and, on an exact tie, the smallest global index: the first such row in training
order, which is the row the local :class:`~pytest_sadl.criteria.surprise.DSA` returns (its
neighbours are the first on a tie, and its distances are computed in float64 from the
vectors' difference, as a shard's are). So the scores equal a local DSA's bit for bit.

Class moments (:func:`shard_sums`, :func:`shard_scatters`, :func:`reduce_moments`): the
float64 counts and sums of each class over a shard, then, about the reduced means, each
class's centred scatter; summed over the shards they give the classes' means and
covariances (``ddof=1``) of the whole set, equal to a local pass to rounding (1e-9).
"""

from __future__ import annotations

import numpy as np

from pytest_sadl.criteria.checks import class_list, warn
from pytest_sadl.criteria.neighbours import ClassNeighbours

__all__ = ["DSAShard", "dsa_scores", "reduce_moments", "reduce_nearest", "shard_scatters", "shard_sums"]

_CHUNK_ROWS = 4096  # rows per float64 block of the moments' sums


class DSAShard:
    """The DSA searches over one shard of training rows (``x`` may be a ``np.memmap``)."""

    def __init__(self, x: np.ndarray, pred: np.ndarray, offset: int, *, chunk_bytes: int = 16 * 2**20) -> None:
        self.offset = int(offset)
        self.pred = np.asarray(pred, dtype=np.int64)
        self.classes = {int(c) for c in np.unique(self.pred)}
        self.nn = ClassNeighbours(x, self.pred, chunk_bytes=chunk_bytes) if len(self.pred) else None

    def nearest_in(self, q: np.ndarray, cls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each query, the global index (-1: none here) and exact distance (``inf``)
        of its nearest row of class ``cls[i]`` in this shard."""
        q = np.asarray(q, dtype=np.float64)
        cls = np.asarray(cls, dtype=np.int64)
        index = np.full(len(q), -1, dtype=np.int64)
        dist = np.full(len(q), np.inf)
        for c in np.unique(cls):
            if int(c) not in self.classes or self.nn is None:
                continue
            m = np.flatnonzero(cls == c)
            a, d = self.nn.nearest_in(q[m], int(c))
            index[m] = np.asarray(a, dtype=np.int64) + self.offset
            dist[m] = d
        return index, dist

    def nearest_out(self, q: np.ndarray, cls: np.ndarray) -> np.ndarray:
        """For each query, the exact distance to its nearest row of a class other than
        ``cls[i]`` in this shard (``inf``: none here)."""
        q = np.asarray(q, dtype=np.float64)
        if self.nn is None or len(q) == 0:
            return np.full(len(q), np.inf)
        out: np.ndarray = np.asarray(self.nn.nearest_out_each(q, np.asarray(cls, dtype=np.int64)), dtype=np.float64)
        return out


def reduce_nearest(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The shards' ``(index, dist)`` reduced: the smallest distance, the smallest global
    index on an exact tie (the first in training order, as the local search)."""
    index, dist = (np.array(v) for v in parts[0])
    for i, d in parts[1:]:
        better = (d < dist) | ((d == dist) & (i >= 0) & ((index < 0) | (i < index)))
        index[better], dist[better] = i[better], d[better]
    return index, dist


def dsa_scores(index: np.ndarray, dist_a: np.ndarray, dist_b: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """``dist_a / dist_b`` as the local DSA divides them; ``NaN`` (with the local DSA's
    warning) for inputs whose class has no training traces."""
    out = np.full(len(index), np.nan)
    found = index >= 0
    with np.errstate(divide="ignore", invalid="ignore"):
        out[found] = dist_a[found] / dist_b[found]
    if not found.all():
        missing = sorted({int(c) for c in np.asarray(pred)[~found]})
        warn(f"DSA: no training traces of predicted class(es) {class_list(missing)}; those inputs score NaN")
    return out


def shard_sums(x: np.ndarray, pred: np.ndarray) -> dict[int, tuple[int, np.ndarray]]:
    """Each class's count and float64 sum of rows over one shard (a block at a time)."""
    pred = np.asarray(pred, dtype=np.int64)
    out: dict[int, tuple[int, np.ndarray]] = {}
    for c in np.unique(pred):
        rows = np.flatnonzero(pred == c)
        total = np.zeros(x.shape[1])
        for s in range(0, len(rows), _CHUNK_ROWS):
            total += np.asarray(x[rows[s : s + _CHUNK_ROWS]], dtype=np.float64).sum(axis=0)
        out[int(c)] = (len(rows), total)
    return out


def shard_scatters(x: np.ndarray, pred: np.ndarray, means: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Each class's centred scatter matrix about ``means[c]`` over one shard, float64."""
    pred = np.asarray(pred, dtype=np.int64)
    out: dict[int, np.ndarray] = {}
    for c in np.unique(pred):
        rows = np.flatnonzero(pred == c)
        mean = means[int(c)]
        matrix = np.zeros((x.shape[1], x.shape[1]))
        for s in range(0, len(rows), _CHUNK_ROWS):
            centred = np.asarray(x[rows[s : s + _CHUNK_ROWS]], dtype=np.float64) - mean
            matrix += centred.T @ centred
        out[int(c)] = matrix
    return out


def reduce_moments(
    sums: list[dict[int, tuple[int, np.ndarray]]], scatters: list[dict[int, np.ndarray]] | None = None
) -> tuple[dict[int, int], dict[int, np.ndarray], dict[int, np.ndarray] | None]:
    """The classes' counts and means from the shards' sums and, given the shards'
    scatters about those means, their covariances (``ddof=1``; ``NaN`` for one trace)."""
    counts: dict[int, int] = {}
    totals: dict[int, np.ndarray] = {}
    for part in sums:
        for c, (n, total) in part.items():
            counts[c] = counts.get(c, 0) + n
            totals[c] = totals[c] + total if c in totals else np.array(total)
    means = {c: totals[c] / counts[c] for c in sorted(counts)}
    if scatters is None:
        return counts, means, None
    return counts, means, _covariances(counts, _summed(scatters))


def _summed(scatters: list[dict[int, np.ndarray]]) -> dict[int, np.ndarray]:
    """Each class's scatter matrix, summed over the shards."""
    total: dict[int, np.ndarray] = {}
    for shard in scatters:
        for c, matrix in shard.items():
            total[c] = total[c] + matrix if c in total else np.array(matrix)
    return total


def _covariances(counts: dict[int, int], scatter: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Each class's covariance (``ddof=1``) from its scatter; ``NaN`` for a class of one trace."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            c: scatter[c] / (counts[c] - 1) if counts[c] > 1 else np.full_like(scatter[c], np.nan)
            for c in sorted(scatter)
        }
