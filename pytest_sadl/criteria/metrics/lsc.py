"""LSC — likelihood-based surprise coverage (Kim et al., ICSE 2019, section II-B/II-D).

The per-input score is LSA, ``-log f(x)`` of a Gaussian KDE of the training traces of the
input's predicted class (:class:`~pytest_sadl.criteria.surprise.LSA`); LSC is the fraction
of the ``buckets`` equal segments of ``[lower, upper]`` that some input's LSA falls into.
"""

from pytest_sadl.criteria.metrics import surprise_make
from pytest_sadl.criteria.shape import SURPRISE_KIND, Colour, Criterion, Scorer, Training


def fit(training: Training) -> Scorer:
    """LSA on the training traces: the profile's (set up once per profile), else a new one."""
    if training.profile is not None:
        lsa: Scorer = training.profile.lsa()
        return lsa
    from pytest_sadl.criteria.surprise import LSA

    return LSA(
        training.traces,
        training.pred,
        var_threshold=training.var_threshold,
        near_singular=training.near_singular,
        var_rule=training.var_rule,
    )


CRITERION = Criterion(
    name="lsc",
    label="LSC",
    title="Likelihood-based surprise coverage",
    kind=SURPRISE_KIND,
    needs=("lsa", "sc bounds"),
    make=surprise_make("lsc", "lsa"),
    sa="lsa",
    sa_label="LSA",
    fit=fit,
    projected=True,
    colour=Colour("#2f6fdb", "#6ea2ff"),
)
