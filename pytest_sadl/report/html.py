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
from collections.abc import Sequence
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
    tests_summary,
    thresholds_of,
)
from pytest_sadl.report.compare import Comparison
from pytest_sadl.report.images import png_data_url
from pytest_sadl.report.partial import partial_line, ungated_lines
from pytest_sadl.results import (
    JSON,
    SCHEMA,
    VERSION,
    Analysis,
    GroupRow,
    Results,
    TestRow,
    Thumbnail,
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


def _histogram(values: Sequence[float], lower: float, upper: float, bins: int = HISTOGRAM_BINS) -> dict[str, Any]:
    """Geometry of one histogram of ``values`` over ``(lower, upper]``.

    Values ``<= lower`` and ``> upper`` count for no bucket; they are drawn as two
    separate, marked bars left of ``lower`` and right of ``upper``.
    """
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
        t = owner[i] if i < len(owner) else None
        if isinstance(t, int) and not isinstance(t, bool) and 0 <= t < len(group_of_test):
            per_group.setdefault(group_of_test[t], []).append(fv)
    return everything, per_group


def _surprise_bounds(results: Results, metric: str, key: str) -> tuple[float, float] | None:
    """A surprise coverage's (lower, upper) when its histogram can be drawn, else ``None``."""
    entry = metric_entry(results, metric)
    bounds = results.config.bounds.get(metric)
    if entry is None or not entry.applicable or bounds is None or results.inputs.get(key) is None:
        return None
    lower, upper = _num(bounds.lower), _num(bounds.upper)
    if lower is None or upper is None or upper <= lower:
        return None
    return lower, upper


def _surprise(results: Results) -> list[dict[str, Any]]:
    """Histograms of LSA and DSA, all inputs first, then per group in group order."""
    inputs = results.inputs
    group_of_test = [t.group for t in results.tests]
    group_names: list[str] = list(dict.fromkeys([g.name for g in results.groups] + group_of_test))
    out = []
    for metric, key in SURPRISE.items():
        span = _surprise_bounds(results, metric, key)
        if span is None:
            continue
        lower, upper = span
        entry, bounds = results.metrics[metric], results.config.bounds[metric]
        everything, per_group = _by_group(inputs[key], inputs.get("test") or [], group_of_test, group_names)
        rows = [{"name": "all inputs", "all": True, "chart": _histogram(everything, lower, upper)}]
        if len(per_group) > 1:
            rows += [
                {"name": name, "all": False, "chart": _histogram(vals, lower, upper)}
                for name, vals in per_group.items()
            ]
        out.append(
            {
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
                "rows": rows,
            }
        )
    return out


_LW, _LH = 560.0, 210.0
_LL, _LR, _LT, _LB = 40.0, 16.0, 12.0, 26.0


def _line_chart(groups: list[GroupRow], metrics: list[str]) -> dict[str, Any] | None:
    """Geometry of the cumulative coverage (Table VI) line chart, in percent."""
    if not groups:
        return None
    plot_w, plot_h = _LW - _LL - _LR, _LH - _LT - _LB
    n = len(groups)

    def x(i: int) -> float:
        return round(_LL + (plot_w * (i + 0.5) / n), 2)

    def y(v: float) -> float:
        return round(_LT + plot_h * (1.0 - v), 2)

    lines = []
    for m in metrics:
        pts = []
        for i, g in enumerate(groups):
            v = _num(g.cumulative.get(m))
            if v is not None:
                pts.append({"x": x(i), "y": y(min(max(v, 0.0), 1.0)), "value": v, "group": g.name})
        if pts:
            lines.append(
                {
                    "metric": m,
                    "label": METRIC_LABELS[m],
                    "points": pts,
                    "path": " ".join(f"{p['x']},{p['y']}" for p in pts),
                }
            )
    grid = [{"y": y(k / 4), "label": f"{k * 25}%"} for k in range(5)]
    xlabels = [
        {
            "x": x(i),
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


def _shorten(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


# --------------------------------------------------------------------------- view data


def _card_status(m: str, applicable: bool, value: float | None, thr: float | None, failed: bool) -> str:
    """A card's status: not available, no threshold, below it (or failed), or passed."""
    if not applicable:
        return "n/a"
    if thr is None:
        return "none"
    if failed or (value is not None and round(in_units(m, value), 2) < thr):
        return "fail"
    return "pass"


def _cards(results: Results, comparison: Comparison | None) -> list[dict[str, Any]]:
    thresholds = thresholds_of(results)
    failed = {f.metric for f in results.failures}
    cards = []
    for m in METRICS:
        entry = metric_entry(results, m)
        if entry is None:
            continue
        applicable = entry.measured
        value = _num(entry.value) if applicable else None
        thr = _num(thresholds.get(m))
        status = _card_status(m, applicable, value, thr, m in failed)
        delta = comparison.get(m) if comparison is not None else None
        criterion = BY_NAME[m]
        cards.append(
            {
                "metric": m,
                "label": METRIC_LABELS[m],
                "title": METRIC_TITLES[m],
                "value": value,
                "text": fmt_metric(m, value),
                "percent": m not in COUNT,  # a share with a meter, else a number
                "threshold": thr,
                "status": status,
                "reason": entry.reason if not applicable else None,
                "covered": None if m in COUNT and COUNT_PARTS.get(m, ()) is None else entry.covered,
                "total": entry.total,
                "unit": criterion.units,
                "explain": criterion.explanation,
                "above": entry.above,
                "below": entry.below,
                "nan": entry.nan,
                "delta": delta.delta if delta is not None else None,
                "delta_status": delta.status if delta is not None else None,
            }
        )
    return cards


def _applicable(results: Results, metric: str) -> bool:
    entry = metric_entry(results, metric)
    return entry is not None and entry.applicable


def _cell(t: TestRow, key: str) -> str | int | float | None:
    """One column of the tests table (:func:`_tests`) of a test."""
    if key.startswith("new."):
        return t.new.get(key[4:])
    if key.endswith("_mean"):
        return t.mean.get(key[: -len("_mean")])
    if key.endswith("_max"):
        return t.max.get(key[: -len("_max")])
    plain: dict[str, str | int] = {"nodeid": t.nodeid, "group": t.group, "outcome": t.outcome, "inputs": t.inputs}
    return plain[key]


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
    for m in METRICS:
        if metric_entry(results, m) is None or (KINDS.get(m) == "surprise" and not _applicable(results, m)):
            continue
        columns.append(
            {
                "key": f"new.{m}",
                "label": f"+{METRIC_LABELS[m]}",
                "kind": "int",
                "agg": "sum",
                "title": f"{METRIC_TITLES[m]}: targets first covered by this test",
            }
        )
    return columns


def _total(agg: str, nums: list[tuple[float, float]]) -> Any:
    """One column's total over (value, inputs) pairs: a sum, a maximum, a mean weighted
    by inputs, or nothing."""
    if agg == "sum":
        return int(sum(v for v, _ in nums)) if nums else 0
    if agg == "max":
        return max(v for v, _ in nums) if nums else None
    if agg == "wmean":
        wsum = sum(w for _, w in nums)
        return sum(v * w for v, w in nums) / wsum if wsum else None
    return None


def _tests(results: Results) -> dict[str, Any]:
    columns = _test_columns(results)
    rows: list[dict[str, Any]] = []
    for t in results.tests:
        cells = [{"value": _cell(t, c["key"]), "kind": c["kind"]} for c in columns]
        rows.append({"cells": cells, "outcome": t.outcome, "idle": t.inputs > 0 and not any(t.new.values())})
    # Totals of every row (the page recomputes them for the rows a filter leaves).
    totals: list[Any] = []
    inputs_col = next(i for i, c in enumerate(columns) if c["key"] == "inputs")
    for j, c in enumerate(columns):
        vals = [(r["cells"][j]["value"], r["cells"][inputs_col]["value"]) for r in rows]
        totals.append(_total(c["agg"], [(n, _num(w) or 0.0) for v, w in vals if (n := _num(v)) is not None]))
    outcomes = sorted({r["outcome"] for r in rows if r["outcome"]})
    return {"columns": columns, "rows": rows, "totals": totals, "outcomes": outcomes}


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
    tests = results.tests

    def test_of(index: int | None) -> dict[str, str]:
        if index is None or not 0 <= index < len(tests):
            return {"nodeid": "?", "group": "?"}
        return {"nodeid": tests[index].nodeid, "group": tests[index].group}

    groups: dict[str, list[dict[str, Any]]] = {}
    for item in results.top_inputs:
        ti = item.test
        fed = item.tests if item.tests is not None else [ti]
        fed_by = [test_of(t) for t in fed if t is not None and 0 <= t < len(tests)]
        groups.setdefault(item.by or "lsa", []).append(
            {
                "rank": item.rank,
                "input": item.input,
                "pred": item.pred,
                "scores": [
                    (SA_LABELS[k], v, 3 if k == "dsa" else 2)
                    for k in SA_LABELS
                    if (v := _num(item.scores.get(k))) is not None
                ],
                **test_of(ti),
                "fed_by": fed_by or [test_of(ti)],
                "copies": item.copies,
                "src": _thumbnail(item.image),
                "text": item.text,
            }
        )
    out = []
    for by in (*SA_LABELS, *sorted(set(groups) - set(SA_LABELS))):
        if by in groups:
            items = sorted(groups[by], key=lambda it: (it["rank"] is None, it["rank"] or 0))
            out.append({"by": by, "label": SA_LABELS.get(by, by.upper()), "entries": items})
    return out


def _mistakes(results: Results) -> dict[str, Any] | None:
    """View data of the "does surprise predict mistakes" section (figures from the results)."""
    found = results.mistakes
    if found is None:
        return None
    labels = found.labels
    baselines = set(found.baselines)
    overall = found.overall
    rows: list[Analysis] = [overall, *found.groups]
    classifier = overall.classifier
    per = "auc" if classifier else "spearman"

    def values(r: Analysis) -> dict[str, float | None]:
        return r.auc if classifier else r.spearman

    keys = list(dict.fromkeys(k for r in rows for k in values(r)))
    columns = [{"key": k, "label": labels.get(k) or SA_LABELS.get(k, k), "baseline": k in baselines} for k in keys]
    table = [
        {
            "name": r.name or "all labelled inputs",
            "all": r is overall,
            "labelled": r.labelled,
            "errors": r.errors,
            "error_rate": _num(r.error_rate),
            "mean_abs_error": _num(r.mean_abs_error),
            "values": [_num(values(r).get(k)) for k in keys],
        }
        for r in rows
    ]
    fifths = [
        {
            "key": key,
            "label": labels.get(key) or SA_LABELS.get(key, key),
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
        for key, parts in overall.fifths.items()
        if parts
    ]
    return {
        "kind": overall.kind,
        "per": per,
        "columns": columns,
        "rows": table,
        "fifths": fifths,
        "sentences": list(overall.sentences),
        "baseline_names": baseline_names(found),
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
    groups = results.groups
    group_metrics = [m for m in METRICS if any(_num(g.cumulative.get(m)) is not None for g in groups)]
    group_rows = _group_rows(groups, group_metrics)
    config = results.config.to_dict()
    run = {"created": results.created, "pytest_sadl_version": results.version, "schema": SCHEMA, "version": VERSION}
    return {
        "r": run,
        "model": results.model.to_dict(),
        "config": config,
        "thresholds": thresholds_of(results),
        "passed": results.passed,
        "failures": list(results.failures),
        "warnings": list(results.warnings),
        "missing": list(results.missing),
        "partial": [p for p in [partial_line(results), *ungated_lines(results)] if p],
        "stale": list(results.stale),
        "hints": adequacy_hints(results),
        "cards": _cards(results, comparison),
        "surprise": _surprise(results),
        "group_metrics": [{"key": m, "label": METRIC_LABELS[m]} for m in group_metrics],
        "group_rows": group_rows,
        "chart": _line_chart(groups, [m for m in group_metrics if m not in COUNT]),  # percent axis
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
