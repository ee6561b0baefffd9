"""The ``sadl report`` and ``sadl compare`` subcommands.

The ``sadl`` main (:mod:`pytest_sadl.cli.main`) calls :func:`register` on its argparse
subparsers; every subcommand stores its handler as ``func``, which takes the parsed
namespace and returns the exit status::

    parser = argparse.ArgumentParser(prog="sadl")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    return args.func(args)

Exit status: 0 on success; 1 when ``sadl compare --fail`` limits are broken; 2 for a
file that cannot be read (not a results file, a newer schema) or a bad option value,
with one line on stderr naming the problem.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

from pytest_sadl.criteria.registry import METRICS
from pytest_sadl.errors import ResultsFileError
from pytest_sadl.report.compare import (
    Comparison,
    compare,
    compare_failures,
    parse_compare_fail,
)
from pytest_sadl.resultsfile import read_results
from pytest_sadl.text import terminal as safe

__all__ = ["register", "main", "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _error(prog: str, message: str) -> int:
    print(f"{prog}: error: {safe(message)}", file=sys.stderr)
    return EXIT_USAGE


def _warn(prog: str, notes: list[str]) -> None:
    for note in notes:
        print(f"{prog}: warning: {safe(note)}", file=sys.stderr)


def _print_comparison(comp: Comparison) -> None:
    print(f"{'metric':<6} {'baseline':>9} {'current':>9} {'change':>9}")
    for m in comp.metrics:
        base = "n/a" if m.baseline is None else f"{m.baseline:.2f}%"
        cur = "n/a" if m.current is None else f"{m.current:.2f}%"
        change = m.status if m.delta is None else f"{m.delta:+.2f}"
        print(f"{m.label:<6} {base:>9} {cur:>9} {change:>9}")
    for w in comp.warnings:
        print(f"warning: {safe(w)}")


def cmd_report(args: argparse.Namespace) -> int:
    """``sadl report RUN.json --html DIR [--markdown PATH] [--badge DIR] [--compare BASE]``."""
    prog = "sadl report"
    if not any(getattr(args, option) for option, _ in _WRITERS):
        return _error(prog, "nothing to write: give --html DIR, --markdown PATH, --badge DIR and/or --pr-comment PATH")
    notes: list[str] = []  # metric names the files hold that this version ignores
    try:
        results, baseline, comparison = _read_with_baseline(args, notes)
    except ResultsFileError as exc:
        return _error(prog, str(exc))
    _warn(prog, notes)
    try:
        for written in _write_outputs(args, results, comparison, baseline):
            print(f"wrote {written}")
    except (OSError, ValueError) as exc:
        return _error(prog, str(exc))
    for w in comparison.warnings if comparison is not None else []:
        print(f"warning: {safe(w)}", file=sys.stderr)
    return EXIT_OK


def _read_with_baseline(args: argparse.Namespace, notes: list[str]) -> tuple[Any, Any, Any]:
    """The run's results, the ``--compare`` baseline's (or ``None``) and their comparison
    (or ``None``); a :class:`ResultsFileError` when either file cannot be read."""
    from pytest_sadl.covered import fill_unique  # NumPy: not imported for ``sadl report --help``

    results = read_results(args.results, notes)
    fill_unique(results)
    if not args.compare:
        return results, None, None
    baseline = read_results(args.compare, notes)
    return results, baseline, compare(results, baseline)


def _write_outputs(args: argparse.Namespace, results: Any, comparison: Any, baseline: Any) -> Iterator[Any]:
    """Write each file ``sadl report`` was asked for (HTML, Markdown, PR comment, badges),
    in that order, yielding each one's path as it is written."""
    for option, write in _WRITERS:
        if getattr(args, option):
            yield write(args, results, comparison, baseline)


def _write_html(args: argparse.Namespace, results: Any, comparison: Any, baseline: Any) -> Any:
    """``--html DIR``: the page."""
    from pytest_sadl.report.html import write_html

    return write_html(results, args.html, comparison=comparison)


def _write_markdown(args: argparse.Namespace, results: Any, comparison: Any, baseline: Any) -> Any:
    """``--markdown PATH``: the summary."""
    from pytest_sadl.report.markdown import write_markdown

    return write_markdown(results, args.markdown, comparison=comparison)


def _write_pr_comment(args: argparse.Namespace, results: Any, comparison: Any, baseline: Any) -> Any:
    """``--pr-comment PATH``: the pull-request comment."""
    from pytest_sadl.report.prcomment import write_pr_comment

    return write_pr_comment(results, args.pr_comment, comparison=comparison, baseline=baseline)


def _write_badge(args: argparse.Namespace, results: Any, comparison: Any = None, baseline: Any = None) -> Any:
    """``--badge DIR``: one metric's badge (``--badge-metric``), else every metric's."""
    from pytest_sadl.report.badge import write_badge, write_badges

    if args.badge_metric:
        return write_badge(results, args.badge, args.badge_metric)
    return write_badges(results, args.badge)


#: ``sadl report``'s outputs in the order they are written: the option naming each and its writer.
_WRITERS: tuple[tuple[str, Callable[[argparse.Namespace, Any, Any, Any], Any]], ...] = (
    ("html", _write_html),
    ("markdown", _write_markdown),
    ("pr_comment", _write_pr_comment),
    ("badge", _write_badge),
)


def cmd_compare(args: argparse.Namespace) -> int:
    """``sadl compare CURRENT.json BASELINE.json [--fail=lsc:-2] [--json]``."""
    prog = "sadl compare"
    try:
        limits = parse_compare_fail(args.fail) if args.fail is not None else {}
    except ValueError as exc:
        return _error(prog, _as_fail(str(exc)))
    notes: list[str] = []
    try:
        comp = compare(read_results(args.current, notes), read_results(args.baseline, notes))
    except ResultsFileError as exc:
        return _error(prog, str(exc))
    _warn(prog, notes)
    if limits:  # all:-1 means every metric the two runs have, not every registered one
        limits = parse_compare_fail(args.fail, every=[m.metric for m in comp.metrics])
    failures = [_as_fail(f) for f in compare_failures(comp, limits)]
    _print_compared(comp, failures, as_json=args.json)
    return EXIT_FAILED if failures else EXIT_OK


def _as_fail(text: str) -> str:
    """The plugin's ``--sadl-compare-fail`` in a message, as ``sadl compare`` spells it (``--fail``)."""
    return text.replace("--sadl-compare-fail", "--fail")


def _print_compared(comp: Any, failures: list[str], *, as_json: bool) -> None:
    """``sadl compare``'s output: the comparison and its failures, as JSON or as lines."""
    if as_json:
        doc: dict[str, Any] = comp.to_dict()
        doc["failures"] = failures
        print(json.dumps(doc, indent=2))
        return
    _print_comparison(comp)
    for f in failures:
        print(f"FAILED: {safe(f)}")


def register(subparsers: Any) -> None:
    """Add ``report`` and ``compare`` to ``subparsers`` (from ``add_subparsers()``)."""
    rep = subparsers.add_parser(
        "report",
        help="render a saved results JSON as HTML, Markdown or a badge",
        description="Render a results file written by `pytest --sadl-report=json` as a "
        "self-contained HTML report, a Markdown summary and/or a badge JSON.",
    )
    rep.add_argument("results", metavar="RUN.json", help="results file of a run")
    rep.add_argument("--html", metavar="DIR", help="write DIR/index.html")
    rep.add_argument(
        "--markdown", metavar="PATH", help="write a Markdown summary (appends when PATH is $GITHUB_STEP_SUMMARY)"
    )
    rep.add_argument(
        "--badge",
        metavar="DIR",
        help="write one shields.io endpoint file per metric into DIR "
        "(sadl-badge-lsc.json, ...); with --badge-metric, the one file DIR names",
    )
    rep.add_argument(
        "--badge-metric",
        metavar="METRIC",
        choices=METRICS,
        default=None,
        help=f"write one metric's endpoint document to the --badge path ({', '.join(METRICS)})",
    )
    rep.add_argument(
        "--compare", metavar="BASELINE.json", help="show the change of every metric against a baseline run"
    )
    rep.add_argument(
        "--pr-comment",
        metavar="PATH",
        help="write a compact pull-request comment (Markdown, starting with the hidden marker "
        "<!-- pytest-sadl --> that a CI step finds to update it in place)",
    )
    rep.set_defaults(func=cmd_report)

    cmp_ = subparsers.add_parser(
        "compare",
        help="compare a run with a baseline run, optionally failing on a drop",
        description="Print the change of every metric (in percentage points) between two "
        "results files; with --fail, exit 1 when a metric drops by more than allowed.",
    )
    cmp_.add_argument("current", metavar="CURRENT.json", help="results file of this run")
    cmp_.add_argument("baseline", metavar="BASELINE.json", help="results file to compare with")
    cmp_.add_argument(
        "--fail",
        metavar="METRIC:POINTS",
        default=None,
        help="e.g. lsc:-2,dsc:-1: fail when LSC drops by more than 2 points or "
        "DSC by more than 1 (all:-1 for every metric)",
    )
    cmp_.add_argument("--json", action="store_true", help="print the comparison as JSON")
    cmp_.set_defaults(func=cmd_compare)


def main(argv: list[str] | None = None) -> int:
    """A standalone ``report``/``compare`` entry point (the ``sadl`` main has more)."""
    parser = argparse.ArgumentParser(prog="sadl")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    return func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
