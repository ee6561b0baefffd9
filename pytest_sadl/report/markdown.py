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
from pytest_sadl.report.partial import partial_notes
from pytest_sadl.results import Failure, GroupRow, Metric, Ood, Results, TestRow
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


def _row(cells: list[str]) -> str:
    """One Markdown table row of ``cells`` (already escaped)."""
    return "| " + " | ".join(cells) + " |"


def _plural(n: int, word: str) -> str:
    """``word`` with an "s" unless ``n`` is 1."""
    return word if n == 1 else word + "s"


def _header(results: Results, passed: bool, n_failures: int) -> list[str]:
    """The title with the verdict, and the run in one line."""
    model = results.model
    verdict = "✅ passed" if passed else f"❌ failed ({n_failures} {_plural(n_failures, 'threshold')} missed)"
    lines = [f"## pytest-sadl: test adequacy of {escape_md(model.name or 'the model')}: {verdict}", ""]
    bits = _run_bits(results)
    if bits:
        lines += [" · ".join(bits), ""]
    return lines


def _run_bits(results: Results) -> list[str]:
    """The run's one line in parts: when, which model, its training inputs, the tests."""
    model = results.model
    bits = [
        f"run of {escape_md(results.created)}" if results.created else "",
        f"model fingerprint {escape_md(model.fingerprint[:12])}" if model.fingerprint else "",
        "" if model.n_train is None else f"{model.n_train} training inputs",
        tests_summary(results) if results.tests else "",
    ]
    return [bit for bit in bits if bit]


def _notes(results: Results) -> list[str]:
    """Before the tables: a partial run, tests whose inputs never came, and tests measured on
    a changed model."""
    said = partial_notes(results)  # a partial run, first
    lines = [f"> ⚠️ **{escape_md(p)}**" for p in said] + ([""] if said else [])
    return lines + _missing_note(results) + _stale_note(results)


def _missing_note(results: Results) -> list[str]:
    """The tests whose inputs never reached the results: the numbers count without them."""
    missing = results.missing
    if not missing:
        return []
    lines = [
        f"> ⚠️ **Incomplete results:** the inputs of {len(missing)} {_plural(len(missing), 'test')} never reached them:"
    ]
    for test in missing:
        reason = f": {escape_md(test.reason)}" if test.reason else ""
        lines.append(f"> - {escape_md(test.nodeid)}{reason}")
    return [*lines, ""]


def _stale_note(results: Results) -> list[str]:
    """The tests measured on a changed model, counted in no table."""
    stale = results.stale
    if not stale:
        return []
    lines = [
        f"> ⚠️ **The model changed during the session:** the inputs of {len(stale)} {_plural(len(stale), 'test')}"
        " were measured on other weights or layers than the "
        "profile's (fit, set_weights, load_weights), so no metric below counts them:"
    ]
    lines += [f"> - {escape_md(changed.nodeid)}: {escape_md(changed.inputs)} inputs" for changed in stale]
    return [*lines, ""]


def _below(m: str, value: float | None, thr: float) -> bool:
    return value is not None and round(in_units(m, value), 2) < thr


def _status(m: str, entry: Metric, value: float | None, thr: float | None, failed: bool) -> str:
    """A metric's status cell: not available, no threshold, failed (or below), passed."""
    if not entry.measured:
        return "n/a (not available)" if entry.reason else "n/a"
    if thr is None:
        return "–"
    return "❌ fail" if failed or _below(m, value, thr) else "✅ pass"


def _metrics_table(results: Results, failed_metrics: set[str], comparison: Comparison | None) -> list[str]:
    """Each metric: value, threshold, status (and the baseline and change)."""
    thresholds = thresholds_of(results)
    head = ["Metric", "Value", "Threshold", "Status"]
    if comparison is not None:
        head += ["Baseline", "Change (pts)"]
    lines = [_row(head), "|" + "|".join([":--"] + ["--:"] * (len(head) - 1)) + "|"]
    for m in METRICS:
        entry = metric_entry(results, m)
        if entry is None:
            continue
        row = _metric_cells(m, entry, thresholds.get(m), m in failed_metrics)
        if comparison is not None:
            row += _baseline_cells(m, comparison)
        lines.append(_row(row))
    lines.append("")
    return lines


def _metric_cells(m: str, entry: Metric, thr: float | None, failed: bool) -> list[str]:
    """A metric's label, value, threshold and status."""
    value = entry.value if entry.measured else None
    status = _status(m, entry, value, thr, failed)
    return [METRIC_LABELS[m], fmt_metric(m, value), "–" if thr is None else f"{thr:.2f}{unit(m)}", status]


def _baseline_cells(m: str, comparison: Comparison) -> list[str]:
    """A metric's baseline value and change, "n/a" when the baseline has none."""
    md = comparison.get(m)
    if md is None:
        return ["n/a", _delta(None, None)]
    return ["n/a" if md.baseline is None else f"{md.baseline:.2f}{unit(m)}", _delta(md.delta, md.status)]


def _failures_and_warnings(
    results: Results,
    failures: list[Failure],
    comparison: Comparison | None,
) -> list[str]:
    """The thresholds missed, the metrics not available, the warnings."""
    lines = [f"- ❌ {escape_md(f.message or f.metric)}" for f in failures]
    lines += [f"- ⚠️ {METRIC_LABELS[m]} not available: {escape_md(why)}" for m, why in _unavailable(results)]
    lines += [f"- ⚠️ {escape_md(w)}" for w in results.warnings]
    lines += [f"- ⚠️ baseline: {escape_md(w)}" for w in _baseline_warnings(comparison)]
    return [*lines, ""] if lines else []


def _baseline_warnings(comparison: Comparison | None) -> list[str]:
    return [] if comparison is None else list(comparison.warnings)


def _unavailable(results: Results) -> list[tuple[str, str]]:
    """The metrics not available, each with why."""
    return [(m, e.reason) for m in METRICS if (e := metric_entry(results, m)) and e.reason]


def _group_metrics(groups: list[GroupRow]) -> list[str]:
    """The metrics some group has a cumulative value of, in the registry's order."""
    return [m for m in METRICS if any(g.cumulative.get(m) is not None for g in groups)]


def _groups(results: Results) -> list[str]:
    """Table VI: each group's cumulative coverage."""
    groups = results.groups
    gm = _group_metrics(groups)
    if not groups or not gm:
        return []
    lines = ["### Cumulative coverage by group (Table VI)", ""]
    lines.append("| Group | Tests | Inputs | " + " | ".join(METRIC_LABELS[m] for m in gm) + " |")
    lines.append("|:--|--:|--:|" + "--:|" * len(gm))
    for i, g in enumerate(groups):
        name = ("+ " if i else "") + escape_md(g.name)
        lines.append(_row([name, str(g.tests), str(g.inputs), *(fmt_metric(m, g.cumulative.get(m)) for m in gm)]))
    lines.append("")
    return lines


def _mistakes(results: Results) -> list[str]:
    """Whether surprise predicts the model's mistakes (when tests gave labels)."""
    found = mistakes_rows(results)
    if found is None or results.mistakes is None:
        return []
    header, table = found
    lines = ["### Does surprise predict this model's mistakes?", ""]
    lines.extend(escape_md(text) for text in results.mistakes.overall.sentences)
    lines.append("")
    lines.append("| Group | " + " | ".join(header[1:]) + " |")
    lines.append("|:--|" + "--:|" * (len(header) - 1))
    lines.extend(_row([escape_md(c) for c in row]) for row in table)
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
    return lines + _ood_table(ood)


def _ood_table(ood: Ood) -> list[str]:
    """The OOD table, each group's best score in bold, and what its columns mean."""
    table = ood_rows(ood)
    if not table:
        return []
    best = ood_best(ood.rows)
    lines = [_row(OOD_HEADER), "|:--|:--|" + "--:|" * (len(OOD_HEADER) - 2)]
    lines += [_row(_ood_cells(row, i in best)) for i, row in enumerate(table)]
    lines.append("")
    lines.append(
        "AUROC: the chance that an input of the group scores above an in-distribution one (0.5 chance, 1 perfect); "
        "AUPR-In/-Out: average precision with either side as positives; FPR@95: the fraction of the group "
        "taken for in-distribution at the threshold that keeps 95% of the in-distribution inputs (lower is better)."
    )
    lines.append("")
    return lines


def _ood_cells(row: list[str], best: bool) -> list[str]:
    """An OOD row's cells, escaped, its score and AUROC in bold when ``best``."""
    cells = [escape_md(c) for c in row]
    if best:
        cells[1], cells[3] = f"**{cells[1]}**", f"**{cells[3]}**"
    return cells


def _hints(results: Results) -> list[str]:
    """What would improve the tests."""
    hints = [h for h in adequacy_hints(results) if not h.startswith("Threshold missed")]
    if not hints:
        return []
    return ["### What would improve the tests", "", *(f"- {escape_md(h)}" for h in hints), ""]


def _added(t: TestRow) -> tuple[int, int]:
    """The surprise buckets and the NC neurons ``t`` covered first."""
    return (sum(v for k, v in t.new.items() if k in SURPRISE), sum(v for k, v in t.new.items() if k == "nc"))


def _top_tests(results: Results, max_tests: int) -> list[str]:
    """The tests that added the most coverage, folded."""
    ranked = sorted(results.tests, key=_added, reverse=True)[:max_tests]
    if not ranked:
        return []
    lines = ["<details><summary>Tests that added the most coverage</summary>", ""]
    measured = [METRIC_LABELS[m] for m in SURPRISE if (e := metric_entry(results, m)) is not None and e.applicable]
    lines.append(f"| Test | Group | Inputs | new {'+'.join(measured)} buckets | new NC neurons |")
    lines.append("|:--|:--|--:|--:|--:|")
    for t in ranked:
        a, b = _added(t)
        lines.append(_row([escape_md(t.nodeid), escape_md(t.group), str(t.inputs), str(a), str(b)]))
    return [*lines, "", "</details>", ""]


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
