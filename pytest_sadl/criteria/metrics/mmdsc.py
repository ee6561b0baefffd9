"""MMDSC — multimodal Mahalanobis-distance surprise coverage (Kim and Yoo, AST 2021).

The per-input score is MMDSA, the Mahalanobis distance of the input's trace to the
nearest of ``modes`` (``--sadl-mmdsa-modes``, default 2) k-means modes of its predicted
class's training traces, under that mode's covariance
(:class:`~pytest_sadl.criteria.modes.MMDSA`); MMDSC buckets it as MDSC. Opt-in:
``--sadl-metrics=mmdsc``.
"""

from __future__ import annotations

from typing import Any

from pytest_sadl.criteria.metrics import surprise_make
from pytest_sadl.criteria.shape import SURPRISE_KIND, Colour, Criterion, Param


def fit(training: Any) -> Any:
    """MMDSA on the training traces, with the run's ``mmdsa_modes``."""
    from pytest_sadl.criteria.modes import MMDSA, MODES

    modes = getattr(training.options, "mmdsa_modes", MODES)
    return MMDSA(
        training.traces,
        training.pred,
        modes=modes,
        var_threshold=training.var_threshold,
        silhouette=_silhouette(training.options),
    )


def _silhouette(options: Any) -> int:
    return 0 if options is None else int(options.param("mmdsa_silhouette"))


def params(options: Any) -> str:
    """The options the score depends on, for the names of its stored held-out values."""
    from pytest_sadl.criteria.modes import MODES

    most = _silhouette(options)
    return f"m{getattr(options, 'mmdsa_modes', MODES)}" + (f"-s{most}" if most else "")


CRITERION = Criterion(
    name="mmdsc",
    label="MMDSC",
    title="Multimodal Mahalanobis-distance surprise coverage",
    kind=SURPRISE_KIND,
    needs=("mmdsa", "sc bounds"),
    make=surprise_make("mmdsc", "mmdsa"),
    sa="mmdsa",
    sa_label="MMDSA",
    default=False,
    fit=fit,
    projected=True,
    params=params,
    parameters=(
        Param(
            "mmdsa_modes",
            int,
            2,
            "MMDSA: k-means modes per class (default 2)",
            at_least=1,
            at_least_why="MMDSA needs at least 1 k-means mode per class",
            description="MMDSA's k-means modes per class (when the run computed MMDSC)",
        ),
        Param(
            "mmdsa_silhouette",
            int,
            0,
            "MMDSA: each class's modes chosen among 2..K by the silhouette score, as dnn-tip's "
            "potential_k (default 0: --sadl-mmdsa-modes modes)",
            at_least=0,
            at_least_why="MMDSA's silhouette is 0 (off) or the largest number of modes to try, 2 or more",
            refused=(1,),
            description="the most modes MMDSA's silhouette choice tried per class, 0 when off (when the run computed MMDSC)",
        ),
    ),
    colour=Colour("#78350f", "#fde68a", dashed=True),
)
