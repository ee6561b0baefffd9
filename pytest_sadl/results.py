"""A run's results as plain data, their JSON form and its JSON Schema, in one place.

Every report renders these; none recomputes a metric. Coverage values are fractions in
[0, 1]; thresholds are percentages, as on the command line.

The file format (``docs/results-schema.md``) is described by :data:`JSON_SCHEMA`, a JSON
Schema (draft 2020-12) published as ``docs/results-schema.json`` (written by
``python -m pytest_sadl.results > docs/results-schema.json``; a test keeps the two
equal). :func:`load_results` reads a file from outside (a baseline, ``sadl report``'s
input) through :func:`parse_json`, which bounds the nesting depth and the size of every
number before anything else sees the data, and then validates it against the schema
with ``jsonschema``: a hostile or type-confused file is one
:class:`ResultsFileError` line naming the file and the field, never a traceback.

Versioning: ``version`` is the major version of the format. A reader refuses a newer
major version; new *optional* fields (another metric, a new section) do not change it,
and the schema allows properties it does not name, so that older readers still read
newer minor additions.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "pytest-sadl/results"
VERSION = 1
METRICS = ("lsc", "dsc", "mdsc", "nc", "kmnc", "nbc", "snac")
LABELS = {"lsc": "LSC", "dsc": "DSC", "mdsc": "MDSC", "nc": "NC", "kmnc": "KMNC", "nbc": "NBC", "snac": "SNAC"}
# The surprise coverages and the per-input surprise each buckets (results' "inputs" keys),
# in report order; every other metric is a neuron coverage. Adding a surprise measure is
# one entry here (and its scorer in the engine).
SURPRISE = {"lsc": "lsa", "dsc": "dsa", "mdsc": "mdsa"}
SA_LABELS = {"lsa": "LSA", "dsa": "DSA", "mdsa": "MDSA"}
KINDS = {m: ("surprise" if m in SURPRISE else "neuron") for m in METRICS}
NEURON = tuple(m for m in METRICS if KINDS[m] == "neuron")  # the neuron coverages, in report order

#: Limits on what a results file may hold (a real file is far inside them).
MAX_DEPTH = 32  # nesting of objects and arrays; a results file nests 5 deep
MAX_INT = 2**53  # integers beyond what a double holds exactly are not counts of anything
MAX_FLOAT = 1.7976931348623157e308  # every number has a range: inf and 400-digit integers fail it
MAX_BYTES = 512 * 1024 * 1024  # a results file of a million inputs is ~60 MB


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
    # "does surprise predict this model's mistakes" (pytest_sadl.mistakes), when tests gave labels
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
        return _clean(
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
    from .atomic import atomic_write_text

    return atomic_write_text(path, json.dumps(data, indent=1, allow_nan=False) + "\n")


# ----------------------------------------------------------------------------- the schema

_FRACTION = {"type": "number", "minimum": 0, "maximum": 1}
_FRACTION_OR_NULL = {"type": ["number", "null"], "minimum": 0, "maximum": 1}
_PERCENT = {"type": "number", "minimum": 0, "maximum": 100}
_COUNT = {"type": "integer", "minimum": 0, "maximum": MAX_INT}
_COUNT_OR_NULL = {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_INT}
_NUMBER = {"type": "number", "minimum": -MAX_FLOAT, "maximum": MAX_FLOAT}
_NUMBER_OR_NULL = {"type": ["number", "null"], "minimum": -MAX_FLOAT, "maximum": MAX_FLOAT}
_TEXT = {"type": "string", "maxLength": 100_000}
_TEXT_OR_NULL = {"type": ["string", "null"], "maxLength": 100_000}
_LAYER_NAMES = {"type": "array", "items": _TEXT}
_PER_METRIC = {"type": "object", "additionalProperties": _FRACTION_OR_NULL}
_BOUNDS = {
    "type": ["object", "null"],
    "properties": {"lower": _NUMBER_OR_NULL, "upper": _NUMBER_OR_NULL, "buckets": _COUNT, "rule": _TEXT},
}

_MISTAKES_ROW = {
    "type": "object",
    "properties": {
        "name": _TEXT_OR_NULL,
        "kind": _TEXT,
        "labelled": _COUNT_OR_NULL,
        "errors": _COUNT_OR_NULL,
        "error_rate": _FRACTION_OR_NULL,
        "mean_abs_error": _NUMBER_OR_NULL,
        "auc": {"type": "object", "additionalProperties": _FRACTION_OR_NULL},
        "spearman": {"type": "object", "additionalProperties": {"type": ["number", "null"], "minimum": -1, "maximum": 1}},
        "fifths": {
            "type": "object",
            "additionalProperties": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"lowest": _NUMBER_OR_NULL, "highest": _NUMBER_OR_NULL, "inputs": _COUNT,
                                   "accuracy": _FRACTION_OR_NULL, "mean_abs_error": _NUMBER_OR_NULL},
                },
            },
        },
        "scored": {"type": "object", "additionalProperties": _COUNT},
        "sentences": {"type": "array", "items": _TEXT},
    },
}

#: The results format, version 1, as a JSON Schema (draft 2020-12). Objects allow
#: properties the schema does not name (additions within a major version).
JSON_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://github.com/pytest-sadl/pytest-sadl/docs/results-schema.json",
    "title": "pytest-sadl results",
    "description": "A run's surprise adequacy and neuron coverage (pytest --sadl-report=json). "
    "Coverage values are fractions in [0, 1]; thresholds are percentages.",
    "type": "object",
    "required": ["schema", "version", "metrics"],
    "properties": {
        "schema": {"const": SCHEMA},
        "version": {
            "description": "the major version (an integer), or \"MAJOR.MINOR\"; readers refuse a newer major",
            "type": ["integer", "string"], "minimum": 1, "pattern": "^[0-9]{1,9}([.][0-9]{1,9})?$",
        },
        "created": _TEXT,
        "pytest_sadl_version": _TEXT,
        "model": {
            "type": "object",
            "properties": {
                "name": _TEXT_OR_NULL,
                "source": _TEXT_OR_NULL,
                "fingerprint": _TEXT_OR_NULL,
                "profile_fingerprint": _TEXT_OR_NULL,
                "classifier": {"type": "boolean"},
                "n_classes": _COUNT_OR_NULL,
                "input_shape": {"type": "array", "items": _COUNT_OR_NULL},
                "n_train": _COUNT,
            },
        },
        "config": {
            "type": "object",
            "properties": {
                "sa_layers": _LAYER_NAMES,
                "coverage_layers": _LAYER_NAMES,
                "nc_threshold": {"type": "number", "minimum": 0, "maximum": 1},
                "kmnc_k": _COUNT,
                "var_threshold": {"type": "number", "minimum": 0, "maximum": MAX_FLOAT},
                "lsc": _BOUNDS,
                "dsc": _BOUNDS,
                "mdsc": _BOUNDS,
            },
        },
        "thresholds": {"type": "object", "additionalProperties": _PERCENT},
        "metrics": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["value"],
                "properties": {
                    "value": _FRACTION_OR_NULL,
                    "covered": _COUNT_OR_NULL,
                    "total": _COUNT_OR_NULL,
                    "applicable": {"type": "boolean"},
                    "below": _COUNT_OR_NULL,
                    "above": _COUNT_OR_NULL,
                    "count": _COUNT_OR_NULL,
                    "nan": _COUNT_OR_NULL,
                },
            },
        },
        "layers": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": _TEXT, "neurons": _COUNT},
                "additionalProperties": _FRACTION_OR_NULL,
            },
        },
        "groups": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": _TEXT,
                    "tests": _COUNT,
                    "inputs": _COUNT,
                    "metrics": _PER_METRIC,
                    "cumulative": _PER_METRIC,
                },
            },
        },
        "tests": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "nodeid": _TEXT,
                    "group": _TEXT,
                    "outcome": _TEXT,
                    "inputs": _COUNT,
                    "lsa_mean": _NUMBER_OR_NULL,
                    "lsa_max": _NUMBER_OR_NULL,
                    "dsa_mean": _NUMBER_OR_NULL,
                    "dsa_max": _NUMBER_OR_NULL,
                    "mdsa_mean": _NUMBER_OR_NULL,
                    "mdsa_max": _NUMBER_OR_NULL,
                    "new": {"type": "object", "additionalProperties": _COUNT_OR_NULL},
                },
            },
        },
        "inputs": {
            "type": "object",
            "properties": {
                "test": {"type": "array", "items": _COUNT},
                "pred": {"type": "array", "items": _COUNT_OR_NULL},
                "lsa": {"type": "array", "items": _NUMBER_OR_NULL},
                "dsa": {"type": "array", "items": _NUMBER_OR_NULL},
                "mdsa": {"type": "array", "items": _NUMBER_OR_NULL},
                "label": {"type": "array", "description": "the label a test gave each input (sadl_labels), or null"},
            },
        },
        "top_inputs": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "by": _TEXT,
                    "rank": _COUNT,
                    "input": _COUNT,
                    "test": _COUNT,
                    "tests": {"type": "array", "items": _COUNT},
                    "copies": _COUNT,
                    "pred": _COUNT_OR_NULL,
                    "lsa": _NUMBER_OR_NULL,
                    "dsa": _NUMBER_OR_NULL,
                    "mdsa": _NUMBER_OR_NULL,
                    "image": {
                        "type": ["object", "null"],
                        "required": ["height", "width", "pixels"],
                        "properties": {
                            "height": {"type": "integer", "minimum": 1, "maximum": 4096},
                            "width": {"type": "integer", "minimum": 1, "maximum": 4096},
                            "channels": {"enum": [1, 3, 4]},
                            "pixels": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 255}},
                        },
                    },
                },
            },
        },
        "mistakes": {
            "description": "does surprise predict the model's mistakes (only when tests gave labels)",
            "type": ["object", "null"],
            "properties": {
                "overall": _MISTAKES_ROW,
                "groups": {"type": "array", "items": _MISTAKES_ROW},
                "labels": {"type": "object", "additionalProperties": _TEXT},
                "baselines": {"type": "array", "items": _TEXT},
            },
        },
        "outcome": {
            "type": "object",
            "properties": {
                "passed": {"type": "boolean"},
                "failures": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "metric": _TEXT,
                            "value": _NUMBER_OR_NULL,
                            "threshold": _NUMBER,
                            "message": _TEXT,
                        },
                    },
                },
                "warnings": {"type": "array", "items": _TEXT},
                "missing": {
                    "description": "tests whose recorded inputs never reached the results "
                    "(a pytest-xdist worker crashed while running them)",
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["nodeid"],
                        "properties": {"nodeid": _TEXT, "reason": _TEXT},
                    },
                },
                "stale": {
                    "description": "tests that ended on a model changed since the profile's was bound "
                    "(fit, set_weights, load_weights, a new layer during the session): their inputs "
                    "count in no metric, group or test row",
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["nodeid", "inputs"],
                        "properties": {"nodeid": _TEXT, "group": _TEXT, "outcome": _TEXT, "inputs": _COUNT},
                    },
                },
            },
        },
    },
}


class ResultsFileError(ValueError):
    """A results file that cannot be used: unreadable, not JSON, another schema, a newer
    version, or a field of the wrong type or out of its range. The message is one line
    naming the file and the field."""


def _where(source: str | os.PathLike[str] | None) -> str:
    return f"{source}: " if source else ""


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _reject_number(text: str) -> Any:
    raise ResultsFileError(f"{text} is not allowed: a results file holds finite numbers only")


_STRUCTURE = re.compile(r'[\[\]{}"\\]')


def _check_depth(text: str, limit: int = MAX_DEPTH) -> None:
    """Refuse a document nested deeper than ``limit`` before parsing it: the parser and the
    validator recurse, so 200,000 nested arrays would end in ``RecursionError``."""
    depth = 0
    in_string = False
    escaped_at = -1  # the position of the character a backslash escapes
    for match in _STRUCTURE.finditer(text):
        pos, ch = match.start(), match.group()
        if in_string:
            if pos == escaped_at:
                continue
            if ch == "\\":
                escaped_at = pos + 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                raise ResultsFileError(f"nested more than {limit} levels deep (a results file nests 5)")
        elif ch in "]}":
            depth -= 1


def parse_json(text: str) -> Any:
    """``json.loads`` for a file from outside: nesting at most :data:`MAX_DEPTH` levels, no
    NaN/Infinity. Numbers beyond the float range (``1e999`` parses as inf, a 400-digit
    integer as an exact int) are left to the schema, whose every number has a range, so
    that the error names the field. Raises :class:`ResultsFileError` (without a file name)."""
    _check_depth(text)
    try:
        return json.loads(text, parse_constant=_reject_number)
    except json.JSONDecodeError as exc:
        raise ResultsFileError(f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except ValueError as exc:  # an integer of more than 4300 digits (sys.get_int_max_str_digits)
        raise ResultsFileError(f"not a results file: {str(exc).split(';')[0]}") from None


def _field(path: Any) -> str:
    """``metrics.lsc.value``, ``groups[0].name``: where in the document."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the document"


_JSON_TYPES = {"object": "an object", "array": "a list", "string": "a string", "number": "a number",
               "integer": "an integer", "boolean": "true or false", "null": "null"}


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    for kind, name in (((dict,), "an object"), ((list,), "a list"), ((str,), "a string"),
                       ((int,), "an integer"), ((float,), "a number"), ((type(None),), "null")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _explain(error: Any) -> str:
    """One line for a ``jsonschema.ValidationError``: the field, what it must be, what it is."""
    where, value, rule, expected = _field(error.absolute_path), error.instance, error.validator, error.validator_value
    if rule == "type":
        kinds = expected if isinstance(expected, list) else [expected]
        wanted = " or ".join(_JSON_TYPES.get(k, k) for k in kinds)
        shown = "" if value is None or isinstance(value, bool) else f" {_short(value)}"
        return f"{where} must be {wanted}, got {_type_name(value) if value is not None else 'null'}{shown}"
    if rule in ("minimum", "maximum"):
        schema = error.schema
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None and high is not None:
            if high == MAX_INT:
                return f"{where} must be a count (an integer >= {low}), got {_short(value)}"
            what = "a fraction in [0, 1]" if (low, high) == (0, 1) else f"in [{low:g}, {high:g}]"
            return f"{where} must be {what}, got {_short(value)}"
        return f"{where} must be {'>=' if rule == 'minimum' else '<='} {expected:g}, got {_short(value)}"
    if rule == "required":
        missing = [k for k in expected if isinstance(value, dict) and k not in value]
        return f"{where} has no {_short(missing[0] if missing else expected)} (required)"
    if rule == "const":
        return f"{where} is {_short(value)}, expected {_short(expected)}"
    if rule == "maxLength":
        return f"{where} is a string of {len(value)} characters, more than {expected}"
    if rule == "enum":
        return f"{where} must be one of {', '.join(map(str, expected))}, got {_short(value)}"
    return f"{where}: {error.message[:200]}"


_SCALAR_KEYS = {"type", "minimum", "maximum"}


def _suspects(items: dict[str, Any], values: list[Any]) -> Any:
    """Indices of ``values`` that may fail ``items`` (a type and range only): a superset of
    those that do, found with a set lookup per value and C-level min/max."""
    kinds = items["type"] if isinstance(items["type"], list) else [items["type"]]
    allowed = {t for k in kinds for t in {"number": (int, float), "integer": (int,), "null": (type(None),),
                                          "string": (str,), "boolean": (bool,)}.get(k, ())}
    present = set(map(type, values))
    if not present <= allowed:
        yield from (i for i, v in enumerate(values) if type(v) not in allowed)
    low, high = items.get("minimum"), items.get("maximum")
    if (low is None and high is None) or not present & {int, float}:
        return
    numbers = values if present <= {int, float} else [v for v in values if type(v) in (int, float)]
    if (low is not None and min(numbers) < low) or (high is not None and max(numbers) > high):
        yield from (i for i, v in enumerate(values) if type(v) in (int, float)
                    and ((low is not None and v < low) or (high is not None and v > high)))


def _make_validator() -> Any:
    """``jsonschema``'s draft 2020-12 validator, with ``items`` of plain scalars (the
    ``inputs`` lists, thumbnail pixels: 10^5 to 10^6 values) screened by a set of their
    types and C-level min/max: the generic path costs ~20 us a value (17 s for a file of
    200,000 inputs; 0.6 s screened, of which 0.2 s is parsing the JSON). Each suspect
    goes through the generic path, so an error is jsonschema's own."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    generic_items = base.VALIDATORS["items"]

    def items(validator: Any, item_schema: Any, instance: Any, schema: dict[str, Any]) -> Any:
        if (isinstance(item_schema, dict) and "type" in item_schema and set(item_schema) <= _SCALAR_KEYS
                and isinstance(instance, list) and not schema.get("prefixItems")):
            for i in _suspects(item_schema, instance):
                errors = list(validator.descend(instance=instance[i], schema=item_schema, path=i))
                if errors:  # a float 2.0 is an integer to JSON Schema: a suspect, not an error
                    yield errors[0]
                    return
            return
        yield from generic_items(validator, item_schema, instance, schema)

    return jsonschema.validators.extend(base, {"items": items})(JSON_SCHEMA)


_validator: Any = None


def validate_results(data: Any, *, source: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Check ``data`` against :data:`JSON_SCHEMA`; return it.

    Raises :class:`ResultsFileError` naming ``source`` (a path, when given) and the first
    field that breaks the schema, with a hint for another schema or a newer version.
    """
    global _validator
    where = _where(source)
    if not isinstance(data, dict):
        raise ResultsFileError(
            f"{where}not a pytest-sadl results file: expected a JSON object, got "
            f"{_type_name(data)}; write one with `pytest --sadl-coverage --sadl-report=json`"
        )
    if data.get("schema") != SCHEMA:
        raise ResultsFileError(
            f"{where}not a pytest-sadl results file: \"schema\" is {_short(data.get('schema'))}, expected "
            f"{SCHEMA!r}; write one with `pytest --sadl-coverage --sadl-report=json`"
        )
    version = data.get("version")
    major = str(version).split(".", 1)[0] if isinstance(version, (int, str)) and not isinstance(version, bool) else ""
    if not major.isdigit() or len(major) > 9:
        raise ResultsFileError(f"{where}\"version\" is {_short(version)}, expected an integer")
    if int(major) > VERSION:
        raise ResultsFileError(
            f"{where}results schema version {version} is newer than this pytest-sadl reads "
            f"(version {VERSION}); upgrade pytest-sadl (`pip install -U pytest-sadl`) to render it"
        )
    if int(major) < 1:
        raise ResultsFileError(f"{where}results schema version {version!r} is not a known version")
    if _validator is None:
        _validator = _make_validator()
    from jsonschema.exceptions import best_match

    error = best_match(_validator.iter_errors(data))
    if error is not None:
        raise ResultsFileError(f"{where}{_explain(error)}")
    return data


def load_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a results JSON file (``--sadl-report=json``) from outside.

    Raises :class:`ResultsFileError`, one line naming the file (and the field)."""
    p = Path(path)
    try:
        if not p.is_file():
            what = "no such results file" if not p.exists() else (
                "is a directory" if p.is_dir() else "not a regular file (a FIFO, a device?)")
            raise ResultsFileError(f"{p}: {what}, expected a results JSON file")
        if p.stat().st_size > MAX_BYTES:
            raise ResultsFileError(f"{p}: {p.stat().st_size} bytes, more than a results file holds ({MAX_BYTES})")
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ResultsFileError(f"{p}: not UTF-8 text ({exc.reason}); is it a results JSON file?") from None
    except OSError as exc:
        raise ResultsFileError(f"{p}: cannot be read ({exc.strerror or exc})") from None
    try:
        data = parse_json(text)
    except ResultsFileError as exc:
        raise ResultsFileError(f"{p}: {exc}") from None
    return validate_results(data, source=p)


def schema_json() -> str:
    """The text of ``docs/results-schema.json``."""
    return json.dumps(JSON_SCHEMA, indent=2) + "\n"


if __name__ == "__main__":  # python -m pytest_sadl.results > docs/results-schema.json
    print(schema_json(), end="")
