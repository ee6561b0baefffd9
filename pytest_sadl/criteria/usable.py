"""Which per-input surprise measures can be set up on a layer's training traces.

``sadl profile layers --usable`` asks this of every candidate layer: it sets LSA, DSA and
MDSA up on the layer's traces with the run's own classes (the same constructors and
checks a run uses, so the answer is the run's), and reports for each measure either
``None`` (usable) or the one-line reason it cannot be set up. A run meets the same reason
as "not available"; this says in advance which layer to name in ``sadl_layers``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np


def _why(make: Any) -> str | None:
    """``None`` when ``make()`` sets the measure up, else its one-line reason."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a singular covariance is usable (pseudo-inverse)
            make()
    except (ValueError, MemoryError) as exc:
        return " ".join(str(exc).split())
    return None


def usable(
    traces: np.ndarray,
    pred: np.ndarray | None,
    *,
    var_threshold: float = 1e-5,
    var_rule: str = "class",
    near_singular: str = "drop",
) -> dict[str, str | None]:
    """For ``lsa``, ``dsa`` and ``mdsa``: ``None`` when it can be set up on ``traces``
    ``(n, d)`` with the predicted classes ``pred`` (``None``: a regression model, where
    DSA does not apply and is reported as such), else why not."""
    from pytest_sadl.criteria.mahalanobis import MDSA
    from pytest_sadl.criteria.surprise import DSA, LSA

    x = np.asarray(traces, dtype=np.float32)
    out: dict[str, str | None] = {
        "lsa": _why(lambda: LSA(x, pred, var_threshold=var_threshold, near_singular=near_singular, var_rule=var_rule)),
        "dsa": "DSA needs a classifier (this is a regression model)" if pred is None else _why(lambda: DSA(x, pred)),
        "mdsa": _why(lambda: MDSA(x, pred, var_threshold=var_threshold, var_rule=var_rule)),
    }
    return out
