"""DSC — distance-based surprise coverage (Kim et al., ICSE 2019, section II-C/II-D).

The per-input score is DSA, ``dist_a / dist_b`` (``x_a`` the nearest training trace of the
input's class, ``dist_b`` from ``x_a`` to the nearest trace of another class:
:class:`~pytest_sadl.criteria.surprise.DSA`); defined for classifiers only.
"""

from __future__ import annotations

from typing import Any

from pytest_sadl.criteria.metrics import surprise_make
from pytest_sadl.criteria.shape import SURPRISE_KIND, Colour, Criterion, Param, Scorer, Training


def subsample(options: Any) -> tuple[int, int]:
    """The run's ``(dsa_subsample, dsa_seed)`` (``(0, 0)``, every trace, outside a run)."""
    if options is None:
        return 0, 0
    return int(options.param("dsa_subsample")), int(options.param("dsa_seed"))


def subsample_rows(n: int, size: int, seed: int) -> slice | Any:
    """The training rows DSA is set up on: ``size`` of the ``n`` drawn as dnn-tip's
    ``_subsample_arrays`` draws them (``np.random.RandomState(seed).choice(np.arange(n),
    size, replace=False)``), in ascending order (the profile's); every row (a slice) when
    ``size`` is 0 or at least ``n``."""
    import numpy as np

    if size == 0 or size >= n:
        return slice(None)
    return np.sort(np.random.RandomState(seed).choice(np.arange(n), size, replace=False))


def fit(training: Training) -> Scorer | None:
    """DSA on the training traces (the profile's, with the distances it kept; on a seeded
    subsample of them with ``--sadl-dsa-subsample``); ``None`` for a regression model,
    which has no classes. Traces that do not vary (LSA's check at its default threshold:
    every neuron's variance below :data:`VARIES` in every class) raise ``ValueError``:
    their distances are rounding noise, and DSC is not available."""
    if training.pred is None:
        return None
    _check_varies(training)
    size, seed = subsample(training.options)
    rows = subsample_rows(len(training.traces), size, seed)
    if training.profile is not None and isinstance(rows, slice):
        dsa: Scorer | None = training.profile.dsa()
        return dsa
    from pytest_sadl.criteria.surprise import DSA

    if isinstance(rows, slice):
        return DSA(training.traces, training.pred)
    return DSA(training.traces[rows], training.pred[rows])


def params(options: Any) -> str:
    """The options the score depends on, for the names of its stored held-out values
    (empty by default: the names stored before the options existed)."""
    size, seed = subsample(options)
    return f"s{size}-{seed}" if size else ""


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
    params=params,
    parameters=(
        Param(
            "dsa_subsample",
            int,
            0,
            "DSA: set up on N training traces drawn as dnn-tip's subsampling draws them "
            "(default 0: every training trace)",
            metavar="N",
            at_least=0,
            at_least_why="DSA's subsample is a number of training traces >= 0 (0: all)",
            description="DSA's subsample of training traces, 0 for all (when the run computed DSC)",
        ),
        Param(
            "dsa_seed",
            int,
            0,
            "DSA: the seed of --sadl-dsa-subsample's draw, as dnn-tip's subsampling_seed (default 0)",
            metavar="SEED",
            at_least=0,
            at_least_why="DSA's subsample seed is a whole number >= 0 (NumPy's RandomState seed)",
            below=2**32,
            below_why="NumPy's RandomState takes seeds below 2**32",
            description="the seed of DSA's subsample (when the run computed DSC)",
        ),
    ),
    colour=Colour("#c2410c", "#fb923c"),
)
