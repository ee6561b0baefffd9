"""How well a score separates a group from an in-distribution reference: AUROC, AUPR and
FPR at 95% TPR, as OpenOOD and the OOD papers report them; pure NumPy.

Scores are oriented as surprise is (higher: more out of distribution). The conventions
are the papers' (Hendrycks and Gimpel 2017; Liu et al. 2020; Sun et al. 2022):

* **AUROC**: the probability that a random out-of-distribution input scores above a
  random in-distribution one, ties counting one half (which side is "positive" does not
  change it).
* **AUPR-In** / **AUPR-Out**: the average precision (scikit-learn's
  ``average_precision_score``, a step sum over distinct thresholds, ties as one step) with
  the in-distribution inputs as positives (scored by the negated score) / with the
  out-of-distribution inputs as positives.
* **FPR@95**: the fraction of out-of-distribution inputs taken for in-distribution at the
  threshold that keeps 95% of the in-distribution inputs (in-distribution positive, as
  ``roc_curve``'s first point with TPR >= 0.95).

:func:`ood_table` makes the rows a report shows from per-group scores, and
:func:`best_sentence` says in words which score separates each group best.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pytest_sadl.criteria.mistakes import roc_auc

TPR = 0.95


def _scores(name: str, a: object) -> np.ndarray:
    s = np.asarray(a, dtype=np.float64).reshape(-1)
    if s.size == 0:
        raise ValueError(f"{name} is empty; each side needs at least one score")
    if not np.all(np.isfinite(s)):
        raise ValueError(f"{name} holds NaN or inf scores")
    return s


def auroc(in_scores: object, out_scores: object) -> float:
    """P(out > in) + P(out == in) / 2."""
    i, o = _scores("in_scores", in_scores), _scores("out_scores", out_scores)
    positive = np.r_[np.zeros(i.size, bool), np.ones(o.size, bool)]
    value = roc_auc(np.r_[i, o], positive)
    assert value is not None
    return value


def average_precision(scores: np.ndarray, positive: np.ndarray) -> float:
    """scikit-learn's ``average_precision_score``: ``sum_n (R_n - R_{n-1}) P_n`` over the
    distinct thresholds, highest first."""
    order = np.argsort(-scores, kind="stable")
    s, pos = scores[order], positive[order]
    last = np.r_[s[1:] != s[:-1], True]  # the last row of each tie block
    tp = np.cumsum(pos)[last]
    fp = np.cumsum(~pos)[last]
    precision = tp / (tp + fp)
    recall = tp / max(1, int(pos.sum()))
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def aupr_in(in_scores: object, out_scores: object) -> float:
    i, o = _scores("in_scores", in_scores), _scores("out_scores", out_scores)
    return average_precision(-np.r_[i, o], np.r_[np.ones(i.size, bool), np.zeros(o.size, bool)])


def aupr_out(in_scores: object, out_scores: object) -> float:
    i, o = _scores("in_scores", in_scores), _scores("out_scores", out_scores)
    return average_precision(np.r_[i, o], np.r_[np.zeros(i.size, bool), np.ones(o.size, bool)])


def fpr_at_tpr(in_scores: object, out_scores: object, tpr: float = TPR) -> float:
    """The fraction of out-of-distribution scores at or below the threshold under which
    at least ``tpr`` of the in-distribution scores fall (the largest such threshold)."""
    i, o = _scores("in_scores", in_scores), _scores("out_scores", out_scores)
    if not 0 < tpr <= 1:
        raise ValueError(f"tpr must be in (0, 1], got {tpr!r}")
    # in-distribution inputs to keep: the fewest whose fraction is >= tpr, as compared in floats
    need = int(np.argmax(np.arange(1, i.size + 1) / i.size >= tpr)) + 1
    threshold = np.sort(i)[need - 1]  # accept score <= threshold: keeps >= need of them
    return float(np.mean(o <= threshold))


@dataclass(frozen=True)
class OodRow:
    """One group against the reference, by one score."""

    group: str
    score: str
    n: int
    auroc: float
    aupr_in: float
    aupr_out: float
    fpr95: float


def ood_table(
    scores: Mapping[str, Mapping[str, np.ndarray]],
    reference: str | Mapping[str, np.ndarray],
    keys: Sequence[str] | None = None,
) -> list[OodRow]:
    """The OOD section's rows: for each group (in ``scores``' order) but the reference and
    each score key (``keys``' order, default the reference's), how well the score separates
    the group from the reference. ``scores``: group -> score key -> that group's per-input
    scores; ``reference``: the in-distribution group's name in ``scores``, or its scores
    (the held-out training traces'). A group without a score, or with no finite one, is
    left out of that score's rows."""
    ref = scores[reference] if isinstance(reference, str) else reference
    names = list(ref) if keys is None else list(keys)
    rows = []
    for group, by_key in scores.items():
        if isinstance(reference, str) and group == reference:
            continue
        for key in names:
            row = _ood_row(group, key, ref, by_key)
            if row is not None:
                rows.append(row)
    return rows


def _ood_row(group: str, key: str, ref: Mapping[str, np.ndarray], by_key: Mapping[str, np.ndarray]) -> OodRow | None:
    """How well score ``key`` separates ``group`` from the reference; None without finite
    scores on both sides."""
    if key not in by_key or key not in ref:
        return None
    i, o = _finite(ref[key]), _finite(by_key[key])
    if i.size == 0 or o.size == 0:
        return None
    return OodRow(group, key, int(o.size), auroc(i, o), aupr_in(i, o), aupr_out(i, o), fpr_at_tpr(i, o))


def _finite(a: object) -> np.ndarray:
    s = np.asarray(a, dtype=np.float64).reshape(-1)
    out: np.ndarray = s[np.isfinite(s)]
    return out


#: a best AUROC within 0.5 + this is "no better than chance"
CHANCE_BAND = 0.05


def best_per_group(rows: Sequence[OodRow]) -> dict[str, OodRow]:
    """Each group's row with the highest AUROC (the lower FPR@95, then the first in
    ``rows``' order, on a tie), groups in ``rows``' order."""
    best: dict[str, OodRow] = {}
    for row in rows:
        old = best.get(row.group)
        if old is None or (row.auroc, -row.fpr95) > (old.auroc, -old.fpr95):
            best[row.group] = row
    return best


def best_sentence(rows: Sequence[OodRow], labels: Mapping[str, str], against: str) -> str | None:
    """One sentence naming the score that separates each group best from ``against`` (the
    reference, in words), with its AUROC and FPR@95; ``None`` without rows. A group whose
    best AUROC is within :data:`CHANCE_BAND` of 0.5 is said to be at chance."""
    best = best_per_group(rows)
    if not best:
        return None

    def figures(r: OodRow) -> str:
        chance = ", no better than chance" if r.auroc < 0.5 + CHANCE_BAND else ""
        return f"AUROC {r.auroc:.2f}, FPR@95 {r.fpr95:.2f}{chance}"

    winners = {r.score for r in best.values()}
    if len(winners) == 1 and len(best) > 1:
        label = labels.get(next(iter(winners)), next(iter(winners)))
        parts = ", ".join(f"{g} ({figures(r)})" for g, r in best.items())
        return f"{label} separates every group best from {against}: {parts}."
    parts = "; ".join(f"{g} by {labels.get(r.score, r.score)} ({figures(r)})" for g, r in best.items())
    return f"Separated best from {against}: {parts}."
