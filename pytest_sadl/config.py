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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_sadl.criteria.registry import COUNT, DEFAULT_METRICS, METRICS

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
    lsc: Bounds = Bounds(None, None, 1000)
    dsc: Bounds = Bounds(None, None, 1000)
    mdsc: Bounds = Bounds(None, None, 1000)
    mlsc: Bounds = Bounds(None, None, 1000)
    mmdsc: Bounds = Bounds(None, None, 1000)
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
    base_dir: Path = Path(".")


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
    unit, example = ("a number of percentage points", "-2") if drops else ("a percentage", "30")
    if drops and not spec.strip():
        raise ValueError(
            f"{option} is empty; give limits like lsc:-2,dsc:-1 "
            "(fail when LSC drops by more than 2 points or DSC by more than 1)"
        )
    out: dict[str, float] = {}
    for item in (i.strip() for i in spec.split(",")):
        if not item:
            continue
        match = _SPEC_ITEM.match(item)
        if not match:
            form = "METRIC:POINTS" if drops else "METRIC:PERCENT"
            raise ValueError(f"{option}: {item!r} is not {form}; write e.g. lsc:{example}")
        name, number = match.group(1).lower(), match.group(2)
        if name not in METRICS and not (drops and name == "all"):
            raise ValueError(
                f"{option}: unknown metric {match.group(1)!r}; known metrics are {', '.join(METRICS)}"
                + (" (or all)" if drops else "")
            )
        try:
            value = float(number)
        except ValueError:
            raise ValueError(f"{option}: {number!r} for {name} is not {unit}; write e.g. {name}:{example}") from None
        if not math.isfinite(value):
            raise ValueError(f"{option}: {number!r} for {name} is not a finite number")
        if drops and value > 0:
            raise ValueError(
                f"{option}: {name}:{number} is positive; a limit is the largest drop "
                f"allowed, written negative: {name}:-{number.lstrip('+')} fails when "
                f"{name.upper()} drops by more than {number.lstrip('+')} points"
            )
        if not drops and name in COUNT and value < 0:  # a count criterion's threshold is its own number
            raise ValueError(f"{option}: {name} threshold {value:g} must be a number >= 0")
        if not drops and name not in COUNT and not 0 <= value <= 100:
            raise ValueError(f"{option}: {name} threshold {value:g} must be a percentage in [0, 100]")
        out.update(dict.fromkeys(every, value) if name == "all" else {name: value})
    if drops and not out:
        raise ValueError(f"{option} has no limits; write e.g. lsc:-2,dsc:-1")
    return out
