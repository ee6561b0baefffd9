"""From a training profile and the recorded traces to :class:`~pytest_sadl.results.Results`.

Pure NumPy on top of the criteria; no TensorFlow and no pytest. The order is defined by
the tests' ids, never by the order they ran in (:func:`ordered`): tests by node id (as
strings), groups in the order ``sadl_groups`` lists them, the others after them by their
first test's node id. So a run split over pytest-xdist workers, one shuffled by
pytest-randomly and a serial run give the same numbers, the same cumulative table by
group (Table VI) and the same "newly covered by this test" counts.

Default bounds of LSC and DSC (when not configured) come from the training profile only,
never from the inputs measured, so that runs compare: up to 1,000 training traces (those
with the smallest row keys, a sample that depends on the inputs' content, not their
order) are held out, scored against the rest, and with ``m`` the smallest of their SA
values and ``q`` their 99th percentile, ``lower = min(0, m)`` and
``upper = lower + 2 (q - lower)`` (rule version 2, :func:`default_bounds`). Ordinary
held-out training data fills about the lower half of the buckets; the upper half is room
for inputs more surprising than it.
"""

from __future__ import annotations

import datetime as _dt
import math
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_sadl import __version__
from pytest_sadl.covered import section as covered_section
from pytest_sadl.criteria.mistakes import BASELINES, SCORE_LABELS, analyse
from pytest_sadl.criteria.neurons import NeuronRanges
from pytest_sadl.criteria.projection import Projected, Projection
from pytest_sadl.criteria.registry import BY_NAME, COUNT, LABELS, NEURON, SA_LABELS, SCORES, SURPRISE, choose
from pytest_sadl.criteria.shape import Batch, Setup, Training
from pytest_sadl.records import TestRecord
from pytest_sadl.results import (
    Failure,
    GroupRow,
    LayerRow,
    Metric,
    Mistakes,
    ModelInfo,
    Results,
    RunConfig,
    StaleTest,
    TestRow,
    TopInput,
    percent,
)

if TYPE_CHECKING:  # the options are plain data; the engine itself imports no pytest
    from pytest_sadl.config import SadlOptions

TOP_INPUTS = 12
HELD_OUT = 1000
#: The version of the default SC bounds' rule. 1: ``upper = lower + 2 (max - lower)``, so
#: one atypical held-out training input decided it; 2: the 99th percentile in place of
#: the maximum (:data:`BOUNDS_QUANTILE`), which the top 1% of the held-out traces cannot move.
BOUNDS_RULE_VERSION = 2
BOUNDS_QUANTILE = 0.99
BOUNDS_RULE = (
    f"default v{BOUNDS_RULE_VERSION}: min(0, m) to min(0, m) + 2 (q - min(0, m)), m the min and q the 99th "
    "percentile of the SA of held-out training traces"
)


@dataclass
class ProfileView:
    """What the engine needs of a training profile (see :mod:`pytest_sadl.profile`).

    ``row_keys``: one integer per training trace that depends on the input's content
    only (:func:`pytest_sadl.fingerprint.row_keys`); the held-out sample is the traces
    with the smallest keys, so the same inputs in any order give the same bounds.
    ``held_out``: returns the held-out scores stored with the profile (computing and
    storing them the first time), instead of :func:`held_out_sa` in every session.

    The per-input surprise scores are set up when first needed, each by its criterion's
    ``fit`` (:data:`~pytest_sadl.criteria.registry.SCORES`), on ``profile`` (made by
    :meth:`of`); one that cannot be set up is in ``unavailable`` with its one-line reason,
    and the others are still computed. A view made by hand (no ``profile``) may give a
    scorer as the field of its key (``lsa``, ``dsa``, ``mdsa``; ``None``: it has none).
    """

    lsa: Any  # LSA | None (None: set up from ``profile``)
    dsa: Any
    ranges: NeuronRanges
    sa_traces: np.ndarray
    sa_pred: np.ndarray | None
    var_threshold: float
    row_keys: np.ndarray | None = None
    held_out: Callable[..., dict[str, np.ndarray]] | None = None
    mdsa: Any = None
    near_singular: str = "drop"
    profile: Any = None
    #: the metrics of the run (``--sadl-metrics``); ``None``: the default ones
    metrics: tuple[str, ...] | None = None
    options: Any = None  # the run's SadlOptions, for a criterion's own parameters
    sa_layers: list[str] = field(default_factory=list)
    #: score key -> why it cannot be set up on this profile
    unavailable: dict[str, str] = field(default_factory=dict)
    _fitted: dict[str, Any] = field(default_factory=dict, repr=False)
    var_rule: str = "class"
    _pca: Any = field(default=None, repr=False)  # (Projection, projected SA traces)

    @classmethod
    def of(cls, profile: Any, metrics: Sequence[str] | None = None, options: Any = None) -> ProfileView:
        view = cls(
            lsa=None,
            dsa=None,
            ranges=profile.ranges,
            sa_traces=profile.sa_traces,
            sa_pred=profile.sa_pred if profile.classifier else None,
            var_threshold=profile.options.var_threshold,
            row_keys=getattr(profile, "row_keys", None),
            near_singular=profile.options.lsa_near_singular,
            profile=profile,
            metrics=None if metrics is None else tuple(metrics),
            options=options,
            sa_layers=list(getattr(profile, "sa_layers", [])),
            var_rule=profile.options.var_rule,
        )
        view.held_out = lambda keys=None, errors=None: stored_held_out_sa(profile, lambda: view, keys, errors)
        return view

    @property
    def classifier(self) -> bool:
        return self.sa_pred is not None

    def chosen(self) -> tuple[str, ...]:
        """The metrics of the run, in report order."""
        return choose(self.metrics)

    def score_keys(self) -> list[str]:
        """The per-input scores the run's metrics need, in report order (``"lsa"``...)."""
        return score_keys(self.chosen())

    def scorer(self, key: str) -> Any:
        """The set-up scorer of ``key``; ``None`` when it does not apply (DSA of a
        regression model) or cannot be set up (then ``unavailable[key]`` says why)."""
        if key not in self._fitted:
            self._fitted[key] = self._fit(key)
        return self._fitted[key]

    def _fit(self, key: str) -> Any:
        given = getattr(self, key, None) if key in _GIVEN else None
        if given is not None or (self.profile is None and key in _GIVEN):
            return given
        training = Training(
            self.sa_traces,
            self.sa_pred,
            self.var_threshold,
            self.near_singular,
            self.options,
            self.profile,
            var_rule=self.var_rule,
        )
        criterion = SCORES[key]
        assert criterion.fit is not None  # SCORES holds only criteria with a fit
        try:
            if key in PROJECTED and self.components is not None:
                projection, projected = self.projection()
                # set up afresh on the projected traces (the profile's own LSA is of every neuron)
                scorer = criterion.fit(replace(training, traces=projected, profile=None))
                return None if scorer is None else Projected(scorer, projection)
            return criterion.fit(training)
        except ValueError as exc:  # this measure only: the others are still computed
            where = f" on SA layers {self.sa_layers}" if self.sa_layers else ""
            self.unavailable[key] = f"{SA_LABELS[key]} cannot be set up{where}: {' '.join(str(exc).split())}"
            return None

    @property
    def components(self) -> int | None:
        """``--sadl-sa-components``: LSA, MDSA, MLSA and MMDSA on this many principal axes."""
        value = getattr(self.options, "sa_components", None)
        return None if value is None else int(value)

    def projection(self) -> tuple[Projection, np.ndarray]:
        """The principal axes of the SA traces (fitted once per profile and kept in it, as
        ``pca<N>-mean``/``-axes``/``-variances``) and the projected training traces.
        Raises ``ValueError`` (the projected measures' reason) when N is more than the neurons."""
        if self._pca is None:
            k = self.components
            assert k is not None
            d = int(self.sa_traces.shape[1])
            if k > d:
                raise ValueError(
                    f"--sadl-sa-components={k} is more than the SA layers' {d} neurons; "
                    f"choose at most {d}, or leave it out to measure every neuron"
                )
            fitted: list[dict[str, np.ndarray]] = []

            def part(name: str) -> np.ndarray:
                if not fitted:
                    fitted.append(Projection.fit(self.sa_traces, k).to_arrays())
                return fitted[0][name]

            names = ("mean", "axes", "variances")
            if self.profile is not None:
                arrays = {n: self.profile.cached_array(f"pca{k}-{n}", lambda n=n: part(n)) for n in names}
            else:
                arrays = {n: part(n) for n in names}
            projection = Projection.from_arrays(arrays)
            self._pca = (projection, projection(self.sa_traces))
        pca: tuple[Projection, np.ndarray] = self._pca
        return pca

    def scorers(self) -> dict[str, Any]:
        """The surprise measures the run's metrics need that this profile has, by results key."""
        out = {key: self.scorer(key) for key in self.score_keys()}
        return {k: v for k, v in out.items() if v is not None}

    def score(self, sa: np.ndarray, pred: np.ndarray) -> dict[str, np.ndarray]:
        """Every surprise measure of traces ``sa`` (``pred``: predicted classes; ignored for a
        regression model), by results key; DSA only for a classifier."""
        classes = pred if self.classifier else None
        out = {}
        for key, scorer in self.scorers().items():
            out[key] = scorer(sa, classes) if len(sa) else np.zeros(0)
        return out


#: the scorers a view made by hand may give as fields
_GIVEN = frozenset({"lsa", "dsa", "mdsa"})

#: the scores ``--sadl-sa-components`` projects: those of a density or a covariance over
#: the neurons (DSA is a distance; it measures every neuron)
PROJECTED = frozenset({"lsa", "mdsa", "mlsa", "mmdsa"})


def score_keys(metrics: Sequence[str]) -> list[str]:
    """The per-input scores ``metrics`` need, in report order."""
    keys = (BY_NAME[m].sa for m in metrics if BY_NAME[m].sa in SCORES)
    return [k for k in dict.fromkeys(keys) if k is not None]


def _pass_on(caught: list[warnings.WarningMessage], notes: list[str]) -> None:
    """pytest-sadl's own warnings become lines of the reports; others are warned again."""
    from pytest_sadl.errors import SadlWarning

    for w in caught:
        if issubclass(w.category, SadlWarning):
            notes.append(str(w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def held_out_sample(n: int, row_keys: np.ndarray | None = None, seed: int = 0) -> np.ndarray:
    """Boolean mask of the ``max(1, min(HELD_OUT, n // 10))`` held-out training traces:
    those with the smallest ``row_keys`` (content-defined, order-free), or a seeded
    random sample when there are no keys."""
    k = max(1, min(HELD_OUT, n // 10))
    probe = np.zeros(n, dtype=bool)
    if row_keys is not None:
        probe[np.argsort(np.asarray(row_keys), kind="stable")[:k]] = True
    else:
        probe[np.random.default_rng(seed).choice(n, size=k, replace=False)] = True
    return probe


def held_out_scores(view: ProfileView, seed: int = 0) -> tuple[np.ndarray, np.ndarray | None]:
    """LSA and DSA of up to ``HELD_OUT`` training traces scored against the others.

    Raises ``ValueError`` when the remaining traces cannot make an LSA (a tiny class)."""
    errors: dict[str, str] = {}
    held = held_out_sa(view, seed, ["lsa", "dsa"], errors)
    if "lsa" not in held:
        raise ValueError(errors.get("lsa", "LSA is not available"))
    return held["lsa"], held.get("dsa")


def held_out_keys(view: ProfileView) -> list[str]:
    """The scores whose default bounds the held-out traces give: those of the run's
    metrics that are set up on the whole training set."""
    return [k for k in view.score_keys() if view.scorer(k) is not None]


def held_out_sa(
    view: ProfileView, seed: int = 0, keys: Sequence[str] | None = None, errors: dict[str, str] | None = None
) -> dict[str, np.ndarray]:
    """Each surprise measure of up to ``HELD_OUT`` training traces scored against the others
    (the default SC bounds' data), by results key; ``keys``: which (default
    :func:`held_out_keys`). A measure that cannot be set up on the rest (a tiny class) is
    left out, its reason in ``errors``."""
    keys = held_out_keys(view) if keys is None else list(keys)
    x, pred = view.sa_traces, view.sa_pred
    probe = held_out_sample(len(x), view.row_keys, seed)
    out = {}
    with warnings.catch_warnings(), tempfile.TemporaryDirectory(prefix="sadl-heldout-") as scratch:
        warnings.simplefilter("ignore")
        rest = _rows(x, ~probe, Path(scratch))
        training = Training(
            rest,
            None if pred is None else pred[~probe],
            view.var_threshold,
            view.near_singular,
            view.options,
            var_rule=view.var_rule,
        )
        for key in keys:
            fit = SCORES[key].fit
            assert fit is not None
            try:
                if key in PROJECTED and view.components is not None:
                    # the axes of the whole training set (the run's), the KDE of the rest
                    projection, projected = view.projection()
                    scorer = fit(replace(training, traces=projected[~probe]))
                    scorer = None if scorer is None else Projected(scorer, projection)
                else:
                    scorer = fit(training)
                if scorer is not None:
                    out[key] = scorer(x[probe], None if pred is None else pred[probe])
            except ValueError as exc:
                if errors is not None:
                    errors[key] = str(exc)
            scorer = None  # one set-up in memory at a time
        del rest, training
    return out


#: A memory-mapped training set larger than this is not copied into memory for the held-out
#: set-ups but streamed into a scratch memmap (deleted after them).
HELD_OUT_COPY_MAX = 256 * 2**20


def _rows(x: np.ndarray, keep: np.ndarray, scratch: Path) -> np.ndarray:
    """``x[keep]``: a copy in memory, unless ``x`` is a memmap of more than
    ``HELD_OUT_COPY_MAX`` bytes: then the rows are copied a chunk at a time into a
    memory-mapped scratch file, so the held-out bounds of a 1.28M x 2,048 set allocate no
    10 GiB copy (the criteria read a memmap in chunks)."""
    if not isinstance(x, np.memmap) or x.nbytes <= HELD_OUT_COPY_MAX:
        kept: np.ndarray = x[keep]
        return kept
    rows = np.flatnonzero(keep)
    path = scratch / "rest.npy"
    out = np.lib.format.open_memmap(path, "w+", x.dtype, (len(rows), *x.shape[1:]))
    step = max(1, 16 * 2**20 // max(1, x[0].nbytes))
    for s in range(0, len(rows), step):
        out[s : s + step] = x[rows[s : s + step]]
    out.flush()
    del out
    mapped: np.ndarray = np.load(path, mmap_mode="r")
    return mapped


def stored_held_out_sa(
    profile: Any,
    view: Callable[[], ProfileView],
    keys: Sequence[str] | None = None,
    errors: dict[str, str] | None = None,
) -> dict[str, np.ndarray]:
    """:func:`held_out_sa` kept in the profile (``profile.cached_array``): computed once
    per profile (on ``view()``, made only then), loaded by every later session. ``keys``:
    which scores (default :func:`held_out_keys`); one that cannot be set up on the rest
    is left out, its reason in ``errors``."""
    computed: list[dict[str, np.ndarray]] = []
    failed: dict[str, str] = {} if errors is None else errors
    wanted = held_out_keys(view()) if keys is None else list(keys)

    def scores(key: str) -> np.ndarray:
        if not computed:
            # the first one not stored: this and every later one (a new profile has none yet)
            computed.append(held_out_sa(view(), keys=wanted[wanted.index(key) :], errors=failed))
        if key not in computed[0]:
            raise ValueError(failed.get(key, f"{key} has no held-out scores"))
        return computed[0][key]

    out = {}
    for key in wanted:
        try:
            out[key] = profile.cached_array(_held_out_name(key, view().options), lambda key=key: scores(key))
        except ValueError as exc:
            failed.setdefault(key, str(exc))
    return out


def _held_out_name(key: str, options: Any = None) -> str:
    """The stored name of a score's held-out values: with the options it depends on
    (``Criterion.params``: ``heldout-mlsa-k3-1000``)."""
    params = SCORES[key].params if key in SCORES else None
    tag = f"-{params(options)}" if params is not None else ""
    components = getattr(options, "sa_components", None)
    if key in PROJECTED and components is not None:
        tag += f"-pca{int(components)}"
    return f"heldout-{key}{tag}-{HELD_OUT}"


def _held_out(view: ProfileView, keys: Sequence[str], errors: dict[str, str]) -> dict[str, np.ndarray]:
    """The held-out scores of ``keys``: stored with the profile when the view has one, else computed."""
    if view.held_out is not None:
        return view.held_out(keys, errors)
    return held_out_sa(view, keys=keys, errors=errors)


def default_sc_bounds(view: ProfileView, options: SadlOptions | None = None) -> dict[str, tuple[float, float, int]]:
    """Each surprise coverage's (lower, upper, buckets): configured where ``options`` sets
    them, else from the held-out training traces (:func:`default_bounds`), as a run uses."""
    held = _held_out(view, held_out_keys(view), {})
    out = {}
    for metric in view.chosen():
        key = SURPRISE.get(metric)
        if key not in held:
            continue
        cfg = getattr(options, metric, None)
        lower, upper = default_bounds(held[key])
        if cfg is not None:
            lower = cfg.lower if cfg.lower is not None else lower
            upper = cfg.upper if cfg.upper is not None else upper
        out[metric] = (float(lower), float(upper), int(cfg.buckets) if cfg is not None else 1000)
    return out


def default_bounds(scores: np.ndarray) -> tuple[float, float]:
    """The default SC bounds (rule version :data:`BOUNDS_RULE_VERSION`) from held-out SA:
    ``lower = min(0, m)`` and ``upper = lower + 2 (q - lower)``, ``m`` the smallest finite
    score and ``q`` the :data:`BOUNDS_QUANTILE` quantile (linear interpolation, NumPy's
    default). Why the quantile and not the maximum (version 1): one atypical training
    input in the held-out sample (an LSA of ~68,000 on the example project, where 99% are
    at most 424) made the upper bound ~137,000, every input fell into the lowest buckets
    and LSC stayed near 1% for every group; the 99th percentile ignores the top 1% (up to
    9 of the 1,000 held-out traces: one more reaches it), and doubling it keeps the room above the ordinary
    training data for inputs more surprising than it. Held-out traces above the bound
    count for no bucket, as any input there. Measured in ``benchmarks/sc_bounds.py``."""
    finite = scores[np.isfinite(scores)]
    if finite.size == 0:
        return 0.0, 1.0
    lower = min(0.0, float(finite.min()))
    upper = lower + 2.0 * (float(np.quantile(finite, BOUNDS_QUANTILE)) - lower)
    if upper <= lower:
        upper = lower + 1.0
    return lower, upper


#: A default upper bound this many times farther above the lower bound than the rule
#: applied to the 90th percentile would put it is dominated by a tail of outliers (more
#: than 1% of the held-out traces far above the rest): said in a note.
OUTLIER_SPREAD = 10.0
OUTLIER_QUANTILE = 0.9
#: Fewer held-out scores than this cannot tell outliers from the tail.
OUTLIER_MIN_SCORES = 100


def outlier_bound_note(metric: str, scores: np.ndarray, lower: float | None = None) -> str | None:
    """A note when the default upper bound of ``metric`` (``"lsc"``...) still comes from
    held-out training traces far above the rest, so that nearly every input would fall
    into the lowest buckets and the coverage barely move; ``None`` otherwise.

    The rule of :func:`default_bounds` ignores the top 1% of the held-out SA; more
    atypical training inputs than that (a tail of over 1% far above the rest) still set
    it. The note names the option to pin and a bound by the same rule from the 90th
    percentile. ``lower``: the lower bound in use when it is configured (the note then
    suggests only the upper one). It needs :data:`OUTLIER_MIN_SCORES` held-out scores (a
    training set of about ten times as many inputs)."""
    finite = scores[np.isfinite(scores)]
    if finite.size < OUTLIER_MIN_SCORES:
        return None
    default_lower, upper = default_bounds(finite)
    low = default_lower if lower is None else float(lower)
    q = float(np.quantile(finite, OUTLIER_QUANTILE))
    if q <= low or (upper - low) <= OUTLIER_SPREAD * 2.0 * (q - low):
        return None
    suggested = low + 2.0 * (q - low)
    hint = f"sadl_{metric}_upper = {suggested:.4g}"
    if lower is None:  # rounded down, so that no held-out score falls below it
        hint += f" (and sadl_{metric}_lower = {math.floor(low * 100) / 100:g})"
    return (
        f"default {LABELS[metric]} upper bound {upper:,.4g} comes from held-out training traces far above "
        f"the rest (90% are at most {q:,.4g}): most inputs will fall into its lowest buckets and {LABELS[metric]} "
        f"will barely move; pin the bounds, e.g. {hint}"
    )


def _joined_extrema(batches: list[Any], i: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-input min and max of coverage layer ``i``'s whole output, when every batch has them."""
    parts = [getattr(b, "extrema", None) for b in batches]
    if any(p is None or p[i] is None for p in parts):
        return None
    return np.concatenate([p[i][0] for p in parts]), np.concatenate([p[i][1] for p in parts])  # type: ignore[index]


def _stat(values: np.ndarray, fn: Any) -> float | None:
    finite = values[np.isfinite(values)]
    return float(fn(finite)) if finite.size else None


def _image(thumb: np.ndarray) -> dict[str, Any]:
    h, w, c = thumb.shape
    return {"height": int(h), "width": int(w), "channels": int(c), "pixels": thumb.reshape(-1).astype(int).tolist()}


class _Criteria:
    """The run's criteria (``names``, in report order), made for this run and updated
    together. ``None`` where the profile cannot give what one needs (DSC of a regression
    model, a score that cannot be set up); a criterion whose ``make`` raises
    ``ValueError`` is not available, its reason in ``unavailable``."""

    def __init__(self, setup: Setup, names: Sequence[str]):
        self.setup = setup
        self.names = tuple(names)
        self.unavailable: dict[str, str] = {}
        self.made: dict[str, Any] = {}
        for name in self.names:
            try:
                self.made[name] = BY_NAME[name].make(setup)
            except ValueError as exc:
                self.made[name] = None
                self.unavailable[name] = f"{LABELS[name]} cannot be set up: {' '.join(str(exc).split())}"

    def fresh(self) -> _Criteria:
        return _Criteria(self.setup, self.names)

    def update(self, batch: Batch) -> dict[str, int]:
        return {name: cov.update(batch) for name, cov in self.made.items() if cov is not None}

    def values(self) -> dict[str, float | None]:
        return {name: None if cov is None else cov.value for name, cov in self.made.items()}


def check_thresholds(metrics: dict[str, Metric], thresholds: dict[str, float], n_inputs: int) -> list[Failure]:
    """One failure per metric below its threshold, judged on the same two-decimal
    percentage the message prints; a threshold on a metric that is not available fails
    with the reason."""
    failures = []
    for name, threshold in thresholds.items():
        label = LABELS[name]
        flag = f"--sadl-fail-under={name}:{threshold:g}"
        metric = metrics.get(name)
        if n_inputs == 0:
            message = (
                f"{label}: no inputs were recorded, so {flag} cannot be met "
                "(mark the tests that feed the model with @pytest.mark.sadl)"
            )
        elif metric is not None and metric.reason:
            message = f"{label} is not available, so {flag} cannot be met: {metric.reason}"
        elif metric is None or not metric.applicable:
            message = f"{label} is not applicable to this model (DSA needs a classifier); remove {name} from --sadl-fail-under"
        else:
            # a coverage is judged in percent; a count criterion (TKNP, NLC, CC) by its number
            value = None if metric.value is None else round(metric.value, 2) if name in COUNT else percent(metric.value)
            unit = "" if name in COUNT else "%"
            if value is not None and value < threshold:
                failures.append(
                    Failure(
                        name, value, threshold, f"{label} {value:.2f}{unit} is below {flag} ({threshold:.2f}{unit})"
                    )
                )
            continue
        failures.append(Failure(name, None, threshold, message))
    return failures


def ordered(records: Sequence[TestRecord], groups: Sequence[str] = ()) -> tuple[list[TestRecord], list[str]]:
    """The records by node id, and the group names in their defined order: those of
    ``groups`` (``sadl_groups``) that have records, in that order, then the others by the
    node id of their first test."""
    by_id = sorted(records, key=lambda r: r.nodeid)
    present = list(dict.fromkeys(rec.group for rec in by_id))
    first = [g for g in dict.fromkeys(groups) if g in present]
    return by_id, first + [g for g in present if g not in first]


@dataclass
class ScBounds:
    """The surprise coverages' bounds of a run: ``specs`` (lower, upper, buckets) and the
    rule each came from, by metric name (only those whose score is set up), and the
    notes for the reports (a held-out scoring that failed, an outlier bound)."""

    specs: dict[str, tuple[float, float, int]] = field(default_factory=dict)
    rules: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, view: ProfileView, options: SadlOptions, metrics: Sequence[str]) -> ScBounds:
        """Configured bounds where ``options`` sets them; the others from the held-out
        training traces, scored only for the metrics that need them."""
        out = cls()
        chosen = {m: SURPRISE[m] for m in metrics if m in SURPRISE and view.scorer(SURPRISE[m]) is not None}
        configs = {m: _sc_options(options, m) for m in chosen}
        needed = [key for m, key in chosen.items() if configs[m].lower is None or configs[m].upper is None]
        errors: dict[str, str] = {}
        held: dict[str, np.ndarray] = {}
        if needed:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                held = _held_out(view, list(dict.fromkeys(needed)), errors)
        for metric, key in chosen.items():
            cfg = configs[metric]
            if key in errors:  # the training set minus the held-out traces is too small
                out.notes.append(
                    f"default {LABELS[metric]} bounds: held-out scoring failed ({errors[key]}); "
                    "using (0, 1]: configure the bounds"
                )
                errors.pop(key)
            out.specs[metric], out.rules[metric] = _bounds(cfg, held.get(key))
            note = outlier_bound_note(metric, held[key], cfg.lower) if key in held and cfg.upper is None else None
            if note:
                out.notes.append(note)
        return out


def _bounds(cfg: Any, held: np.ndarray | None) -> tuple[tuple[float, float, int], str]:
    """One surprise coverage's bounds: the configured ones, the others by the default rule."""
    lo_d, up_d = default_bounds(held) if held is not None else (0.0, 1.0)
    lower = cfg.lower if cfg.lower is not None else lo_d
    upper = cfg.upper if cfg.upper is not None else up_d
    if cfg.lower is not None and cfg.upper is None and upper <= lower:
        upper = lower + abs(lower) + 1.0
    if cfg.upper is not None and cfg.lower is None and lower >= upper:
        lower = min(0.0, upper - 1.0)
    rule = "configured" if cfg.lower is not None and cfg.upper is not None else BOUNDS_RULE
    return (float(lower), float(upper), int(cfg.buckets)), rule


@dataclass
class Joined:
    """Every recorded input of the run's records, joined in their defined order: SA traces,
    predicted classes, coverage-layer traces and extrema, the owning test's index, and
    (where every batch has them) digests, outputs and thumbnails."""

    sa: np.ndarray
    pred: np.ndarray
    layers: list[np.ndarray]
    extrema: list[Any]
    owner: np.ndarray
    digests: np.ndarray | None = None
    outputs: np.ndarray | None = None
    thumbs: list[Any] = field(default_factory=list)
    texts: list[str | None] = field(default_factory=list)  # a snippet of each text input, else None

    @classmethod
    def of(cls, records: Sequence[TestRecord], view: ProfileView) -> Joined:
        batches = [(t, b) for t, rec in enumerate(records) for b in rec.batches]
        sizes = view.ranges.sizes
        if not batches:
            return cls(
                sa=np.zeros((0, view.sa_traces.shape[1])),
                pred=np.zeros(0, dtype=np.int64),
                layers=[np.zeros((0, s)) for s in sizes],
                extrema=[None] * len(sizes),
                owner=np.zeros(0, dtype=np.int64),
            )
        only = [b for _, b in batches]
        thumbs: list[Any] = []
        texts: list[str | None] = []
        for b in only:
            thumbs.extend([None] * len(b) if b.thumbs is None else list(b.thumbs))
            texts.extend([None] * len(b) if b.texts is None else [str(t) for t in b.texts])
        return cls(
            sa=np.concatenate([b.sa for b in only]).astype(np.float64),
            pred=np.concatenate([b.pred for b in only]),
            layers=[np.concatenate([b.coverage[i] for b in only]) for i in range(len(sizes))],
            extrema=[_joined_extrema(only, i) for i in range(len(sizes))],
            owner=np.concatenate([np.full(len(b), t) for t, b in batches]),
            digests=_joined(only, "digests"),
            outputs=_joined(only, "output"),
            thumbs=thumbs,
            texts=texts,
        )

    def __len__(self) -> int:
        return len(self.owner)

    def part(self, rows: np.ndarray, scores: dict[str, np.ndarray]) -> Batch:
        """The criteria's batch of the inputs at ``rows``."""
        return Batch(
            {k: v[rows] for k, v in scores.items()},
            [a[rows] for a in self.layers],
            [None if e is None else (e[0][rows], e[1][rows]) for e in self.extrema],
        )


def _test_rows(
    records: Sequence[TestRecord], joined: Joined, scores: dict[str, np.ndarray], total: _Criteria, keys: Sequence[str]
) -> list[dict[str, Any]]:
    """Per test, by node id: its inputs' surprise and what each newly covered (``total``
    is updated test by test)."""
    rows_out = []
    for t, rec in enumerate(records):
        rows = np.flatnonzero(joined.owner == t)
        new = total.update(joined.part(rows, scores))
        row: dict[str, Any] = {
            "nodeid": rec.nodeid,
            "group": rec.group,
            "outcome": rec.outcome,
            "inputs": int(rows.size),
        }
        for key in keys:
            values = scores[key][rows] if key in scores else None
            row[f"{key}_mean"] = None if values is None else _stat(values, np.mean)
            row[f"{key}_max"] = None if values is None else _stat(values, np.max)
        row["new"] = {k: int(v) for k, v in new.items()}
        rows_out.append(row)
    return rows_out


def _group_rows(
    records: Sequence[TestRecord],
    group_names: Sequence[str],
    joined: Joined,
    scores: dict[str, np.ndarray],
    total: _Criteria,
) -> list[dict[str, Any]]:
    """Per group: alone, and cumulatively in the defined order (Table VI)."""
    cumulative = total.fresh()
    out = []
    for name in group_names:
        members = [t for t, rec in enumerate(records) if rec.group == name]
        rows = np.flatnonzero(np.isin(joined.owner, members))
        alone = total.fresh()
        alone.update(joined.part(rows, scores))
        cumulative.update(joined.part(rows, scores))
        out.append(
            {
                "name": name,
                "tests": len(members),
                "inputs": int(rows.size),
                "metrics": alone.values(),
                "cumulative": cumulative.values(),
            }
        )
    return out


def _metric_rows(total: _Criteria, view: ProfileView, options: SadlOptions) -> dict[str, Metric]:
    """Each chosen metric's value; one the profile cannot give is not applicable (DSC of a
    regression model) or, with its reason, not available."""
    metrics: dict[str, Metric] = {}
    for name in total.names:
        made = total.made[name]
        if made is not None:
            metrics[name] = made.metric()
            continue
        criterion = BY_NAME[name]
        reason = total.unavailable.get(name) or (view.unavailable.get(criterion.sa) if criterion.sa else None)
        buckets = _sc_options(options, name).buckets if name in SURPRISE else 0
        metrics[name] = Metric(None, 0, buckets, applicable=False, reason=reason)
    return metrics


def _layer_rows(view: ProfileView, total: _Criteria) -> list[dict[str, Any]]:
    """Per coverage layer: its neurons and each chosen neuron coverage on it."""
    per_layer = {
        name: total.made[name].per_layer()
        for name in total.names
        if name in NEURON and hasattr(total.made[name], "per_layer")
    }
    names = list(view.ranges.names) or [f"layer_{i}" for i in range(len(view.ranges.sizes))]
    return [
        {"name": names[i], "neurons": int(size), **{k: per_layer[k][i] for k in per_layer}}
        for i, size in enumerate(view.ranges.sizes)
    ]


def _top_inputs(
    joined: Joined, scores: dict[str, np.ndarray], classifier: bool, keys: Sequence[str]
) -> list[dict[str, Any]]:
    """Most surprising inputs by each score, with thumbnails where the inputs are images:
    each distinct input once (by its digest), with every test that fed it."""
    same = _same_input(joined.digests, len(joined))
    top = []
    for by, values in scores.items():
        if not len(values):
            continue
        finite = np.flatnonzero(np.isfinite(values))
        order = finite[np.argsort(-values[finite], kind="stable")]
        seen: set[int] = set()
        for i in order:
            if len(seen) == TOP_INPUTS:
                break
            if int(same[i]) in seen:
                continue
            seen.add(int(same[i]))
            copies = np.flatnonzero(same == same[i])
            thumb = joined.thumbs[i]
            top.append(
                {
                    "by": by,
                    "rank": len(seen),
                    "input": int(i),
                    "test": int(joined.owner[i]),
                    "tests": sorted({int(t) for t in joined.owner[copies]}),
                    "copies": int(copies.size),
                    "pred": int(joined.pred[i]) if classifier else None,
                    **{key: (float(scores[key][i]) if key in scores else None) for key in keys},
                    "image": None if thumb is None else _image(thumb),
                    **({"text": joined.texts[i]} if joined.texts[i] is not None else {}),
                }
            )
    return top


def _config(
    model_info: dict[str, Any], options: SadlOptions, total: _Criteria, bounds: ScBounds, view: ProfileView
) -> dict[str, Any]:
    """The configuration the numbers came from: layers, thresholds, each SC's bounds."""
    config: dict[str, Any] = {
        "sa_layers": model_info.get("sa_layers", []),
        "coverage_layers": model_info.get("coverage_layers", []),
        "nc_threshold": options.nc_threshold,
        "kmnc_k": options.kmnc_k,
        "var_threshold": options.var_threshold,
        "lsa_near_singular": options.lsa_near_singular,
        "var_rule": options.var_rule,
    }
    if options.sa_components is not None:  # only when set: unprojected results keep their form
        config["sa_components"] = options.sa_components
    for name in total.names:  # an opt-in criterion's own parameters, when the run computed it
        for key in BY_NAME[name].option_names:
            config[key] = getattr(options, key)
    for metric in total.names:
        if metric not in SURPRISE:
            continue
        sc = total.made[metric]
        if sc is not None:
            config[metric] = {**sc.bounds(), "rule": bounds.rules[metric]}
            continue
        reason = view.unavailable.get(SURPRISE[metric])
        config[metric] = {
            "lower": None,
            "upper": None,
            "buckets": _sc_options(options, metric).buckets,
            "rule": f"not available: {reason}" if reason else "not applicable (regression model)",
        }
    return config


def _inputs_and_mistakes(
    records: Sequence[TestRecord],
    joined: Joined,
    scores: dict[str, np.ndarray],
    classifier: bool,
    keys: Sequence[str],
    messages: list[str],
) -> tuple[dict[str, list[Any]], dict[str, Any] | None]:
    """Per input: its test, predicted class, scores and label; and, when tests gave
    labels, whether surprise predicts the model's mistakes."""
    n = len(joined)
    inputs: dict[str, list[Any]] = {
        "test": joined.owner.astype(int).tolist(),
        "pred": joined.pred.astype(int).tolist() if classifier else [None] * n,
    }
    for key in keys:
        inputs[key] = scores[key].tolist() if key in scores else [None] * n
    labels, label_notes = _labels(records, joined.digests, n)
    messages.extend(label_notes)
    if labels is None:
        return inputs, None
    inputs["label"] = [
        None if v is None else ((int(v[0]) if classifier else v[0]) if len(v) == 1 else list(v)) for v in labels
    ]
    found = analyse(
        scores,
        labels,
        classifier=classifier,
        pred=joined.pred if classifier else None,
        output=joined.outputs if classifier else joined.pred,
        groups=[records[t].group for t in joined.owner],
    )
    if found is None:
        return inputs, None
    overall, per_group = found
    mistakes = {
        "overall": overall.to_dict(),
        "groups": [g.to_dict() for g in per_group],
        "labels": {**SA_LABELS, **SCORE_LABELS},  # every score the run may have, MLSA and MMDSA too
        "baselines": list(BASELINES),
    }
    return inputs, mistakes


def compute(
    view: ProfileView,
    records: Sequence[TestRecord],
    options: SadlOptions,
    model_info: dict[str, Any],
    warnings_seen: Sequence[str] = (),
    phase: Callable[[str], None] | None = None,
) -> Results:
    """The results of a session: overall, per group (alone and cumulatively, Table VI),
    per test, per input, per layer; tests and groups in the order :func:`ordered` defines.
    Only the metrics of ``options.metrics`` (``--sadl-metrics``) are computed; a surprise
    measure that cannot be set up is reported as not available, with its reason.
    ``phase`` is told what is being done as each step starts (the plugin shows it when
    the end of a session takes more than a moment).

    A stale record (its test ended on a model that had changed since the profile's was
    bound: ``fit``, ``set_weights``) counts in no metric, group or test row: it is listed
    in ``Results.stale`` with its inputs, as if those inputs had never been fed."""
    stale = [
        {"nodeid": r.nodeid, "group": r.group, "outcome": r.outcome, "inputs": r.n_inputs}
        for r in ordered([r for r in records if r.stale])[0]
    ]
    records, group_names = ordered([r for r in records if not r.stale], options.groups)
    metrics_chosen = choose(getattr(options, "metrics", None))
    view.metrics, view.options = metrics_chosen, view.options if view.options is not None else options
    keys = view.score_keys()
    messages: list[str] = list(warnings_seen)
    tell = phase if phase is not None else (lambda _what: None)
    n_train = len(view.sa_traces)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for key in keys:
            tell(f"setting {SA_LABELS[key]} up on {n_train} training traces")
            view.scorer(key)  # set up first: what it says comes before the bounds' notes
    _pass_on(caught, messages)
    tell("the SC bounds (held-out training traces, once per profile)")
    bounds = ScBounds.of(view, options, metrics_chosen)
    messages.extend(bounds.notes)
    total = _Criteria(Setup(view.ranges, options, bounds=bounds.specs), metrics_chosen)
    joined = Joined.of(records, view)
    tell(f"scoring {len(joined)} recorded inputs ({', '.join(SA_LABELS[k] for k in keys) or 'no surprise'})")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scores = view.score(joined.sa, joined.pred)
    messages.extend(dict.fromkeys(str(w.message) for w in caught))
    tell(f"coverage of {len(records)} tests and {len(group_names)} groups")
    tests_out = _test_rows(records, joined, scores, total, keys)
    unused = [g for g in dict.fromkeys(options.groups) if g not in group_names]
    if unused:
        messages.append(f"sadl_groups names {', '.join(map(repr, unused))}, which no recorded test is in")
    groups_out = _group_rows(records, group_names, joined, scores, total)
    metrics = _metric_rows(total, view, options)
    classifier = view.classifier
    inputs, mistakes = _inputs_and_mistakes(records, joined, scores, classifier, keys, messages)
    model = {k: v for k, v in model_info.items() if k not in ("sa_layers", "coverage_layers")}
    return Results(
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        version=__version__,
        model=ModelInfo.from_dict(model),
        config=RunConfig.from_dict(_config(model_info, options, total, bounds, view)),
        thresholds=dict(options.fail_under),
        metrics=metrics,
        layers=[LayerRow.from_dict(r) for r in _layer_rows(view, total)],
        groups=[GroupRow.from_dict(r) for r in groups_out],
        tests=[TestRow.from_dict(r) for r in tests_out],
        inputs=inputs,
        top_inputs=[TopInput.from_dict(r) for r in _top_inputs(joined, scores, classifier, keys)],
        failures=check_thresholds(metrics, options.fail_under, len(joined)),
        warnings=messages,
        mistakes=None if mistakes is None else Mistakes.from_dict(mistakes),
        stale=[StaleTest.from_dict(r) for r in stale],
        covered=covered_section(_per_test(records, joined, scores), total.fresh, options.groups),
    )


def _per_test(records: Sequence[TestRecord], joined: Joined, scores: dict[str, np.ndarray]) -> Iterator[Any]:
    """(node id, the criteria's batch of its inputs) of each test, for its covered sets."""
    for t, rec in enumerate(records):
        yield rec.nodeid, joined.part(np.flatnonzero(joined.owner == t), scores)


def _sc_options(options: SadlOptions, metric: str) -> Any:
    """The configured bounds of a surprise coverage (unset ones: from the profile)."""
    found = getattr(options, metric, None)
    if found is None:
        from pytest_sadl.config import Bounds

        found = Bounds(None, None, 1000)
    return found


def _joined(batches: list[Any], attr: str) -> np.ndarray | None:
    """One per-input array of every batch's ``attr``, or ``None`` when any batch lacks it."""
    parts: list[Any] = [getattr(b, attr, None) for b in batches]
    if not parts or any(p is None for p in parts):
        return None
    return np.concatenate(parts)


def _same_input(digests: np.ndarray | None, n: int) -> np.ndarray:
    """For each input, the index of the first input with the same digest (itself without digests)."""
    if digests is None:
        return np.arange(n)
    _, first, inverse = np.unique(digests, return_index=True, return_inverse=True)
    return first[inverse.reshape(-1)]


def _labels(records: Sequence[TestRecord], digests: np.ndarray | None, n: int) -> tuple[list[Any] | None, list[str]]:
    """Each recorded input's label from ``sadl_labels(x, y)`` (matched by digest), or ``None``
    per input without one; ``None`` overall when no test gave labels. Plus notes for the reports."""
    given = [(d, v) for rec in records for d, v in rec.labels]
    if not given:
        return None, []
    notes = []
    table: dict[int, np.ndarray] = {}
    conflicts = 0
    for dig, values in given:
        for d, v in zip(dig.tolist(), values, strict=True):
            old = table.setdefault(int(d), v)
            if old is not v and not np.array_equal(old, v):
                conflicts += 1
    if conflicts:
        notes.append(
            f"sadl_labels: {conflicts} input(s) were given different labels by different calls; the first label given is used"
        )
    if digests is None:
        notes.append(
            "sadl_labels: the recorded inputs could not be matched to labels (inputs that are not numeric arrays)"
        )
        return None, notes
    out: list[Any] = [None] * n
    for i, d in enumerate(digests.tolist()):
        v = table.get(int(d))
        if v is not None:
            out[i] = [float(x) for x in v]
    unmatched = len(table) - len({int(d) for d in digests.tolist()} & set(table))
    if unmatched:
        notes.append(
            f"sadl_labels: {unmatched} labelled input(s) never reached the model in a marked test; "
            "labels match recorded inputs by their values, so label the same array that is fed to the model"
        )
    return out, notes
