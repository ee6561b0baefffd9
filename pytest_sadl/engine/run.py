"""A session's results from a profile view and the recorded traces: :func:`compute`.

The order is defined by the tests' ids, never by the order they ran in (:func:`ordered`):
tests by node id (as strings), groups in the order ``sadl_groups`` lists them, the others
after them by their first test's node id. So a run split over pytest-xdist workers, one
shuffled by pytest-randomly and a serial run give the same numbers, the same cumulative
table by group (Table VI) and the same "newly covered by this test" counts.
"""

from __future__ import annotations

import datetime as _dt
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_sadl import __version__
from pytest_sadl.covered import Covered, with_unique
from pytest_sadl.covered import section as covered_section
from pytest_sadl.criteria.registry import COUNT, LABELS, SA_LABELS, choose
from pytest_sadl.criteria.shape import Setup
from pytest_sadl.engine import rows
from pytest_sadl.engine.bounds import ScBounds
from pytest_sadl.engine.joined import Joined
from pytest_sadl.engine.view import ProfileView
from pytest_sadl.errors import sadl_warnings_into
from pytest_sadl.records import TestRecord
from pytest_sadl.results import Failure, Metric, ModelInfo, Ood, Results, percent

if TYPE_CHECKING:  # the options are plain data; the engine itself imports no pytest
    from pytest_sadl.config import SadlOptions


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
    the end of a session takes more than a moment). Nothing it is given is changed: the
    scores are set up on a copy of ``view`` (:meth:`ProfileView.for_run`).

    A stale record (its test ended on a model that had changed since the profile's was
    bound: ``fit``, ``set_weights``) counts in no metric, group or test row: it is listed
    in ``Results.stale`` with its inputs, as if those inputs had never been fed."""
    tell = phase if phase is not None else _silent
    stale, kept = _split_stale(records)
    stale, _ = ordered(stale)
    kept, group_names = ordered(kept, options.groups)
    chosen = choose(getattr(options, "metrics", None))
    run = view.for_run(chosen, options)
    keys = run.score_keys()
    messages: list[str] = list(warnings_seen)
    messages.extend(_set_up(run, tell))
    tell("the SC bounds (held-out training traces, once per profile)")
    bounds = ScBounds.of(run, options, chosen)
    messages.extend(bounds.notes)
    total = rows.RunCriteria(Setup(run.ranges, options, bounds=bounds.specs), chosen)
    joined = Joined.of(kept, run)
    scores = _scores(run, joined, messages, tell)
    tell(f"coverage of {len(kept)} tests and {len(group_names)} groups")
    tests = rows.per_test_rows(kept, joined, scores, total, keys)
    messages.extend(_unused_groups(options.groups, group_names))
    groups = rows.group_rows(kept, group_names, joined, scores, total)
    metrics = rows.metric_rows(total, run, options)
    labels, notes = rows.input_labels(kept, joined.digests, len(joined))
    messages.extend(notes)
    covered = covered_section(_per_test(kept, joined, scores), total.fresh, options.groups)
    tests = with_unique(tests, _covered(covered))
    tell("the OOD section (each group against the reference)")
    ood = rows.ood(kept, group_names, joined, scores, run, getattr(options, "ood_reference", None))
    messages.extend(_ood_reason(ood))
    return Results(
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        version=__version__,
        model=_model(model_info),
        config=rows.run_config(model_info, options, total, bounds, run),
        thresholds=dict(options.fail_under),
        metrics=metrics,
        layers=rows.layer_rows(run, total),
        groups=groups,
        tests=tests,
        inputs=rows.input_rows(joined, scores, run.classifier, keys, labels),
        top_inputs=rows.top_inputs(joined, scores, run.classifier, keys),
        failures=check_thresholds(metrics, options.fail_under, len(joined)),
        warnings=messages,
        mistakes=rows.mistakes(kept, joined, scores, run.classifier, labels),
        ood=ood,
        stale=rows.stale_rows(stale),
        covered=None if getattr(options, "omit_covered_sets", False) else covered,
    )


def _silent(_what: str) -> None:
    """No one is told of the steps."""


def _split_stale(records: Sequence[TestRecord]) -> tuple[list[TestRecord], list[TestRecord]]:
    """The stale records (measured on a changed model) and the others, each in the given order."""
    stale: list[TestRecord] = []
    kept: list[TestRecord] = []
    for r in records:
        (stale if r.stale else kept).append(r)
    return stale, kept


def _covered(section: Mapping[str, Any] | None) -> Covered | None:
    """The covered sets of the run's section, ``None`` without one."""
    return None if section is None else Covered.of_section(section)


def _ood_reason(ood: Ood | None) -> list[str]:
    """Why the OOD section could not be made, as a warning line (none when it could)."""
    return [ood.reason] if ood is not None and ood.reason else []


def _model(model_info: dict[str, Any]) -> ModelInfo:
    """The model's part of the results (its layers are in the run's configuration)."""
    return ModelInfo.from_dict({k: v for k, v in model_info.items() if k not in ("sa_layers", "coverage_layers")})


def _set_up(run: ProfileView, tell: Callable[[str], None]) -> list[str]:
    """Set the run's scores up first (what they say comes before the bounds' notes);
    pytest-sadl's own warnings are returned as lines of the reports, others warned again."""
    n_train = len(run.sa_traces)
    notes: list[str] = []
    with sadl_warnings_into(notes):
        for key in run.score_keys():
            tell(f"setting {SA_LABELS[key]} up on {n_train} training traces")
            run.scorer(key)
    return notes


def _per_test(records: Sequence[TestRecord], joined: Joined, scores: dict[str, Any]) -> Iterator[Any]:
    """(node id, the criteria's batch of its inputs) of each test, for its covered sets."""
    for t, rec in enumerate(records):
        yield rec.nodeid, joined.part(np.flatnonzero(joined.owner == t), scores)


def _scores(run: ProfileView, joined: Joined, messages: list[str], tell: Callable[[str], None]) -> dict[str, Any]:
    """Every score of the recorded inputs; the scorers' warnings (once each) into ``messages``."""
    keys = run.score_keys()
    tell(f"scoring {len(joined)} recorded inputs ({', '.join(SA_LABELS[k] for k in keys) or 'no surprise'})")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scores = run.score(joined.sa, joined.pred)
    messages.extend(dict.fromkeys(str(w.message) for w in caught))
    return scores


def _unused_groups(groups: Sequence[str], present: Sequence[str]) -> list[str]:
    """A note naming the groups of ``sadl_groups`` no recorded test is in."""
    unused = [g for g in dict.fromkeys(groups) if g not in present]
    if not unused:
        return []
    return [f"sadl_groups names {', '.join(map(repr, unused))}, which no recorded test is in"]


def check_thresholds(metrics: dict[str, Metric], thresholds: dict[str, float], n_inputs: int) -> list[Failure]:
    """One failure per metric below its threshold, judged on the same two-decimal
    percentage the message prints; a threshold on a metric that is not available fails
    with the reason."""
    failures = []
    for name, threshold in thresholds.items():
        failure = _threshold_failure(name, threshold, metrics.get(name), n_inputs)
        if failure is not None:
            failures.append(failure)
    return failures


def _threshold_failure(name: str, threshold: float, metric: Metric | None, n_inputs: int) -> Failure | None:
    flag = f"--sadl-fail-under={name}:{threshold:g}"
    why = _unmeetable(name, flag, metric, n_inputs)
    if why is not None:
        return Failure(name, None, threshold, why)
    assert metric is not None  # _unmeetable says why when there is none
    value, unit = _judged(name, metric.value)
    if value is None or value >= threshold:
        return None
    return Failure(name, value, threshold, f"{LABELS[name]} {value:.2f}{unit} is below {flag} ({threshold:.2f}{unit})")


def _judged(name: str, value: float | None) -> tuple[float | None, str]:
    """The value a threshold is judged on, and its unit: a coverage in percent, a count
    criterion (TKNP, NLC, CC) by its number, both to two decimals."""
    if name in COUNT:
        return (None if value is None else round(value, 2)), ""
    return (None if value is None else percent(value)), "%"


def _unmeetable(name: str, flag: str, metric: Metric | None, n_inputs: int) -> str | None:
    """Why the threshold ``flag`` of ``name`` cannot be met at all (no inputs, the metric
    not available or not applicable), ``None`` when its value decides."""
    label = LABELS[name]
    if n_inputs == 0:
        return (
            f"{label}: no inputs were recorded, so {flag} cannot be met "
            "(mark the tests that feed the model with @pytest.mark.sadl)"
        )
    if metric is not None and metric.reason:
        return f"{label} is not available, so {flag} cannot be met: {metric.reason}"
    if metric is None or not metric.applicable:
        return f"{label} is not applicable to this model (DSA needs a classifier); remove {name} from --sadl-fail-under"
    return None


def ordered(records: Sequence[TestRecord], groups: Sequence[str] = ()) -> tuple[list[TestRecord], list[str]]:
    """The records by node id, and the group names in their defined order: those of
    ``groups`` (``sadl_groups``) that have records, in that order, then the others by the
    node id of their first test."""
    by_id = sorted(records, key=lambda r: r.nodeid)
    present = list(dict.fromkeys(rec.group for rec in by_id))
    first = [g for g in dict.fromkeys(groups) if g in present]
    return by_id, first + [g for g in present if g not in first]
