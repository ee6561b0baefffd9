"""Reading and validating a results file (``docs/results-schema.md``), shared helpers.

Every report renders the plain ``dict`` that :func:`load_results` returns (or that the
plugin builds in memory); none recomputes a metric. The validation is deliberately
shallow: it checks what a reader must be able to rely on (the schema name, a version it
knows, the ``metrics`` mapping) and the types of the sections it reads, so that a wrong
file fails with one clear line instead of a ``KeyError`` deep in a template. Optional
sections (``groups``, ``tests``, ``inputs``, ``top_inputs``, ...) may be absent; the
renderers show what there is.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Mapping

from ..results import LABELS as METRIC_LABELS  # the metrics' names, in one place: results.py
from ..results import METRICS  # the order every report shows them
from ..results import SA_LABELS, SCHEMA, SURPRISE
from ..results import VERSION as SCHEMA_VERSION

METRIC_TITLES: dict[str, str] = {
    "lsc": "Likelihood-based surprise coverage",
    "dsc": "Distance-based surprise coverage",
    "mdsc": "Mahalanobis-distance surprise coverage",
    "nc": "Neuron coverage",
    "kmnc": "k-multisection neuron coverage",
    "nbc": "Neuron boundary coverage",
    "snac": "Strong neuron activation coverage",
}


class ResultsFileError(ValueError):
    """A results file that cannot be read: not JSON, another schema, a newer version."""


def _where(source: str | os.PathLike[str] | None) -> str:
    return f"{source}: " if source else ""


def validate_results(data: Any, *, source: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Check that ``data`` is a results document this version can render; return it.

    Raises :class:`ResultsFileError` naming the problem (and ``source``, a path, when
    given) for a document of another schema, of a newer major version, or whose
    sections have the wrong type.
    """
    where = _where(source)
    if not isinstance(data, dict):
        raise ResultsFileError(
            f"{where}not a pytest-sadl results file: expected a JSON object, got "
            f"{type(data).__name__}; write one with `pytest --sadl-coverage --sadl-report=json`"
        )
    schema = data.get("schema")
    if schema != SCHEMA:
        raise ResultsFileError(
            f"{where}not a pytest-sadl results file: \"schema\" is {schema!r}, expected "
            f"{SCHEMA!r}; write one with `pytest --sadl-coverage --sadl-report=json`"
        )
    version = data.get("version")
    if isinstance(version, bool) or not isinstance(version, (int, str)):
        raise ResultsFileError(f"{where}\"version\" is {version!r}, expected an integer")
    try:
        major = int(str(version).split(".", 1)[0])
    except ValueError:
        raise ResultsFileError(f"{where}\"version\" is {version!r}, expected an integer") from None
    if major > SCHEMA_VERSION:
        raise ResultsFileError(
            f"{where}results schema version {version} is newer than this pytest-sadl reads "
            f"(version {SCHEMA_VERSION}); upgrade pytest-sadl (`pip install -U pytest-sadl`) "
            "to render it"
        )
    if major < 1:
        raise ResultsFileError(f"{where}results schema version {version!r} is not a known version")
    metrics = data.get("metrics")
    if not isinstance(metrics, dict):
        raise ResultsFileError(f"{where}\"metrics\" must be an object of metric name to result")
    for name, entry in metrics.items():
        if not isinstance(entry, dict):
            raise ResultsFileError(f"{where}metrics.{name} must be an object, got {entry!r}")
        value = entry.get("value")
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value)):
            raise ResultsFileError(
                f"{where}metrics.{name}.value must be a number (a fraction in [0, 1]) or null, "
                f"got {value!r}"
            )
    for key, kind in (("model", dict), ("config", dict), ("thresholds", dict), ("outcome", dict),
                      ("inputs", dict), ("layers", list), ("groups", list), ("tests", list),
                      ("top_inputs", list), ("mistakes", dict)):
        if key in data and data[key] is not None and not isinstance(data[key], kind):
            expected = "an object" if kind is dict else "a list"
            raise ResultsFileError(
                f"{where}\"{key}\" must be {expected}, got {type(data[key]).__name__}"
            )
    for key in ("groups", "tests", "layers", "top_inputs"):
        for i, row in enumerate(data.get(key) or []):
            if not isinstance(row, dict):
                raise ResultsFileError(f"{where}{key}[{i}] must be an object, got {row!r}")
    return data


def load_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a results JSON file written by ``--sadl-report=json``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultsFileError(f"{p}: no such results file") from None
    except IsADirectoryError:
        raise ResultsFileError(f"{p}: is a directory, expected a results JSON file") from None
    except UnicodeDecodeError as exc:
        raise ResultsFileError(f"{p}: not UTF-8 text ({exc.reason}); is it a results JSON file?") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsFileError(
            f"{p}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    return validate_results(data, source=p)


def thresholds_of(results: Mapping[str, Any]) -> dict[str, float]:
    """The numeric thresholds of the run, in percent (non-numbers are ignored)."""
    raw = results.get("thresholds") or {}
    return {k: float(v) for k, v in raw.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)} if isinstance(raw, dict) else {}


def metric_entry(results: Mapping[str, Any], metric: str) -> dict[str, Any] | None:
    """The ``metrics`` entry of ``metric``, or None when the run has none."""
    entry = (results.get("metrics") or {}).get(metric)
    return entry if isinstance(entry, dict) else None


def metric_percent(results: Mapping[str, Any], metric: str) -> float | None:
    """The value of ``metric`` in percent, or None when absent or not applicable."""
    entry = metric_entry(results, metric)
    if entry is None or entry.get("applicable") is False or entry.get("value") is None:
        return None
    return float(entry["value"]) * 100.0


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


def tests_summary(results: Mapping[str, Any]) -> str:
    """How many marked tests fed the model, said the same way in every report."""
    tests = [t for t in results.get("tests") or [] if isinstance(t, dict)]
    fed = sum(1 for t in tests if isinstance(t.get("inputs"), int) and t["inputs"] > 0)
    text = f"{fed} of {len(tests)} marked test{'' if len(tests) == 1 else 's'} fed the model"
    if len(tests) > fed:
        idle = len(tests) - fed
        text += f" ({idle} fed nothing)"
    return text


def mistakes_rows(results: Mapping[str, Any]) -> tuple[list[str], list[list[str]]] | None:
    """The "does surprise predict mistakes" table as text cells (header, rows), overall first
    then per group, for the text reports; ``None`` without labels."""
    found = results.get("mistakes")
    if not isinstance(found, dict) or not isinstance(found.get("overall"), dict):
        return None
    labels = found.get("labels") if isinstance(found.get("labels"), dict) else {}
    overall = found["overall"]
    rows = [overall] + [g for g in found.get("groups") or [] if isinstance(g, dict)]
    classifier = overall.get("kind") == "classifier"
    per = "auc" if classifier else "spearman"
    keys = list(dict.fromkeys(k for r in rows if isinstance(r.get(per), dict) for k in r[per]))
    header = ["inputs", "labelled", "error rate" if classifier else "mean abs error"]
    header += [f"{labels.get(k, k)} {'AUC' if classifier else 'rho'}" for k in keys]
    table = []
    for r in rows:
        err = fmt_pct(r.get("error_rate"), 1) if classifier else fmt_num(r.get("mean_abs_error"), 4)
        table.append([str(r.get("name") or "all labelled"), str(r.get("labelled", "?")), err]
                     + [fmt_num((r.get(per) or {}).get(k), 2) for k in keys])
    return header, table


def _values(results: Mapping[str, Any], key: str) -> list[float]:
    inputs = results.get("inputs") or {}
    return [float(v) for v in (inputs.get(key) or []) if isinstance(v, (int, float))
            and not isinstance(v, bool)]


def adequacy_hints(results: Mapping[str, Any]) -> list[str]:
    """Plain-text observations that say what would improve the tests, most useful first.

    Derived from the results only (missed thresholds, how much of the surprise range the
    inputs reach, inputs above the upper bound, groups and tests that add nothing, the
    least-covered layer); no metric is recomputed. The renderers escape the text.
    """
    hints: list[str] = []
    outcome = results.get("outcome") or {}
    for failure in outcome.get("failures") or []:
        if isinstance(failure, dict) and failure.get("message"):
            hints.append(f"Threshold missed: {str(failure['message']).rstrip('.')}.")
    config = results.get("config") or {}
    for metric, key in SURPRISE.items():
        name = SA_LABELS[key]
        entry = metric_entry(results, metric)
        bounds = config.get(metric)
        if entry is None or entry.get("applicable") is False or not isinstance(bounds, dict):
            continue
        lower, upper = bounds.get("lower"), bounds.get("upper")
        if not isinstance(lower, (int, float)) or not isinstance(upper, (int, float)) or upper <= lower:
            continue
        values = _values(results, key)
        inside = [v for v in values if lower < v <= upper]
        if inside:
            reach = (max(inside) - lower) / (upper - lower)
            if reach < 0.75:
                hints.append(
                    f"The recorded {name} values reach {max(inside):.3g}, {reach * 100:.0f}% of "
                    f"the way through ({lower:g}, {upper:g}]: {METRIC_LABELS[metric]} buckets "
                    f"above {max(inside):.3g} are out of reach of these tests; more diverse or "
                    "adversarial inputs would cover them."
                )
        below = entry.get("below")
        if isinstance(below, int) and below > 0:
            hints.append(
                f"{below} input{'s' if below != 1 else ''} had {name} at or below the lower bound "
                f"{lower:g} and cover no {METRIC_LABELS[metric]} bucket"
                + ("; LSA is negative wherever the density is above 1, so a lower bound of 0 "
                   "can leave typical inputs out." if key == "lsa" and lower >= 0 else ".")
            )
        above = entry.get("above")
        if isinstance(above, int) and above > 0:
            hints.append(
                f"{above} input{'s' if above != 1 else ''} had {name} above the upper bound "
                f"{upper:g} and cover no {METRIC_LABELS[metric]} bucket; if such inputs are "
                "expected, raise the upper bound (runs with other bounds do not compare)."
            )
    groups = [g for g in results.get("groups") or [] if isinstance(g, dict)]
    prev: dict[str, Any] = {}
    for i, group in enumerate(groups):
        cum = group.get("cumulative") or {}
        if i > 0:
            gains = [(cum.get(m) or 0) - (prev.get(m) or 0) for m in METRICS
                     if isinstance(cum.get(m), (int, float))]
            if gains and max(gains) < 0.01:
                hints.append(
                    f"Group {group.get('name')!s} adds less than 1 point to any cumulative "
                    "metric: its inputs behave like those of earlier groups."
                )
        prev = cum
    if len(groups) > 1:
        best_of: dict[str, list[str]] = {}
        for metric in SURPRISE:
            gains = []
            before = 0.0
            for group in groups:
                v = (group.get("cumulative") or {}).get(metric)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    gains.append((v - before, str(group.get("name"))))
                    before = v
            if len(gains) > 1:
                gain, name = max(gains[1:], key=lambda g: g[0])  # the first group starts from nothing
                if gain >= 0.01:
                    best_of.setdefault(name, []).append(f"{METRIC_LABELS[metric]} (+{gain * 100:.1f} points)")
        for name, what in best_of.items():
            hints.append(
                f"Group {name} added the most {_and(what)} after the first group: more "
                "inputs of that kind are the likeliest to cover further surprise buckets."
            )
    tests = [t for t in results.get("tests") or [] if isinstance(t, dict)]
    idle = [t for t in tests if (t.get("inputs") or 0) > 0 and isinstance(t.get("new"), dict)
            and not any(v for v in t["new"].values() if isinstance(v, (int, float)))]
    if idle:
        hints.append(
            f"{len(idle)} of {len(tests)} tests covered no new bucket or neuron: they repeat "
            "what earlier tests exercised (sort the test table by a \"new\" column)."
        )
    layers = [lay for lay in results.get("layers") or [] if isinstance(lay, dict)
              and isinstance(lay.get("nc"), (int, float))]
    if len(layers) > 1:
        worst = min(layers, key=lambda lay: (lay["nc"], lay.get("kmnc") or 0))
        hints.append(
            f"Layer {worst.get('name')!s} is the least covered (NC {worst['nc'] * 100:.2f}%): "
            "inputs that activate its neurons would raise neuron coverage most."
        )
    return hints
