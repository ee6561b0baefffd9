"""The parts of a run's results, one function per part, each returning the typed rows of
:mod:`pytest_sadl.results`: tests, groups (Table VI), metrics, layers, top inputs, the
configuration, the inputs, the mistakes analysis, the OOD section, the stale tests.

Numbers are kept as a results document holds them: NumPy scalars as Python numbers, NaN
and inf as ``None``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_sadl.criteria import mistakes as found
from pytest_sadl.criteria.detection import best_sentence, ood_table
from pytest_sadl.criteria.mistakes import BASELINES, SCORE_LABELS, analyse
from pytest_sadl.criteria.registry import BY_NAME, LABELS, NEURON, SA_LABELS, SURPRISE
from pytest_sadl.criteria.shape import Setup
from pytest_sadl.engine.bounds import ScBounds, sc_options
from pytest_sadl.engine.joined import Joined
from pytest_sadl.records import TestRecord
from pytest_sadl.results import (
    JSON,
    Analysis,
    Fifth,
    GroupRow,
    LayerRow,
    Metric,
    Mistakes,
    Ood,
    OodRow,
    RunConfig,
    StaleTest,
    TestRow,
    Thumbnail,
    TopInput,
)
from pytest_sadl.results import ScBounds as ScBoundsRow

if TYPE_CHECKING:
    from pytest_sadl.config import SadlOptions
    from pytest_sadl.engine.view import ProfileView

TOP_INPUTS = 12


class RunCriteria:
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

    def fresh(self) -> RunCriteria:
        return RunCriteria(self.setup, self.names)

    def update(self, batch: Any) -> dict[str, int]:
        return {name: cov.update(batch) for name, cov in self.made.items() if cov is not None}

    def values(self) -> dict[str, float | None]:
        return {name: _number(None if cov is None else cov.value) for name, cov in self.made.items()}


def _number(value: object) -> Any:
    """A number as a results document holds it: a NumPy scalar as the Python number, an
    ``int`` kept, NaN and inf (and anything that is not a number) as ``None``."""
    value = _scalar(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if isinstance(value, int) or math.isfinite(value) else None


def _scalar(value: object) -> object:
    """A NumPy scalar as the Python one it holds; anything else as it is."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    return value


def _plain(value: object) -> JSON:
    """A plain setting as JSON: a NumPy scalar as Python, a non-finite float as ``None``."""
    value = _scalar(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value  # type: ignore[return-value]


def _stat(values: np.ndarray, fn: Any) -> float | None:
    finite = values[np.isfinite(values)]
    return float(fn(finite)) if finite.size else None


def stale_rows(records: Sequence[TestRecord]) -> list[StaleTest]:
    """The stale records (in the order given), each with its inputs."""
    return [StaleTest(r.nodeid, r.group, r.outcome, inputs=int(r.n_inputs)) for r in records]


def per_test_rows(
    records: Sequence[TestRecord],
    joined: Joined,
    scores: dict[str, np.ndarray],
    total: RunCriteria,
    keys: Sequence[str],
) -> list[TestRow]:
    """Per test, by node id: its inputs' surprise and what each newly covered (``total``
    is updated test by test)."""
    out = []
    for t, rec in enumerate(records):
        rows = np.flatnonzero(joined.owner == t)
        new = total.update(joined.part(rows, scores))
        mean, high = _score_stats(scores, rows, keys)
        out.append(
            TestRow(rec.nodeid, rec.group, rec.outcome, int(rows.size), mean, high, {k: int(v) for k, v in new.items()})
        )
    return out


def _score_stats(
    scores: Mapping[str, np.ndarray], rows: np.ndarray, keys: Sequence[str]
) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """The mean and the highest finite score of the inputs ``rows`` by each key (``None``
    for a key the run has no scores of, or without a finite one)."""
    mean: dict[str, float | None] = {}
    high: dict[str, float | None] = {}
    for key in keys:
        values = scores[key][rows] if key in scores else None
        mean[key] = None if values is None else _stat(values, np.mean)
        high[key] = None if values is None else _stat(values, np.max)
    return mean, high


def group_rows(
    records: Sequence[TestRecord],
    group_names: Sequence[str],
    joined: Joined,
    scores: dict[str, np.ndarray],
    total: RunCriteria,
) -> list[GroupRow]:
    """Per group: alone, and cumulatively in the defined order (Table VI)."""
    cumulative = total.fresh()
    out = []
    for name in group_names:
        members = [t for t, rec in enumerate(records) if rec.group == name]
        rows = np.flatnonzero(np.isin(joined.owner, members))
        alone = total.fresh()
        alone.update(joined.part(rows, scores))
        cumulative.update(joined.part(rows, scores))
        out.append(GroupRow(name, len(members), int(rows.size), alone.values(), cumulative.values()))
    return out


def metric_rows(total: RunCriteria, view: ProfileView, options: SadlOptions) -> dict[str, Metric]:
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
        buckets = sc_options(options, name).buckets if name in SURPRISE else 0
        metrics[name] = Metric(None, 0, buckets, applicable=False, reason=reason)
    return metrics


def layer_rows(view: ProfileView, total: RunCriteria) -> list[LayerRow]:
    """Per coverage layer: its neurons and each chosen neuron coverage on it."""
    per_layer = {
        name: total.made[name].per_layer()
        for name in total.names
        if name in NEURON and hasattr(total.made[name], "per_layer")
    }
    names = list(view.ranges.names) or [f"layer_{i}" for i in range(len(view.ranges.sizes))]
    return [
        LayerRow(names[i], int(size), _coverage({k: per_layer[k][i] for k in per_layer}))
        for i, size in enumerate(view.ranges.sizes)
    ]


def _coverage(values: Mapping[str, object]) -> dict[str, float | None]:
    """The numbers among ``values`` (``None`` counts as one), as a results document holds them."""
    return {k: _number(v) for k, v in values.items() if _is_number(v)}


def _is_number(value: object) -> bool:
    value = _scalar(value)
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def top_inputs(joined: Joined, scores: dict[str, np.ndarray], classifier: bool, keys: Sequence[str]) -> list[TopInput]:
    """Most surprising inputs by each score, with thumbnails where the inputs are images:
    each distinct input once (by its digest), with every test that fed it."""

    def shown(i: int) -> tuple[Thumbnail | None, str | None]:
        thumb, text = joined.thumbs[i], joined.texts[i]
        return (None if thumb is None else _image(thumb)), (None if text is None else str(text))

    pred = joined.pred if classifier else None
    return top_of(scores, joined.same_input(), joined.owner, pred, keys, shown)


def top_of(
    scores: Mapping[str, np.ndarray],
    same: np.ndarray,
    owner: np.ndarray,
    pred: np.ndarray | None,
    keys: Sequence[str],
    shown: Any,
) -> list[TopInput]:
    """The top inputs of arrays (the engine's, or ``sadl combine``'s from the inputs'
    columns): ``same`` each input's first copy, ``owner`` its test, ``pred`` the predicted
    classes (a classifier), ``shown(i)`` the thumbnail and text of input ``i``."""
    top = []
    for by, values in scores.items():
        for rank, i in enumerate(_most_surprising(values, same), start=1):
            copies = np.flatnonzero(same == same[i])
            image, text = shown(int(i))
            top.append(
                TopInput(
                    by=by,
                    rank=rank,
                    input=int(i),
                    test=int(owner[i]),
                    tests=sorted({int(t) for t in owner[copies]}),
                    copies=int(copies.size),
                    pred=None if pred is None else int(pred[i]),
                    scores=_scores_of(scores, int(i), keys),
                    image=image,
                    text=text,
                )
            )
    return top


def _scores_of(scores: Mapping[str, np.ndarray], i: int, keys: Sequence[str]) -> dict[str, float | None]:
    """Input ``i``'s score by each key (``None`` for a key the run has no scores of)."""
    return {key: (_number(float(scores[key][i])) if key in scores else None) for key in keys}


def _most_surprising(values: np.ndarray, same: np.ndarray) -> list[int]:
    """The indices of the :data:`TOP_INPUTS` highest finite ``values``, each distinct input
    (``same``: its first copy) once, highest first."""
    finite = np.flatnonzero(np.isfinite(values))
    order = finite[np.argsort(-values[finite], kind="stable")]
    seen: set[int] = set()
    out = []
    for i in order:
        if len(seen) == TOP_INPUTS:
            break
        if int(same[i]) not in seen:
            seen.add(int(same[i]))
            out.append(int(i))
    return out


def _image(thumb: np.ndarray) -> Thumbnail:
    h, w, c = thumb.shape
    return Thumbnail(int(h), int(w), int(c), thumb.reshape(-1).astype(int).tolist())


def run_config(
    model_info: Mapping[str, Any], options: SadlOptions, total: RunCriteria, bounds: ScBounds, view: ProfileView
) -> RunConfig:
    """The configuration the numbers came from: layers, thresholds, each SC's bounds."""
    return RunConfig(
        sa_layers=_names(model_info.get("sa_layers")),
        coverage_layers=_names(model_info.get("coverage_layers")),
        nc_threshold=_number(options.nc_threshold),
        kmnc_k=_integer(options.kmnc_k),
        var_threshold=_number(options.var_threshold),
        lsa_near_singular=_text(options.lsa_near_singular),
        var_rule=_text(options.var_rule),
        sa_components=_integer(options.sa_components),  # only when set: unprojected results keep their form
        params=_own_params(options, total),
        bounds={m: _sc_bounds(m, options, total, bounds, view) for m in total.names if m in SURPRISE},
    )


#: the settings :class:`RunConfig` has a field of
_CONFIG_FIELDS = frozenset(
    {"sa_layers", "coverage_layers", "nc_threshold", "kmnc_k", "var_threshold"}
    | {"lsa_near_singular", "var_rule", "sa_components"}
)


def _own_params(options: SadlOptions, total: RunCriteria) -> dict[str, JSON]:
    """An opt-in criterion's own parameters, when the run computed it."""
    params: dict[str, JSON] = {}
    for name in total.names:
        for key in BY_NAME[name].option_names:
            if key not in _CONFIG_FIELDS:
                params[key] = _plain(options.param(key))
    return params


def _names(value: object) -> list[str]:
    """The layer names of a list (anything else: none, as a results document reads it)."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _integer(value: object) -> int | None:
    value = _number(value)
    return value if isinstance(value, int) else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _sc_bounds(
    metric: str, options: SadlOptions, total: RunCriteria, bounds: ScBounds, view: ProfileView
) -> ScBoundsRow:
    """A surprise coverage's bounds and their rule, or why it has none."""
    sc = total.made[metric]
    if sc is not None:
        b = sc.bounds()
        return ScBoundsRow(_number(b["lower"]), _number(b["upper"]), _integer(b["buckets"]), bounds.rules[metric])
    reason = view.unavailable.get(SURPRISE[metric])
    rule = f"not available: {reason}" if reason else "not applicable (regression model)"
    return ScBoundsRow(None, None, _integer(sc_options(options, metric).buckets), rule)


def input_rows(
    joined: Joined, scores: dict[str, np.ndarray], classifier: bool, keys: Sequence[str], labels: list[Any] | None
) -> dict[str, list[JSON]]:
    """Per input: its test, predicted class, scores and (when tests gave labels) label."""
    n = len(joined)
    inputs: dict[str, list[JSON]] = {
        "test": joined.owner.astype(int).tolist(),
        "pred": joined.pred.astype(int).tolist() if classifier else [None] * n,
    }
    for key in keys:
        inputs[key] = scores[key].tolist() if key in scores else [None] * n
    inputs.update(exact_columns(joined, classifier))
    if labels is not None:
        inputs["label"] = [_label_value(v, classifier) for v in labels]
    return inputs


def _label_value(v: Any, classifier: bool) -> JSON:
    """One input's label as the results hold it: a class id (int) or a target value, a list
    of them for several, ``None`` without one."""
    if v is None:
        return None
    if len(v) != 1:
        return list(v)
    return int(v[0]) if classifier else v[0]


def exact_columns(joined: Joined, classifier: bool) -> dict[str, list[JSON]]:
    """What ``sadl combine`` needs to make the top inputs and the mistakes section of one
    run over several: each input's digest (16 hex digits: copies of one input), and a
    classifier's confidence baselines of its output (``baseline_deepgini``, ...: prefixed,
    as ``msp`` is also a score's key) or a regression model's output."""
    out: dict[str, list[JSON]] = {}
    if joined.digests is not None:
        out["digest"] = [f"{int(d) & 0xFFFFFFFFFFFFFFFF:016x}" for d in joined.digests.tolist()]
    if classifier and joined.outputs is not None:
        out.update({f"baseline_{k}": v.tolist() for k, v in found.confidence_scores(joined.outputs).items()})
    elif not classifier:
        out["output"] = np.asarray(joined.pred, dtype=np.float64).tolist()
    return out


def mistakes(
    records: Sequence[TestRecord],
    joined: Joined,
    scores: dict[str, np.ndarray],
    classifier: bool,
    labels: list[Any] | None,
) -> Mistakes | None:
    """Whether surprise predicts the model's mistakes, when tests gave labels."""
    if labels is None:
        return None
    return mistakes_of(
        analyse(
            scores,
            labels,
            classifier=classifier,
            pred=joined.pred if classifier else None,
            output=joined.outputs if classifier else joined.pred,
            groups=[records[t].group for t in joined.owner],
        )
    )


def mistakes_of(result: tuple[found.Analysis, list[found.Analysis]] | None) -> Mistakes | None:
    """The results' mistakes section of an analysis (``criteria.mistakes.analyse``)."""
    if result is None:
        return None
    overall, per_group = result
    return Mistakes(
        overall=_analysis(overall),
        groups=[_analysis(g) for g in per_group],
        labels={**SA_LABELS, **SCORE_LABELS},  # every score the run may have, MLSA and MMDSA too
        baselines=list(BASELINES),
    )


def _analysis(a: found.Analysis) -> Analysis:
    return Analysis(
        kind=a.kind,
        labelled=_integer(a.labelled),
        errors=_integer(a.errors),
        error_rate=_number(a.error_rate),
        mean_abs_error=_number(a.mean_abs_error),
        auc={k: _number(v) for k, v in a.auc.items()},
        spearman={k: _number(v) for k, v in a.spearman.items()},
        fifths={k: [_fifth(f) for f in v] for k, v in a.fifths.items()},
        scored={k: int(v) for k, v in a.scored.items()},
        sentences=list(a.sentences),
        name=a.name,
    )


def _fifth(f: found.Fifth) -> Fifth:
    return Fifth(
        _number(f.lowest), _number(f.highest), _integer(f.inputs) or 0, _number(f.accuracy), _number(f.mean_abs_error)
    )


def ood(
    records: Sequence[TestRecord],
    group_names: Sequence[str],
    joined: Joined,
    scores: dict[str, np.ndarray],
    run: ProfileView,
    reference: str | None,
) -> Ood | None:
    """How well each per-input score tells each group from in-distribution inputs: the
    held-out training traces (``reference`` ``None``; their scores as the SC bounds use
    them, kept with the profile) or the group named ``reference``. ``None`` when the run
    has no per-input score or no group; a score without held-out values is left out,
    its reason in ``unavailable``; a ``reference`` the run has no group of gives no rows,
    its reason in ``reason``."""
    keys = run.score_keys()
    if not keys or not group_names:
        return None
    labels = {k: SA_LABELS[k] for k in keys}
    unavailable = _unavailable_scores(run, keys, scores)
    if reference is not None and reference not in group_names:
        return Ood(reference, labels=labels, unavailable=unavailable, reason=_unknown_reference(reference, group_names))
    per_group = _by_group(records, group_names, joined, {k: scores[k] for k in keys if k in scores})
    return _ood_against(per_group, reference, run, labels, unavailable)


def _ood_against(
    per_group: dict[str, dict[str, np.ndarray]],
    reference: str | None,
    run: ProfileView,
    labels: dict[str, str],
    unavailable: dict[str, str],
) -> Ood:
    """The OOD section of the groups' scores against the reference (a group, or ``None``:
    the held-out training traces)."""
    present = list(next(iter(per_group.values())))
    if reference is not None:
        ref, against = per_group[reference], f"the group {reference}"
    else:
        ref, against = _held_out(run, present, unavailable), "the held-out training traces"
    table = ood_table(per_group, reference if reference is not None else ref, present)
    sentence = best_sentence(table, labels, against)
    return Ood(
        reference,
        rows=[_ood_row(r, int(np.isfinite(ref[r.score]).sum())) for r in table],
        labels=labels,
        unavailable=unavailable,
        sentences=[] if sentence is None else [sentence],
    )


def _by_group(
    records: Sequence[TestRecord], group_names: Sequence[str], joined: Joined, scores: dict[str, np.ndarray]
) -> dict[str, dict[str, np.ndarray]]:
    """Each group's inputs' scores (group -> score key -> scores), groups in order."""
    owner_group = np.array([records[t].group for t in joined.owner.tolist()], dtype=object)
    return {g: {k: v[owner_group == g] for k, v in scores.items()} for g in group_names}


def _unavailable_scores(run: ProfileView, keys: Sequence[str], scores: Mapping[str, object]) -> dict[str, str]:
    """The run's scores that could not be set up, with their reasons."""
    return {k: why for k in keys if k not in scores and (why := run.unavailable.get(k))}


def _unknown_reference(reference: str, group_names: Sequence[str]) -> str:
    return (
        f"--sadl-ood-reference={reference} names no group of this run (its groups: {', '.join(group_names)}); "
        "name one of them, or leave it out to compare with the held-out training traces"
    )


def _held_out(run: ProfileView, keys: Sequence[str], unavailable: dict[str, str]) -> dict[str, np.ndarray]:
    """The held-out training traces' scores of ``keys`` (kept with the profile); one that
    has none is in ``unavailable`` with its reason."""
    errors: dict[str, str] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        held = run.held_out(list(keys), errors) if keys else {}
    for key in keys:
        if key not in held:
            why = " ".join(errors.get(key, "it cannot be set up on the rest of the training traces").split())
            unavailable[key] = f"{SA_LABELS[key]} has no held-out training scores: {why}"
    return held


def _ood_row(r: Any, reference_inputs: int) -> OodRow:
    return OodRow(
        r.group,
        r.score,
        int(r.n),
        reference_inputs,
        _number(r.auroc),
        _number(r.aupr_in),
        _number(r.aupr_out),
        _number(r.fpr95),
    )


def input_labels(
    records: Sequence[TestRecord], digests: np.ndarray | None, n: int
) -> tuple[list[Any] | None, list[str]]:
    """Each recorded input's label from ``sadl_labels(x, y)`` (matched by digest), or ``None``
    per input without one; ``None`` overall when no test gave labels. Plus notes for the reports."""
    given = [(d, v) for rec in records for d, v in rec.labels]
    if not given:
        return None, []
    table, conflicts = _label_table(given)
    notes = []
    if conflicts:
        notes.append(
            f"sadl_labels: {conflicts} input(s) were given different labels by different calls; the first label given is used"
        )
    if digests is None:
        notes.append(
            "sadl_labels: the recorded inputs could not be matched to labels (inputs that are not numeric arrays)"
        )
        return None, notes
    notes.extend(_unmatched_note(table, digests))
    return _labels_in_order(table, digests, n), notes


def _unmatched_note(table: dict[int, np.ndarray], digests: np.ndarray) -> list[str]:
    """A note on the labelled inputs no recorded input matches (none when all do)."""
    unmatched = len(table) - len({int(d) for d in digests.tolist()} & set(table))
    if not unmatched:
        return []
    return [
        f"sadl_labels: {unmatched} labelled input(s) never reached the model in a marked test; "
        "labels match recorded inputs by their values, so label the same array that is fed to the model"
    ]


def _labels_in_order(table: dict[int, np.ndarray], digests: np.ndarray, n: int) -> list[Any]:
    """Each of the ``n`` recorded inputs' label (a list of floats) by its digest, else ``None``."""
    out: list[Any] = [None] * n
    for i, d in enumerate(digests.tolist()):
        v = table.get(int(d))
        if v is not None:
            out[i] = [float(x) for x in v]
    return out


def _label_table(given: Sequence[tuple[np.ndarray, Any]]) -> tuple[dict[int, np.ndarray], int]:
    """Each digest's first label, and how many later calls gave another."""
    table: dict[int, np.ndarray] = {}
    conflicts = 0
    for dig, values in given:
        for d, v in zip(dig.tolist(), values, strict=True):
            old = table.setdefault(int(d), v)
            if old is not v and not np.array_equal(old, v):
                conflicts += 1
    return table, conflicts
