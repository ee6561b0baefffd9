"""Multimodal Likelihood-based Surprise Adequacy (MLSA): a Gaussian mixture per class.

Kim and Yoo, "Multimodal surprise adequacy analysis of inputs for natural language
processing DNN models", AST 2021; dnn-tip's ``MLSA`` (Weiss and Tonella, ISSTA 2022).
LSA estimates the density of a class's training traces by a KDE over every trace; MLSA
fits a Gaussian mixture of ``components`` full-covariance Gaussians instead:

    MLSA(x) = -log f_c(a(x)),   f_c(v) = sum_j w_cj N(v; mu_cj, Sigma_cj + r I)

where ``c`` is the input's predicted class (one mixture over all traces for a regression
model), ``w``, ``mu`` and ``Sigma`` the mixture fitted by EM on the training traces that
the model predicts as ``c``, and ``r = 1e-6`` the regularisation scikit-learn adds to
every covariance's diagonal (``reg_covar``). The value is
``-sklearn.mixture.GaussianMixture(...).score_samples(...)``.

Choices, each written down because the paper leaves them open:

* the mixture is scikit-learn's ``GaussianMixture`` with its defaults (full covariances,
  k-means initialisation, one initialisation, at most 100 EM iterations), as dnn-tip
  fits it, but seeded: ``random_state=seed`` (default 0) for every class, so that two
  runs on the same traces give the same scores (dnn-tip leaves it unseeded);
* the neurons are LSA's and MDSA's: those whose training variance is at least
  ``var_threshold`` in every class with two or more traces
  (:func:`~pytest_sadl.criteria.checks.low_variance_filter`), so the three measure the same
  neurons (dnn-tip fits on every neuron);
* a class with fewer traces than ``components`` gets a mixture of as many components as
  it has traces; a class with fewer than two traces has no mixture: its inputs, and inputs
  predicted as a class absent from training, score ``NaN`` with a warning;
* a mixture whose EM did not converge is kept (scikit-learn's behaviour) and named in one
  :class:`~pytest_sadl.errors.SadlWarning`.

scikit-learn is imported when an ``MLSA`` is built, never when this module is imported.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_sadl.criteria.checks import (
    as_pred,
    as_train_traces,
    check_var_threshold,
    class_list,
    classes_of,
    examples,
    low_variance_filter,
    scoring_inputs,
    usable_classes,
    warn,
)

__all__ = ["MLSA", "COMPONENTS"]

#: dnn-tip's default number of mixture components
COMPONENTS = 2


def check_count(name: str, value: object) -> int:
    """``value`` as a whole number >= 1, or a one-line error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    return int(value)


_CONTROLLER: list[Any] = []


@contextmanager
def one_thread() -> Iterator[None]:
    """Every thread pool (BLAS and OpenMP: scikit-learn's k-means and mixtures) on one thread
    for the block: the per-class fits are small, and waiting threads made them 17x slower
    on a busy 2-core machine. The controller (a scan of the loaded libraries) is made once."""
    from threadpoolctl import ThreadpoolController

    if not _CONTROLLER:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # threadpoolctl's notes about the libraries it finds
            _CONTROLLER.append(ThreadpoolController())
    with _CONTROLLER[0].limit(limits=1):
        yield


def class_variances(x: np.ndarray, members: list[np.ndarray], usable: list[int]) -> list[np.ndarray]:
    """Each usable class's per-neuron training variance (``ddof=0``), in float64."""
    return [np.var(np.asarray(x[members[i]], dtype=np.float64), axis=0) for i in usable]


@dataclass
class ClassSplit:
    """Training traces split by predicted class, as MLSA and MMDSA set up on them: the
    traces ``x``, each class's rows (``members``), the classes with two traces or more
    (``usable``, indices into ``members``) and the neurons the paper's variance rule keeps."""

    x: np.ndarray
    classifier: bool
    classes: np.ndarray
    members: list[np.ndarray]
    usable: list[int]
    kept: np.ndarray


def split_by_class(
    who: str, train_ats: object, train_pred: object | None, var_threshold: float, what: str
) -> ClassSplit:
    """Check the training traces and classes, and split them (``who`` names the measure in
    warnings and errors; ``what``: what a class with too few traces lacks)."""
    x = as_train_traces("train_ats", train_ats)
    classifier = train_pred is not None
    pred = as_pred("train_pred", train_pred, len(x)) if classifier else np.zeros(len(x), np.int64)
    classes, members = classes_of(pred)
    usable = usable_classes(who, classes, members, what)
    kept = low_variance_filter(who, class_variances(x, members, usable), var_threshold, "measure another layer")
    return ClassSplit(x, classifier, classes, members, usable, kept)


class MLSA:
    """Gaussian-mixture LSA.

    ``MLSA(train_ats, train_pred, components=2)`` fits one mixture per predicted class
    (``train_pred=None``: one over all traces, for a regression model); ``mlsa(ats, pred)``
    returns ``-log`` of each trace's density under its class's mixture, float64 ``(n,)``.
    """

    def __init__(
        self,
        train_ats: object,
        train_pred: object | None = None,
        *,
        components: int = COMPONENTS,
        var_threshold: float = 1e-5,
        seed: int = 0,
    ) -> None:
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.mixture import GaussianMixture

        self.components = check_count("components", components)
        self.var_threshold = check_var_threshold(var_threshold)
        self.seed = int(seed)
        split = split_by_class("MLSA", train_ats, train_pred, self.var_threshold, "it has no mixture")
        x, classes, members, usable = split.x, split.classes, split.members, split.usable
        self.n_features_in: int = x.shape[1]
        self.classifier = split.classifier
        self.kept: np.ndarray = split.kept
        self.mixtures: dict[int, Any] = {}
        unconverged = []
        with warnings.catch_warnings(), one_thread():
            warnings.simplefilter("ignore", ConvergenceWarning)
            for i in usable:
                rows = members[i]
                xc = np.asarray(x[rows], dtype=np.float64)[:, self.kept]
                gmm = GaussianMixture(n_components=min(self.components, len(rows)), random_state=self.seed)
                gmm.fit(xc)
                if not gmm.converged_:
                    unconverged.append(int(classes[i]))
                self.mixtures[int(classes[i])] = gmm
        if unconverged:
            warn(
                f"MLSA: the Gaussian mixture of class(es) {examples(unconverged)} did not converge in "
                f"{GaussianMixture().max_iter} EM iterations; its scores are those of the last iteration"
            )

    @property
    def classes(self) -> list[int]:
        """The predicted classes that have a mixture (``[0]`` when built without classes)."""
        return sorted(self.mixtures)

    def __call__(self, ats: object, pred: object | None = None) -> np.ndarray:
        """MLSA of each input: ``-log`` of its density under its class's mixture."""
        x, p = scoring_inputs("MLSA", ats, pred, dims=self.n_features_in, classifier=self.classifier)
        out = np.full(len(x), np.nan)
        missing = []
        with one_thread():
            for c in np.unique(p):
                rows = np.flatnonzero(p == c)
                gmm = self.mixtures.get(int(c))
                if gmm is None:
                    missing.append(int(c))
                    continue
                out[rows] = -gmm.score_samples(x[rows][:, self.kept])
        if missing:
            warn(
                f"MLSA: no mixture for predicted class(es) {class_list(missing)} "
                "(absent or too rare in the training traces); those inputs score NaN"
            )
        return out
