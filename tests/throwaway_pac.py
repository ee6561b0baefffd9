"""PAC — positive activation coverage: a throwaway criterion for ``tests/test_throwaway_criterion.py``.

A neuron (a conv channel's mean, as for the other neuron criteria) is covered when some
input drives it above ``pac_threshold``. PAC = covered neurons / all neurons of the
coverage layers. It is one file plus one registry line (the last): loaded with
``pytest -p throwaway_pac`` (before pytest-sadl's own plugin), or imported before
``sadl``'s ``main``. Not a criterion of the package: it shows that a new one needs
nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from pytest_sadl.criteria.registry import register
from pytest_sadl.criteria.shape import NEURON_KIND, Batch, Colour, Criterion, Param, Setup

if TYPE_CHECKING:
    from pytest_sadl.results import Metric


class PositiveActivation:
    """One flag per neuron: some input's activation was above the threshold."""

    def __init__(self, sizes: Sequence[int], threshold: float) -> None:
        self.sizes = tuple(int(s) for s in sizes)
        self.threshold = float(threshold)
        self.covered = [np.zeros(s, dtype=bool) for s in self.sizes]

    @property
    def value(self) -> float:
        return sum(int(c.sum()) for c in self.covered) / sum(self.sizes)

    def update(self, batch: Batch) -> int:
        new = 0
        for i, values in enumerate(batch.layers):
            hit = (np.asarray(values) > self.threshold).any(axis=0)
            new += int((hit & ~self.covered[i]).sum())
            self.covered[i] |= hit
        return new

    def merge(self, other: PositiveActivation) -> None:
        for mine, theirs in zip(self.covered, other.covered, strict=True):
            mine |= theirs

    def per_layer(self) -> list[float]:
        return [float(c.mean()) for c in self.covered]

    def metric(self) -> Metric:
        from pytest_sadl.results import Metric  # after the registration: results reads the registry

        return Metric(self.value, sum(int(c.sum()) for c in self.covered), sum(self.sizes))


def make(setup: Setup) -> PositiveActivation:
    return PositiveActivation(setup.ranges.sizes, setup.options.param("pac_threshold"))


CRITERION = Criterion(
    name="pac",
    label="PAC",
    title="Positive activation coverage",
    kind=NEURON_KIND,
    needs=("coverage layers", "pac_threshold"),
    make=make,
    default=False,
    parameters=(
        Param(
            "pac_threshold",
            float,
            0.0,
            "PAC: a neuron is covered when some input drives it above this (default 0)",
            metavar="T",
            at_least=0,
            at_least_why="PAC's threshold must be >= 0",
        ),
    ),
    explanation="A neuron is covered when some input drives it above the threshold.",
    colour=Colour("#0f766e", "#5eead4"),
)

register(CRITERION)
