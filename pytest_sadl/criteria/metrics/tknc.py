"""TKNC — top-k neuron coverage (DeepGauge, Ma et al., ASE 2018).

A neuron is covered when, for some input, it is among the ``k`` most active neurons of
its layer (``tknc_k``); ties go to the lower neuron index, so every input selects exactly
``min(k, neurons)`` neurons of each layer. Conv neurons are channel means, as for the
other neuron criteria. TKNC = covered neurons / all neurons of the coverage layers. It
needs no training ranges.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_sadl.criteria.shape import NEURON_KIND, Batch, Colour, Coverage, Criterion, Param, Setup

if TYPE_CHECKING:
    import numpy as np

    from pytest_sadl.results import Metric


def top_k(values: np.ndarray, k: int) -> np.ndarray:
    """The ``(inputs, neurons)`` mask of each input's ``min(k, neurons)`` largest values,
    ties to the lower neuron index (exact: no tie is left to a sort's whim)."""
    import numpy as np

    n, m = values.shape
    if k >= m:
        return np.ones((n, m), dtype=bool)
    if n == 0:
        return np.zeros((0, m), dtype=bool)
    part = np.partition(values, m - k, axis=1)
    kth = part[:, m - k][:, None]  # each row's k-th largest
    top = values >= kth
    # no NaN (partition puts it among the k largest) and k values at least the k-th in
    # every row (each has k or more): no tie to break, the mask is ``top`` itself
    if np.count_nonzero(top) == n * k and not np.isnan(part[:, m - k :]).any():
        return top
    above = values > kth
    tied = values == kth
    room = k - above.sum(axis=1, keepdims=True)  # places left for values equal to the k-th
    mask: np.ndarray = above | (tied & (np.cumsum(tied, axis=1) <= room))
    return mask


def check_k(k: object, name: str) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {k!r}")
    return k


class TopKCoverage:
    """DeepGauge's top-k neuron coverage, cumulative: one flag per neuron."""

    def __init__(self, sizes: Sequence[int], k: int = 2) -> None:
        import numpy as np

        self.sizes = tuple(int(s) for s in sizes)
        if not self.sizes or min(self.sizes) < 1:
            raise ValueError(f"every layer needs at least one neuron, got sizes {self.sizes}")
        self.k = check_k(k, "TKNC's k")
        self.covered = [np.zeros(s, dtype=bool) for s in self.sizes]

    def update(self, batch: Batch) -> int:
        new = 0
        for i, values in enumerate(batch.layers):
            if values.shape[1:] != (self.sizes[i],):
                raise ValueError(f"layer {i} has {values.shape[1:]} neurons per input, expected {self.sizes[i]}")
            hit = top_k(values, self.k).any(axis=0)
            new += int((hit & ~self.covered[i]).sum())
            self.covered[i] |= hit
        return new

    def merge(self, other: TopKCoverage) -> None:
        if (other.sizes, other.k) != (self.sizes, self.k):
            raise ValueError("cannot merge TKNC of other layers or another k")
        for mine, theirs in zip(self.covered, other.covered, strict=True):
            mine |= theirs

    @property
    def covered_count(self) -> int:
        return sum(int(c.sum()) for c in self.covered)

    @property
    def total(self) -> int:
        return sum(self.sizes)

    @property
    def value(self) -> float:
        return self.covered_count / self.total

    def per_layer(self) -> list[float]:
        return [float(c.mean()) for c in self.covered]

    def metric(self) -> Metric:
        from pytest_sadl.results import Metric

        return Metric(self.value, self.covered_count, self.total)


def make(setup: Setup) -> Coverage:
    return TopKCoverage(setup.ranges.sizes, setup.options.tknc_k)


CRITERION = Criterion(
    name="tknc",
    label="TKNC",
    title="Top-k neuron coverage",
    kind=NEURON_KIND,
    needs=("coverage layers", "tknc_k"),
    make=make,
    default=False,
    parameters=(
        Param(
            "tknc_k",
            int,
            2,
            "TKNC: a neuron is covered when among the k most active of its layer for some input (default 2)",
            at_least=1,
            at_least_why="TKNC needs k >= 1 neurons per layer",
            description="TKNC's k (when the run computed TKNC)",
        ),
    ),
    colour=Colour("#4d7c0f", "#a3e635"),
)
