"""Comparison of a run with a saved baseline run (``--sadl-compare``, ``sadl compare``).

Values and deltas are in **percentage points** (the results file stores fractions).
Every delta is rounded to :data:`DELTA_DIGITS` decimals once, in :func:`compare`, and
both the decision of :func:`compare_failures` and its message use that rounded value,
so a message never says "-2.00 points" for a run that failed a ``-2`` limit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from pytest_sadl.config import parse_metric_numbers
from pytest_sadl.criteria.registry import LABELS as METRIC_LABELS
from pytest_sadl.criteria.registry import METRICS, SURPRISE
from pytest_sadl.report._load import metric_entry, metric_percent
from pytest_sadl.results import JSON, Results, RunConfig, ScBounds

#: Decimals of a delta, in percentage points, for the decision and the message alike.
DELTA_DIGITS = 2

#: Configuration keys whose difference makes two runs hard to compare.
_CONFIG_KEYS = ("sa_layers", "coverage_layers", "nc_threshold", "kmnc_k", "var_threshold", "sa_components")
_BOUND_KEYS = ("lower", "upper", "buckets")


@dataclass(frozen=True)
class MetricDelta:
    """One metric in both runs, in percent; ``delta = current - baseline`` in points."""

    metric: str
    baseline: float | None
    current: float | None
    delta: float | None
    #: "ok" when both runs have the value; otherwise why there is no delta:
    #: "missing in baseline", "missing in current", "missing in both",
    #: "not applicable" (both runs say so), "not applicable in baseline",
    #: "not applicable in current".
    status: str = "ok"

    @property
    def label(self) -> str:
        """The metric's display name, e.g. ``"LSC"``."""
        return METRIC_LABELS.get(self.metric, self.metric.upper())


@dataclass
class Comparison:
    """The change of every metric between a baseline run and the current one."""

    metrics: list[MetricDelta]
    #: Metrics present in one run only (or in neither), with the reason in ``status``.
    missing: list[str] = field(default_factory=list)
    #: Why the comparison may mislead: another model, another profile, another configuration.
    warnings: list[str] = field(default_factory=list)
    baseline_created: str | None = None
    current_created: str | None = None
    baseline_fingerprint: str | None = None
    current_fingerprint: str | None = None

    def get(self, metric: str) -> MetricDelta | None:
        """The :class:`MetricDelta` of ``metric``, or None."""
        for m in self.metrics:
            if m.metric == metric:
                return m
        return None

    def to_dict(self) -> dict[str, JSON]:
        """Plain data, for JSON."""
        data: dict[str, JSON] = asdict(self)
        return data


def _num(x: object) -> str:
    if isinstance(x, float):
        return f"{x:g}"
    return repr(x) if isinstance(x, str) else str(x)


def _short(fp: str | None) -> str:
    return "none" if not fp else (fp[:12] + "…" if len(fp) > 12 else fp)


def _setting(config: RunConfig, key: str) -> object:
    """One of :data:`_CONFIG_KEYS` of a configuration (``None``: the run does not say)."""
    value: object = getattr(config, key)
    return value


def _config_differences(cur: RunConfig, base: RunConfig) -> list[str]:
    diffs: list[str] = []
    for key in _CONFIG_KEYS:
        c, b = _setting(cur, key), _setting(base, key)
        if c != b:
            diffs.append(f"{key} {_num(b)} → {_num(c)}")
    for metric in SURPRISE:
        cb = cur.bounds.get(metric)
        bb = base.bounds.get(metric)
        if cb is not None and bb is not None:  # else a metric one run does not have (an older results file)
            diffs += _bound_differences(metric, cb, bb)
    return diffs


def _bound_differences(metric: str, cur: ScBounds, base: ScBounds) -> list[str]:
    """The settings of ``metric``'s bounds (lower, upper, buckets) that differ, as "was → now"."""
    diffs = []
    for key in _BOUND_KEYS:
        cv, bv = _bound(cur, key), _bound(base, key)
        if cv != bv:
            diffs.append(f"{metric}.{key} {_num(bv)} → {_num(cv)}")
    return diffs


def _bound(bounds: ScBounds, key: str) -> float | int | None:
    value: float | int | None = getattr(bounds, key)
    return value


def _status(current: Results, baseline: Results, m: str) -> str:
    """Whether both runs have the metric, applicable and with a value (``"ok"``), or why not."""
    ce, be = metric_entry(current, m), metric_entry(baseline, m)
    if ce is None or be is None:
        return _missing(ce, be) or "ok"
    return (
        _APPLICABILITY.get((ce.applicable, be.applicable))
        or _missing(metric_percent(current, m), metric_percent(baseline, m))
        or "ok"
    )


#: (applicable in the current run, applicable in the baseline) → the status, when not both.
_APPLICABILITY = {
    (False, False): "not applicable",
    (True, False): "not applicable in baseline",
    (False, True): "not applicable in current",
}


def _missing(current: object, baseline: object) -> str | None:
    """Which run lacks the metric (the baseline first), ``None`` when both have it."""
    if baseline is None:
        return "missing in baseline"
    return "missing in current" if current is None else None


def _delta(current: Results, baseline: Results, m: str) -> MetricDelta:
    """One metric's values in both runs and their change."""
    status = _status(current, baseline, m)
    cv, bv = metric_percent(current, m), metric_percent(baseline, m)
    # Round the values first and take the delta of the rounded values: the message
    # "26.10% → 23.60%, dropped by 2.50 points" then adds up, and decides the same.
    cv = None if cv is None else round(cv, DELTA_DIGITS)
    bv = None if bv is None else round(bv, DELTA_DIGITS)
    delta = None
    if status == "ok" and cv is not None and bv is not None:
        delta = round(cv - bv, DELTA_DIGITS)
    return MetricDelta(m, bv, cv, delta, status)


def _model_warnings(current: Results, baseline: Results) -> list[str]:
    """Warnings when the runs are of other models or other training profiles."""
    warnings: list[str] = []
    cm, bm = current.model, baseline.model
    cfp, bfp = cm.fingerprint, bm.fingerprint
    if cfp != bfp:
        warnings.append(
            f"the runs are of different models (fingerprint {_short(bfp)} in the baseline, "
            f"{_short(cfp)} now): the deltas compare two models, not two test suites"
        )
    cpf, bpf = cm.profile_fingerprint, bm.profile_fingerprint
    if cfp == bfp and cpf != bpf:
        warnings.append(
            f"the runs used different training profiles (profile {_short(bpf)} in the baseline, "
            f"{_short(cpf)} now): surprise is measured against other training traces"
        )
    return warnings


def _metric_names(current: Results, baseline: Results) -> list[str]:
    """The metrics of either run: the registry's in its order, then unknown ones sorted."""
    names = [m for m in METRICS if metric_entry(current, m) is not None or metric_entry(baseline, m) is not None]
    return names + sorted((set(current.metrics) | set(baseline.metrics)) - set(METRICS))


def compare(current: Results, baseline: Results) -> Comparison:
    """Compare two results documents (already validated) metric by metric.

    Returns a :class:`Comparison` with one :class:`MetricDelta` per known metric present
    in either run, the metrics missing from one of them, and warnings when the model
    fingerprint, the training profile or the configuration (layers, thresholds, LSC/DSC
    bounds and buckets) differ: surprise coverage of two runs with other bounds counts
    other buckets, so a delta there says little.
    """
    deltas = [_delta(current, baseline, m) for m in _metric_names(current, baseline)]
    missing = [d.metric for d in deltas if d.status.startswith("missing")]
    warnings = _model_warnings(current, baseline)
    cfp, bfp = current.model.fingerprint, baseline.model.fingerprint
    diffs = _config_differences(current.config, baseline.config)
    if diffs:
        warnings.append("the configuration differs from the baseline's: " + "; ".join(diffs))
    return Comparison(
        metrics=deltas,
        missing=missing,
        warnings=warnings,
        baseline_created=baseline.created,
        current_created=current.created,
        baseline_fingerprint=bfp,
        current_fingerprint=cfp,
    )


def parse_compare_fail(
    spec: str, option: str = "--sadl-compare-fail", every: Sequence[str] | None = None
) -> dict[str, float]:
    """Parse ``--sadl-compare-fail`` (or ``sadl compare --fail``: pass ``option="--fail"``):
    ``"lsc:-2,dsc:-1"`` → ``{"lsc": -2.0, "dsc": -1.0}``.

    Each limit is the largest drop allowed, in percentage points, written as a negative
    number (or 0: any drop fails): the run fails when the metric falls by *more* than
    that. ``all:-1`` sets every metric (of ``every``: default the metrics a run reports when none are chosen; the plugin and ``sadl compare`` pass the runs' metrics); a later item overrides an earlier one. Raises
    ValueError naming ``option`` and the unknown metric or the bad number; the parser is
    :func:`pytest_sadl.config.parse_metric_numbers`, the one ``--sadl-fail-under`` uses.
    """
    if not isinstance(spec, str):
        raise ValueError(f"{option} must be text like lsc:-2,dsc:-1, got {type(spec).__name__}")
    if every is None:
        return parse_metric_numbers(spec, option, drops=True)
    return parse_metric_numbers(spec, option, drops=True, every=every)


def compare_failures(comparison: Comparison, limits: Mapping[str, float]) -> list[str]:
    """One line per limit of ``limits`` that the comparison breaks; empty when none.

    A metric fails when its rounded delta is below its limit (``-2.50 < -2``; exactly
    ``-2.00`` passes), or when one run has the metric and the other does not (or it
    applies in one run only): the limit cannot be checked, and a gate that cannot be
    checked does not pass silently. A metric that applies in neither run (DSC of a
    regression model) cannot drop and is skipped.
    """
    failures = [_limit_failure(metric, limit, comparison.get(metric)) for metric, limit in limits.items()]
    return [f for f in failures if f is not None]


def _limit_failure(metric: str, limit: float, md: MetricDelta | None) -> str | None:
    """Why ``metric``'s change breaks ``limit`` or cannot be checked; ``None`` when it passes."""
    label = METRIC_LABELS.get(metric, metric.upper())
    spec = f"--sadl-compare-fail={metric}:{limit:g}"
    if md is None:
        return f"{label}: in neither run, so {spec} cannot be checked"
    if md.status == "not applicable":
        return None
    if md.status != "ok" or md.delta is None:
        return f"{label}: {md.status}, so {spec} cannot be checked"
    if md.delta >= limit:
        return None
    return (
        f"{label} dropped by {-md.delta:.{DELTA_DIGITS}f} points "
        f"({md.baseline:.{DELTA_DIGITS}f}% → {md.current:.{DELTA_DIGITS}f}%), "
        f"more than the {-limit:g} allowed by {spec}"
    )
