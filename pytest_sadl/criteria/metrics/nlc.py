"""NLC — NeuraL Coverage (Yuan, Pang and Wang, ICSE 2023).

Per coverage layer ``l`` with ``m_l`` neurons (conv neurons channel means), ``Σ_l`` is the
covariance matrix of the layer's outputs over all inputs seen, divided by the number of
inputs ``n`` (not ``n - 1``), as NeuraL-Coverage's ``Estimator``. NLC is the sum over the
layers of the mean absolute entry of ``Σ_l``::

    NLC = Σ_l (1 / m_l²) Σ_ij |Σ_l[i, j]|

This is the value of NeuraL-Coverage's code since its commit a5f8d65 (2024-11-05, "fixed an
implementation error"), which changed the norm's denominator from ``vec.size(0)`` (the
number of classes of its estimator, 1: a plain sum of ``|Σ_l[i, j]|``) to the number of
entries ``m_l²``.

The statistics are exact and mergeable: per layer the count, the mean and the sum of
outer products of deviations, combined batch by batch (Chan et al.'s pairwise update) in
float64, so any split into batches, workers or groups gives the same NLC up to rounding.
NeuraL-Coverage instead keeps a layer's new statistics only when a batch raises that
layer's norm, so its value depends on the order and batching of the inputs (the 2026
critical review by Kim, Humbatova, Jahangirova et al. shows it); here NLC is a function
of the set of inputs, and so it is not monotone: inputs that narrow a layer's spread
lower it. ``update`` returns 0 (NLC has no targets to cover).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_sadl.criteria.shape import COUNT_KIND, Batch, Coverage, Criterion, Setup

if TYPE_CHECKING:
    import numpy as np

    from pytest_sadl.results import Metric


class LayerCovariance:
    """Exact running count, mean and co-moment ``Σ (x - mean)(x - mean)^T`` of one layer."""

    def __init__(self, size: int) -> None:
        import numpy as np

        self.n = 0
        self.mean = np.zeros(size)
        self.comoment = np.zeros((size, size))

    def add(self, n: int, mean: np.ndarray, comoment: np.ndarray) -> None:
        if n == 0:
            return
        total = self.n + n
        delta = mean - self.mean
        self.comoment += comoment + (self.n * n / total) * (delta[:, None] * delta[None, :])
        self.mean += delta * (n / total)
        self.n = total

    def update(self, values: np.ndarray) -> None:
        import numpy as np

        x = np.asarray(values, dtype=np.float64)
        if len(x) == 0:
            return
        mean = x.mean(axis=0)
        d = x - mean
        self.add(len(x), mean, d.T @ d)

    def norm(self) -> float:
        """The mean absolute entry of the covariance (0 before any input)."""
        import numpy as np

        return 0.0 if self.n == 0 else float(np.abs(self.comoment).mean() / self.n)


class NeuralCoverage:
    """NLC of the inputs seen, from exact per-layer sufficient statistics."""

    def __init__(self, sizes: Sequence[int]) -> None:
        self.sizes = tuple(int(s) for s in sizes)
        if not self.sizes or min(self.sizes) < 1:
            raise ValueError(f"every layer needs at least one neuron, got sizes {self.sizes}")
        self.layers = [LayerCovariance(s) for s in self.sizes]

    def update(self, batch: Batch) -> int:
        for i, values in enumerate(batch.layers):
            if values.shape[1:] != (self.sizes[i],):
                raise ValueError(f"layer {i} has {values.shape[1:]} neurons per input, expected {self.sizes[i]}")
            self.layers[i].update(values)
        return 0

    def merge(self, other: NeuralCoverage) -> None:
        if other.sizes != self.sizes:
            raise ValueError("cannot merge NLC of other layers")
        for mine, theirs in zip(self.layers, other.layers, strict=True):
            mine.add(theirs.n, theirs.mean, theirs.comoment)

    @property
    def count(self) -> int:
        return self.layers[0].n

    @property
    def value(self) -> float:
        return sum(layer.norm() for layer in self.layers)

    def per_layer(self) -> list[float]:
        return [layer.norm() for layer in self.layers]

    def metric(self) -> Metric:
        from pytest_sadl.results import Metric

        # no targets: covered 0 of the inputs seen
        return Metric(self.value, 0, self.count)


def make(setup: Setup) -> Coverage:
    return NeuralCoverage(setup.ranges.sizes)


CRITERION = Criterion(
    name="nlc",
    label="NLC",
    title="NeuraL Coverage",
    kind=COUNT_KIND,
    needs=("coverage layers",),
    make=make,
    default=False,
    unit="inputs (no targets)",
)
