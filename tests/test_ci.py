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


def _same_run(combined: dict, single: dict) -> None:
    """The numbers of a combined file and a single run, bit for bit."""
    for key in ("metrics", "layers", "groups", "tests", "inputs", "config", "model"):
        assert combined[key] == single[key], key
    assert combined["covered"]["tests"] == single["covered"]["tests"]


def test_shards_combine_into_the_single_run_exactly(five) -> None:
    from pytest_sadl.cli.main import main

    single = json.loads((five.path / "full.json").read_text())
    node = "test_project.py::"
    shardings = {
        "k2": [["-k", "test_1 or test_2"], ["-k", "not (test_1 or test_2)"]],
        "ids3": [
            [node + "test_1_fails", node + "test_5"],
            [node + "test_2", node + "test_unmarked"],
            [node + "test_3", node + "test_4"],
        ],
    }
    for label, shards in shardings.items():
        paths = []
        for i, args in enumerate(shards):
            path = five.path / f"{label}-{i}.json"
            run(five, *args, "--sadl-coverage", f"--sadl-report=json:{path}")
            paths.append(str(path))
        out = five.path / f"{label}.json"
        assert main(["combine", *paths, "-o", str(out), "--fail-under=lsc:1"]) == 0
        combined = json.loads(out.read_text())
        _same_run(combined, single)
        assert combined["scope"]["runs"] == len(shards) and not combined["scope"]["partial"]
        # sadl report renders it
        assert main(["report", str(out), "--markdown", str(five.path / f"{label}.md")]) == 0
    # a floor the combined run misses fails as the plugin's gate does
    assert main(["combine", *paths, "-o", str(five.path / "f.json"), "--fail-under=lsc:99"]) == 1


def test_combine_refuses_other_runs_in_one_line(five, capsys) -> None:
    from pytest_sadl.cli.main import main

    run(five, "-k", "test_2", "--sadl-coverage", "--sadl-kmnc-k=10", "--sadl-report=json:other.json")
    full = str(five.path / "full.json")
    assert main(["combine", full, str(five.path / "other.json"), "-o", str(five.path / "x.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "another configuration (kmnc_k 1000 vs 10)" in err


def test_minimize_names_tests_that_alone_give_the_same_coverage(five, capsys) -> None:
    from pytest_sadl.cli.main import main

    full = five.path / "full.json"
    assert main(["minimize", str(full), "--metrics", "lsc,dsc,nc", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    keep = found["keep"]
    assert 0 < len(keep) <= 5
    assert all(t["redundant"] == (not any(t["unique"].values())) for t in found["tests"])
    run(five, *keep, "--sadl-coverage", "--sadl-report=json:min.json")
    small = json.loads((five.path / "min.json").read_text())
    single = json.loads(full.read_text())
    for m in ("lsc", "dsc", "nc"):
        assert small["metrics"][m]["covered"] == single["metrics"][m]["covered"], m
    assert main(["minimize", str(full)]) == 0
    assert "keep the coverage of LSC, DSC, NC (greedy set cover)" in capsys.readouterr().out


def test_a_partial_run_compares_like_with_like(five) -> None:
    res = run(
        five,
        "-x",
        "--sadl-coverage",
        "--sadl-report=term",
        "--sadl-compare=full.json",
        "--sadl-compare-fail=lsc:0,nc:0",
    )
    assert res.ret == 1  # the test's failure: no gate broken
    out = " ".join(res.stdout.str().split())
    assert "compared like with like: with the baseline's coverage of the same 1 tests" in out
    assert "dropped by" not in out and "not gated" not in out  # the same test covered the same


def test_covered_sets_round_trip() -> None:
    import numpy as np

    from pytest_sadl.covered import decode, encode

    rng = np.random.default_rng(0)
    for n, p in [(1, 0.5), (1000, 0.001), (1000, 0.6), (50_000, 0.01), (7, 0.0)]:
        bits = rng.random(n) < p
        text = encode(bits)
        assert text[:2] in ("b:", "i:") and np.array_equal(decode(text, n), bits)
