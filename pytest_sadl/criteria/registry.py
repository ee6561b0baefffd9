"""The criteria of a run, in report order, and the names derived from them.

Every list of metrics in the package comes from here: the engine, the options and their
docs, the reports (terminal, JSON and its schema, HTML and its colours, Markdown,
badges), ``--sadl-fail-under``, comparisons and ``sadl select``. Adding a criterion is one
module in :mod:`pytest_sadl.criteria.metrics` and one entry in :data:`CRITERIA`; a
criterion from outside the package is one module and one :func:`register` call, made
before the rest of the package is imported (a ``pytest -p`` plugin's import, or the
line before ``sadl``'s ``main``): the names below are read once by the modules that use
them. Importing this module imports no NumPy-heavy code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import pytest_sadl.criteria.metrics.energyc as energyc  # the OOD scores (issue 36): energy, MaxLogit, MSP,
import pytest_sadl.criteria.metrics.knnc as knnc  # KNN (Sun et al.) and Mahalanobis (Lee et al.)
import pytest_sadl.criteria.metrics.mahac as mahac
import pytest_sadl.criteria.metrics.maxlogitc as maxlogitc
import pytest_sadl.criteria.metrics.mspc as mspc
from pytest_sadl.criteria.metrics import cc, dsc, kmnc, lsc, mdsc, mlsc, mmdsc, nbc, nc, nlc, snac, tknc, tknp
from pytest_sadl.criteria.shape import COUNT_KIND, NEURON_KIND, SURPRISE_KIND, Criterion, Param

_V = TypeVar("_V")

CRITERIA: tuple[Criterion, ...] = tuple(
    m.CRITERION for m in (lsc, dsc, mdsc, mlsc, mmdsc, nc, kmnc, nbc, snac, tknc, tknp, nlc, cc)
) + tuple(m.CRITERION for m in (knnc, mahac, energyc, maxlogitc, mspc))  # the OOD scores (issue 36)
BY_NAME: dict[str, Criterion] = {}
#: metric names in report order
METRICS: tuple[str, ...] = ()
LABELS: dict[str, str] = {}
TITLES: dict[str, str] = {}
KINDS: dict[str, str] = {}
#: each surprise coverage and the per-input score it buckets (results' "inputs" keys)
SURPRISE: dict[str, str] = {}
SA_LABELS: dict[str, str] = {}
#: the metrics reported when none are named, in report order
DEFAULT_METRICS: tuple[str, ...] = ()
#: the neuron coverages, in report order
NEURON: tuple[str, ...] = ()
#: the criteria whose value is a number, not a fraction (TKNP, NLC, CC), in report order
COUNT: tuple[str, ...] = ()
#: each per-input surprise score and the criterion whose ``fit`` sets it up (the first in
#: report order that has one: criteria that bucket the same score share its set-up)
SCORES: dict[str, Criterion] = {}
#: every criterion's parameters (its options), in report order
PARAMS: tuple[Param, ...] = ()


def _refill(target: dict[str, _V], value: dict[str, _V]) -> None:
    target.clear()
    target.update(value)


def _of_kind(kind: str) -> tuple[str, ...]:
    return tuple(c.name for c in CRITERIA if c.kind == kind)


def _scores() -> dict[str, Criterion]:
    out: dict[str, Criterion] = {}
    for c in CRITERIA:
        if c.sa and c.fit is not None:
            out.setdefault(c.sa, c)
    return out


def _refill_scores() -> None:
    """The per-input scores' names: each surprise coverage's, their labels, their set-up."""
    _refill(SURPRISE, {c.name: c.sa for c in CRITERIA if c.kind == SURPRISE_KIND and c.sa})
    _refill(SA_LABELS, {c.sa: c.sa_label or c.sa.upper() for c in CRITERIA if c.sa})
    _refill(SCORES, _scores())


def _refill_by_name() -> None:
    """Each criterion, its label, title and kind by its name."""
    _refill(BY_NAME, {c.name: c for c in CRITERIA})
    _refill(LABELS, {c.name: c.label for c in CRITERIA})
    _refill(TITLES, {c.name: c.title for c in CRITERIA})
    _refill(KINDS, {c.name: c.kind for c in CRITERIA})


def _derive() -> None:
    """(Re)compute the names above from :data:`CRITERIA`, in place where they are dicts."""
    global METRICS, DEFAULT_METRICS, NEURON, COUNT, PARAMS
    _refill_by_name()
    _refill_scores()
    METRICS = tuple(c.name for c in CRITERIA)
    DEFAULT_METRICS = tuple(c.name for c in CRITERIA if c.default)
    NEURON = _of_kind(NEURON_KIND)
    COUNT = _of_kind(COUNT_KIND)
    PARAMS = tuple(p for c in CRITERIA for p in c.parameters)


_derive()


def register(criterion: Criterion) -> None:
    """Add a criterion from outside the package, after the built-in ones (its report
    order): its options, reports and schema entries follow. Call it before the rest of
    the package is imported (``pytest -p yourplugin``, whose import calls it; or before
    ``pytest_sadl.cli.main.main`` for ``sadl``). Raises ``ValueError`` on a name, or a
    parameter's name, already taken."""
    global CRITERIA
    if criterion.name in BY_NAME or criterion.name == "all":
        raise ValueError(f"a criterion named {criterion.name!r} is already registered; give yours another name")
    taken = {p.name for p in PARAMS}
    clash = [p.name for p in criterion.parameters if p.name in taken]
    if clash:
        raise ValueError(f"{criterion.name}: parameter(s) {', '.join(clash)} already belong to another criterion")
    CRITERIA = (*CRITERIA, criterion)
    _derive()


def _names(spec: str | Sequence[str] | None) -> list[str]:
    items = spec.split(",") if isinstance(spec, str) else spec or ()
    return [n for n in (item.strip().lower() for item in items) if n]


def choose(spec: str | Sequence[str] | None) -> tuple[str, ...]:
    """The metrics a run computes, in report order, from ``--sadl-metrics`` (a comma list,
    or a list of names; ``all``: every registered criterion; empty or ``None``: the
    default ones). Raises ``ValueError`` (one line listing the valid names) on an unknown
    name."""
    names = _names(spec)
    if not names:
        return DEFAULT_METRICS
    if "all" in names:
        return METRICS
    _check_known(names)
    return tuple(m for m in METRICS if m in names)


def _check_known(names: list[str]) -> None:
    """Every name a registered criterion's; else one line listing the valid names."""
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(
            f"unknown metric(s) {', '.join(map(repr, unknown))}; choose from {', '.join(METRICS)} (or all)"
        )
