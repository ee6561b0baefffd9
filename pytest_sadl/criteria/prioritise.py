"""Prioritisation: the whole pool in an order, and the measure of an order, on NumPy arrays.

Two orders by any coverage criterion of the registry (no TensorFlow, no pytest):

* ``ctm`` — coverage-total prioritisation: the inputs by the number of targets each covers
  on its own, most first, ties in pool order (:func:`ctm_order`).
* ``cam`` — coverage-additional prioritisation: each pick is the input that covers the
  most targets the picks before it left uncovered (ties: the lowest pool index); once no
  input adds a target, the rest in CTM order (Feng et al.'s CAM, as dnn-tip's ``cam``).
  For the registry's own criteria, on each input's targets read from the traces
  (:mod:`~pytest_sadl.criteria.targets`): an exact greedy on a dense boolean profile
  (:func:`cam_of_profile`) or on the sparse (input, target) pairs (:func:`cam_of_pairs`);
  for any other ``Coverage``, a lazy greedy over its ``update`` (:func:`cam_order`).

:func:`prioritise` gives the whole pool's order by either, the criterion named as in the
registry.

:func:`apfd` measures an ordering when the faults (misclassified inputs, :func:`faults_of`)
are known: ``APFD = 1 - (sum of the faults' 1-based positions) / (k n) + 1 / (2 n)``, ``n``
inputs of which ``k`` are faults (Rothermel et al.; DeepGini's form, as dnn-tip's
``apfd_from_order``).
"""

from __future__ import annotations

import copy
import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_sadl.criteria.targets import (
    _by_row,
    _dense_ids,
    _neuron_profile,
    _vectorised_neurons,
    dense_profile,
    target_counts,
    target_pairs,
)

if TYPE_CHECKING:
    from pytest_sadl.criteria.shape import Batch, Coverage, Setup

__all__ = ["apfd", "ctm_order", "cam_order", "prioritise"]


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


def _stable_argsort(col: np.ndarray, m: int) -> np.ndarray:
    """``argsort(col, kind="stable")``, by NumPy's radix sort when the columns fit 16 bits."""
    if m <= 1 << 16:
        return np.argsort(col.astype(np.uint16), kind="stable")
    return np.argsort(col, kind="stable")


def _spans(ptr: np.ndarray, which: np.ndarray) -> np.ndarray:
    """The positions ``ptr[w]:ptr[w + 1]`` of every ``w`` in ``which``, concatenated."""
    starts, lens = ptr[which], ptr[which + 1] - ptr[which]
    return np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))


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
