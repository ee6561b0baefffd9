"""The terminal summary fits 80 columns (a CI log's width) without dropping what matters;
term-verbose keeps every name and column."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from pytest_sadl.report.terminal import WIDTH, render_terminal

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
