"""Which inputs to label or test next: choosing a budget of inputs from a pool, on NumPy arrays.

Six strategies (no TensorFlow, no pytest); the first four are given per-input scores of
the pool:

* ``surprise`` — the ``budget`` inputs with the highest surprise (LSA, DSA or MDSA);
  inputs whose score is NaN come last.
* ``coverage`` — greedy surprise coverage: each pick is the input that covers the most
  still-uncovered SC buckets (summed over LSC, DSC and MDSC, over the same fixed bounds
  the tests are measured with), starting from the buckets the current tests already cover
  (from their results JSON). Ties go to the earlier pool index; once no input adds a
  bucket, the remaining picks take the most surprising inputs left by LSA (by DSA, then
  MDSA, when the pool has no LSA scores).
* ``ranges`` — the paper's Table VII (RQ4): a uniform random sample (seeded) from the
  inputs whose score lies in ``[lower, lower + upto * (U - lower)]``, ``U`` the upper
  bound of that score's SC and ``lower`` its lower bound (0 in the paper); ``upto`` is 1/4,
  2/4, 3/4 or 1 for the table's four widening ranges.
* ``deepgini`` — the baseline: the highest DeepGini impurity ``1 - sum p^2`` of the model's
  softmax output (Feng et al., ISSTA 2020), the prioritiser that Weiss and Tonella found
  hard to beat.
* ``ctm``, ``cam`` — the first ``budget`` inputs of the coverage-total or
  coverage-additional order of the pool's traces by any coverage criterion of the registry
  (:mod:`~pytest_sadl.criteria.prioritise`).

:func:`select` returns a :class:`Selection` with the chosen pool indices in pick order; for
the strategies that order the whole pool (``ORDERING``), and the pool's faults given, the
APFD of that order (:func:`~pytest_sadl.criteria.prioritise.apfd`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_sadl.criteria.mistakes import confidence_scores
from pytest_sadl.criteria.prioritise import apfd, prioritise
from pytest_sadl.criteria.registry import SURPRISE
from pytest_sadl.criteria.surprise import bucket_edges, bucket_index

if TYPE_CHECKING:
    from pytest_sadl.criteria.shape import Batch, Setup

__all__ = [
    "STRATEGIES",
    "Selection",
    "select",
    "covered_from_results",
    "greedy_coverage",
]

STRATEGIES = ("surprise", "coverage", "ranges", "deepgini", "ctm", "cam")
#: the strategies that order the whole pool (their APFD is defined)
ORDERING = ("surprise", "deepgini", "ctm", "cam")

Bounds = tuple[float, float, int]  # (lower, upper, buckets)


@dataclass
class Selection:
    """The chosen inputs: pool indices in pick order, and what each pick brought."""

    strategy: str
    budget: int
    indices: np.ndarray  # (k,) int64, k <= budget
    pool: int  # inputs in the pool
    by: str | None = None  # the score ranked or sampled ("lsa", "dsa", "mdsa", "deepgini")
    new_buckets: list[int] | None = None  # coverage: buckets each pick newly covered
    eligible: int | None = None  # ranges: inputs inside the range
    range: tuple[float, float] | None = None  # ranges: the score interval sampled from
    notes: list[str] = field(default_factory=list)
    #: ctm / cam: the coverage criterion ordered by, and the targets each pick newly covered
    #: (cam) or covers alone (ctm)
    criterion: str | None = None
    new_targets: list[int] | None = None
    #: the whole pool in the strategy's order (the strategies of ``ORDERING``)
    order: np.ndarray | None = None
    #: APFD of ``order`` when the pool's labels are known, and the faults it counts
    apfd: float | None = None
    faults: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "budget": self.budget,
            "pool": self.pool,
            "by": self.by,
            "indices": self.indices.astype(int).tolist(),
            "new_buckets": self.new_buckets,
            "eligible": self.eligible,
            "range": None if self.range is None else list(self.range),
            "notes": list(self.notes),
            "criterion": self.criterion,
            "new_targets": self.new_targets,
            "apfd": self.apfd,
            "faults": self.faults,
        }


def _check_budget(budget: int, n: int) -> int:
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1:
        raise ValueError(f"budget must be a whole number >= 1, got {budget!r}")
    return min(int(budget), n)


def _descending(scores: np.ndarray) -> np.ndarray:
    """Indices by score, highest first, NaN last, ties in pool order."""
    key = np.where(np.isnan(scores), -np.inf, scores)
    order = np.argsort(-key, kind="stable")
    nan = np.isnan(scores[order])
    return np.concatenate([order[~nan], order[nan]])


def greedy_coverage(
    pool_scores: Mapping[str, np.ndarray],
    bounds: Mapping[str, Bounds],
    budget: int,
    covered: Mapping[str, np.ndarray] | None = None,
) -> tuple[np.ndarray, list[int]]:
    """Greedy maximum coverage of SC buckets; ``pool_scores`` and ``bounds`` keyed by SC metric
    (``"lsc"``...). ``covered``: each metric's already covered buckets (bool ``(buckets,)``).
    Returns the picks and the buckets each newly covered; once no input adds a bucket, the
    rest are the most surprising left by LSA (by the first other metric without LSA). An input lands in at most one bucket
    per metric, so a pick's gain is the number of metrics whose bucket it opens."""
    metrics = [m for m in bounds if m in pool_scores]
    if not metrics:
        raise ValueError(
            "the coverage strategy needs the pool's scores and SC bounds of at least one of LSC, DSC, MDSC"
        )
    n = len(next(iter(pool_scores[m] for m in metrics)))
    k = _check_budget(budget, n)
    ids = np.empty((n, len(metrics)), dtype=np.int64)
    state = []
    for j, m in enumerate(metrics):
        ids[:, j], done = _bucket_ids(m, pool_scores[m], bounds[m], covered)
        state.append(done)
    # Once no input adds a bucket: the most surprising left by LSA (the paper's measure and the
    # README's rule), by the first of DSA, MDSA only when the pool has no LSA scores.
    ranker = next((m for m in SURPRISE if m in metrics), metrics[0])
    fallback = _descending(np.asarray(pool_scores[ranker], dtype=np.float64))
    return _greedy_picks(ids, state, fallback, k)


def _bucket_ids(
    metric: str, scores: np.ndarray, bounds: Bounds, covered: Mapping[str, np.ndarray] | None
) -> tuple[np.ndarray, np.ndarray]:
    """Each pool input's bucket of ``metric`` (``buckets``, a sink that is always "covered",
    when outside the bounds) and the buckets already covered (bool ``(buckets + 1,)``)."""
    lower, upper, buckets = bounds
    idx = bucket_index(np.asarray(scores, dtype=np.float64), bucket_edges(lower, upper, buckets))
    inside = (idx >= 0) & (idx < buckets)
    done = np.zeros(buckets + 1, dtype=bool)
    done[buckets] = True
    if covered is not None and metric in covered:
        prior = np.asarray(covered[metric], dtype=bool)
        if prior.shape != (buckets,):
            raise ValueError(f"covered[{metric!r}] has shape {prior.shape}, expected ({buckets},) for its bounds")
        done[:buckets] = prior
    return np.where(inside, idx, buckets), done


def _greedy_picks(
    ids: np.ndarray, state: list[np.ndarray], fallback: np.ndarray, k: int
) -> tuple[np.ndarray, list[int]]:
    """``k`` greedy picks by the number of metrics whose bucket each input opens (ties in pool
    order); once none opens one, the next of ``fallback`` not yet taken."""
    taken = np.zeros(len(ids), dtype=bool)
    picks: list[int] = []
    gains: list[int] = []
    for _ in range(k):
        gain = np.zeros(len(ids), dtype=np.int64)
        for j, done in enumerate(state):
            gain += ~done[ids[:, j]]
        gain[taken] = -1
        best = int(np.argmax(gain))  # the first of the largest: ties in pool order
        if gain[best] <= 0:
            best = int(fallback[~taken[fallback]][0])
        picks.append(best)
        gains.append(int(max(gain[best], 0)))
        taken[best] = True
        for j, done in enumerate(state):
            done[ids[best, j]] = True
    return np.array(picks, dtype=np.int64), gains


def covered_from_results(results: Mapping[str, Any]) -> tuple[dict[str, Bounds], dict[str, np.ndarray]]:
    """The SC bounds of a results JSON and the buckets its inputs cover, per SC metric.

    Read from each metric's configured bounds and the per-input scores the JSON keeps, so the
    pool is bucketed exactly as the tests were."""
    config = results.get("config") or {}
    inputs = results.get("inputs") or {}
    bounds: dict[str, Bounds] = {}
    covered: dict[str, np.ndarray] = {}
    for metric, key in SURPRISE.items():
        found = _covered_buckets(config.get(metric) or {}, inputs.get(key))
        if found is not None:
            bounds[metric], covered[metric] = found
    return bounds, covered


def _covered_buckets(cfg: Mapping[str, Any], scores: list[Any] | None) -> tuple[Bounds, np.ndarray] | None:
    """One metric's configured bounds and the buckets its per-input ``scores`` cover; None
    when the metric has no bounds or no scores."""
    if cfg.get("lower") is None or cfg.get("upper") is None or scores is None:
        return None
    b = (float(cfg["lower"]), float(cfg["upper"]), int(cfg.get("buckets") or 1000))
    values = _with_nan(scores)
    if values.size and np.isnan(values).all():
        return None
    idx = bucket_index(values, bucket_edges(*b))
    done = np.zeros(b[2], dtype=bool)
    done[idx[(idx >= 0) & (idx < b[2])]] = True
    return b, done


def _with_nan(values: list[Any]) -> np.ndarray:
    """A results column as floats, NaN where it holds ``None``."""
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def select(
    strategy: str,
    budget: int,
    *,
    scores: Mapping[str, np.ndarray | None] | None = None,
    by: str = "lsa",
    output: np.ndarray | None = None,
    bounds: Mapping[str, Bounds] | None = None,
    covered: Mapping[str, np.ndarray] | None = None,
    upto: float = 1.0,
    seed: int = 0,
    criterion: str | None = None,
    setup: Setup | None = None,
    batch: Batch | None = None,
    faults: np.ndarray | None = None,
) -> Selection:
    """Choose up to ``budget`` inputs of a pool (see the module docstring).

    ``scores``: the pool's SA by name (``"lsa"``, ``"dsa"``, ``"mdsa"``); ``by``: the score the
    ``surprise`` and ``ranges`` strategies use; ``output``: the model's outputs on the pool
    (``deepgini``); ``bounds``: SC bounds by metric (``coverage``, and ``ranges`` for U);
    ``covered``: buckets the current tests cover (``coverage``); ``upto``: the range's fraction
    of U (``ranges``); ``seed``: the ``ranges`` sample's random seed; ``criterion``,
    ``setup`` and ``batch``: the coverage criterion ``ctm`` and ``cam`` order by, what it is
    made for and the pool's traces; ``faults``: which pool inputs are misclassified (the
    labels are known): the APFD of an ordering strategy's whole order is then computed.
    """
    chosen = _select(strategy, budget, scores, by, output, bounds, covered, upto, seed, criterion, setup, batch)
    if faults is not None and chosen.order is not None:
        chosen.faults = int(np.count_nonzero(faults))
        chosen.apfd = apfd(chosen.order, faults)
        if chosen.apfd is None:
            chosen.notes.append("no input of the pool is misclassified: APFD is undefined")
    elif faults is not None:
        chosen.notes.append(f"APFD needs an order of the whole pool: use one of {', '.join(ORDERING)}")
    return chosen


def _select(
    strategy: str,
    budget: int,
    scores: Mapping[str, np.ndarray | None] | None,
    by: str,
    output: np.ndarray | None,
    bounds: Mapping[str, Bounds] | None,
    covered: Mapping[str, np.ndarray] | None,
    upto: float,
    seed: int,
    criterion: str | None,
    setup: Setup | None,
    batch: Batch | None,
) -> Selection:
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    if strategy in ("ctm", "cam"):
        return _by_coverage_order(strategy, budget, criterion, setup, batch)
    present = {k: np.asarray(v, dtype=np.float64) for k, v in (scores or {}).items() if v is not None}
    if strategy == "deepgini":
        return _by_deepgini(budget, output)
    if strategy == "coverage":
        return _by_sc_coverage(budget, present, bounds, covered)
    s = _scores_by(present, by)
    if strategy == "surprise":
        return _by_surprise(budget, s, by)
    return _by_ranges(budget, s, by, bounds, upto, seed)


def _scores_by(present: Mapping[str, np.ndarray], by: str) -> np.ndarray:
    if by not in present:
        raise ValueError(f"no {by!r} scores for the pool; available: {', '.join(present) or 'none'}")
    return present[by]


def _by_surprise(budget: int, scores: np.ndarray, by: str) -> Selection:
    k = _check_budget(budget, len(scores))
    order = _descending(scores)
    return Selection("surprise", int(budget), order[:k], len(scores), by=by, order=order)


def _by_coverage_order(
    strategy: str, budget: int, criterion: str | None, setup: Setup | None, batch: Batch | None
) -> Selection:
    if criterion is None or setup is None or batch is None:
        raise ValueError(f"the {strategy} strategy needs a coverage criterion, its setup and the pool's traces")
    order, counts = prioritise(strategy, criterion, setup, batch)
    k = _check_budget(budget, len(order))
    return Selection(
        strategy, int(budget), order[:k], len(order), criterion=criterion, new_targets=counts[:k], order=order
    )


def _by_deepgini(budget: int, output: np.ndarray | None) -> Selection:
    if output is None:
        raise ValueError("the deepgini strategy needs the model's outputs on the pool")
    gini = confidence_scores(output)["deepgini"]
    k = _check_budget(budget, len(gini))
    order = _descending(gini)
    return Selection("deepgini", int(budget), order[:k], len(gini), by="deepgini", order=order)


def _by_sc_coverage(
    budget: int,
    present: Mapping[str, np.ndarray],
    bounds: Mapping[str, Bounds] | None,
    covered: Mapping[str, np.ndarray] | None,
) -> Selection:
    if not bounds:
        raise ValueError(
            "the coverage strategy needs SC bounds (a results JSON of the current tests, or the profile's defaults)"
        )
    per_metric = {m: present[SURPRISE[m]] for m in bounds if SURPRISE.get(m) in present}
    picks, gains = greedy_coverage(per_metric, bounds, budget, covered)
    n = len(next(iter(per_metric.values())))
    notes = _fallback_notes(gains)
    return Selection("coverage", int(budget), picks, n, by=",".join(per_metric), new_buckets=gains, notes=notes)


def _fallback_notes(gains: list[int]) -> list[str]:
    """A note when the last picks opened no bucket (they are the most surprising left)."""
    if not gains or gains[-1] != 0:
        return []
    return [f"{sum(g > 0 for g in gains)} pick(s) opened new buckets; the rest are the most surprising inputs left"]


def _by_ranges(
    budget: int, s: np.ndarray, by: str, bounds: Mapping[str, Bounds] | None, upto: float, seed: int
) -> Selection:
    if not (0 < upto <= 1):
        raise ValueError(f"upto must be in (0, 1] (a fraction of the SC upper bound U), got {upto!r}")
    metric = {v: k for k, v in SURPRISE.items()}[by]
    if not bounds or metric not in bounds:
        raise ValueError(f"the ranges strategy needs the SC bounds of {metric.upper()} (U is its upper bound)")
    lower, upper, _ = bounds[metric]
    top = lower + upto * (upper - lower)
    eligible = np.flatnonzero((s >= lower) & (s <= top))
    k = _check_budget(budget, len(s))
    notes = []
    if eligible.size < k:
        notes.append(f"only {eligible.size} input(s) lie in [{lower:g}, {top:g}]; all of them are chosen")
    rng = np.random.default_rng(seed)
    picks = rng.choice(eligible, size=min(k, eligible.size), replace=False) if eligible.size else np.zeros(0, np.int64)
    return Selection(
        "ranges",
        int(budget),
        picks.astype(np.int64),
        len(s),
        by=by,
        eligible=int(eligible.size),
        range=(lower, top),
        notes=notes,
    )
