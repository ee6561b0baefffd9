"""The terminal summary (``--sadl-report=term`` / ``term-verbose``), rendered from the results JSON.

``term`` fits :data:`WIDTH` columns, as pytest-cov's summary does on a CI log: text is
wrapped, the layer list abbreviated, and the mistakes table shows the surprise measures
with the best confidence baseline; ``term-verbose`` adds the per-test and per-layer
tables and every column at full width.

Every piece of text from users (the model's and layers' names, group names, test ids,
warnings that quote them) goes through :func:`pytest_sadl.text.terminal`: a control
character is shown escaped (ESC as ``\\x1b``), so a name cannot clear the screen, colour
the log or split a row (CR/LF), and each line is checked once more as it is written.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence

from pytest_sadl.criteria.registry import COUNT, LABELS, NEURON, SA_LABELS, SURPRISE
from pytest_sadl.criteria.registry import METRICS as ORDER
from pytest_sadl.report._load import (
    COUNT_PARTS,
    OOD_HEADER,
    fmt_metric,
    mistakes_rows,
    ood_notes,
    ood_reference,
    ood_rows,
    tests_summary,
    unit,
)
from pytest_sadl.report.compare import Comparison, MetricDelta
from pytest_sadl.report.partial import partial_notes
from pytest_sadl.results import GroupRow, LayerRow, Metric, Mistakes, Results, TestRow
from pytest_sadl.text import terminal as safe


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.2f}%"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


#: The width of the ``term`` summary (a CI log's, and pytest's own default).
WIDTH = 80


def _covered(name: str, m: Metric) -> str:
    """The "covered / total" cell: "-" for a count criterion with no targets (NLC)."""
    if name in COUNT and COUNT_PARTS.get(name, ("", "")) is None:
        return "-"
    return f"{m.covered} / {m.total}"


def _count_note(names: list[str]) -> str | None:
    """What "covered / total" counts for the count criteria of the table, or ``None``."""
    parts = []
    for name in names:
        if name not in COUNT:
            continue
        what = COUNT_PARTS.get(name, ("", ""))
        if what is None:
            parts.append(f"{LABELS[name]} is a number with no targets")
        elif what[0]:
            parts.append(f"{LABELS[name]}: {what[0]} / {what[1]}")
    return "counts: " + "; ".join(parts) if parts else None


def _wrap(text: str, width: int | None, indent: str = "  ") -> list[str]:
    text = safe(text)
    if width is None:
        return [text]
    return textwrap.wrap(
        text, width=width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    ) or [""]


def _names(names: list[str], room: int | None) -> str:
    """``names`` joined, cut to ``room`` characters with how many more there are."""
    full = ", ".join(names)
    if room is None or len(full) <= room:
        return full
    shown: list[str] = []
    for i, name in enumerate(names):
        more = f", ... +{len(names) - i} more"
        if len(", ".join([*shown, name])) + len(more) > room:
            return ", ".join(shown) + more if shown else "term-verbose lists them"
        shown.append(name)
    return full


def _fold_baselines(
    header: list[str], table: list[list[str]], baselines: Sequence[str] = ()
) -> tuple[list[str], list[list[str]]]:
    """The mistakes table with its confidence-baseline columns (headed by a label of
    ``baselines``) folded into one, the best baseline (highest value) of each row: the
    surprise measures stay side by side."""
    keep, base = _baseline_columns(header, baselines)
    if len(base) < 2:
        return header, table
    unit = header[base[0]].rsplit(" ", 1)[-1]
    return (
        [header[i] for i in keep] + [f"best conf. {unit}"],
        [[row[i] for i in keep] + [_best_cell(row, base)] for row in table],
    )


def _baseline_columns(header: list[str], baselines: Sequence[str]) -> tuple[list[int], list[int]]:
    """The mistakes table's columns to keep (the first three and the surprise measures) and
    its confidence-baseline columns (headed by a label of ``baselines``)."""
    base_names = tuple(f"{label} " for label in baselines)
    keep = [i for i, h in enumerate(header) if i < 3 or not h.startswith(base_names)]
    return keep, [i for i in range(3, len(header)) if i not in keep]


def _is_number(cell: str) -> bool:
    return cell.replace(".", "", 1).lstrip("-").isdigit()


def _best_cell(row: list[str], columns: list[int]) -> str:
    """The highest number among ``row``'s ``columns``, as written; "-" when none is a number."""
    values = [(float(row[i]), row[i]) for i in columns if _is_number(row[i])]
    return max(values)[1] if values else "-"


def _short_units(header: list[str], table: list[list[str]], width: int) -> list[str]:
    """The mistakes table's score columns headed without their unit ("LSA" for "LSA AUC";
    the title says it) when the table would not fit ``width`` otherwise (MLSA, MMDSA)."""
    cols = [max(len(r[i]) for r in [header, *table]) for i in range(len(header))]
    cols[0] = min(cols[0], 12)  # the group names are cut to fit, down to 12 characters
    if sum(cols) + 2 * (len(cols) - 1) <= width:
        return header
    return header[:3] + [h.rsplit(" ", 1)[0] for h in header[3:]]


def _cut_names(rows: list[list[str]], widths: list[int], width: int | None) -> list[list[str]]:
    """The rows with their first column cut (an ellipsis, 12 characters at least) so the
    table fits ``width``; ``widths[0]`` set to the cut."""
    over = sum(widths) + 2 * (len(widths) - 1) - (width or 0)
    if width is None or over <= 0 or widths[0] <= 12:
        return rows
    cut = max(12, widths[0] - over)
    widths[0] = cut
    return [[(r[0] if len(r[0]) <= cut else r[0][: cut - 1] + "…"), *r[1:]] for r in rows]


def _table(rows: list[list[str]], right: set[int], width: int | None = None) -> list[str]:
    """Aligned columns; with ``width``, the first column (names: groups, tests) is cut with
    an ellipsis so the table fits, down to 12 characters."""
    rows = [[safe(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    rows = _cut_names(rows, widths, width)
    lines = [_aligned(row, widths, right) for row in rows]
    return [lines[0], "  ".join("-" * w for w in widths), *lines[1:]]


def _aligned(row: list[str], widths: list[int], right: set[int]) -> str:
    """One row's cells padded to ``widths``, the ``right`` columns right-aligned."""
    cells = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(row)]
    return "  ".join(cells).rstrip()


def _chunks(shown: list[str], cols: dict[str, list[str]], used: int, room: int | None) -> list[list[str]]:
    """The metric columns in parts that each fit ``room`` (``used``: the first part's
    fixed columns); one part without a limit."""
    chunks: list[list[str]] = [[]]
    for k in shown:
        need = max(map(len, cols[k])) + 2
        if room is not None and chunks[-1] and used + need > room:
            chunks.append([])
            used = 0
        chunks[-1].append(k)
        used += need
    return chunks


def _group_columns(groups: list[GroupRow]) -> list[list[str]]:
    """Table VI's first columns: the groups (``+`` from the second on), tests, inputs."""
    names = [("" if i == 0 else "+ ") + safe(g.name) for i, g in enumerate(groups)]
    return [
        ["group", *names],
        ["tests"] + [str(g.tests) for g in groups],
        ["inputs"] + [str(g.inputs) for g in groups],
    ]


def _group_tables(groups: list[GroupRow], shown: list[str], width: int | None) -> list[str]:
    """Table VI: one table, or, when its metric columns do not fit ``width`` (``--sadl-metrics
    =all``), several stacked, each with the group column and as many metrics as fit."""
    cols = {k: _cumulative_column(groups, k) for k in shown}
    first = _group_columns(groups)
    name_w = max(12, min(max(map(len, first[0])), (width or 0) // 3))
    room = None if width is None else width - name_w - 2
    chunks = _chunks(shown, cols, _columns_width(first[1:]), room)
    if len(chunks) > 1:  # the parts' group columns cut alike, so the parts line up
        first[0] = [_ellipsis(c, name_w) for c in first[0]]
    return _stacked(first, [[cols[k] for k in chunk] for chunk in chunks], width)


def _stacked(first: list[list[str]], parts: list[list[list[str]]], width: int | None) -> list[str]:
    """Tables one under the other: the first with ``first``'s columns, the others with its
    first column only, each followed by its part's metric columns."""
    out = _columns_table(first + parts[0], width)
    for part in parts[1:]:
        out += ["", *_columns_table(first[:1] + part, width)]
    return out


def _columns_width(columns: list[list[str]]) -> int:
    """The width ``columns`` take side by side, two spaces after each."""
    return sum(max(map(len, c)) + 2 for c in columns)


def _cumulative_column(groups: list[GroupRow], metric: str) -> list[str]:
    """Table VI's column of ``metric``: its label, then each group's cumulative coverage."""
    return [LABELS[metric]] + [fmt_metric(metric, g.cumulative.get(metric)).rstrip("%") for g in groups]


def _ellipsis(text: str, room: int) -> str:
    return text if len(text) <= room else text[: room - 1] + "…"


def _columns_table(columns: list[list[str]], width: int | None) -> list[str]:
    """A table given by its columns, every column but the first right-aligned."""
    rows = [list(r) for r in zip(*columns, strict=True)]
    return _table(rows, right=set(range(1, len(columns))), width=width)


def render_terminal(
    results: Results, *, verbose: bool = False, comparison: Comparison | None = None, width: int | None = WIDTH
) -> list[str]:
    """Lines of the summary: model, warnings, the metrics, Table VI by group (and, verbose,
    the tests and layers). Without ``verbose`` every line fits ``width`` columns (``None``:
    no limit)."""
    if verbose:
        width = None
    lines = _header(results, width)
    lines += _metrics_table(results, comparison, width)
    lines += _groups_table(results, width)
    lines += who_tests_what(results, width)
    lines += _mistakes_table(results, width)
    lines += _ood_table(results, width)
    if verbose:
        lines += _tests_table(results)
        lines += _layers_table(results)
    return [safe(line) for line in lines]  # (each piece was made safe already: unchanged)


def _header(results: Results, width: int | None) -> list[str]:
    """The model, the layers, what was recorded, the run's warnings and the left-out tests."""
    lines = _wrap(_model_line(results), width)
    lines += _layers_lines(results, width)
    lines += _wrap(_recorded_line(results), width)
    lines += [line for p in partial_notes(results) for line in _wrap(p, width)]
    lines += _warning_lines(results, width)
    for m in results.stale:  # measured on a changed model: listed, counted in no table below
        lines += _wrap(f"  left out (model changed): {m.nodeid}, {m.inputs} inputs", width, "    ")
    lines.append("")
    return lines


def _unknown(value: object) -> str:
    return "?" if value is None else str(value)


def _model_line(results: Results) -> str:
    """The model's name, fingerprint, training inputs and kind."""
    model = results.model
    return (
        f"model {_unknown(model.name)} (fingerprint {(model.fingerprint or '')[:12]}), "
        f"{_unknown(model.n_train)} training inputs, "
        f"{'classifier' if model.classifier else 'regression'}"
    )


def _layers_lines(results: Results, width: int | None) -> list[str]:
    """The SA layers (and their projection) and the coverage layers, abbreviated to fit."""
    config = results.config
    coverage = list(config.coverage_layers)
    projected = "" if config.sa_components is None else f" (LSA/MDSA on {config.sa_components} principal axes)"
    head = f"SA layers: {', '.join(config.sa_layers)}{projected}; coverage layers: {len(coverage)} ("
    room = None if width is None else max(20, width - len(head) - 1)
    return _wrap(head + _names(coverage, room) + ")", width)


def _recorded_line(results: Results) -> str:
    """How many inputs were recorded by which tests, or how to record some."""
    if results.n_inputs == 0:
        return "no inputs were recorded: mark the tests that feed the model with @pytest.mark.sadl"
    return f"{results.n_inputs} inputs recorded: {tests_summary(results)}, in {len(results.groups)} group(s)"


def _warning_lines(results: Results, width: int | None) -> list[str]:
    """The run's warnings, before the tables: an incomplete run must not read as a complete one."""
    if not results.warnings:
        return []
    return ["", *(line for w in results.warnings for line in _wrap(f"warning: {w}", width))]


def _metric_row(name: str, m: Metric, results: Results) -> list[str]:
    """One metric's row of the table (an applicable one)."""
    bounds = above = ""
    if name in SURPRISE:
        b = results.config.bounds.get(name)
        bounds = "" if b is None else f"({_num(b.lower)}, {_num(b.upper)}]"
        above = str(0 if m.above is None else m.above)
    thresholds = results.thresholds
    thr = f"{thresholds[name]:.2f}{unit(name)}" if name in thresholds else ""
    return [LABELS[name], fmt_metric(name, m.value), _covered(name, m), bounds, above, thr]


def _metrics_rows(
    results: Results, deltas: dict[str, MetricDelta], not_applicable: list[str], not_available: list[str]
) -> list[list[str]]:
    """One row per metric of the run (not applicable and not available ones named in the lists)."""
    rows = []
    for name in ORDER:
        m = results.metrics.get(name)
        if m is None:  # a results file from before this metric existed, or a metric not chosen
            continue
        if m.applicable:
            row = _metric_row(name, m, results)
        else:
            row = [LABELS[name], "n/a", "-", "", "", ""]
            _say_why_not(name, m, not_applicable, not_available)
        rows.append(row + _delta_cell(deltas, name))
    return rows


def _say_why_not(name: str, m: Metric, not_applicable: list[str], not_available: list[str]) -> None:
    """An inapplicable metric into the list that says why: not available (its score cannot
    be set up on the chosen layer, with the reason) or not applicable."""
    if m.reason:
        not_available.append(f"{LABELS[name]}: not available ({m.reason})")
    else:
        not_applicable.append(LABELS[name])


def _delta_cell(deltas: dict[str, MetricDelta], name: str) -> list[str]:
    """The "vs baseline" cell of a metric (no cell without a comparison)."""
    if not deltas:
        return []
    d = deltas.get(name)
    return ["" if d is None or d.delta is None else f"{d.delta:+.2f}"]


def _metrics_notes(results: Results, not_applicable: list[str], not_available: list[str]) -> list[str]:
    """What the metrics table leaves to sentences: not applicable, not available, counts, the rule."""
    notes: list[str | None] = (
        [f"{', '.join(not_applicable)}: not applicable (regression model)"] if not_applicable else []
    )
    notes += not_available
    notes.append(_count_note(_applicable(results)))
    if not_available:
        notes.append("(`sadl profile layers --usable` says which layers each SA measure can use)")
    notes.append(_default_rule(results))
    return [note for note in notes if note is not None]


def _applicable(results: Results) -> list[str]:
    """The run's applicable metrics, in the registry's order."""
    metrics = results.metrics
    return [r for r in ORDER if r in metrics and metrics[r].applicable]


def _default_rule(results: Results) -> str | None:
    """The bounds' note: the default rule the surprise coverages' bounds came from, if one did."""
    rules = {b.rule or "" for k in SURPRISE if (b := results.config.bounds.get(k)) is not None}
    default = next((r for r in sorted(rules) if r.startswith("default")), None)
    return None if default is None else "bounds: " + default


def _metrics_table(results: Results, comparison: Comparison | None, width: int | None) -> list[str]:
    """The metrics, with what is not applicable or not available and the bounds' rule."""
    deltas = {d.metric: d for d in comparison.metrics} if comparison is not None else {}
    header = ["metric", "coverage", "covered / total", "bounds", "above upper", "threshold"]
    if deltas:
        header.append("vs baseline")
    not_applicable: list[str] = []
    not_available: list[str] = []
    rows = [header, *_metrics_rows(results, deltas, not_applicable, not_available)]
    lines = _table(rows, right={1, 2, 4, 5, 6}, width=width)
    for note in _metrics_notes(results, not_applicable, not_available):
        lines += _wrap(note, width)
    return lines


def _groups_table(results: Results, width: int | None) -> list[str]:
    """Table VI: each group's cumulative coverage."""
    if not results.groups:
        return []
    metrics = results.metrics
    lines = ["", "cumulative coverage by group (Table VI of the paper):"]
    return lines + _group_tables(results.groups, [k for k in ORDER if k in metrics], width)


def _mistakes_table(results: Results, width: int | None) -> list[str]:
    """Whether surprise predicts the model's mistakes (when tests gave labels)."""
    found = mistakes_rows(results)
    if found is None or results.mistakes is None:
        return []
    header, table = found
    if width is not None:
        header, table = _fitted(header, table, results.mistakes, width)
    lines = [""]
    lines += _wrap(
        "does surprise predict this model's mistakes? (labelled inputs; AUC 0.5 = chance, 1 = perfect)", width
    )
    lines += _table([["group", *header[1:]]] + table, right=set(range(1, len(header))), width=width)
    return lines + _indented(results.mistakes.overall.sentences, width)


def _fitted(
    header: list[str], table: list[list[str]], found: Mistakes, width: int
) -> tuple[list[str], list[list[str]]]:
    """The mistakes table made to fit ``width``: the confidence baselines folded into their
    best, the score columns without their unit if still too wide."""
    baselines = [found.labels.get(k) or k for k in found.baselines]
    header, table = _fold_baselines(header, table, baselines)
    return _short_units(header, table, width), table


def _indented(texts: Sequence[str], width: int | None) -> list[str]:
    """Sentences under a table, indented, each wrapped to ``width``."""
    return [line for text in texts for line in _wrap(f"  {text}", width, indent="    ")]


#: how many tests the short "who tests what" line names in each part
WHO_NAMED = 3


def _label(metric: str) -> str:
    """A metric's label (an unknown one's name in capitals)."""
    return LABELS.get(metric, metric.upper())


def _unique(t: TestRow) -> dict[str, int]:
    """The targets of each metric only ``t`` covers (none without covered sets)."""
    return t.unique or {}


def _listed(names: list[str]) -> str:
    more = len(names) - WHO_NAMED
    return ", ".join(names[:WHO_NAMED]) + (f" and {more} more" if more > 0 else "")


def _unique_of(t: TestRow) -> str:
    said = ", ".join(f"{_label(m)} {n}" for m, n in _unique(t).items() if n)
    return f"{t.nodeid} ({said})"


def who_tests_what(results: Results, width: int | None) -> list[str]:
    """Short: the tests covering the most no other test covers, and the redundant tests
    (``TestRow.unique``/``redundant``, from the covered sets); nothing without them."""
    rows = [t for t in results.tests if t.unique is not None]
    if not rows:
        return []
    said = ", ".join(_label(m) for m in dict.fromkeys(m for t in rows for m in _unique(t)))
    return ["", *_wrap(f"who tests what ({said}; targets no other test covers): {_who_parts(rows)}", width)]


def _most_unique_first(t: TestRow) -> tuple[int, str]:
    return (-sum(_unique(t).values()), t.nodeid)


def _who_parts(rows: list[TestRow]) -> str:
    best = sorted((t for t in rows if not t.redundant), key=_most_unique_first)
    parts = [f"most unique: {_listed([_unique_of(t) for t in best])}"] if best else []
    parts.append(f"redundant: {_redundant(rows)}")
    return "; ".join(parts)


def _redundant(rows: list[TestRow]) -> str:
    """The redundant tests, listed, or "none"."""
    redundant = [t.nodeid for t in rows if t.redundant]
    return _listed(redundant) if redundant else "none"


def _ood_table(results: Results, width: int | None) -> list[str]:
    """How well each score tells each group from in-distribution inputs (AUROC, AUPR,
    FPR@95), each group's name on its first row."""
    ood = results.ood
    if ood is None:
        return []
    lines = [""]
    lines += _wrap(
        f"how well does each score tell each group from {ood_reference(ood)}? (AUROC 0.5 = chance, 1 = perfect)",
        width,
    )
    table = ood_rows(ood)
    if table:
        lines += _table([OOD_HEADER, *_first_names(table)], right=set(range(2, len(OOD_HEADER))), width=width)
    return lines + _indented([*ood.sentences, *ood_notes(ood)], width)


def _first_names(table: list[list[str]]) -> list[list[str]]:
    """The rows with each group's name on its first row only."""
    return [row if i == 0 or row[0] != table[i - 1][0] else ["", *row[1:]] for i, row in enumerate(table)]


def _tests_table(results: Results) -> list[str]:
    """Verbose: every test with its inputs, surprise and first-covered targets."""
    lines = ["", "tests (in collection order; 'new' = LSC buckets / NC neurons first covered by the test):"]
    keys = _score_keys(results.tests)
    rows = [
        ["test", "group", "outcome", "inputs"]
        + [f"{SA_LABELS[k]} {s}" for k in keys for s in ("mean", "max")]
        + ["new LSC", "new NC"]
    ]
    rows += [_test_cells(t, keys) for t in results.tests]
    return lines + _table(rows, right=set(range(3, len(rows[0]))))


def _score_keys(tests: list[TestRow]) -> list[str]:
    """The scores some test has a mean of (LSA when none has)."""
    return [k for k in SA_LABELS if any(t.mean.get(k) is not None for t in tests)] or ["lsa"]


def _test_cells(t: TestRow, keys: list[str]) -> list[str]:
    """A test's row: id, group, outcome, inputs, each score's mean and max, what it covered first."""
    scores = [_num(stat.get(k)) for k in keys for stat in (t.mean, t.max)]
    return [t.nodeid, t.group, t.outcome, str(t.inputs), *scores, str(t.new.get("lsc", 0)), str(t.new.get("nc", 0))]


def _kmnc(layer: LayerRow) -> float:
    """A layer's KMNC (0 when it has none): the verbose layer table's order."""
    return layer.coverage.get("kmnc") or 0.0


def _layers_table(results: Results) -> list[str]:
    """Verbose: every coverage layer, least covered first by KMNC."""
    neuron = [k for k in NEURON if k in results.metrics]  # the run's neuron coverages
    rows = [["layer", "neurons"] + [LABELS[k] for k in neuron]]
    for layer in sorted(results.layers, key=_kmnc):
        rows.append([layer.name, str(layer.neurons)] + [_pct(layer.coverage.get(k)) for k in neuron])
    return ["", "layers (least covered first by KMNC):", *_table(rows, right=set(range(1, 2 + len(neuron))))]


def write_terminal(
    results: Results,
    line: Callable[..., None],
    section: Callable[..., None],
    *,
    verbose: bool = False,
    comparison: Comparison | None = None,
) -> None:
    section("pytest-sadl: surprise adequacy and neuron coverage", sep="-")
    for text in render_terminal(results, verbose=verbose, comparison=comparison):
        line(text)
