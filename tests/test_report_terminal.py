"""The terminal summary fits 80 columns (a CI log's width) without dropping what matters;
term-verbose keeps every name and column."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_sadl.report import terminal as _terminal
from pytest_sadl.report.terminal import WIDTH
from pytest_sadl.results import Results


def _typed(doc: Any) -> Results:
    """The renderers take typed results: a test's document (a fixture file, altered) read as a run's."""
    return doc if isinstance(doc, Results) else Results.from_dict(doc)


def render_terminal(doc: Any, **kw: Any) -> list[str]:
    return _terminal.render_terminal(_typed(doc), **kw)


DATA = Path(__file__).parent / "data"
FILES = ("results-classifier.json", "results-regression.json", "results-baseline.json")


@pytest.mark.parametrize("name", FILES)
def test_every_line_of_the_summary_fits_80_columns(name):
    results = json.loads((DATA / name).read_text())
    lines = render_terminal(results)
    assert WIDTH == 80 and max(map(len, lines)) <= 80, [line for line in lines if len(line) > 80]
    text = "\n".join(lines)
    for metric in ("LSC", "NC", "KMNC", "NBC", "SNAC"):
        assert f"\n{metric} " in text, metric  # every metric still has its row


def test_long_layer_lists_warnings_and_group_names_are_wrapped_or_cut():
    results = json.loads((DATA / "results-classifier.json").read_text())
    big = copy.deepcopy(results)
    big["config"]["coverage_layers"] = [f"block_{i}_expand_relu" for i in range(206)]
    big["outcome"]["warnings"] = ["the training data changed since the last profile " * 5]
    big["groups"][0]["name"] = "a-group-name-that-is-far-too-long-for-one-column-of-the-table"
    lines = render_terminal(big)
    assert max(map(len, lines)) <= 80, [line for line in lines if len(line) > 80]
    text = "\n".join(lines)
    assert "coverage layers: 206 (block_0_expand_relu, " in text and "more)" in text
    assert " ".join(text.split()).count("the training data changed") == 5, "a wrapped warning keeps all its words"
    assert "a-group-name" in text and "…" in text
    verbose = "\n".join(render_terminal(big, verbose=True))
    assert (
        "block_205_expand_relu" in verbose
        and "a-group-name-that-is-far-too-long-for-one-column-of-the-table" in verbose
    )


def test_the_mistakes_table_keeps_the_surprise_measures_and_the_best_baseline():
    results = json.loads((DATA / "results-classifier.json").read_text())
    text = "\n".join(render_terminal(results))
    verbose = "\n".join(render_terminal(results, verbose=True))
    assert "LSA AUC" in text and "MDSA AUC" in text and "best conf. AUC" in text
    assert "DeepGini AUC" in verbose and "best conf." not in verbose
    overall = results["mistakes"]["overall"]["auc"]
    baselines = results["mistakes"]["baselines"]
    best = max(overall[k] for k in baselines if overall.get(k) is not None)
    row = next(line for line in text.splitlines() if line.startswith("all labelled"))
    assert row.split()[-1] == f"{best:.2f}"


def _every_metric(results: dict) -> dict:
    """``results`` as a ``--sadl-metrics=all`` run would have it: the opt-in criteria
    added to the metrics, the groups and the mistakes analysis."""
    run = copy.deepcopy(results)
    extra = {
        "mlsc": {"value": 0.351, "covered": 351, "total": 1000, "applicable": True, "above": 5},
        "mmdsc": {"value": 0.795, "covered": 795, "total": 1000, "applicable": True, "above": 3},
        "tknc": {"value": 0.6594, "covered": 91, "total": 138, "applicable": True},
        "tknp": {"value": 3644.0, "covered": 3644, "total": 12312, "applicable": True},
        "nlc": {"value": 0.505155, "covered": 0, "total": 12312, "applicable": True},
        "cc": {"value": 31.0, "covered": 31, "total": 61560, "applicable": True},
    }
    run["metrics"].update(extra)
    run["config"]["mlsc"] = run["config"]["mmdsc"] = dict(run["config"]["lsc"])
    for i, g in enumerate(run["groups"]):
        g["cumulative"].update({k: (v["value"] * (i + 1) / len(run["groups"])) for k, v in extra.items()})
    for row in [run["mistakes"]["overall"], *run["mistakes"]["groups"]]:
        row["auc"].update(mlsa=0.99, mmdsa=0.98)  # above every baseline: never taken for one
    return run


def test_every_metric_fits_80_columns_with_the_group_table_split():
    results = json.loads((DATA / "results-classifier.json").read_text())
    lines = render_terminal(_every_metric(results))
    assert max(map(len, lines)) <= 80, [line for line in lines if len(line) > 80]
    text = "\n".join(lines)
    heads = [line.split() for line in lines if line.startswith("group ") and "labelled" not in line]
    assert len(heads) >= 2 and heads[0][:3] == ["group", "tests", "inputs"]
    assert all(h[0] == "group" for h in heads)  # each part of the table names its groups
    labels = ["LSC", "DSC", "MDSC", "MLSC", "MMDSC", "NC", "KMNC", "NBC", "SNAC", "TKNC", "TKNP", "NLC", "CC"]
    assert heads[0][3:] + [m for h in heads[1:] for m in h[1:]] == labels  # every metric once, in report order
    # the last group's row of each part (its name, cut, is one word here)
    cells = [c for line in lines if line.startswith("+ <script>") for c in line.split()[2:]][2:]
    last = dict(zip(labels, cells, strict=True))
    assert last["KMNC"] == "92.25" and (last["TKNP"], last["NLC"], last["CC"]) == ("3,644", "0.5052", "31")
    # the count criteria say what they count; NLC has no targets, so no "0 / n"
    assert "NLC       0.5052                -" in text and "0 / 12312" not in text
    assert "counts: TKNP: distinct top-k patterns / inputs;" in " ".join(text.split())
    # MLSA and MMDSA are surprise measures beside LSA, never folded into the baselines
    mistakes = next(line for line in lines if line.startswith("group ") and "labelled" in line)
    assert mistakes.split()[4:] == ["LSA", "DSA", "MDSA", "MLSA", "MMDSA", "best", "conf."]
    overall = results["mistakes"]["overall"]["auc"]
    best = max(overall[k] for k in results["mistakes"]["baselines"] if overall.get(k) is not None)
    row = next(line for line in lines if line.startswith("all labelled"))
    assert row.split()[-3:] == ["0.99", "0.98", f"{best:.2f}"]
