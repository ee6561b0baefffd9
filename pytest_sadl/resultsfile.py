"""Results files from outside (a baseline, ``sadl report``'s input): read, bounded, validated.

:func:`load_results` (and :func:`read_results`, the same as typed results) reads a file through :func:`parse_json`, which bounds the nesting
depth and the size of every number before anything else sees the data, and then
validates it against the JSON Schema shipped as ``pytest_sadl/results.schema.json``
(:data:`JSON_SCHEMA`) with ``jsonschema``: a hostile or type-confused file is one
:class:`~pytest_sadl.errors.ResultsFileError` line naming the file and the field, never
a traceback. The schema allows properties it does not name, so older readers still read
newer minor additions; a newer major ``version`` is refused with the upgrade to make.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_sadl.criteria.schema import with_registry
from pytest_sadl.errors import ResultsFileError
from pytest_sadl.results import SCHEMA, VERSION, Results

MAX_DEPTH = 32  # nesting of objects and arrays; a results file nests 5 deep
MAX_INT = 2**53  # integers beyond what a double holds exactly are not counts of anything
MAX_FLOAT = 1.7976931348623157e308  # every number has a range: inf and 400-digit integers fail it
#: The largest results or baseline file read, in MiB, unless ``SADL_MAX_RESULTS_MB`` says
#: otherwise: a run of 100,000 inputs writes about 6 MB; a 100 MB file took 1.7 GB and 20 s
#: to read and validate, so a bigger one is refused in one line before it is read.
MAX_MB = 64
MAX_MB_ENV = "SADL_MAX_RESULTS_MB"

#: The results file's JSON Schema (draft 2020-12), as shipped in the package, with the
#: per-metric entries of every registered criterion (a criterion from outside as well).
JSON_SCHEMA: dict[str, Any] = with_registry(
    json.loads(resources.files("pytest_sadl").joinpath("results.schema.json").read_text(encoding="utf-8"))
)


def _where(source: str | os.PathLike[str] | None) -> str:
    return f"{source}: " if source else ""


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _reject_number(text: str) -> Any:
    raise ResultsFileError(f"{text} is not allowed: a results file holds finite numbers only")


#: A bracket, or a string (to its closing quote, or to the end of an unterminated one) whose
#: brackets do not count; a backslash in it escapes the next character.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)


def _check_depth(text: str, limit: int = MAX_DEPTH) -> None:
    """Refuse a document nested deeper than ``limit`` before parsing it: the parser and the
    validator recurse, so 200,000 nested arrays would end in ``RecursionError``."""
    depth = 0
    for match in _TOKEN.finditer(text):
        ch = match.group()
        if ch in "[{":
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
    """``metrics.lsc.value``, ``groups[0].name``, ``metrics['a b']``: where in the
    document (a key that is no plain name quoted, so the message stays one line)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _PLAIN_KEY.fullmatch(str(part)):
            out += f"[{_short(str(part))}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "the document"


_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


_JSON_TYPES = {
    "object": "an object",
    "array": "a list",
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "true or false",
    "null": "null",
}


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    for kind, name in (
        ((dict,), "an object"),
        ((list,), "a list"),
        ((str,), "a string"),
        ((int,), "an integer"),
        ((float,), "a number"),
        ((type(None),), "null"),
    ):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _explain(error: Any) -> str:
    """One line for a ``jsonschema.ValidationError``: the field, what it must be, what it is."""
    where, value, rule, expected = _field(error.absolute_path), error.instance, error.validator, error.validator_value
    if rule == "type":
        return _explain_type(where, value, expected)
    if rule in ("minimum", "maximum"):
        return _explain_range(where, value, rule, expected, error.schema)
    explain = _EXPLAIN_RULE.get(rule)
    if explain is None:
        return f"{where}: {error.message[:200]}"
    return explain(where, value, expected)


def _explain_required(where: str, value: Any, expected: Any) -> str:
    missing = [k for k in expected if isinstance(value, dict) and k not in value]
    return f"{where} has no {_short(missing[0] if missing else expected)} (required)"


def _explain_const(where: str, value: Any, expected: Any) -> str:
    return f"{where} is {_short(value)}, expected {_short(expected)}"


def _explain_max_length(where: str, value: Any, expected: Any) -> str:
    return f"{where} is a string of {len(value)} characters, more than {expected}"


def _explain_enum(where: str, value: Any, expected: Any) -> str:
    return f"{where} must be one of {', '.join(map(str, expected))}, got {_short(value)}"


#: The one-line explanation of each schema rule broken (``type`` and the range rules, which
#: need more of the error, are explained by :func:`_explain` itself).
_EXPLAIN_RULE: dict[str, Callable[[str, Any, Any], str]] = {
    "required": _explain_required,
    "const": _explain_const,
    "maxLength": _explain_max_length,
    "enum": _explain_enum,
}


def _explain_type(where: str, value: Any, expected: Any) -> str:
    kinds: list[str] = expected if isinstance(expected, list) else [expected]
    wanted = " or ".join(_JSON_TYPES.get(k, k) for k in kinds)
    shown = "" if value is None or isinstance(value, bool) else f" {_short(value)}"
    return f"{where} must be {wanted}, got {_type_name(value) if value is not None else 'null'}{shown}"


def _explain_range(where: str, value: Any, rule: str, expected: Any, schema: dict[str, Any]) -> str:
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        if high == MAX_INT:
            return f"{where} must be a count (an integer >= {low}), got {_short(value)}"
        what = "a fraction in [0, 1]" if (low, high) == (0, 1) else f"in [{low:g}, {high:g}]"
        return f"{where} must be {what}, got {_short(value)}"
    return f"{where} must be {'>=' if rule == 'minimum' else '<='} {expected:g}, got {_short(value)}"


_SCALAR_KEYS = {"type", "minimum", "maximum"}


_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "number": (int, float),
    "integer": (int,),
    "null": (type(None),),
    "string": (str,),
    "boolean": (bool,),
}


def _suspects(items: dict[str, Any], values: list[Any]) -> Any:
    """Indices of ``values`` that may fail ``items`` (a type and range only): a superset of
    those that do, found with a set lookup per value and C-level min/max."""
    kinds = items["type"] if isinstance(items["type"], list) else [items["type"]]
    allowed = {t for k in kinds for t in _PYTHON_TYPES.get(k, ())}
    present = set(map(type, values))
    if not present <= allowed:
        yield from (i for i, v in enumerate(values) if type(v) not in allowed)
    yield from _range_suspects(values, present, items.get("minimum"), items.get("maximum"))


def _range_suspects(values: list[Any], present: set[type], low: float | None, high: float | None) -> Any:
    """Indices of the numbers among ``values`` outside ``[low, high]`` (none when min and max are inside)."""
    if (low is None and high is None) or not present & {int, float}:
        return
    if _extremes_outside(_numbers(values, present), low, high):
        yield from (i for i, v in enumerate(values) if type(v) in (int, float) and _outside(v, low, high))


def _numbers(values: list[Any], present: set[type]) -> list[Any]:
    """The ints and floats among ``values`` (``values`` itself when that is all it holds)."""
    return values if present <= {int, float} else [v for v in values if type(v) in (int, float)]


def _extremes_outside(numbers: list[Any], low: float | None, high: float | None) -> bool:
    """Whether the least or the greatest of ``numbers`` is outside ``[low, high]`` (C-level min/max)."""
    return (low is not None and min(numbers) < low) or (high is not None and max(numbers) > high)


def _outside(value: float, low: float | None, high: float | None) -> bool:
    return (low is not None and value < low) or (high is not None and value > high)


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
        if (
            isinstance(item_schema, dict)
            and "type" in item_schema
            and set(item_schema) <= _SCALAR_KEYS
            and isinstance(instance, list)
            and not schema.get("prefixItems")
        ):
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
    checked = _check_identity(data, where)
    _check_version(checked.get("version"), where)
    if _validator is None:
        _validator = _make_validator()
    from jsonschema.exceptions import best_match

    error = best_match(_validator.iter_errors(checked))
    if error is not None:
        raise ResultsFileError(f"{where}{_explain(error)}")
    return checked


def _check_identity(data: Any, where: str) -> dict[str, Any]:
    """``data``, refused unless it is a JSON object whose ``schema`` is pytest-sadl's results'."""
    if not isinstance(data, dict):
        raise ResultsFileError(
            f"{where}not a pytest-sadl results file: expected a JSON object, got "
            f"{_type_name(data)}; write one with `pytest --sadl-coverage --sadl-report=json`"
        )
    if data.get("schema") != SCHEMA:
        raise ResultsFileError(
            f'{where}not a pytest-sadl results file: "schema" is {_short(data.get("schema"))}, expected '
            f"{SCHEMA!r}; write one with `pytest --sadl-coverage --sadl-report=json`"
        )
    return data


def _major(version: Any) -> str:
    """The major part of a ``version`` (``"2"`` of ``"2.1"`` or ``2``; ``""`` when it is no int or string)."""
    if isinstance(version, (int, str)) and not isinstance(version, bool):
        return str(version).split(".", 1)[0]
    return ""


def _check_version(version: Any, where: str) -> None:
    """Refuse a ``version`` that is no integer, newer than :data:`VERSION` or below 1."""
    major = _major(version)
    if not major.isdigit() or len(major) > 9:
        raise ResultsFileError(f'{where}"version" is {_short(version)}, expected an integer')
    if int(major) > VERSION:
        raise ResultsFileError(
            f"{where}results schema version {version} is newer than this pytest-sadl reads "
            f"(version {VERSION}); upgrade pytest-sadl (`pip install -U pytest-sadl`) to render it"
        )
    if int(major) < 1:
        raise ResultsFileError(f"{where}results schema version {version!r} is not a known version")


def max_bytes() -> int:
    """The size cap of a results file read: :data:`MAX_MB` MiB, or ``SADL_MAX_RESULTS_MB``."""
    raw = os.environ.get(MAX_MB_ENV, "").strip()
    if not raw:
        return MAX_MB << 20
    try:
        mib = float(raw)
    except ValueError:
        mib = -1.0
    if not (0 < mib <= 1 << 20):
        raise ResultsFileError(
            f"{MAX_MB_ENV}={_short(raw)}: expected a number of MiB, more than 0 (the default is {MAX_MB})"
        )
    return int(mib * (1 << 20))


def unknown_metrics(data: dict[str, Any], *, source: str | os.PathLike[str] | None = None) -> str | None:
    """One line naming the metric names of a validated results document that this
    pytest-sadl does not know (they are ignored: a newer version's metric, a typo or a
    hand-made file), or ``None``."""
    from pytest_sadl.criteria.registry import METRICS

    unknown = sorted(n for n in _metric_names(data) if n not in METRICS)
    if not unknown:
        return None
    return (
        f"{_where(source)}unknown metric name(s) {_first_names(unknown)}, ignored; this pytest-sadl knows "
        f"{', '.join(METRICS)} (a newer pytest-sadl's file? upgrade to read them)"
    )


def _metric_names(data: dict[str, Any]) -> set[str]:
    """Every metric name a results document uses: the keys of its ``metrics`` and
    ``thresholds``, and of each group's ``metrics`` and ``cumulative``."""
    tables = [data.get("metrics"), data.get("thresholds")]
    for group in data.get("groups") or []:
        if isinstance(group, dict):
            tables += [group.get("metrics"), group.get("cumulative")]
    return {name for table in tables if isinstance(table, dict) for name in table}


def _first_names(names: list[str], shown: int = 5) -> str:
    """The first ``shown`` of ``names``, quoted and made safe for a terminal, and how many more."""
    from pytest_sadl.text import terminal

    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(terminal(repr(n)) for n in names[:shown]) + more


def load_results(path: str | os.PathLike[str], notes: list[str] | None = None) -> dict[str, Any]:
    """Read and validate a results JSON file (``--sadl-report=json``) from outside.

    Raises :class:`ResultsFileError`, one line naming the file (and the field): also for a
    file larger than :func:`max_bytes`. What is read but ignored (metric names this
    version does not know) is one line appended to ``notes``, when given."""
    p = Path(path)
    text = _read_text(p)
    try:
        data = parse_json(text)
    except ResultsFileError as exc:
        raise ResultsFileError(f"{p}: {exc}") from None
    data = validate_results(data, source=p)
    if notes is not None:
        note = unknown_metrics(data, source=p)
        if note is not None:
            notes.append(note)
    return data


def _read_text(p: Path) -> str:
    """The UTF-8 text of the regular file ``p``, of at most :func:`max_bytes` bytes."""
    try:
        if not p.is_file():
            raise ResultsFileError(f"{p}: {_not_a_file(p)}, expected a results JSON file")
        limit = max_bytes()
        with p.open("rb") as f:  # at most one byte past the cap, whatever the size said before
            raw = f.read(limit + 1)
        if len(raw) > limit:
            raise ResultsFileError(
                f"{p}: larger than {limit >> 20} MiB, the most a results file read may be; "
                f"raise the cap with {MAX_MB_ENV}=<MiB> if the file is one you trust"
            )
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultsFileError(f"{p}: not UTF-8 text ({exc.reason}); is it a results JSON file?") from None
    except OSError as exc:
        raise ResultsFileError(f"{p}: cannot be read ({exc.strerror or exc})") from None


def _not_a_file(p: Path) -> str:
    """What ``p``, which is no regular file, is instead."""
    if not p.exists():
        return "no such results file"
    return "is a directory" if p.is_dir() else "not a regular file (a FIFO, a device?)"


def read_results(path: str | os.PathLike[str], notes: list[str] | None = None) -> Results:
    """:func:`load_results`, as the typed :class:`~pytest_sadl.results.Results` every
    renderer takes (``sadl report``, ``sadl compare``, a ``--sadl-compare`` baseline)."""
    return Results.from_dict(load_results(path, notes))
