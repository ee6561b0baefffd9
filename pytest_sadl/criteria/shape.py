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
:class:`~pytest_sadl.results.Metric`. The built-in criteria implement it directly: the
neuron coverages of :mod:`~pytest_sadl.criteria.neurons`, the surprise coverages'
:class:`~pytest_sadl.criteria.surprise.SurpriseCoverage` (reading its score), the peers'
classes in their modules. A neuron coverage also gives ``per_layer()`` (the layer tables). The engine and every report loop over the
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
    from typing_extensions import Self

    from pytest_sadl.config import SadlOptions
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
    options: SadlOptions  # plain data: the criteria import no pytest
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
    options: SadlOptions | None = None
    profile: Any = None  # a TrainingProfile (profile/ sits above the criteria)
    #: which neurons a class's KDE / covariance is over (``"class"`` or ``"paper"``)
    var_rule: str = "class"
    #: ``(kernel, bias)`` of the output layer over these traces (the logit scores' set-up
    #: on held-out traces, where ``profile`` is ``None``); ``None`` where there is none
    logit_head: tuple[np.ndarray, np.ndarray] | None = None


#: a set-up per-input surprise score: ``scorer(ats, pred)`` -> float64 ``(n,)``
Scorer = Callable[..., "np.ndarray"]


class Coverage(Protocol):
    """A cumulative criterion of one run."""

    @property
    def value(self) -> float: ...  # read-only: the implementations compute it

    def update(self, batch: Batch) -> int: ...

    def merge(self, other: Self) -> None: ...  # another of the same ``make``

    def metric(self) -> Metric: ...


@dataclass(frozen=True)
class Param:
    """One parameter of a criterion, its whole surface: the option ``--sadl-NAME`` (``_``
    as ``-``) and its ini twin ``sadl_NAME``, the ``SadlOptions`` value the criterion reads
    (``options.param(name)``) and the results' ``config`` key. ``type`` is ``int`` or
    ``float``; a value below ``at_least``, not below ``below`` or in ``refused`` is a usage
    error saying ``why``; ``limit`` caps an option that sizes memory (``limit_why``: what it sizes).
    ``help`` ends with the default, as ``pytest --help`` shows it."""

    name: str
    type: type[int] | type[float]
    default: int | float
    help: str
    metavar: str = "K"
    at_least: float | None = None
    at_least_why: str = ""
    below: float | None = None
    below_why: str = ""
    #: values a usage error refuses although within the limits (MMDSA's silhouette takes
    #: 0 or 2 and more, not 1), with ``at_least_why`` as the message
    refused: tuple[float, ...] = ()
    limit: float | None = None
    limit_why: str = ""
    #: the results' JSON Schema entry of the ``config`` key: its description and maximum
    description: str = ""
    maximum: float | None = None

    @property
    def flag(self) -> str:
        return "--sadl-" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        return "sadl_" + self.name


@dataclass(frozen=True)
class Colour:
    """A criterion's colour in the HTML report (its chart lines, bars and legend): one
    for the light theme (and print), one for the dark; ``dashed`` lines for a variant
    drawn beside its original (MLSC beside LSC)."""

    light: str
    dark: str
    dashed: bool = False


@dataclass(frozen=True)
class Criterion:
    name: str
    label: str
    title: str
    kind: str  # SURPRISE_KIND | NEURON_KIND | COUNT_KIND
    needs: tuple[str, ...]  # what it reads from the profile (documentation and checks)
    make: Callable[[Setup], Coverage | None]
    #: its options (``--sadl-tknp-k``), read into ``SadlOptions`` and recorded in the
    #: results' ``config`` when a run computes it
    parameters: tuple[Param, ...] = ()
    #: what "covered of total" counts in the reports (``None``: buckets for a surprise
    #: coverage, neurons for a neuron coverage)
    unit: str | None = None
    #: a sentence on the reports' card saying what a target is (``None``: no sentence)
    explanation: str | None = None
    colour: Colour | None = None
    #: a count criterion's ``covered`` and ``total`` (what each counts, the reports'
    #: "covered / total"); ``None``: it has no targets, its ``covered`` is always 0
    count_parts: tuple[str, str] | None = None
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
    #: surprise kinds whose ``fit`` sets up a density or a covariance over the neurons: with
    #: ``--sadl-sa-components`` the score is set up on the principal axes of the training
    #: traces (LSA, MDSA, MLSA, MMDSA); a distance such as DSA's is defined at any width
    projected: bool = False

    @property
    def option_names(self) -> tuple[str, ...]:
        """The run options it reads, such as ``("tknc_k",)``: recorded in the results'
        ``config`` when a run computes it, so a number is read with its parameters."""
        return tuple(p.name for p in self.parameters)

    @property
    def units(self) -> str:
        """What its "covered of total" counts: :attr:`unit`, else buckets or neurons."""
        if self.unit is not None:
            return self.unit
        return "buckets" if self.kind == SURPRISE_KIND else "neurons"
