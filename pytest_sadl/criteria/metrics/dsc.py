"""DSC — distance-based surprise coverage (Kim et al., ICSE 2019, section II-C/II-D).

The per-input score is DSA, ``dist_a / dist_b`` (``x_a`` the nearest training trace of the
input's class, ``dist_b`` from ``x_a`` to the nearest trace of another class:
:class:`~pytest_sadl.criteria.surprise.DSA`); defined for classifiers only.
"""

from pytest_sadl.criteria.metrics import surprise_make
from pytest_sadl.criteria.shape import SURPRISE_KIND, Colour, Criterion, Scorer, Training


def fit(training: Training) -> Scorer | None:
    """DSA on the training traces (the profile's, with the distances it kept); ``None``
    for a regression model, which has no classes."""
    if training.pred is None:
        return None
    if training.profile is not None:
        dsa: Scorer | None = training.profile.dsa()
        return dsa
    from pytest_sadl.criteria.surprise import DSA

    return DSA(training.traces, training.pred)


CRITERION = Criterion(
    name="dsc",
    label="DSC",
    title="Distance-based surprise coverage",
    kind=SURPRISE_KIND,
    needs=("dsa (a classifier)", "sc bounds"),
    make=surprise_make("dsc", "dsa"),
    sa="dsa",
    sa_label="DSA",
    fit=fit,
    colour=Colour("#c2410c", "#fb923c"),
)
