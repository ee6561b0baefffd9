"""A run's results as plain data and their JSON form.

Every report renders these; none recomputes a metric. Coverage values are fractions in
[0, 1]; thresholds are percentages, as on the command line.

The file format (``docs/results-schema.md``) is described by a JSON Schema (draft
2020-12) shipped in the package as ``pytest_sadl/results.schema.json``; reading and
validating files from outside is :mod:`pytest_sadl.resultsfile`.

Versioning: ``version`` is the major version of the format. A reader refuses a newer
major version; new *optional* fields (another metric, a new section) do not change it,
and the schema allows properties it does not name, so that older readers still read
newer minor additions.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "pytest-sadl/results"
VERSION = 1

#: Limits on what a results file may hold (a real file is far inside them).


def percent(value: float | None) -> float | None:
    """The percentage a value is reported and judged as: two decimals, everywhere."""
    return None if value is None else round(value * 100.0, 2)


@dataclass
class Metric:
    value: float | None
    covered: int
    total: int
    applicable: bool = True
    below: int | None = None  # surprise coverage only: scores at or below the lower bound
    above: int | None = None  # ... above the upper bound
    count: int | None = None  # ... scores in all
    nan: int | None = None  # ... scores that are NaN (a class with no training traces)
    #: why the metric is not available (its score cannot be set up on the chosen layer);
    #: ``None`` when it is computed, or merely not applicable (DSC of a regression model)
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None or k == "value"}


@dataclass
class Failure:
    metric: str
    value: float | None
    threshold: float
    message: str


@dataclass
class Results:
    created: str
    version: str
    model: dict[str, Any]
    config: dict[str, Any]
    thresholds: dict[str, float]
    metrics: dict[str, Metric]
    layers: list[dict[str, Any]]
    groups: list[dict[str, Any]]
    tests: list[dict[str, Any]]
    inputs: dict[str, list[Any]]
    top_inputs: list[dict[str, Any]]
    failures: list[Failure] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: tests whose inputs never reached the results: ``{"nodeid", "reason"}`` (xdist crash)
    missing: list[dict[str, str]] = field(default_factory=list)
    # "does surprise predict this model's mistakes" (pytest_sadl.criteria.mistakes), when tests gave labels
    mistakes: dict[str, Any] | None = None
    #: tests whose inputs were measured on a changed model (fit, set_weights during the
    #: session), left out of every metric: ``{"nodeid", "group", "outcome", "inputs"}``
    stale: list[dict[str, Any]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def n_inputs(self) -> int:
        return len(self.inputs.get("test", []))

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = _clean(
            {
                "schema": SCHEMA,
                "version": VERSION,
                "created": self.created,
                "pytest_sadl_version": self.version,
                "model": self.model,
                "config": self.config,
                "thresholds": self.thresholds,
                "metrics": {k: m.to_dict() for k, m in self.metrics.items()},
                "layers": self.layers,
                "groups": self.groups,
                "tests": self.tests,
                "inputs": self.inputs,
                "top_inputs": self.top_inputs,
                **({"mistakes": self.mistakes} if self.mistakes is not None else {}),
                "outcome": {
                    "passed": self.passed,
                    "failures": [asdict(f) for f in self.failures],
                    "warnings": list(self.warnings),
                    "missing": list(self.missing),
                    "stale": list(self.stale),
                },
            }
        )
        return doc


def _clean(obj: Any) -> Any:
    """JSON-safe: NaN and inf become null; NumPy scalars become Python numbers."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write ``data`` as JSON atomically and durably (:mod:`pytest_sadl.atomic`)."""
    from pytest_sadl.atomic import atomic_write_text

    return atomic_write_text(path, json.dumps(data, indent=1, allow_nan=False) + "\n")


# ----------------------------------------------------------------------------- the schema
