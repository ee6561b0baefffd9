"""LSC — likelihood-based surprise coverage (Kim et al., ICSE 2019, section II-B/II-D).

The per-input score is LSA, ``-log f(x)`` of a Gaussian KDE of the training traces of the
input's predicted class (:class:`~pytest_sadl.criteria.surprise.LSA`); LSC is the fraction
of the ``buckets`` equal segments of ``[lower, upper]`` that some input's LSA falls into.
``--sadl-lsa-max-features=M`` keeps each class's ``M`` highest-variance neurons (dnn-tip's
``max_features``).
"""

from __future__ import annotations

from typing import Any

from pytest_sadl.criteria.metrics import surprise_make
from pytest_sadl.criteria.shape import SURPRISE_KIND, Colour, Criterion, Param, Scorer, Training


def max_features(options: Any) -> int:
    """The run's ``lsa_max_features`` (0, every neuron, outside a run)."""
    return 0 if options is None else int(options.param("lsa_max_features"))


def fit(training: Training) -> Scorer:
    """LSA on the training traces: the profile's (set up once per profile) when it measures
    every neuron, else a new one (the profile's stored LSA is of every neuron)."""
    m = max_features(training.options)
    if training.profile is not None and m == 0:
        lsa: Scorer = training.profile.lsa()
        return lsa
    from pytest_sadl.criteria.surprise import LSA

    return LSA(
        training.traces,
        training.pred,
        var_threshold=training.var_threshold,
        near_singular=training.near_singular,
        var_rule=training.var_rule,
        max_features=m,
    )


def params(options: Any) -> str:
    """The option the score depends on, for the names of its stored held-out values
    (empty by default: the names stored before the option existed)."""
    m = max_features(options)
    return f"f{m}" if m else ""


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
    params=params,
    parameters=(
        Param(
            "lsa_max_features",
            int,
            0,
            "LSA: each class's KDE over its M highest-variance neurons, as dnn-tip's max_features "
            "(default 0: every neuron the variance filter keeps)",
            metavar="M",
            at_least=0,
            at_least_why="LSA's max_features is a number of neurons >= 0 (0: all)",
            description="LSA's highest-variance neurons per class, 0 for all (when the run computed LSC)",
        ),
    ),
    projected=True,
    colour=Colour("#2f6fdb", "#6ea2ff"),
)
