"""The typed results: the engine's object and a results file read back are the same thing.

In a run the plugin hands the engine's :class:`~pytest_sadl.results.Results` straight to
the renderers (no JSON round trip); ``sadl report`` reads the file the run wrote into the
same types (:func:`~pytest_sadl.resultsfile.read_results`). A real run (the conv model,
labels, groups, every metric, a baseline) is rendered both ways and must give the same
bytes: terminal, Markdown, HTML and badges; and its JSON form survives
``from_dict`` -> ``to_dict`` unchanged.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_sadl.report.badge import BADGE_FILE, render_badges
from pytest_sadl.report.compare import compare
from pytest_sadl.report.html import render_html
from pytest_sadl.report.markdown import render_markdown
from pytest_sadl.report.terminal import render_terminal
from pytest_sadl.results import Results, TestRow, TopInput
from pytest_sadl.resultsfile import load_results, read_results, validate_results

try:
    from tests.test_plugin import RECORDING_TESTS, _warm_imports, project, run  # noqa: F401
except ImportError:  # pragma: no cover - tests/ itself on sys.path (rootdir not)
    from test_plugin import RECORDING_TESTS, _warm_imports, project, run  # type: ignore[no-redef]  # noqa: F401

DATA = Path(__file__).parent / "data"
BASELINE = DATA / "results-classifier.json"


def _block(lines: list[str], within: list[str]) -> bool:
    """``lines`` appear in ``within`` one after the other."""
    n = len(lines)
    return any(within[i : i + n] == lines for i in range(len(within) - n + 1))


@pytest.mark.tf
def test_a_runs_reports_are_those_of_its_results_file_read_back(project):
    pytester = project(RECORDING_TESTS)
    res = run(
        pytester,
        "--sadl-coverage",
        "--sadl-metrics=all",
        "--sadl-compare=" + str(BASELINE),
        "--sadl-report=json:out.json",
        "--sadl-report=html:html",
        "--sadl-report=markdown:out.md",
        "--sadl-report=badge:badges",
        "--sadl-report=term-verbose",
    )
    assert res.ret == 1, res.stdout.str()  # one test fails on purpose
    path = pytester.path / "out.json"
    doc = load_results(path)
    # the run has what the renderers read: groups, labels, thumbnails, count criteria, bounds
    assert doc["mistakes"]["overall"]["kind"] == "classifier" and len(doc["groups"]) == 3
    assert all(t["image"] for t in doc["top_inputs"]) and {"tknp", "cc", "nlc"} <= set(doc["metrics"])
    # the engine's rows went through the typed rows whole (the engine builds them with from_dict)
    neuron = {"nc", "kmnc", "nbc", "snac", "tknc"}
    assert all(isinstance(t["pred"], int) and isinstance(t["lsa"], float) for t in doc["top_inputs"])
    assert all(t["tests"] and t["copies"] >= 1 for t in doc["top_inputs"])
    assert all(
        isinstance(t[f"{k}_{s}"], float)
        for t in doc["tests"]
        if t["inputs"]
        for k in ("lsa", "dsa", "mdsa")
        for s in ("mean", "max")
    )
    assert all(set(t["new"]) == set(doc["metrics"]) for t in doc["tests"])
    assert all(neuron <= set(lay) for lay in doc["layers"])
    assert all(set(g["cumulative"]) == set(doc["metrics"]) for g in doc["groups"])
    assert {"tknc_k", "tknp_k", "cc_threshold", "lsa_near_singular", "var_rule"} <= set(doc["config"])
    assert all(
        isinstance(doc["config"][m]["lower"], float) and doc["config"][m]["rule"] for m in ("lsc", "dsc", "mdsc")
    )
    assert doc["mistakes"]["overall"]["fifths"]["lsa"] and doc["mistakes"]["labels"]["lsa"] == "LSA"

    typed = read_results(path)
    again = typed.to_dict()
    assert again == doc
    assert json.dumps(again, indent=1) + "\n" == path.read_text(encoding="utf-8")  # byte for byte
    assert Results.from_dict(again) == typed
    validate_results(again)

    comparison = compare(typed, read_results(BASELINE))
    html = (pytester.path / "html" / "index.html").read_text(encoding="utf-8")
    assert render_html(typed, comparison=comparison) == html
    md = (pytester.path / "out.md").read_text(encoding="utf-8")
    assert render_markdown(typed, comparison=comparison) == md
    badges = render_badges(typed)
    assert sorted(badges) == sorted(doc["metrics"])
    for metric, badge in badges.items():
        written = (pytester.path / "badges" / BADGE_FILE.format(metric=metric)).read_text(encoding="utf-8")
        assert json.loads(written) == badge
    terminal = render_terminal(typed, verbose=True, comparison=comparison)
    assert len(terminal) > 40 and _block(terminal, res.outlines), res.stdout.str()


def test_a_file_with_newer_fields_and_fewer_metrics_reads_and_renders():
    """``from_dict`` ignores what this version does not know, and a metric a file does not
    have is simply not there: the renderers show what there is."""
    doc = json.loads(BASELINE.read_text(encoding="utf-8"))
    older = copy.deepcopy(doc)
    newer = copy.deepcopy(doc)
    newer["a_new_section"] = {"x": 1}
    newer["tests"][0]["a_new_field"] = "text"
    newer["top_inputs"][0]["a_new_list"] = [1, 2]
    newer["outcome"]["a_new_count"] = 3
    newer["config"]["a_new_setting"] = {"nested": [1, 2]}  # kept as it is, not read as SC bounds
    for section in (newer["metrics"], older["metrics"]):
        del section["mdsc"]
    typed_new, typed_old = Results.from_dict(newer), Results.from_dict(older)
    assert typed_new.config.params.pop("a_new_setting") == {"nested": [1, 2]}
    assert typed_new.config.bounds.keys() == {"lsc", "dsc", "mdsc"}
    assert typed_new == typed_old and "mdsc" not in typed_new.metrics
    assert "a_new_section" not in typed_new.to_dict() and "a_new_field" not in typed_new.to_dict()["tests"][0]
    for typed in (typed_new, Results.from_dict({"schema": doc["schema"], "version": 1, "metrics": {}})):
        render_html(typed)
        render_markdown(typed)
        render_badges(typed)
        render_terminal(typed)


def test_rows_read_their_per_score_columns_by_name():
    row = TestRow.from_dict(
        {
            "nodeid": "t::a",
            "group": "g",
            "outcome": "passed",
            "inputs": 3,
            "lsa_mean": 1.5,
            "lsa_max": 2.0,
            "new": {"nc": 2},
        }
    )
    assert (row.mean, row.max, row.new) == ({"lsa": 1.5}, {"lsa": 2.0}, {"nc": 2})
    top = TopInput.from_dict({"by": "lsa", "rank": 1, "input": 4, "test": 0, "pred": 3, "lsa": 9.5, "image": None})
    assert top.scores == {"lsa": 9.5} and top.pred == 3 and top.text is None
    assert TopInput.from_dict(top.to_dict()) == top
    nan: dict[str, Any] = {"by": "dsa", "rank": 1, "dsa": float("nan")}
    assert TopInput.from_dict(nan).scores == {"dsa": None}  # as its JSON form writes it
