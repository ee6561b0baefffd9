"""The "does surprise predict mistakes" figures against references (pairwise AUC, SciPy's Spearman)."""

from __future__ import annotations

import naive
import numpy as np
import pytest
import scipy.stats
from sklearn.metrics import roc_auc_score

from pytest_sadl.criteria.mistakes import (
    analyse,
    confidence_scores,
    probabilities,
    roc_auc,
    spearman,
)


@pytest.mark.parametrize("seed", range(4))
def test_roc_auc_matches_pairwise_count_and_sklearn_with_ties(seed):
    rng = np.random.default_rng(seed)
    scores = np.round(rng.normal(size=60), 1)  # rounding makes ties
    positive = rng.random(60) < 0.3 + 0.1 * seed
    assert roc_auc(scores, positive) == pytest.approx(naive.roc_auc(scores, positive), abs=1e-12)
    assert roc_auc(scores, positive) == pytest.approx(roc_auc_score(positive, scores), abs=1e-12)


def test_roc_auc_extremes_and_one_class():
    assert roc_auc(np.array([1.0, 2, 3, 4]), np.array([0, 0, 1, 1], bool)) == 1.0
    assert roc_auc(np.array([4.0, 3, 2, 1]), np.array([0, 0, 1, 1], bool)) == 0.0
    assert roc_auc(np.array([1.0, 2]), np.array([True, True])) is None


@pytest.mark.parametrize("seed", range(3))
def test_spearman_matches_scipy_with_ties(seed):
    rng = np.random.default_rng(seed)
    a = np.round(rng.normal(size=40), 1)
    b = a + rng.normal(size=40)
    assert spearman(a, b) == pytest.approx(scipy.stats.spearmanr(a, b).statistic, abs=1e-12)
    assert spearman(a[:2], b[:2]) is None
    assert spearman(np.ones(5), b[:5]) is None


def test_confidence_scores_follow_their_formulas():
    p = np.array([[0.7, 0.2, 0.1], [1 / 3, 1 / 3, 1 / 3], [1.0, 0.0, 0.0]])
    s = confidence_scores(p)
    np.testing.assert_allclose(s["deepgini"], [1 - (0.49 + 0.04 + 0.01), 2 / 3, 0.0])
    np.testing.assert_allclose(
        s["entropy"], [-(0.7 * np.log(0.7) + 0.2 * np.log(0.2) + 0.1 * np.log(0.1)), np.log(3), 0.0]
    )
    np.testing.assert_allclose(s["margin"], [1 - 0.5, 1.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(s["msp"], [1 - 0.7, 1 - 1 / 3, 0.0], atol=1e-12)  # 1 - the top probability
    # logits go through a softmax; one sigmoid unit is two classes
    np.testing.assert_allclose(probabilities(np.log(p[:1] + 0.0) + 5.0), p[:1], rtol=1e-9)
    np.testing.assert_allclose(probabilities(np.array([[0.8], [0.1]])), [[0.2, 0.8], [0.9, 0.1]])


def _classifier_case(seed=0, n=400):
    """Inputs whose SA rises with the chance of a mistake; softmax confidence carries less signal."""
    rng = np.random.default_rng(seed)
    surprise = rng.random(n)
    wrong = rng.random(n) < surprise * 0.6
    labels = rng.integers(0, 3, n)
    pred = np.where(wrong, (labels + 1) % 3, labels)
    probs = rng.dirichlet(np.ones(3), n)
    probs[np.arange(n), pred] += 1.0
    probs /= probs.sum(axis=1, keepdims=True)
    groups = np.where(np.arange(n) < n // 2, "clean", "attack")
    return surprise, labels, pred, probs, groups, wrong


def test_analyse_classifier_overall_groups_fifths_and_words():
    surprise, labels, pred, probs, groups, wrong = _classifier_case()
    labelled = labels.astype(object)
    labelled[::10] = None  # unlabelled inputs are left out
    overall, per_group = analyse(
        {"lsa": surprise, "dsa": -surprise, "mdsa": None},
        labelled,
        classifier=True,
        pred=pred,
        output=probs,
        groups=groups,
    )
    keep = np.arange(len(labels)) % 10 != 0
    assert overall.labelled == keep.sum()
    assert overall.errors == wrong[keep].sum()
    assert overall.error_rate == pytest.approx(wrong[keep].mean())
    assert set(overall.auc) == {"lsa", "dsa", "deepgini", "entropy", "margin", "msp"}
    assert overall.auc["lsa"] == pytest.approx(naive.roc_auc(surprise[keep], wrong[keep]))
    assert overall.auc["dsa"] == pytest.approx(1 - overall.auc["lsa"])
    gini = 1 - (probs**2).sum(axis=1)
    assert overall.auc["deepgini"] == pytest.approx(naive.roc_auc(gini[keep], wrong[keep]))
    msp = 1 - probs.max(axis=1)  # Hendrycks and Gimpel's maximum softmax probability, oriented as surprise
    assert overall.auc["msp"] == pytest.approx(naive.roc_auc(msp[keep], wrong[keep]))
    fifths = overall.fifths["lsa"]
    assert [f.inputs for f in fifths] == [72] * 5 and sum(f.inputs for f in fifths) == keep.sum()
    order = np.argsort(surprise[keep], kind="stable")
    assert fifths[0].accuracy == pytest.approx(1 - wrong[keep][order[:72]].mean())
    assert fifths[-1].accuracy < fifths[0].accuracy
    assert [g.name for g in per_group] == ["clean", "attack"]
    assert sum(g.labelled for g in per_group) == overall.labelled
    words = " ".join(overall.sentences)
    assert f"{overall.errors} of {overall.labelled} labelled inputs are misclassified" in words
    assert f"LSA finds misclassified inputs better than chance (AUC {overall.auc['lsa']:.2f})" in words
    assert "accuracy falls from" in words


def test_analyse_says_when_a_baseline_beats_surprise_and_when_nothing_is_wrong():
    surprise, labels, pred, probs, _, wrong = _classifier_case(1)
    noise = np.random.default_rng(9).random(len(labels))
    gini_like = (
        np.where(wrong, 0.9, 0.1)[:, None] * np.array([[0.5, 0.5, 0]])
        + np.where(wrong, 0.1, 0.9)[:, None] * np.eye(3)[pred]
    )
    overall, _ = analyse({"lsa": noise}, labels, classifier=True, pred=pred, output=gini_like)
    assert any("but worse than" in s for s in overall.sentences)
    perfect, _ = analyse({"lsa": noise}, pred, classifier=True, pred=pred, output=probs)
    assert perfect.errors == 0 and all(v is None for v in perfect.auc.values())
    assert "classified correctly" in perfect.sentences[-1]


def test_analyse_regression_rank_correlation_with_absolute_error():
    rng = np.random.default_rng(3)
    y = rng.normal(size=(200, 1))
    out = y + rng.normal(size=(200, 1)) * rng.random((200, 1))
    err = np.abs(out - y)[:, 0]
    lsa = err + 0.1 * rng.random(200)
    overall, _ = analyse({"lsa": lsa, "dsa": None}, y[:, 0], classifier=False, output=out)
    assert overall.kind == "regression" and overall.errors is None
    assert overall.spearman["lsa"] == pytest.approx(scipy.stats.spearmanr(lsa, err).statistic)
    assert overall.mean_abs_error == pytest.approx(err.mean())
    assert overall.fifths["lsa"][-1].mean_abs_error > overall.fifths["lsa"][0].mean_abs_error
    assert "tend to have larger errors" in overall.sentences[-1]


def test_analyse_nothing_labelled_and_nan_scores():
    assert analyse({"lsa": np.ones(3)}, [None, None, None], classifier=True, pred=np.zeros(3, int)) is None
    lsa = np.array([np.nan, 1.0, 2.0, 3.0])
    overall, _ = analyse({"lsa": lsa}, [0, 0, 1, 1], classifier=True, pred=np.array([0, 0, 0, 0]))
    assert overall.scored["lsa"] == 3 and overall.auc["lsa"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="target"):
        analyse({"lsa": lsa}, [0.0, 1, 2, 3], classifier=False, output=np.zeros((4, 2)))
