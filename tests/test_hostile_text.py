"""Text from users through every report (issue 34): group names, test ids, layer and model
names and warnings holding control characters, a CR/LF forging a table row, a right-to-left
override, NUL, ``@mentions``, pipes, backticks and HTML. The terminal shows control
characters escaped and keeps one row per row; the Markdown summary has no live mention,
no bidi override, no NUL and no line break in a cell; HTML stays escaped; JSON keeps the
text exact. Rendered from a results document, and end to end through a real pytest run."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_sadl.report.html import render_html
from pytest_sadl.report.markdown import render_markdown
from pytest_sadl.report.terminal import render_terminal
from pytest_sadl.results import Results
from pytest_sadl.text import markdown, terminal

try:
    from tests.test_plugin import _warm_imports, project, run  # noqa: F401  (fixtures)
except ImportError:  # pragma: no cover - tests/ itself on sys.path
    from test_plugin import _warm_imports, project, run  # type: ignore[no-redef]  # noqa: F401

DATA = Path(__file__).parent / "data"

CORPUS = [
    "\x1b[2J\x1b[Hcleared",
    "\x1b[31mred\x1b[0m",
    "g\r\nFAKE: all good | 100%",
    "abc\u202edcba",
    "nul\x00byte",
    "@octocat and @org/team",
    "pipe|cell",
    "back`tick`",
    "<img src=x onerror=alert(1)>",
    "tab\tvt\x0bff\x0c",
    "del\x7f csi\x9b2J",
    "line\u2028sep\u2029para",
    "isolate\u2066x\u2069",
]
#: What must never reach a terminal or a Markdown summary raw.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
LIVE_MENTION = re.compile(r"(?<![\w`])@[A-Za-z0-9]")


@pytest.mark.parametrize("text", CORPUS)
def test_terminal_text_is_one_line_with_every_control_escaped(text):
    safe = terminal(text)
    assert not UNSAFE.search(safe) and "\n" not in safe and "\t" not in safe, repr(safe)
    assert terminal(safe) == safe  # made safe once: unchanged by a second pass


def test_terminal_text_shows_what_it_escaped_as_python_writes_it():
    assert terminal("\x1b[2J") == "\\x1b[2J"
    assert terminal("a\r\nb\tc\x00\x7f\x9b") == "a\\r\\nb\\tc\\x00\\x7f\\x9b"
    assert terminal("x\u202ey\u2028") == "x\\u202ey\\u2028"
    assert terminal("café 数字 ✅") == "café 数字 ✅"


@pytest.mark.parametrize("text", CORPUS)
def test_markdown_text_has_no_live_mention_bidi_nul_or_line_break(text):
    safe = markdown(text)
    assert not UNSAFE.search(safe) and "\n" not in safe and "\r" not in safe, repr(safe)
    assert not LIVE_MENTION.search(safe), safe
    assert "<" not in safe and re.search(r"(?<!\\)\|", safe) is None, safe


def test_markdown_mentions_keep_their_text_but_notify_no_one():
    assert markdown("@octocat") == "@\u200doctocat"
    assert markdown("mail a@b.c") == "mail a@b.c"  # not a mention: left as written


def _hostile(doc: dict[str, Any], evil: str) -> dict[str, Any]:
    """The document with ``evil`` in every field of user text a report shows."""
    doc = copy.deepcopy(doc)
    doc["model"]["name"] = evil
    doc["config"]["sa_layers"] = [evil]
    doc["config"]["coverage_layers"] = [evil, *doc["config"]["coverage_layers"][1:]]
    doc["layers"][0]["name"] = evil
    doc["outcome"]["warnings"] = [f"warning about {evil}"]
    for i, group in enumerate(doc["groups"]):
        old, group["name"] = group["name"], f"{evil}{i}"
        for test in doc["tests"]:
            if test["group"] == old:
                test["group"] = group["name"]
        for analysis in doc["mistakes"]["groups"]:
            if analysis.get("name") == old:
                analysis["name"] = group["name"]
    for i, test in enumerate(doc["tests"]):
        test["nodeid"] = f"tests/test_x.py::test_{i}[{evil}]"
    return doc


def _pipes(row: str) -> int:
    return len(re.findall(r"(?<!\\)\|", row))


@pytest.mark.parametrize("evil", CORPUS)
def test_every_report_of_hostile_names_shows_nothing_raw(evil):
    plain = json.loads((DATA / "results-classifier.json").read_text())
    doc = _hostile(plain, evil)
    results = Results.from_dict(doc)
    benign = Results.from_dict(_hostile(plain, "b" * len(terminal(evil))))  # as wide as evil shown
    for verbose in (False, True):
        lines = render_terminal(results, verbose=verbose)
        assert not any(UNSAFE.search(line) or "\n" in line or "\r" in line for line in lines), lines
        # one row per row: the same table rows as the same document with a plain name
        plain_lines = render_terminal(benign, verbose=verbose)
        for start in ("tests/test_x.py", "+ "):
            assert sum(line.startswith(start) for line in lines) == sum(line.startswith(start) for line in plain_lines)
        assert not any(line.startswith("FAKE") for line in lines)
    md = render_markdown(results)
    assert not UNSAFE.search(md) and not LIVE_MENTION.search(md) and "<img" not in md, md
    table_rows = [line for line in md.splitlines() if line.startswith("|")]
    benign_rows = [line for line in render_markdown(benign).splitlines() if line.startswith("|")]
    assert [_pipes(r) for r in table_rows] == [_pipes(r) for r in benign_rows]
    assert not any(line.startswith("FAKE") for line in md.splitlines())
    html = render_html(results)  # jinja2's escaping, kept: no element or attribute from the text
    assert "<img src=x" not in html and "<script>alert" not in html
    # JSON keeps the text exact
    assert Results.from_dict(json.loads(json.dumps(results.to_dict()))).groups[0].name == doc["groups"][0]["name"]


HOSTILE_TESTS = """
import numpy as np
import pytest

X = np.load("inputs.npy")
GROUPS = {groups!r}


@pytest.mark.parametrize(
    "group", [pytest.param(g, marks=pytest.mark.sadl(group=g), id=f"case{{i}}") for i, g in enumerate(GROUPS)]
)
def test_feeds(sadl_model, group):
    sadl_model.predict(X[: 5 + GROUPS.index(group)], verbose=0)


@pytest.mark.sadl(group="@octocat | pipe")
@pytest.mark.parametrize("v", ["@octocat", "a|b"])
def test_ids(sadl_model, v):
    sadl_model.predict(X[:3], verbose=0)
"""


@pytest.mark.tf
def test_a_real_run_with_hostile_group_names_writes_nothing_raw(project):
    groups = ["\x1b[2J\x1b[31mclear", "g\r\nFAKE: all good | 100%", "abc\u202edcba", "nul\x00x", "@octocat"]
    pytester = project(HOSTILE_TESTS.format(groups=groups))
    res = run(
        pytester,
        "--sadl-coverage",
        "--sadl-report=term-verbose",
        "--sadl-report=markdown:summary.md",
        "--sadl-report=json:out.json",
        "--sadl-report=html:html",
    )
    assert res.ret == 0, res.stdout.str()
    out = res.stdout.str()
    start = out.index("pytest-sadl: surprise adequacy")
    summary = out[start:]
    assert not UNSAFE.search(summary), summary
    assert "\\x1b[2J\\x1b[31mclear" in summary and "g\\r\\nFAKE: all good | 100%" in summary
    assert not any(line.startswith("FAKE") for line in out.splitlines())
    md = (pytester.path / "summary.md").read_text(encoding="utf-8")
    assert not UNSAFE.search(md) and not LIVE_MENTION.search(md), md
    assert not any(line.startswith("FAKE") for line in md.splitlines())
    assert "@\u200doctocat" in md
    data = json.loads((pytester.path / "out.json").read_text(encoding="utf-8"))
    assert {g["name"] for g in data["groups"]} == {*groups, "@octocat | pipe"}  # exact
    page = (pytester.path / "html" / "index.html").read_text(encoding="utf-8")
    assert "&lt;" not in page or "<script>alert" not in page
