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
Y = np.load("labels.npy")


@pytest.mark.sadl(group="a")
def test_1_fails(sadl_model):
    sadl_model.predict(X[2:4], verbose=0)  # inputs test_2 feeds too: redundant
    assert False, "on purpose"


@pytest.mark.sadl(group="a")
def test_2(sadl_model, sadl_labels):
    sadl_model.predict(X[2:12], verbose=0)
    sadl_labels(X[2:12], Y[2:12])  # labels test_1_fails' inputs too (matched by value)


@pytest.mark.sadl(group="b")
def test_3(sadl_model):
    sadl_model.predict(X[12:24], verbose=0)


@pytest.mark.sadl(group="b")
def test_4(sadl_model, sadl_labels):
    sadl_model.predict(X[24:40], verbose=0)
    sadl_labels(X[24:40], Y[24:40])


@pytest.mark.sadl(group="c")
def test_5(sadl_model, sadl_labels):
    sadl_model.predict(X[40:60], verbose=0)
    sadl_labels(X[40:60], Y[40:60])


def test_unmarked():
    pass
"""


def _load(path: Path) -> Results:
    from pytest_sadl.resultsfile import read_results

    return read_results(path)


@pytest.fixture
def five(project):  # noqa: F811  (the fixture imported above)
    pytester = project(FIVE)
    res = run(pytester, "--sadl-coverage", "--sadl-report=json:full.json", "--sadl-report=term")
    res.assert_outcomes(passed=5, failed=1)
    (pytester.path / "full.out").write_text(res.stdout.str())
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
    for key in ("metrics", "layers", "groups", "tests", "inputs", "config", "model", "top_inputs", "mistakes"):
        assert combined[key] == single[key], key
    assert combined["covered"]["tests"] == single["covered"]["tests"]


def test_shards_combine_into_the_single_run_exactly(five) -> None:
    from pytest_sadl.cli.main import main

    single = json.loads((five.path / "full.json").read_text())
    # what the exact combine needs is there: labels (one test's by another's), copies
    assert single["mistakes"]["overall"]["labelled"] == 48 and single["top_inputs"]
    assert single["inputs"]["label"][:2] == single["inputs"]["label"][2:4]  # test_1_fails' by test_2's
    assert any(t.get("copies") == 2 for t in single["top_inputs"]) or "digest" in single["inputs"]
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
    assert main(["minimize", str(full), "--html", str(five.path / "min.html")]) == 0
    assert "keep the coverage of LSC, DSC, NC (greedy set cover)" in capsys.readouterr().out
    page = (five.path / "min.html").read_text()
    assert "unique LSC" in page and page.count("<tr>") == 6


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


@pytest.mark.parametrize("seed", range(4))
def test_lsa_and_mdsa_do_not_depend_on_the_inputs_sharing_a_call(seed: int) -> None:
    """A score is the same bits alone, in a shard or in the whole run: what makes a combine
    exact (criteria.checks.by_fixed_rows). Before it, 1 score in about 300 differed."""
    import numpy as np

    from pytest_sadl.criteria.mahalanobis import MDSA
    from pytest_sadl.criteria.surprise import LSA

    rng = np.random.default_rng(seed)
    train, train_pred = rng.standard_normal((3000, 40)), rng.integers(0, 5, 3000)
    x, pred = rng.standard_normal((700, 40)), rng.integers(0, 5, 700)
    for score in (LSA(train, train_pred), MDSA(train, train_pred)):
        whole = score(x, pred)
        for a, b in [(0, 7), (7, 16), (16, 100), (100, 300), (5, 6), (300, 700), (1, 699)]:
            np.testing.assert_array_equal(score(x[a:b], pred[a:b]), whole[a:b])


def test_covered_sets_round_trip() -> None:
    import numpy as np

    from pytest_sadl.covered import decode, encode

    rng = np.random.default_rng(0)
    for n, p in [(1, 0.5), (1000, 0.001), (1000, 0.6), (50_000, 0.01), (7, 0.0)]:
        bits = rng.random(n) < p
        text = encode(bits)
        assert text[:2] in ("b:", "i:") and np.array_equal(decode(text, n), bits)


def test_junit_xml_carries_the_metrics_and_a_failing_gate(five) -> None:
    import xml.etree.ElementTree as ET

    res = run(five, "--sadl-coverage", "--junitxml=j.xml", "--sadl-fail-under=lsc:99,nc:1")
    assert res.ret == 1
    root = ET.parse(five.path / "j.xml").getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    single = json.loads((five.path / "full.json").read_text())
    assert props["sadl_lsc"] == f"{round(single['metrics']['lsc']['value'] * 100, 2):.2f}"
    assert "sadl_nc" in props and "sadl_partial" not in props
    gates = [c for c in suite.iter("testcase") if c.get("classname") == "pytest-sadl"]
    assert [c.get("name") for c in gates] == ["LSC"]  # NC met its floor: no case
    failure = gates[0].find("failure")
    assert failure is not None and "below --sadl-fail-under=lsc:99" in (failure.get("message") or "")


def test_pr_comment_is_marked_escaped_and_says_partial(five) -> None:
    from pytest_sadl.cli.main import main

    run(five, "-x", "--sadl-coverage", "--sadl-report=json:x.json")
    out = five.path / "c.md"
    assert main(["report", str(five.path / "x.json"), "--pr-comment", str(out), "--compare", "full.json"]) == 0
    text = out.read_text()
    assert text.splitlines()[0] == "<!-- pytest-sadl -->"
    assert "> ⚠️ partial: 1 of 5 marked tests measured (stopped after the first failure)" in text
    assert "| LSC |" in text and "Change (points)" in text
    assert "test\\_project.py::test\\_1\\_fails" in text  # escaped: no emphasis, no HTML
    # rendered as intended: a table and a warning, the marker hidden
    import markdown_it

    html = markdown_it.MarkdownIt("commonmark").enable("table").render(text)
    assert "<table>" in html and "<blockquote>" in html and "&lt;!-- pytest-sadl" not in html


def _action_steps() -> dict[str, dict]:
    import yaml

    doc = yaml.safe_load((Path(__file__).resolve().parents[1] / "action.yml").read_text())
    assert doc["runs"]["using"] == "composite"
    return {s.get("id", str(i)): s for i, s in enumerate(doc["runs"]["steps"])}


def test_the_actions_steps_run_as_plain_shell(five, tmp_path: Path) -> None:
    """The action's own scripts, in bash: combine shards, then post the comment (gh a
    stand-in that logs its calls: no GitHub here), then update it in place."""
    import os
    import subprocess
    import sys

    steps = _action_steps()
    for i, k in enumerate(["test_1 or test_2 or test_3", "test_4 or test_5"]):
        run(five, "-k", k, "--sadl-coverage", f"--sadl-report=json:shards/s{i}.json")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "gh.log"
    (bin_ / "gh").write_text(
        f'#!/bin/sh\necho "$@" >> {log}\ncase "$*" in *--paginate*) cat {tmp_path}/existing 2>/dev/null || true;; *) cat > {tmp_path}/body.json;; esac\n'
    )
    (bin_ / "gh").chmod(0o755)
    (bin_ / "sadl").write_text(f'#!/bin/sh\nexec {sys.executable} -m pytest_sadl "$@"\n')
    (bin_ / "sadl").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_}:{os.environ['PATH']}",
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        "RUNNER_TEMP": str(tmp_path),
        "SADL_MODE": "combine",
        "SADL_PYTEST_ARGS": "",
        "SADL_RESULTS": "shards/*.json",
        "SADL_OUTPUT": "combined.json",
        "SADL_BASELINE": "full.json",
        "SADL_FAIL_UNDER": "lsc:1",
        "SADL_COMPARE_FAIL": "lsc:-1",
        "SADL_HTML": "sadl-report",
        "SADL_REPO": "o/r",
        "SADL_PR": "7",
        "GH_TOKEN": "x",
    }

    def bash(step: str) -> None:
        done = subprocess.run(
            ["bash", "-c", steps[step]["run"]], cwd=five.path, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-2000:]

    bash("measure")
    assert (tmp_path / "sadl-status").read_text().strip() == "0"
    _same_run(json.loads((five.path / "combined.json").read_text()), json.loads((five.path / "full.json").read_text()))
    assert (five.path / "sadl-report" / "index.html").exists()
    bash("comment")
    assert "-X POST repos/o/r/issues/7/comments" in log.read_text()
    body = json.loads((tmp_path / "body.json").read_text())["body"]
    assert body.startswith("<!-- pytest-sadl -->") and "| LSC |" in body
    (tmp_path / "existing").write_text("1234\n")  # the comment found: updated in place
    bash("comment")
    assert "-X PATCH repos/o/r/issues/comments/1234" in log.read_text().splitlines()[-1]


def test_the_workflow_files_are_valid() -> None:
    import re

    import yaml

    root = Path(__file__).resolve().parents[1]
    action = yaml.safe_load((root / "action.yml").read_text())
    assert {"name", "description", "inputs", "runs"} <= set(action)
    for step in action["runs"]["steps"]:
        assert ("run" in step) != ("uses" in step) and ("shell" in step or "uses" in step)
        assert "${{" not in step.get("run", ""), "scripts read their inputs from env"
    page = (root / "docs" / "ci.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", page, re.S)
    assert blocks, "docs/ci.md shows the workflow"
    for block in blocks:
        workflow = yaml.safe_load(block)
        assert "jobs" in workflow and workflow.get(True, workflow.get("on")) is not None
    shards = yaml.safe_load(blocks[0])["jobs"]
    assert "combine" in shards and shards["combine"]["needs"] == "shard"


def test_log_mlflow_holds_the_metrics_options_and_html(five, tmp_path: Path) -> None:
    """In subprocesses: importing MLflow here would stay for the in-process runs after it
    (their terminal summary went missing; cause not found)."""
    import importlib.util
    import os
    import subprocess
    import sys

    if importlib.util.find_spec("mlflow") is None:
        pytest.skip("MLflow is not installed (pip install 'pytest-sadl[mlflow]')")
    env = {**os.environ, "MLFLOW_ALLOW_FILE_STORE": "true", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    uri = (tmp_path / "mlruns").as_uri()
    full = five.path / "full.json"
    cmd = [sys.executable, "-m", "pytest_sadl", "log-mlflow", str(full), "--tracking-uri", uri, "--experiment", "sadl"]
    assert subprocess.run(cmd, env=env, timeout=300).returncode == 0
    read = f"""
import json
from mlflow.tracking import MlflowClient
client = MlflowClient(tracking_uri={uri!r})
(run,) = client.search_runs([client.get_experiment_by_name("sadl").experiment_id])
listed = [a.path for a in client.list_artifacts(run.info.run_id, "sadl/report")]
html = client.download_artifacts(run.info.run_id, "sadl/report/index.html", {str(tmp_path)!r})
print(json.dumps({{"metrics": run.data.metrics, "params": run.data.params, "tags": run.data.tags,
                  "listed": listed, "html": open(html).read()}}))
"""
    done = subprocess.run([sys.executable, "-c", read], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    single = json.loads(full.read_text())
    assert found["metrics"]["lsc"] == pytest.approx(100 * single["metrics"]["lsc"]["value"])
    assert found["params"]["kmnc_k"] == "1000" and found["tags"]["sadl.partial"] == "no"
    assert "sadl/report/index.html" in found["listed"] and "LSC" in found["html"]


def _naive_unique(data: dict) -> dict[str, dict[str, int]]:
    """Per test and metric, the targets its covered sets hold that no other test's do,
    counted target by target from the decoded sets (the definition, no set cover code)."""
    from pytest_sadl.covered import decode

    sec = data["covered"]
    tests = sec["tests"]
    out: dict[str, dict[str, int]] = {t: {} for t in tests}
    for m, spec in sec["metrics"].items():
        bits = {t: [decode(x, n) for x, n in zip(tests[t][m]["sets"], spec["parts"], strict=True)] for t in tests}
        for t in tests:
            only = 0
            for part, mine in enumerate(bits[t]):
                for target in range(len(mine)):
                    if mine[target] and not any(bits[o][part][target] for o in tests if o != t):
                        only += 1
            out[t][m] = only
    return out


def test_who_tests_what_in_the_json_terminal_and_html(five) -> None:
    from pytest_sadl.cli.main import main

    data = json.loads((five.path / "full.json").read_text())
    naive = _naive_unique(data)
    rows = {t["nodeid"]: t for t in data["tests"]}
    assert {n: r["unique"] for n, r in rows.items()} == naive
    assert {n: r["redundant"] for n, r in rows.items()} == {n: not any(u.values()) for n, u in naive.items()}
    dup, own = "test_project.py::test_1_fails", "test_project.py::test_5"
    assert rows[dup]["redundant"] is True  # its inputs are test_2's
    assert rows[own]["redundant"] is False and rows[own]["unique"]["lsc"] > 0 and rows[own]["unique"]["nc"] >= 0
    # the typed rows read back, and sadl minimize says the same (one implementation)
    full = _load(five.path / "full.json")
    assert {t.nodeid: t.unique for t in full.tests} == naive
    from pytest_sadl.covered import Covered, minimize

    covered = Covered.of(full)
    assert covered is not None and minimize(covered).unique == naive
    # the plugin's terminal: one short line
    out = " ".join((five.path / "full.out").read_text().split())
    assert "who tests what (LSC, DSC, MDSC, NC, KMNC, NBC, SNAC; targets no other test covers): most unique:" in out
    assert f"redundant: {dup}" in out
    # the HTML: sortable columns; sadl report of a file without the counts computes them
    redundant = sum(r["redundant"] for r in rows.values())
    for t in data["tests"]:
        del t["unique"], t["redundant"]
    (five.path / "old.json").write_text(json.dumps(data))
    assert main(["report", str(five.path / "old.json"), "--html", str(five.path / "h")]) == 0
    page = (five.path / "h" / "index.html").read_text()
    assert 'data-key="unique.lsc" data-kind="int"' in page and 'data-key="redundant" data-kind="flag"' in page
    assert page.count('<td class="num" data-v="1">yes</td>') == redundant == 1


def test_covered_sets_can_be_left_out_and_then_combine_and_minimize_refuse(five, capsys) -> None:
    from pytest_sadl.cli.main import main

    run(five, "-k", "test_2 or test_3", "--sadl-coverage", "--sadl-omit-covered-sets", "--sadl-report=json:o.json")
    data = json.loads((five.path / "o.json").read_text())
    assert "covered" not in data
    assert all("unique" in t for t in data["tests"])  # still computed, before the sets are dropped
    full, small = str(five.path / "full.json"), str(five.path / "o.json")
    for args in (["combine", full, small, "-o", str(five.path / "c.json")], ["minimize", small]):
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "--sadl-omit-covered-sets" in err and "no covered sets" in err


def test_scope_under_xdist_with_a_stop_and_a_deselection(five, monkeypatch) -> None:
    """Two workers, -k deselecting one marked test, --maxfail=1: partial, with the counts
    of what the workers really ran (which tests run before the stop depends on timing)."""
    import os
    import re

    here = str(Path(__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    args = ("-n", "2", "-v", "-k", "not test_5", "--maxfail=1", "--sadl-coverage", "--sadl-report=json:n.json")
    res = run(five, *args)
    ran = set(re.findall(r"(?:PASSED|FAILED) test_project\.py::(test_\w+)", res.stdout.str())) - {"test_unmarked"}
    assert "test_1_fails" in ran
    scope = _load(five.path / "n.json").scope
    assert scope is not None and scope.partial
    assert (scope.collected, scope.selected, scope.run, scope.recorded) == (5, 4, len(ran), len(ran))
    assert "1 marked test deselected by -k 'not test_5'" in scope.reasons
    assert "stopped after the first failure" in scope.reasons  # pytest-xdist's stop, not a Ctrl-C
    assert res.ret == pytest.ExitCode.INTERRUPTED  # pytest-xdist's own exit status for a stop
    data = json.loads((five.path / "n.json").read_text())
    assert sorted(t["nodeid"].split("::")[1] for t in data["tests"]) == sorted(ran)
