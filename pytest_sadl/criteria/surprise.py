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
``chunk_bytes`` of distances (over a layer of 1,024 neurons or more, DSA's blocked scan
gathers up to 4,096 training rows at a time, raw and shifted, up to four times that: a
wide layer's products need thousands of rows to run at the matrix product's speed).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import linalg

from pytest_sadl.criteria.checks import (
    as_pred,
    as_traces,
    as_train_traces,
    by_fixed_rows,
    check_fits,
    check_var_rule,
    check_var_threshold,
    class_list,
    class_moments,
    class_scatter,
    classes_of,
    examples,
    one_blas_thread,
    scoring_inputs,
    usable_classes,
    variance_filter,
    warn,
)
from pytest_sadl.criteria.mahalanobis import (
    MDSA as MDSA,  # re-exported: the third surprise measure lives in its own module
)
from pytest_sadl.criteria.neighbours import ClassNeighbours, cores
from pytest_sadl.criteria.shape import Batch
from pytest_sadl.errors import SadlWarning

if TYPE_CHECKING:
    from pytest_sadl.results import Metric

__all__ = ["LSA", "DSA", "surprise_coverage", "SurpriseCoverage", "SadlWarning"]

_CHUNK_BYTES = 16 * 2**20
# Per-class matrices (memmapped LSA/MDSA scatter, in-memory LSA whitened traces) are kept
# from one pass to the next only while all classes' take at most this; else each class's
# are made when it is fitted or scored, so memory is bounded by one class's at a time.
_KEEP_MATRICES = 256 * 2**20
_KEEP_WHITENED = 2**30
_LOG_2PI = math.log(2.0 * math.pi)
# A DSA call whose search is at most this many multiply-adds (inputs x training traces x
# neurons: ~10-20 ms on one core) runs on one BLAS thread.
_ONE_THREAD_WORK = 2**27
# A covariance whose squared Cholesky pivots span more than ten orders of magnitude is
# treated as singular (the softmax case: one direction has variance ~1e-17).
_RCOND = 1e-10
_POTRF, _TRTRS = linalg.lapack.dpotrf, linalg.lapack.dtrtrs


# --------------------------------------------------------------------------- LSA


NEAR_SINGULAR = ("drop", "keep")


@dataclass
class _Kde:
    """One class's Gaussian KDE, whitened: the kernel is ``exp(-|z - z_i|^2 / 2)``."""

    cols: np.ndarray  # the neurons this KDE is over
    rows: np.ndarray  # the class's training rows (indices into the training traces)
    mean: np.ndarray  # (d,)
    whiten: np.ndarray  # (d, d): z = (x - mean) @ whiten, whiten = inv(L).T, cov = L L^T
    log_norm: float  # -log n_c - log det(2 pi cov) / 2
    aug: np.ndarray | None = None  # (n_c, d + 2) rows [z_i, -|z_i|^2 / 2, 1]; None: made per chunk

    @property
    def n(self) -> int:
        return len(self.rows)


def _warn_too_few_traces(
    classes: np.ndarray, members: list[np.ndarray], too_small: list[int], cols: Mapping[int, np.ndarray]
) -> None:
    """One warning for the classes (indices ``too_small``) with no more training traces
    than their KDE has neurons: their inputs score NaN."""
    fix = "more training data, or a narrower layer, fixes this"
    if len(too_small) == 1:
        i = too_small[0]
        d = cols[int(classes[i])].size
        warn(
            f"LSA: class {int(classes[i])} has {len(members[i])} training traces, fewer than the "
            f"{d + 1} a KDE over {d} neurons needs; its inputs score NaN ({fix})",
            depth=1,
        )
        return
    labels = [int(classes[i]) for i in too_small]
    counts = [len(members[i]) for i in too_small]
    d = max(cols[label].size for label in labels)
    warn(
        f"LSA: {len(too_small):,d} classes have fewer training traces than the {d + 1} a KDE over "
        f"{d} neurons needs (e.g. {examples(labels)}, with {examples(counts)} traces); their "
        f"inputs score NaN ({fix})",
        depth=1,
    )


def _variances(classes: np.ndarray, usable: list[int], stats: Mapping[int, Any]) -> dict[int, np.ndarray]:
    """Each usable class's neuron variances (the third of its moments), by class label."""
    return {int(classes[i]): stats[int(classes[i])][2] for i in usable}


def _widest_and_sizes(
    classes: np.ndarray, members: list[np.ndarray], usable: list[int], cols: Mapping[int, np.ndarray]
) -> tuple[int, list[int]]:
    """The most neurons a usable class's KDE has, and each usable class's number of traces."""
    return max(cols[int(classes[i])].size for i in usable), [len(members[i]) for i in usable]


def _kept_neurons(start: Mapping[int, np.ndarray], kdes: Mapping[int, Any], near_singular: str) -> np.ndarray:
    """The neurons LSA measures: those of every class's KDE when near-singular ones are
    dropped (``"drop"``), else every neuron that varies in some class."""
    if near_singular == "drop":
        return np.unique(np.concatenate([kde.cols for kde in kdes.values()]))
    return np.unique(np.concatenate(list(start.values())))


def _whitening(data_cov: np.ndarray, factor: float, strict: bool) -> tuple[np.ndarray, float] | None:
    """``(inv(L).T, log det(2 pi L L^T))`` for the bandwidth ``L = factor * cholesky(data_cov)``,
    as ``scipy.stats.gaussian_kde`` scales it; ``None`` when ``data_cov`` is not positive
    definite or (``strict``) its squared Cholesky pivots span more than ``1/_RCOND``.

    LAPACK is called directly (``potrf``, ``trtrs``): the covariance was made from traces
    already checked finite, and SciPy's wrappers' checks and dispatch cost more than the
    factorisation of a small class's matrix (10 classes of 32 neurons: ~40% of the set-up)."""
    chol, info = _POTRF(data_cov, lower=1, clean=1)
    if info != 0:
        return None
    chol *= factor
    pivots = np.diag(chol)
    low, high = pivots.min(), pivots.max()
    if not low > 0 or (strict and (low / high) ** 2 < _RCOND):
        return None
    inverse, info = _TRTRS(chol, np.eye(len(chol)), lower=1)  # solve_triangular's LAPACK call, its bits
    if info != 0:
        return None
    return inverse.T, 2.0 * float(np.log(pivots * math.sqrt(2 * math.pi)).sum())


def _cov(xc: np.ndarray) -> np.ndarray:
    """``np.cov(xc.T, aweights=np.full(n, 1 / n))``, the covariance ``scipy.stats.gaussian_kde``
    computes, bit for bit (the same weighted mean, product and scaling, checked by the
    tests), without ``np.cov``'s argument handling: a third of a small class's set-up."""
    n = len(xc)
    w = np.full((n, 1), 1.0 / n)
    w_sum = float(w.sum())
    centred = xc - (xc * w).sum(axis=0) / w_sum
    fact = w_sum - float((w * w).sum()) / w_sum
    cov: np.ndarray = (centred.T @ (centred * w)) * np.true_divide(1, fact)
    return cov


class LSA:
    """Likelihood-based Surprise Adequacy.

    ``LSA(train_ats, train_pred)`` builds one Gaussian KDE per predicted class of the
    training traces (``train_pred=None``: one KDE over all traces, as for a regression
    model). Calling it scores new traces: ``lsa(ats, pred)`` returns ``-log f(x)`` per input,
    equal to ``-scipy.stats.gaussian_kde(train_c[:, cols].T).logpdf(x[:, cols].T)`` with
    ``cols = lsa.kept_by_class[c]`` (``lsa.kept`` for every class in ``"drop"`` mode).

    ``var_rule`` says which neurons a class's KDE is over (variance with ``ddof=0``, as the
    paper's reference implementation computes it):

    * ``"class"`` (default): the neurons whose training variance *in that class* is at
      least ``var_threshold``; a neuron constant in one class (a ReLU that never fires for
      it) leaves the other classes' KDEs alone, and a class in which no neuron varies gets
      no KDE (its inputs score ``NaN``, with a warning) instead of failing the set-up;
    * ``"paper"``: the paper's filter, one set for every class: a neuron whose variance is
      below ``var_threshold`` in *any* class is dropped from all. On a briefly trained or
      wide layer (MobileNetV2's 1,280 pooled features) this can drop every neuron.

    Both give the same KDEs when every neuron varies in every class or in none.

    ``near_singular`` decides what a covariance that is singular or nearly so gets (softmax
    outputs sum to one, so their covariance has a condition number near 1e13):

    * ``"drop"`` (default): a covariance whose squared Cholesky pivots span more than ten
      orders of magnitude, or that is not positive definite, counts as singular; the
      dependent neurons, found by a pivoted QR of the failing classes' pooled, centred
      traces, are dropped from *every* class, so all classes share one space;
    * ``"keep"``: a class keeps every neuron whenever its covariance is positive definite
      in float64 (Cholesky succeeds), which is what ``scipy.stats.gaussian_kde`` and the
      paper's reference code compute; only the classes where it is not fall back as
      ``"drop"`` does (and ``kept_by_class`` says which neurons they use).

    Other fallbacks, each with a :class:`SadlWarning` and never a crash inside SciPy: a
    class with fewer than ``d + 1`` training traces gets no KDE and inputs predicted as it
    (or as a class absent from training) score ``NaN``.

    The training traces may be a ``np.memmap`` (``np.load(path, mmap_mode="r")``): set-up
    and scoring then read them a chunk of at most ``chunk_bytes`` at a time and keep no
    whole copy; in memory, each class's whitened traces are kept for faster scoring.
    """

    def __init__(
        self,
        train_ats: object,
        train_pred: object | None = None,
        *,
        var_threshold: float = 1e-5,
        near_singular: str = "drop",
        var_rule: str = "class",
        chunk_bytes: int = _CHUNK_BYTES,
        max_bytes: int | None = None,
        max_features: int = 0,
    ) -> None:
        self.max_features = check_max_features(max_features)
        var_threshold = check_var_threshold(var_threshold)
        var_rule = check_var_rule(var_rule)
        if near_singular not in NEAR_SINGULAR:
            raise ValueError(f"near_singular must be 'drop' or 'keep', got {near_singular!r}")
        self.var_rule = var_rule
        self.chunk_bytes = int(chunk_bytes)
        x = as_train_traces("train_ats", train_ats, chunk_bytes=self.chunk_bytes)
        self.n_features_in: int = x.shape[1]
        self.var_threshold = float(var_threshold)
        self.near_singular = near_singular
        self.classifier = train_pred is not None
        pred = as_pred("train_pred", train_pred, len(x)) if self.classifier else np.zeros(len(x), np.int64)
        self._x = x
        self._train_pred = pred if self.classifier else None
        self._in_memory = not isinstance(x, np.memmap)
        classes, members = classes_of(pred)
        d_all = x.shape[1]
        # a memory-mapped set keeps every class's d x d scatter matrix from the moments'
        # pass only while they are small; else each class's is summed again when it is fitted
        self._keep_scatter = len(classes) * d_all * d_all * 8 <= _KEEP_MATRICES

        # The whole set-up (per-class moments, covariances, Cholesky factors, whitening) runs
        # on one BLAS thread: its d x d factorisations gain nothing from more, and OpenBLAS'
        # waiting threads made them 5-10x slower on a busy 2-core machine (a 128 x 128
        # Cholesky factor took 0.12 s, a class covariance 0.15 s; 60,000 x 128 traces set up
        # in 3.4 s, now 0.24 s); one thread also gives the same numbers whatever the cores.
        # The n-row products in it are memory-bound here; scoring keeps every thread.
        with one_blas_thread():
            usable = usable_classes("LSA", classes, members, "it gets no KDE")
            stats = {int(classes[i]): self._moments(members[i]) for i in usable}
            start = variance_filter(
                "LSA",
                _variances(classes, usable, stats),
                self.var_threshold,
                var_rule,
                "measure another layer (a layer whose outputs barely vary carries no density information)",
            )
            start = highest_variance(start, {label: v[2] for label, v in stats.items()}, self.max_features)
            usable = [i for i in usable if int(classes[i]) in start]
            usable = self._enough_traces(classes, members, usable, start)
            self._check_memory(*_widest_and_sizes(classes, members, usable, start), max_bytes)
            rows = {int(classes[i]): members[i] for i in usable}
            self._kdes = self._fit_all(rows, {label: start[label] for label in rows}, stats)
            self.kept: np.ndarray = _kept_neurons(start, self._kdes, near_singular)

    def _enough_traces(
        self, classes: np.ndarray, members: list[np.ndarray], usable: list[int], cols: Mapping[int, np.ndarray]
    ) -> list[int]:
        """The usable classes with more training traces than neurons (a KDE over ``d``
        neurons needs ``d + 1``); the others get one warning, and none left is an error."""
        too_small = [i for i in usable if len(members[i]) < cols[int(classes[i])].size + 1]
        if too_small:
            _warn_too_few_traces(classes, members, too_small, cols)
        small = set(too_small)
        left = [i for i in usable if i not in small]
        if not left:
            d = min(cols[int(classes[i])].size for i in usable)
            raise ValueError(
                f"LSA: no class has more than {d} training traces, the minimum for a KDE over "
                f"{d} neurons; use more training data, a layer with fewer neurons, or the layer's first principal "
                f"axes (--sadl-sa-components=N, N below {d})"
            )
        return left

    def _fit_all(
        self, rows: dict[int, np.ndarray], cols: dict[int, np.ndarray], stats: dict[int, Any]
    ) -> dict[int, _Kde]:
        """Every class's KDE over its neurons ``cols[label]``; on a singular covariance the
        dependent neurons are dropped (``"drop"``: from every class; ``"keep"``: from the
        failing classes only) and the classes refitted."""
        kdes: dict[int, _Kde] = {}
        pending = list(rows)
        if self.near_singular == "keep":  # every class whose full covariance is positive definite
            for label in rows:
                kde = self._fit(rows[label], cols[label], stats[label], strict=False)
                if kde is not None:
                    kdes[label] = kde
            pending = [label for label in rows if label not in kdes]
        while pending:  # fit; on a singular covariance drop the dependent neurons, refit
            failed = self._fit_pending(pending, rows, cols, stats, kdes)
            if not failed:
                break
            drop, message = self._dependent_neurons(failed, rows, cols)
            warn(message)  # here, as the other set-up warnings: attributed to the caller of LSA
            self._drop(drop, rows if self.near_singular == "drop" else failed, cols)
            if self.near_singular == "drop":
                kdes.clear()
                pending = list(rows)
            else:
                pending = failed
        return kdes

    def _fit_pending(
        self,
        pending: list[int],
        rows: dict[int, np.ndarray],
        cols: dict[int, np.ndarray],
        stats: dict[int, Any],
        kdes: dict[int, _Kde],
    ) -> list[int]:
        """Fit the ``pending`` classes into ``kdes``; the classes whose covariance is singular."""
        failed = []
        for label in pending:
            kde = self._fit(rows[label], cols[label], stats[label], strict=True)
            if kde is None:
                failed.append(label)
            else:
                kdes[label] = kde
        return failed

    def _dependent_neurons(
        self, failed: list[int], rows: dict[int, np.ndarray], cols: dict[int, np.ndarray]
    ) -> tuple[list[int], str]:
        """The neurons the ``failed`` classes' traces depend on linearly, and the warning
        that says they are dropped (``"drop"``: from every class; ``"keep"``: from the failing ones)."""
        # A dependency the failing classes share (softmax rows summing to one) shows in
        # their pooled, class-centred traces: drop one neuron for all, not one per class.
        common = cols[failed[0]]
        for label in failed[1:]:
            common = np.intersect1d(common, cols[label])
        traces = [self._gather(rows[label], common) for label in failed]
        pooled = np.vstack([xc - xc.mean(axis=0) for xc in traces])
        space = common
        rank, dependent = self._dependent(pooled, strict=False) if common.size else (0, [])
        if not dependent:
            space = cols[failed[0]]
            rank, dependent = self._dependent(self._gather(rows[failed[0]], space))
        drop = sorted(int(space[j]) for j in dependent)
        where = "from every class" if self.near_singular == "drop" else "from these classes only"
        message = (
            f"LSA: the training traces of class(es) {failed} lie in a {rank}-dimensional subspace "
            f"of {space.size} neurons (e.g. softmax outputs that sum to one); dropping the linearly "
            f"dependent neuron(s) {drop} {where}"
        )
        return drop, message

    @staticmethod
    def _drop(drop: list[int], labels: Iterable[int], cols: dict[int, np.ndarray]) -> None:
        """Remove the neurons ``drop`` from the columns of the classes ``labels``."""
        for label in labels:
            cols[label] = cols[label][~np.isin(cols[label], drop)]
            if cols[label].size == 0:
                raise ValueError("LSA: no linearly independent neurons are left; measure another layer")

    # -- set-up ---------------------------------------------------------------

    def _gather(self, rows: np.ndarray, cols: np.ndarray | None = None) -> np.ndarray:
        """The rows (and columns) of the training traces as float64: one class at a time."""
        xc = np.asarray(self._x[rows], dtype=np.float64)
        return xc if cols is None else xc[:, cols]

    def _moments(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """(mean, scatter matrix or ``None``, variance with ddof=0) of a class's traces.

        In memory the covariance is later computed as SciPy does, from the class's traces;
        for a memory-mapped set the centred scatter matrix is summed a chunk at a time
        (two passes: mean, then scatter), so no class is ever held whole; with many wide
        classes it is not kept (``None``) but summed again for the class being fitted."""
        if self._in_memory:  # xc.mean(axis=0), xc.var(axis=0) as NumPy computes them, the mean once
            xc = self._gather(rows)
            mean = xc.sum(axis=0) / len(xc)
            centred = xc - mean
            return mean, None, np.square(centred, out=centred).sum(axis=0) / len(xc)
        return class_moments(self._x, rows, self.chunk_bytes, scatter=self._keep_scatter)

    def _check_memory(self, d: int, sizes: list[int], max_bytes: int | None) -> None:
        """Refuse, before any class is fitted, KDEs whose matrices would not fit: one
        ``d x d`` whitening matrix per class (float64), and in memory each class's whitened
        traces, kept only while all of them take at most ``_KEEP_WHITENED`` (else they are
        made a block at a time when scoring, as for a memory-mapped set)."""
        k = len(sizes)
        self._keep_aug = self._in_memory and sum(sizes) * (d + 2) * 8 <= _KEEP_WHITENED
        check_fits(
            "LSA",
            f"{k:,d} KDEs over {d:,d} neurons (a {d:,d} x {d:,d} float64 whitening matrix each)",
            classes=k,
            neurons=d,
            max_bytes=max_bytes,
        )

    def _fit(self, rows: np.ndarray, cols: np.ndarray, stats: tuple[Any, ...], strict: bool) -> _Kde | None:
        """The class's KDE over ``cols``, bandwidth and normalisation exactly as
        ``scipy.stats.gaussian_kde`` (Scott's factor ``n ** (-1 / (d + 4))`` times the
        unbiased covariance, Cholesky factor scaled by it); ``None`` when the covariance is
        not positive definite or (``strict``) its squared Cholesky pivots span more than
        ``1/_RCOND``."""
        n, d = len(rows), cols.size
        mean_all, scatter, _ = stats
        mean = mean_all[cols]
        xc = None
        if scatter is not None:
            data_cov = scatter[np.ix_(cols, cols)] / (n - 1)
        elif self._in_memory:
            xc = self._gather(rows, cols)
            data_cov = _cov(xc)
        else:  # many wide classes of a memmap: this class's scatter only, summed now
            data_cov = class_scatter(self._x, rows, mean_all, cols, self.chunk_bytes) / (n - 1)
        factors = _whitening(data_cov, n ** (-1.0 / (d + 4)), strict)
        if factors is None:
            return None  # not positive definite, or SciPy's densities would be dominated by rounding
        whiten, log_det = factors
        kde = _Kde(cols, rows, mean, whiten, -math.log(n) - 0.5 * log_det)
        if self._keep_aug:  # the class's traces gathered once
            kde.aug = self._augment((self._gather(rows, cols) if xc is None else xc) - mean, whiten)
        return kde

    @staticmethod
    def _augment(centred: np.ndarray, whiten: np.ndarray) -> np.ndarray:
        """Rows ``[z_i, -|z_i|^2 / 2, 1]`` of whitened training traces, ``z_i = centred_i @ whiten``
        (one matrix product with a query row ``[z, 1, -|z|^2 / 2]`` gives ``-|z - z_i|^2 / 2``)."""
        d = whiten.shape[1]
        aug = np.empty((len(centred), d + 2))
        z = np.matmul(centred, whiten, out=aug[:, :d])
        aug[:, d] = -0.5 * np.einsum("ij,ij->i", z, z)
        aug[:, d + 1] = 1.0
        return aug

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

    @property
    def kept_by_class(self) -> dict[int, np.ndarray]:
        """The neurons each class's KDE is over (all equal to :attr:`kept` with
        ``var_rule="paper"`` in ``"drop"`` mode; :attr:`kept` is their union)."""
        return {label: kde.cols for label, kde in sorted(self._kdes.items())}

    def __call__(self, ats: object, pred: object | None = None) -> np.ndarray:
        """LSA of each input: ``-log`` of its class's KDE density, float64 ``(n,)``."""
        x, p = scoring_inputs("LSA", ats, pred, dims=self.n_features_in, classifier=self.classifier)
        out = np.full(len(x), np.nan)
        if len(x) == 0:
            return out
        classes, members = classes_of(p)
        missing: list[int] = []
        for c, m in zip(classes, members, strict=True):
            kde = self._kdes.get(int(c))
            if kde is None:
                missing.append(int(c))
                continue
            out[m] = -self._log_density(kde, x[m][:, kde.cols])
        if missing:
            warn(
                f"LSA: no KDE for predicted class(es) {class_list(missing)} (absent or too rare in the training traces); those inputs score NaN"
            )
        return out

    def _training_blocks(self, kde: _Kde, rows_per_block: int) -> Iterator[np.ndarray]:
        """The class's augmented whitened training rows, a block at a time (made from the
        training traces chunk by chunk when they are not kept in memory)."""
        for c0 in range(0, kde.n, rows_per_block):
            if kde.aug is not None:
                yield kde.aug[c0 : c0 + rows_per_block]
            else:
                yield self._augment(self._gather(kde.rows[c0 : c0 + rows_per_block], kde.cols) - kde.mean, kde.whiten)

    def _log_density(self, kde: _Kde, x: np.ndarray) -> np.ndarray:
        """``log f(x)``: one matrix product per block of training rows, then an online
        log-sum-exp (the running maximum is subtracted before ``exp``), so an input far
        from every training trace neither underflows to ``-inf`` nor pays for denormals."""
        d = x.shape[1]
        z = by_fixed_rows(x - kde.mean, kde.whiten)  # the same bits whichever inputs share the call
        q = np.empty((len(z), d + 2))
        q[:, :d] = z
        q[:, d] = 1.0
        q[:, d + 1] = -0.5 * np.einsum("ij,ij->i", z, z)
        m = len(z)
        cols = max(1, min(kde.n, self.chunk_bytes // (8 * (d + 2))))
        rows = max(1, min(m, self.chunk_bytes // (8 * cols)))
        top = np.full(m, -np.inf)
        acc = np.zeros(m)
        for block in self._training_blocks(kde, cols):
            for r0 in range(0, m, rows):
                r1 = min(m, r0 + rows)
                v = by_fixed_rows(q[r0:r1], block.T)
                new_top = np.maximum(top[r0:r1], v.max(axis=1))
                acc[r0:r1] *= np.exp(top[r0:r1] - new_top)
                v -= new_top[:, None]
                np.exp(v, out=v)
                acc[r0:r1] += v.sum(axis=1)
                top[r0:r1] = new_top
        log_density: np.ndarray = np.log(acc) + top + kde.log_norm
        return log_density

    def to_arrays(self) -> dict[str, np.ndarray]:
        """What rebuilds this LSA: its training traces (as given, a memmap stays one),
        classes, threshold and near-singular mode (set-up is cheap)."""
        arrays = {
            "train_ats": self._x,
            "var_threshold": np.array(self.var_threshold),
            "near_singular": np.array(self.near_singular),
            "var_rule": np.array(self.var_rule),
        }
        if self._train_pred is not None:
            arrays["train_pred"] = self._train_pred
        if self.max_features:
            arrays["max_features"] = np.array(self.max_features)
        return arrays

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], *, chunk_bytes: int = _CHUNK_BYTES) -> LSA:
        mode = str(arrays["near_singular"]) if "near_singular" in arrays else "drop"
        return cls(
            arrays["train_ats"],
            arrays.get("train_pred"),
            var_threshold=float(arrays["var_threshold"]),
            near_singular=mode,
            var_rule=str(arrays["var_rule"]) if "var_rule" in arrays else "paper",  # stored before the rule existed
            chunk_bytes=chunk_bytes,
            max_features=int(arrays["max_features"]) if "max_features" in arrays else 0,
        )


def check_max_features(value: object) -> int:
    """LSA's ``max_features`` as a whole number >= 0 (0: every neuron), or a one-line error."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"max_features must be a whole number >= 0 (0: every neuron), got {value!r}")
    return int(value)


def highest_variance(
    cols: Mapping[int, np.ndarray], variances: Mapping[int, np.ndarray], m: int
) -> dict[int, np.ndarray]:
    """Each class's neurons ``cols[label]`` cut to the ``m`` of highest training variance
    in that class (``variances[label]``, over every neuron), ascending; ties go to the
    lower neuron index; ``m == 0`` or ``m`` at least the neurons: all of them. dnn-tip's
    LSA ``max_features`` (``np.argsort(var)[:-m]`` dropped), per class as its
    ``MultiModalSA.build_by_class`` sets LSA up, after pytest-sadl's variance filter."""
    out = {}
    for label, c in cols.items():
        if 0 < m < c.size:
            order = np.argsort(-variances[label][c], kind="stable")[:m]
            c = np.sort(c[order])
        out[label] = c
    return out


# --------------------------------------------------------------------------- DSA


class DSA:
    """Distance-based Surprise Adequacy (equations 3-5 of the paper).

    For an input ``x`` of predicted class ``c``: ``x_a`` is the nearest training trace of
    class ``c`` and ``dist_a = |x - x_a|``; ``x_b`` is the nearest training trace of another
    class **to x_a** and ``dist_b = |x_a - x_b|``; ``DSA = dist_a / dist_b``.

    Nearest neighbours are exact (:mod:`pytest_sadl.criteria.neighbours`: a k-d tree up to 16
    dimensions, blocked BLAS products with exact re-measurement above, or ``search="tree"``
    / ``"blas"`` to choose); on a tie ``x_a`` is the first such trace in training order, as a per-input
    loop finds it. Repeated training traces are searched once.

    ``dist_b`` is found by one search over every training trace with the query's own class
    masked out (all classes' queries together), so its cost does not grow with the number
    of classes; a k-d tree DSA with up to ``TREE_MAX_CLASSES`` (32) classes searches the
    other classes' trees instead, which is faster there.

    ``dist_b`` depends only on the training trace ``x_a``, so it is computed lazily, once,
    for the training traces that are some input's ``x_a``, and kept: :attr:`known` counts
    them, ``to_arrays(complete=False)`` hands them (``NaN`` where not yet known) to a
    profile to store, and ``DSA(..., dist_b=saved)`` / :meth:`from_arrays` takes them back.
    :meth:`precompute` (or ``to_arrays()``) fills every one.

    The training traces may be a ``np.memmap``: they are read a chunk of at most
    ``chunk_bytes`` at a time and never copied whole.

    ``search`` is ``"auto"`` (the k-d tree for narrow in-memory traces, else the blocked
    scan), ``"tree"`` or ``"blas"``: every search is exact. The approximate
    ``search="faiss"`` was withdrawn: faiss HNSW graphs, one per class and one per class over
    the others, were measured 95x *slower* than the exact search (200 inputs over 100k x 64
    traces of 10 classes: 378 s against 4.0 s) with DSA errors up to 14%, and one graph over
    the whole set queried class-aware (faiss' exclusion selectors) did not pay either (its
    build alone took 10-70x the exact scoring); the exact search reaches 43% of this
    machine's matrix-product limit at 1.28M x 2,048 (benchmarks/bench_scale.py).

    An input predicted as a class with no training traces scores ``NaN`` (with a
    :class:`SadlWarning`); ``dist_b = 0`` (a training trace duplicated in another class)
    gives ``inf``, or ``NaN`` when ``dist_a`` is 0 too.
    """

    def __init__(
        self,
        train_ats: object,
        train_pred: object,
        *,
        search: str = "auto",
        dist_b: object | None = None,
        chunk_bytes: int = _CHUNK_BYTES,
    ) -> None:
        if train_pred is None:
            raise ValueError(
                "DSA needs the predicted classes of the training traces (it measures distance to "
                "class boundaries); for a regression model use LSA only"
            )
        self.chunk_bytes = int(chunk_bytes)
        x = as_train_traces("train_ats", train_ats, chunk_bytes=self.chunk_bytes)
        pred = as_pred("train_pred", train_pred, len(x))
        classes = np.unique(pred)
        if len(classes) < 2:
            raise ValueError(
                f"DSA needs training traces of at least two predicted classes, got only class(es) "
                f"{classes.tolist()}; check the model's predictions on the training data"
            )
        if search == "faiss":
            raise ValueError(
                "DSA(search='faiss') was withdrawn: the approximate search was measured 95x slower than the exact "
                "one, which no longer grows with the number of classes; use search='auto' (exact)"
            )
        self.n_features_in: int = x.shape[1]
        self._x = x
        self._pred = pred
        self._nn = ClassNeighbours(x, pred, method=search, chunk_bytes=self.chunk_bytes)
        if dist_b is None:
            self._other = np.full(len(x), np.nan)
        else:
            other = np.array(dist_b, dtype=np.float64)
            if other.shape != (len(x),):
                raise ValueError(
                    f"dist_b must have one distance per training trace, shape ({len(x)},), got {other.shape}"
                )
            if np.any(other < 0):
                raise ValueError("dist_b holds negative distances; it is not what DSA.to_arrays() wrote")
            self._other = other

    @property
    def classes(self) -> list[int]:
        return sorted(self._nn.span)

    @property
    def search(self) -> str:
        """The search in use: ``"tree"`` or ``"blas"`` (both exact)."""
        return self._nn.method

    @property
    def known(self) -> int:
        """How many training traces have their ``dist_b`` computed (copies count once each)."""
        return int(np.count_nonzero(~np.isnan(self._other[self._nn.rep])))

    def _fill_other(self, needed: np.ndarray) -> None:
        """Compute ``dist_b`` of the training rows ``needed`` (first copies) not known yet."""
        needed = np.unique(needed[np.isnan(self._other[needed])])
        if needed.size == 0:
            return
        cls = self._pred[needed]
        step = max(1, 4 * self.chunk_bytes // (8 * self.n_features_in))
        if self.search != "tree" or not self._nn.trees_out:
            # one masked scan over every training trace per part, queries of all classes at
            # once: the cost does not grow with the number of classes
            order = needed[np.argsort(cls, kind="stable")]
            for part in _parts(order, step):
                q = np.asarray(self._x[part], dtype=np.float64)
                self._other[part] = self._nn.nearest_out_each(q, self._pred[part])
            return
        jobs = [(int(c), part) for c in np.unique(cls) for part in _parts(needed[cls == c], step)]
        threads = min(len(jobs), cores())
        if threads < 2 or len(needed) < 4096:
            for job in jobs:
                self._fill_other_of_class(job)
            return
        self._fill_other_side_by_side(jobs, threads)

    def _fill_other_of_class(self, job: tuple[int, np.ndarray], workers: int = 0) -> None:
        """``dist_b`` of the training rows of one class (``job``: the class, its rows), by its tree."""
        c, part = job
        self._other[part] = self._nn.nearest_out(np.asarray(self._x[part], dtype=np.float64), c, workers=workers)

    def _fill_other_side_by_side(self, jobs: list[tuple[int, np.ndarray]], threads: int) -> None:
        """The classes' ``jobs`` in ``threads`` threads: k-d tree searches release the GIL, so
        they run side by side, one search thread each (the trees are built first, so no
        thread builds one), each writing its own rows; an interrupt cancels the searches not
        started yet."""
        self._nn.build_trees()
        pool = ThreadPoolExecutor(threads)
        try:
            list(pool.map(lambda job: self._fill_other_of_class(job, workers=1), jobs))
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)

    def precompute(self) -> DSA:
        """Compute ``dist_b`` for every training trace now (a cached profile then skips it)."""
        self._fill_other(self._nn.rows)
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
        # A small search runs on one BLAS thread: its products take well under a millisecond
        # each, and on a busy machine OpenBLAS' second thread, waiting for a core, made them
        # 20x slower (digits, 1,200 x 32 traces, 1,194 inputs, two other processes running:
        # 72 ms against 3.3 ms on one thread; idle: 3.2 ms against 5.0 ms).
        small = len(x) * len(self._x) * self.n_features_in <= _ONE_THREAD_WORK
        with one_blas_thread() if small else contextlib.nullcontext():
            missing = self._score(x, p, out)
        if missing:
            warn(f"DSA: no training traces of predicted class(es) {class_list(missing)}; those inputs score NaN")
        return out

    def _score(self, x: np.ndarray, p: np.ndarray, out: np.ndarray) -> list[int]:
        """Fill ``out`` with the DSA of the inputs ``x`` of predicted classes ``p``; the
        predicted classes with no training traces (their inputs stay ``NaN``)."""
        classes, members = classes_of(p)
        missing = []
        found = []
        for c, m in zip(classes, members, strict=True):
            if int(c) not in self._nn.span:
                missing.append(int(c))
                continue
            a, dist_a = self._nn.nearest_in(x[m], int(c))
            found.append((m, a, dist_a))
        if found:  # every class's missing dist_b in one go: the classes' searches run side by side
            self._fill_other(np.concatenate([a for _, a, _ in found]))
        for m, a, dist_a in found:
            with np.errstate(divide="ignore", invalid="ignore"):
                out[m] = dist_a / self._other[a]
        return missing

    def to_arrays(self, *, complete: bool = True) -> dict[str, np.ndarray]:
        """Arrays that rebuild this DSA with no distance computation: the training traces
        and classes as given and ``other_dist``, every training trace's ``dist_b``
        (``complete=False``: only those computed so far, ``NaN`` for the rest)."""
        if complete:
            self.precompute()
        return {"train_ats": self._x, "train_pred": self._pred, "other_dist": self._other[self._nn.rep]}

    @classmethod
    def from_arrays(
        cls, arrays: Mapping[str, np.ndarray], *, search: str = "auto", chunk_bytes: int = _CHUNK_BYTES
    ) -> DSA:
        """The DSA :meth:`to_arrays` described (``other_dist`` may hold ``NaN``: computed lazily)."""
        return cls(
            arrays["train_ats"],
            arrays["train_pred"],
            search=search,
            dist_b=arrays["other_dist"],
            chunk_bytes=chunk_bytes,
        )


def _parts(rows: np.ndarray, step: int) -> list[np.ndarray]:
    return [rows[s : s + step] for s in range(0, len(rows), step)]


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
    #: the per-input score a :class:`~pytest_sadl.criteria.shape.Batch` gives it (``"lsa"``):
    #: as a run's criterion it reads ``batch.scores[sa]``
    sa: str | None = None
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

    def update(self, scores: Iterable[float] | Batch) -> int:
        """Add a batch of scores (or a run's :class:`~pytest_sadl.criteria.shape.Batch`, read
        by :attr:`sa`: a batch without that score covers nothing); return how many buckets
        it newly covered."""
        if isinstance(scores, Batch):
            if self.sa is None:
                raise ValueError("a SurpriseCoverage reads a Batch by its score: give sa='lsa' (or another)")
            found = scores.scores.get(self.sa)
            if found is None:
                return 0
            scores = found
        idx = self.hits(scores)
        self.count += idx.size
        self.below += int(np.count_nonzero(idx == -1))
        self.above += int(np.count_nonzero(idx == self.buckets))
        self.nan += int(np.count_nonzero(idx == -2))
        inside = idx[(idx >= 0) & (idx < self.buckets)]
        before = int(np.count_nonzero(self.covered))
        self.covered[inside] = True
        return int(np.count_nonzero(self.covered)) - before

    def merge(self, other: SurpriseCoverage) -> None:
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

    def copy(self) -> SurpriseCoverage:
        new = SurpriseCoverage(self.lower, self.upper, self.buckets, self.sa)
        new.merge(self)
        return new

    def metric(self) -> Metric:
        """The results' entry: value, covered and total buckets, and the inputs outside."""
        from pytest_sadl.results import Metric

        covered = int(np.count_nonzero(self.covered))
        return Metric(self.value, covered, self.total, True, self.below, self.above, self.count, self.nan)

    def bounds(self) -> dict[str, float | int]:
        return {"lower": self.lower, "upper": self.upper, "buckets": self.buckets}

    def covered_sets(self) -> tuple[list[Any], list[int], dict[str, int]]:
        """The covered buckets (one part), their total, and the scores below, above, in
        all and NaN: what ``pytest_sadl.covered`` stores per test, so that runs combine."""
        counts = {"below": self.below, "above": self.above, "count": self.count, "nan": self.nan}
        return [self.covered.copy()], [self.total], counts


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
