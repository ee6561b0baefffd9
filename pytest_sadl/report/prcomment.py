"""A pull-request comment: compact Markdown made to be posted, and updated in place.

``sadl report RUN.json --pr-comment PATH [--compare BASE.json]``. The comment starts with
:data:`MARKER` (an HTML comment, hidden when rendered), so a CI step finds the comment it
posted before and edits it instead of adding one per push. It holds the verdict, a
partial run's warning, each metric with its change against the baseline, the groups
that moved, and the tests that added the most coverage or whose coverage went; no
links, and every text from the results escaped (:func:`pytest_sadl.text.markdown`: no
HTML, no live ``@mention``, one line per cell).
"""

from __future__ import annotations

import os
from pathlib import Path

from pytest_sadl.atomic import atomic_write_text
from pytest_sadl.criteria.registry import LABELS, METRICS
from pytest_sadl.report._load import fmt_metric, metric_entry
from pytest_sadl.report.compare import Comparison
from pytest_sadl.report.partial import partial_notes
from pytest_sadl.results import GroupRow, Results
from pytest_sadl.text import markdown as md

#: The first line of every comment: what a CI step searches for to update it.
MARKER = "<!-- pytest-sadl -->"
#: Tests and groups listed at most.
SHOWN = 5


def _change(comparison: Comparison | None, metric: str) -> str:
    if comparison is None:
        return ""
    d = comparison.get(metric)
    if d is None or d.delta is None:
        return "n/a" if d is None else md(d.status)
    return "±0.00" if d.delta == 0 else f"{d.delta:+.2f}"


def _value(results: Results, m: str) -> str:
    """A metric's value, "n/a" when it was not measured."""
    entry = metric_entry(results, m)
    return fmt_metric(m, entry.value) if entry is not None and entry.measured else "n/a"


def _metrics(results: Results, comparison: Comparison | None) -> list[str]:
    names = [m for m in METRICS if metric_entry(results, m) is not None]
    if comparison is None:
        return ["| Metric | Value |", "|:--|--:|", *(f"| {LABELS[m]} | {_value(results, m)} |" for m in names)]
    rows = [f"| {LABELS[m]} | {_value(results, m)} | {_change(comparison, m)} |" for m in names]
    return ["| Metric | Value | Change (points) |", "|:--|--:|--:|", *rows]


def _moves(now: dict[str, float | None], before: dict[str, float | None]) -> list[str]:
    """Each metric that moved between ``before`` and ``now``, with its change in points."""
    parts = []
    for m, v in now.items():
        o = before.get(m)
        if v is not None and o is not None and round(100 * (v - o), 2) != 0:
            parts.append(f"{LABELS.get(m, m.upper())} {100 * (v - o):+.2f}")
    return parts


def _group_moved(group: GroupRow, before: dict[str, dict[str, float | None]]) -> str | None:
    """How ``group`` moved against the baseline's group of its name ("new" without one)."""
    old = before.get(group.name)
    if old is None:
        return f"{md(group.name)} (new)"
    parts = _moves(group.metrics, old)
    return f"{md(group.name)}: {', '.join(parts)}" if parts else None


def _groups_moved(results: Results, baseline: Results | None) -> list[str]:
    if baseline is None:
        return []
    before = {g.name: g.metrics for g in baseline.groups}
    moved = [said for g in results.groups if (said := _group_moved(g, before)) is not None]
    return [f"**Groups that moved:** {'; '.join(moved[:SHOWN])}"] if moved else []


def _adders(results: Results) -> list[str]:
    """The tests that added the most coverage."""
    adders = sorted(results.tests, key=lambda t: (-sum(t.new.values()), t.nodeid))
    adders = [t for t in adders if sum(t.new.values()) > 0][:SHOWN]
    return ["**Tests that added the most coverage:** " + "; ".join(md(t.nodeid) for t in adders)] if adders else []


def _gone(results: Results, baseline: Results | None) -> list[str]:
    """The baseline's tests that covered something first and are not in ``results``."""
    if baseline is None:
        return []
    now = {t.nodeid for t in results.tests}
    return [t.nodeid for t in baseline.tests if t.nodeid not in now and sum(t.new.values()) > 0]


def _lost(results: Results, baseline: Results | None) -> list[str]:
    """The baseline's tests that added coverage and are no longer measured."""
    gone = _gone(results, baseline)
    if not gone:
        return []
    return [f"**Coverage lost with {len(gone)} test(s) no longer measured:** " + "; ".join(md(t) for t in gone[:SHOWN])]


def _tests(results: Results, baseline: Results | None) -> list[str]:
    return _adders(results) + _lost(results, baseline)


def _paragraphs(lines: list[str]) -> list[str]:
    """``lines`` and an empty line after them; nothing for none."""
    return [*lines, ""] if lines else []


def render_pr_comment(
    results: Results, *, comparison: Comparison | None = None, baseline: Results | None = None
) -> str:
    """The comment's Markdown (starts with :data:`MARKER`)."""
    failures = [f.message for f in results.failures]
    verdict = "❌ failed" if failures else "✅ passed"
    lines = [MARKER, f"### pytest-sadl: {verdict}", ""]
    lines += _paragraphs([f"> ⚠️ {md(p)}" for p in partial_notes(results)])
    lines += _metrics(results, comparison) + [""]
    lines += _paragraphs([f"- FAIL {md(f)}" for f in failures])
    extra = _groups_moved(results, baseline) + _tests(results, baseline)
    lines += [line for x in extra for line in (x, "")]
    n = len(results.tests)
    lines.append(f"<sub>{results.n_inputs} inputs from {n} marked test{'' if n == 1 else 's'}.</sub>")
    return "\n".join(lines) + "\n"


def write_pr_comment(
    results: Results,
    path: str | os.PathLike[str],
    *,
    comparison: Comparison | None = None,
    baseline: Results | None = None,
) -> Path:
    return atomic_write_text(path, render_pr_comment(results, comparison=comparison, baseline=baseline))
