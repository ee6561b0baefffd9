"""MDSC — Mahalanobis-distance surprise coverage (Kim et al., 2020 extension).

The per-input score is MDSA, the Mahalanobis distance of the input's trace from its
class's training mean under that class's covariance
(:class:`~pytest_sadl.criteria.mahalanobis.MDSA`).
"""

from pytest_sadl.criteria.metrics import surprise_make
from pytest_sadl.criteria.shape import SURPRISE_KIND, Colour, Criterion, Scorer, Training


def fit(training: Training) -> Scorer:
    """MDSA on the training traces (the profile's, fitted once per profile)."""
    if training.profile is not None:
        mdsa: Scorer = training.profile.mdsa()
        return mdsa
    from pytest_sadl.criteria.mahalanobis import MDSA

    return MDSA(training.traces, training.pred, var_threshold=training.var_threshold, var_rule=training.var_rule)


CRITERION = Criterion(
    name="mdsc",
    label="MDSC",
    title="Mahalanobis-distance surprise coverage",
    kind=SURPRISE_KIND,
    needs=("mdsa", "sc bounds"),
    make=surprise_make("mdsc", "mdsa"),
    sa="mdsa",
    sa_label="MDSA",
    fit=fit,
    projected=True,
    colour=Colour("#a16207", "#facc15"),
)
