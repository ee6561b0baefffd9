"""MAHAC — a surprise coverage over Lee et al.'s Mahalanobis OOD score (NeurIPS 2018).

The per-input score is MAHA: the class means of the SA layer's training traces (their
predicted classes) and one covariance pooled within the classes, the smallest squared
Mahalanobis distance to a class mean (:class:`~pytest_sadl.criteria.ood.TiedMahalanobis`;
MDSA, by contrast, takes the input's own class and that class's covariance). MAHAC is the
fraction of the ``buckets`` equal segments of ``[lower, upper]`` that some input's MAHA
falls into, as LSC. A regression model: one mean and covariance. Opt-in:
``--sadl-metrics=mahac``.
"""

from __future__ import annotations

from typing import Any

from pytest_sadl.criteria.metrics import surprise_make
from pytest_sadl.criteria.shape import SURPRISE_KIND, Colour, Criterion


def fit(training: Any) -> Any:
    """The class means and shared covariance of the training traces."""
    from pytest_sadl.criteria.ood import TiedMahalanobis

    return TiedMahalanobis(training.traces, training.pred)


CRITERION = Criterion(
    name="mahac",
    label="MAHAC",
    title="Class-conditional Mahalanobis OOD-score coverage (shared covariance)",
    kind=SURPRISE_KIND,
    needs=("maha", "sc bounds"),
    make=surprise_make("mahac", "maha"),
    sa="maha",
    sa_label="MAHA",
    default=False,
    fit=fit,
    colour=Colour("#9f1239", "#fda4af", dashed=True),
)
