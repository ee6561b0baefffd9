"""Multimodal Mahalanobis-distance Surprise Adequacy (MMDSA): k-means modes per class.

Kim and Yoo, "Multimodal surprise adequacy analysis of inputs for natural language
processing DNN models", AST 2021; dnn-tip's ``MultiModalSA.build_with_kmeans`` over
``MDSA`` (Weiss and Tonella, ISSTA 2022). MDSA measures an input against one mean and
covariance of its class; a class whose traces form several clusters is better described
by one mean and covariance per cluster (mode):

    MMDSA(x) = sqrt((a(x) - mu_cm)^T  Sigma_cm^+  (a(x) - mu_cm))

where ``c`` is the input's predicted class (one class over all traces for a regression
model), the modes of ``c`` are the ``modes`` clusters k-means finds in the training traces
the model predicts as ``c``, ``m`` is the mode whose centroid is nearest to ``a(x)`` in
Euclidean distance (k-means' own assignment, as dnn-tip's discriminator), and ``mu_cm`` and
``Sigma_cm`` the mean and sample covariance of the training traces k-means assigns to that
mode; ``+`` is the pseudo-inverse of :class:`~pytest_sadl.criteria.mahalanobis.MDSA`.

Choices, each written down because the paper leaves them open:

* k-means is scikit-learn's ``KMeans(n_clusters=modes, n_init=10, max_iter=300)`` as
  dnn-tip calls it, seeded (``random_state=seed``, default 0, for every class) so that runs
  repeat; the number of modes is fixed (dnn-tip can pick it per set by the silhouette
  score; a fixed number keeps the set-up one fit per class);
* the distance, not its square, under the unbiased sample covariance (``ddof=1``), as
  MDSA's; dnn-tip's ``MDSA`` is scikit-learn's ``EmpiricalCovariance.mahalanobis``, the
  *squared* distance under the maximum-likelihood covariance (``ddof=0``): its values are
  ours squared times ``n_m / (n_m - 1)``, ``n_m`` the mode's traces (the same order);
* the neurons are LSA's and MDSA's (the variance filter over the classes, before k-means);
* a class with fewer traces than ``modes`` has as many modes as traces; a mode with fewer
  than two traces has no covariance: inputs assigned to it, inputs of a class with fewer
  than two traces and of a class absent from training score ``NaN``, with one warning.

scikit-learn is imported when an ``MMDSA`` is built, never when this module is imported.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from pytest_sadl.criteria.checks import (
    check_var_threshold,
    class_list,
    scoring_inputs,
    warn,
)
from pytest_sadl.criteria.mahalanobis import MDSA
from pytest_sadl.criteria.mixture import check_count, one_thread, split_by_class

__all__ = ["MMDSA", "MODES"]

#: the default number of k-means modes per class
MODES = 2


def check_silhouette(value: object) -> int:
    """MMDSA's ``silhouette`` as 0 (off) or a whole number >= 2, or a one-line error."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0 or value == 1:
        raise ValueError(
            f"silhouette must be 0 (off: a fixed number of modes) or the largest number of modes to "
            f"try, >= 2 (the silhouette score needs two clusters at least), got {value!r}"
        )
    return int(value)


def kmeans(xc: np.ndarray, k: int, seed: int) -> Any:
    """scikit-learn's k-means as dnn-tip calls it (``n_init=10, max_iter=300``), seeded, fitted."""
    from sklearn.cluster import KMeans

    return KMeans(n_clusters=k, n_init=10, max_iter=300, random_state=seed).fit(xc)


def best_by_silhouette(xc: np.ndarray, most: int, seed: int) -> Any:
    """dnn-tip's ``_KmeansDiscriminator`` on one class: k-means with each ``k`` of
    ``2..most`` and the one whose labels have the highest mean silhouette coefficient
    (``sklearn.metrics.silhouette_score``, Euclidean; the first, smallest ``k``, on a
    tie). A ``k`` is tried only while the silhouette is defined: ``k < n`` traces and
    k-means finding at least two distinct clusters. With none (fewer than three traces,
    or all alike), the class has one mode."""
    from sklearn.metrics import silhouette_score

    best, best_score = None, -np.inf
    for k in range(2, min(most, len(xc) - 1) + 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "fewer distinct clusters than n_clusters": judged below
            km = kmeans(xc, k, seed)
        found = np.unique(km.labels_).size
        if found < 2 or found >= len(xc):
            continue
        score = float(silhouette_score(xc, km.labels_))
        if score > best_score:
            best, best_score = km, score
    return best if best is not None else kmeans(xc, 1, seed)


class MMDSA:
    """Multimodal MDSA.

    ``MMDSA(train_ats, train_pred, modes=2)`` clusters each predicted class's training
    traces into ``modes`` k-means modes and fits a mean and (pseudo-)inverse covariance per
    mode; ``mmdsa(ats, pred)`` returns each trace's Mahalanobis distance to the mode of its
    class whose centroid is nearest, float64 ``(n,)``.
    """

    def __init__(
        self,
        train_ats: object,
        train_pred: object | None = None,
        *,
        modes: int = MODES,
        var_threshold: float = 1e-5,
        seed: int = 0,
        silhouette: int = 0,
    ) -> None:
        self.modes = check_count("modes", modes)
        self.silhouette = check_silhouette(silhouette)
        self.var_threshold = check_var_threshold(var_threshold)
        self.seed = int(seed)
        split = split_by_class("MMDSA", train_ats, train_pred, self.var_threshold, "it has no modes")
        x, classes, members, usable = split.x, split.classes, split.members, split.usable
        self.n_features_in: int = x.shape[1]
        self.classifier = split.classifier
        self.kept: np.ndarray = split.kept
        #: each class's k-means and the global id of its first mode (modes are numbered
        #: class by class: mode j of a class is ``offset + j``)
        self.kmeans: dict[int, tuple[Any, int]] = {}
        parts, ids = [], []
        offset = 0
        with one_thread():
            for i in usable:
                xc = np.asarray(x[members[i]], dtype=np.float64)[:, self.kept]
                km = self._kmeans(xc)
                ids.append(offset + km.predict(xc))
                self.kmeans[int(classes[i])] = (km, offset)
                parts.append(xc)
                offset += km.n_clusters
        self.mode_sizes: np.ndarray = np.bincount(np.concatenate(ids), minlength=offset)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # one MDSA over the modes as its classes, on the neurons already filtered
            self.mdsa = MDSA(np.concatenate(parts), np.concatenate(ids), var_threshold=0.0)
        self._pass_on(caught)

    def _kmeans(self, xc: np.ndarray) -> Any:
        """One class's fitted k-means: ``modes`` modes (at most its traces), or with
        ``silhouette`` the best of 2..``silhouette`` by the silhouette score."""
        if self.silhouette:
            return best_by_silhouette(xc, self.silhouette, self.seed)
        return kmeans(xc, min(self.modes, len(xc)), self.seed)

    def _pass_on(self, caught: list[warnings.WarningMessage]) -> None:
        """MDSA's warnings about its "classes" (here: modes) in MMDSA's words."""
        lone = int((self.mode_sizes < 2).sum())
        if lone:
            warn(
                f"MMDSA: {lone} k-means mode(s) hold one training trace (no covariance); "
                "inputs nearest to them score NaN (fewer modes avoid this)"
            )
        if any("singular" in str(w.message) for w in caught):
            warn(
                "MMDSA: the training covariance of some mode(s) is singular; using its pseudo-inverse, as MDSA does "
                "(more training data, fewer modes or a narrower layer avoids this)"
            )

    @property
    def classes(self) -> list[int]:
        """The predicted classes that have modes (``[0]`` when built without classes)."""
        return sorted(self.kmeans)

    def mode_of(self, ats: np.ndarray, pred: np.ndarray) -> np.ndarray:
        """Each input's global mode id (its class's nearest centroid), ``-1`` without one."""
        out = np.full(len(ats), -1, dtype=np.int64)
        with one_thread():
            for c in np.unique(pred):
                fitted = self.kmeans.get(int(c))
                if fitted is not None:
                    rows = np.flatnonzero(pred == c)
                    km, offset = fitted
                    out[rows] = offset + km.predict(ats[rows][:, self.kept])
        return out

    def __call__(self, ats: object, pred: object | None = None) -> np.ndarray:
        """MMDSA of each input: its Mahalanobis distance to its class's nearest mode."""
        x, p = scoring_inputs("MMDSA", ats, pred, dims=self.n_features_in, classifier=self.classifier)
        mode = self.mode_of(x, p)
        out = np.full(len(x), np.nan)
        known = mode >= 0
        if known.any():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # lone modes: said once when built
                out[known] = self.mdsa(x[known][:, self.kept], mode[known])
        missing = sorted({int(c) for c in p[~known]})
        if missing:
            warn(
                f"MMDSA: no modes for predicted class(es) {class_list(missing)} "
                "(absent or too rare in the training traces); those inputs score NaN"
            )
        return out
