"""A team's CI (issue 38): partial runs said and gated honestly, shards combined exactly,
the smallest suite that keeps the coverage, in real pytest runs of a small project."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_sadl.results import Results
from tests.test_plugin import _warm_imports, project, run  # noqa: F401  (fixtures)

pytestmark = pytest.mark.tf

FIVE = """
import numpy as np
import pytest

X = np.load("inputs.npy")


@pytest.mark.sadl(group="a")
def test_1_fails(sadl_model):
    sadl_model.predict(X[:2], verbose=0)
    assert False, "on purpose"


@pytest.mark.sadl(group="a")
def test_2(sadl_model):
    sadl_model.predict(X[2:12], verbose=0)


@pytest.mark.sadl(group="b")
def test_3(sadl_model):
    sadl_model.predict(X[12:24], verbose=0)


@pytest.mark.sadl(group="b")
def test_4(sadl_model):
    sadl_model.predict(X[24:40], verbose=0)


@pytest.mark.sadl(group="c")
def test_5(sadl_model):
    sadl_model.predict(X[40:60], verbose=0)


def test_unmarked():
    pass
"""


def _load(path: Path) -> Results:
    from pytest_sadl.resultsfile import read_results

    return read_results(path)


@pytest.fixture
def five(project):
    pytester = project(FIVE)
    res = run(pytester, "--sadl-coverage", "--sadl-report=json:full.json", "--sadl-report=term")
    res.assert_outcomes(passed=5, failed=1)
    return pytester


def test_a_whole_run_says_its_scope_and_is_not_partial(five) -> None:
    full = _load(five.path / "full.json")
    assert full.scope is not None and not full.scope.partial
    assert (full.scope.collected, full.scope.selected, full.scope.run, full.scope.recorded) == (5, 5, 5, 5)


def test_x_run_is_partial_in_every_report_and_does_not_gate_as_a_drop(five) -> None:
    res = run(
        five,
        "-x",
        "--sadl-coverage",
        "--sadl-report=json:x.json",
        "--sadl-report=term",
        "--sadl-report=markdown:x.md",
        "--sadl-report=html:x.html",
        "--sadl-report=badge:badges",
        "--sadl-compare=full.json",
        "--sadl-compare-fail=lsc:-2,nc:-2",
        "--sadl-fail-under=lsc:90",
    )
    res.assert_outcomes(failed=1)
    assert res.ret == 1  # the test's failure, nothing more
    said = "partial: 1 of 5 marked tests measured (stopped after the first failure)"
    out = res.stdout.str()
    assert said in out and "not gated (partial run" in out
    assert "FAIL LSC" not in out and "dropped by" not in out.split("not gated")[0]
    data = json.loads((five.path / "x.json").read_text())
    assert data["scope"]["partial"] and data["scope"]["run"] == 1 and data["scope"]["collected"] == 5
    assert data["scope"]["gated"] is False and data["outcome"]["passed"] is True
    assert any("below --sadl-fail-under=lsc:90" in line for line in data["scope"]["ungated"])
    assert said in (five.path / "x.md").read_text()
    assert said in (five.path / "x.html" / "index.html").read_text()
    assert json.loads((five.path / "badges" / "sadl-badge-lsc.json").read_text())["label"] == "LSC (partial)"
    # opted in: the partial run's floor is judged
    res = run(five, "-x", "--sadl-coverage", "--sadl-fail-under=lsc:90", "--sadl-gate-partial")
    assert "FAIL LSC" in res.stdout.str()


def test_k_and_deselect_say_what_deselected(five) -> None:
    res = run(five, "-k", "test_2 or test_3", "--sadl-coverage", "--sadl-report=json:k.json")
    res.assert_outcomes(passed=2)
    scope = _load(five.path / "k.json").scope
    assert scope is not None and scope.partial and (scope.run, scope.collected) == (2, 5)
    assert scope.reasons == ["3 marked tests deselected by -k 'test_2 or test_3'"]
    node = "test_project.py::test_5"
    run(five, "--deselect", node, "--sadl-coverage", "--sadl-report=json:d.json")
    scope = _load(five.path / "d.json").scope
    assert scope is not None and scope.reasons == ["1 marked test deselected by --deselect"]


def test_lf_run_is_partial(five) -> None:
    # the cache provider on (run() turns it off): a first run that fails, then --lf
    base = ("-p", "no:randomly", "--sadl-coverage")
    five.runpytest_inprocess(*base).assert_outcomes(passed=5, failed=1)
    res = five.runpytest_inprocess(*base, "--lf", "--sadl-report=json:lf.json", "--sadl-report=term")
    res.assert_outcomes(failed=1)
    scope = _load(five.path / "lf.json").scope
    assert scope is not None and scope.partial and scope.run == 1
    assert "--lf" in scope.reasons[0]
    said = "partial: 1 marked test measured (only the tests that failed last time were collected (--lf))"
    assert said in " ".join(res.stdout.str().split())  # the terminal wraps it


def test_an_old_file_without_scope_reads(five) -> None:
    data = json.loads((five.path / "full.json").read_text())
    del data["scope"]
    (five.path / "old.json").write_text(json.dumps(data))
    assert _load(five.path / "old.json").scope is None
