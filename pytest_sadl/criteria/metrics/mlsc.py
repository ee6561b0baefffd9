"""MLSC — multimodal likelihood-based surprise coverage (Kim and Yoo, AST 2021).

The per-input score is MLSA, ``-log f_c(x)`` of a Gaussian mixture of ``components``
(``--sadl-mlsa-components``, default 2) fitted, seeded, to the training traces of the
input's predicted class (:class:`~pytest_sadl.criteria.mixture.MLSA`); MLSC is the fraction
of the ``buckets`` equal segments of ``[lower, upper]`` that some input's MLSA falls into,
as LSC. Opt-in: ``--sadl-metrics=mlsc``.
"""

from __future__ import annotations

from typing import Any

from pytest_sadl.criteria.metrics import surprise_make
from pytest_sadl.criteria.shape import SURPRISE_KIND, Colour, Criterion, Param


def fit(training: Any) -> Any:
    """MLSA on the training traces, with the run's ``mlsa_components``."""
    from pytest_sadl.criteria.mixture import COMPONENTS, MLSA

    components = getattr(training.options, "mlsa_components", COMPONENTS)
    return MLSA(training.traces, training.pred, components=components, var_threshold=training.var_threshold)


def params(options: Any) -> str:
    """The option the score depends on, for the names of its stored held-out values."""
    from pytest_sadl.criteria.mixture import COMPONENTS

    return f"k{getattr(options, 'mlsa_components', COMPONENTS)}"


CRITERION = Criterion(
    name="mlsc",
    label="MLSC",
    title="Multimodal likelihood-based surprise coverage",
    kind=SURPRISE_KIND,
    needs=("mlsa", "sc bounds"),
    make=surprise_make("mlsc", "mlsa"),
    sa="mlsa",
    sa_label="MLSA",
    default=False,
    fit=fit,
    projected=True,
    params=params,
    parameters=(
        Param(
            "mlsa_components",
            int,
            2,
            "MLSA: Gaussian mixture components per class (default 2)",
            at_least=1,
            at_least_why="MLSA needs at least 1 mixture component per class",
            description="MLSA's mixture components per class (when the run computed MLSC)",
        ),
    ),
    colour=Colour("#1e3a8a", "#bfdbfe", dashed=True),
)
