"""The criteria of a run, in report order, and the names derived from them.

Every list of metrics in the package comes from here: the engine, the reports (terminal,
JSON, HTML, Markdown, badges), ``--sadl-fail-under``, comparisons and ``sadl select``.
Adding a criterion is one module in :mod:`pytest_sadl.criteria.metrics` and one entry
in :data:`CRITERIA`. Importing this module imports no NumPy-heavy code.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest_sadl.criteria.metrics.energyc as energyc  # the OOD scores (issue 36): energy, MaxLogit, MSP,
import pytest_sadl.criteria.metrics.knnc as knnc  # KNN (Sun et al.) and Mahalanobis (Lee et al.)
import pytest_sadl.criteria.metrics.mahac as mahac
import pytest_sadl.criteria.metrics.maxlogitc as maxlogitc
import pytest_sadl.criteria.metrics.mspc as mspc
from pytest_sadl.criteria.metrics import cc, dsc, kmnc, lsc, mdsc, mlsc, mmdsc, nbc, nc, nlc, snac, tknc, tknp
from pytest_sadl.criteria.shape import COUNT_KIND, NEURON_KIND, SURPRISE_KIND, Criterion

CRITERIA: tuple[Criterion, ...] = tuple(
    m.CRITERION for m in (lsc, dsc, mdsc, mlsc, mmdsc, nc, kmnc, nbc, snac, tknc, tknp, nlc, cc)
) + tuple(m.CRITERION for m in (knnc, mahac, energyc, maxlogitc, mspc))  # the OOD scores (issue 36)
BY_NAME: dict[str, Criterion] = {c.name: c for c in CRITERIA}

#: metric names in report order
METRICS: tuple[str, ...] = tuple(c.name for c in CRITERIA)
LABELS: dict[str, str] = {c.name: c.label for c in CRITERIA}
TITLES: dict[str, str] = {c.name: c.title for c in CRITERIA}
KINDS: dict[str, str] = {c.name: c.kind for c in CRITERIA}
#: each surprise coverage and the per-input score it buckets (results' "inputs" keys)
SURPRISE: dict[str, str] = {c.name: c.sa for c in CRITERIA if c.kind == SURPRISE_KIND and c.sa}
SA_LABELS: dict[str, str] = {c.sa: c.sa_label or c.sa.upper() for c in CRITERIA if c.sa}
#: the metrics reported when none are named, in report order
DEFAULT_METRICS: tuple[str, ...] = tuple(c.name for c in CRITERIA if c.default)
#: the neuron coverages, in report order
NEURON: tuple[str, ...] = tuple(c.name for c in CRITERIA if c.kind == NEURON_KIND)
#: the criteria whose value is a number, not a fraction (TKNP, NLC, CC), in report order
COUNT: tuple[str, ...] = tuple(c.name for c in CRITERIA if c.kind == COUNT_KIND)
#: each per-input surprise score and the criterion whose ``fit`` sets it up (the first in
#: report order that has one: criteria that bucket the same score share its set-up)
SCORES: dict[str, Criterion] = {}
for _c in CRITERIA:
    if _c.sa and _c.fit is not None:
        SCORES.setdefault(_c.sa, _c)


def choose(spec: str | Sequence[str] | None) -> tuple[str, ...]:
    """The metrics a run computes, in report order, from ``--sadl-metrics`` (a comma list,
    or a list of names; ``all``: every registered criterion; empty or ``None``: the
    default ones). Raises ``ValueError`` (one line listing the valid names) on an unknown
    name."""
    if spec is None:
        return DEFAULT_METRICS
    names = [n.strip().lower() for n in (spec.split(",") if isinstance(spec, str) else spec)]
    names = [n for n in names if n]
    if not names:
        return DEFAULT_METRICS
    if "all" in names:
        return METRICS
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(
            f"unknown metric(s) {', '.join(map(repr, unknown))}; choose from {', '.join(METRICS)} (or all)"
        )
    return tuple(m for m in METRICS if m in names)
