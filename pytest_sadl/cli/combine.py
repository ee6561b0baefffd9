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

Not combined exactly (said in the file's warnings): the most surprising inputs are the
shards' own lists merged by score (an input fed in two shards may show twice), and the
"does surprise predict mistakes" section, which needs each input's model output, and the
OOD section, whose default reference (the held-out training scores) is in the profile, not
in the files, are left out when the shards have them.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_sadl.covered import Covered, State
from pytest_sadl.errors import ResultsFileError
from pytest_sadl.results import JSON, GroupRow, LayerRow, Results, Scope, TestRow, TopInput
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
    checks = [
        ("pytest-sadl version", first.version, other.version),
        ("model fingerprint", first.model.fingerprint, other.model.fingerprint),
        ("training profile", first.model.profile_fingerprint, other.model.profile_fingerprint),
        ("metrics", sorted(first.metrics), sorted(other.metrics)),
    ]
    for what, x, y in checks:
        if x != y:
            raise ValueError(f"cannot combine {a} and {b}: another {what} ({x} vs {y})")
    diff = _first_difference(first.config.to_dict(), other.config.to_dict())
    if diff is not None:
        raise ValueError(f"cannot combine {a} and {b}: another configuration ({diff})")
    ca, cb = Covered.of(first), Covered.of(other)
    for name, cov in ((a, ca), (b, cb)):
        if cov is None:
            raise ValueError(f"cannot combine {name}: it has no covered sets (written before pytest-sadl had them)")
    assert ca is not None and cb is not None
    if ca.specs != cb.specs:
        raise ValueError(f"cannot combine {a} and {b}: their covered sets are of other targets")


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
        alone = covered.empty()
        for t in members:
            for m, st in t.covered.state(t.row.nodeid).items():
                alone[m] = alone[m].union(st)
                cum[m] = cum[m].union(st)
        inputs = sum(t.row.inputs for t in members)
        out.append(GroupRow(g, len(members), inputs, _values(covered, alone, names), _values(covered, cum, names)))
    return out


def _inputs(tests: list[_Source]) -> dict[str, list[JSON]]:
    keys = list(dict.fromkeys(k for t in tests for k in t.results.inputs))
    out: dict[str, list[JSON]] = {k: [] for k in keys}
    for new_index, t in enumerate(tests):
        rows = t.input_rows()
        for k in keys:
            column = t.results.inputs.get(k)
            if k == "test":
                out[k] += [new_index] * len(rows)
            else:
                out[k] += [None if column is None else column[i] for i in rows]
    return out


def _offsets(tests: list[_Source]) -> dict[tuple[int, int], int]:
    """(a file, its input index) -> the input's index in the combined list."""
    offsets: dict[tuple[int, int], int] = {}
    for t in tests:
        for i in t.input_rows():
            offsets[(id(t.results), i)] = len(offsets)
    return offsets


def _moved(
    top: TopInput, res: Results, where: dict[tuple[int, int], int], offsets: dict[tuple[int, int], int]
) -> TopInput | None:
    """A file's top input with the combined indices; ``None`` when its test was replaced."""
    owner = (id(res), -1 if top.test is None else top.test)
    at = (id(res), -1 if top.input is None else top.input)
    if owner not in where or at not in offsets:
        return None
    tests_of = [where[(id(res), x)] for x in top.tests or [] if (id(res), x) in where]
    return replace(top, input=offsets[at], test=where[owner], tests=tests_of)


def _tops(tests: list[_Source], files: list[Results]) -> list[TopInput]:
    """The shards' most surprising inputs merged by score (indices into the combined lists)."""
    where = {(id(t.results), t.index): n for n, t in enumerate(tests)}
    offsets = _offsets(tests)
    by: dict[str, list[TopInput]] = {}
    for res in files:
        for top in res.top_inputs:
            moved = _moved(top, res, where, offsets)
            if moved is not None:
                by.setdefault(top.by, []).append(moved)
    out: list[TopInput] = []
    for name, items in by.items():
        items.sort(key=lambda x: -(x.scores.get(name) or float("-inf")))
        n = max(sum(1 for x in r.top_inputs if x.by == name) for r in files)
        out += [replace(x, rank=i + 1) for i, x in enumerate(items[:n])]
    return out


def _scope(files: list[Results], recorded: int) -> Scope:
    scopes = [r.scope for r in files if r.scope is not None]
    collected = max((s.collected for s in scopes if s.collected is not None), default=None)
    run = sum(s.run or 0 for s in scopes)
    reasons = [x for s in scopes for x in s.reasons if "deselected" not in x and "--lf" not in x]
    if collected is not None and run < collected:
        reasons.insert(0, f"the combined runs measured {run} of {collected} marked tests")
    return Scope(collected=collected, selected=run, run=run, recorded=recorded, reasons=reasons, runs=len(files))


def _checked(files: list[Results], names: list[str]) -> Covered:
    """The first file's covered sets, once every file is known to combine with it."""
    if not files:
        raise ValueError("nothing to combine: give two results files or more")
    for res, name in zip(files[1:], names[1:], strict=True):
        check_same(files[0], res, (names[0], name))
    covered = Covered.of(files[0])
    if covered is None:
        raise ValueError(f"cannot combine {names[0]}: it has no covered sets (written before pytest-sadl had them)")
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


def _warnings(files: list[Results]) -> list[str]:
    warnings = list(dict.fromkeys(w for r in files for w in r.warnings))
    warnings.append(
        f"combined from {len(files)} runs by sadl combine; the most surprising inputs are the runs' own lists merged"
    )
    if any(r.mistakes is not None for r in files):
        warnings.append(
            "the runs' 'does surprise predict mistakes' sections are not combined (they need each input's output)"
        )
    if any(r.ood is not None for r in files):
        warnings.append(
            "the runs' OOD sections are not combined (their held-out training scores are in the profile, "
            "not in the files): run the suite in one session for it"
        )
    return warnings


def combine(files: list[Results], names: list[str]) -> Results:
    """One run's results over the union of the files' tests (see the module's docstring)."""
    covered = _checked(files, names)
    first = files[0]
    tests = _sources(files)
    metric_names = list(first.metrics)
    union = _union(covered, tests)
    metrics = {m: (covered.metric(m, union[m]) if m in union else first.metrics[m]) for m in metric_names}
    merged_covered = {**(first.covered or {}), "tests": {t.row.nodeid: t.covered.raw[t.row.nodeid] for t in tests}}
    return Results(
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        version=first.version,
        model=first.model,
        config=first.config,
        thresholds=dict(first.thresholds),
        metrics=metrics,
        layers=_layers(first, covered, union),
        groups=_groups(covered, tests, _group_order(metric_names, tests, covered.groups), metric_names),
        tests=_rows(covered, tests),
        inputs=_inputs(tests),
        top_inputs=_tops(tests, files),
        warnings=_warnings(files),
        missing=[m for r in files for m in r.missing],
        stale=[s for r in files for s in r.stale],
        scope=_scope(files, len(tests)),
        covered=merged_covered,
    )


def gate(results: Results, fail_under: str | None, baseline: str | None, compare_fail: str | None) -> list[str]:
    """The failures of ``--fail-under`` and ``--compare``/``--compare-fail``, as the plugin
    judges them (a partial combination does not gate, as a partial run does not)."""
    from pytest_sadl.config import parse_metric_numbers
    from pytest_sadl.engine import check_thresholds
    from pytest_sadl.report.compare import compare, compare_failures
    from pytest_sadl.resultsfile import read_results

    lines: list[str] = []
    if fail_under:
        limits = parse_metric_numbers(fail_under, "--fail-under")
        results.thresholds = limits
        results.failures = check_thresholds(results.metrics, limits, results.n_inputs)
        lines += [f.message for f in results.failures]
    if baseline:
        comp = compare(results, read_results(baseline))
        for w in comp.warnings:
            print(f"warning: {safe(w)}", file=sys.stderr)
        if compare_fail:
            every = [m.metric for m in comp.metrics]
            limits = parse_metric_numbers(compare_fail, "--compare-fail", drops=True, every=every)
            lines += compare_failures(comp, limits)
    scope = results.scope
    if lines and scope is not None and scope.partial:
        results.scope = replace(scope, gated=False, ungated=lines)
        results.failures = []
        return []
    return lines


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
    said = ", ".join(f"{m.upper()} {100 * (x.value or 0):.2f}%" for m, x in combined.metrics.items() if x.measured)
    print(f"combined {len(args.results)} runs, {len(combined.tests)} tests: {said}; wrote {path}")
    if combined.scope is not None and combined.scope.partial:
        from pytest_sadl.report.partial import partial_line, ungated_lines

        for line in [partial_line(combined), *ungated_lines(combined)]:
            if line:
                print(safe(line))
    for line in failures:
        print(f"FAIL {safe(line)}")
    return EXIT_FAILED if failures else EXIT_OK


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
