"""Mahalanobis-distance-based Surprise Adequacy (MDSA) on NumPy arrays.

Kim, Ju, Feldt and Yoo, "Reducing DNN labelling cost by surprise adequacy: an industrial
case study for autonomous driving", ESEC/FSE 2020:

    MDSA(x) = sqrt((a(x) - mu_c)^T  Sigma_c^-1  (a(x) - mu_c))

where ``a(x)`` is the input's activation trace, ``c`` its predicted class, and ``mu_c``
and ``Sigma_c`` the mean and covariance of the training traces the model predicts as
``c`` (one class over all traces for a regression model). It needs one mean and one
covariance per class instead of every training trace, so it is cheap to build and to
score, and it is the "third" surprise measure beside LSA and DSA; its surprise coverage
(MDSC) uses the buckets of :class:`pytest_sadl.criteria.surprise.SurpriseCoverage`.

Choices, each written down because the paper leaves them open:

* the covariance is the unbiased sample covariance (``ddof=1``, as ``np.cov``), the one
  ``scipy.stats.gaussian_kde`` uses for LSA, accumulated in float64 chunks;
* neurons of too little training variance (``ddof=0``, below ``var_threshold``) are
  dropped by LSA's ``var_rule`` (:func:`pytest_sadl.criteria.checks.variance_filter`):
  ``"class"`` (default) keeps every neuron that varies in at least one class with two or
  more training traces (the pseudo-inverse below then ignores, per class, a direction the
  class does not vary in), ``"paper"`` drops a neuron below the threshold in any class;
* **a singular covariance** (a class whose traces lie in a subspace: fewer traces than
  neurons, or neurons that are linear combinations of others, as softmax outputs that sum
  to one) is inverted by the Moore-Penrose pseudo-inverse: eigenvalues at most
  ``rcond`` times the largest are treated as zero, so the distance is measured inside the
  subspace the class's training traces span and a direction in which the class never
  varied adds nothing. A :class:`~pytest_sadl.errors.SadlWarning` names the class and its
  rank. This equals ``scipy.spatial.distance.mahalanobis(x, mu, np.linalg.pinv(cov))``;
* a class with fewer than two training traces has no covariance: its inputs, and inputs
  predicted as a class absent from training, score ``NaN`` with a warning.

Neither TensorFlow nor pytest is imported here.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from pytest_sadl.criteria.checks import (
    as_pred,
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
from pytest_sadl.errors import SadlWarning

__all__ = ["MDSA"]

RCOND = 1e-10
# the classes' d x d scatter matrices are kept from the moments' pass to the factors only
# while all of them take at most this; else each class's is summed again when it is factored
_KEEP_MATRICES = 256 * 2**20


def _factor_width(d: int, sizes: list[int]) -> int:
    """The columns of every class's factor over ``d`` neurons, for classes of ``sizes`` traces:
    a class of n_c traces has rank at most n_c - 1, so no factor needs more."""
    return min(d, max(sizes) - 1)


def _must_stream(classes: int, d: int, width: int, max_bytes: int | None) -> bool:
    """Whether the classes' factors (``d x width`` float64 each) are too many for memory, so
    each is made when inputs of its class are scored (one class's matrices at a time);
    raises ``ValueError`` when not even one class's fits."""
    what = f"{classes:,d} classes' inverse covariances over {d:,d} neurons ({d:,d} x {width:,d} float64 each)"
    try:
        check_fits("MDSA", what, classes=classes, neurons=d, columns=width, max_bytes=max_bytes)
        return False
    except ValueError:
        check_fits(
            "MDSA",
            f"one class's inverse covariance over {d:,d} neurons ({d:,d} x {width:,d} float64)",
            classes=1,
            neurons=d,
            columns=width,
            max_bytes=max_bytes,
        )
        return True


@dataclass(frozen=True)
class _Source:
    """What a class's factor is made from: the training traces (a memmap stays one), the
    rows and float64 mean (over every neuron) of each usable class, the chunk size."""

    x: np.ndarray
    rows: list[np.ndarray]
    means: list[np.ndarray]
    chunk_bytes: int


class MDSA:
    """Mahalanobis-distance-based Surprise Adequacy.

    ``MDSA(train_ats, train_pred)`` fits one mean and one (pseudo-)inverse covariance per
    predicted class (``train_pred=None``: one over all traces, for a regression model);
    ``mdsa(ats, pred)`` returns the distance of each trace to its class's mean, float64 ``(n,)``.

    The training traces may be a ``np.memmap`` (``np.load(path, mmap_mode="r")``): the
    per-class means and covariances are accumulated in float64 a chunk of at most
    ``chunk_bytes`` at a time (mean, then centred scatter), so no whole copy is made.
    """

    def __init__(
        self,
        train_ats: object,
        train_pred: object | None = None,
        *,
        var_threshold: float = 1e-5,
        var_rule: str = "class",
        rcond: float = RCOND,
        chunk_bytes: int = 16 * 2**20,
        max_bytes: int | None = None,
    ) -> None:
        var_threshold = check_var_threshold(var_threshold)
        self.var_rule = check_var_rule(var_rule)
        if not (isinstance(rcond, (int, float)) and 0 <= rcond < 1):
            raise ValueError(f"rcond must be a number in [0, 1), got {rcond!r}")
        x = as_train_traces("train_ats", train_ats, chunk_bytes=chunk_bytes)
        self.n_features_in: int = x.shape[1]
        self.var_threshold = var_threshold
        self.rcond = float(rcond)
        self.classifier = train_pred is not None
        pred = as_pred("train_pred", train_pred, len(x)) if self.classifier else np.zeros(len(x), np.int64)
        classes, members = classes_of(pred)
        # One BLAS thread: the per-class products and eigendecompositions are small, and
        # waiting BLAS threads made 1,000 classes' set-up 25x slower on a busy 2-core machine.
        usable = usable_classes("MDSA", classes, members, "it has no covariance")
        with one_blas_thread():
            self._set_up(x, classes, members, usable, int(chunk_bytes), max_bytes)

    def _set_up(
        self,
        x: np.ndarray,
        classes: np.ndarray,
        members: list[np.ndarray],
        usable: list[int],
        chunk_bytes: int,
        max_bytes: int | None,
    ) -> None:
        d_all = x.shape[1]
        keep = len(usable) * d_all * d_all * 8 <= _KEEP_MATRICES
        # One chunked pass per class (float64 sums), so a memory-mapped set is never copied
        # whole; the scatter matrices are kept for the factors only while they are small.
        stats = [class_moments(x, members[i], chunk_bytes, scatter=keep) for i in usable]
        kept = self._kept_neurons([var for _, _, var in stats])
        self.kept: np.ndarray = kept
        d = kept.size
        width = _factor_width(d, [len(members[i]) for i in usable])
        streamed = _must_stream(len(usable), d, width, max_bytes)
        self.classes_: np.ndarray = classes[usable].astype(np.int64)
        means = [mean for mean, _, _ in stats]
        self.means: np.ndarray = np.stack([mean[kept] for mean in means]) if means else np.empty((0, d))
        self._source: _Source | None = _Source(x, [members[i] for i in usable], means, chunk_bytes)
        self.streamed = streamed
        self.factors: np.ndarray | None
        self.ranks: np.ndarray
        if streamed:
            # factors[c] are made by _factor when inputs of class c are scored
            self.factors = None
            self.ranks = np.full(len(usable), -1, dtype=np.int64)
            return
        # warned here, so the warning's stack level names the same caller as before
        self._warn_singular(self._make_factors([scatter for _, scatter, _ in stats], width))

    def _kept_neurons(self, variances: list[np.ndarray]) -> np.ndarray:
        """The neurons kept by :attr:`var_rule` from each usable class's variances (sorted)."""
        with warnings.catch_warnings():  # a class in which nothing varies still has a mean and a distance
            warnings.simplefilter("ignore", SadlWarning)
            per_class = variance_filter(
                "MDSA",
                dict(enumerate(variances)),
                self.var_threshold,
                self.var_rule,
                "measure another layer",
            )
        return np.unique(np.concatenate(list(per_class.values())))

    def _make_factors(self, scatters: list[np.ndarray | None], width: int) -> list[str]:
        """Every usable class's factor and rank, made now; the classes whose covariance is singular."""
        d = self.kept.size
        # factor[c] (d, width): (x - mean) @ factor has squared norm (x - mean)^T pinv(cov) (x - mean);
        # the columns past the class's rank are zero.
        self.factors = np.zeros((len(scatters), d, width))
        self.ranks = np.zeros(len(scatters), dtype=np.int64)
        singular = []
        for i, scatter in enumerate(scatters):
            self.ranks[i] = self._make_factor(i, scatter, self.factors[i])
            if self.ranks[i] < d:
                singular.append(self._singular(i))
        self._source = None  # nothing more to read from the training traces
        return singular

    def _make_factor(self, i: int, scatter: np.ndarray | None, out: np.ndarray) -> int:
        """Write class ``i``'s inverse-covariance factor into ``out`` (``d x width``); its rank."""
        src = self._source
        assert src is not None
        x, rows, mean, kept = src.x, src.rows[i], src.means[i], self.kept
        n_c, d = len(rows), kept.size
        if n_c <= d:  # fewer traces than neurons: from their thin SVD, n_c^2 d instead of d^3
            centred = np.asarray(x[rows], dtype=np.float64)[:, kept] - mean[kept]
            return self._fit_rows(centred, out)
        if scatter is not None:
            cov = scatter[np.ix_(kept, kept)] / (n_c - 1)
        else:
            cov = class_scatter(x, rows, mean, kept, src.chunk_bytes) / (n_c - 1)
        return self._fit_factor(cov, out)

    def _singular(self, i: int) -> str:
        n_c = len(self._source.rows[i]) if self._source is not None else "?"
        return f"{int(self.classes_[i])} (rank {int(self.ranks[i])}, {n_c} traces)"

    def _warn_singular(self, singular: list[str]) -> None:
        if singular:
            many = f"{len(singular):,d} classes, e.g. " if len(singular) > 5 else ""
            warn(
                f"MDSA: the training covariance of class(es) {many}{examples(singular)} over {self.kept.size} neurons "
                "is singular; using its pseudo-inverse: distances are measured within the subspace those traces span "
                "(more training data or a narrower layer avoids this)"
            )

    def _factor(self, i: int, singular: list[str]) -> np.ndarray:
        """Class ``i``'s factor ``(d, rank)``: kept from the set-up, or (streamed) made now
        from the training traces, on one BLAS thread, and not kept."""
        if self.factors is not None:
            return self.factors[i, :, : self.ranks[i]]
        src = self._source
        assert src is not None
        d = self.kept.size
        out = np.zeros((d, min(d, max(1, len(src.rows[i]) - 1))))
        with one_blas_thread():
            self.ranks[i] = self._make_factor(i, None, out)
        if self.ranks[i] < d:
            singular.append(self._singular(i))
        return out[:, : self.ranks[i]]

    def _fit_rows(self, centred: np.ndarray, out: np.ndarray) -> int:
        """:meth:`_fit_factor` of ``cov = centred^T centred / (n - 1)`` from the ``n x n`` Gram
        matrix of the centred traces (``n <= d``): its eigenpairs ``(s^2, u)`` give the
        covariance's, ``lambda = s^2 / (n - 1)`` and ``v = centred^T u / s``, in ``n^2 d``
        instead of ``d^3`` (and 3.5x faster than the thin SVD at 1,280 x 2,048). Eigenvalues
        are those of the covariance up to its scale, so their precision is that of the
        ``n > d`` path's ``eigh(cov)``."""
        squares, u = np.linalg.eigh(centred @ centred.T)
        values = squares / (len(centred) - 1)
        top = values.max()
        keep = values > self.rcond * top if top > 0 else np.zeros_like(values, dtype=bool)
        rank = int(keep.sum())
        # v / sqrt(lambda) = centred^T u / (s sqrt(lambda)) = centred^T u / (lambda sqrt(n - 1))
        out[:, :rank] = (centred.T @ u[:, keep]) / (values[keep] * np.sqrt(len(centred) - 1))
        return rank

    def _fit_factor(self, cov: np.ndarray, out: np.ndarray) -> int:
        """Write ``V_r / sqrt(lambda_r)`` (eigenpairs above ``rcond * lambda_max``) into ``out``; return r."""
        values, vectors = np.linalg.eigh(cov)
        top = values.max()
        keep = values > self.rcond * top if top > 0 else np.zeros_like(values, dtype=bool)
        rank = int(keep.sum())
        out[:, :rank] = vectors[:, keep] / np.sqrt(values[keep])
        return rank

    @property
    def classes(self) -> list[int]:
        """The predicted classes that have a mean and covariance (``[0]`` when built without classes)."""
        return [int(c) for c in self.classes_]

    def __call__(self, ats: object, pred: object | None = None) -> np.ndarray:
        """MDSA of each input: its Mahalanobis distance to its class's training mean."""
        x, p = scoring_inputs("MDSA", ats, pred, dims=self.n_features_in, classifier=self.classifier)
        out = np.full(len(x), np.nan)
        missing: list[int] = []
        singular: list[str] = []  # streamed: the classes made singular in this call
        for c in np.unique(p):
            rows = np.flatnonzero(p == c)
            slot = np.flatnonzero(self.classes_ == c)
            if slot.size == 0:
                missing.append(int(c))
                continue
            i = int(slot[0])
            z = by_fixed_rows(x[rows][:, self.kept] - self.means[i], self._factor(i, singular))
            out[rows] = np.sqrt(np.einsum("ij,ij->i", z, z))
        self._warn_singular(singular)
        if missing:
            warn(
                f"MDSA: no covariance for predicted class(es) {class_list(missing)} (absent or too rare in the training traces); those inputs score NaN"
            )
        return out

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The fitted means and inverse-covariance factors (what scoring needs; no training traces)."""
        if self.factors is None:
            raise ValueError(
                "MDSA: a streamed MDSA (its factors do not fit in memory) has no arrays to store; "
                "it makes each class's factor from the training traces when that class is scored"
            )
        return {
            "classes": self.classes_,
            "kept": self.kept,
            "means": self.means,
            "factors": self.factors,
            "ranks": self.ranks,
            "n_features_in": np.array(self.n_features_in),
            "classifier": np.array(self.classifier),
            "var_threshold": np.array(self.var_threshold),
            "var_rule": np.array(self.var_rule),
            "rcond": np.array(self.rcond),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> MDSA:
        """An MDSA rebuilt from :meth:`to_arrays`, without the training traces."""
        self = cls.__new__(cls)
        self.classes_ = np.asarray(arrays["classes"], dtype=np.int64)
        self.kept = np.asarray(arrays["kept"], dtype=np.int64)
        self.means = np.asarray(arrays["means"], dtype=np.float64)
        self.factors = np.asarray(arrays["factors"], dtype=np.float64)
        self.ranks = np.asarray(arrays["ranks"], dtype=np.int64)
        self.n_features_in = int(arrays["n_features_in"])
        self.classifier = bool(arrays["classifier"])
        self.var_threshold = float(arrays["var_threshold"])
        self.var_rule = str(arrays["var_rule"]) if "var_rule" in arrays else "paper"
        self.rcond = float(arrays["rcond"])
        self.streamed, self._source = False, None
        if not self._shapes_agree():
            raise ValueError("MDSA arrays have inconsistent shapes; rebuild the profile")
        return self

    def _shapes_agree(self) -> bool:
        """Whether the means, factors and ranks read by :meth:`from_arrays` fit its classes and kept neurons."""
        assert self.factors is not None
        k, d = len(self.classes_), self.kept.size
        shape = self.factors.shape
        if self.means.shape != (k, d) or self.ranks.shape != (k,):
            return False
        return len(shape) == 3 and shape[:2] == (k, d) and shape[2] <= d and not (k and self.ranks.max() > shape[2])
