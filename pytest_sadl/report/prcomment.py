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
from pytest_sadl.report.partial import partial_line, ungated_lines
from pytest_sadl.results import Results
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


def _metrics(results: Results, comparison: Comparison | None) -> list[str]:
    names = [m for m in METRICS if metric_entry(results, m) is not None]
    head = "| Metric | Value |" + (" Change (points) |" if comparison else "")
    rule = "|:--|--:|" + ("--:|" if comparison else "")
    rows = []
    for m in names:
        entry = metric_entry(results, m)
        value = fmt_metric(m, entry.value) if entry is not None and entry.measured else "n/a"
        rows.append(f"| {LABELS[m]} | {value} |" + (f" {_change(comparison, m)} |" if comparison else ""))
    return [head, rule, *rows]


def _groups_moved(results: Results, baseline: Results | None) -> list[str]:
    if baseline is None:
        return []
    before = {g.name: g.metrics for g in baseline.groups}
    moved = []
    for g in results.groups:
        old = before.get(g.name)
        if old is None:
            moved.append(f"{md(g.name)} (new)")
            continue
        parts = []
        for m, v in g.metrics.items():
            o = old.get(m)
            if v is not None and o is not None and round(100 * (v - o), 2) != 0:
                parts.append(f"{LABELS.get(m, m.upper())} {100 * (v - o):+.2f}")
        if parts:
            moved.append(f"{md(g.name)}: {', '.join(parts)}")
    return [f"**Groups that moved:** {'; '.join(moved[:SHOWN])}"] if moved else []


def _tests(results: Results, baseline: Results | None) -> list[str]:
    lines = []
    adders = sorted(results.tests, key=lambda t: (-sum(t.new.values()), t.nodeid))
    adders = [t for t in adders if sum(t.new.values()) > 0][:SHOWN]
    if adders:
        lines.append("**Tests that added the most coverage:** " + "; ".join(md(t.nodeid) for t in adders))
    if baseline is not None:
        now = {t.nodeid for t in results.tests}
        gone = [t.nodeid for t in baseline.tests if t.nodeid not in now and sum(t.new.values()) > 0]
        if gone:
            lines.append(
                f"**Coverage lost with {len(gone)} test(s) no longer measured:** "
                + "; ".join(md(t) for t in gone[:SHOWN])
            )
    return lines


def render_pr_comment(
    results: Results, *, comparison: Comparison | None = None, baseline: Results | None = None
) -> str:
    """The comment's Markdown (starts with :data:`MARKER`)."""
    failures = [f.message for f in results.failures]
    verdict = "❌ failed" if failures else "✅ passed"
    lines = [MARKER, f"### pytest-sadl: {verdict}", ""]
    said = [p for p in [partial_line(results), *ungated_lines(results)] if p]
    lines += [f"> ⚠️ {md(p)}" for p in said] + ([""] if said else [])
    lines += _metrics(results, comparison) + [""]
    lines += [f"- FAIL {md(f)}" for f in failures] + ([""] if failures else [])
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
