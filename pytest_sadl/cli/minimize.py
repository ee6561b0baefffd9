"""``sadl minimize RESULTS --metrics lsc,dsc,nc``: which tests earn their time.

From each test's covered sets (:mod:`pytest_sadl.covered`, whose :func:`~pytest_sadl.covered.minimize`
the plugin's reports use too):

* per test, what it covers that no other test does (``unique``, per metric: LSC/DSC
  buckets, NC neurons, KMNC sections), and whether it is ``redundant`` for the chosen
  metrics (it covers nothing the other tests do not);
* a small set of tests that keeps the run's coverage of the chosen metrics: a *greedy*
  set cover (take the test that adds the most targets not yet covered, ties by node id,
  until every target the run covered is), as node ids a user can hand to pytest. Greedy
  set cover is within a factor ``ln(targets) + 1`` of the smallest set, not always the
  smallest: it is what this command promises.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pytest_sadl.covered import Covered, Minimized, minimize, no_sets_message
from pytest_sadl.errors import ResultsFileError
from pytest_sadl.text import terminal as safe

EXIT_OK, EXIT_USAGE = 0, 2
DEFAULT = ("lsc", "dsc", "nc")


def terminal_lines(result: Minimized, total_tests: int) -> list[str]:
    """The short summary: the cover, then the redundant tests."""
    lines = [
        f"{len(result.keep)} of {total_tests} tests keep the coverage of "
        f"{', '.join(m.upper() for m in result.metrics)} (greedy set cover):"
    ]
    lines += [f"  {t}" for t in result.keep]
    redundant = result.redundant
    if redundant:
        lines.append(f"{len(redundant)} redundant (cover nothing the others do not): " + ", ".join(redundant))
    return [safe(line) for line in lines]


_SORT = (
    "document.querySelectorAll('th').forEach((th,i)=>th.onclick=()=>{const b=th.closest('table').tBodies[0];"
    "const rows=[...b.rows];const num=i>0;const k=r=>num?+r.cells[i].dataset.v:r.cells[i].textContent;"
    "const d=th.dataset.d=th.dataset.d==='1'?'-1':'1';rows.sort((x,y)=>(k(x)>k(y)?1:k(x)<k(y)?-1:0)*d);"
    "rows.forEach(r=>b.appendChild(r));});"
)


def _flag_cell(on: bool) -> str:
    return f"<td data-v='{int(on)}'>{'yes' if on else ''}</td>"


def _html_row(result: Minimized, test: str, unique: dict[str, int]) -> str:
    """A test's row: its id, unique targets per metric, and whether it is redundant and kept."""
    from html import escape

    cells = "".join(f'<td data-v="{unique[m]}">{unique[m]}</td>' for m in result.metrics)
    return f"<tr><td>{escape(test)}</td>{cells}{_flag_cell(not any(unique.values()))}{_flag_cell(test in result.keep)}</tr>"


def render_html(result: Minimized) -> str:
    """A self-contained page: each test's unique targets per metric, redundant and kept
    flags, sortable by any column (every text escaped)."""
    from html import escape

    head = "".join(f"<th>unique {escape(m.upper())}</th>" for m in result.metrics)
    rows = [_html_row(result, t, u) for t, u in result.unique.items()]
    title = f"{len(result.keep)} of {len(result.unique)} tests keep the coverage (greedy set cover)"
    return (
        "<!doctype html><meta charset='utf-8'><title>pytest-sadl: which tests earn their time</title>"
        "<style>body{font:14px sans-serif}td,th{padding:2px 8px;text-align:right}td:first-child{text-align:left}"
        "th{cursor:pointer}</style>"
        f"<h1>{escape(title)}</h1><table><thead><tr><th>test</th>{head}<th>redundant</th><th>kept</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table><script>{_SORT}</script>\n"
    )


def cmd_minimize(args: argparse.Namespace) -> int:
    from pytest_sadl.resultsfile import read_results

    prog = "sadl minimize"
    metrics = [m.strip().lower() for m in args.metrics.split(",") if m.strip()]
    try:
        covered = _covered(read_results(args.results), str(args.results))
        result = minimize(covered, metrics)
    except (ResultsFileError, ValueError) as exc:
        print(f"{prog}: error: {safe(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    if args.html:
        from pytest_sadl.atomic import atomic_write_text

        print(f"wrote {atomic_write_text(args.html, render_html(result))}", file=sys.stderr)
    _print_result(args, result, len(covered.tests))
    return EXIT_OK


def _covered(results: Any, name: str) -> Covered:
    """The results' covered sets; ValueError naming the file when it has none."""
    covered = Covered.of(results)
    if covered is None:
        raise ValueError(no_sets_message(name))
    return covered


def _print_result(args: argparse.Namespace, result: Minimized, total_tests: int) -> None:
    """The cover as JSON (``--json``), node ids (``--node-ids``) or the short summary."""
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    elif args.node_ids:
        print("\n".join(result.keep))
    else:
        print("\n".join(terminal_lines(result, total_tests)))


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "minimize",
        help="the fewest tests that keep a run's coverage (greedy set cover)",
        description="From a results file's covered sets: each test's unique coverage, the redundant "
        "tests, and a greedy set cover of the chosen metrics as node ids for pytest.",
    )
    p.add_argument("results", metavar="RUN.json", help="a results file (or a combined one)")
    p.add_argument("--metrics", default=",".join(DEFAULT), help="comma-separated, default lsc,dsc,nc")
    p.add_argument("--html", metavar="PATH", help="also write each test's unique coverage as a sortable HTML page")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the cover and each test's unique coverage as JSON")
    out.add_argument("--node-ids", action="store_true", help="print only the kept node ids, one a line")
    p.set_defaults(func=cmd_minimize)
