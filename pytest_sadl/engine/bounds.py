"""The SC bounds of a run: held-out training scores and the rule that makes bounds of them.

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

import math
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_sadl.config import Bounds
from pytest_sadl.criteria.registry import LABELS, SCORES, SURPRISE
from pytest_sadl.criteria.shape import Training

if TYPE_CHECKING:  # the options are plain data; the engine itself imports no pytest
    from pytest_sadl.config import SadlOptions
    from pytest_sadl.engine.view import ProfileView

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
    x = view.sa_traces
    probe = held_out_sample(len(x), view.row_keys, seed)
    out = {}
    with warnings.catch_warnings(), tempfile.TemporaryDirectory(prefix="sadl-heldout-") as scratch:
        warnings.simplefilter("ignore")
        training = _rest_of(view, _rows(x, ~probe, Path(scratch)), probe)
        for key in keys:
            try:  # one set-up in memory at a time: each is dropped when its scores are made
                scores = _held_out_scores(view, key, training, probe)
            except ValueError as exc:
                if errors is not None:
                    errors[key] = str(exc)
                continue
            if scores is not None:
                out[key] = scores
        del training
    return out


def _rest_of(view: ProfileView, rest: np.ndarray, probe: np.ndarray) -> Training:
    """The training set-up of the traces ``rest`` (those not in the held-out ``probe``)."""
    pred = view.sa_pred
    return Training(
        rest,
        None if pred is None else pred[~probe],
        view.var_threshold,
        view.near_singular,
        view.options,
        var_rule=view.var_rule,
        logit_head=_logit_head(view),
    )


def _held_out_scores(view: ProfileView, key: str, training: Training, probe: np.ndarray) -> np.ndarray | None:
    """Score ``key`` of the held-out traces ``probe``, set up on the rest (projected: on the
    axes of the whole training set, the run's); None when the run has no such score."""
    scorer = view.fit(key, training, rows=~probe)
    if scorer is None:
        return None
    pred = view.sa_pred
    return scorer(view.sa_traces[probe], None if pred is None else pred[probe])  # type: ignore[no-any-return]


def _logit_head(view: ProfileView) -> tuple[np.ndarray, np.ndarray] | None:
    """The profile's output layer (the logit scores' set-up on the held-out rest), ``None``
    where it has none (the scores then say why, as on the whole set)."""
    try:
        return None if view.profile is None else view.profile.logit_head()
    except ValueError:
        return None


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
            out[key] = profile.cached_array(_held_out_name(key, view()), lambda key=key: scores(key))
        except ValueError as exc:
            failed.setdefault(key, str(exc))
    return out


def _held_out_name(key: str, view: ProfileView) -> str:
    """The stored name of a score's held-out values: with the options it depends on
    (``Criterion.params``: ``heldout-mlsa-k3-1000``)."""
    params = SCORES[key].params if key in SCORES else None
    text = params(view.options) if params is not None else ""
    tag = f"-{text}" if text else ""  # none by default: the names stored before the options
    if view.projects(key):
        tag += f"-pca{view.components}"
    return f"heldout-{key}{tag}-{HELD_OUT}"


def default_sc_bounds(view: ProfileView, options: SadlOptions | None = None) -> dict[str, tuple[float, float, int]]:
    """Each surprise coverage's (lower, upper, buckets): configured where ``options`` sets
    them, else from the held-out training traces (:func:`default_bounds`), as a run uses."""
    held = view.held_out(held_out_keys(view), {})
    out = {}
    for metric in view.chosen():
        key = SURPRISE.get(metric)
        if key not in held:
            continue
        cfg = options.bounds(metric) if options is not None else None
        out[metric] = _configured_or_default(cfg, *default_bounds(held[key]))
    return out


def _configured_or_default(cfg: Bounds | None, lower: float, upper: float) -> tuple[float, float, int]:
    """The configured bounds ``cfg``, the default ``lower`` and ``upper`` where it has none."""
    if cfg is None:
        return float(lower), float(upper), 1000
    lower = cfg.lower if cfg.lower is not None else lower
    upper = cfg.upper if cfg.upper is not None else upper
    return float(lower), float(upper), int(cfg.buckets)


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
    percentile, in ``--sadl-sc-bounds``' form (``sadl_sc_bounds = lsc:LOWER:UPPER``).
    ``lower``: the lower bound in use when it is configured (the note keeps it and
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
    # the configured lower bound as it is; the default one rounded down, so that no
    # held-out score falls below it
    pin = f"{lower:.12g}" if lower is not None else f"{math.floor(low * 100) / 100:g}"
    hint = f"sadl_sc_bounds = {metric}:{pin}:{suggested:.4g}"
    return (
        f"default {LABELS[metric]} upper bound {upper:,.4g} comes from held-out training traces far above "
        f"the rest (90% are at most {q:,.4g}): most inputs will fall into its lowest buckets and {LABELS[metric]} "
        f"will barely move; pin the bounds, e.g. {hint}"
    )


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
        chosen = _set_up_surprise(view, metrics)
        configs = {m: sc_options(options, m) for m in chosen}
        needed = [key for m, key in chosen.items() if not configs[m].complete]
        errors: dict[str, str] = {}
        held = _held_out_quietly(view, needed, errors)
        for metric, key in chosen.items():
            out._add(metric, configs[metric], held.get(key), errors.pop(key, None))
        return out

    def _add(self, metric: str, cfg: Bounds, held: np.ndarray | None, error: str | None) -> None:
        """One surprise coverage's bounds, rule and notes (``error``: why its held-out scoring failed)."""
        if error is not None:  # the training set minus the held-out traces is too small
            self.notes.append(
                f"default {LABELS[metric]} bounds: held-out scoring failed ({error}); using (0, 1]: configure the bounds"
            )
        self.specs[metric], self.rules[metric] = _bounds(cfg, held)
        note = outlier_bound_note(metric, held, cfg.lower) if held is not None and cfg.upper is None else None
        if note:
            self.notes.append(note)


def _set_up_surprise(view: ProfileView, metrics: Sequence[str]) -> dict[str, str]:
    """The surprise coverages among ``metrics`` whose score is set up, each with its score's key."""
    return {m: SURPRISE[m] for m in metrics if m in SURPRISE and view.scorer(SURPRISE[m]) is not None}


def _held_out_quietly(view: ProfileView, keys: Sequence[str], errors: dict[str, str]) -> dict[str, np.ndarray]:
    """The held-out scores of ``keys`` (none when there are none), the set-ups' warnings silenced."""
    if not keys:
        return {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return view.held_out(list(dict.fromkeys(keys)), errors)


def _bounds(cfg: Bounds, held: np.ndarray | None) -> tuple[tuple[float, float, int], str]:
    """One surprise coverage's bounds: the configured ones, the others by the default rule."""
    lo_d, up_d = default_bounds(held) if held is not None else (0.0, 1.0)
    lower, upper = _completed(cfg.lower, cfg.upper, lo_d, up_d)
    rule = "configured" if cfg.complete else BOUNDS_RULE
    return (float(lower), float(upper), int(cfg.buckets)), rule


def _completed(lower: float | None, upper: float | None, lo_d: float, up_d: float) -> tuple[float, float]:
    """The configured bounds with the missing one from the defaults ``lo_d``, ``up_d``,
    moved when the default would not lie on the right side of the configured one."""
    if lower is not None and upper is None:
        return lower, _upper_above(lower, up_d)
    if upper is not None and lower is None:
        return _lower_below(upper, lo_d), upper
    return (lo_d if lower is None else lower), (up_d if upper is None else upper)


def _upper_above(lower: float, up_d: float) -> float:
    """The default upper bound, or one above the configured ``lower`` when it is not."""
    return up_d if up_d > lower else lower + abs(lower) + 1.0


def _lower_below(upper: float, lo_d: float) -> float:
    """The default lower bound, or one below the configured ``upper`` when it is not."""
    return lo_d if lo_d < upper else min(0.0, upper - 1.0)


def sc_options(options: SadlOptions, metric: str) -> Bounds:
    """The configured bounds of a surprise coverage (unset ones: from the profile)."""
    return options.bounds(metric)
