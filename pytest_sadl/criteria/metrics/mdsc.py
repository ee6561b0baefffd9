"""MDSC — Mahalanobis-distance surprise coverage (Kim et al., 2020 extension).

The per-input score is MDSA, the Mahalanobis distance of the input's trace from its
class's training mean under that class's covariance
(:class:`~pytest_sadl.criteria.mahalanobis.MDSA`).
"""

from pytest_sadl.criteria.shape import SURPRISE_KIND, Criterion, surprise_make

CRITERION = Criterion(
    name="mdsc",
    label="MDSC",
    title="Mahalanobis-distance surprise coverage",
    kind=SURPRISE_KIND,
    needs=("mdsa", "sc bounds"),
    make=surprise_make("mdsc", "mdsa"),
    sa="mdsa",
    sa_label="MDSA",
)
