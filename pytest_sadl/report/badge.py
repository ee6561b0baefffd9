"""A JSON summary small enough for a badge, in shields.io's endpoint format.

:func:`render_badge` gives one metric as a shields.io *endpoint* document
(``https://img.shields.io/endpoint?url=…`` renders it). :func:`render_badges` gives every
metric in one file, ``{"lsc": {endpoint}, "dsc": {...}, ...}``; shields.io's *dynamic
JSON* badge reads one of them with ``query=$.lsc.message``, and a script can pick one
entry and publish it as an endpoint.

The colour follows the threshold when there is one (green: met, red: missed);
without a threshold it follows the value on shields' usual scale.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from pytest_sadl.atomic import atomic_write_text
from pytest_sadl.report._load import METRIC_LABELS, METRICS, metric_entry

__all__ = ["render_badge", "render_badges", "write_badge"]

_SCALE = ((90.0, "brightgreen"), (75.0, "green"), (60.0, "yellowgreen"), (40.0, "yellow"),
          (20.0, "orange"), (0.0, "red"))


def _color(percent: float, threshold: float | None) -> str:
    if threshold is not None:
        return "brightgreen" if round(percent, 2) >= threshold else "red"
    for bound, color in _SCALE:
        if percent >= bound:
            return color
    return "red"


def render_badge(results: Mapping[str, Any], metric: str = "lsc") -> dict[str, Any]:
    """The shields.io endpoint document of ``metric`` (``"lsc"``, ``"dsc"``, ``"nc"``, ...).

    Raises ValueError for an unknown metric. A metric the run does not have or that
    does not apply (DSC of a regression model) gives a grey ``n/a`` badge.
    """
    key = metric.lower()
    if key not in METRICS:
        raise ValueError(f"unknown metric {metric!r} for a badge; known metrics are "
                         f"{', '.join(METRICS)}")
    label = METRIC_LABELS[key]
    entry = metric_entry(results, key)
    if entry is None or entry.get("applicable") is False or entry.get("value") is None:
        return {"schemaVersion": 1, "label": label, "message": "n/a", "color": "lightgrey"}
    percent = float(entry["value"]) * 100.0
    thr = (results.get("thresholds") or {}).get(key)
    thr = float(thr) if isinstance(thr, (int, float)) and not isinstance(thr, bool) else None
    message = f"{percent:.1f}%"
    return {"schemaVersion": 1, "label": label, "message": message, "color": _color(percent, thr)}


def render_badges(results: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """One endpoint document per metric the run has, keyed by metric name."""
    return {m: render_badge(results, m) for m in METRICS if metric_entry(results, m) is not None}


def write_badge(results: Mapping[str, Any], path: str | os.PathLike[str],
                metric: str | None = None) -> Path:
    """Write the badge JSON to ``path`` atomically: one metric's endpoint, or all of them."""
    doc: Any = render_badges(results) if metric is None else render_badge(results, metric)
    return atomic_write_text(path, json.dumps(doc, indent=2, sort_keys=False) + "\n")
