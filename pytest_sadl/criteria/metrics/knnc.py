"""KNNC — a surprise coverage over the deep nearest-neighbour OOD score (Sun et al., ICML 2022).

The per-input score is KNN: the SA layer's traces L2 normalised, the Euclidean distance
from the input's to its ``k``-th nearest normalised training trace (``k`` = 50, the
paper's CIFAR-10 value, or fewer training traces' worth: refused in one line;
:class:`~pytest_sadl.criteria.ood.KNN`). It lies in ``[0, 2]``; KNNC is the fraction of the
``buckets`` equal segments of ``[lower, upper]`` that some input's KNN falls into, as LSC.
Needs no classes. Opt-in: ``--sadl-metrics=knnc``.
"""

from __future__ import annotations

from typing import Any

from pytest_sadl.criteria.metrics import surprise_make
from pytest_sadl.criteria.shape import SURPRISE_KIND, Colour, Criterion, Param


def _k(options: Any) -> int:
    from pytest_sadl.criteria.ood import KNN_K

    return KNN_K if options is None else int(options.param("knn_k"))


def fit(training: Any) -> Any:
    """KNN on the training traces."""
    from pytest_sadl.criteria.ood import KNN

    return KNN(training.traces, k=_k(training.options))


def params(options: Any) -> str:
    """The ``k`` the score depends on, for the names of its stored held-out values."""
    return f"k{_k(options)}"


CRITERION = Criterion(
    name="knnc",
    label="KNNC",
    title="Nearest-neighbour (KNN) OOD-score coverage",
    kind=SURPRISE_KIND,
    needs=("knn", "sc bounds"),
    make=surprise_make("knnc", "knn"),
    sa="knn",
    sa_label="KNN",
    default=False,
    fit=fit,
    params=params,
    parameters=(
        Param(
            "knn_k",
            int,
            50,
            "KNN: the k-th nearest normalised training trace (default 50, Sun et al.)",
            at_least=1,
            at_least_why="KNN needs k >= 1",
            description="KNN's k (when the run computed KNNC)",
        ),
    ),
    colour=Colour("#0f766e", "#5eead4", dashed=True),
)
