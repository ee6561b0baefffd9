"""The one shape every criterion has: what it is, what it needs, how it accumulates.

A criterion module (one per metric, in :mod:`pytest_sadl.criteria.metrics`) defines a
:class:`Criterion`: its name (the key in results, options and ``--sadl-fail-under``),
label, title, kind (a surprise coverage, which buckets a per-input surprise score, or a
neuron coverage, over the coverage layers' neurons), what it needs from the profile, and
``make``, which returns a fresh cumulative :class:`Coverage` for a run (or ``None`` when
the profile cannot give what it needs: DSC of a regression model).

A :class:`Coverage` is updated with one :class:`Batch` of traces at a time and returns
how many targets the batch newly covered; two of them made by the same ``make`` can be
merged (pytest-xdist workers, groups); :meth:`Coverage.metric` reads it as the results'
:class:`~pytest_sadl.results.Metric`. The engine and every report loop over the
registry (:mod:`pytest_sadl.criteria.registry`): adding a criterion is one module there
plus its tests.

Importing this module (or the registry) imports no NumPy-heavy criterion code: each
``make`` imports its implementation when a run calls it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

    from pytest_sadl.criteria.neurons import NeuronRanges
    from pytest_sadl.results import Metric

SURPRISE_KIND = "surprise"
NEURON_KIND = "neuron"
#: a number that is not a fraction of targets: TKNP's patterns and CC's clusters (integers),
#: NLC's summed covariance (a real). Its ``Coverage.value`` and ``Metric.value`` are that
#: number itself, not a percentage.
COUNT_KIND = "count"


@dataclass(frozen=True)
class Batch:
    """One batch of recorded inputs as the criteria see it: each surprise score by its
    key (``"lsa"``...), the coverage layers' traces, and their per-input extrema (NC's
    ``Traces.coverage_extrema``; ``None`` where a layer has none)."""

    scores: dict[str, np.ndarray]
    layers: list[np.ndarray]
    extrema: list[Any]


@dataclass(frozen=True)
class Setup:
    """What the criteria of a run may need, given once: the neuron ranges of the
    coverage layers, the run's options, and each surprise coverage's bounds
    ``(lower, upper, buckets)`` by metric name (only those whose score the profile has)."""

    ranges: NeuronRanges
    options: Any  # SadlOptions (plain data; the criteria import no pytest)
    bounds: dict[str, tuple[float, float, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Training:
    """The training traces a per-input surprise score is set up on (a criterion's ``fit``).

    ``pred``: the traces' predicted classes, ``None`` for a regression model. ``profile``:
    the :class:`~pytest_sadl.profile.TrainingProfile` when the score is set up on the whole
    training set (what it caches, LSA's arrays or DSA's kept distances, is reused), ``None``
    for the default SC bounds' held-out set-up on the rest of the traces. ``options``: the
    run's options (a new measure's parameters), ``None`` outside a run."""

    traces: np.ndarray
    pred: np.ndarray | None
    var_threshold: float = 1e-5
    near_singular: str = "drop"
    options: Any = None
    profile: Any = None
    #: which neurons a class's KDE / covariance is over (``"class"`` or ``"paper"``)
    var_rule: str = "class"


#: a set-up per-input surprise score: ``scorer(ats, pred)`` -> float64 ``(n,)``
Scorer = Callable[..., "np.ndarray"]


class Coverage(Protocol):
    """A cumulative criterion of one run."""

    @property
    def value(self) -> float: ...  # read-only: the implementations compute it

    def update(self, batch: Batch) -> int: ...

    def merge(self, other: Any) -> None: ...

    def metric(self) -> Metric: ...


@dataclass(frozen=True)
class Criterion:
    name: str
    label: str
    title: str
    kind: str  # SURPRISE_KIND | NEURON_KIND | COUNT_KIND
    needs: tuple[str, ...]  # what it reads from the profile (documentation and checks)
    make: Callable[[Setup], Coverage | None]
    sa: str | None = None  # surprise kinds: the per-input score it buckets ("lsa")
    sa_label: str | None = None  # "LSA"
    #: reported when the user names no metrics (``--sadl-metrics``): today's seven; a new
    #: criterion is opt-in (``default=False``) so reports do not grow for users who did not ask
    default: bool = True
    #: surprise kinds: sets the score ``sa`` up on training traces and returns its scorer;
    #: ``None`` when it does not apply (DSA of a regression model); raises ``ValueError``
    #: with the one-line reason when it cannot be set up (the metric is then reported as
    #: not available, every other metric is still computed). Criteria that share a score
    #: share its set-up (the first in the registry that has ``fit`` gives it).
    fit: Callable[[Training], Scorer | None] | None = None
    #: surprise kinds whose score depends on the run's options (MLSA's components): those
    #: options as text (``"k3"``), part of the name under which a profile stores the score's
    #: held-out values, so that other options never read another's bounds; ``None``: none
    params: Callable[[Any], str] | None = None
    #: the run options (``SadlOptions`` fields) it reads, such as ``("tknc_k",)``: recorded in
    #: the results' ``config`` when a run computes it, so a number is read with its parameters
    option_names: tuple[str, ...] = ()


class SurpriseBuckets:
    """A surprise coverage as a :class:`Coverage`: the buckets of one per-input score."""

    def __init__(self, sa: str, lower: float, upper: float, buckets: int) -> None:
        from pytest_sadl.criteria.surprise import SurpriseCoverage

        self.sa = sa
        self.sc = SurpriseCoverage(lower=lower, upper=upper, buckets=buckets)

    @property
    def value(self) -> float:
        return self.sc.value

    def update(self, batch: Batch) -> int:
        scores = batch.scores.get(self.sa)
        return 0 if scores is None else self.sc.update(scores)

    def merge(self, other: SurpriseBuckets) -> None:
        self.sc.merge(other.sc)

    def metric(self) -> Metric:
        from pytest_sadl.results import Metric

        sc = self.sc
        return Metric(sc.value, int(sc.covered.sum()), sc.total, True, sc.below, sc.above, sc.count, sc.nan)

    def bounds(self) -> dict[str, float | int]:
        return {"lower": self.sc.lower, "upper": self.sc.upper, "buckets": self.sc.buckets}

    def covered_sets(self) -> tuple[list[Any], list[int], dict[str, int]]:
        """The covered buckets (one part), their total, and the scores below, above, in
        all and NaN: what ``pytest_sadl.covered`` stores per test, so that runs combine."""
        sc = self.sc
        counts = {"below": sc.below, "above": sc.above, "count": sc.count, "nan": sc.nan}
        return [sc.covered.copy()], [sc.total], counts


def surprise_make(name: str, sa: str) -> Callable[[Setup], Coverage | None]:
    """``make`` of a surprise coverage: its bounds from the setup, ``None`` without them."""

    def make(setup: Setup) -> Coverage | None:
        spec = setup.bounds.get(name)
        return None if spec is None else SurpriseBuckets(sa, *spec)

    return make


class NeuronTargets:
    """A neuron coverage as a :class:`Coverage` (NC, KMNC, NBC, SNAC share the shape)."""

    def __init__(self, coverage: Any, *, uses_extrema: bool = False) -> None:
        self.coverage = coverage
        self.uses_extrema = uses_extrema

    @property
    def value(self) -> float:
        return float(self.coverage.value)

    def update(self, batch: Batch) -> int:
        if self.uses_extrema:
            return int(self.coverage.update(batch.layers, batch.extrema))
        return int(self.coverage.update(batch.layers))

    def merge(self, other: NeuronTargets) -> None:
        self.coverage.merge(other.coverage)

    def metric(self) -> Metric:
        from pytest_sadl.results import Metric

        return Metric(self.coverage.value, self.coverage.covered_count, self.coverage.total)

    def per_layer(self) -> list[float]:
        return list(self.coverage.per_layer())

    def covered_sets(self) -> tuple[list[Any], list[int], dict[str, int]]:
        """Each layer's covered targets (flat) and the targets that count on it (KMNC:
        not its constant neurons): what ``pytest_sadl.covered`` stores per test."""
        cov = self.coverage
        flat = cov.covered.reshape(len(cov.covered), -1)
        parts, start = [], 0
        for size in cov.sizes:
            parts.append(flat[start : start + size].reshape(-1).copy())
            start += size
        return parts, [t for _, t in cov.layer_counts()], {}
