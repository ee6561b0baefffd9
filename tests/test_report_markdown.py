"""The Markdown job summary and the badge JSON.

Regenerate the golden summaries with ``SADL_REGEN_GOLDEN=1`` (see test_report_html.py).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_sadl.report import badge as _badge
from pytest_sadl.report import compare as _compare
from pytest_sadl.report import markdown as _markdown
from pytest_sadl.report.badge import BADGE_FILE
from pytest_sadl.report.markdown import escape_md
from pytest_sadl.results import Results
from pytest_sadl.resultsfile import load_results


def _typed(doc: Any) -> Results:
    """The renderers take typed results: a test's document (a fixture file, altered) read as a run's."""
    return doc if isinstance(doc, Results) else Results.from_dict(doc)


def compare(current: Any, baseline: Any) -> Any:
    return _compare.compare(_typed(current), _typed(baseline))


def render_markdown(doc: Any, **kw: Any) -> str:
    return _markdown.render_markdown(_typed(doc), **kw)


def render_html(doc: Any, **kw: Any) -> str:
    from pytest_sadl.report.html import render_html

    return render_html(_typed(doc), **kw)


def write_markdown(doc: Any, path: Any, **kw: Any) -> Path:
    return _markdown.write_markdown(_typed(doc), path, **kw)


def render_badge(doc: Any, *args: Any) -> dict[str, Any]:
    return _badge.render_badge(_typed(doc), *args)


def render_badges(doc: Any) -> dict[str, Any]:
    return dict(_badge.render_badges(_typed(doc)))


def write_badge(doc: Any, *args: Any) -> Path:
    return _badge.write_badge(_typed(doc), *args)


def write_badges(doc: Any, *args: Any) -> Path:
    return _badge.write_badges(_typed(doc), *args)


try:
    from tests.test_report_html import check_golden
except ImportError:  # pragma: no cover - tests/ itself on sys.path (rootdir not)
    from test_report_html import check_golden  # type: ignore[no-redef]

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def classifier() -> dict[str, Any]:
    return load_results(DATA / "results-classifier.json")


@pytest.fixture(scope="module")
def baseline() -> dict[str, Any]:
    return load_results(DATA / "results-baseline.json")


@pytest.fixture(scope="module")
def regression() -> dict[str, Any]:
    return load_results(DATA / "results-regression.json")


def _table(md: str, header_start: str) -> list[list[str]]:
    """The rows of the Markdown table whose header line starts with ``header_start``,
    split on unescaped pipes as GitHub does."""
    import re

    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
        rows.append([c.strip() for c in cells])
    return [rows[0]] + rows[2:]


def test_golden_summary_with_baseline(classifier, baseline):
    check_golden("summary-classifier.md", render_markdown(classifier, comparison=compare(classifier, baseline)))


def test_golden_summary_regression(regression):
    check_golden("summary-regression.md", render_markdown(regression))


def test_metrics_table(classifier, baseline):
    md = render_markdown(classifier, comparison=compare(classifier, baseline))
    assert md.startswith("## pytest-sadl: test adequacy of digits\\_cnn: ❌ failed (1 threshold missed)")
    rows = _table(md, "| Metric")
    assert rows[0] == ["Metric", "Value", "Threshold", "Status", "Baseline", "Change (pts)"]
    by = {r[0]: r for r in rows[1:]}
    assert by["LSC"] == ["LSC", "26.00%", "30.00%", "❌ fail", "26.10%", "▼ -0.10"]
    assert by["NC"] == ["NC", "72.19%", "40.00%", "✅ pass", "67.19%", "▲ +5.00"]
    assert by["DSC"][2:4] == ["–", "–"]


def test_mistakes_table_names_the_opt_in_scores_in_capitals(classifier):
    # a results file whose labels lack MLSA and MMDSA (written before they were named)
    # still heads their columns as the other scores are, in the Markdown and HTML tables
    run = copy.deepcopy(classifier)
    for row in [run["mistakes"]["overall"], *run["mistakes"]["groups"]]:
        row["auc"].update(mlsa=0.7, mmdsa=0.6)
    run["mistakes"]["overall"]["fifths"]["mlsa"] = run["mistakes"]["overall"]["fifths"]["lsa"]
    assert "mlsa" not in run["mistakes"]["labels"]
    header = _table(render_markdown(run), "| Group | labelled")[0]
    assert "MLSA AUC" in header and "MMDSA AUC" in header and "mlsa AUC" not in header
    html = render_html(run)
    assert ">MLSA<" in html and ">mlsa<" not in html and ">mmdsa<" not in html


def test_regression_summary_says_not_applicable(regression):
    md = render_markdown(regression)
    by = {r[0]: r for r in _table(md, "| Metric")[1:]}
    assert by["DSC"] == ["DSC", "n/a", "–", "n/a"]
    groups = _table(md, "| Group")
    assert "DSC" not in groups[0]
    assert "✅ passed" in md.splitlines()[0]


def test_escaping_of_html_and_pipes(classifier):
    doc = copy.deepcopy(classifier)
    doc["tests"][0]["nodeid"] = "tests/t.py::test_a[x|y]"
    doc["tests"][0]["new"]["lsc"] = 10_000  # first in the "most coverage" table
    md = render_markdown(doc)
    assert "<script" not in md
    assert "&lt;script&gt;alert('group')&lt;/script&gt;" in md
    rows = _table(md, "| Test")
    assert all(len(r) == 5 for r in rows), "a | in a test id split a cell"
    assert rows[1][0] == "tests/t.py::test\\_a\\[x\\|y\\]"


def test_escape_md():
    assert escape_md("a_b*c`d|e") == "a\\_b\\*c\\`d\\|e"
    assert escape_md("<b>&amp;</b>") == "&lt;b&gt;&amp;amp;&lt;/b&gt;"
    assert escape_md("two\nlines") == "two lines"


def test_summary_tolerates_a_minimal_document():
    md = render_markdown(
        {"schema": "pytest-sadl/results", "version": 1, "metrics": {"nc": {"value": 0.5, "applicable": True}}}
    )
    assert "| NC | 50.00% | – | – |" in md and "✅ passed" in md


def test_write_markdown_atomic_and_github_step_summary_appends(tmp_path, monkeypatch, classifier):
    out = write_markdown(classifier, tmp_path / "summary.md")
    assert out.read_text(encoding="utf-8") == render_markdown(classifier)
    summary = tmp_path / "step_summary.md"
    summary.write_text("earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    write_markdown(classifier, summary)
    assert summary.read_text(encoding="utf-8") == "earlier step\n" + render_markdown(classifier)


# ------------------------------------------------------------------ badge


def test_badge_is_a_shields_endpoint(classifier):
    lsc = render_badge(classifier, "lsc")
    assert lsc == {"schemaVersion": 1, "label": "LSC", "message": "26.0%", "color": "red"}
    assert render_badge(classifier, "NC")["color"] == "brightgreen"  # threshold 40 met
    assert render_badge(classifier, "kmnc") == {
        "schemaVersion": 1,
        "label": "KMNC",
        "message": "92.2%",
        "color": "brightgreen",
    }
    assert render_badge(classifier, "nbc")["color"] == "red"  # 7.5%, no threshold
    assert render_badge(classifier, "dsc")["color"] == "orange"  # 25.1%


def test_badge_threshold_boundary_uses_the_rounded_percent(classifier):
    doc = copy.deepcopy(classifier)
    doc["metrics"]["lsc"]["value"] = 0.3
    assert render_badge(doc, "lsc")["color"] == "brightgreen"
    doc["metrics"]["lsc"]["value"] = 0.2999
    assert render_badge(doc, "lsc")["color"] == "red"


def test_badge_not_applicable_and_unknown(regression):
    assert render_badge(regression, "dsc") == {
        "schemaVersion": 1,
        "label": "DSC",
        "message": "n/a",
        "color": "lightgrey",
    }
    with pytest.raises(ValueError, match="unknown metric 'lsx'.*lsc, dsc, mdsc, .*nc"):
        render_badge(regression, "lsx")


def test_badges_are_one_shields_endpoint_file_per_metric(tmp_path, classifier):
    """shields.io's endpoint badge reads a file that is one endpoint document (schemaVersion,
    label, message, color at the top level): one per metric, named after it."""
    folder = write_badges(classifier, tmp_path / "badges")
    files = sorted(p.name for p in folder.iterdir())
    assert files == sorted(BADGE_FILE.format(metric=m) for m in ["lsc", "dsc", "mdsc", "nc", "kmnc", "nbc", "snac"])
    for metric, doc in render_badges(classifier).items():
        written = json.loads((folder / f"sadl-badge-{metric}.json").read_text())
        assert (
            written == doc
            and written["schemaVersion"] == 1
            and set(written) == {"schemaVersion", "label", "message", "color"}
        )
    one = json.loads(write_badge(classifier, tmp_path / "lsc.json", "lsc").read_text())
    assert one == render_badge(classifier, "lsc")
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(NotADirectoryError, match="one file per metric.*give a folder"):
        write_badges(classifier, tmp_path / "a-file")
