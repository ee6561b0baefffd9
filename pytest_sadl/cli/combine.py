"""``sadl combine A.json B.json ... -o out.json``: the results of shards (``-k`` parts,
pytest-split groups, matrix jobs, a failed shard's rerun) as those of one run over the
union of their tests.

Surprise coverage and the neuron coverages are unions of sets, and each results file
carries each test's sets (:mod:`pytest_sadl.covered`), so the combined metrics, per-layer
values, groups (alone and cumulatively, Table VI), per-test rows (what each test covered
first, in node-id order) and per-input scores are exactly those of one run: scoring does
not depend on which inputs share a batch (``criteria.checks.by_fixed_rows``). A test in
several files counts once, as in the last file given (a rerun's). What cannot be
combined is refused in one line naming the difference: another model, training profile,
configuration (layers, bounds, options), metrics or pytest-sadl version, or a file
without covered sets.

The most surprising inputs and the "does surprise predict mistakes" section are made
again over the combined inputs, by the engine's own functions, from what each input's
row carries (its scores, predicted class, label, digest, and a classifier's confidence
baselines or a regression model's output): those of one run too. Each top input's
thumbnail comes from the run that listed it (an input in the combined top is in its own
run's top).

Not combined (said in the file's warnings): the OOD section, whose default reference
(the held-out training scores) is in the profile, not in the files.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from pytest_sadl.covered import Covered, State, no_sets_message, with_unique
from pytest_sadl.criteria.registry import SA_LABELS
from pytest_sadl.errors import ResultsFileError
from pytest_sadl.results import JSON, GroupRow, LayerRow, Mistakes, Results, Scope, TestRow, TopInput
from pytest_sadl.text import terminal as safe

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _first_difference(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    for key in dict.fromkeys([*a, *b]):
        if a.get(key) != b.get(key):
            return f"{key} {a.get(key)!r} vs {b.get(key)!r}"
    return None


def check_same(first: Results, other: Results, names: tuple[str, str]) -> None:
    """Raise :class:`ValueError` naming the first difference that forbids combining."""
    a, b = names
    diff = _identity_difference(first, other)
    if diff is not None:
        raise ValueError(f"cannot combine {a} and {b}: another {diff}")
    if _covered_of(first, a).specs != _covered_of(other, b).specs:
        raise ValueError(f"cannot combine {a} and {b}: their covered sets are of other targets")


def _identity_difference(first: Results, other: Results) -> str | None:
    """The first of version, model, profile, metrics and configuration that differs, as
    "what (this vs that)"; ``None`` when none does."""
    checks = [
        ("pytest-sadl version", first.version, other.version),
        ("model fingerprint", first.model.fingerprint, other.model.fingerprint),
        ("training profile", first.model.profile_fingerprint, other.model.profile_fingerprint),
        ("metrics", sorted(first.metrics), sorted(other.metrics)),
    ]
    for what, x, y in checks:
        if x != y:
            return f"{what} ({x} vs {y})"
    diff = _first_difference(first.config.to_dict(), other.config.to_dict())
    return None if diff is None else f"configuration ({diff})"


def _covered_of(results: Results, name: str) -> Covered:
    """The covered sets of the file ``name``; :class:`ValueError` when it has none."""
    covered = Covered.of(results)
    if covered is None:
        raise ValueError(f"cannot combine: {no_sets_message(name)}")
    return covered


class _Source:
    """One file's test: its row, covered sets and inputs."""

    def __init__(self, results: Results, covered: Covered, index: int) -> None:
        self.results, self.covered, self.index = results, covered, index
        self.row = results.tests[index]

    def input_rows(self) -> list[int]:
        return [i for i, t in enumerate(self.results.inputs.get("test", [])) if t == self.index]


def _uncombinable(first: Results, covered: Covered) -> list[str]:
    return [m for m, metric in first.metrics.items() if metric.measured and m not in covered.specs]


def _group_order(names: list[str], tests: list[_Source], defined: list[str]) -> list[str]:
    present = list(dict.fromkeys(t.row.group for t in tests))
    return [g for g in defined if g in present] + [g for g in present if g not in defined]


def _values(covered: Covered, union: dict[str, State], names: list[str]) -> dict[str, float | None]:
    return {m: (covered.value(m, union[m]) if m in union else None) for m in names}


def _rows(covered: Covered, tests: list[_Source]) -> list[TestRow]:
    cum = covered.empty()
    rows = []
    for t in tests:
        state = t.covered.state(t.row.nodeid)
        new = {m: cum[m].new_in(state[m]) for m in covered.specs if m in t.row.new}
        for m in covered.specs:
            cum[m] = cum[m].union(state[m])
        rows.append(replace(t.row, new={**t.row.new, **new}))
    return rows


def _groups(covered: Covered, tests: list[_Source], order: list[str], names: list[str]) -> list[GroupRow]:
    cum = covered.empty()
    out = []
    for g in order:
        members = [t for t in tests if t.row.group == g]
        alone = _union(covered, members)
        cum = {m: cum[m].union(st) for m, st in alone.items()}
        inputs = sum(t.row.inputs for t in members)
        out.append(GroupRow(g, len(members), inputs, _values(covered, alone, names), _values(covered, cum, names)))
    return out


def _inputs(tests: list[_Source]) -> dict[str, list[JSON]]:
    keys = list(dict.fromkeys(k for t in tests for k in t.results.inputs))
    out: dict[str, list[JSON]] = {k: [] for k in keys}
    for new_index, t in enumerate(tests):
        rows = t.input_rows()
        for k in keys:
            out[k] += [new_index] * len(rows) if k == "test" else _picked(t.results.inputs.get(k), rows)
    return out


def _picked(column: list[JSON] | None, rows: list[int]) -> list[JSON]:
    """``column``'s values at ``rows`` (all ``None`` for a column the run lacks)."""
    return [None if column is None else column[i] for i in rows]


def _floats(column: list[JSON] | None, n: int) -> np.ndarray:
    """A numeric column (``None`` as NaN; a missing column: all NaN)."""
    if column is None:
        return np.full(n, np.nan)
    return np.array([np.nan if v is None else v for v in column], dtype=np.float64)


def _scores(inputs: dict[str, list[JSON]]) -> dict[str, np.ndarray]:
    """Each score the run computed (a column not all null), in the inputs' order."""
    n = len(inputs.get("test", []))
    keys = [k for k in inputs if k in SA_LABELS and any(v is not None for v in inputs[k])]
    return {k: _floats(inputs[k], n) for k in keys}


def _same(inputs: dict[str, list[JSON]]) -> np.ndarray:
    """Each input's first copy (by digest; itself where the runs kept no digests), as the
    engine's ``Joined.same_input``."""
    digests = inputs.get("digest")
    n = len(inputs.get("test", []))
    if digests is None or any(d is None for d in digests):
        return np.arange(n)
    values = np.array([int(str(d), 16) for d in digests], dtype=np.uint64)
    _, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    same: np.ndarray = first[inverse.reshape(-1)]
    return same


def _offsets(tests: list[_Source]) -> dict[tuple[int, int], int]:
    """Each input's index in the combined inputs, by (its run's id, its index in its run)."""
    offsets: dict[tuple[int, int], int] = {}
    for t in tests:
        for i in t.input_rows():
            offsets[(id(t.results), i)] = len(offsets)
    return offsets


def _shown(tests: list[_Source]) -> dict[int, tuple[Any, Any]]:
    """The thumbnail and text of every input a run listed among its top inputs, by its
    index in the combined inputs."""
    offsets = _offsets(tests)
    shown: dict[int, tuple[Any, Any]] = {}
    for res in {id(t.results): t.results for t in tests}.values():
        for top in res.top_inputs:
            at = offsets.get((id(res), -1 if top.input is None else top.input))
            if at is not None:
                shown[at] = (top.image, top.text)
    return shown


def _tops(first: Results, tests: list[_Source], inputs: dict[str, list[JSON]]) -> list[TopInput]:
    """The most surprising inputs of one run over the combined inputs (``engine.rows.top_of``
    on their columns; each one's thumbnail from the run that listed it)."""
    from pytest_sadl.engine.rows import top_of

    shown = _shown(tests)
    owner = np.array(inputs.get("test", []), dtype=np.int64)
    pred = np.array(inputs["pred"], dtype=np.int64) if first.model.classifier and inputs.get("pred") else None
    keys = [k for k in inputs if k in SA_LABELS]
    return top_of(_scores(inputs), _same(inputs), owner, pred, keys, lambda i: shown.get(i, (None, None)))


def _labels(inputs: dict[str, list[JSON]], same: np.ndarray) -> list[JSON] | None:
    """Each input's label; an input a run left unlabelled takes its copy's label (the run
    that labelled it), as one run matches labels to inputs by digest."""
    labels = inputs.get("label")
    if labels is None:
        return None
    by_copy: dict[int, JSON] = {}
    for i, v in enumerate(labels):
        if v is not None:
            by_copy.setdefault(int(same[i]), v)
    return [v if v is not None else by_copy.get(int(same[i])) for i, v in enumerate(labels)]


def _mistakes(first: Results, rows: list[TestRow], inputs: dict[str, list[JSON]]) -> Mistakes | None:
    """The "does surprise predict mistakes" section of one run over the combined inputs,
    from their scores, labels, predictions and confidence baselines (or outputs)."""
    from pytest_sadl.engine.rows import mistakes_of

    labels = _labels(inputs, _same(inputs))
    if labels is None or all(v is None for v in labels):
        return None
    inputs["label"] = labels
    groups = [rows[int(str(t))].group for t in inputs.get("test", [])]
    return mistakes_of(_analysis(bool(first.model.classifier), inputs, labels, groups))


def _analysis(classifier: bool, inputs: dict[str, list[JSON]], labels: list[JSON], groups: list[str]) -> Any:
    """``criteria.mistakes.analyse`` of the combined columns: a classifier's predictions and
    confidence baselines, a regression model's outputs."""
    from pytest_sadl.criteria.mistakes import analyse

    if not classifier:
        output = np.array(inputs.get("output") or [], dtype=np.float64)
        return analyse(_scores(inputs), labels, classifier=False, output=output, groups=groups)
    pred = np.array([-1 if p is None else p for p in inputs.get("pred", [])], dtype=np.int64)
    confidence = _confidence(inputs, len(labels))
    return analyse(_scores(inputs), labels, classifier=True, pred=pred, confidence=confidence or None, groups=groups)


def _confidence(inputs: dict[str, list[JSON]], n: int) -> dict[str, np.ndarray]:
    """The confidence baselines the runs kept for each input (``baseline_<name>`` columns)."""
    from pytest_sadl.criteria.mistakes import BASELINES

    return {k: _floats(inputs[f"baseline_{k}"], n) for k in BASELINES if f"baseline_{k}" in inputs}


def _scope(files: list[Results], recorded: int) -> Scope:
    """The combined runs' scope: the most tests any run collected, the tests they ran, and
    why the union is partial (a shard's own selection is not a reason)."""
    scopes = [r.scope for r in files if r.scope is not None]
    collected = _most_collected(scopes)
    run = sum(s.run or 0 for s in scopes)
    reasons = _partial_reasons(collected, run) + [x for s in scopes for x in s.reasons if _kept_reason(x)]
    return Scope(collected=collected, selected=run, run=run, recorded=recorded, reasons=reasons, runs=len(files))


def _most_collected(scopes: list[Scope]) -> int | None:
    """The most marked tests a run collected (``None`` when no run says: ``--lf``)."""
    return max((s.collected for s in scopes if s.collected is not None), default=None)


def _kept_reason(reason: str) -> bool:
    """Whether a run's reason for being partial holds for the union (a shard's deselection
    or ``--lf`` does not)."""
    return "deselected" not in reason and "--lf" not in reason


def _partial_reasons(collected: int | None, run: int) -> list[str]:
    if collected is not None and run < collected:
        return [f"the combined runs measured {run} of {collected} marked tests"]
    return []


def _checked(files: list[Results], names: list[str]) -> Covered:
    """The first file's covered sets, once every file is known to combine with it."""
    if not files:
        raise ValueError("nothing to combine: give two results files or more")
    for res, name in zip(files[1:], names[1:], strict=True):
        check_same(files[0], res, (names[0], name))
    covered = Covered.of(files[0])
    if covered is None:
        raise ValueError(f"cannot combine: {no_sets_message(names[0])}")
    left = _uncombinable(files[0], covered)
    if left:
        raise ValueError(
            f"cannot combine {', '.join(left)}: not a union of covered sets; leave it out of --sadl-metrics"
        )
    return covered


def _sources(files: list[Results]) -> list[_Source]:
    """Every test once (the last file's), by node id."""
    chosen: dict[str, _Source] = {}
    for res in files:
        cov = Covered.of(res)
        assert cov is not None  # checked
        for i, row in enumerate(res.tests):
            chosen[row.nodeid] = _Source(res, cov, i)
    return [chosen[k] for k in sorted(chosen)]


def _union(covered: Covered, tests: list[_Source]) -> dict[str, State]:
    union = covered.empty()
    for t in tests:
        for m, st in t.covered.state(t.row.nodeid).items():
            union[m] = union[m].union(st)
    return union


def _layers(first: Results, covered: Covered, union: dict[str, State]) -> list[LayerRow]:
    per = {m: covered.per_layer(m, st) for m, st in union.items()}
    return [
        LayerRow(row.name, row.neurons, {m: per[m][i] for m in row.coverage if m in per})
        for i, row in enumerate(first.layers)
    ]


def _without_digests(results: Results) -> bool:
    """Whether a run has a mistakes section but no input digests (a file of an older version)."""
    return results.mistakes is not None and "digest" not in results.inputs


def _warnings(files: list[Results]) -> list[str]:
    warnings = list(dict.fromkeys(w for r in files for w in r.warnings))
    if any(_without_digests(r) for r in files):
        warnings.append(
            "the mistakes section and the most surprising inputs are recomputed from inputs without digests "
            "(files of a version before them): copies of an input in two runs count as two inputs"
        )
    if any(r.ood is not None for r in files):
        warnings.append(
            "the runs' OOD sections are not combined (their held-out training scores are in the profile, "
            "not in the files): run the suite in one session for it"
        )
    return warnings


def _merged_covered(first: Results, tests: list[_Source]) -> dict[str, Any]:
    """The combined ``covered`` section: the first file's, with every chosen test's sets."""
    return {**(first.covered or {}), "tests": {t.row.nodeid: t.covered.raw[t.row.nodeid] for t in tests}}


def combine(files: list[Results], names: list[str]) -> Results:
    """One run's results over the union of the files' tests (see the module's docstring)."""
    covered = _checked(files, names)
    first = files[0]
    tests = _sources(files)
    metric_names = list(first.metrics)
    union = _union(covered, tests)
    metrics = {m: (covered.metric(m, union[m]) if m in union else first.metrics[m]) for m in metric_names}
    merged_covered = _merged_covered(first, tests)
    rows = with_unique(_rows(covered, tests), Covered.of_section(merged_covered))
    inputs = _inputs(tests)
    return Results(
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        version=first.version,
        model=first.model,
        config=first.config,
        thresholds=dict(first.thresholds),
        metrics=metrics,
        layers=_layers(first, covered, union),
        groups=_groups(covered, tests, _group_order(metric_names, tests, covered.groups), metric_names),
        tests=rows,
        inputs=inputs,
        top_inputs=_tops(first, tests, inputs),
        mistakes=_mistakes(first, rows, inputs),
        warnings=_warnings(files),
        missing=[m for r in files for m in r.missing],
        stale=[s for r in files for s in r.stale],
        scope=_scope(files, len(tests)),
        covered=merged_covered,
    )


def gate(results: Results, fail_under: str | None, baseline: str | None, compare_fail: str | None) -> list[str]:
    """The failures of ``--fail-under`` and ``--compare``/``--compare-fail``, as the plugin
    judges them (a partial combination does not gate, as a partial run does not)."""
    lines = _threshold_failures(results, fail_under) if fail_under else []
    if baseline:
        lines += _compare_failures(results, baseline, compare_fail)
    scope = results.scope
    if lines and scope is not None and scope.partial:
        results.scope = replace(scope, gated=False, ungated=lines)
        results.failures = []
        return []
    return lines


def _threshold_failures(results: Results, fail_under: str) -> list[str]:
    """``--fail-under``'s failures, set on ``results`` as the plugin sets them."""
    from pytest_sadl.config import parse_metric_numbers
    from pytest_sadl.engine import check_thresholds

    limits = parse_metric_numbers(fail_under, "--fail-under")
    results.thresholds = limits
    results.failures = check_thresholds(results.metrics, limits, results.n_inputs)
    return [f.message for f in results.failures]


def _compare_failures(results: Results, baseline: str, compare_fail: str | None) -> list[str]:
    """The comparison's warnings (on stderr) and ``--compare-fail``'s failures."""
    from pytest_sadl.config import parse_metric_numbers
    from pytest_sadl.report.compare import compare, compare_failures
    from pytest_sadl.resultsfile import read_results

    comp = compare(results, read_results(baseline))
    for w in comp.warnings:
        print(f"warning: {safe(w)}", file=sys.stderr)
    if not compare_fail:
        return []
    every = [m.metric for m in comp.metrics]
    return compare_failures(comp, parse_metric_numbers(compare_fail, "--compare-fail", drops=True, every=every))


def cmd_combine(args: argparse.Namespace) -> int:
    from pytest_sadl.resultsfile import read_results

    prog = "sadl combine"
    try:
        files = [read_results(p) for p in args.results]
        combined = combine(files, [str(p) for p in args.results])
        failures = gate(combined, args.fail_under, args.compare, args.compare_fail)
    except (ResultsFileError, ValueError) as exc:
        print(f"{prog}: error: {safe(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    from pytest_sadl.results import write_json

    path = write_json(combined.to_dict(), Path(args.output))
    print(f"combined {len(args.results)} runs, {len(combined.tests)} tests: {_measured(combined)}; wrote {path}")
    _print_partial(combined)
    for line in failures:
        print(f"FAIL {safe(line)}")
    return EXIT_FAILED if failures else EXIT_OK


def _measured(results: Results) -> str:
    """The measured metrics in one line ("LSC 26.10%, NC 50.00%")."""
    return ", ".join(f"{m.upper()} {100 * (x.value or 0):.2f}%" for m, x in results.metrics.items() if x.measured)


def _print_partial(results: Results) -> None:
    """A partial combination's line and the gates it did not apply."""
    if results.scope is None or not results.scope.partial:
        return
    from pytest_sadl.report.partial import partial_notes

    for line in partial_notes(results):
        print(safe(line))


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "combine",
        help="combine the results of shards into one run's results",
        description="Combine results files of runs of the same model, profile and options "
        "(shards, matrix jobs, reruns) into the results of one run over all their tests.",
    )
    p.add_argument("results", nargs="+", metavar="RUN.json", help="results files (a test in several: the last)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.json", help="the combined results file")
    p.add_argument("--fail-under", metavar="SPEC", help="e.g. lsc:30,nc:50: exit 1 below a percentage")
    p.add_argument("--compare", metavar="BASELINE.json", help="compare the combined run with a baseline")
    p.add_argument("--compare-fail", metavar="SPEC", help="e.g. lsc:-2: exit 1 on a drop beyond it")
    p.set_defaults(func=cmd_combine)
