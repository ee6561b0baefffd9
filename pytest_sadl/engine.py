"""From a training profile and the recorded traces to :class:`~pytest_sadl.results.Results`.

Pure NumPy on top of the criteria; no TensorFlow and no pytest. The order of tests is
their collection order, so a run split over pytest-xdist workers gives the same numbers
(and the same "newly covered by this test" counts) as a serial run.

Default bounds of LSC and DSC (when not configured) come from the training profile only,
never from the inputs measured, so that runs compare: up to 1,000 training traces (those
with the smallest row keys, a sample that depends on the inputs' content, not their
order) are held out, scored against the rest, and with ``m`` and ``M`` the
smallest and largest of their SA values, ``lower = min(0, m)`` and
``upper = lower + 2 (M - lower)``. Held-out training data fills about the lower half of
the buckets; the upper half is room for inputs more surprising than any of it.
"""

from __future__ import annotations

import datetime as _dt
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from . import __version__
from .neurons import (
    KMultisectionCoverage,
    NeuronBoundaryCoverage,
    NeuronCoverage,
    NeuronRanges,
    StrongNeuronActivationCoverage,
)
from .recorder import TestRecord
from .results import LABELS, Failure, Metric, Results, percent
from .surprise import DSA, LSA, SurpriseCoverage

if TYPE_CHECKING:  # the options are plain data; the engine itself imports no pytest
    from .config import SadlOptions

TOP_INPUTS = 12
HELD_OUT = 1000
BOUNDS_RULE = "default: min(0, m) to min(0, m) + 2 (M - min(0, m)), m/M the min/max SA of held-out training traces"


@dataclass
class ProfileView:
    """What the engine needs of a training profile (see :mod:`pytest_sadl.profile`).

    ``row_keys``: one integer per training trace that depends on the input's content
    only (:func:`pytest_sadl.fingerprint.row_keys`); the held-out sample is the traces
    with the smallest keys, so the same inputs in any order give the same bounds.
    ``held_out``: returns the held-out scores stored with the profile (computing and
    storing them the first time), instead of :func:`held_out_scores` in every session.
    """

    lsa: LSA
    dsa: DSA | None
    ranges: NeuronRanges
    sa_traces: np.ndarray
    sa_pred: np.ndarray | None
    var_threshold: float
    row_keys: np.ndarray | None = None
    held_out: Callable[[], tuple[np.ndarray, np.ndarray | None]] | None = None

    @classmethod
    def of(cls, profile: Any) -> "ProfileView":
        view = cls(
            lsa=profile.lsa(),
            dsa=profile.dsa(),
            ranges=profile.ranges,
            sa_traces=profile.sa_traces,
            sa_pred=profile.sa_pred if profile.classifier else None,
            var_threshold=profile.options.var_threshold,
            row_keys=getattr(profile, "row_keys", None),
        )
        view.held_out = lambda: stored_held_out_scores(profile, lambda: view)
        return view


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

    Raises ``ValueError`` when the remaining traces cannot make an LSA/DSA (a tiny class)."""
    x, pred = view.sa_traces, view.sa_pred
    probe = held_out_sample(len(x), view.row_keys, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lsa = LSA(x[~probe], None if pred is None else pred[~probe], var_threshold=view.var_threshold)
        lsa_scores = lsa(x[probe], None if pred is None else pred[probe])
        dsa_scores = None
        if view.dsa is not None and pred is not None:
            dsa_scores = DSA(x[~probe], pred[~probe])(x[probe], pred[probe])
    return lsa_scores, dsa_scores


def stored_held_out_scores(profile: Any, view: Callable[[], ProfileView]) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`held_out_scores` kept in the profile (``profile.cached_array``): computed
    once per profile (on ``view()``, made only then), loaded by every later session."""
    computed: list[tuple[np.ndarray, np.ndarray | None]] = []

    def scores() -> tuple[np.ndarray, np.ndarray | None]:
        if not computed:
            computed.append(held_out_scores(view()))
        return computed[0]

    lsa = profile.cached_array(f"heldout-lsa-{HELD_OUT}", lambda: scores()[0])
    dsa = profile.cached_array(f"heldout-dsa-{HELD_OUT}", lambda: scores()[1]) if profile.classifier else None
    return lsa, dsa


def default_bounds(scores: np.ndarray) -> tuple[float, float]:
    finite = scores[np.isfinite(scores)]
    if finite.size == 0:
        return 0.0, 1.0
    lower = min(0.0, float(finite.min()))
    upper = lower + 2.0 * (float(finite.max()) - lower)
    if upper <= lower:
        upper = lower + 1.0
    return lower, upper


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
    """The six cumulative criteria, updated together."""

    def __init__(self, lsc: tuple[float, float, int], dsc: tuple[float, float, int] | None, ranges: NeuronRanges, options: "SadlOptions"):
        self._spec = (lsc, dsc, ranges, options)
        self.sc = {"lsc": SurpriseCoverage(*lsc), "dsc": None if dsc is None else SurpriseCoverage(*dsc)}
        self.neurons = {
            "nc": NeuronCoverage(ranges, options.nc_threshold),
            "kmnc": KMultisectionCoverage(ranges, options.kmnc_k),
            "nbc": NeuronBoundaryCoverage(ranges),
            "snac": StrongNeuronActivationCoverage(ranges),
        }

    def fresh(self) -> "_Criteria":
        return _Criteria(*self._spec)

    def update(self, lsa: np.ndarray, dsa: np.ndarray | None, layers: list[np.ndarray], extrema: list[Any] | None) -> dict[str, int]:
        new = {"lsc": self.sc["lsc"].update(lsa)}  # type: ignore[union-attr]
        if self.sc["dsc"] is not None and dsa is not None:
            new["dsc"] = self.sc["dsc"].update(dsa)
        for name, cov in self.neurons.items():
            new[name] = cov.update(layers, extrema) if name == "nc" else cov.update(layers)
        return new

    def values(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {k: (None if v is None else v.value) for k, v in self.sc.items()}
        out.update({k: v.value for k, v in self.neurons.items()})
        return out


def check_thresholds(metrics: dict[str, Metric], thresholds: dict[str, float], n_inputs: int) -> list[Failure]:
    """One failure per metric below its threshold, judged on the same two-decimal
    percentage the message prints."""
    failures = []
    for name, threshold in thresholds.items():
        label = LABELS[name]
        flag = f"--sadl-fail-under={name}:{threshold:g}"
        metric = metrics.get(name)
        if n_inputs == 0:
            failures.append(Failure(name, None, threshold, f"{label}: no inputs were recorded, so {flag} cannot be met (mark the tests that feed the model with @pytest.mark.sadl)"))
        elif metric is None or not metric.applicable:
            failures.append(Failure(name, None, threshold, f"{label} is not applicable to this model (DSA needs a classifier); remove {name} from --sadl-fail-under"))
        else:
            value = percent(metric.value)
            if value is not None and value < threshold:
                failures.append(Failure(name, value, threshold, f"{label} {value:.2f}% is below {flag} ({threshold:.2f}%)"))
    return failures


def compute(
    view: ProfileView,
    records: Sequence[TestRecord],
    options: SadlOptions,
    model_info: dict[str, Any],
    warnings_seen: Sequence[str] = (),
) -> Results:
    """The results of a session: overall, per group (alone and cumulatively, Table VI),
    per test (in collection order), per input, per layer."""
    records = sorted(records, key=lambda r: (r.index, r.nodeid))
    classifier = view.dsa is not None
    messages: list[str] = list(warnings_seen)

    bounds_needed = any(b is None for b in (options.lsc.lower, options.lsc.upper)) or (
        classifier and any(b is None for b in (options.dsc.lower, options.dsc.upper))
    )
    held_lsa: np.ndarray | None = None
    held_dsa: np.ndarray | None = None
    if bounds_needed:
        try:
            held_lsa, held_dsa = view.held_out() if view.held_out is not None else held_out_scores(view)
        except ValueError as exc:  # the training set minus the held-out traces is too small
            messages.append(f"default SC bounds: held-out scoring failed ({exc}); using (0, 1]: configure the bounds")

    def bounds(cfg: Any, held: np.ndarray | None) -> tuple[tuple[float, float, int], str]:
        lo_d, up_d = default_bounds(held) if held is not None else (0.0, 1.0)
        lower = cfg.lower if cfg.lower is not None else lo_d
        upper = cfg.upper if cfg.upper is not None else up_d
        if cfg.lower is not None and cfg.upper is None and upper <= lower:
            upper = lower + abs(lower) + 1.0
        if cfg.upper is not None and cfg.lower is None and lower >= upper:
            lower = min(0.0, upper - 1.0)
        rule = "configured" if cfg.lower is not None and cfg.upper is not None else BOUNDS_RULE
        return (float(lower), float(upper), int(cfg.buckets)), rule

    lsc_spec, lsc_rule = bounds(options.lsc, held_lsa)
    dsc_spec, dsc_rule = bounds(options.dsc, held_dsa) if classifier else (None, "")
    total = _Criteria(lsc_spec, dsc_spec, view.ranges, options)
    lsc, dsc = total.sc["lsc"], total.sc["dsc"]

    # Per-input SA, all at once (the engine is vectorised over inputs).
    batches = [(t, b) for t, rec in enumerate(records) for b in rec.batches]
    if batches:
        sa = np.concatenate([b.sa for _, b in batches]).astype(np.float64)
        pred = np.concatenate([b.pred for _, b in batches])
        n_layers = len(view.ranges.sizes)
        layers = [np.concatenate([b.coverage[i] for _, b in batches]) for i in range(n_layers)]
        extrema: list[Any] = [_joined_extrema([b for _, b in batches], i) for i in range(n_layers)]
        owner = np.concatenate([np.full(len(b), t) for t, b in batches])
    else:
        sa = np.zeros((0, view.sa_traces.shape[1]))
        pred = np.zeros(0, dtype=np.int64)
        layers = [np.zeros((0, s)) for s in view.ranges.sizes]
        extrema = [None] * len(view.ranges.sizes)
        owner = np.zeros(0, dtype=np.int64)

    def part(rows: np.ndarray) -> tuple[Any, ...]:
        return (
            lsa_scores[rows],
            None if dsa_scores is None else dsa_scores[rows],
            [a[rows] for a in layers],
            [None if e is None else (e[0][rows], e[1][rows]) for e in extrema],
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lsa_scores = view.lsa(sa, pred if classifier else None) if len(sa) else np.zeros(0)
        dsa_scores = view.dsa(sa, pred) if classifier and len(sa) else (np.zeros(0) if classifier else None)
    messages.extend(dict.fromkeys(str(w.message) for w in caught))

    # Per test, in collection order: what each newly covered.
    tests_out = []
    for t, rec in enumerate(records):
        rows = np.flatnonzero(owner == t)
        new = total.update(*part(rows))
        lsa_t = lsa_scores[rows]
        dsa_t = dsa_scores[rows] if dsa_scores is not None else None
        tests_out.append(
            {
                "nodeid": rec.nodeid,
                "group": rec.group,
                "outcome": rec.outcome,
                "inputs": int(rows.size),
                "lsa_mean": _stat(lsa_t, np.mean),
                "lsa_max": _stat(lsa_t, np.max),
                "dsa_mean": None if dsa_t is None else _stat(dsa_t, np.mean),
                "dsa_max": None if dsa_t is None else _stat(dsa_t, np.max),
                "new": {k: int(v) for k, v in new.items()},
            }
        )

    # Per group: alone, and cumulatively in order of first appearance (Table VI).
    group_names = list(dict.fromkeys(rec.group for rec in records))
    cumulative = total.fresh()
    groups_out = []
    for name in group_names:
        members = [t for t, rec in enumerate(records) if rec.group == name]
        rows = np.flatnonzero(np.isin(owner, members))
        alone = total.fresh()
        alone.update(*part(rows))
        cumulative.update(*part(rows))
        groups_out.append(
            {"name": name, "tests": len(members), "inputs": int(rows.size), "metrics": alone.values(), "cumulative": cumulative.values()}
        )

    metrics: dict[str, Metric] = {}
    for name in ("lsc", "dsc"):
        sc = total.sc[name]
        if sc is None:
            metrics[name] = Metric(None, 0, options.dsc.buckets, applicable=False)
        else:
            metrics[name] = Metric(sc.value, int(sc.covered.sum()), sc.total, True, sc.below, sc.above, sc.count, sc.nan)
    for name, cov in total.neurons.items():
        metrics[name] = Metric(cov.value, cov.covered_count, cov.total)

    per_layer = {name: cov.per_layer() for name, cov in total.neurons.items()}
    layer_names = list(view.ranges.names) or [f"layer_{i}" for i in range(len(view.ranges.sizes))]
    layers_out = [
        {"name": layer_names[i], "neurons": int(size), **{k: per_layer[k][i] for k in per_layer}}
        for i, size in enumerate(view.ranges.sizes)
    ]

    # Most surprising inputs, with thumbnails where the inputs are images.
    thumbs_of = []
    for _, b in batches:
        thumbs_of.extend([None] * len(b) if b.thumbs is None else list(b.thumbs))
    top = []
    for by, scores in (("lsa", lsa_scores), ("dsa", dsa_scores)):
        if scores is None or not len(scores):
            continue
        finite = np.flatnonzero(np.isfinite(scores))
        order = finite[np.argsort(-scores[finite], kind="stable")][:TOP_INPUTS]
        for rank, i in enumerate(order, 1):
            thumb = thumbs_of[i]
            top.append(
                {
                    "by": by,
                    "rank": rank,
                    "input": int(i),
                    "test": int(owner[i]),
                    "pred": int(pred[i]) if classifier else None,
                    "lsa": float(lsa_scores[i]),
                    "dsa": None if dsa_scores is None else float(dsa_scores[i]),
                    "image": None if thumb is None else _image(thumb),
                }
            )

    config = {
        "sa_layers": model_info.get("sa_layers", []),
        "coverage_layers": model_info.get("coverage_layers", []),
        "nc_threshold": options.nc_threshold,
        "kmnc_k": options.kmnc_k,
        "var_threshold": options.var_threshold,
        "lsc": {"lower": lsc.lower, "upper": lsc.upper, "buckets": lsc.buckets, "rule": lsc_rule},
        "dsc": (
            {"lower": dsc.lower, "upper": dsc.upper, "buckets": dsc.buckets, "rule": dsc_rule}
            if dsc is not None
            else {"lower": None, "upper": None, "buckets": options.dsc.buckets, "rule": "not applicable (regression model)"}
        ),
    }
    inputs = {
        "test": owner.astype(int).tolist(),
        "pred": pred.astype(int).tolist() if classifier else [None] * len(owner),
        "lsa": lsa_scores.tolist(),
        "dsa": dsa_scores.tolist() if dsa_scores is not None else [None] * len(owner),
    }
    model = {k: v for k, v in model_info.items() if k not in ("sa_layers", "coverage_layers")}
    failures = check_thresholds(metrics, options.fail_under, len(owner))
    return Results(
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        version=__version__,
        model=model,
        config=config,
        thresholds=dict(options.fail_under),
        metrics=metrics,
        layers=layers_out,
        groups=groups_out,
        tests=tests_out,
        inputs=inputs,
        top_inputs=top,
        failures=failures,
        warnings=messages,
    )
