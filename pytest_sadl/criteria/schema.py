"""The results schema's per-metric entries, from the registry.

The schema of the sections is made from the dataclasses of :mod:`pytest_sadl.results`
(:func:`pytest_sadl.results.json_schema`); what depends on the criteria is made here: a
count criterion's ``metrics``, ``thresholds`` and group entries (a number, not a fraction
in [0, 1]: the dataclasses' ``additionalProperties`` cover every share), and the
``config`` entries of each surprise coverage's bounds (:class:`~pytest_sadl.results.ScBounds`)
and of every criterion's parameters.
``scripts/results_schema.py`` writes both into the shipped file (``--check`` in
``scripts/check.sh``); :func:`with_registry` gives the same for a schema in memory, so a
criterion registered from outside is validated as a built-in one. Pure Python.
"""

from __future__ import annotations

import copy
from typing import Any

from pytest_sadl.codec import DOUBLE, INTEGER, schema
from pytest_sadl.criteria.registry import CRITERIA, PARAMS, SURPRISE
from pytest_sadl.criteria.shape import COUNT_KIND, Param
from pytest_sadl.results import ScBounds

#: where, under the schema's ``properties``, each count criterion gets an entry, and which
_COUNT_PLACES: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (("thresholds",), {"type": "number", "minimum": 0, "maximum": DOUBLE}),
    (("metrics",), {"$ref": "#/$defs/count_metric"}),
    (("groups", "items", "properties", "metrics"), {"type": ["number", "null"], "minimum": 0, "maximum": DOUBLE}),
    (("groups", "items", "properties", "cumulative"), {"type": ["number", "null"], "minimum": 0, "maximum": DOUBLE}),
)

#: a surprise coverage's bounds in ``config``: :class:`pytest_sadl.results.ScBounds`'s schema
#: (``null``: not available)
BOUNDS: dict[str, Any] = {**schema(ScBounds), "type": ["object", "null"]}


def param_entry(param: Param) -> dict[str, Any]:
    """A parameter's ``config`` entry: its type and range."""
    entry: dict[str, Any] = {"description": param.description} if param.description else {}
    integer = param.type is int
    entry["type"] = "integer" if integer else "number"
    widest = INTEGER if integer else DOUBLE  # what a JSON number of the type can hold
    entry["minimum"] = _limit(param.at_least, -widest, integer)
    entry["maximum"] = _limit(param.maximum, widest, integer)
    return entry


def _limit(value: float | None, widest: float, integer: bool) -> float:
    """A parameter's limit as the schema states it (``widest`` when it has none)."""
    limit = widest if value is None else value
    return int(limit) if integer else limit


def _node(schema: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    node: dict[str, Any] = schema["properties"]
    for key in path:
        node = node[key]
    return node


def with_registry(schema: dict[str, Any], generated: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``schema`` (not changed) with its per-metric entries made from the registry.
    ``generated``: the ``config`` keys an earlier generation made (removed first, so a
    criterion or parameter taken out of the registry leaves the schema too)."""
    out = copy.deepcopy(schema)
    counts = [c.name for c in CRITERIA if c.kind == COUNT_KIND]
    for path, entry in _COUNT_PLACES:
        node = _node(out, path)
        node["properties"] = {name: copy.deepcopy(entry) for name in counts}
    config = _node(out, ("config",))
    config["properties"] = _config_properties(config["properties"], generated)
    return out


def _config_properties(properties: dict[str, Any], generated: frozenset[str]) -> dict[str, Any]:
    """The ``config`` entries: the hand-kept ones, then each surprise coverage's bounds and
    each registered parameter's (an earlier generation's ``generated`` keys dropped)."""
    made = {name: copy.deepcopy(BOUNDS) for name in SURPRISE}
    made.update({p.name: param_entry(p) for p in PARAMS})
    kept = {k: v for k, v in properties.items() if k not in made and k not in generated}
    return {**kept, **made}


def generated_keys() -> frozenset[str]:
    """The ``config`` keys :func:`with_registry` makes."""
    return frozenset(SURPRISE) | frozenset(p.name for p in PARAMS)
