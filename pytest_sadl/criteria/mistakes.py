"""Does surprise predict this model's mistakes? The figures, on NumPy arrays.

Given per-input surprise scores (LSA, DSA, MDSA), the model's outputs and the true labels
of the inputs the tests labelled, :func:`analyse` says how well each score tells the
model's mistakes apart, next to simple confidence baselines (Weiss and Tonella, ISSTA
2022, found these often as good as SA):

* classifiers: the error rate; the ROC-AUC of each score for "misclassified" against
  "correct" (1.0: every misclassified input scores higher than every correct one; 0.5:
  chance), for LSA, DSA and MDSA and for the baselines DeepGini (``1 - sum p^2``), softmax
  entropy (``-sum p log p``), margin (``1 - (p_top - p_second)``) and the maximum softmax
  probability, MSP (``1 - p_top``, Hendrycks and Gimpel, ICLR 2017), each oriented so that
  higher means "less sure"; the accuracy in each fifth of the inputs ordered by a score
  (the paper's RQ1 view: accuracy should fall as surprise rises);
* regression models: the Spearman rank correlation of each score with the absolute error,
  and the mean absolute error in each fifth.

Plain-words sentences that say what the numbers mean for this model are part of the
result, so that every report shows the same words and none recomputes a figure. Pure
NumPy: no TensorFlow, no pytest, no SciPy needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "SCORE_LABELS",
    "BASELINES",
    "Analysis",
    "analyse",
    "roc_auc",
    "spearman",
    "probabilities",
    "confidence_scores",
]

SCORE_LABELS = {
    "lsa": "LSA",
    "dsa": "DSA",
    "mdsa": "MDSA",
    "deepgini": "DeepGini",
    "entropy": "softmax entropy",
    "margin": "margin",
    "msp": "MSP",
}
BASELINES = ("deepgini", "entropy", "margin", "msp")
FIFTHS = 5
CHANCE_BAND = 0.05  # an AUC within 0.5 +- this is "no better than chance"
TIE_BAND = 0.02  # two AUCs closer than this are "about as good"


def roc_auc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """ROC-AUC of ``scores`` for ``positive`` (bool): the probability that a random positive
    scores above a random negative, ties counting one half (the Mann-Whitney U statistic,
    from average ranks). ``None`` when either class is empty."""
    s = np.asarray(scores, dtype=np.float64)
    pos = np.asarray(positive, dtype=bool)
    n_pos = int(pos.sum())
    n_neg = pos.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = _average_ranks(s)
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    """Spearman's rank correlation (average ranks for ties); ``None`` for fewer than three
    pairs or a constant side."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.size < 3:
        return None
    ra, rb = _average_ranks(a), _average_ranks(b)
    ra -= ra.mean()
    rb -= rb.mean()
    denom = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    return None if denom == 0 else float((ra * rb).sum() / denom)


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n, tied values sharing the mean of their ranks."""
    order = np.argsort(values, kind="stable")
    sorted_v = values[order]
    starts = np.flatnonzero(np.r_[True, sorted_v[1:] != sorted_v[:-1]])
    ends = np.r_[starts[1:], values.size]
    mean_rank = (starts + ends + 1) / 2.0  # mean of the 1-based ranks starts+1 .. ends
    ranks = np.empty(values.size)
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return ranks


def _two_classes(p: np.ndarray) -> np.ndarray:
    """``[1 - p, p]`` of one sigmoid unit's outputs (a logit first goes through the sigmoid)."""
    if p.size and (p.min() < 0 or p.max() > 1):
        p = 1.0 / (1.0 + np.exp(-p))
    return np.stack([1.0 - p, p], axis=1)


def probabilities(output: np.ndarray) -> np.ndarray:
    """Class probabilities ``(n, k)`` from a classifier's output: one sigmoid unit becomes
    ``[1 - p, p]``; rows that are not already probabilities (logits) go through a softmax."""
    out = np.asarray(output, dtype=np.float64)
    if out.ndim == 1 or out.shape[1] == 1:
        return _two_classes(out.reshape(-1))
    if out.size and (out.min() >= 0 and np.allclose(out.sum(axis=1), 1.0, atol=1e-3)):
        return out
    shifted = np.exp(out - out.max(axis=1, keepdims=True))
    softmax: np.ndarray = shifted / shifted.sum(axis=1, keepdims=True)
    return softmax


def confidence_scores(output: np.ndarray) -> dict[str, np.ndarray]:
    """DeepGini, softmax entropy, margin and MSP (``1 - p_top``) of each input, higher
    meaning less sure. (MSP is also an OOD score, ``mspc``, computed from the SA layer's
    logits; here it is the model's own output's, which replaces it in the mistakes
    analysis: the same number where both exist.)"""
    p = probabilities(output)
    top2 = np.sort(p, axis=1)[:, -2:] if p.shape[1] >= 2 else np.c_[np.zeros(len(p)), p]
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.where(p > 0, p * np.log(p), 0.0).sum(axis=1)
    return {
        "deepgini": 1.0 - (p * p).sum(axis=1),
        "entropy": entropy,
        "margin": 1.0 - (top2[:, 1] - top2[:, 0]),
        "msp": 1.0 - top2[:, 1],
    }


@dataclass
class Fifth:
    """One fifth of the labelled inputs ordered by a score."""

    lowest: float
    highest: float
    inputs: int
    accuracy: float | None = None  # classifiers
    mean_abs_error: float | None = None  # regression


@dataclass
class Analysis:
    """The figures of one set of labelled inputs (all of them, or one group)."""

    kind: str  # "classifier" | "regression"
    labelled: int
    errors: int | None = None  # classifiers: misclassified inputs
    error_rate: float | None = None
    mean_abs_error: float | None = None  # regression
    auc: dict[str, float | None] = field(default_factory=dict)  # classifiers: per score
    spearman: dict[str, float | None] = field(default_factory=dict)  # regression: per score
    fifths: dict[str, list[Fifth]] = field(default_factory=dict)  # per SA score
    scored: dict[str, int] = field(default_factory=dict)  # labelled inputs with a finite score
    sentences: list[str] = field(default_factory=list)
    name: str | None = None  # the group, for a per-group analysis

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fifths(score: np.ndarray, correct: np.ndarray | None, abs_err: np.ndarray | None) -> list[Fifth]:
    if score.size < FIFTHS:
        return []
    order = np.argsort(score, kind="stable")
    out = []
    for part in np.array_split(order, FIFTHS):
        f = Fifth(float(score[part].min()), float(score[part].max()), int(part.size))
        if correct is not None:
            f.accuracy = float(correct[part].mean())
        if abs_err is not None:
            f.mean_abs_error = float(abs_err[part].mean())
        out.append(f)
    return out


def _one(
    kind: str,
    scores: Mapping[str, np.ndarray],
    correct: np.ndarray | None,
    abs_err: np.ndarray | None,
    name: str | None,
) -> Analysis:
    n = int(len(correct) if correct is not None else len(abs_err))  # type: ignore[arg-type]
    a = Analysis(kind=kind, labelled=n, name=name)
    if correct is not None:
        a.errors = int((~correct).sum())
        a.error_rate = float(a.errors / n) if n else None
    else:
        a.mean_abs_error = float(abs_err.mean()) if n else None  # type: ignore[union-attr]
    for key, score in scores.items():
        _add_score(a, key, score, correct, abs_err)
    return a


def _add_score(
    a: Analysis, key: str, score: np.ndarray, correct: np.ndarray | None, abs_err: np.ndarray | None
) -> None:
    """One score's figures over the inputs where it is finite: AUC (classifier) or Spearman
    (regression), and its fifths unless it is a baseline."""
    ok = np.isfinite(score)
    a.scored[key] = int(ok.sum())
    if correct is not None:
        a.auc[key] = roc_auc(score[ok], ~correct[ok])
    else:
        a.spearman[key] = spearman(score[ok], abs_err[ok])  # type: ignore[index]
    if key not in BASELINES:
        a.fifths[key] = _fifths(
            score[ok], None if correct is None else correct[ok], None if abs_err is None else abs_err[ok]
        )


def analyse(
    scores: Mapping[str, np.ndarray | None],
    labels: Sequence[Any] | np.ndarray,
    *,
    classifier: bool,
    pred: np.ndarray | None = None,
    output: np.ndarray | None = None,
    groups: Sequence[str] | np.ndarray | None = None,
    confidence: Mapping[str, np.ndarray] | None = None,
) -> tuple[Analysis, list[Analysis]] | None:
    """The analysis over all labelled inputs and per group (in order of first appearance).

    ``scores``: per-input SA arrays by name (``None`` entries are skipped, e.g. DSA of a
    regression model); ``labels``: the true class (classifier) or target (regression) of
    each input, ``None``/NaN where unlabelled; ``pred``: predicted classes (classifier);
    ``output``: the model's outputs (probabilities or logits for a classifier, which give
    the baselines; predictions for a regression model); ``groups``: each input's group;
    ``confidence``: a classifier's baselines already computed (``confidence_scores`` of
    its output, as a results file keeps them), used instead of ``output``.
    ``None`` when no input is labelled.
    """
    lab = _label_matrix(labels)
    has = np.isfinite(lab).all(axis=1)
    if not has.any():
        return None
    sa = {k: np.asarray(v, dtype=np.float64) for k, v in scores.items() if v is not None}
    correct_all: np.ndarray | None = None
    err_all: np.ndarray | None = None
    if classifier:
        correct_all = _correct(lab, pred)
        sa.update(_baselines(output, confidence))
    else:
        err_all = _abs_errors(lab, output)
    kind = "classifier" if classifier else "regression"

    def subset(rows: np.ndarray, name: str | None) -> Analysis:
        return _one(
            kind,
            {k: v[rows] for k, v in sa.items()},
            None if correct_all is None else correct_all[rows],
            None if err_all is None else err_all[rows],
            name,
        )

    overall = subset(np.flatnonzero(has), None)
    overall.sentences = sentences(overall)
    per_group = []
    if groups is not None:
        g = np.asarray(groups)
        for name in dict.fromkeys(g[has].tolist()):
            per_group.append(subset(np.flatnonzero(has & (g == name)), str(name)))
    return overall, per_group


def _correct(lab: np.ndarray, pred: np.ndarray | None) -> np.ndarray:
    """Whether a classifier's predicted class is each input's label."""
    if pred is None:
        raise ValueError("analyse(classifier=True) needs pred, the predicted classes")
    correct: np.ndarray = np.asarray(pred).reshape(-1) == lab[:, 0]
    return correct


def _baselines(output: np.ndarray | None, confidence: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    """A classifier's confidence baselines: those already computed, else from its outputs."""
    if confidence is not None:
        return {k: np.asarray(v, dtype=np.float64) for k, v in confidence.items()}
    if output is not None:
        return dict(confidence_scores(output))
    return {}


def _abs_errors(lab: np.ndarray, output: np.ndarray | None) -> np.ndarray:
    """A regression model's mean absolute error per input over its targets."""
    if output is None:
        raise ValueError("analyse(classifier=False) needs output, the model's predictions")
    out = np.asarray(output, dtype=np.float64).reshape(len(lab), -1)
    if out.shape[1] != lab.shape[1]:
        raise ValueError(f"labels have {lab.shape[1]} target(s) per input but the model outputs {out.shape[1]}")
    errors: np.ndarray = np.abs(out - lab).mean(axis=1)
    return errors


def _label_row(label: Any) -> np.ndarray | None:
    """One input's label as a float vector; ``None`` where unlabelled."""
    return None if label is None else np.atleast_1d(np.asarray(label, dtype=np.float64)).reshape(-1)


def _label_matrix(labels: Sequence[Any] | np.ndarray) -> np.ndarray:
    """Labels as a float ``(n, k)`` matrix, NaN rows where unlabelled (``None``)."""
    rows = [_label_row(v) for v in labels]
    width = max((r.size for r in rows if r is not None), default=1)
    out = np.full((len(rows), width), np.nan)
    for i, r in enumerate(rows):
        if r is not None:
            if r.size != width:
                raise ValueError(f"label {i} has {r.size} value(s) but others have {width}")
            out[i] = r
    return out


def _ranked(values: Mapping[str, float | None], keys: Sequence[str]) -> list[tuple[str, float]]:
    present = [(k, values[k]) for k in keys if values.get(k) is not None]
    return sorted(present, key=lambda kv: -kv[1])  # type: ignore[arg-type]


def sentences(a: Analysis) -> list[str]:
    """What the figures mean for this model, in plain words."""
    sa_keys: list[str] = [k for k in ("lsa", "dsa", "mdsa") if k in a.scored]
    if a.kind == "classifier":
        return _classifier_sentences(a, sa_keys)
    return _regression_sentences(a, sa_keys)


def _classifier_sentences(a: Analysis, sa_keys: list[str]) -> list[str]:
    out = [
        f"{a.errors} of {a.labelled} labelled inputs are misclassified (error rate {100 * (a.error_rate or 0):.1f}%)."
    ]
    if not a.errors or a.errors == a.labelled:
        out.append(
            "Every labelled input is "
            + ("classified correctly" if not a.errors else "misclassified")
            + ", so no score can be judged on telling mistakes apart; label inputs the model gets wrong too."
        )
        return out
    best_sa = _ranked(a.auc, sa_keys)
    if best_sa:
        out.append(_auc_sentence(*best_sa[0], _ranked(a.auc, BASELINES)))
    fifths = _fifths_sentence(a, sa_keys)
    if fifths is not None:
        out.append(fifths)
    return out


def _auc_sentence(key: str, auc: float, best_base: list[tuple[str, float]]) -> str:
    """How the best SA score finds the mistakes, and against the best confidence baseline."""
    label = SCORE_LABELS[key]
    if auc >= 0.5 + CHANCE_BAND:
        text = f"On this model, {label} finds misclassified inputs better than chance (AUC {auc:.2f})"
    elif auc > 0.5 - CHANCE_BAND:
        text = f"On this model, no surprise measure finds misclassified inputs better than chance (best: {label}, AUC {auc:.2f})"
    else:
        text = f"On this model, surprise points away from the mistakes: even the best, {label}, has AUC {auc:.2f}, below chance"
    if not best_base:
        return text + "."
    bkey, bauc = best_base[0]
    blabel = SCORE_LABELS[bkey]
    if auc > bauc + TIE_BAND:
        return text + f" and better than {blabel} ({bauc:.2f}), the best confidence baseline."
    if auc < bauc - TIE_BAND:
        return text + f", but worse than {blabel} ({bauc:.2f}): a confidence score alone does better here."
    return text + f", about as well as {blabel} ({bauc:.2f})."


def _fifths_sentence(a: Analysis, sa_keys: list[str]) -> str | None:
    """How accuracy moves from the least to the most surprising fifth, by the first SA score with fifths."""
    for key in sa_keys:
        ends = _end_accuracies(a.fifths.get(key) or [])
        if ends is not None:
            lo, hi = ends
            trend = _trend(lo, hi)
            expect = " (as the paper's RQ1 expects)." if trend == "falls" else " (the paper's RQ1 expects it to fall)."
            return (
                f"By {SCORE_LABELS[key]}, accuracy {trend} from {100 * lo:.0f}% on the least surprising fifth of the "
                f"inputs to {100 * hi:.0f}% on the most surprising fifth" + expect
            )
    return None


def _end_accuracies(fifths: list[Fifth]) -> tuple[float, float] | None:
    """The accuracy of the first and the last of all five fifths; None without both."""
    if len(fifths) != FIFTHS:
        return None
    lo, hi = fifths[0].accuracy, fifths[-1].accuracy
    return None if lo is None or hi is None else (lo, hi)


def _trend(lo: float, hi: float) -> str:
    """How a value moves from ``lo`` to ``hi``, by more than a point either way."""
    if hi < lo - 0.01:
        return "falls"
    return "rises" if hi > lo + 0.01 else "stays"


def _regression_sentences(a: Analysis, sa_keys: list[str]) -> list[str]:
    out = [f"{a.labelled} labelled inputs; mean absolute error {a.mean_abs_error:.4g}."]
    ranked = _ranked(a.spearman, sa_keys)
    if ranked:
        key, rho = ranked[0]
        label = SCORE_LABELS[key]
        if rho >= 0.1:
            out.append(
                f"On this model, inputs with higher {label} tend to have larger errors (Spearman rho {rho:.2f})."
            )
        else:
            out.append(
                f"On this model, no surprise measure rises with the error (best: {label}, Spearman rho {rho:.2f})."
            )
    return out
