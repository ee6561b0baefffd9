"""The engine: from a training profile and the recorded traces to :class:`~pytest_sadl.results.Results`.

Pure NumPy on top of the criteria; no TensorFlow and no pytest. One module per job:
:mod:`~pytest_sadl.engine.view` (:class:`ProfileView`: the per-input scores, each set up by
its criterion's ``fit``), :mod:`~pytest_sadl.engine.bounds` (held-out training scores and
the SC bounds' rule), :mod:`~pytest_sadl.engine.joined` (the recorded inputs joined in
their defined order), :mod:`~pytest_sadl.engine.rows` (one function per part of the
results, each returning typed rows) and :mod:`~pytest_sadl.engine.run` (:func:`compute`,
the order of tests and groups, the thresholds). This package names the public API
(``from pytest_sadl.engine import compute, ProfileView``).
"""

from pytest_sadl.engine.bounds import (
    BOUNDS_QUANTILE,
    BOUNDS_RULE,
    BOUNDS_RULE_VERSION,
    HELD_OUT,
    HELD_OUT_COPY_MAX,
    OUTLIER_MIN_SCORES,
    OUTLIER_QUANTILE,
    OUTLIER_SPREAD,
    ScBounds,
    default_bounds,
    default_sc_bounds,
    held_out_keys,
    held_out_sa,
    held_out_sample,
    held_out_scores,
    outlier_bound_note,
    stored_held_out_sa,
)
from pytest_sadl.engine.joined import Joined
from pytest_sadl.engine.rows import TOP_INPUTS
from pytest_sadl.engine.run import check_thresholds, compute, ordered
from pytest_sadl.engine.view import ProfileView, score_keys

__all__ = [
    "BOUNDS_QUANTILE",
    "BOUNDS_RULE",
    "BOUNDS_RULE_VERSION",
    "HELD_OUT",
    "HELD_OUT_COPY_MAX",
    "OUTLIER_MIN_SCORES",
    "OUTLIER_QUANTILE",
    "OUTLIER_SPREAD",
    "TOP_INPUTS",
    "Joined",
    "ProfileView",
    "ScBounds",
    "check_thresholds",
    "compute",
    "default_bounds",
    "default_sc_bounds",
    "held_out_keys",
    "held_out_sa",
    "held_out_sample",
    "held_out_scores",
    "ordered",
    "outlier_bound_note",
    "score_keys",
    "stored_held_out_sa",
]
