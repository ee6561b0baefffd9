"""Surprise Adequacy (Kim, Feldt and Yoo, ICSE 2019, section II) on NumPy arrays.

* :class:`LSA` — Likelihood-based SA: ``-log`` of a Gaussian KDE (Scott's rule) of the
  training traces of the input's predicted class (equations 1-2).
* :class:`DSA` — Distance-based SA: ``dist_a / dist_b`` (equations 3-5), where ``x_a``
  is the nearest training trace of the same class and ``x_b`` the nearest training trace
  of another class *to x_a*.
* :func:`surprise_coverage` and the cumulative :class:`SurpriseCoverage` — equation 6,
  with explicit bounds ``(lower, upper]``.

Neither TensorFlow nor pytest is imported here. Both SA variants score inputs with
chunked matrix products through BLAS (``|a|^2 + |b|^2 - 2ab``), never a Python loop over
inputs and never an ``n_inputs x n_train`` matrix in memory: each chunk holds at most
``chunk_bytes`` of distances.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
from scipy import linalg

from ._checks import SadlWarning, as_pred, as_traces, warn
from .mahalanobis import MDSA as MDSA  # re-exported: the third surprise measure lives in its own module

__all__ = ["LSA", "DSA", "surprise_coverage", "SurpriseCoverage", "SadlWarning"]

_CHUNK_BYTES = 16 * 2**20
_LOG_2PI = math.log(2.0 * math.pi)
# A covariance whose squared Cholesky pivots span more than ten orders of magnitude is
# treated as singular (the softmax case: one direction has variance ~1e-17).
_RCOND = 1e-10


def _classes_of(pred: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Distinct classes and, for each, the indices of its rows (in input order)."""
    order = np.argsort(pred, kind="stable")
    classes, starts = np.unique(pred[order], return_index=True)
    bounds = list(starts[1:]) + [len(pred)]
    return classes, [order[s:e] for s, e in zip(starts, bounds)]


# --------------------------------------------------------------------------- LSA


@dataclass
class _Kde:
    """One class's Gaussian KDE, whitened: the kernel is ``exp(-|z - z_i|^2 / 2)``."""

    mean: np.ndarray  # (d,)
    whiten: np.ndarray  # (d, d): z = (x - mean) @ whiten, whiten = inv(L).T, cov = L L^T
    train_aug: np.ndarray  # (n_c, d + 2): [z_i, -|z_i|^2 / 2, 1]
    log_norm: float  # -log n_c - log det(2 pi cov) / 2
    n: int


class LSA:
    """Likelihood-based Surprise Adequacy.

    ``LSA(train_ats, train_pred)`` builds one Gaussian KDE per predicted class of the
    training traces (``train_pred=None``: one KDE over all traces, as for a regression
    model). Calling it scores new traces: ``lsa(ats, pred)`` returns ``-log f(x)`` per input,
    equal to ``-scipy.stats.gaussian_kde(train_c[:, lsa.kept].T).logpdf(x[:, lsa.kept].T)``.

    Neurons whose training variance is below ``var_threshold`` in any class are dropped
    (the paper's filter; variance with ``ddof=0`` as the reference implementation computes it).

    Fallbacks, each with a :class:`SadlWarning` and never a crash inside SciPy:

    * a class with fewer than ``d + 1`` training traces (``d`` the neurons kept) cannot
      have a non-singular covariance and gets no KDE; inputs predicted as that class (or
      as a class absent from training) score ``NaN``;
    * a singular covariance (neurons that are linear combinations of others, as softmax
      outputs that sum to one) drops the dependent neurons, found by a pivoted QR of the
      class's standardised traces, from every class, so all classes share one space.
    """

    def __init__(
        self,
        train_ats: object,
        train_pred: object | None = None,
        *,
        var_threshold: float = 1e-5,
        chunk_bytes: int = _CHUNK_BYTES,
    ) -> None:
        if not (isinstance(var_threshold, (int, float)) and var_threshold >= 0 and math.isfinite(var_threshold)):
            raise ValueError(f"var_threshold must be a finite number >= 0, got {var_threshold!r}")
        x = as_traces("train_ats", train_ats)
        self.n_features_in: int = x.shape[1]
        self.var_threshold = float(var_threshold)
        self.chunk_bytes = int(chunk_bytes)
        self.classifier = train_pred is not None
        pred = as_pred("train_pred", train_pred, len(x)) if self.classifier else np.zeros(len(x), np.int64)
        self._train = (x, pred if self.classifier else None)
        classes, members = _classes_of(pred)

        usable = [i for i, m in enumerate(members) if len(m) >= 2]
        for i, m in enumerate(members):
            if len(m) < 2:
                warn(f"LSA: class {int(classes[i])} has {len(m)} training trace; it gets no KDE and its inputs score NaN")
        if not usable:
            raise ValueError("LSA needs at least one class with two or more training traces")
        low_var = np.zeros(x.shape[1], dtype=bool)
        for i in usable:
            low_var |= x[members[i]].var(axis=0) < self.var_threshold
        kept = np.flatnonzero(~low_var)
        if kept.size == 0:
            raise ValueError(
                f"LSA: every one of the {x.shape[1]} neurons has a training variance below "
                f"var_threshold={self.var_threshold:g} in some class; lower var_threshold or "
                "measure another layer (a layer whose outputs barely vary carries no density information)"
            )
        too_small = [i for i in usable if len(members[i]) < kept.size + 1]
        for i in too_small:
            warn(
                f"LSA: class {int(classes[i])} has {len(members[i])} training traces, fewer than the "
                f"{kept.size + 1} a KDE over {kept.size} neurons needs; its inputs score NaN "
                "(more training data, or a narrower layer, fixes this)"
            )
        usable = [i for i in usable if i not in too_small]
        if not usable:
            raise ValueError(
                f"LSA: no class has more than {kept.size} training traces, the minimum for a KDE over "
                f"{kept.size} neurons; use more training data or a layer with fewer neurons"
            )
        labels = [int(classes[i]) for i in usable]
        groups = [x[members[i]] for i in usable]
        while True:  # fit every class; on a singular covariance drop the dependent neurons, refit
            kdes: dict[int, _Kde] = {}
            failed: list[tuple[int, np.ndarray]] = []
            for label, xc in zip(labels, groups):
                kde = self._fit(xc[:, kept])
                if kde is None:
                    failed.append((label, xc[:, kept]))
                else:
                    kdes[label] = kde
            drop: set[int] = set()
            if failed:
                # A dependency the failing classes share (softmax rows summing to one) shows in
                # their pooled, class-centred traces: drop one neuron for all, not one per class.
                pooled = np.vstack([xc - xc.mean(axis=0) for _, xc in failed])
                rank, dependent = self._dependent(pooled, strict=False)
                if not dependent:
                    rank, dependent = self._dependent(failed[0][1])
                drop = {int(kept[j]) for j in dependent}
                warn(
                    f"LSA: the training traces of class(es) {[label for label, _ in failed]} lie in a "
                    f"{rank}-dimensional subspace of {kept.size} neurons (e.g. softmax outputs that sum to "
                    f"one); dropping the linearly dependent neuron(s) {sorted(drop)} from every class"
                )
            if not drop:
                break
            kept = kept[~np.isin(kept, sorted(drop))]
            if kept.size == 0:
                raise ValueError("LSA: no linearly independent neurons are left; measure another layer")
        self.kept: np.ndarray = kept
        self._kdes = kdes

    # -- set-up ---------------------------------------------------------------

    @staticmethod
    def _fit(xc: np.ndarray) -> _Kde | None:
        """The class's KDE, bandwidth and normalisation exactly as ``scipy.stats.gaussian_kde``
        (Scott's factor ``n ** (-1 / (d + 4))`` times the unbiased covariance); ``None`` when
        the covariance is singular (or its squared Cholesky pivots span more than ``1/_RCOND``)."""
        n, d = xc.shape
        mean = xc.mean(axis=0)
        centred = xc - mean
        cov = (centred.T @ centred) / (n - 1) * (n ** (-1.0 / (d + 4))) ** 2
        try:
            chol = linalg.cholesky(cov, lower=True)
        except linalg.LinAlgError:
            return None
        pivots = np.diag(chol)
        if (pivots.min() / pivots.max()) ** 2 < _RCOND:  # numerically singular: SciPy would
            return None  # return densities dominated by rounding error along that direction
        whiten = linalg.solve_triangular(chol, np.eye(d), lower=True).T
        z = centred @ whiten
        aug = np.empty((n, d + 2))
        aug[:, :d] = z
        aug[:, d] = -0.5 * _sq_norms(z)
        aug[:, d + 1] = 1.0
        log_det = 2.0 * np.log(np.diag(chol)).sum() + d * _LOG_2PI
        return _Kde(mean, whiten, aug, -math.log(n) - 0.5 * log_det, n)

    @staticmethod
    def _dependent(xc: np.ndarray, strict: bool = True) -> tuple[int, list[int]]:
        """Numerical rank of traces and the columns a pivoted QR finds dependent
        (``strict``: Cholesky failed on them, so at least one column goes)."""
        centred = xc - xc.mean(axis=0)
        scale = centred.std(axis=0)
        scale[scale == 0] = 1.0
        _, r, piv = linalg.qr(centred / scale, mode="economic", pivoting=True)
        diag = np.abs(np.diag(r))
        rank = int(np.sum(diag > diag[0] * max(xc.shape) * np.finfo(float).eps * 10))
        if strict:
            rank = min(rank, xc.shape[1] - 1)
        return rank, [int(j) for j in piv[rank:]]

    # -- scoring --------------------------------------------------------------

    @property
    def classes(self) -> list[int]:
        """The predicted classes that have a KDE (``[0]`` when built without classes)."""
        return sorted(self._kdes)

    def __call__(self, ats: object, pred: object | None = None) -> np.ndarray:
        """LSA of each input: ``-log`` of its class's KDE density, float64 ``(n,)``."""
        x = as_traces("ats", ats, dims=self.n_features_in, allow_empty=True)
        if self.classifier:
            if pred is None:
                raise ValueError("this LSA was built per class: pass the predicted classes, lsa(ats, pred)")
            p = as_pred("pred", pred, len(x))
        else:
            if pred is not None:
                raise ValueError("this LSA was built without classes (train_pred=None): call lsa(ats) without pred")
            p = np.zeros(len(x), np.int64)
        out = np.full(len(x), np.nan)
        if len(x) == 0:
            return out
        classes, members = _classes_of(p)
        missing: list[int] = []
        for c, m in zip(classes, members):
            kde = self._kdes.get(int(c))
            if kde is None:
                missing.append(int(c))
                continue
            out[m] = -self._log_density(kde, x[m][:, self.kept])
        if missing:
            warn(f"LSA: no KDE for predicted class(es) {missing} (absent or too rare in the training traces); those inputs score NaN")
        return out

    def _log_density(self, kde: _Kde, x: np.ndarray) -> np.ndarray:
        d = x.shape[1]
        z = (x - kde.mean) @ kde.whiten
        q = np.empty((len(z), d + 2))
        q[:, :d] = z
        q[:, d] = 1.0
        q[:, d + 1] = -0.5 * np.einsum("ij,ij->i", z, z)
        out = np.empty(len(z))
        rows, cols = _blocks(len(z), kde.n, self.chunk_bytes)
        buf = np.empty((rows, cols))
        for r0 in range(0, len(z), rows):
            r1 = min(r0 + rows, len(z))
            out[r0:r1] = self._log_sum_exp(q[r0:r1], kde, cols, buf)
        return out + kde.log_norm

    @staticmethod
    def _log_sum_exp(q: np.ndarray, kde: _Kde, cols: int, buf: np.ndarray) -> np.ndarray:
        """``log sum_i exp(-|z - z_i|^2 / 2)`` for each row ``[z, 1, -|z|^2/2]`` of ``q``: one
        matrix product per column block, then an online log-sum-exp (the running maximum is
        subtracted before ``exp``), so an input far from every training trace neither
        underflows to ``-inf`` nor pays for denormals (``len(q)`` <= rows of ``buf``)."""
        top = np.full(len(q), -np.inf)
        acc = np.zeros(len(q))
        for c0 in range(0, kde.n, cols):
            c1 = min(c0 + cols, kde.n)
            block = buf[: len(q), : c1 - c0]
            np.matmul(q, kde.train_aug[c0:c1].T, out=block)
            new_top = np.maximum(top, block.max(axis=1))
            acc *= np.exp(top - new_top)
            block -= new_top[:, None]
            np.exp(block, out=block)
            acc += block.sum(axis=1)
            top = new_top
        return np.log(acc) + top

    def to_arrays(self) -> dict[str, np.ndarray]:
        """What rebuilds this LSA: its training traces, classes and threshold (set-up is cheap)."""
        x, pred = self._train
        arrays = {"train_ats": x, "var_threshold": np.array(self.var_threshold)}
        if pred is not None:
            arrays["train_pred"] = pred
        return arrays

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "LSA":
        return cls(arrays["train_ats"], arrays.get("train_pred"), var_threshold=float(arrays["var_threshold"]))


# --------------------------------------------------------------------------- DSA


def _sq_norms(a: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", a, a)


def _blocks(n_rows: int, n_cols: int, chunk_bytes: int) -> tuple[int, int]:
    """Rows and columns of a distance block of at most ``chunk_bytes``: tall enough for
    an efficient matrix product, small enough to stay in cache for the passes after it."""
    rows = max(1, min(n_rows, 512))
    cols = max(1, min(n_cols, chunk_bytes // (8 * rows)))
    return rows, cols


class _Neighbours:
    """Exact nearest-neighbour search among the rows of ``x`` by blocked matrix products.

    A block of ``|x_i|^2 - 2 q.x_i`` (the row's ``|q|^2`` being constant) comes out of one
    product with the augmented rows ``[-2 x_i, |x_i|^2]``; the running minimum is kept
    across column blocks. Rows where another candidate lies within rounding of the minimum
    are settled by exact distances, so the neighbour is the one a per-input
    ``np.linalg.norm`` loop finds (the first, on an exact tie), and every distance returned
    is computed exactly from the two vectors.
    """

    def __init__(self, x: np.ndarray, chunk_bytes: int) -> None:
        self.x = x
        self.chunk_bytes = chunk_bytes
        self.aug = np.empty((len(x), x.shape[1] + 1))
        np.multiply(x, -2.0, out=self.aug[:, :-1])
        self.aug[:, -1] = _sq_norms(x)
        self.max_sq = float(self.aug[:, -1].max()) if len(x) else 0.0

    def query(self, q: np.ndarray, spans: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        """Index (into ``x``) and distance of each row's nearest row of ``x`` within ``spans``."""
        m = len(q)
        idx = np.zeros(m, dtype=np.int64)
        if m == 0:
            return idx, np.empty(0)
        width = sum(e - s for s, e in spans)
        q_aug = np.empty((m, q.shape[1] + 1))
        q_aug[:, :-1] = q
        q_aug[:, -1] = 1.0
        tol_all = 64 * np.finfo(np.float64).eps * (_sq_norms(q) + self.max_sq) + 1e-300
        rows, cols = _blocks(m, width, self.chunk_bytes)
        buf = np.empty((rows, cols))
        tie = np.zeros(m, dtype=bool)
        for r0 in range(0, m, rows):
            r1 = min(m, r0 + rows)
            ar = np.arange(r1 - r0)
            tol = tol_all[r0:r1]
            best = np.full(r1 - r0, np.inf)
            best_i = np.zeros(r1 - r0, dtype=np.int64)
            near = np.zeros(r1 - r0, dtype=bool)
            for s, e in spans:
                for c0 in range(s, e, cols):
                    c1 = min(e, c0 + cols)
                    block = buf[: r1 - r0, : c1 - c0]
                    np.matmul(q_aug[r0:r1], self.aug[c0:c1].T, out=block)
                    j = block.argmin(axis=1)
                    v = block[ar, j]
                    several = np.count_nonzero(block <= (v + tol)[:, None], axis=1) > 1
                    better = v < best - tol
                    close = ~better & (v <= best + tol)
                    near = np.where(better, several, near | close)
                    take = v < best
                    best = np.where(take, v, best)
                    best_i = np.where(take, j + c0, best_i)
            idx[r0:r1] = best_i
            tie[r0:r1] = near
        if tie.any():
            allowed = np.concatenate([np.arange(s, e) for s, e in spans])
            for r in np.flatnonzero(tie):
                exact = np.linalg.norm(self.x[allowed] - q[r], axis=1)
                idx[r] = allowed[int(np.argmin(exact))]
        dist = np.linalg.norm(q - self.x[idx], axis=1)
        return idx, dist


class DSA:
    """Distance-based Surprise Adequacy (equations 3-5 of the paper).

    For an input ``x`` of predicted class ``c``: ``x_a`` is the nearest training trace of
    class ``c`` and ``dist_a = |x - x_a|``; ``x_b`` is the nearest training trace of another
    class **to x_a** and ``dist_b = |x_a - x_b|``; ``DSA = dist_a / dist_b``.

    ``dist_b`` depends only on the training trace ``x_a``, so it is computed once per
    training trace that is ever a nearest neighbour and memoised; :meth:`precompute`
    fills it for every training trace (what a cached training profile stores, through
    :meth:`to_arrays` / :meth:`from_arrays`).

    An input predicted as a class with no training traces scores ``NaN`` (with a
    :class:`SadlWarning`); ``dist_b = 0`` (a training trace duplicated in another class)
    gives ``inf``, or ``NaN`` when ``dist_a`` is 0 too.
    """

    def __init__(self, train_ats: object, train_pred: object, *, chunk_bytes: int = _CHUNK_BYTES) -> None:
        if train_pred is None:
            raise ValueError(
                "DSA needs the predicted classes of the training traces (it measures distance to "
                "class boundaries); for a regression model use LSA only"
            )
        x = as_traces("train_ats", train_ats)
        pred = as_pred("train_pred", train_pred, len(x))
        order = np.argsort(pred, kind="stable")
        self._init_sorted(x[order], pred[order], np.full(len(x), np.nan), chunk_bytes)

    def _init_sorted(self, x: np.ndarray, pred: np.ndarray, other: np.ndarray, chunk_bytes: int) -> None:
        self.n_features_in: int = x.shape[1]
        self.chunk_bytes = int(chunk_bytes)
        self._x = np.ascontiguousarray(x, dtype=np.float64)
        self._pred = pred
        self._nn = _Neighbours(self._x, self.chunk_bytes)
        classes, starts = np.unique(pred, return_index=True)
        if len(classes) < 2:
            raise ValueError(
                f"DSA needs training traces of at least two predicted classes, got only class(es) "
                f"{classes.tolist()}; check the model's predictions on the training data"
            )
        ends = list(starts[1:]) + [len(pred)]
        self._span = {int(c): (int(s), int(e)) for c, s, e in zip(classes, starts, ends)}
        self._other = other  # nearest other-class distance of each (sorted) training trace; NaN = not yet known

    @property
    def classes(self) -> list[int]:
        return sorted(self._span)

    def _fill_other(self, needed: np.ndarray) -> None:
        needed = needed[np.isnan(self._other[needed])]
        if needed.size == 0:
            return
        needed = np.unique(needed)
        cls = self._pred[needed]
        for c in np.unique(cls):
            rows = needed[cls == c]
            s, e = self._span[int(c)]
            _, dist = self._nn.query(self._x[rows], [(0, s), (e, len(self._x))])
            self._other[rows] = dist

    def precompute(self) -> "DSA":
        """Compute ``dist_b`` for every training trace now (a cache then skips it)."""
        self._fill_other(np.arange(len(self._x)))
        return self

    def __call__(self, ats: object, pred: object) -> np.ndarray:
        """DSA of each input, float64 ``(n,)``."""
        x = as_traces("ats", ats, dims=self.n_features_in, allow_empty=True)
        if pred is None:
            raise ValueError("DSA needs the predicted class of every input: dsa(ats, pred)")
        p = as_pred("pred", pred, len(x))
        out = np.full(len(x), np.nan)
        if len(x) == 0:
            return out
        classes, members = _classes_of(p)
        missing = []
        for c, m in zip(classes, members):
            span = self._span.get(int(c))
            if span is None:
                missing.append(int(c))
                continue
            a, dist_a = self._nn.query(x[m], [span])
            self._fill_other(a)
            with np.errstate(divide="ignore", invalid="ignore"):
                out[m] = dist_a / self._other[a]
        if missing:
            warn(f"DSA: no training traces of predicted class(es) {missing}; those inputs score NaN")
        return out

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Arrays that rebuild this DSA with no distance computation (fills ``dist_b`` first)."""
        self.precompute()
        return {"train_ats": self._x, "train_pred": self._pred, "other_dist": self._other}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], *, chunk_bytes: int = _CHUNK_BYTES) -> "DSA":
        x = as_traces("train_ats", arrays["train_ats"])
        pred = as_pred("train_pred", arrays["train_pred"], len(x))
        other = np.asarray(arrays["other_dist"], dtype=np.float64)
        if other.shape != (len(x),):
            raise ValueError(f"other_dist must have shape ({len(x)},), got {other.shape}")
        if np.any(np.diff(pred) < 0):
            raise ValueError("train_pred of a saved DSA must be sorted by class (as to_arrays writes it)")
        self = cls.__new__(cls)
        self._init_sorted(x, pred, other.copy(), chunk_bytes)
        return self


# --------------------------------------------------------------------------- SC


def _check_bounds(lower: float, upper: float, buckets: int) -> tuple[float, float, int]:
    if isinstance(buckets, bool) or not isinstance(buckets, (int, np.integer)) or buckets < 1:
        raise ValueError(f"buckets must be an integer >= 1, got {buckets!r}")
    try:
        lo, up = float(lower), float(upper)
    except (TypeError, ValueError):
        raise ValueError(f"lower and upper must be numbers, got {lower!r} and {upper!r}") from None
    if not (math.isfinite(lo) and math.isfinite(up)):
        raise ValueError(f"lower and upper must be finite, got {lo!r} and {up!r}")
    if lo >= up:
        raise ValueError(f"the lower bound ({lo:g}) must be below the upper bound ({up:g}) of surprise coverage")
    return lo, up, int(buckets)


def bucket_edges(lower: float, upper: float, buckets: int) -> np.ndarray:
    """The ``buckets + 1`` edges ``lower + (upper - lower) * i / buckets``; bucket ``i`` is ``(edge[i], edge[i+1]]``."""
    lo, up, n = _check_bounds(lower, upper, buckets)
    return lo + (up - lo) * np.arange(n + 1) / n


def bucket_index(scores: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bucket of each score, ``-1`` at or below ``lower``, ``n`` above ``upper``, ``-2`` for NaN."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    idx = np.searchsorted(edges, s, side="left") - 1  # edge[i] < s <= edge[i+1]
    idx[np.isnan(s)] = -2
    return idx


@dataclass
class SurpriseCoverage:
    """Cumulative surprise coverage: buckets dividing ``(lower, upper]`` covered so far.

    ``update(scores)`` adds a batch and returns how many buckets it newly covered;
    ``merge(other)`` adds another instance's state (same bounds). Scores at or below
    ``lower`` are counted in ``below``, above ``upper`` in ``above`` and ``NaN`` in ``nan``;
    none of them covers a bucket.
    """

    lower: float
    upper: float
    buckets: int = 1000
    covered: np.ndarray = field(init=False, repr=False)
    count: int = field(init=False, default=0)
    below: int = field(init=False, default=0)
    above: int = field(init=False, default=0)
    nan: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.lower, self.upper, self.buckets = _check_bounds(self.lower, self.upper, self.buckets)
        self._edges = bucket_edges(self.lower, self.upper, self.buckets)
        self.covered = np.zeros(self.buckets, dtype=bool)

    @property
    def total(self) -> int:
        return self.buckets

    @property
    def value(self) -> float:
        """Fraction of buckets covered, in [0, 1]."""
        return float(np.count_nonzero(self.covered)) / self.buckets

    def hits(self, scores: Iterable[float]) -> np.ndarray:
        """Bucket index per score (see :func:`bucket_index`)."""
        return bucket_index(np.asarray(scores, dtype=np.float64), self._edges)

    def update(self, scores: Iterable[float]) -> int:
        idx = self.hits(scores)
        self.count += idx.size
        self.below += int(np.count_nonzero(idx == -1))
        self.above += int(np.count_nonzero(idx == self.buckets))
        self.nan += int(np.count_nonzero(idx == -2))
        inside = idx[(idx >= 0) & (idx < self.buckets)]
        before = int(np.count_nonzero(self.covered))
        self.covered[inside] = True
        return int(np.count_nonzero(self.covered)) - before

    def merge(self, other: "SurpriseCoverage") -> None:
        if (other.lower, other.upper, other.buckets) != (self.lower, self.upper, self.buckets):
            raise ValueError(
                f"cannot merge surprise coverage over ({other.lower:g}, {other.upper:g}] in {other.buckets} "
                f"buckets into one over ({self.lower:g}, {self.upper:g}] in {self.buckets}"
            )
        self.covered |= other.covered
        self.count += other.count
        self.below += other.below
        self.above += other.above
        self.nan += other.nan

    def copy(self) -> "SurpriseCoverage":
        new = SurpriseCoverage(self.lower, self.upper, self.buckets)
        new.merge(self)
        return new


def surprise_coverage(scores: Iterable[float], *, lower: float, upper: float, buckets: int = 1000) -> float:
    """Surprise coverage (equation 6): the fraction of the ``buckets`` equal segments of
    ``(lower, upper]`` that hold at least one score. Scores outside cover nothing; use
    :class:`SurpriseCoverage` to count them."""
    sc = SurpriseCoverage(lower, upper, buckets)
    arr = np.asarray(scores, dtype=np.float64)
    if arr.ndim > 1:
        raise ValueError(f"scores must be 1-D (one SA value per input), got shape {arr.shape}")
    sc.update(arr)
    return sc.value
