"""Markdown for a CI job summary (GitHub's ``$GITHUB_STEP_SUMMARY``, GitLab, ...).

GitHub renders HTML inside Markdown, so every value from the results (test ids, group
and layer names, messages) goes through :func:`escape_md` (:func:`pytest_sadl.text.markdown`):
``<script>`` stays text, a ``|`` or a line break in a test id does not split a table
cell, ``@octocat`` notifies no one, and U+202E or NUL reach the summary only as escapes.
"""

from __future__ import annotations

import os
from pathlib import Path

from pytest_sadl.atomic import atomic_write_text
from pytest_sadl.criteria.registry import LABELS as METRIC_LABELS
from pytest_sadl.criteria.registry import METRICS, SURPRISE
from pytest_sadl.report._load import (
    OOD_HEADER,
    adequacy_hints,
    baseline_names,
    fmt_metric,
    in_units,
    metric_entry,
    mistakes_rows,
    ood_best,
    ood_notes,
    ood_reference,
    ood_rows,
    tests_summary,
    thresholds_of,
    unit,
)
from pytest_sadl.report.compare import Comparison
from pytest_sadl.report.partial import partial_line, ungated_lines
from pytest_sadl.results import Failure, Metric, Results, TestRow
from pytest_sadl.text import markdown

__all__ = ["render_markdown", "write_markdown", "escape_md"]


def escape_md(text: object) -> str:
    """``text`` safe as plain Markdown text (and GitHub's HTML-in-Markdown), on one line:
    :func:`pytest_sadl.text.markdown` (HTML and Markdown punctuation escaped, line breaks
    folded, controls and bidi overrides shown escaped, no live ``@mention``). The result
    must not go inside a code span (where backslashes are literal)."""
    return markdown(text)


def _delta(d: float | None, status: str | None) -> str:
    if d is None:
        return status or "–"
    if d > 0:
        return f"▲ +{d:.2f}"
    if d < 0:
        return f"▼ {d:.2f}"
    return "± 0.00"


def render_markdown(
    results: Results,
    *,
    comparison: Comparison | None = None,
    max_tests: int = 10,
) -> str:
    """A compact Markdown summary of ``results``: verdict, metrics, groups, hints.

    With ``comparison``, the metrics table gains the baseline and the change in points.
    ``max_tests`` caps the table of the tests that added the most coverage.
    """
    failures = results.failures
    lines = _header(results, results.passed, len(failures))
    lines += _notes(results)
    lines += _metrics_table(results, {f.metric for f in failures}, comparison)
    lines += _failures_and_warnings(results, failures, comparison)
    lines += _groups(results)
    lines += _mistakes(results)
    lines += _ood(results)
    lines += _hints(results)
    lines += _top_tests(results, max_tests)
    return "\n".join(lines).rstrip("\n") + "\n"


def _header(results: Results, passed: bool, n_failures: int) -> list[str]:
    """The title with the verdict, and the run in one line."""
    model = results.model
    lines: list[str] = []
    verdict = "✅ passed" if passed else f"❌ failed ({n_failures} threshold{'s' if n_failures != 1 else ''} missed)"
    lines.append(f"## pytest-sadl: test adequacy of {escape_md(model.name or 'the model')}: {verdict}")
    lines.append("")
    fp = model.fingerprint
    bits = []
    if results.created:
        bits.append(f"run of {escape_md(results.created)}")
    if fp:
        bits.append(f"model fingerprint {escape_md(fp[:12])}")
    if model.n_train is not None:
        bits.append(f"{model.n_train} training inputs")
    if results.tests:
        bits.append(tests_summary(results))
    if bits:
        lines.append(" · ".join(bits))
        lines.append("")
    return lines


def _notes(results: Results) -> list[str]:
    """Before the tables: tests whose inputs never came, and tests measured on a changed model."""
    lines: list[str] = []
    said = [p for p in [partial_line(results), *ungated_lines(results)] if p]  # a partial run, first
    lines += [f"> ⚠️ **{escape_md(p)}**" for p in said] + ([""] if said else [])
    missing = results.missing
    if missing:  # before the tables: the numbers below count without these tests' inputs
        lines.append(
            f"> ⚠️ **Incomplete results:** the inputs of {len(missing)} test"
            f"{'' if len(missing) == 1 else 's'} never reached them:"
        )
        for test in missing:
            reason = f": {escape_md(test.reason)}" if test.reason else ""
            lines.append(f"> - {escape_md(test.nodeid)}{reason}")
        lines.append("")
    stale = results.stale
    if stale:  # before the tables: measured on a changed model, counted in none of them
        lines.append(
            f"> ⚠️ **The model changed during the session:** the inputs of {len(stale)} test"
            f"{'' if len(stale) == 1 else 's'} were measured on other weights or layers than the "
            "profile's (fit, set_weights, load_weights), so no metric below counts them:"
        )
        for changed in stale:
            lines.append(f"> - {escape_md(changed.nodeid)}: {escape_md(changed.inputs)} inputs")
        lines.append("")

    return lines


def _status(m: str, entry: Metric, value: float | None, thr: float | None, failed: bool) -> str:
    """A metric's status cell: not available, no threshold, failed (or below), passed."""
    if not entry.measured:
        return "n/a (not available)" if entry.reason else "n/a"
    if thr is None:
        return "–"
    if failed or (value is not None and round(in_units(m, value), 2) < thr):
        return "❌ fail"
    return "✅ pass"


def _metrics_table(results: Results, failed_metrics: set[str], comparison: Comparison | None) -> list[str]:
    """Each metric: value, threshold, status (and the baseline and change)."""
    thresholds = thresholds_of(results)
    lines: list[str] = []
    head = ["Metric", "Value", "Threshold", "Status"]
    if comparison is not None:
        head += ["Baseline", "Change (pts)"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join([":--"] + ["--:"] * (len(head) - 1)) + "|")
    for m in METRICS:
        entry = metric_entry(results, m)
        if entry is None:
            continue
        value = entry.value if entry.measured else None
        thr = thresholds.get(m)
        status = _status(m, entry, value, thr, m in failed_metrics)
        row = [METRIC_LABELS[m], fmt_metric(m, value), "–" if thr is None else f"{thr:.2f}{unit(m)}", status]
        if comparison is not None:
            md = comparison.get(m)
            row += [
                "n/a" if md is None or md.baseline is None else f"{md.baseline:.2f}{unit(m)}",
                _delta(md.delta if md else None, md.status if md else None),
            ]
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")

    return lines


def _failures_and_warnings(
    results: Results,
    failures: list[Failure],
    comparison: Comparison | None,
) -> list[str]:
    """The thresholds missed, the metrics not available, the warnings."""
    lines: list[str] = []
    for f in failures:
        lines.append(f"- ❌ {escape_md(f.message or f.metric)}")
    unavailable = [(m, e.reason) for m in METRICS if (e := metric_entry(results, m)) and e.reason]
    for m, why in unavailable:
        lines.append(f"- ⚠️ {METRIC_LABELS[m]} not available: {escape_md(why)}")
    for w in results.warnings:
        lines.append(f"- ⚠️ {escape_md(w)}")
    if comparison is not None:
        for w in comparison.warnings:
            lines.append(f"- ⚠️ baseline: {escape_md(w)}")
    if failures or unavailable or results.warnings or (comparison is not None and comparison.warnings):
        lines.append("")

    return lines


def _groups(results: Results) -> list[str]:
    """Table VI: each group's cumulative coverage."""
    lines: list[str] = []
    groups = results.groups
    gm = [m for m in METRICS if any(g.cumulative.get(m) is not None for g in groups)]
    if groups and gm:
        lines.append("### Cumulative coverage by group (Table VI)")
        lines.append("")
        lines.append("| Group | Tests | Inputs | " + " | ".join(METRIC_LABELS[m] for m in gm) + " |")
        lines.append("|:--|--:|--:|" + "--:|" * len(gm))
        for i, g in enumerate(groups):
            cum = g.cumulative
            name = ("+ " if i else "") + escape_md(g.name)
            cells = [fmt_metric(m, cum.get(m)) for m in gm]
            lines.append(f"| {name} | {g.tests} | {g.inputs} | " + " | ".join(cells) + " |")
        lines.append("")

    return lines


def _mistakes(results: Results) -> list[str]:
    """Whether surprise predicts the model's mistakes (when tests gave labels)."""
    lines: list[str] = []
    found = mistakes_rows(results)
    if found is not None and results.mistakes is not None:
        header, table = found
        lines.append("### Does surprise predict this model's mistakes?")
        lines.append("")
        lines.extend(escape_md(text) for text in results.mistakes.overall.sentences)
        lines.append("")
        lines.append("| Group | " + " | ".join(header[1:]) + " |")
        lines.append("|:--|" + "--:|" * (len(header) - 1))
        lines.extend("| " + " | ".join(escape_md(c) for c in row) + " |" for row in table)
        lines.append("")
        lines.append(
            "AUC: how well a score tells misclassified inputs from correct ones (0.5 chance, 1 perfect); "
            f"{escape_md(baseline_names(results.mistakes))} are confidence baselines."
        )
        lines.append("")

    return lines


def _ood(results: Results) -> list[str]:
    """How well each score tells each group from in-distribution inputs; each group's best
    score in bold."""
    ood = results.ood
    if ood is None:
        return []
    lines = [f"### How well does each score tell each group from {escape_md(ood_reference(ood))}?", ""]
    lines.extend(escape_md(text) for text in ood.sentences)
    lines.extend(escape_md(text) for text in ood_notes(ood))
    lines.append("")
    table = ood_rows(ood)
    if table:
        best = ood_best(ood.rows)
        lines.append("| " + " | ".join(OOD_HEADER) + " |")
        lines.append("|:--|:--|" + "--:|" * (len(OOD_HEADER) - 2))
        for i, row in enumerate(table):
            cells = [escape_md(c) for c in row]
            if i in best:
                cells[1], cells[3] = f"**{cells[1]}**", f"**{cells[3]}**"
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        lines.append(
            "AUROC: the chance that an input of the group scores above an in-distribution one (0.5 chance, 1 perfect); "
            "AUPR-In/-Out: average precision with either side as positives; FPR@95: the fraction of the group "
            "taken for in-distribution at the threshold that keeps 95% of the in-distribution inputs (lower is better)."
        )
        lines.append("")
    return lines


def _hints(results: Results) -> list[str]:
    """What would improve the tests."""
    lines: list[str] = []
    hints = [h for h in adequacy_hints(results) if not h.startswith("Threshold missed")]
    if hints:
        lines.append("### What would improve the tests")
        lines.append("")
        lines.extend(f"- {escape_md(h)}" for h in hints)
        lines.append("")

    return lines


def _top_tests(results: Results, max_tests: int) -> list[str]:
    """The tests that added the most coverage, folded."""
    lines: list[str] = []
    tests = results.tests

    def added(t: TestRow) -> tuple[int, int]:
        return (sum(v for k, v in t.new.items() if k in SURPRISE), sum(v for k, v in t.new.items() if k == "nc"))

    ranked = sorted(tests, key=lambda t: added(t), reverse=True)[:max_tests]
    if ranked:
        lines.append("<details><summary>Tests that added the most coverage</summary>")
        lines.append("")
        measured = [METRIC_LABELS[m] for m in SURPRISE if (e := metric_entry(results, m)) is not None and e.applicable]
        buckets = f"new {'+'.join(measured)} buckets"
        lines.append(f"| Test | Group | Inputs | {buckets} | new NC neurons |")
        lines.append("|:--|:--|--:|--:|--:|")
        for t in ranked:
            a, b = added(t)
            lines.append(f"| {escape_md(t.nodeid)} | {escape_md(t.group)} | {t.inputs} | {a} | {b} |")
        lines.append("")
        lines.append("</details>")
        lines.append("")
    return lines


def write_markdown(results: Results, path: str | os.PathLike[str], *, comparison: Comparison | None = None) -> Path:
    """Write :func:`render_markdown` to ``path`` atomically; return the path.

    ``path`` may be ``$GITHUB_STEP_SUMMARY``'s file: then the summary is *appended*, as
    GitHub expects of every step writing to it.
    """
    text = render_markdown(results, comparison=comparison)
    p = Path(path)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary and p.resolve() == Path(summary).resolve():
        with p.open("a", encoding="utf-8") as fh:
            fh.write(text)
        return p
    return atomic_write_text(p, text)
