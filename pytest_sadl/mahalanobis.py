"""Mahalanobis-distance-based Surprise Adequacy (MDSA) on NumPy arrays.

Kim, Ju, Feldt and Yoo, "Reducing DNN labelling cost by surprise adequacy: an industrial
case study for autonomous driving", ESEC/FSE 2020:

    MDSA(x) = sqrt((a(x) - mu_c)^T  Sigma_c^-1  (a(x) - mu_c))

where ``a(x)`` is the input's activation trace, ``c`` its predicted class, and ``mu_c``
and ``Sigma_c`` the mean and covariance of the training traces the model predicts as
``c`` (one class over all traces for a regression model). It needs one mean and one
covariance per class instead of every training trace, so it is cheap to build and to
score, and it is the "third" surprise measure beside LSA and DSA; its surprise coverage
(MDSC) uses the buckets of :class:`pytest_sadl.surprise.SurpriseCoverage`.

Choices, each written down because the paper leaves them open:

* the covariance is the unbiased sample covariance (``np.cov``, ``ddof=1``), the one
  ``scipy.stats.gaussian_kde`` uses for LSA;
* neurons whose training variance is below ``var_threshold`` in any class are dropped,
  the same filter as LSA, so that both measure the same neurons;
* **a singular covariance** (a class whose traces lie in a subspace: fewer traces than
  neurons, or neurons that are linear combinations of others, as softmax outputs that sum
  to one) is inverted by the Moore-Penrose pseudo-inverse: eigenvalues at most
  ``rcond`` times the largest are treated as zero, so the distance is measured inside the
  subspace the class's training traces span and a direction in which the class never
  varied adds nothing. A :class:`~pytest_sadl.surprise.SadlWarning` names the class and its
  rank. This equals ``scipy.spatial.distance.mahalanobis(x, mu, np.linalg.pinv(cov))``;
* a class with fewer than two training traces has no covariance: its inputs, and inputs
  predicted as a class absent from training, score ``NaN`` with a warning.

Neither TensorFlow nor pytest is imported here.
"""

from __future__ import annotations

import math

import numpy as np

from ._checks import as_pred, as_traces, warn

__all__ = ["MDSA"]

RCOND = 1e-10


class MDSA:
    """Mahalanobis-distance-based Surprise Adequacy.

    ``MDSA(train_ats, train_pred)`` fits one mean and one (pseudo-)inverse covariance per
    predicted class (``train_pred=None``: one over all traces, for a regression model);
    ``mdsa(ats, pred)`` returns the distance of each trace to its class's mean, float64 ``(n,)``.
    """

    def __init__(
        self,
        train_ats: object,
        train_pred: object | None = None,
        *,
        var_threshold: float = 1e-5,
        rcond: float = RCOND,
    ) -> None:
        if not (isinstance(var_threshold, (int, float)) and var_threshold >= 0 and math.isfinite(var_threshold)):
            raise ValueError(f"var_threshold must be a finite number >= 0, got {var_threshold!r}")
        if not (isinstance(rcond, (int, float)) and 0 <= rcond < 1):
            raise ValueError(f"rcond must be a number in [0, 1), got {rcond!r}")
        x = as_traces("train_ats", train_ats)
        self.n_features_in: int = x.shape[1]
        self.var_threshold = float(var_threshold)
        self.rcond = float(rcond)
        self.classifier = train_pred is not None
        pred = as_pred("train_pred", train_pred, len(x)) if self.classifier else np.zeros(len(x), np.int64)
        labels = np.unique(pred)
        members = {int(c): np.flatnonzero(pred == c) for c in labels}
        usable = [c for c, m in members.items() if len(m) >= 2]
        for c, m in members.items():
            if len(m) < 2:
                warn(f"MDSA: class {c} has {len(m)} training trace; it has no covariance and its inputs score NaN")
        if not usable:
            raise ValueError("MDSA needs at least one class with two or more training traces")
        low_var = np.zeros(x.shape[1], dtype=bool)
        for c in usable:
            low_var |= x[members[c]].var(axis=0) < self.var_threshold
        kept = np.flatnonzero(~low_var)
        if kept.size == 0:
            raise ValueError(
                f"MDSA: every one of the {x.shape[1]} neurons has a training variance below "
                f"var_threshold={self.var_threshold:g} in some class; lower var_threshold or measure another layer"
            )
        self.kept: np.ndarray = kept
        d = kept.size
        self.classes_: np.ndarray = np.array(usable, dtype=np.int64)
        self.means: np.ndarray = np.empty((len(usable), d))
        # factor[c] (d, d): (x - mean) @ factor has squared norm (x - mean)^T pinv(cov) (x - mean);
        # the columns past the class's rank are zero.
        self.factors: np.ndarray = np.zeros((len(usable), d, d))
        self.ranks: np.ndarray = np.zeros(len(usable), dtype=np.int64)
        singular = []
        for i, c in enumerate(usable):
            xc = x[members[c]][:, kept]
            self.means[i] = xc.mean(axis=0)
            rank = self._fit_factor(np.atleast_2d(np.cov(xc, rowvar=False)), self.factors[i])
            self.ranks[i] = rank
            if rank < d:
                singular.append(f"{c} (rank {rank}, {len(xc)} traces)")
        if singular:
            warn(
                f"MDSA: the training covariance of class(es) {', '.join(singular)} over {d} neurons is singular; "
                "using its pseudo-inverse: distances are measured within the subspace those traces span "
                "(more training data or a narrower layer avoids this)"
            )

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
        x = as_traces("ats", ats, dims=self.n_features_in, allow_empty=True)
        if self.classifier:
            if pred is None:
                raise ValueError("this MDSA was built per class: pass the predicted classes, mdsa(ats, pred)")
            p = as_pred("pred", pred, len(x))
        else:
            if pred is not None:
                raise ValueError("this MDSA was built without classes (train_pred=None): call mdsa(ats) without pred")
            p = np.zeros(len(x), np.int64)
        out = np.full(len(x), np.nan)
        missing = []
        for c in np.unique(p):
            rows = np.flatnonzero(p == c)
            slot = np.flatnonzero(self.classes_ == c)
            if slot.size == 0:
                missing.append(int(c))
                continue
            i = int(slot[0])
            z = (x[rows][:, self.kept] - self.means[i]) @ self.factors[i, :, : self.ranks[i]]
            out[rows] = np.sqrt(np.einsum("ij,ij->i", z, z))
        if missing:
            warn(f"MDSA: no covariance for predicted class(es) {missing} (absent or too rare in the training traces); those inputs score NaN")
        return out

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The fitted means and inverse-covariance factors (what scoring needs; no training traces)."""
        return {
            "classes": self.classes_,
            "kept": self.kept,
            "means": self.means,
            "factors": self.factors,
            "ranks": self.ranks,
            "n_features_in": np.array(self.n_features_in),
            "classifier": np.array(self.classifier),
            "var_threshold": np.array(self.var_threshold),
            "rcond": np.array(self.rcond),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "MDSA":
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
        self.rcond = float(arrays["rcond"])
        k, d = len(self.classes_), self.kept.size
        if self.means.shape != (k, d) or self.factors.shape != (k, d, d) or self.ranks.shape != (k,):
            raise ValueError("MDSA arrays have inconsistent shapes; rebuild the profile")
        return self
