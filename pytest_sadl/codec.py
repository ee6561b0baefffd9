"""Dataclasses as JSON, back, and as a JSON Schema, from one declaration.

A section of the results is a dataclass: its type hints say what each value is, and a
field's :func:`spec` (``dataclasses.field`` with metadata) says what the hints cannot: the
JSON key when it differs, a description, numeric limits, "written only when not None",
the nested object it lives in (``at="outcome"``), a dict written as the object's own keys
(``flat``). From that one declaration:

- :func:`encode` writes the JSON form (fields in their order; NaN and inf as ``null``,
  NumPy scalars as Python numbers, a nested ``at`` object after the plain keys);
- :func:`decode` reads it back leniently, as a reader of an older or smaller file must: a
  key that is absent, or holds a value of another type, reads as the field's default (or
  the type's empty value: ``0``, ``""``, ``[]``, ``{}``, an empty section, ``None``); an item
  of a list or dict of another type is dropped (``None`` when the items may be ``None``);
  keys the class does not name are ignored (or kept by a ``flat`` field);
- :func:`schema` makes the JSON Schema (draft 2020-12) of the class: ``integer`` counts in
  [0, 2**53], finite numbers, strings of at most 100,000 characters unless the spec says
  otherwise; ``null`` allowed where the type is optional and the value is written (a
  value omitted when ``None`` is never ``null`` in a file), unless ``null=`` says.

Values the JSON form computes (``passed``) or fixes (``"schema"``) are a class's
``JSON_EXTRA``: :class:`Extra` rows, written before the fields and never read back.
The types it knows: ``bool``, ``int``, ``float``, ``str``, :data:`Json` (any JSON value,
kept as it is), ``X | None``, ``list[X]``, ``dict[str, X]`` and dataclasses. Pure Python.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar, Union

T = TypeVar("T")

DOUBLE = 1.7976931348623157e308  # the largest finite double: every number has a range
INTEGER = 9007199254740992  # 2**53: the largest integer a JSON number keeps exactly
MAX_LENGTH = 100000  # the longest string a results file holds, unless a field says
_KEY = "pytest_sadl.codec"


class Json:
    """Marks a value as any JSON value (kept as it is; NaN/inf written as ``null``)."""


class _Bad:
    """A value that does not have the type asked for (read as the default)."""


BAD = _Bad()


@dataclasses.dataclass(frozen=True)
class Spec:
    """What a field's type hint does not say about its JSON form (see :func:`spec`)."""

    key: str | None = None
    doc: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    max_length: int | None = None
    enum: tuple[Any, ...] | None = None
    omit_none: bool = False
    null: bool | None = None
    item_null: bool | None = None
    at: str | None = None
    missing: Any = BAD
    required: bool = False
    needed: bool = False
    flat: str | None = None
    names: tuple[str, ...] = ()
    additional: bool = False
    when: Callable[[object], bool] | None = None
    group: str | None = None
    schema: Mapping[str, Any] | None = None
    in_schema: bool = True


def spec(
    *,
    default: Any = dataclasses.MISSING,
    default_factory: Any = dataclasses.MISSING,
    kw_only: Any = dataclasses.MISSING,
    **options: Any,
) -> Any:
    """A dataclass field with its JSON form described. ``options`` (all optional):

    ``key``: the JSON key (default: the field's name); ``doc``: the schema's description;
    ``minimum``/``maximum``: the limits of the number (of a list's or dict's numbers);
    ``max_length``: of a string; ``enum``: the values allowed (the schema says only that);
    ``omit_none``: not written when ``None``; ``null``: whether the schema allows ``null``
    for the field (``item_null``: for its items); ``at``: the key of the nested object it
    is written in; ``missing``: the value read when the key is absent or of another type;
    ``required``: the schema requires the key; ``needed``: without it the whole object
    reads as absent (``None``); ``flat``: a dict written as the object's own keys, each
    followed by this suffix (``""``: as they are), read back from the keys the class does
    not name whose values have the dict's value type; ``names``: the keys of a flat dict
    the schema names; ``additional``: every key the schema does not name has the flat
    dict's value type; ``when``: which values a flat dict takes (before one without);
    ``group``: flat dicts written key by key together (``a_mean``, ``a_max``, ``b_mean``...);
    ``schema``: merged over the schema made (a ``None`` value removes a key);
    ``in_schema=False``: the schema does not name the key."""
    meta = {_KEY: Spec(**options)}
    return dataclasses.field(default=default, default_factory=default_factory, kw_only=kw_only, metadata=meta)


@dataclasses.dataclass(frozen=True)
class Extra:
    """A key the JSON form has beside the fields: a fixed ``value``, or the attribute
    ``attr`` (a property) of the object; written first, at ``spec.at``, never read."""

    key: str
    value: Any = None
    attr: str | None = None
    spec: Spec = Spec()


# ------------------------------------------------------------------------ the types


def _args(tp: Any) -> tuple[Any, ...]:
    return typing.get_args(tp)


def _optional(tp: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``X | None``, ``(tp, False)`` otherwise."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        rest = [a for a in _args(tp) if a is not type(None)]
        if len(rest) == 1 and len(rest) < len(_args(tp)):
            return rest[0], True
    return tp, False


@functools.cache
def _fields(cls: type) -> tuple[tuple[dataclasses.Field[Any], Any, Spec], ...]:
    """Each field of ``cls`` with its type and spec (cached: hints are evaluated once)."""
    hints = typing.get_type_hints(cls)
    return tuple((f, hints[f.name], f.metadata.get(_KEY, Spec())) for f in dataclasses.fields(cls) if f.init)


def _extras(cls: type) -> tuple[Extra, ...]:
    extra: tuple[Extra, ...] = getattr(cls, "JSON_EXTRA", ())
    return extra


# ------------------------------------------------------------------------ writing


def encode(obj: Any) -> Any:
    """The JSON form of ``obj``: a dataclass as its declared object, containers item by
    item; NaN and inf as ``None``, NumPy scalars as Python numbers, tuples as lists."""
    if isinstance(obj, dict):
        return {str(k): encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return _encode_list(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _encode_object(obj)
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


#: JSON values with nothing to convert (besides finite floats)
_PLAIN = frozenset({int, str, bool, type(None)})


def _encode_list(values: list[Any] | tuple[Any, ...]) -> list[Any]:
    """:func:`encode` of a list; a list of plain finite scalars (a run's ``inputs``: 10^5
    values and more) is copied at C speed, without a Python call per value."""
    kinds = set(map(type, values))
    if kinds <= _PLAIN or (kinds <= _PLAIN | {float} and all(map(math.isfinite, _floats(values, kinds)))):
        return list(values)
    return [encode(v) for v in values]


def _floats(values: list[Any] | tuple[Any, ...], kinds: set[type]) -> list[Any]:
    return list(values) if kinds == {float} else [v for v in values if type(v) is float]


def _encode_object(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for extra in _extras(type(obj)):
        value = extra.value if extra.attr is None else getattr(obj, extra.attr)
        _place(out, nested, extra.spec.at)[extra.key] = encode(value)
    done: set[str] = set()
    cls: type = type(obj)
    for f, _, sp in _fields(cls):
        if f.name not in done:
            _encode_field(obj, f.name, sp, _place(out, nested, sp.at), done)
    out.update(nested)
    return out


def _place(out: dict[str, Any], nested: dict[str, dict[str, Any]], at: str | None) -> dict[str, Any]:
    return out if at is None else nested.setdefault(at, {})


def _encode_field(obj: Any, name: str, sp: Spec, out: dict[str, Any], done: set[str]) -> None:
    value = getattr(obj, name)
    if sp.flat is not None:
        _encode_flat(obj, name, sp, out, done)
    elif value is not None or not sp.omit_none:
        out[sp.key or name] = encode(value)


def _encode_flat(obj: Any, name: str, sp: Spec, out: dict[str, Any], done: set[str]) -> None:
    """A flat dict's keys; those of a ``group`` key by key, each dict's value or ``None``."""
    members = _members(type(obj), name, sp)
    dicts = [(getattr(obj, n), suffix) for n, suffix in members]
    for key in dict.fromkeys(k for d, _ in dicts for k in d):
        for d, suffix in dicts:
            out[f"{key}{suffix}"] = encode(d.get(key))
    done.update(n for n, _ in members)


def _members(cls: type, name: str, sp: Spec) -> list[tuple[str, str]]:
    """The flat dicts written with the field ``name`` (its ``group``), with their suffixes."""
    if sp.group is None:
        return [(name, sp.flat or "")]
    return [(f.name, s.flat or "") for f, _, s in _fields(cls) if s.group == sp.group]


# ------------------------------------------------------------------------ reading


def _py(value: object) -> object:
    """A NumPy scalar as the Python value it holds."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes, list, dict)):
        return value.item()
    return value


def _read_int(value: object) -> object:
    value = _py(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else BAD


def _read_float(value: object) -> object:
    """A number (an ``int`` kept as it is); NaN and inf as ``None`` (as written)."""
    value = _py(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return BAD
    return value if isinstance(value, int) or math.isfinite(value) else None


def _read_str(value: object) -> object:
    value = _py(value)
    return str(value) if isinstance(value, str) else BAD


def _read_bool(value: object) -> object:
    value = _py(value)
    return value if isinstance(value, bool) else BAD


_SCALARS: dict[Any, Callable[[object], object]] = {
    int: _read_int,
    float: _read_float,
    str: _read_str,
    bool: _read_bool,
    Json: encode,
    Any: encode,
}


@functools.cache
def reader(tp: Any) -> Callable[[object], object]:
    """The function reading a value of type ``tp``: the value, or :data:`BAD` (of another
    type); a non-finite number reads as ``None`` (a non-optional one is then ``BAD``)."""
    inner, optional = _optional(tp)
    if optional:
        read = reader(inner)
        return lambda v: None if v is None or (r := read(v)) is BAD else r
    if inner in _SCALARS:
        return _non_null(_SCALARS[inner]) if inner is not Json and inner is not Any else _SCALARS[inner]
    return _composite_reader(inner)


def _composite_reader(inner: Any) -> Callable[[object], object]:
    """:func:`reader` of a list, a dict or a dataclass (``TypeError`` for any other type)."""
    origin = typing.get_origin(inner)
    if origin is list:
        return _list_reader(_args(inner)[0])
    if origin is dict:
        return _dict_reader(_args(inner)[1])
    if dataclasses.is_dataclass(inner):
        return functools.partial(_decode_object, inner)
    raise TypeError(f"pytest_sadl.codec cannot read {inner!r}: not a JSON type")


def _non_null(read: Callable[[object], object]) -> Callable[[object], object]:
    return lambda v: BAD if (r := read(v)) is None else r


def _list_reader(item: Any) -> Callable[[object], object]:
    if item is Json or item is Any:
        return lambda v: _encode_list(v) if isinstance(v, (list, tuple)) else BAD
    read = reader(item)

    def read_list(value: object) -> object:
        if not isinstance(value, (list, tuple)):
            return BAD
        return [r for r in map(read, value) if r is not BAD]

    return read_list


def _dict_reader(item: Any) -> Callable[[object], object]:
    read = reader(item)

    def read_dict(value: object) -> object:
        if not isinstance(value, Mapping):
            return BAD
        return {str(k): r for k, v in value.items() if (r := read(v)) is not BAD}

    return read_dict


def _empty(f: dataclasses.Field[Any], tp: Any, sp: Spec) -> Any:
    """What a field reads as when its key is absent or of another type."""
    if sp.missing is not BAD:
        return sp.missing
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return _empty_of_type(tp)


def _empty_of_type(tp: Any) -> Any:
    """An absent value of the type ``tp``: ``None`` when optional, an empty object or container."""
    inner, optional = _optional(tp)
    if optional:
        return None
    origin = typing.get_origin(inner) or inner
    return _decode_object(inner, {}) if dataclasses.is_dataclass(inner) else origin()


@functools.cache
def _named(cls: type) -> frozenset[str]:
    """The keys an object of ``cls`` names (a flat dict takes the others)."""
    return frozenset(sp.key or f.name for f, _, sp in _fields(cls) if sp.flat is None and sp.at is None)


def decode(cls: type[T], data: Mapping[str, object]) -> T:
    """An object of the dataclass ``cls`` read from ``data`` (see the module's rules).
    Raises ``ValueError`` when a ``needed`` key is absent."""
    obj = _decode_object(cls, data)
    if obj is BAD:
        raise ValueError(f"not a {cls.__name__}: a needed key is absent or of another type")
    return typing.cast(T, obj)


def _decode_object(cls: Any, data: object) -> Any:
    if not isinstance(data, Mapping):
        return BAD
    values: dict[str, Any] = {}
    for f, tp, sp in _fields(cls):
        value = {} if sp.flat is not None else _decode_field(data, f, tp, sp)
        if value is BAD:  # a needed key
            return BAD
        values[f.name] = value
    flats = _flats(cls)
    if flats:
        _decode_flats(data, _named(cls), flats, values)
    return cls(**values)


def _decode_field(data: Mapping[str, object], f: dataclasses.Field[Any], tp: Any, sp: Spec) -> Any:
    """A field's value in ``data``, its default when absent or of another type (``BAD``
    when it is ``needed``)."""
    where = data if sp.at is None else data.get(sp.at)
    raw = where.get(sp.key or f.name, BAD) if isinstance(where, Mapping) else BAD
    value = BAD if raw is BAD else reader(tp)(raw)
    if value is BAD and not sp.needed:
        return _empty(f, tp, sp)
    return value


@dataclasses.dataclass(frozen=True)
class _Flat:
    """How a flat dict field takes the keys its class does not name."""

    name: str
    suffix: str
    when: Callable[[object], bool] | None
    optional: bool  # its values may be None
    kind: Callable[[object], object]  # BAD for a value of another type (NaN is a number)
    read: Callable[[object], object]

    def take(self, key: str, raw: object) -> tuple[str, object] | None:
        """``(name, value)`` when this dict takes ``key``: ``raw``."""
        if not key.endswith(self.suffix) or (self.when is not None and not self.when(raw)):
            return None
        if not (self.optional and raw is None) and self.kind(raw) is BAD:
            return None
        value = self.read(raw)
        return None if value is BAD else (key[: len(key) - len(self.suffix)], value)


@functools.cache
def _flats(cls: type) -> tuple[_Flat, ...]:
    """The flat dict fields of ``cls``, those with a ``when`` first."""
    out = []
    for f, tp, sp in _fields(cls):
        if sp.flat is not None:
            item = _args(_optional(tp)[0])[1]
            inner, optional = _optional(item)
            out.append(_Flat(f.name, sp.flat, sp.when, optional, _SCALARS.get(inner) or reader(inner), reader(item)))
    return tuple(sorted(out, key=lambda flat: flat.when is None))


def _decode_flats(
    data: Mapping[str, object], named: frozenset[str], flats: tuple[_Flat, ...], values: dict[str, Any]
) -> None:
    """The keys the class does not name, each into the first flat dict that takes it."""
    for key, raw in data.items():
        if key in named:
            continue
        for flat in flats:
            taken = flat.take(key, raw)
            if taken is not None:
                values[flat.name][taken[0]] = taken[1]
                break


# ------------------------------------------------------------------------ the schema


def _scalar_schema(tp: Any, sp: Spec) -> dict[str, Any]:
    if tp is bool:
        return {"type": "boolean"}
    if tp is str:
        return {"type": "string", "maxLength": sp.max_length or MAX_LENGTH}
    if tp is int:
        return {"type": "integer", **_range(sp, 0, INTEGER)}
    if tp is float:
        return {"type": "number", **_range(sp, -DOUBLE, DOUBLE)}
    return {}


def _range(sp: Spec, low: float, high: float) -> dict[str, float]:
    """A number's ``minimum`` and ``maximum``: the spec's, else ``low`` and ``high``."""
    return {
        "minimum": sp.minimum if sp.minimum is not None else low,
        "maximum": sp.maximum if sp.maximum is not None else high,
    }


def _type_schema(tp: Any, sp: Spec, null: bool | None) -> dict[str, Any]:
    """The schema of a value of type ``tp``; ``null``: allow ``null`` (``None``: when optional)."""
    inner, optional = _optional(tp)
    if sp.enum is not None and _is_scalar(inner):
        return {"enum": list(sp.enum)}
    node = _inner_schema(inner, sp)
    if (optional if null is None else null) and "type" in node:
        node["type"] = [node["type"], "null"]
    return node


def _is_scalar(tp: Any) -> bool:
    """Whether ``tp`` is no list, dict or dataclass."""
    return typing.get_origin(tp) not in (list, dict) and not dataclasses.is_dataclass(tp)


def _inner_schema(inner: Any, sp: Spec) -> dict[str, Any]:
    """The schema of a value of the type ``inner`` (no ``None`` in it)."""
    origin = typing.get_origin(inner)
    if origin is list:
        return {"type": "array", "items": _type_schema(_args(inner)[0], sp, sp.item_null)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type_schema(_args(inner)[1], sp, sp.item_null)}
    if dataclasses.is_dataclass(inner):
        return schema(typing.cast(type, inner))
    return _scalar_schema(inner, sp)


def _field_schema(tp: Any, sp: Spec) -> dict[str, Any]:
    node: dict[str, Any] = {"description": sp.doc} if sp.doc else {}
    null = sp.null if sp.null is not None else (None if not sp.omit_none else False)
    node.update(_type_schema(tp, sp, null))
    _override(node, sp.schema or {})
    return node


def _override(node: dict[str, Any], changes: Mapping[str, Any]) -> None:
    """Set each key of ``changes`` in ``node``; remove those whose value is ``None``."""
    for key, value in changes.items():
        if value is None:
            node.pop(key, None)
        else:
            node[key] = value


def _flat_schema(tp: Any, sp: Spec, node: dict[str, Any]) -> None:
    """A flat dict's named keys (``properties``) and, when ``additional``, the others."""
    item = _type_schema(_args(_optional(tp)[0])[1], sp, sp.item_null)
    for name in sp.names:
        node.setdefault("properties", {})[f"{name}{sp.flat or ''}"] = dict(item)
    if sp.additional:
        node["additionalProperties"] = item


def schema(cls: type) -> dict[str, Any]:
    """The JSON Schema (an ``object``) of the dataclass ``cls``, nested ``at`` objects
    included, from its type hints and field specs."""
    node: dict[str, Any] = {"type": "object"}
    for key, tp, sp in _schema_rows(cls):
        where = node if sp.at is None else _nested(node, sp.at)
        if sp.flat is not None:
            _flat_schema(tp, sp, where)
        elif sp.in_schema:
            _property_schema(key, tp, sp, where)
    return node


def _schema_rows(cls: type) -> list[tuple[str, Any, Spec]]:
    """The key, type and spec of everything an object of ``cls`` writes: its extras, then its fields."""
    rows = [(e.key, _extra_type(cls, e), e.spec) for e in _extras(cls)]
    return rows + [(sp.key or f.name, tp, sp) for f, tp, sp in _fields(cls)]


def _property_schema(key: str, tp: Any, sp: Spec, node: dict[str, Any]) -> None:
    """The schema of the property ``key`` in ``node``, required when its spec says so."""
    node.setdefault("properties", {})[key] = _field_schema(tp, sp)
    if sp.required:
        node.setdefault("required", []).append(key)


def _nested(node: dict[str, Any], at: str) -> dict[str, Any]:
    properties = node.setdefault("properties", {})
    nested: dict[str, Any] = properties.setdefault(at, {"type": "object"})
    return nested


def _extra_type(cls: type, extra: Extra) -> Any:
    """An extra's type: its property's return type (a fixed value's: none, its spec says)."""
    if extra.attr is None:
        return Json
    prop = getattr(cls, extra.attr)
    return typing.get_type_hints(prop.fget)["return"]


class Record:
    """``to_dict``/``from_dict`` for a dataclass: :func:`encode` and :func:`decode`."""

    JSON_EXTRA: ClassVar[tuple[Extra, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (:func:`encode`)."""
        out: dict[str, Any] = encode(self)
        return out

    @classmethod
    def from_dict(cls: type[T], data: Mapping[str, object]) -> T:
        """Read back from a JSON form leniently (:func:`decode`)."""
        return decode(cls, data)
