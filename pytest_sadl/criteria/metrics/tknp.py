"""TKNP — top-k neuron patterns (DeepGauge, Ma et al., ASE 2018).

An input's pattern is the tuple, over the coverage layers, of each layer's top-``k`` set
(``tknp_k``; the sets of :func:`~pytest_sadl.criteria.metrics.tknc.top_k`, ties to the
lower neuron index, conv neurons channel means). TKNP is the number of distinct patterns
of the inputs: a count, not a percentage.

Patterns are stored compactly: each is the 16-byte BLAKE2b digest of its layers' top-k
masks packed to bits (a set and its mask are one-to-one, so equal patterns, and only
those up to a 2^-128 collision chance, have equal digests). Merging (xdist workers,
groups) is the union of the digest sets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_sadl.criteria.shape import COUNT_KIND, Batch, Coverage, Criterion, Param, Setup

if TYPE_CHECKING:
    from pytest_sadl.results import Metric


class TopKPatterns:
    """The set of distinct top-k patterns seen, cumulative."""

    def __init__(self, sizes: Sequence[int], k: int = 2) -> None:
        from pytest_sadl.criteria.metrics.tknc import check_k

        self.sizes = tuple(int(s) for s in sizes)
        if not self.sizes or min(self.sizes) < 1:
            raise ValueError(f"every layer needs at least one neuron, got sizes {self.sizes}")
        self.k = check_k(k, "TKNP's k")
        self.patterns: set[bytes] = set()
        self.count = 0

    def update(self, batch: Batch) -> int:
        import hashlib

        import numpy as np

        from pytest_sadl.criteria.metrics.tknc import top_k

        for i, values in enumerate(batch.layers):
            if values.shape[1:] != (self.sizes[i],):
                raise ValueError(f"layer {i} has {values.shape[1:]} neurons per input, expected {self.sizes[i]}")
        n = batch.layers[0].shape[0] if batch.layers else 0
        self.count += n
        if n == 0:
            return 0
        masks = np.concatenate([top_k(values, self.k) for values in batch.layers], axis=1)
        packed = np.packbits(masks, axis=1)
        before = len(self.patterns)
        self.patterns.update(hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in packed)
        return len(self.patterns) - before

    def merge(self, other: TopKPatterns) -> None:
        if (other.sizes, other.k) != (self.sizes, self.k):
            raise ValueError("cannot merge TKNP of other layers or another k")
        self.patterns |= other.patterns
        self.count += other.count

    @property
    def value(self) -> float:
        return float(len(self.patterns))

    def metric(self) -> Metric:
        from pytest_sadl.results import Metric

        # covered: the distinct patterns; total: the inputs, the most there could be
        return Metric(self.value, len(self.patterns), self.count)


def make(setup: Setup) -> Coverage:
    return TopKPatterns(setup.ranges.sizes, setup.options.tknp_k)


CRITERION = Criterion(
    name="tknp",
    label="TKNP",
    title="Top-k neuron patterns",
    kind=COUNT_KIND,
    needs=("coverage layers", "tknp_k"),
    make=make,
    default=False,
    parameters=(
        Param(
            "tknp_k",
            int,
            2,
            "TKNP: a pattern is the top-k set of every coverage layer (default 2)",
            at_least=1,
            at_least_why="TKNP needs k >= 1 neurons per layer",
            description="TKNP's k (when the run computed TKNP)",
        ),
    ),
    unit="inputs: distinct top-k patterns",
    count_parts=("distinct top-k patterns", "inputs"),
)
