"""How accurate is the model on a pool nobody labelled: choose which inputs to label for a
budget, then estimate the pool's accuracy from their labels, with a confidence interval.

Three ways to choose (:func:`choose`), each with its estimator (:func:`estimate`):

* ``random``: simple random sampling without replacement; the estimate is the labelled
  inputs' accuracy, its variance ``p (1 - p) / n * (N - n) / (N - 1)`` (finite pool).
* ``stratified``: the pool cut into ``strata`` groups of (nearly) equal size by a surprise
  score (LSA by default: the score Kim et al., ESEC/FSE 2020 use to decide what to label),
  the budget allocated in proportion to the groups' sizes (each at least two), a simple
  random sample in each; the estimate is ``sum_h W_h p_h`` with ``W_h = N_h / N``, its
  variance ``sum_h W_h^2 (1 - n_h / N_h) s_h^2 / n_h`` (Cochran, *Sampling Techniques*,
  ch. 5). Unbiased whatever the score; more precise when accuracy differs across strata.
* ``ces``: Li et al., ESEC/FSE 2019 (cross-entropy-based sampling): each neuron of the
  last hidden layer has its pool range cut into ``sections`` (20) equal sections; starting
  from ``initial`` (30) random inputs, the sample grows by the best of ``candidates`` (300)
  random groups of ``group`` (5) inputs, the one whose neuron-section distributions have the
  least mean cross-entropy ``-sum_k P_pool(k) log P_sample(k)`` with the pool's (an empty
  section of the sample counted as ``1e-6``), until the budget. The estimate is the sample's
  accuracy; CES gives no variance of its own: the interval is the random sample's, an
  approximation (not a probability sample).

The interval is Wilson's score interval at the design's effective sample size
(``p (1 - p) / variance``; the labelled count, corrected for the finite pool, when the
sample is all right or all wrong), so it stays inside [0, 1] and does not collapse to a
point when every labelled input is right. Pure NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

METHODS = ("random", "stratified", "ces")
STRATA = 10
SECTIONS, INITIAL, GROUP, CANDIDATES = 20, 30, 5, 300
EMPTY = 1e-6


@dataclass(frozen=True)
class Plan:
    """Which pool inputs to label: their indices (in the order chosen) and, for the
    stratified design, each one's stratum and the strata's pool sizes."""

    method: str
    n_pool: int
    indices: np.ndarray
    seed: int = 0
    strata: np.ndarray | None = None
    stratum_sizes: np.ndarray | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "n_pool": self.n_pool,
            "seed": self.seed,
            "indices": self.indices.astype(int).tolist(),
            "strata": None if self.strata is None else self.strata.astype(int).tolist(),
            "stratum_sizes": None if self.stratum_sizes is None else self.stratum_sizes.astype(int).tolist(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        def ints(key: str) -> np.ndarray | None:
            return None if d.get(key) is None else np.asarray(d[key], dtype=np.int64)

        indices = ints("indices")
        if d.get("method") not in METHODS or indices is None or not isinstance(d.get("n_pool"), int):
            raise ValueError("not a labelling plan of 'sadl estimate choose' (method, n_pool and indices are needed)")
        plan = cls(
            str(d["method"]), int(d["n_pool"]), indices, int(d.get("seed", 0)), ints("strata"), ints("stratum_sizes")
        )
        _check_plan(plan)
        return plan


def _distinct_rows(idx: np.ndarray, n_pool: int) -> bool:
    """Whether ``idx`` is a non-empty vector of distinct rows of a pool of ``n_pool``."""
    if idx.ndim != 1 or not idx.size:
        return False
    return bool(idx.min() >= 0 and idx.max() < n_pool and np.unique(idx).size == idx.size)


def _check_plan(plan: Plan) -> None:
    idx = plan.indices
    if not _distinct_rows(idx, plan.n_pool):
        raise ValueError(f"the plan's indices must be distinct pool rows in [0, {plan.n_pool})")
    if plan.method == "stratified":
        sizes, strata = plan.stratum_sizes, plan.strata
        if sizes is None or strata is None or strata.shape != idx.shape or sizes.sum() != plan.n_pool:
            raise ValueError("a stratified plan needs each index's stratum and the strata's sizes, summing to the pool")


@dataclass(frozen=True)
class Estimate:
    """The pool's estimated accuracy and its interval at ``confidence``."""

    method: str
    accuracy: float
    low: float
    high: float
    std_error: float
    labelled: int
    n_pool: int
    confidence: float = 0.95

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _check_budget(n: int, budget: int) -> None:
    if not 1 <= budget <= n:
        raise ValueError(f"a budget of {budget} labels for a pool of {n} inputs: choose 1 to {n}")


def choose_random(n: int, budget: int, seed: int = 0) -> Plan:
    _check_budget(n, budget)
    return Plan("random", n, _rng(seed).choice(n, size=budget, replace=False), seed)


def strata_of(scores: np.ndarray, strata: int) -> np.ndarray:
    """Each input's stratum: ``strata`` groups of nearly equal size by rank of ``scores``
    (ties broken by pool order, so the cut is the same on every run)."""
    order = np.argsort(scores, kind="stable")
    out = np.empty(len(scores), np.int64)
    out[order] = np.arange(len(scores)) * strata // len(scores)
    return out


def _allocation(sizes: np.ndarray, budget: int) -> np.ndarray:
    """Proportional allocation by largest remainder, at least two per stratum (fewer only
    where a stratum has fewer inputs); ``sizes.sum() >= budget >= 2 * len(sizes)``."""
    floor = np.minimum(2, sizes)
    share = sizes / sizes.sum() * budget
    alloc = np.minimum(sizes, np.maximum(floor, np.floor(share).astype(np.int64)))
    while alloc.sum() > budget:  # the floors took more than their share: trim the largest
        alloc[np.argmax(alloc - floor)] -= 1
    order = np.argsort(-(share - alloc), kind="stable")  # the furthest below their share first
    i = 0
    while alloc.sum() < budget:
        j = order[i % len(order)]
        if alloc[j] < sizes[j]:
            alloc[j] += 1
        i += 1
    out: np.ndarray = alloc
    return out


def choose_stratified(scores: object, budget: int, seed: int = 0, strata: int = STRATA) -> Plan:
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    n = s.size
    _check_budget(n, budget)
    if not np.all(np.isfinite(s)):
        raise ValueError("the stratifying scores hold NaN or inf; choose another score")
    h = max(1, min(strata, budget // 2, n))
    label = strata_of(s, h)
    sizes = np.bincount(label, minlength=h)
    alloc = _allocation(sizes, budget)
    rng = _rng(seed)
    picks = [rng.choice(np.flatnonzero(label == k), size=int(alloc[k]), replace=False) for k in range(h)]
    indices = np.concatenate(picks)
    return Plan("stratified", n, indices, seed, label[indices], sizes)


def _sections(features: np.ndarray, sections: int) -> np.ndarray:
    """Each input's section of each neuron's pool range ``(n, d)``."""
    low, high = features.min(axis=0), features.max(axis=0)
    width = np.where(high > low, (high - low) / sections, 1.0)
    out: np.ndarray = np.clip(((features - low) / width).astype(np.int64), 0, sections - 1)
    return out


def choose_ces(
    features: object,
    budget: int,
    seed: int = 0,
    *,
    sections: int = SECTIONS,
    initial: int = INITIAL,
    group: int = GROUP,
    candidates: int = CANDIDATES,
) -> Plan:
    x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2 or not np.all(np.isfinite(x)):
        raise ValueError("CES needs the pool's last-hidden-layer traces as a finite (n, neurons) array")
    n, d = x.shape
    _check_budget(n, budget)
    rng = _rng(seed)
    sec = _sections(x, sections)
    flat = sec + np.arange(d) * sections  # (n, d): neuron j's section k as j * sections + k
    pool_p = np.bincount(flat.ravel(), minlength=d * sections).reshape(d, sections) / n
    chosen = list(rng.choice(n, size=min(initial, budget), replace=False))
    left = np.setdiff1d(np.arange(n), chosen)
    counts = np.bincount(flat[chosen].ravel(), minlength=d * sections).astype(np.float64)
    while len(chosen) < budget:
        q = min(group, budget - len(chosen))
        groups = np.stack([rng.choice(left, size=q, replace=False) for _ in range(candidates)])
        added = np.zeros((candidates, d * sections))
        np.add.at(added, (np.repeat(np.arange(candidates), q * d), flat[groups].reshape(candidates, -1).ravel()), 1.0)
        p = (counts + added).reshape(candidates, d, sections) / (len(chosen) + q)
        ce = -(pool_p * np.log(np.maximum(p, EMPTY))).sum(axis=2).mean(axis=1)
        best = groups[int(np.argmin(ce))]
        chosen.extend(best.tolist())
        counts += np.bincount(flat[best].ravel(), minlength=d * sections)
        left = np.setdiff1d(left, best)
    return Plan("ces", n, np.asarray(chosen, dtype=np.int64), seed)


def choose(method: str, budget: int, *, n: int, seed: int = 0, scores: object = None, features: object = None) -> Plan:
    """The labelling plan of ``method`` for a pool of ``n`` inputs: ``scores`` (the
    stratifying surprise score, one per input) for ``stratified``, ``features`` (the last
    hidden layer's traces) for ``ces``."""
    if method == "random":
        return choose_random(n, budget, seed)
    if method == "stratified":
        if scores is None:
            raise ValueError("the stratified plan needs a surprise score per pool input")
        return choose_stratified(scores, budget, seed)
    if method == "ces":
        if features is None:
            raise ValueError("CES needs the pool's last-hidden-layer traces")
        return choose_ces(features, budget, seed)
    raise ValueError(f"unknown labelling method {method!r}; choose from {', '.join(METHODS)}")


def _srs_variance(p: float, n: int, big_n: int) -> float:
    fpc = (big_n - n) / (big_n - 1) if big_n > 1 else 0.0
    return p * (1 - p) / n * fpc if n else float("nan")


def _point(plan: Plan, correct: np.ndarray) -> tuple[float, float, float]:
    """(estimate, its variance, the effective sample size when the variance is zero)."""
    n, big_n = len(correct), plan.n_pool
    fpc = (big_n - n) / (big_n - 1) if big_n > 1 else 0.0
    full = float("inf") if fpc == 0 else n / fpc
    if plan.method != "stratified":
        p = float(correct.mean())
        return p, _srs_variance(p, n, big_n), full
    assert plan.strata is not None and plan.stratum_sizes is not None
    w = plan.stratum_sizes / big_n
    p = var = 0.0
    for h, size in enumerate(plan.stratum_sizes):
        mine = correct[plan.strata == h]
        if not mine.size:
            raise ValueError(f"stratum {h} has no labelled input; label at least one of each stratum")
        ph = float(mine.mean())
        s2 = ph * (1 - ph) * mine.size / (mine.size - 1) if mine.size > 1 else 0.25
        p += w[h] * ph
        var += w[h] ** 2 * (1 - mine.size / size) * s2 / mine.size
    return p, var, full


def estimate(plan: Plan, correct: object, confidence: float = 0.95) -> Estimate:
    """The pool's accuracy from ``correct`` (bool, one per ``plan.indices``, in that order)."""
    c = np.asarray(correct, dtype=bool).reshape(-1)
    if c.shape != plan.indices.shape:
        raise ValueError(f"{c.size} answers for the plan's {plan.indices.size} inputs: give one per planned input")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    p, var, full = _point(plan, c)
    n_eff = p * (1 - p) / var if var > 0 and 0 < p < 1 else full
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    if np.isinf(n_eff):  # the whole pool is labelled: no uncertainty left
        low = high = p
    else:
        denom = 1 + z * z / n_eff
        centre = (p + z * z / (2 * n_eff)) / denom
        half = z / denom * np.sqrt(p * (1 - p) / n_eff + z * z / (4 * n_eff * n_eff))
        low, high = max(0.0, centre - half), min(1.0, centre + half)
    return Estimate(plan.method, p, float(low), float(high), float(np.sqrt(var)), int(c.size), plan.n_pool, confidence)
