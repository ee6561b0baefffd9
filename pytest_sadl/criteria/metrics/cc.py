"""CC — cluster coverage (TensorFuzz, Odena et al., ICML 2019; NeuraL-Coverage's ``CC``).

Per coverage layer (conv neurons channel means), inputs are taken one at a time in a fixed
order: an input whose Euclidean distance to every cluster centre of its layer so far is
above ``cc_threshold`` becomes a new centre (the first input of a layer always does).
CC is the number of centres of all layers: a count, not a percentage.

The result depends on the order of the inputs, so the order is fixed: the run's inputs in
test order, as the engine updates the criteria: the tests by node id (not the order they
ran in, so ``-n 2`` or a shuffled run gives the same CC), each test's inputs in the order
it fed them. Distances are exact (float64, no approximate nearest
neighbour index; NeuraL-Coverage consults FLANN but then also takes the exact minimum).
TensorFuzz and NeuraL-Coverage compare the *squared* distance with their threshold: their
``threshold`` is this one squared. Merging (xdist workers, groups) takes the other
coverage's centres, in its order, through the same rule after this one's: the result a
run gets when the other's centres follow its own inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_sadl.criteria.shape import COUNT_KIND, Batch, Coverage, Criterion, Param, Setup

if TYPE_CHECKING:
    import numpy as np

    from pytest_sadl.results import Metric


class LayerClusters:
    """The cluster centres of one layer, in the order they were found."""

    def __init__(self, size: int, threshold: float) -> None:
        import numpy as np

        self.threshold = threshold
        self._centres = np.zeros((16, size))
        self._norms = np.zeros(16)
        self.n = 0

    @property
    def centres(self) -> np.ndarray:
        return self._centres[: self.n]

    def _append(self, x: np.ndarray) -> None:
        import numpy as np

        if self.n == len(self._centres):
            self._centres = np.concatenate([self._centres, np.zeros_like(self._centres)])
            self._norms = np.concatenate([self._norms, np.zeros_like(self._norms)])
        self._centres[self.n] = x
        self._norms[self.n] = x @ x
        self.n += 1

    def _far_from_existing(self, x: np.ndarray) -> np.ndarray:
        """Per input: is it farther than the threshold from every centre found before the batch?"""
        import numpy as np

        t2 = self.threshold**2
        if self.n == 0:
            return np.ones(len(x), dtype=bool)
        xx = np.einsum("ij,ij->i", x, x)
        far = np.ones(len(x), dtype=bool)
        step = max(1, 2**22 // max(1, self.n))  # inputs per block: ~32 MB of distances
        for s in range(0, len(x), step):
            block, bn = x[s : s + step], xx[s : s + step]
            d2 = bn[:, None] + self._norms[None, : self.n] - 2.0 * (block @ self.centres.T)
            nearest = d2.min(axis=1)
            # the expanded form rounds; settle inputs near the threshold with exact differences
            slack = 1e-9 * (bn + self._norms[: self.n].max()) + 1e-300
            unsure = np.flatnonzero(np.abs(nearest - t2) <= slack)
            for j in unsure:
                nearest[j] = (((block[j] - self.centres) ** 2).sum(axis=1)).min()
            far[s : s + step] = nearest > t2
        return far

    def update(self, values: np.ndarray) -> int:
        import numpy as np

        x = np.asarray(values, dtype=np.float64)
        if len(x) == 0:
            return 0
        start, t2 = self.n, self.threshold**2
        for i in np.flatnonzero(self._far_from_existing(x)):  # in input order
            mine = self._centres[start : self.n]
            if not len(mine) or (((x[i] - mine) ** 2).sum(axis=1) > t2).all():
                self._append(x[i])
        return self.n - start


class ClusterCoverage:
    """TensorFuzz's cluster coverage over the coverage layers, cumulative."""

    def __init__(self, sizes: Sequence[int], threshold: float) -> None:
        import math

        self.sizes = tuple(int(s) for s in sizes)
        if not self.sizes or min(self.sizes) < 1:
            raise ValueError(f"every layer needs at least one neuron, got sizes {self.sizes}")
        threshold = float(threshold)
        if not math.isfinite(threshold) or threshold < 0:
            raise ValueError(f"CC's distance threshold must be a finite number >= 0, got {threshold!r}")
        self.threshold = threshold
        self.layers = [LayerClusters(s, threshold) for s in self.sizes]
        self.count = 0

    def update(self, batch: Batch) -> int:
        for i, values in enumerate(batch.layers):
            if values.shape[1:] != (self.sizes[i],):
                raise ValueError(f"layer {i} has {values.shape[1:]} neurons per input, expected {self.sizes[i]}")
        self.count += batch.layers[0].shape[0] if batch.layers else 0
        return sum(layer.update(values) for layer, values in zip(self.layers, batch.layers, strict=True))

    def merge(self, other: ClusterCoverage) -> None:
        if (other.sizes, other.threshold) != (self.sizes, self.threshold):
            raise ValueError("cannot merge CC of other layers or another threshold")
        for mine, theirs in zip(self.layers, other.layers, strict=True):
            mine.update(theirs.centres)
        self.count += other.count

    @property
    def clusters(self) -> int:
        return sum(layer.n for layer in self.layers)

    @property
    def value(self) -> float:
        return float(self.clusters)

    def per_layer(self) -> list[int]:
        return [layer.n for layer in self.layers]

    def metric(self) -> Metric:
        from pytest_sadl.results import Metric

        # covered: the centres of all layers; total: inputs x layers, the most there could be
        return Metric(self.value, self.clusters, self.count * len(self.sizes))


def make(setup: Setup) -> Coverage:
    return ClusterCoverage(setup.ranges.sizes, setup.options.cc_threshold)


CRITERION = Criterion(
    name="cc",
    label="CC",
    title="Cluster coverage",
    kind=COUNT_KIND,
    needs=("coverage layers", "cc_threshold"),
    make=make,
    default=False,
    parameters=(
        Param(
            "cc_threshold",
            float,
            10.0,
            "CC: an input farther than this Euclidean distance from every cluster centre of a layer "
            "starts a new one (default 10)",
            metavar="D",
            at_least=0,
            at_least_why="CC's distance threshold must be >= 0",
            description="CC's distance threshold (when the run computed CC)",
        ),
    ),
    unit="input-layer pairs: cluster centres",
    count_parts=("cluster centres", "inputs x coverage layers"),
)
