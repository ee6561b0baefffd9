"""The reports' OOD section, end to end: real pytest runs of a small project on the real
conv model with two groups, the section's figures against naive references computed from
the per-input scores in the results (and the held-out training scores the profile keeps),
``--sadl-ood-reference``, and the section in the terminal, HTML, Markdown and JSON
reports and in ``sadl report`` of the results file."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pytest_sadl.criteria.detection import OodRow, best_sentence
from pytest_sadl.results import Results
from tests.test_plugin import _warm_imports, project, project_profile, results, run  # noqa: F401  (fixtures)
from tests.test_report_cli import sadl

pytestmark = pytest.mark.tf

TWO_GROUPS = textwrap.dedent(
    """
    import numpy as np
    import pytest

    X = np.load("inputs.npy")


    @pytest.mark.sadl(group="clean")
    def test_clean(sadl_model):
        sadl_model.predict(X[:40], verbose=0)


    @pytest.mark.sadl(group="noisy")
    def test_noisy(sadl_model):
        rng = np.random.default_rng(0)
        noisy = np.clip(X[40:80] + rng.normal(0, 0.6, X[40:80].shape), 0, 1).astype(np.float32)
        sadl_model.predict(noisy, verbose=0)
    """
)
METRICS = "--sadl-metrics=lsc,dsc,mdsc,mspc"


# ------------------------------------------------------------ naive references


def naive_auroc(i: np.ndarray, o: np.ndarray) -> float:
    """P(out > in) + P(out == in) / 2, over every pair."""
    wins = sum((x > y) + 0.5 * (x == y) for x in o for y in i)
    return float(wins / (len(i) * len(o)))


def naive_ap(scores: np.ndarray, positive: np.ndarray) -> float:
    """Average precision from its definition: over each distinct threshold t, highest
    first, (recall(t) - recall(previous t)) * precision(t), predicting positive at >= t."""
    total, last_recall = 0.0, 0.0
    for t in sorted(set(scores.tolist()), reverse=True):
        predicted = scores >= t
        tp = int((predicted & positive).sum())
        recall = tp / positive.sum()
        total += (recall - last_recall) * tp / predicted.sum()
        last_recall = recall
    return total


def naive_fpr95(i: np.ndarray, o: np.ndarray) -> float:
    """The smallest in-distribution score t that keeps at least 95% of them (score <= t);
    the fraction of the group at or below it."""
    for t in sorted(i.tolist()):
        if np.mean(i <= t) >= 0.95:
            return float(np.mean(o <= t))
    raise AssertionError("unreachable")


def naive_row(i: np.ndarray, o: np.ndarray) -> dict[str, float]:
    both = np.r_[i, o]
    out_pos = np.r_[np.zeros(i.size, bool), np.ones(o.size, bool)]
    return {
        "auroc": naive_auroc(i, o),
        "aupr_in": naive_ap(-both, ~out_pos),
        "aupr_out": naive_ap(both, out_pos),
        "fpr95": naive_fpr95(i, o),
    }


def per_group_scores(data: dict, key: str) -> dict[str, np.ndarray]:
    """Each group's inputs' ``key`` scores, from the results' per-input lists."""
    groups = [data["tests"][t]["group"] for t in data["inputs"]["test"]]
    values = np.array([np.nan if v is None else v for v in data["inputs"][key]], dtype=np.float64)
    out = {}
    for g in dict.fromkeys(groups):
        v = values[np.array(groups) == g]
        out[g] = v[np.isfinite(v)]
    return out


def check_rows(section: dict, data: dict, reference: dict[str, np.ndarray], groups: list[str]) -> None:
    """Every row of the section equals the naive reference; one row per group and score."""
    keys = [k for k in ("lsa", "dsa", "mdsa", "msp") if k in reference]
    assert [(r["group"], r["score"]) for r in section["rows"]] == [(g, k) for g in groups for k in keys]
    for row in section["rows"]:
        i = reference[row["score"]]
        o = per_group_scores(data, row["score"])[row["group"]]
        assert row["inputs"] == o.size and row["reference_inputs"] == i.size
        want = naive_row(i, o)
        for name, value in want.items():
            assert row[name] == pytest.approx(value, abs=1e-12), (row, name)


# ------------------------------------------------------------ the runs


def test_ood_section_against_held_out_traces_and_a_named_group(project, tmp_path, capsys):  # noqa: F811  (the fixture imported above)
    pytester = project(tests=TWO_GROUPS)
    res = run(
        pytester,
        "--sadl-coverage",
        METRICS,
        "--sadl-report=json:out.json",
        "--sadl-report=markdown:out.md",
        "--sadl-report=html:html",
        "--sadl-report=term",
    )
    res.assert_outcomes(passed=2)
    data = results(pytester)
    section = data["ood"]
    assert section["reference"] is None and section["reason"] is None and section["unavailable"] == {}

    # default reference: the held-out training traces the profile keeps
    from pytest_sadl.engine import ProfileView

    view = ProfileView.of(project_profile(pytester.path), ["lsc", "dsc", "mdsc", "mspc"])
    held = view.held_out(["lsa", "dsa", "mdsa", "msp"], {})
    held = {k: v[np.isfinite(v)] for k, v in held.items()}
    assert set(held) == {"lsa", "dsa", "mdsa", "msp"}
    check_rows(section, data, held, ["clean", "noisy"])
    by = {(r["group"], r["score"]): r for r in section["rows"]}
    assert by[("noisy", "lsa")]["auroc"] > by[("clean", "lsa")]["auroc"]  # noise is further from training
    (sentence,) = section["sentences"]
    assert "from the held-out training traces" in sentence and "noisy" in sentence

    # the same section in every report
    out = res.stdout.str()
    assert "how well does each score tell each group from the held-out training traces?" in out
    assert sentence.split(":")[0] in out.replace("\n", " ")
    lsa_noisy = f"{by[('noisy', 'lsa')]['auroc']:.3f}"
    md = (pytester.path / "out.md").read_text()
    assert "### How well does each score tell each group from the held-out training traces?" in md
    assert lsa_noisy in md and "| group | score | inputs | AUROC | AUPR-In | AUPR-Out | FPR@95 |" in md
    html = (pytester.path / "html" / "index.html").read_text()
    assert 'id="ood-table"' in html and '<a href="#ood">OOD</a>' in html and lsa_noisy in html
    typed = Results.from_dict(data)
    assert typed.ood is not None and typed.ood.to_dict() == section

    # sadl report of the results file renders it
    assert (
        sadl("report", pytester.path / "out.json", "--markdown", tmp_path / "again.md", "--html", tmp_path / "h") == 0
    )
    assert (tmp_path / "again.md").read_text() == md
    again = (tmp_path / "h" / "index.html").read_text()
    assert 'id="ood-table"' in again and lsa_noisy in again and sentence.split(":")[0] in again

    # a group named as in-distribution: the other group against it, from the results alone
    res = run(pytester, "--sadl-coverage", METRICS, "--sadl-ood-reference=clean", "--sadl-report=json:ref.json")
    res.assert_outcomes(passed=2)
    data = results(pytester, "ref.json")
    section = data["ood"]
    assert section["reference"] == "clean"
    check_rows(section, data, per_group_scores_all(data, ["lsa", "dsa", "mdsa", "msp"], "clean"), ["noisy"])
    assert section["sentences"][0].endswith(".") and "from the group clean" in section["sentences"][0]


def per_group_scores_all(data: dict, keys: list[str], group: str) -> dict[str, np.ndarray]:
    return {k: per_group_scores(data, k)[group] for k in keys}


def test_an_unknown_reference_group_is_refused_in_one_line(project):  # noqa: F811  (the fixture imported above)
    pytester = project(tests=TWO_GROUPS)
    res = run(
        pytester, "--sadl-coverage", "--sadl-ood-reference=nosuch", "--sadl-report=json:out.json", "--sadl-report=term"
    )
    res.assert_outcomes(passed=2)
    section = results(pytester)["ood"]
    want = (
        "--sadl-ood-reference=nosuch names no group of this run (its groups: clean, noisy); "
        "name one of them, or leave it out to compare with the held-out training traces"
    )
    assert section["reason"] == want and section["rows"] == []
    assert want in results(pytester)["outcome"]["warnings"]
    assert "No OOD section: " + want[:40] in res.stdout.str()


def test_the_ood_reference_option_is_declared_with_its_ini_twin(project):  # noqa: F811  (the fixture imported above)
    pytester = project(tests=TWO_GROUPS, extra="sadl_ood_reference = noisy")
    res = run(pytester, "--sadl-coverage", "--sadl-metrics=lsc", "--sadl-report=json:out.json")
    res.assert_outcomes(passed=2)
    section = results(pytester)["ood"]
    assert section["reference"] == "noisy" and [r["group"] for r in section["rows"]] == ["clean"]


# ------------------------------------------------------------ the sentence


def _row(group: str, score: str, auroc: float, fpr: float) -> OodRow:
    return OodRow(group, score, 10, auroc, 0.5, 0.5, fpr)


def test_the_sentence_names_each_groups_best_score():
    labels = {"lsa": "LSA", "msp": "MSP"}
    rows = [
        _row("a", "lsa", 0.9, 0.5),
        _row("a", "msp", 0.8, 0.4),
        _row("b", "lsa", 0.6, 0.9),
        _row("b", "msp", 0.7, 0.8),
    ]
    assert best_sentence(rows, labels, "X") == (
        "Separated best from X: a by LSA (AUROC 0.90, FPR@95 0.50); b by MSP (AUROC 0.70, FPR@95 0.80)."
    )
    rows = [_row("a", "lsa", 0.9, 0.5), _row("a", "msp", 0.9, 0.6), _row("b", "lsa", 0.52, 0.9)]
    assert best_sentence(rows, labels, "X") == (
        "LSA separates every group best from X: a (AUROC 0.90, FPR@95 0.50), "
        "b (AUROC 0.52, FPR@95 0.90, no better than chance)."
    )
    assert best_sentence([], labels, "X") is None


def test_a_results_file_without_the_section_still_reads(tmp_path):
    doc = json.loads((Path(__file__).parent / "data" / "results-classifier.json").read_text())
    assert "ood" not in doc and Results.from_dict(doc).ood is None
