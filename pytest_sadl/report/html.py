"""The HTML report: one self-contained ``index.html`` (inline CSS, JS, SVG and images).

Rendered with Jinja2 from ``templates/`` with autoescaping on, so a test id or a group
name such as ``<script>…</script>`` is shown as text. The page makes no network request:
charts are inline SVG, thumbnails are PNG ``data:`` URLs, and a Content-Security-Policy
allows only the page's own script (by its SHA-256 hash) and ``data:`` images.

The module prepares plain view data (geometry of the charts, formatted cells) from the
typed :class:`~pytest_sadl.results.Results` and the templates lay it out (the plain
mappings a template indexes, the configuration and the layers, are built in
:func:`build_context` only); nothing here recomputes a metric, it only bins the recorded
LSA/DSA values for the histograms and sums table columns for the totals.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

from pytest_sadl.atomic import atomic_write_text
from pytest_sadl.criteria.registry import BY_NAME, COUNT, CRITERIA, KINDS, METRICS, NEURON, SA_LABELS, SURPRISE
from pytest_sadl.criteria.registry import LABELS as METRIC_LABELS
from pytest_sadl.criteria.registry import TITLES as METRIC_TITLES
from pytest_sadl.criteria.shape import SURPRISE_KIND
from pytest_sadl.report._load import (
    COUNT_PARTS,
    adequacy_hints,
    baseline_names,
    fmt_metric,
    fmt_num,
    fmt_pct,
    in_units,
    metric_entry,
    ood_best,
    ood_notes,
    ood_reference,
    per_score,
    tests_summary,
    thresholds_of,
)
from pytest_sadl.report.compare import Comparison
from pytest_sadl.report.images import png_data_url
from pytest_sadl.report.partial import partial_notes
from pytest_sadl.results import (
    JSON,
    SCHEMA,
    VERSION,
    Analysis,
    Fifth,
    GroupRow,
    Metric,
    Mistakes,
    Results,
    TestRow,
    Thumbnail,
    TopInput,
)

__all__ = ["render_html", "write_html", "HISTOGRAM_BINS"]

#: Bars of a histogram between the lower and the upper bound.
HISTOGRAM_BINS = 30

_TEMPLATES = Path(__file__).with_name("templates")


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_TEMPLATES)),
        autoescape=True,
        undefined=jinja2.ChainableUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["pct"] = fmt_pct
    env.filters["num"] = fmt_num
    env.filters["short"] = lambda s, n=12: "" if not s else (s if len(s) <= n else s[:n] + "…")
    env.filters["sortkey"] = _sortkey
    env.filters["sig"] = _sig
    env.filters["testid"] = _testid
    return env


def render_template(name: str, **context: Any) -> str:
    """Render one of the report's templates (autoescaped) with ``context``: for pages other
    modules write, such as ``sadl select``'s gallery."""
    return _env().get_template(name).render(**context)


def _testid(value: object) -> Markup:
    """A test id that wraps only between its parts (after ``/``, ``::`` and the ``_`` between
    the words of a name, before its ``[parameters]``), never inside a word or inside the
    parameters, so a phone shows ``test_recall_per_digit`` / ``[1]``, not ``test_recall_per_digit[`` / ``1]``."""
    s = str(value)
    found = re.search(r"\[.*\]$", s)
    head, param = (s[: found.start()], s[found.start() :]) if found else (s, "")
    html = Markup("<wbr>").join(escape(part) for part in re.split(r"(?<=/)|(?<=::)|(?<=_)", head) if part)
    if param:
        html += Markup('<wbr><span class="param">') + escape(param) + Markup("</span>")
    return html


def _sig(value: object, digits: int = 6) -> str:
    """A bound for display: ``digits`` significant digits (``-55.2113``), else as is."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "?" if value is None else str(value)
    return f"{value:.{digits}g}"


def _sortkey(value: object) -> str:
    """The ``data-v`` attribute of a numeric cell: a number, or empty for missing."""
    if value is None or isinstance(value, bool):
        return ""
    if isinstance(value, (int, float)) and math.isfinite(value):
        return repr(float(value)) if isinstance(value, float) else str(value)
    return ""


def _num(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


# --------------------------------------------------------------------------- images


def _thumbnail(image: Thumbnail | None) -> str | None:
    if image is None:
        return None
    try:
        return png_data_url(image.width, image.height, 1 if image.channels is None else image.channels, image.pixels)
    except (KeyError, TypeError, ValueError):
        return None


# --------------------------------------------------------------------------- charts


_HW, _HH = 300.0, 112.0  # histogram viewBox
_HL, _HR, _HT, _HB = 48.0, 52.0, 12.0, 22.0  # margins: left (y labels, "<= lower"), right ("> upper"), top, bottom
_HY = 22.0  # right edge of the y-axis labels


def _bin_counts(values: Sequence[float], lower: float, upper: float, bins: int) -> tuple[list[int], int, int]:
    """Each bucket's count of ``values`` over ``(lower, upper]``, and how many are at or
    below ``lower`` and above ``upper``."""
    width = (upper - lower) / bins
    counts = [0] * bins
    below = above = 0
    for v in values:
        if v <= lower:
            below += 1
        elif v > upper:
            above += 1
        else:
            counts[min(bins - 1, max(0, math.ceil((v - lower) / width) - 1))] += 1
    return counts, below, above


def _histogram(values: Sequence[float], lower: float, upper: float, bins: int = HISTOGRAM_BINS) -> dict[str, Any]:
    """Geometry of one histogram of ``values`` over ``(lower, upper]``.

    Values ``<= lower`` and ``> upper`` count for no bucket; they are drawn as two
    separate, marked bars left of ``lower`` and right of ``upper``.
    """
    width = (upper - lower) / bins
    counts, below, above = _bin_counts(values, lower, upper, bins)
    peak = max([*counts, below, above, 1])
    plot_w = _HW - _HL - _HR
    plot_h = _HH - _HT - _HB
    bw = plot_w / bins
    bars = []
    for i, c in enumerate(counts):
        h = plot_h * c / peak
        lo, hi = lower + i * width, lower + (i + 1) * width
        bars.append(
            {
                "x": round(_HL + i * bw, 2),
                "y": round(_HT + plot_h - h, 2),
                "w": round(max(bw - 1.0, 0.5), 2),
                "h": round(h, 2),
                "count": c,
                "lo": f"{lo:.4g}",
                "hi": f"{hi:.4g}",
            }
        )

    def side(count: int, x: float) -> dict[str, Any]:
        h = plot_h * count / peak
        return {"count": count, "x": round(x, 2), "y": round(_HT + plot_h - h, 2), "w": 14.0, "h": round(h, 2)}

    ticks = []
    for k in range(5):
        v = lower + (upper - lower) * k / 4
        ticks.append({"x": round(_HL + plot_w * k / 4, 2), "label": f"{v:.3g}"})
    return {
        "bars": bars,
        "below": side(below, _HL - 20.0),
        "above": side(above, _HW - _HR + 8.0),
        "ticks": ticks,
        "peak": peak,
        "n": len(values),
        "lower": f"{lower:g}",
        "upper": f"{upper:g}",
        "upper_short": f"{upper:.4g}",
        "x0": _HL,
        "x1": round(_HW - _HR, 2),
        "y0": _HT,
        "y1": round(_HT + plot_h, 2),
        "w": _HW,
        "h": _HH,
        "ylab": _HY,
    }


def _by_group(
    values: list[Any], owner: list[Any], group_of_test: list[str], names: list[str]
) -> tuple[list[float], dict[str, list[float]]]:
    """The finite scores, all of them and per group of the test that fed each input."""
    per_group: dict[str, list[float]] = {name: [] for name in names}
    everything: list[float] = []
    for i, v in enumerate(values):
        fv = _num(v)
        if fv is None:
            continue
        everything.append(fv)
        group = _group_of(owner[i] if i < len(owner) else None, group_of_test)
        if group is not None:
            per_group.setdefault(group, []).append(fv)
    return everything, per_group


def _group_of(test: object, group_of_test: list[str]) -> str | None:
    """The group of the test with index ``test``; ``None`` for anything but a test's index."""
    if isinstance(test, int) and not isinstance(test, bool) and 0 <= test < len(group_of_test):
        return group_of_test[test]
    return None


def _surprise_bounds(results: Results, metric: str, key: str) -> tuple[float, float] | None:
    """A surprise coverage's (lower, upper) when its histogram can be drawn, else ``None``."""
    entry = metric_entry(results, metric)
    bounds = results.config.bounds.get(metric)
    if entry is None or not entry.applicable or bounds is None or results.inputs.get(key) is None:
        return None
    return _span(_num(bounds.lower), _num(bounds.upper))


def _span(lower: float | None, upper: float | None) -> tuple[float, float] | None:
    """(lower, upper) when both are numbers and the range is not empty."""
    if lower is None or upper is None or upper <= lower:
        return None
    return lower, upper


def _surprise(results: Results) -> list[dict[str, Any]]:
    """Histograms of LSA and DSA, all inputs first, then per group in group order."""
    out = []
    for metric, key in SURPRISE.items():
        span = _surprise_bounds(results, metric, key)
        if span is not None:
            out.append(_surprise_section(results, metric, key, span))
    return out


def _surprise_section(results: Results, metric: str, key: str, span: tuple[float, float]) -> dict[str, Any]:
    """One surprise coverage's histograms over its bounds ``span``, with its bounds and counts."""
    lower, upper = span
    entry, bounds = results.metrics[metric], results.config.bounds[metric]
    return {
        "metric": metric,
        "key": key,
        "label": SA_LABELS[key],
        "lower": f"{lower:g}",
        "upper": f"{upper:g}",
        "buckets": bounds.buckets,
        "rule": bounds.rule,
        "above": entry.above,
        "below": entry.below,
        "nan": entry.nan,
        "rows": _histogram_rows(results, key, lower, upper),
    }


def _histogram_rows(results: Results, key: str, lower: float, upper: float) -> list[dict[str, Any]]:
    """The histogram of every input's score ``key``, then (with several groups) each group's."""
    group_of_test = [t.group for t in results.tests]
    group_names: list[str] = list(dict.fromkeys([g.name for g in results.groups] + group_of_test))
    inputs = results.inputs
    everything, per_group = _by_group(inputs[key], inputs.get("test") or [], group_of_test, group_names)
    rows = [{"name": "all inputs", "all": True, "chart": _histogram(everything, lower, upper)}]
    if len(per_group) > 1:
        rows += [
            {"name": name, "all": False, "chart": _histogram(vals, lower, upper)} for name, vals in per_group.items()
        ]
    return rows


_LW, _LH = 560.0, 210.0
_LL, _LR, _LT, _LB = 40.0, 16.0, 12.0, 26.0


def _line_chart(groups: list[GroupRow], metrics: list[str]) -> dict[str, Any] | None:
    """Geometry of the cumulative coverage (Table VI) line chart, in percent."""
    if not groups:
        return None
    plot_h = _LH - _LT - _LB
    n = len(groups)
    lines = [line for m in metrics if (line := _chart_line(m, _chart_points(groups, m))) is not None]
    grid = [{"y": _chart_y(k / 4), "label": f"{k * 25}%"} for k in range(5)]
    xlabels = [
        {
            "x": _chart_x(i, n),
            "label": g.name,
            "short": _shorten(g.name, 16),
            "tiny": _shorten(g.name, max(4, 48 // max(n, 1))),
        }
        for i, g in enumerate(groups)
    ]
    return {
        "w": _LW,
        "h": _LH,
        "x0": _LL,
        "x1": round(_LW - _LR, 2),
        "y0": _LT,
        "y1": round(_LT + plot_h, 2),
        "lines": lines,
        "grid": grid,
        "xlabels": xlabels,
    }


def _chart_x(i: int, n: int) -> float:
    """The x of the ``i``-th of ``n`` groups (the middle of its slot)."""
    return round(_LL + ((_LW - _LL - _LR) * (i + 0.5) / n), 2)


def _chart_y(v: float) -> float:
    """The y of a share ``v`` (0 at the bottom, 1 at the top)."""
    return round(_LT + (_LH - _LT - _LB) * (1.0 - v), 2)


def _chart_points(groups: list[GroupRow], metric: str) -> list[dict[str, Any]]:
    """The chart's points of ``metric``: each group with a cumulative value (drawn within 0..1)."""
    n = len(groups)
    return [
        {"x": _chart_x(i, n), "y": _chart_y(min(max(v, 0.0), 1.0)), "value": v, "group": g.name}
        for i, g in enumerate(groups)
        if (v := _num(g.cumulative.get(metric))) is not None
    ]


def _chart_line(metric: str, points: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One metric's line of the chart through its ``points`` (none without points)."""
    if not points:
        return None
    return {
        "metric": metric,
        "label": METRIC_LABELS[metric],
        "points": points,
        "path": " ".join(f"{p['x']},{p['y']}" for p in points),
    }


def _shorten(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


# --------------------------------------------------------------------------- view data


def _card_status(m: str, applicable: bool, value: float | None, thr: float | None, failed: bool) -> str:
    """A card's status: not available, no threshold, below it (or failed), or passed."""
    if not applicable:
        return "n/a"
    if thr is None:
        return "none"
    return "fail" if failed or _below(m, value, thr) else "pass"


def _below(m: str, value: float | None, thr: float) -> bool:
    """Whether ``value`` is below the threshold ``thr`` (in the metric's units, to 2 places)."""
    return value is not None and round(in_units(m, value), 2) < thr


def _cards(results: Results, comparison: Comparison | None) -> list[dict[str, Any]]:
    thresholds = thresholds_of(results)
    failed = {f.metric for f in results.failures}
    cards = []
    for m in METRICS:
        entry = metric_entry(results, m)
        if entry is not None:
            card = _card(m, entry, _num(thresholds.get(m)), m in failed)
            cards.append(card | _card_delta(comparison, m))
    return cards


def _card(m: str, entry: Metric, thr: float | None, failed: bool) -> dict[str, Any]:
    """One metric's card: its value, threshold and status, what it counts and means."""
    applicable = entry.measured
    value = _num(entry.value) if applicable else None
    criterion = BY_NAME[m]
    return {
        "metric": m,
        "label": METRIC_LABELS[m],
        "title": METRIC_TITLES[m],
        "value": value,
        "text": fmt_metric(m, value),
        "percent": m not in COUNT,  # a share with a meter, else a number
        "threshold": thr,
        "status": _card_status(m, applicable, value, thr, failed),
        "reason": entry.reason if not applicable else None,
        "covered": None if m in COUNT and COUNT_PARTS.get(m, ()) is None else entry.covered,
        "total": entry.total,
        "unit": criterion.units,
        "explain": criterion.explanation,
        "above": entry.above,
        "below": entry.below,
        "nan": entry.nan,
    }


def _card_delta(comparison: Comparison | None, m: str) -> dict[str, Any]:
    """A card's change against the baseline (``None`` without one)."""
    delta = comparison.get(m) if comparison is not None else None
    if delta is None:
        return {"delta": None, "delta_status": None}
    return {"delta": delta.delta, "delta_status": delta.status}


def _applicable(results: Results, metric: str) -> bool:
    entry = metric_entry(results, metric)
    return entry is not None and entry.applicable


def _cell(t: TestRow, key: str) -> str | int | float | None:
    """One column of the tests table (:func:`_tests`) of a test."""
    for prefix, read in _PREFIXED:
        if key.startswith(prefix):
            return read(t).get(key[len(prefix) :])
    for suffix, read in _SUFFIXED:
        if key.endswith(suffix):
            return read(t).get(key[: -len(suffix)])
    if key == "redundant":
        return None if t.redundant is None else int(t.redundant)
    plain: dict[str, str | int] = {"nodeid": t.nodeid, "group": t.group, "outcome": t.outcome, "inputs": t.inputs}
    return plain[key]


def _new(t: TestRow) -> Mapping[str, int]:
    return t.new


def _unique(t: TestRow) -> Mapping[str, int]:
    return t.unique or {}


def _mean(t: TestRow) -> Mapping[str, float | None]:
    return t.mean


def _max(t: TestRow) -> Mapping[str, float | None]:
    return t.max


#: The tests table's keyed columns: a prefix or suffix of the column's key, and the test's
#: mapping the rest of the key indexes.
_PREFIXED: tuple[tuple[str, Callable[[TestRow], Mapping[str, Any]]], ...] = (("new.", _new), ("unique.", _unique))
_SUFFIXED: tuple[tuple[str, Callable[[TestRow], Mapping[str, Any]]], ...] = (("_mean", _mean), ("_max", _max))


def _test_columns(results: Results) -> list[dict[str, Any]]:
    """The tests table's columns: the test, each applicable score's mean and max, and the
    targets each of the run's metrics first covered."""
    columns: list[dict[str, Any]] = [
        {"key": "nodeid", "label": "Test", "kind": "text", "agg": "label"},
        {"key": "group", "label": "Group", "kind": "text", "agg": "none"},
        {"key": "outcome", "label": "Outcome", "kind": "text", "agg": "none"},
        {"key": "inputs", "label": "Inputs", "kind": "int", "agg": "sum"},
    ]
    for metric, key in SURPRISE.items():
        if _applicable(results, metric):
            columns += [
                {"key": f"{key}_mean", "label": f"{SA_LABELS[key]} mean", "kind": "float", "agg": "wmean"},
                {"key": f"{key}_max", "label": f"{SA_LABELS[key]} max", "kind": "float", "agg": "max"},
            ]
    return columns + _new_columns(results) + _unique_columns(results)


def _new_columns(results: Results) -> list[dict[str, Any]]:
    """The targets each of the run's metrics first covered (an inapplicable surprise coverage left out)."""
    return [
        {
            "key": f"new.{m}",
            "label": f"+{METRIC_LABELS[m]}",
            "kind": "int",
            "agg": "sum",
            "title": f"{METRIC_TITLES[m]}: targets first covered by this test",
        }
        for m in METRICS
        if metric_entry(results, m) is not None and (KINDS.get(m) != "surprise" or _applicable(results, m))
    ]


def _label(metric: str) -> str:
    """A metric's label (an unknown one's name in capitals)."""
    return METRIC_LABELS.get(metric, metric.upper())


def _unique_column(metric: str) -> dict[str, Any]:
    """The column of the targets of ``metric`` no other test covers."""
    return {
        "key": f"unique.{metric}",
        "label": f"only {_label(metric)}",
        "kind": "int",
        "agg": "sum",
        "title": f"{METRIC_TITLES.get(metric, metric.upper())}: targets no other test covers",
    }


def _unique_columns(results: Results) -> list[dict[str, Any]]:
    """Who tests what: each metric's targets no other test covers, and redundant (from the
    covered sets; none when the results carry no counts)."""
    names = list(dict.fromkeys(m for t in results.tests for m in _unique(t)))
    if not names:
        return []
    columns = [_unique_column(m) for m in names]
    said = ", ".join(_label(m) for m in names)
    columns.append(
        {
            "key": "redundant",
            "label": "Redundant",
            "kind": "flag",
            "agg": "sum",
            "title": f"covers nothing of {said} the other tests do not",
        }
    )
    return columns


def _total(agg: str, nums: list[tuple[float, float]]) -> Any:
    """One column's total over (value, inputs) pairs: a sum, a maximum, a mean weighted
    by inputs, or nothing."""
    total = _TOTALS.get(agg)
    return None if total is None else total(nums)


def _sum(nums: list[tuple[float, float]]) -> int:
    return int(sum(v for v, _ in nums)) if nums else 0


def _maximum(nums: list[tuple[float, float]]) -> float | None:
    return max(v for v, _ in nums) if nums else None


def _weighted_mean(nums: list[tuple[float, float]]) -> float | None:
    wsum = sum(w for _, w in nums)
    return sum(v * w for v, w in nums) / wsum if wsum else None


#: A column's aggregation ("agg") and how it totals (value, inputs) pairs.
_TOTALS: dict[str, Callable[[list[tuple[float, float]]], Any]] = {
    "sum": _sum,
    "max": _maximum,
    "wmean": _weighted_mean,
}


def _tests(results: Results) -> dict[str, Any]:
    columns = _test_columns(results)
    rows = [_test_row(t, columns) for t in results.tests]
    outcomes = sorted({r["outcome"] for r in rows if r["outcome"]})
    return {"columns": columns, "rows": rows, "totals": _totals(columns, rows), "outcomes": outcomes}


def _test_row(t: TestRow, columns: list[dict[str, Any]]) -> dict[str, Any]:
    """A test's row of the tests table: its cells, outcome and whether it covered nothing new."""
    cells = [{"value": _cell(t, c["key"]), "kind": c["kind"]} for c in columns]
    return {"cells": cells, "outcome": t.outcome, "idle": t.inputs > 0 and not any(t.new.values())}


def _totals(columns: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[Any]:
    """Totals of every row (the page recomputes them for the rows a filter leaves)."""
    inputs_col = next(i for i, c in enumerate(columns) if c["key"] == "inputs")
    weights = [_num(r["cells"][inputs_col]["value"]) or 0.0 for r in rows]
    return [_total(c["agg"], _weighted([r["cells"][j]["value"] for r in rows], weights)) for j, c in enumerate(columns)]


def _weighted(values: list[Any], weights: list[float]) -> list[tuple[float, float]]:
    """(value, weight) of each value that is a finite number."""
    return [(n, w) for v, w in zip(values, weights, strict=True) if (n := _num(v)) is not None]


#: With this many coverage layers or more (an EfficientNetB0 has 206), the per-layer table
#: shows the :data:`LAYERS_SHOWN` least covered ones, with a control to show every layer
#: and a search by layer name.
LAYERS_COLLAPSE_AT = 100
LAYERS_SHOWN = 20


def _neuron_metrics(results: Results) -> list[str]:
    """The run's neuron coverages, in report order (an opt-in one only when it was computed)."""
    return [m for m in NEURON if metric_entry(results, m) is not None]


def _layers(results: Results) -> list[dict[str, JSON]]:
    """The layers, least covered first, as the mappings the template indexes by metric."""
    shown = _neuron_metrics(results)

    def key(coverage: dict[str, float | None]) -> tuple[float, ...]:
        return tuple(2.0 if (v := _num(coverage.get(m))) is None else v for m in shown)

    return [lay.to_dict() for lay in sorted(results.layers, key=lambda lay: key(lay.coverage))]


def _top_inputs(results: Results) -> list[dict[str, Any]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for item in results.top_inputs:
        groups.setdefault(item.by or "lsa", []).append(_top_entry(item, results.tests))
    out = []
    for by in (*SA_LABELS, *sorted(set(groups) - set(SA_LABELS))):
        if by in groups:
            items = sorted(groups[by], key=_rank_key)
            out.append({"by": by, "label": SA_LABELS.get(by, by.upper()), "entries": items})
    return out


def _rank_key(entry: dict[str, Any]) -> tuple[bool, int]:
    """Ranked entries first, by rank."""
    return (entry["rank"] is None, entry["rank"] or 0)


def _test_of(tests: list[TestRow], index: int | None) -> dict[str, str]:
    """The test at ``index`` (its id and group), "?" for an index out of range."""
    if index is None or not 0 <= index < len(tests):
        return {"nodeid": "?", "group": "?"}
    return {"nodeid": tests[index].nodeid, "group": tests[index].group}


def _top_scores(item: TopInput) -> list[tuple[str, float, int]]:
    """A top input's scores: (label, value, digits shown), DSA with 3 digits."""
    return [(SA_LABELS[k], v, 3 if k == "dsa" else 2) for k in SA_LABELS if (v := _num(item.scores.get(k))) is not None]


def _top_entry(item: TopInput, tests: list[TestRow]) -> dict[str, Any]:
    """One top input: its rank, prediction, scores, the test that fed it (and every test
    that fed a copy of it), and its thumbnail or text."""
    ti = item.test
    fed = item.tests if item.tests is not None else [ti]
    fed_by = [_test_of(tests, t) for t in fed if t is not None and 0 <= t < len(tests)]
    return {
        "rank": item.rank,
        "input": item.input,
        "pred": item.pred,
        "scores": _top_scores(item),
        **_test_of(tests, ti),
        "fed_by": fed_by or [_test_of(tests, ti)],
        "copies": item.copies,
        "src": _thumbnail(item.image),
        "text": item.text,
    }


def _mistakes(results: Results) -> dict[str, Any] | None:
    """View data of the "does surprise predict mistakes" section (figures from the results)."""
    found = results.mistakes
    if found is None:
        return None
    overall = found.overall
    rows: list[Analysis] = [overall, *found.groups]
    classifier = overall.classifier
    keys = list(dict.fromkeys(k for r in rows for k in per_score(r, classifier)))
    return {
        "kind": overall.kind,
        "per": "auc" if classifier else "spearman",
        "columns": _score_columns(found, keys),
        "rows": [_mistakes_row(r, r is overall, classifier, keys) for r in rows],
        "fifths": [_fifths(found, key, parts) for key, parts in overall.fifths.items() if parts],
        "sentences": list(overall.sentences),
        "baseline_names": baseline_names(found),
    }


def _score_columns(found: Mistakes, keys: list[str]) -> list[dict[str, Any]]:
    """The mistakes table's score columns, the confidence baselines marked."""
    baselines = set(found.baselines)
    return [{"key": k, "label": _score_label(found, k), "baseline": k in baselines} for k in keys]


def _score_label(found: Mistakes, key: str) -> str:
    return found.labels.get(key) or SA_LABELS.get(key, key)


def _mistakes_row(r: Analysis, overall: bool, classifier: bool, keys: list[str]) -> dict[str, Any]:
    """One analysis (``overall`` or a group's) as a row of the mistakes table."""
    values = per_score(r, classifier)
    return {
        "name": r.name or "all labelled inputs",
        "all": overall,
        "labelled": r.labelled,
        "errors": r.errors,
        "error_rate": _num(r.error_rate),
        "mean_abs_error": _num(r.mean_abs_error),
        "values": [_num(values.get(k)) for k in keys],
    }


def _fifths(found: Mistakes, key: str, parts: Sequence[Fifth]) -> dict[str, Any]:
    """A score's fifths: each fifth's range of the score, inputs, accuracy and error."""
    return {
        "key": key,
        "label": _score_label(found, key),
        "parts": [
            {
                "lowest": _num(p.lowest),
                "highest": _num(p.highest),
                "inputs": p.inputs,
                "accuracy": _num(p.accuracy),
                "mae": _num(p.mean_abs_error),
            }
            for p in parts
        ],
    }


def _ood(results: Results) -> dict[str, Any] | None:
    """View data of the OOD section: each group's detection metrics per score (figures
    from the results), each group's best row marked."""
    ood = results.ood
    if ood is None:
        return None
    best = ood_best(ood.rows)
    rows = [
        {
            "group": r.group,
            "first": i == 0 or ood.rows[i - 1].group != r.group,
            "label": ood.labels.get(r.score) or SA_LABELS.get(r.score, r.score),
            "inputs": r.inputs,
            "reference_inputs": r.reference_inputs,
            "values": [_num(r.auroc), _num(r.aupr_in), _num(r.aupr_out), _num(r.fpr95)],
            "best": i in best,
        }
        for i, r in enumerate(ood.rows)
    ]
    return {"against": ood_reference(ood), "rows": rows, "sentences": list(ood.sentences), "notes": ood_notes(ood)}


def _group_cell(m: str, v: float | None, p: float | None, a: float | None) -> dict[str, Any]:
    """One cell of the cumulative table: the value, the group alone, the gain on the last."""
    gain = None if v is None or p is None else v - p
    gain_text = None
    if gain is not None:
        gain_text = f"{in_units(m, gain):+,.1f}" if m not in COUNT else f"{gain:+,.4g}"
    return {
        "value": v,
        "text": fmt_metric(m, v),
        "alone": a,
        "alone_text": None if a is None else fmt_metric(m, a),
        "gain": gain,
        "gain_text": gain_text,
    }


def _group_rows(groups: Sequence[GroupRow], group_metrics: list[str]) -> list[dict[str, Any]]:
    rows = []
    prev: dict[str, float | None] = {}
    for g in groups:
        cum = g.cumulative
        cells = [_group_cell(m, _num(cum.get(m)), _num(prev.get(m)), _num(g.metrics.get(m))) for m in group_metrics]
        rows.append({"name": g.name, "tests": g.tests, "inputs": g.inputs, "cells": cells})
        prev = cum
    return rows


def build_context(results: Results, *, comparison: Comparison | None = None) -> dict[str, Any]:
    """The plain data the template lays out (exposed for tests and other renderers): the
    one place the typed results become the mappings a template indexes (``r``,
    ``model``, ``config``, ``layers``)."""
    run = {"created": results.created, "pytest_sadl_version": results.version, "schema": SCHEMA, "version": VERSION}
    return {
        "r": run,
        "model": results.model.to_dict(),
        "config": results.config.to_dict(),
        "thresholds": thresholds_of(results),
        **_run_notes(results),
        "cards": _cards(results, comparison),
        "surprise": _surprise(results),
        **_groups_view(results.groups),
        "tests": _tests(results),
        "mistakes": _mistakes(results),
        "ood": _ood(results),
        "tests_summary": tests_summary(results),
        "surprise_metrics": [m for m in SURPRISE if m in results.config.bounds],
        "layers": _layers(results),
        "layers_shown": LAYERS_SHOWN if len(results.layers) >= LAYERS_COLLAPSE_AT else None,
        "top": _top_inputs(results),
        "comparison": comparison,
        "metric_labels": METRIC_LABELS,
        "neuron_metrics": _neuron_metrics(results),
    }


def _run_notes(results: Results) -> dict[str, Any]:
    """The verdict and what the page says before its tables: failures, warnings, missing
    and stale tests, a partial run, the hints."""
    return {
        "passed": results.passed,
        "failures": list(results.failures),
        "warnings": list(results.warnings),
        "missing": list(results.missing),
        "partial": partial_notes(results),
        "stale": list(results.stale),
        "hints": adequacy_hints(results),
    }


def _some_cumulative(groups: list[GroupRow], metric: str) -> bool:
    """Whether some group has a cumulative value of ``metric``."""
    return any(_num(g.cumulative.get(metric)) is not None for g in groups)


def _groups_view(groups: list[GroupRow]) -> dict[str, Any]:
    """Table VI's metrics, rows and chart (the percentages only: the chart's axis is a percent)."""
    group_metrics = [m for m in METRICS if _some_cumulative(groups, m)]
    return {
        "group_metrics": [{"key": m, "label": METRIC_LABELS[m]} for m in group_metrics],
        "group_rows": _group_rows(groups, group_metrics),
        "chart": _line_chart(groups, [m for m in group_metrics if m not in COUNT]),
    }


def colours() -> list[dict[str, Any]]:
    """Each criterion's colours for the page's CSS (``--c-NAME``, ``.m-NAME``), from its
    ``Criterion.colour``, in report order; a criterion without one is drawn in the
    accent colour."""
    return [
        {
            "metric": c.name,
            "light": c.colour.light,
            "dark": c.colour.dark,
            "dashed": c.colour.dashed,
            "surprise": c.kind == SURPRISE_KIND,
        }
        for c in CRITERIA
        if c.colour is not None
    ]


def _script() -> tuple[Markup, str]:
    """The page's script and its CSP source (``'sha256-…'``)."""
    js = _env().get_template("report.js").render()
    digest = base64.b64encode(hashlib.sha256(js.encode("utf-8")).digest()).decode("ascii")
    return Markup(js), Markup(f"'sha256-{digest}'")


def render_html(results: Results, *, comparison: Comparison | None = None) -> str:
    """The report of ``results`` (a validated results document) as one HTML string.

    The output depends on ``results`` (and ``comparison``) only: no clock, no paths, so
    the same file renders byte for byte the same page.
    """
    script, script_src = _script()
    css = Markup(_env().get_template("report.css").render(colours=colours()))
    ctx = build_context(results, comparison=comparison)
    return _env().get_template("report.html.j2").render(**ctx, script=script, script_src=script_src, css=css)


def write_html(results: Results, directory: str | Path, *, comparison: Comparison | None = None) -> Path:
    """Render the report into ``directory/index.html`` (atomically); return its path."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{directory} is a file; the HTML report needs a directory (it writes index.html in it)")
    return atomic_write_text(directory / "index.html", render_html(results, comparison=comparison))
