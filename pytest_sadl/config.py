"""The configuration of a run as plain data, and the parsers the plugin and ``sadl`` share.

:class:`SadlOptions` (one run's parsed, validated options), :class:`Bounds` (a surprise
coverage's lower and upper bound and buckets), :class:`Report` (a report's kind and path);
:func:`parse_layers` (the one layer-list parser) and :func:`parse_metric_numbers` (the one
``METRIC:NUMBER`` parser: ``--sadl-fail-under``, ``--sadl-compare-fail``, ``sadl compare
--fail``). No pytest here: the engine, the reports and the ``sadl`` commands use these
without it; reading them from pytest's configuration is :mod:`pytest_sadl.plugin.options`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from pytest_sadl.criteria.registry import COUNT, DEFAULT_METRICS, METRICS, SURPRISE

REPORT_KINDS = ("term", "term-verbose", "json", "html", "markdown", "badge")
DEFAULT_REPORT_PATHS = {
    "json": "sadl-report.json",
    "html": "sadl-report",
    "markdown": "sadl-report.md",
    "badge": "sadl-badges",
}


def _split_list(values: list[str]) -> list[str]:
    out: list[str] = []
    for value in values:
        out.extend(part.strip() for part in str(value).split(",") if part.strip())
    return out


_INDEX = re.compile(r"-?[0-9]+")


def layer_token(token: str) -> str | int:
    """A layer index (ASCII digits with an optional minus: ``3``, ``-1``) or a layer name.

    ``int()`` would also take ``+1``, ``1_0`` and non-ASCII digits; those are names here."""
    return int(token) if _INDEX.fullmatch(token) else token


def parse_layers(values: list[str] | str | None) -> tuple[str | int, ...] | None:
    """``["a", "b,c", "3"]`` to ``("a", "b", "c", 3)``; ``None`` when nothing is given.

    The one layer-list parser, for the ini/command-line options and for ``sadl profile``."""
    if not values:
        return None
    items = _split_list(values if isinstance(values, list) else [values])
    return tuple(layer_token(t) for t in items) or None


@dataclass(frozen=True)
class Bounds:
    lower: float | None
    upper: float | None
    buckets: int

    @property
    def complete(self) -> bool:
        """Both bounds configured: nothing comes from the held-out training scores."""
        return self.lower is not None and self.upper is not None


DEFAULT_BOUNDS = Bounds(None, None, 1000)


@dataclass(frozen=True)
class Report:
    kind: str
    path: Path | None = None


@dataclass(frozen=True)
class SadlOptions:
    """The parsed, validated configuration of one run."""

    enabled: bool = False
    model: str | None = None
    train: str | None = None
    sa_layers: tuple[str | int, ...] | None = None
    coverage_layers: tuple[str | int, ...] | None = None
    output: str | int | None = None
    #: each surprise coverage's configured bounds (``--sadl-sc-bounds``), by metric name;
    #: one not named: both bounds from the profile, 1000 buckets (:meth:`bounds`)
    sc_bounds: Mapping[str, Bounds] = field(default_factory=dict)
    #: MLSA's mixture components and MMDSA's k-means modes, per class
    mlsa_components: int = 2
    mmdsa_modes: int = 2
    nc_threshold: float = 0.5
    kmnc_k: int = 1000
    tknc_k: int = 2
    tknp_k: int = 2
    cc_threshold: float = 10.0
    var_threshold: float = 1e-5
    var_rule: str = "class"
    #: LSA/MDSA/MLSA/MMDSA on this many principal axes of the SA traces (``None``: off)
    sa_components: int | None = None
    lsa_near_singular: str = "drop"
    dsa_precompute: bool = False
    batch_size: int = 256
    reports: tuple[Report, ...] = (Report("term"),)
    groups: tuple[str, ...] = ()  # the order of the groups (sadl_groups); the rest follow
    #: the group whose inputs are in-distribution in the OOD section (``None``: the held-out training traces)
    ood_reference: str | None = None
    fail_under: dict[str, float] = field(default_factory=dict)
    #: the metrics computed and reported (``--sadl-metrics``), in report order
    metrics: tuple[str, ...] = DEFAULT_METRICS
    cache_dir: Path | None = None
    lock_timeout: float = 300.0
    dask: str | None = None  # a Dask scheduler's address: the profile is traced on its workers
    compare: Path | None = None
    compare_fail: dict[str, float] = field(default_factory=dict)
    #: apply --sadl-fail-under and --sadl-compare-fail to a partial run too (-x, -k, --lf...)
    gate_partial: bool = False
    #: leave the per-test covered sets out of the results (--sadl-omit-covered-sets)
    omit_covered_sets: bool = False
    base_dir: Path = Path(".")
    #: the parameters of criteria registered from outside the package, by name
    extra: Mapping[str, Any] = field(default_factory=dict)

    def bounds(self, metric: str) -> Bounds:
        """The configured bounds of the surprise coverage ``metric`` (unset: from the profile)."""
        return self.sc_bounds.get(metric, DEFAULT_BOUNDS)

    def param(self, name: str) -> Any:
        """A criterion's parameter (``Param.name``): a field of these options (``tknp_k``),
        else one of :attr:`extra`, else its registered default."""
        if name in self.extra:
            return self.extra[name]
        if name in _FIELDS:
            return getattr(self, name)
        from pytest_sadl.criteria.registry import PARAMS

        for p in PARAMS:
            if p.name == name:
                return p.default
        raise KeyError(f"no criterion has a parameter named {name!r}")


_FIELDS = frozenset(f.name for f in fields(SadlOptions))


_SPEC_ITEM = re.compile(r"^\s*([A-Za-z_]+)\s*[:=]\s*(.*?)\s*$")


def parse_metric_numbers(
    spec: str, option: str, *, drops: bool = False, every: Sequence[str] = DEFAULT_METRICS
) -> dict[str, float]:
    """The one ``METRIC:NUMBER,...`` parser; ``option`` names the option in every message.

    ``drops=False`` (``--sadl-fail-under``): ``"lsc:30,dsc:40"`` to ``{"lsc": 30.0, "dsc": 40.0}``,
    percentages in [0, 100] (a count criterion's, TKNP/NLC/CC, a number >= 0). ``drops=True`` (``--sadl-compare-fail``, ``sadl compare --fail``):
    the largest drop allowed in percentage points, written as a number <= 0; ``all:-1`` sets
    every metric of ``every`` (the run's ``--sadl-metrics``), and at least one limit is needed. ``:`` or ``=`` separates; a later item
    overrides an earlier one. Raises a one-line ValueError naming the item and the fix.
    """
    if drops and not spec.strip():
        raise ValueError(
            f"{option} is empty; give limits like lsc:-2,dsc:-1 "
            "(fail when LSC drops by more than 2 points or DSC by more than 1)"
        )
    out: dict[str, float] = {}
    for item in _items(spec):
        name, value = _metric_number(item, option, drops)
        out.update(dict.fromkeys(every, value) if name == "all" else {name: value})
    if drops and not out:
        raise ValueError(f"{option} has no limits; write e.g. lsc:-2,dsc:-1")
    return out


def _items(spec: str) -> list[str]:
    """The non-empty items of a comma list, stripped."""
    return [item for item in (i.strip() for i in spec.split(",")) if item]


def _metric_number(item: str, option: str, drops: bool) -> tuple[str, float]:
    """One ``METRIC:NUMBER`` item of :func:`parse_metric_numbers`, checked."""
    unit, example = ("a number of percentage points", "-2") if drops else ("a percentage", "30")
    match = _SPEC_ITEM.match(item)
    if not match:
        form = "METRIC:POINTS" if drops else "METRIC:PERCENT"
        raise ValueError(f"{option}: {item!r} is not {form}; write e.g. lsc:{example}")
    name, number = match.group(1).lower(), match.group(2)
    _check_metric_name(name, match.group(1), option, drops)
    value = _finite_number(number, f"{option}: {number!r} for {name}", f"{unit}; write e.g. {name}:{example}")
    if drops:
        _check_drop(name, number, value, option)
    else:
        _check_threshold(name, value, option)
    return name, value


def _check_metric_name(name: str, given: str, option: str, drops: bool) -> None:
    """A known metric (or ``all``, for drops); ``given``: the name as written."""
    if name not in METRICS and not (drops and name == "all"):
        raise ValueError(
            f"{option}: unknown metric {given!r}; known metrics are {', '.join(METRICS)}"
            + (" (or all)" if drops else "")
        )


def _finite_number(number: str, what: str, expected: str) -> float:
    """``number`` as a finite float; else a ValueError, ``"{what} is not {expected}"`` (or
    "is not a finite number" for inf and NaN)."""
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"{what} is not {expected}") from None
    if not math.isfinite(value):
        raise ValueError(f"{what} is not a finite number")
    return value


def _check_drop(name: str, number: str, value: float, option: str) -> None:
    if value > 0:
        raise ValueError(
            f"{option}: {name}:{number} is positive; a limit is the largest drop "
            f"allowed, written negative: {name}:-{number.lstrip('+')} fails when "
            f"{name.upper()} drops by more than {number.lstrip('+')} points"
        )


def _check_threshold(name: str, value: float, option: str) -> None:
    if name in COUNT and value < 0:  # a count criterion's threshold is its own number
        raise ValueError(f"{option}: {name} threshold {value:g} must be a number >= 0")
    if name not in COUNT and not 0 <= value <= 100:
        raise ValueError(f"{option}: {name} threshold {value:g} must be a percentage in [0, 100]")


#: the most buckets a surprise coverage may have: each run keeps a flag per bucket, for
#: the total and for every group
MAX_BUCKETS = 1_000_000
SC_BOUNDS_FORM = "METRIC:LOWER:UPPER[:BUCKETS]"
#: one surprise coverage's configured (lower, upper, buckets); ``None``: not configured
PartBounds = tuple[float | None, float | None, int | None]


def _bound_number(text: str, what: str, where: str) -> float | None:
    if not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{where}: {text.strip()!r} for the {what} is not a number; write e.g. lsc:0:100") from None
    if not math.isfinite(value):
        raise ValueError(f"{where}: the {what} {text.strip()!r} must be finite")
    return value


def _buckets(text: str, name: str, where: str) -> int | None:
    if not text.strip():
        return None
    try:
        n = int(text.strip())
    except ValueError:
        raise ValueError(
            f"{where}: {text.strip()!r} buckets for {name} is not an integer; write e.g. {name}:0:100:1000"
        ) from None
    if n < 1:
        raise ValueError(f"{where}: {name}:...:{n} needs at least 1 bucket")
    if n > MAX_BUCKETS:
        raise ValueError(
            f"{where}: {name} with {n} buckets: at most {MAX_BUCKETS:,} "
            "(each run keeps a flag per bucket, for the total and for every group)"
        )
    return n


def parse_sc_bounds(spec: str, option: str = "--sadl-sc-bounds") -> dict[str, PartBounds]:
    """The one ``--sadl-sc-bounds`` parser: ``"lsc:-20:80:50,dsc:0:3"`` to
    ``{"lsc": (-20.0, 80.0, 50), "dsc": (0.0, 3.0, None)}``. An empty field is left to the
    profile (``lsc::80``: the upper bound only; ``lsc:::500``: the buckets only); a later
    item of a metric overrides an earlier one. Raises a one-line ValueError naming the item
    and the fix (``option``: the option as the user gave it)."""
    out: dict[str, PartBounds] = {}
    for item in _items(spec):
        name, bounds = _sc_bounds_item(item, option)
        out[name] = bounds
    return out


def _sc_bounds_item(item: str, option: str) -> tuple[str, PartBounds]:
    """One ``METRIC:LOWER:UPPER[:BUCKETS]`` item of :func:`parse_sc_bounds`, checked."""
    name, *fields = (part.strip() for part in item.split(":"))
    name = name.lower()
    if name not in SURPRISE:
        raise ValueError(
            f"{option}: {name!r} is not a surprise coverage; bounds are for {', '.join(SURPRISE)} "
            f"({SC_BOUNDS_FORM}, e.g. lsc:0:100:1000)"
        )
    if not 2 <= len(fields) <= 3:
        raise ValueError(
            f"{option}: {item!r} is not {SC_BOUNDS_FORM}; write e.g. {name}:0:100 or {name}:0:100:1000 "
            "(an empty field: from the profile)"
        )
    lower = _bound_number(fields[0], f"lower bound of {name}", option)
    upper = _bound_number(fields[1], f"upper bound of {name}", option)
    buckets = _buckets(fields[2], name, option) if len(fields) == 3 else None
    return name, (lower, upper, buckets)


def check_bounds(name: str, lower: float | None, upper: float | None, where: str) -> None:
    """Upper above lower, or a one-line ValueError saying why."""
    if lower is not None and upper is not None and upper <= lower:
        raise ValueError(
            f"{where}: {name}'s upper bound {upper:g} is not above its lower bound {lower:g}; "
            f"{name.upper()}'s buckets divide (lower, upper], so upper must be greater"
        )
