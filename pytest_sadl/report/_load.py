"""Helpers the reports share: formatting, hints; reading results files (the one file
writer is :mod:`pytest_sadl.atomic`).

Every report renders a :class:`pytest_sadl.results.Results`: the engine's own object in
a run, or :meth:`Results.from_dict` of a results file (``sadl report``, a baseline:
:func:`pytest_sadl.resultsfile.read_results` validates the file against its JSON Schema
first); none recomputes a metric. The metrics' names, labels and titles come from
:mod:`pytest_sadl.criteria.registry`. Optional sections (``groups``, ``tests``,
``inputs``, ``top_inputs``, ...) may be empty; the renderers show what there is.
"""

from __future__ import annotations

from itertools import pairwise

from pytest_sadl.criteria.registry import COUNT, CRITERIA, METRICS, SA_LABELS, SURPRISE
from pytest_sadl.criteria.registry import LABELS as METRIC_LABELS
from pytest_sadl.criteria.shape import COUNT_KIND
from pytest_sadl.results import JSON, Analysis, GroupRow, Metric, Mistakes, Ood, OodRow, Results


def thresholds_of(results: Results) -> dict[str, float]:
    """The thresholds of the run, in percent."""
    return {k: float(v) for k, v in results.thresholds.items()}


def metric_entry(results: Results, metric: str) -> Metric | None:
    """The ``metrics`` entry of ``metric``, or None when the run has none."""
    return results.metrics.get(metric)


def in_units(metric: str, value: float) -> float:
    """A metric's value in the unit reports print and thresholds are given in: percent for
    a coverage (a fraction in [0, 1]), the number itself for a count criterion (TKNP's
    patterns, CC's clusters, NLC)."""
    return float(value) if metric in COUNT else float(value) * 100.0


def unit(metric: str) -> str:
    """``"%"`` for a coverage, ``""`` for a count criterion."""
    return "" if metric in COUNT else "%"


def fmt_metric(metric: str, value: float | None, digits: int = 2) -> str:
    """A metric's value as reports print it: a percentage, or a count criterion's number
    (integers without decimals, NLC to four significant digits); ``"n/a"`` for None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "n/a"
    if metric not in COUNT:
        return f"{value * 100:.{digits}f}%"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.4g}"


#: what a count criterion's ``covered`` and ``total`` count (``None``: it has no targets,
#: its ``covered`` is always 0), for the reports' "covered / total": each ``Criterion.count_parts``
COUNT_PARTS: dict[str, tuple[str, str] | None] = {c.name: c.count_parts for c in CRITERIA if c.kind == COUNT_KIND}


def metric_percent(results: Results, metric: str) -> float | None:
    """The value of ``metric`` in its unit (:func:`in_units`: percent for a coverage), or
    None when absent or not applicable."""
    entry = results.metrics.get(metric)
    if entry is None or not entry.applicable or entry.value is None:
        return None
    return in_units(metric, entry.value)


def fmt_pct(value: float | None, digits: int = 2) -> str:
    """A fraction in [0, 1] as a percentage string, ``"n/a"`` for None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "n/a"
    return f"{value * 100:.{digits}f}%"


def fmt_num(value: float | int | None, digits: int = 2) -> str:
    """A number for a table cell: integers as is, floats with ``digits`` decimals."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "–" if value is None or not isinstance(value, (str, bool)) else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def _and(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def tests_summary(results: Results) -> str:
    """How many marked tests fed the model, said the same way in every report."""
    tests = results.tests
    fed = sum(1 for t in tests if t.inputs > 0)
    text = f"{fed} of {len(tests)} marked test{'' if len(tests) == 1 else 's'} fed the model"
    if len(tests) > fed:
        idle = len(tests) - fed
        text += f" ({idle} fed nothing)"
    return text


def per_score(analysis: Analysis, classifier: bool) -> dict[str, float | None]:
    """How well each score predicts the mistakes: AUC for a classifier, Spearman's rho
    for a regression model (``classifier``: the overall analysis's kind)."""
    return analysis.auc if classifier else analysis.spearman


def mistakes_rows(results: Results) -> tuple[list[str], list[list[str]]] | None:
    """The "does surprise predict mistakes" table as text cells (header, rows), overall first
    then per group, for the text reports; ``None`` without labels."""
    found = results.mistakes
    if found is None:
        return None
    rows = [found.overall, *found.groups]
    classifier = found.overall.classifier
    keys = list(dict.fromkeys(k for r in rows for k in per_score(r, classifier)))
    return _mistakes_header(found, keys), [_mistakes_row(r, classifier, keys) for r in rows]


def _mistakes_header(found: Mistakes, keys: list[str]) -> list[str]:
    """The mistakes table's header: the inputs, the error, then one column per score."""
    classifier = found.overall.classifier
    header = ["inputs", "labelled", "error rate" if classifier else "mean abs error"]
    return header + [f"{found.labels.get(k) or SA_LABELS.get(k, k)} {'AUC' if classifier else 'rho'}" for k in keys]


def _mistakes_row(r: Analysis, classifier: bool, keys: list[str]) -> list[str]:
    """One analysis (overall or a group's) as the mistakes table's cells."""
    err = fmt_pct(r.error_rate, 1) if classifier else fmt_num(r.mean_abs_error, 4)
    labelled = "?" if r.labelled is None else str(r.labelled)
    return [str(r.name or "all labelled"), labelled, err] + [fmt_num(per_score(r, classifier).get(k), 2) for k in keys]


def baseline_names(found: Mistakes) -> str:
    """The mistakes section's confidence baselines in words ("DeepGini, softmax entropy and margin")."""
    names = [found.labels.get(k) or k for k in found.baselines]
    return _and(names) if names else "none"


#: the OOD section's columns, for the text reports
OOD_HEADER = ["group", "score", "inputs", "AUROC", "AUPR-In", "AUPR-Out", "FPR@95"]


def ood_reference(ood: Ood) -> str:
    """The OOD section's in-distribution side, in words."""
    return "the held-out training traces" if ood.reference is None else f"the group {ood.reference}"


def ood_best(rows: list[OodRow]) -> set[int]:
    """The indices of each group's best row: the highest AUROC (the lower FPR@95 on a tie,
    then the first), as the section's sentence says."""
    best: dict[str, int] = {}
    for i, r in enumerate(rows):
        old = best.get(r.group)
        if r.auroc is not None and (old is None or _ood_key(r) > _ood_key(rows[old])):
            best[r.group] = i
    return set(best.values())


def _ood_key(r: OodRow) -> tuple[float, float]:
    return (r.auroc or 0.0, -(r.fpr95 if r.fpr95 is not None else 1.0))


def ood_rows(ood: Ood) -> list[list[str]]:
    """The OOD section's rows as text cells (:data:`OOD_HEADER`), in the results' order."""
    return [
        [
            r.group,
            ood.labels.get(r.score) or SA_LABELS.get(r.score, r.score),
            f"{r.inputs:,}",
            fmt_num(r.auroc, 3),
            fmt_num(r.aupr_in, 3),
            fmt_num(r.aupr_out, 3),
            fmt_num(r.fpr95, 3),
        ]
        for r in ood.rows
    ]


def ood_notes(ood: Ood) -> list[str]:
    """Why the section has no rows, or which scores it leaves out and why."""
    if ood.reason:
        return [f"No OOD section: {ood.reason}."]
    return [f"Not in the section: {why}" for why in ood.unavailable.values()]


def numbers(values: list[JSON]) -> list[float]:
    """The numbers of a per-input list (``None`` and anything else left out)."""
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]


def _values(results: Results, key: str) -> list[float]:
    return numbers(results.inputs.get(key) or [])


def adequacy_hints(results: Results) -> list[str]:
    """Plain-text observations that say what would improve the tests, most useful first.

    Derived from the results only (missed thresholds, how much of the surprise range the
    inputs reach, inputs above the upper bound, groups and tests that add nothing, the
    least-covered layer); no metric is recomputed. The renderers escape the text.
    """
    hints = _threshold_hints(results)
    for metric, key in SURPRISE.items():
        hints += _surprise_hints(results, metric, key)
    groups = results.groups
    hints += _idle_group_hints(groups)
    hints += _best_group_hints(groups)
    hints += _idle_test_hints(results)
    hints += _layer_hints(results)
    return hints


def _threshold_hints(results: Results) -> list[str]:
    """One per threshold missed."""
    return [f"Threshold missed: {f.message.rstrip('.')}." for f in results.failures if f.message]


def _reach_hint(results: Results, metric: str, key: str, lower: float, upper: float) -> list[str]:
    """A hint when the recorded scores reach less than three quarters of the bounds."""
    inside = [v for v in _values(results, key) if lower < v <= upper]
    if not inside:
        return []
    reach = (max(inside) - lower) / (upper - lower)
    if reach >= 0.75:
        return []
    return [
        f"The recorded {SA_LABELS[key]} values reach {max(inside):.3g}, {reach * 100:.0f}% of "
        f"the way through ({lower:g}, {upper:g}]: {METRIC_LABELS[metric]} buckets "
        f"above {max(inside):.3g} are out of reach of these tests; more diverse or "
        "adversarial inputs would cover them."
    ]


def _surprise_hints(results: Results, metric: str, key: str) -> list[str]:
    """How far the recorded scores reach into the bounds, and the inputs outside them."""
    entry = results.metrics.get(metric)
    found = _usable_bounds(results, metric)
    if entry is None or not entry.applicable or found is None:
        return []
    lower, upper = found
    return (
        _reach_hint(results, metric, key, lower, upper)
        + _below_hint(entry.below, metric, key, lower)
        + _above_hint(entry.above, metric, key, upper)
    )


def _usable_bounds(results: Results, metric: str) -> tuple[float, float] | None:
    """``metric``'s (lower, upper] bounds, ``None`` when it has none or they are empty."""
    bounds = results.config.bounds.get(metric)
    if bounds is None or bounds.lower is None or bounds.upper is None or bounds.upper <= bounds.lower:
        return None
    return bounds.lower, bounds.upper


def _inputs(n: int) -> str:
    return f"{n} input{'s' if n != 1 else ''}"


def _below_hint(below: int | None, metric: str, key: str, lower: float) -> list[str]:
    """The inputs at or below the lower bound (and, for LSA, why a bound of 0 can leave typical inputs out)."""
    if below is None or below <= 0:
        return []
    why = (
        "; LSA is negative wherever the density is above 1, so a lower bound of 0 can leave typical inputs out."
        if key == "lsa" and lower >= 0
        else "."
    )
    return [
        f"{_inputs(below)} had {SA_LABELS[key]} at or below the lower bound "
        f"{lower:g} and cover no {METRIC_LABELS[metric]} bucket" + why
    ]


def _above_hint(above: int | None, metric: str, key: str, upper: float) -> list[str]:
    """The inputs above the upper bound."""
    if above is None or above <= 0:
        return []
    return [
        f"{_inputs(above)} had {SA_LABELS[key]} above the upper bound "
        f"{upper:g} and cover no {METRIC_LABELS[metric]} bucket; if such inputs are "
        "expected, raise the upper bound (runs with other bounds do not compare)."
    ]


def _idle_group_hints(groups: list[GroupRow]) -> list[str]:
    """Groups that add less than a point to every cumulative coverage."""
    return [
        f"Group {group.name!s} adds less than 1 point to any cumulative "
        "metric: its inputs behave like those of earlier groups."
        for prev, group in pairwise(groups)
        if _idle(group.cumulative, prev.cumulative)
    ]


def _idle(cum: dict[str, float | None], prev: dict[str, float | None]) -> bool:
    """Whether no cumulative percentage (count criteria aside) rose by a point from ``prev`` to ``cum``."""
    gains = [(cum.get(m) or 0) - (prev.get(m) or 0) for m in METRICS if m not in COUNT and cum.get(m) is not None]
    return bool(gains) and max(gains) < 0.01


def _best_group_hints(groups: list[GroupRow]) -> list[str]:
    """The group that added the most surprise coverage after the first."""
    if len(groups) < 2:
        return []
    best_of: dict[str, list[str]] = {}
    for metric in SURPRISE:
        best = _best_step(groups, metric)
        if best is not None:
            gain, name = best
            best_of.setdefault(name, []).append(f"{METRIC_LABELS[metric]} (+{gain * 100:.1f} points)")
    return [
        f"Group {name} added the most {_and(what)} after the first group: more "
        "inputs of that kind are the likeliest to cover further surprise buckets."
        for name, what in best_of.items()
    ]


def _steps(groups: list[GroupRow], metric: str) -> list[tuple[float, str]]:
    """What each group with a value added to ``metric``'s cumulative coverage: (gain, group name)."""
    steps: list[tuple[float, str]] = []
    before = 0.0
    for group in groups:
        v = group.cumulative.get(metric)
        if v is not None:
            steps.append((v - before, group.name))
            before = v
    return steps


def _best_step(groups: list[GroupRow], metric: str) -> tuple[float, str] | None:
    """The largest gain of a group after the first (which starts from nothing), if a point or more."""
    steps = _steps(groups, metric)
    if len(steps) < 2:
        return None
    gain, name = max(steps[1:], key=lambda g: g[0])
    return (gain, name) if gain >= 0.01 else None


def _idle_test_hints(results: Results) -> list[str]:
    """Tests that covered nothing new."""
    hints: list[str] = []
    tests = results.tests
    idle = [t for t in tests if t.inputs > 0 and not any(t.new.values())]
    if idle:
        hints.append(
            f"{len(idle)} of {len(tests)} tests covered no new bucket or neuron: they repeat "
            'what earlier tests exercised (sort the test table by a "new" column).'
        )
    return hints


def _layer_hints(results: Results) -> list[str]:
    """The least covered layer by NC."""
    hints: list[str] = []
    layers = [(nc, lay) for lay in results.layers if (nc := lay.coverage.get("nc")) is not None]
    if len(layers) > 1:
        worst_nc, worst = min(layers, key=lambda pair: (pair[0], pair[1].coverage.get("kmnc") or 0))
        hints.append(
            f"Layer {worst.name!s} is the least covered (NC {worst_nc * 100:.2f}%): "
            "inputs that activate its neurons would raise neuron coverage most."
        )
    return hints
