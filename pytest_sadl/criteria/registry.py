"""The criteria of a run, in report order, and the names derived from them.

Every list of metrics in the package comes from here: the engine, the reports (terminal,
JSON, HTML, Markdown, badges), ``--sadl-fail-under``, comparisons and ``sadl select``.
Adding a criterion is one module in :mod:`pytest_sadl.criteria.metrics` and one entry
in :data:`CRITERIA`. Importing this module imports no NumPy-heavy code.
"""

from __future__ import annotations

from pytest_sadl.criteria.metrics import dsc, kmnc, lsc, mdsc, mlsc, mmdsc, nbc, nc, snac
from pytest_sadl.criteria.shape import NEURON_KIND, SURPRISE_KIND, Criterion

CRITERIA: tuple[Criterion, ...] = tuple(m.CRITERION for m in (lsc, dsc, mdsc, mlsc, mmdsc, nc, kmnc, nbc, snac))
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
