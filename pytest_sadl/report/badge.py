"""Badges: one shields.io *endpoint* document per metric.

:func:`render_badge` gives one metric as a shields.io endpoint document
(``https://img.shields.io/endpoint?url=…`` renders it); :func:`write_badges` writes one
file per metric the run has, ``sadl-badge-lsc.json``, ``sadl-badge-nc.json``, ... in a
folder (``--sadl-report=badge[:DIR]``), each one a complete endpoint that shields.io reads
as it is. :func:`render_badges` is the same documents by metric, for scripts.

The colour follows the threshold when there is one (green: met, red: missed);
without a threshold it follows the value on shields' usual scale.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pytest_sadl.atomic import atomic_write_text
from pytest_sadl.criteria.registry import COUNT, METRICS
from pytest_sadl.criteria.registry import LABELS as METRIC_LABELS
from pytest_sadl.report._load import fmt_metric, metric_entry
from pytest_sadl.report.partial import badge_label
from pytest_sadl.results import Results

#: A shields.io endpoint document: ``schemaVersion`` (1), ``label``, ``message``, ``color``.
Badge = dict[str, int | str]

__all__ = ["BADGE_FILE", "render_badge", "render_badges", "write_badge", "write_badges"]

#: The file of one metric's badge in the badge folder.
BADGE_FILE = "sadl-badge-{metric}.json"

_SCALE = (
    (90.0, "brightgreen"),
    (75.0, "green"),
    (60.0, "yellowgreen"),
    (40.0, "yellow"),
    (20.0, "orange"),
    (0.0, "red"),
)


def _color(percent: float, threshold: float | None) -> str:
    if threshold is not None:
        return "brightgreen" if round(percent, 2) >= threshold else "red"
    for bound, color in _SCALE:
        if percent >= bound:
            return color
    return "red"


def render_badge(results: Results, metric: str = "lsc") -> Badge:
    """The shields.io endpoint document of ``metric`` (``"lsc"``, ``"dsc"``, ``"nc"``, ...).

    Raises ValueError for an unknown metric. A metric the run does not have or that
    does not apply (DSC of a regression model) gives a grey ``n/a`` badge.
    """
    key = metric.lower()
    if key not in METRICS:
        raise ValueError(f"unknown metric {metric!r} for a badge; known metrics are {', '.join(METRICS)}")
    label = badge_label(results, METRIC_LABELS[key])
    entry = metric_entry(results, key)
    if entry is None or entry.value is None or not entry.applicable:
        return {"schemaVersion": 1, "label": label, "message": "n/a", "color": "lightgrey"}
    given = results.thresholds.get(key)
    thr = None if given is None else float(given)
    if key in COUNT:  # a number, not a share: coloured only by its threshold
        return _count_badge(key, label, float(entry.value), thr)
    percent = float(entry.value) * 100.0
    message = f"{percent:.1f}%"
    return {"schemaVersion": 1, "label": label, "message": message, "color": _color(percent, thr)}


def _count_badge(key: str, label: str, number: float, thr: float | None) -> Badge:
    """A count criterion's badge (a number, not a share): blue, or by its threshold."""
    color = "blue" if thr is None else ("brightgreen" if round(number, 2) >= thr else "red")
    return {"schemaVersion": 1, "label": label, "message": fmt_metric(key, number), "color": color}


def render_badges(results: Results) -> dict[str, Badge]:
    """One endpoint document per metric the run has, keyed by metric name."""
    return {m: render_badge(results, m) for m in METRICS if metric_entry(results, m) is not None}


def write_badge(results: Results, path: str | os.PathLike[str], metric: str) -> Path:
    """Write one metric's endpoint document to ``path`` atomically."""
    return atomic_write_text(path, json.dumps(render_badge(results, metric), indent=2) + "\n")


def write_badges(results: Results, directory: str | os.PathLike[str]) -> Path:
    """Write :data:`BADGE_FILE` for every metric the run has into ``directory`` (made when
    missing), each atomically; returns the folder. A path that exists and is not a folder
    is refused (the badges are several files)."""
    folder = Path(directory)
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(
            f"{folder}: the badges are one file per metric ({BADGE_FILE.format(metric='lsc')}, ...); "
            "give a folder (badge:DIR), not a file"
        )
    folder.mkdir(parents=True, exist_ok=True)
    for metric, doc in render_badges(results).items():
        atomic_write_text(folder / BADGE_FILE.format(metric=metric), json.dumps(doc, indent=2) + "\n")
    return folder
