"""DSC — distance-based surprise coverage (Kim et al., ICSE 2019, section II-C/II-D).

The per-input score is DSA, ``dist_a / dist_b`` (``x_a`` the nearest training trace of the
input's class, ``dist_b`` from ``x_a`` to the nearest trace of another class:
:class:`~pytest_sadl.criteria.surprise.DSA`); defined for classifiers only.
"""

from pytest_sadl.criteria.metrics import surprise_make
from pytest_sadl.criteria.shape import SURPRISE_KIND, Colour, Criterion, Scorer, Training


def fit(training: Training) -> Scorer | None:
    """DSA on the training traces (the profile's, with the distances it kept); ``None``
    for a regression model, which has no classes. Traces that do not vary (LSA's check at
    its default threshold: every neuron's variance below :data:`VARIES` in every class)
    raise ``ValueError``: their distances are rounding noise, and DSC is not available."""
    if training.pred is None:
        return None
    _check_varies(training)
    if training.profile is not None:
        dsa: Scorer | None = training.profile.dsa()
        return dsa
    from pytest_sadl.criteria.surprise import DSA

    return DSA(training.traces, training.pred)


#: LSA's default ``var_threshold``: DSA's own test of a layer that does not vary. Not the run's
#: ``var_threshold``, which is LSA's parameter (a user raising it for LSA keeps DSA).
VARIES = 1e-5


def _check_varies(training: Training) -> None:
    """LSA's check of a layer whose outputs do not vary with the input: no neuron with a
    training variance of at least :data:`VARIES` in any class (of two or more traces)."""
    import numpy as np

    from pytest_sadl.criteria.checks import class_moments, classes_of

    _, members = classes_of(np.asarray(training.pred))
    variances = [class_moments(training.traces, rows, 16 << 20, scatter=False)[2] for rows in members if len(rows) > 1]
    if variances and not any(bool((v >= VARIES).any()) for v in variances):
        raise ValueError(
            f"DSA: every one of the {len(variances[0])} neurons has a training variance below "
            f"{VARIES:g} in every class (the layer's outputs do not vary with the "
            "input: DSA would measure rounding noise); choose another layer"
        )


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
