"""``sadl report`` and ``sadl compare``, and reading results files (real files on disk).

The subcommands are driven through a throwaway ArgumentParser with
:func:`pytest_sadl.cli.report.register`, as the ``sadl`` main does, and through
``python -m pytest_sadl`` once that main wires them in.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_sadl.cli.report import register
from pytest_sadl.errors import ResultsFileError
from pytest_sadl.report.html import render_html
from pytest_sadl.resultsfile import load_results, read_results, validate_results

DATA = Path(__file__).parent / "data"
RUN = DATA / "results-classifier.json"
BASE = DATA / "results-baseline.json"
REPO = Path(__file__).resolve().parents[1]


def sadl(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="sadl")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args([str(a) for a in argv])
    return args.func(args)


def _doc() -> dict[str, Any]:
    return json.loads(RUN.read_text(encoding="utf-8"))


# ------------------------------------------------------------------ sadl report


def test_report_writes_html_markdown_and_badge(tmp_path, capsys):
    rc = sadl(
        "report",
        RUN,
        "--html",
        tmp_path / "html",
        "--markdown",
        tmp_path / "s.md",
        "--badge",
        tmp_path / "badges",
        "--compare",
        BASE,
    )
    assert rc == 0
    out = capsys.readouterr().out
    index = tmp_path / "html" / "index.html"
    assert f"wrote {index}" in out
    html = index.read_text(encoding="utf-8")
    assert 'id="comparison"' in html and "▼ -2.60 pts" in html
    md = (tmp_path / "s.md").read_text(encoding="utf-8")
    assert "| DSC | 25.10% | – | – | 27.70% | ▼ -2.60 |" in md
    assert {p.name for p in (tmp_path / "badges").iterdir()} == {
        f"sadl-badge-{m}.json" for m in ("lsc", "dsc", "mdsc", "nc", "kmnc", "nbc", "snac")
    }
    assert json.loads((tmp_path / "badges" / "sadl-badge-nc.json").read_text())["label"] == "NC"


def test_report_html_only_equals_render_html(tmp_path):
    assert sadl("report", RUN, "--html", tmp_path) == 0
    assert (tmp_path / "index.html").read_text(encoding="utf-8") == render_html(read_results(RUN))


def test_report_single_badge_metric(tmp_path):
    assert sadl("report", RUN, "--badge", tmp_path / "lsc.json", "--badge-metric", "lsc") == 0
    assert json.loads((tmp_path / "lsc.json").read_text())["label"] == "LSC"


def test_report_needs_an_output(capsys):
    assert sadl("report", RUN) == 2
    assert "nothing to write: give --html DIR" in capsys.readouterr().err


def test_report_of_a_bad_file_is_one_clear_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    assert sadl("report", bad, "--html", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sadl report: error: {bad}: not valid JSON (line 1, column 2")
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_report_warns_on_a_baseline_of_another_model(tmp_path, capsys):
    other = _doc()
    other["model"]["fingerprint"] = "0" * 64
    path = tmp_path / "other.json"
    path.write_text(json.dumps(other), encoding="utf-8")
    assert sadl("report", RUN, "--html", tmp_path / "h", "--compare", path) == 0
    assert "warning: the runs are of different models" in capsys.readouterr().err
    assert "the runs are of different models" in (tmp_path / "h" / "index.html").read_text()


# ------------------------------------------------------------------ sadl compare


def test_compare_passes_and_prints_the_table(capsys):
    assert sadl("compare", RUN, BASE) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["metric", "baseline", "current", "change"]
    assert out[2].split() == ["DSC", "27.70%", "25.10%", "-2.60"]


def test_compare_fail_exits_1_with_the_reason(capsys):
    assert sadl("compare", RUN, BASE, "--fail=dsc:-2") == 1
    out = capsys.readouterr().out
    assert ("FAILED: DSC dropped by 2.60 points (27.70% → 25.10%), more than the 2 allowed by --fail=dsc:-2") in out
    assert sadl("compare", RUN, BASE, "--fail=dsc:-3,lsc:-1") == 0


def test_compare_bad_limit_exits_2(capsys):
    assert sadl("compare", RUN, BASE, "--fail=lsx:-2") == 2
    assert "sadl compare: error: --fail: unknown metric 'lsx'" in capsys.readouterr().err


def test_compare_json(capsys):
    assert sadl("compare", RUN, BASE, "--fail", "dsc:-1", "--json") == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["metrics"][1]["metric"] == "dsc" and doc["metrics"][1]["delta"] == -2.6
    assert len(doc["failures"]) == 1


def test_compare_newer_schema_exits_2(tmp_path, capsys):
    newer = _doc()
    newer["version"] = 2
    path = tmp_path / "v2.json"
    path.write_text(json.dumps(newer), encoding="utf-8")
    assert sadl("compare", path, BASE) == 2
    err = capsys.readouterr().err
    assert "results schema version 2 is newer than this pytest-sadl reads (version 1)" in err
    assert "upgrade pytest-sadl" in err


# ------------------------------------------------------------------ reading results files


@pytest.mark.parametrize(
    "mutate, message",
    [
        (
            lambda d: d.update(schema="coverage.py/json"),
            "not a pytest-sadl results file: \"schema\" is 'coverage.py/json', expected 'pytest-sadl/results'",
        ),
        (lambda d: d.pop("schema"), '"schema" is None'),
        (lambda d: d.update(version=3), "results schema version 3 is newer than this pytest-sadl reads"),
        (lambda d: d.update(version="2.1"), "results schema version 2.1 is newer"),
        (lambda d: d.update(version=0), "results schema version 0 is not a known version"),
        (lambda d: d.update(version=True), '"version" is True, expected an integer'),
        (lambda d: d.update(version="one"), "\"version\" is 'one', expected an integer"),
        (lambda d: d.update(metrics=[]), "metrics must be an object, got a list []"),
        (lambda d: d["metrics"].update(lsc=0.3), "metrics.lsc must be an object, got a number 0.3"),
        (
            lambda d: d["metrics"]["lsc"].update(value="30%"),
            "metrics.lsc.value must be a number or null, got a string '30%'",
        ),
        (lambda d: d.update(tests={}), "tests must be a list, got an object {}"),
        (lambda d: d.update(groups=["test"]), "groups[0] must be an object, got a string 'test'"),
    ],
)
def test_bad_results_files_are_refused_clearly(tmp_path, mutate, message):
    doc = _doc()
    mutate(doc)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ResultsFileError) as info:
        load_results(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_not_a_file_or_not_an_object(tmp_path):
    with pytest.raises(ResultsFileError, match="no such results file"):
        load_results(tmp_path / "missing.json")
    with pytest.raises(ResultsFileError, match="is a directory"):
        load_results(tmp_path)
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ResultsFileError, match="expected a JSON object, got a list"):
        load_results(tmp_path / "list.json")
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ResultsFileError, match="not UTF-8 text"):
        load_results(tmp_path / "bin.json")


def test_minor_version_of_the_same_major_is_read():
    doc = copy.deepcopy(_doc())
    doc["version"] = "1.3"
    assert validate_results(doc) is doc


# ------------------------------------------------------------------ through the sadl main


def test_through_python_m_pytest_sadl(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_sadl", "report", str(RUN), "--html", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "index.html").read_text(encoding="utf-8") == render_html(read_results(RUN))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_sadl", "compare", str(RUN), str(BASE), "--fail=dsc:-2"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 1 and "FAILED: DSC dropped by 2.60 points" in proc.stdout
