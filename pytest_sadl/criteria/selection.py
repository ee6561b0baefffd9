"""Which inputs to label or test next: choosing a budget of inputs from a pool, on NumPy arrays.

Four strategies, each given per-input scores of the pool (no TensorFlow, no pytest):

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
* ``ctm`` — coverage-total prioritisation by any coverage criterion of the registry: the
  inputs by the number of targets each covers on its own, most first, ties in pool order.
* ``cam`` — coverage-additional prioritisation: each pick is the input that covers the
  most targets the picks before it left uncovered (ties: the lowest pool index); once no
  input adds a target, the rest in CTM order (Feng et al.'s CAM, as dnn-tip's ``cam``).

:func:`apfd` measures an ordering when the faults (misclassified inputs) are known:
``APFD = 1 - (sum of the faults' 1-based positions) / (k n) + 1 / (2 n)``, ``n`` inputs of
which ``k`` are faults (Rothermel et al.; DeepGini's form, as dnn-tip's ``apfd_from_order``).

:func:`select` returns a :class:`Selection` with the chosen pool indices in pick order.
"""

from __future__ import annotations

import copy
import heapq
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_sadl.criteria.mistakes import confidence_scores
from pytest_sadl.criteria.registry import SURPRISE
from pytest_sadl.criteria.surprise import bucket_edges, bucket_index

if TYPE_CHECKING:
    from pytest_sadl.criteria.shape import Batch, Coverage, Setup

__all__ = [
    "STRATEGIES",
    "Selection",
    "select",
    "covered_from_results",
    "greedy_coverage",
    "apfd",
    "ctm_order",
    "cam_order",
    "prioritise",
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


def apfd(order: object, faults: object) -> float | None:
    """APFD of ``order`` (every pool index once) given ``faults`` (bool per pool input, True
    for a misclassified one): ``1 - sum(TF_i) / (k n) + 1 / (2 n)``, ``TF_i`` the 1-based
    position of the i-th fault in the order. ``None`` when there is no fault (undefined)."""
    is_fault = np.asarray(faults, dtype=bool).reshape(-1)
    idx = np.asarray(order, dtype=np.int64).reshape(-1)
    n = is_fault.size
    if idx.size != n or not np.array_equal(np.sort(idx), np.arange(n)):
        raise ValueError(f"the order must hold every one of the {n} pool indices once, got {idx.size} indices")
    k = int(is_fault.sum())
    if k == 0:
        return None
    positions = np.flatnonzero(is_fault[idx]) + 1
    return float(1.0 - positions.sum() / (k * n) + 1.0 / (2 * n))


def faults_of(pred: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Misclassified inputs: the predicted class differs from the label (a class index, or a
    one-hot / probability row, whose argmax is the class)."""
    y = np.asarray(labels)
    if y.ndim == 2 and y.shape[1] > 1:
        y = y.argmax(axis=1)
    y = y.reshape(-1)
    if y.shape != np.shape(pred):
        raise ValueError(f"the pool has {len(pred)} inputs but {y.size} labels")
    return np.asarray(np.asarray(pred).reshape(-1) != y)


def ctm_order(counts: object) -> np.ndarray:
    """Coverage-total order: by ``counts`` (targets each input covers alone), most first,
    ties in pool order."""
    c = np.asarray(counts).reshape(-1)
    if c.dtype.kind in "iu" and c.size and c.min() >= 0 and c.max() < 1 << 16:
        return np.argsort((c.max() - c).astype(np.uint16), kind="stable").astype(np.int64)  # radix sort
    c = np.asarray(c, dtype=np.float64)
    return np.argsort(-c, kind="stable").astype(np.int64)


def _one(batch: Batch, i: int) -> Batch:
    """Input ``i`` of ``batch`` as a batch of one."""
    from pytest_sadl.criteria.shape import Batch

    s = slice(i, i + 1)
    return Batch(
        {k: v[s] for k, v in batch.scores.items()},
        [a[s] for a in batch.layers],
        [None if e is None else (e[0][s], e[1][s]) for e in batch.extrema],
    )


def cam_order(
    make: Any, batch: Batch, counts: object | None = None, start: Coverage | None = None
) -> tuple[np.ndarray, list[int]]:
    """Coverage-additional order of the inputs of ``batch`` under the criterion ``make``
    (a :class:`~pytest_sadl.criteria.shape.Coverage` factory, ``make()`` a fresh one), and
    the targets each pick newly covered (0 for the CTM-ordered rest).

    Lazy greedy: a gain computed against fewer covered targets bounds the gain against more
    (a coverage's newly covered targets only shrink as it grows), so each pick re-evaluates
    only the inputs whose bound could still win; exactly the greedy order with ties to the
    lowest index, each gain what ``update(input)`` reports on a copy of the covered state
    (:func:`_fork`: the state's arrays copied, never its read-only set-up). ``counts``: each
    input's CTM count (computed when ``None``); ``start``: what counts as covered already."""
    total = input_counts(make, batch) if counts is None else np.asarray(counts, dtype=np.int64)
    state = make() if start is None else _fork(start)
    return _lazy_greedy(
        total,
        gain=lambda i: int(_fork(state).update(_one(batch, i))),
        take=lambda i: state.update(_one(batch, i)),
    )


def _fork(cov: Any) -> Any:
    """An independent copy of a coverage's state for one trial ``update``: its own
    ``copy()`` when it is one of this package's coverages (a :class:`SurpriseCoverage`, a
    neuron coverage: their ranges and bounds are shared, read-only), else a shallow copy
    whose attributes are copied by :func:`_fork_value`; a ``deepcopy`` for anything else."""
    if _own_copy(cov):
        return cov.copy()
    try:
        attrs = vars(cov)
    except TypeError:  # __slots__ and the like: no attribute dict to walk
        return copy.deepcopy(cov)
    new = copy.copy(cov)
    for name, value in attrs.items():
        setattr(new, name, _fork_value(value))
    return new


def _own_copy(value: object) -> bool:
    """Whether ``value`` is one of this package's objects with a ``copy()`` (a full copy
    of its mutable state)."""
    return type(value).__module__.startswith("pytest_sadl.") and callable(getattr(value, "copy", None))


def _immutable(value: object) -> bool:
    """Whether ``value`` cannot change: None, a scalar, a string or a tuple of scalars."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes, frozenset)):
        return True
    return isinstance(value, tuple) and all(isinstance(v, (bool, int, float, str)) for v in value)


def _fork_value(value: object) -> object:
    if _immutable(value):
        return value
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, list) and all(isinstance(v, np.ndarray) for v in value):
        return [v.copy() for v in value]
    if _own_copy(value):
        return value.copy()  # type: ignore[attr-defined]
    return copy.deepcopy(value)


def _lazy_greedy(
    total: np.ndarray, gain: Callable[[int], int], take: Callable[[int], object]
) -> tuple[np.ndarray, list[int]]:
    """The coverage-additional order: inputs by their bound ``total`` (what each covers
    alone) in a heap; the top input's ``gain(i)`` is recomputed and, when it still beats
    every other bound, the input is taken (``take(i)``); ties to the lowest index. Inputs
    that add nothing follow in coverage-total order. Returns the order and each pick's gain."""
    n = len(total)
    heap = [(-int(total[i]), i) for i in range(n) if total[i] > 0]
    heapq.heapify(heap)
    picks: list[int] = []
    gains: list[int] = []
    while heap:
        _, i = heapq.heappop(heap)
        g = int(gain(i))
        if g <= 0:
            continue
        if heap and (-g, i) > heap[0]:
            heapq.heappush(heap, (-g, i))  # another input's bound may beat it: look again
            continue
        take(i)
        picks.append(i)
        gains.append(g)
    return _then_ctm(total, picks, gains)


def input_counts(make: Any, batch: Batch) -> np.ndarray:
    """The targets each input of ``batch`` covers on its own (a fresh coverage each)."""
    n = len(next(iter(batch.scores.values()))) if batch.scores else len(batch.layers[0])
    return np.array([make().update(_one(batch, i)) for i in range(n)], dtype=np.int64)


def prioritise(strategy: str, criterion: str, setup: Setup, batch: Batch) -> tuple[np.ndarray, list[int]]:
    """The whole pool's ``ctm`` or ``cam`` order by the registry's coverage ``criterion``
    (``"nc"``, ``"lsc"``...), made for ``setup``, on the pool's ``batch``; and what each
    input counted (ctm: the targets it covers alone; cam: the targets it newly covered)."""
    from pytest_sadl.criteria.registry import BY_NAME

    if criterion not in BY_NAME:
        raise ValueError(f"unknown criterion {criterion!r}; use one of {', '.join(BY_NAME)}")
    made = BY_NAME[criterion].make

    def make() -> Any:
        cov = made(setup)
        if cov is None:
            raise ValueError(f"{criterion.upper()} does not apply to this profile (no score or bounds for it)")
        return cov

    if strategy not in ("ctm", "cam"):
        raise ValueError(f"prioritise orders by 'ctm' or 'cam', not {strategy!r}")
    cov = make()
    if strategy == "cam":
        return _cam_by_targets(cov, batch, make)
    counts = target_counts(cov, batch)  # the registry's own shapes: counted from the traces at once
    if counts is None:
        counts = input_counts(make, batch)
    order = ctm_order(counts)
    return order, counts[order].tolist()


def _cam_by_targets(cov: Any, batch: Batch, make: Callable[[], Any]) -> tuple[np.ndarray, list[int]]:
    """CAM by the fastest form the criterion's targets allow: a dense profile when it is
    small enough, else the sparse (input, target) pairs, else each input's ``update``."""
    profile = _neuron_profile(cov, batch) if _vectorised_neurons(cov, batch) else None
    if profile is not None:
        return cam_of_profile(profile)
    pairs = target_pairs(cov, batch, by_row=False)  # one clear error before any work
    if pairs is None:
        return cam_order(make, batch, input_counts(make, batch))
    profile = dense_profile(*pairs)
    if profile is not None:
        return cam_of_profile(profile)
    return cam_of_pairs(*_by_row(pairs))


#: each input's targets as (inputs, rows, target ids): one pair per input and target it covers
Pairs = tuple[int, np.ndarray, np.ndarray]
#: values per block of rows when a layer's per-input hits are computed (bounds the memory)
BLOCK = 1 << 22


def target_pairs(cov: Any, batch: Batch, by_row: bool = True) -> Pairs | None:
    """The targets (integer ids) each input of ``batch`` covers on its own, as ``(n, rows,
    ids)``, rows ascending, for the shapes of :mod:`~pytest_sadl.criteria.shape` whose
    targets are known here: a surprise coverage's bucket, a neuron coverage's (neuron,
    section/corner) flags over traces that are already one value per neuron; ``None`` for
    any other criterion (then the generic path asks its ``update``). Equal to what
    ``update`` counts, input by input, computed for a block of inputs at once. ``by_row``
    False: the pairs in any order (layer by layer), for a caller that does not need them
    sorted by input."""
    from pytest_sadl.criteria.surprise import SurpriseCoverage

    if isinstance(cov, SurpriseCoverage) and cov.sa is not None:
        return _bucket_pairs(cov, batch)
    top = _top_k_targets(cov, batch)
    if top is not None:
        return top
    if not _vectorised_neurons(cov, batch):
        return None
    pairs = _neuron_pairs(cov, batch)
    return _by_row(pairs) if by_row else pairs


def _top_k_targets(cov: Any, batch: Batch) -> Pairs | None:
    """TKNC's and TKNP's targets as pairs: TKNC's the neurons of each input's top-k masks
    (one per layer, :func:`~pytest_sadl.criteria.metrics.tknc.top_k`, whose rows are each
    input's own), TKNP's one pattern per input (its masks, numbered by their distinct
    rows: equal masks, one target; ``update`` tells them apart by a 128-bit digest of
    the same masks). ``None`` for any other criterion, or layers not one value per
    neuron of the criterion's sizes (left to ``update`` and its errors)."""
    from pytest_sadl.criteria.metrics.tknc import TopKCoverage, top_k
    from pytest_sadl.criteria.metrics.tknp import TopKPatterns

    if type(cov) not in (TopKCoverage, TopKPatterns) or not _one_value_per_neuron(cov.sizes, batch):
        return None
    masks = np.concatenate([top_k(np.asarray(a), cov.k) for a in batch.layers], axis=1)
    n = len(masks)
    if isinstance(cov, TopKPatterns):
        packed = np.ascontiguousarray(np.packbits(masks, axis=1))
        rows = packed.view(np.dtype((np.void, packed.shape[1]))).reshape(n)
        ids = np.unique(rows, return_inverse=True)[1].reshape(-1)
        return n, np.arange(n, dtype=np.int64), ids.astype(np.int64)
    flat = np.flatnonzero(masks)
    rows, ids = np.divmod(flat, masks.shape[1])
    return n, rows, ids


def _one_value_per_neuron(sizes: tuple[int, ...], batch: Batch) -> bool:
    layers = batch.layers
    return len(layers) == len(sizes) > 0 and all(
        np.ndim(a) == 2 and np.shape(a)[1] == size for a, size in zip(layers, sizes, strict=True)
    )


def _vectorised_neurons(cov: Any, batch: Batch) -> bool:
    """Whether ``cov`` is a neuron criterion whose per-input targets are computed here
    (its traces already one value per neuron; unreduced maps: NC scales them whole, left
    to ``update``)."""
    from pytest_sadl.criteria.neurons import _LayerCoverage

    if not isinstance(cov, _LayerCoverage) or type(cov) not in _input_hits():
        return False
    return all(np.ndim(a) == 2 for a in batch.layers)


def _by_row(pairs: Pairs) -> Pairs:
    """The pairs sorted by input, each input's ids in the order they came (ascending)."""
    n, rows, ids = pairs
    if rows.size and np.all(rows[1:] >= rows[:-1]):
        return pairs
    order = np.argsort(rows, kind="stable")
    return n, rows[order], ids[order]


def _bucket_pairs(cov: Any, batch: Batch) -> Pairs:
    n = len(batch.layers[0]) if batch.layers else len(next(iter(batch.scores.values()), []))
    scores = batch.scores.get(cov.sa)
    if scores is None:
        return n, np.zeros(0, np.int64), np.zeros(0, np.int64)
    sc = cov
    idx = bucket_index(np.asarray(scores, dtype=np.float64), bucket_edges(sc.lower, sc.upper, sc.buckets))
    rows = np.flatnonzero((idx >= 0) & (idx < sc.buckets))
    return n, rows.astype(np.int64), idx[rows].astype(np.int64)


def _neuron_pairs(inner: Any, batch: Batch) -> Pairs:
    arrays = _neuron_layers(inner, batch)
    pairs_of = _input_hits()[type(inner)][0]
    rows: list[np.ndarray] = []
    ids: list[np.ndarray] = []
    for li, s, values, block, valid, offset in _layer_blocks(inner, batch, arrays):
        r, t = pairs_of(inner, li, values, block, valid)
        rows.append(r + s)
        ids.append(t + offset)
    n = arrays[0].shape[0]
    if not rows:  # no inputs
        return n, np.zeros(0, np.int64), np.zeros(0, np.int64)
    return n, np.concatenate(rows).astype(np.int64, copy=False), np.concatenate(ids).astype(np.int64, copy=False)


def _neuron_counts(inner: Any, batch: Batch) -> np.ndarray:
    arrays = _neuron_layers(inner, batch)
    count_of = _input_hits()[type(inner)][1]
    counts = np.zeros(arrays[0].shape[0], dtype=np.int64)
    for li, s, values, block, valid, _ in _layer_blocks(inner, batch, arrays):
        counts[s : s + len(values)] += count_of(inner, li, values, block, valid)
    return counts


def _neuron_profile(inner: Any, batch: Batch) -> np.ndarray | None:
    """The boolean ``(targets, inputs)`` profile of a neuron criterion (a row per
    (neuron, section/corner) of every layer, in :func:`target_pairs`' id order), or
    ``None`` when it would be larger than :func:`_dense_fits` allows."""
    arrays = _neuron_layers(inner, batch)
    n = arrays[0].shape[0]
    m = sum(inner.sizes) * inner.per_neuron
    if not _dense_fits(m, n):
        return None
    profile_of = _input_hits()[type(inner)][2]
    profile = np.zeros((m, n), dtype=bool) if n == 0 else None
    for li, s, values, block, valid, offset in _layer_blocks(inner, batch, arrays):
        rows = profile_of(inner, li, values, block, valid)
        if rows.shape == (m, n):
            return rows  # one layer in one block: the whole profile, not copied again
        if profile is None:
            profile = np.empty((m, n), dtype=bool)
        profile[offset : offset + len(rows), s : s + len(values)] = rows
    return profile


def _neuron_layers(inner: Any, batch: Batch) -> list[np.ndarray]:
    from pytest_sadl.criteria.checks import as_layers

    return as_layers("layers", batch.layers, sizes=inner.sizes)


def _layer_blocks(
    inner: Any, batch: Batch, arrays: list[np.ndarray]
) -> Iterator[tuple[int, int, np.ndarray, Any, np.ndarray, int]]:
    """Each layer's traces in blocks of rows (``BLOCK`` values at most): the layer, the
    block's first row, its values, its rows' extrema (NC) or None, the layer's valid
    neurons and the layer's first target id."""
    n = arrays[0].shape[0]
    offset = 0
    for li, values in enumerate(arrays):
        valid = inner._valid(li)
        ext = batch.extrema[li] if inner.uses_extrema and li < len(batch.extrema) else None
        step = max(1, BLOCK // max(1, values.shape[1] * inner.per_neuron))
        for s in range(0, n, step):
            block = None if ext is None else _extrema_rows(ext, li, n, s, s + step)
            yield li, s, values[s : s + step], block, valid, offset
        offset += inner.sizes[li] * inner.per_neuron


def _extrema_rows(ext: tuple[np.ndarray, np.ndarray], li: int, n: int, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    lo = np.asarray(ext[0], np.float64).reshape(-1)
    hi = np.asarray(ext[1], np.float64).reshape(-1)
    if lo.shape != (n,) or hi.shape != (n,):
        raise ValueError(f"extrema[{li}] must hold one minimum and one maximum per input ({n})")
    return lo[a:b], hi[a:b]


#: a block of inputs of one layer: (criterion, layer, values, the rows' extrema, valid neurons)
HitPairs = Callable[[Any, int, np.ndarray, Any, np.ndarray], tuple[np.ndarray, np.ndarray]]
HitCounts = Callable[[Any, int, np.ndarray, Any, np.ndarray], np.ndarray]
HitFlags = Callable[[Any, int, np.ndarray, Any, np.ndarray], np.ndarray]


def _input_hits() -> dict[type, tuple[HitPairs, HitCounts, HitFlags]]:
    """Per neuron criterion: a block of inputs' hits as (row, target-in-layer) pairs, as
    the number of hits per row, and as a boolean ``(targets of the layer, rows)`` profile,
    each row's hits exactly what the criterion's ``_hits`` gives for that input alone."""
    from pytest_sadl.criteria import neurons

    return {
        neurons.NeuronCoverage: _of_flags(_nc_flags),
        neurons.KMultisectionCoverage: (_kmnc_pairs, _kmnc_counts, _kmnc_profile),
        neurons.NeuronBoundaryCoverage: _of_flags(_nbc_flags),
        neurons.StrongNeuronActivationCoverage: _of_flags(_snac_flags),
    }


def _of_flags(flags: HitFlags) -> tuple[HitPairs, HitCounts, HitFlags]:
    """The pairs, the counts and the profile of a criterion whose hits are a ``(rows,
    neurons, per_neuron)`` boolean array."""

    def pairs(cov: Any, li: int, values: np.ndarray, extrema: Any, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _flags(flags(cov, li, values, extrema, valid))

    def counts(cov: Any, li: int, values: np.ndarray, extrema: Any, valid: np.ndarray) -> np.ndarray:
        hit = flags(cov, li, values, extrema, valid)
        return _row_counts(hit.reshape(len(hit), -1))

    def profile(cov: Any, li: int, values: np.ndarray, extrema: Any, valid: np.ndarray) -> np.ndarray:
        hit = flags(cov, li, values, extrema, valid)
        by_target: np.ndarray = np.ascontiguousarray(hit.reshape(len(hit), -1).T)
        return by_target

    return pairs, counts, profile


def _flags(hit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, flat id) of the True values of a ``(rows, neurons, per_neuron)`` array."""
    rows, flat = np.divmod(np.flatnonzero(hit), hit.shape[1] * hit.shape[2])
    return rows, flat


def _nc_flags(
    cov: Any, li: int, values: np.ndarray, extrema: tuple[np.ndarray, np.ndarray] | None, valid: np.ndarray
) -> np.ndarray:
    lo, hi = (values.min(axis=1), values.max(axis=1)) if extrema is None else extrema
    span = hi - lo
    safe = np.where(span > 0, span, 1.0)
    scaled = (values - lo[:, None]) / safe[:, None]
    scaled[span <= 0] = 0.0
    hit: np.ndarray = (scaled > cov.threshold) & valid
    return hit[:, :, None]


def _kmnc_pairs(
    cov: Any, li: int, values: np.ndarray, extrema: tuple[np.ndarray, np.ndarray] | None, valid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    idx = cov.sections(li, values)
    flat = np.flatnonzero((idx >= 0) & valid)  # row by row: rows ascending
    rows, cols = np.divmod(flat, idx.shape[1])
    return rows, cols * cov.k + idx.reshape(-1)[flat]


def _kmnc_profile(
    cov: Any, li: int, values: np.ndarray, extrema: tuple[np.ndarray, np.ndarray] | None, valid: np.ndarray
) -> np.ndarray:
    """A block of inputs' sections as a boolean ``(neurons * k, rows)`` profile."""
    idx = cov.sections(li, values)
    (rows, size), k = idx.shape, cov.k
    flat = idx + np.arange(size) * k  # (neuron, section) as one id; none: a sink id
    flat[(idx < 0) | ~valid] = size * k
    flat *= rows
    flat += np.arange(rows)[:, None]  # the position of (id, row) in the profile
    profile = np.zeros((size * k + 1) * rows, dtype=bool)
    profile[flat] = True
    return profile.reshape(size * k + 1, rows)[:-1]


def _kmnc_counts(
    cov: Any, li: int, values: np.ndarray, extrema: tuple[np.ndarray, np.ndarray] | None, valid: np.ndarray
) -> np.ndarray:
    """The valid neurons whose value has a section: inside ``[low, high]`` (the sections
    themselves are not needed to count them)."""
    inside = values >= cov.ranges.low[li]
    inside &= values <= cov.ranges.high[li]
    inside &= valid
    return _row_counts(inside)


def _row_counts(hit: np.ndarray) -> np.ndarray:
    """The True values of each row of a boolean matrix (added as bytes while they fit)."""
    counts: np.ndarray = (
        np.add.reduce(hit.view(np.uint8), axis=1, dtype=np.uint8)
        if hit.shape[1] < 256
        else np.count_nonzero(hit, axis=1)
    )
    return counts


def _nbc_flags(
    cov: Any, li: int, values: np.ndarray, extrema: tuple[np.ndarray, np.ndarray] | None, valid: np.ndarray
) -> np.ndarray:
    low, high = cov.bounds(li)  # widened by --sadl-nbc-std
    hit: np.ndarray = np.stack([values < low, values > high], axis=2) & valid[:, None]
    return hit


def _snac_flags(
    cov: Any, li: int, values: np.ndarray, extrema: tuple[np.ndarray, np.ndarray] | None, valid: np.ndarray
) -> np.ndarray:
    hit: np.ndarray = (values > cov.bounds(li)[1]) & valid
    return hit[:, :, None]


def target_counts(cov: Any, batch: Batch) -> np.ndarray | None:
    """The number of targets each input of ``batch`` covers on its own (what
    :func:`input_counts` gives, each input's :func:`target_pairs`), counted from the
    traces without listing the targets; ``None`` for a criterion whose targets are not
    known here."""
    from pytest_sadl.criteria.surprise import SurpriseCoverage

    if isinstance(cov, SurpriseCoverage) and cov.sa is not None:
        return _bucket_counts(cov, batch)
    top = _top_k_targets(cov, batch)
    if top is not None:
        return np.bincount(top[1], minlength=top[0]).astype(np.int64)
    if not _vectorised_neurons(cov, batch):
        return None
    return _neuron_counts(cov, batch)


def _bucket_counts(cov: Any, batch: Batch) -> np.ndarray:
    """1 for each input whose score lands in a bucket, else 0: ``edge[0] < score <=
    edge[-1]``, exactly where :func:`bucket_index` gives a bucket (NaN in none)."""
    n = len(batch.layers[0]) if batch.layers else len(next(iter(batch.scores.values()), []))
    scores = batch.scores.get(cov.sa)
    if scores is None:
        return np.zeros(n, dtype=np.int64)
    edges = bucket_edges(cov.lower, cov.upper, cov.buckets)
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    inside: np.ndarray = (s > edges[0]) & (s <= edges[-1])
    return inside.astype(np.int64)


def input_targets(cov: Any, batch: Batch) -> list[np.ndarray] | None:
    """:func:`target_pairs` as one array of target ids per input (``None`` where the
    criterion's targets are not known here)."""
    pairs = target_pairs(cov, batch)
    if pairs is None:
        return None
    n, rows, ids = pairs
    return np.split(ids, np.cumsum(np.bincount(rows, minlength=n))[:-1]) if n else []


def cam_of_targets(targets: list[np.ndarray]) -> tuple[np.ndarray, list[int]]:
    """:func:`cam_of_pairs` over one array of target ids per input."""
    sizes = np.array([t.size for t in targets], dtype=np.int64)
    rows = np.repeat(np.arange(len(targets), dtype=np.int64), sizes)
    ids = np.concatenate(targets).astype(np.int64) if targets else np.zeros(0, np.int64)
    return cam_of_pairs(len(targets), rows, ids)


def cam_of_pairs(n: int, rows: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """:func:`cam_order` over known targets (``rows[j]`` covers ``ids[j]``, each pair once):
    the plain greedy with every input's gain kept up to date, as dnn-tip's ``cam`` does
    on a dense profile, here on the sparse pairs: a pick's newly covered targets take one
    off the gain of each input that covers them. The pick is the largest gain, the lowest
    index on a tie (``argmax``), until no input adds a target; the rest in CTM order (ties
    in pool order). The same order and gains as the lazy greedy of :func:`cam_order`."""
    total = np.bincount(rows, minlength=n).astype(np.int64)
    col, m = _dense_ids(ids)
    row_ptr = np.concatenate([[0], np.cumsum(total)])  # rows are ascending: row i's targets
    col_rows = rows[_stable_argsort(col, m)]
    col_ptr = np.concatenate([[0], np.cumsum(np.bincount(col, minlength=m))])
    covered = np.zeros(m, dtype=bool)
    gain = total.copy()
    picks: list[int] = []
    gains: list[int] = []
    while n:
        best = int(np.argmax(gain))  # the first of the largest: ties to the lowest index
        g = int(gain[best])
        if g <= 0:
            break
        mine = col[row_ptr[best] : row_ptr[best + 1]]
        new = mine[~covered[mine]]
        covered[new] = True
        np.subtract.at(gain, col_rows[_spans(col_ptr, new)], 1)
        picks.append(best)
        gains.append(g)
    return _then_ctm(total, picks, gains)


def _then_ctm(total: np.ndarray, picks: list[int], gains: list[int]) -> tuple[np.ndarray, list[int]]:
    """The greedy ``picks`` (and their ``gains``), then every other input in CTM order by
    ``total`` (gain 0)."""
    taken = np.zeros(len(total), dtype=bool)
    taken[picks] = True
    order = ctm_order(total)
    rest = order[~taken[order]]
    return np.concatenate([np.array(picks, dtype=np.int64), rest]), gains + [0] * len(rest)


def _dense_ids(ids: np.ndarray) -> tuple[np.ndarray, int]:
    """Target ids as columns ``0..m-1``, the ids that occur numbered in their order (by a
    count of each id when they are not much sparser than the pairs, else by their ranks),
    and ``m``."""
    top = int(ids.max()) + 1 if ids.size else 0
    if top > 4 * ids.size + 1024:
        targets, col = np.unique(ids, return_inverse=True)
        return col.reshape(-1), int(targets.size)
    present = np.bincount(ids, minlength=top) > 0
    number = np.cumsum(present) - 1
    return number[ids], int(number[-1]) + 1 if top else 0


def _stable_argsort(col: np.ndarray, m: int) -> np.ndarray:
    """``argsort(col, kind="stable")``, by NumPy's radix sort when the columns fit 16 bits."""
    if m <= 1 << 16:
        return np.argsort(col.astype(np.uint16), kind="stable")
    return np.argsort(col, kind="stable")


def _spans(ptr: np.ndarray, which: np.ndarray) -> np.ndarray:
    """The positions ``ptr[w]:ptr[w + 1]`` of every ``w`` in ``which``, concatenated."""
    starts, lens = ptr[which], ptr[which + 1] - ptr[which]
    return np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))


#: the most values, and the most targets, a dense boolean (targets x inputs) profile may
#: hold; CAM over more keeps to the sparse pairs (:func:`cam_of_pairs`), which is faster
#: there: a pick reads its input's column, strided, of every target (measured: KMNC
#: k = 30 on 32 neurons, 960 targets, equal; k = 50 the sparse pairs 1.2x faster)
DENSE = 1 << 24
DENSE_TARGETS = 1024


def _dense_fits(m: int, n: int) -> bool:
    return m <= DENSE_TARGETS and m * n <= DENSE


def dense_profile(n: int, rows: np.ndarray, ids: np.ndarray) -> np.ndarray | None:
    """The pairs (``rows[j]`` covers ``ids[j]``, in any order) as a boolean ``(targets,
    inputs)`` matrix, the targets renumbered as by :func:`_dense_ids`; ``None`` when it
    would be larger than :func:`_dense_fits` allows."""
    col, m = _dense_ids(ids)
    if not _dense_fits(m, n):
        return None
    profile = np.zeros((m, n), dtype=bool)
    profile[col, rows] = True
    return profile


def cam_of_profile(profile: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """:func:`cam_of_pairs` on a boolean ``(targets, inputs)`` profile: every input's gain
    kept up to date, a pick's newly covered targets' rows summed off all gains at once
    (dnn-tip's ``cam``, on the transposed profile so the rows are contiguous). The pick
    is the largest gain, the lowest index on a tie (``argmax``); once the largest gain is
    1, the rest of the greedy picks come in one step (:func:`_single_target_picks`). The
    same order and gains as :func:`cam_of_pairs` and :func:`cam_order`."""
    total = _column_sums(profile).astype(np.int64)
    gain = total.copy()
    covered = np.zeros(profile.shape[0], dtype=bool)
    picks: list[int] = []
    gains: list[int] = []
    best = int(np.argmax(gain)) if gain.size else 0
    while gain.size and gain[best] > 1:
        new = np.flatnonzero(profile[:, best] > covered)
        covered[new] = True
        picks.append(best)
        gains.append(int(gain[best]))
        gain -= _column_sums(profile[new])
        best = int(np.argmax(gain))
    if gain.size and gain[best] == 1:
        last = _single_target_picks(profile, covered, gain)
        picks += last.tolist()
        gains += [1] * last.size
    return _then_ctm(total, picks, gains)


def _column_sums(rows: np.ndarray) -> np.ndarray:
    """The True values of each column of a boolean matrix (added in the narrowest integers
    they fit: bytes, then 16 bits)."""
    dtype = np.uint8 if len(rows) < 1 << 8 else np.int16 if len(rows) < 1 << 15 else np.int64
    sums: np.ndarray = np.add.reduce(rows.view(np.uint8), axis=0, dtype=dtype)
    return sums


def _single_target_picks(profile: np.ndarray, covered: np.ndarray, gain: np.ndarray) -> np.ndarray:
    """The greedy's remaining picks once no input adds more than one target: the picks
    then go by index (each the lowest index of gain 1), and a pick only zeroes the inputs
    adding the same target, so they are, in index order, the first input of gain 1 of
    each target still uncovered."""
    candidates = np.flatnonzero(gain == 1)
    target = np.argmax(profile[:, candidates] > covered[:, None], axis=0)
    _, first = np.unique(target, return_index=True)
    return np.sort(candidates[first])
