"""The plugin's options: command line flags, their ini twins, parsing and validation.

Every option ``--sadl-foo`` has an ini twin ``sadl_foo`` (``[tool.pytest.ini_options]``);
the command line wins. Ini paths are relative to the ini file's directory (the rootdir),
command-line paths to the directory pytest was invoked from. Everything here is pure
Python: parsing the options imports no TensorFlow.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sadl.config import (
    DEFAULT_REPORT_PATHS,
    MAX_BUCKETS,
    REPORT_KINDS,
    SC_BOUNDS_FORM,
    Bounds,
    PartBounds,
    Report,
    SadlOptions,
    _split_list,
    check_bounds,
    layer_token,
    parse_layers,
    parse_metric_numbers,
    parse_sc_bounds,
)
from pytest_sadl.criteria.registry import DEFAULT_METRICS, METRICS, PARAMS, SURPRISE
from pytest_sadl.criteria.shape import Param

if TYPE_CHECKING:
    import pytest


def _usage_error() -> type[Exception]:
    """pytest's UsageError, imported when needed: the ``sadl`` commands read this table
    (``sadl --help`` must not import pytest)."""
    import pytest

    return pytest.UsageError


def _usage(message: str) -> Exception:
    return _usage_error()(message)


@dataclass(frozen=True)
class Option:
    """One option: its flag, ini name, type for the ini file, default and help."""

    flag: str
    ini: str
    help: str
    ini_type: str | None = None  # "string" (None), "bool", "linelist", "args"
    default: Any = None
    kind: str = "str"  # str | float | int | bool | list | append | path
    metavar: str | None = None
    #: the largest value an option that sizes memory may take, and why (a clear error
    #: before a run allocates gigabytes)
    limit: float | None = None
    limit_why: str = ""
    #: a criterion's parameter (:class:`~pytest_sadl.criteria.shape.Param`)
    param: Param | None = None
    #: the ``SadlOptions`` field the generic reader (:func:`read_value`) fills; ``None``: a
    #: row read by its own function (reports, thresholds, bounds)
    field: str | None = None
    #: the smallest value a number may take, and the message when it is below
    at_least: float | None = None
    at_least_why: str = ""
    #: a number must be below this (NC's threshold < 1), and the message
    below: float | None = None
    below_why: str = ""
    #: values refused although within the limits (with ``at_least_why``)
    refused: tuple[float, ...] = ()
    #: the words a text option takes, and the message naming them
    choices: tuple[str, ...] = ()
    choices_why: str = ""
    #: what a set text value becomes (``Path``, a layer token)
    parse: Callable[[str], Any] | None = None
    #: a deprecated alias (``"sadl_sc_bounds:lsc:lower"``: the option, metric and field it
    #: sets), hidden from ``--help``
    alias: str | None = None


def _layer_token(value: str) -> str | int:
    return layer_token(str(value).strip())


def _text_or_none(value: str) -> str | None:
    return str(value).strip() or None


def param_option(param: Param) -> Option:
    """The option row of a criterion's parameter (``--sadl-tknp-k``, ``sadl_tknp_k``)."""
    kind = "int" if param.type is int else "float"
    return Option(
        param.flag,
        param.ini,
        param.help,
        None,
        param.default,
        kind,
        param.metavar,
        limit=param.limit,
        limit_why=param.limit_why,
        param=param,
        field=param.name,
        at_least=param.at_least,
        at_least_why=param.at_least_why,
        below=param.below,
        below_why=param.below_why,
        refused=param.refused,
    )


_ALIAS_FIELDS = {
    "lower": ("X", "float", "LOW:", "the lower bound of {} buckets"),
    "upper": ("X", "float", ":UP", "the upper bound of {} buckets"),
    "buckets": ("N", "int", "::N", "the number of {} buckets"),
}


def bound_aliases(metric: str) -> tuple[Option, ...]:
    """The deprecated per-metric bound options of a surprise coverage (``--sadl-lsc-lower``,
    ``--sadl-lsc-upper``, ``--sadl-lsc-buckets`` and their ini twins), aliases of
    ``--sadl-sc-bounds`` kept for one release: hidden from ``--help``."""
    return tuple(
        Option(
            f"--sadl-{metric}-{part}",
            f"sadl_{metric}_{part}",
            f"deprecated, for one release: {what.format(metric.upper() + chr(39) + 's')}; "
            f"use --sadl-sc-bounds={metric}:{form}",
            kind=kind,
            metavar=metavar,
            limit=MAX_BUCKETS if part == "buckets" else None,
            limit_why="each run keeps a flag per bucket, for the total and for every group"
            if part == "buckets"
            else "",
            alias=f"sadl_sc_bounds:{metric}:{part}",
        )
        for part, (metavar, kind, form, what) in _ALIAS_FIELDS.items()
    )


_BOUND_ALIASES = tuple(opt for metric in SURPRISE for opt in bound_aliases(metric))

#: every criterion's parameters, from the registry, in report order
_PARAM_OPTIONS = tuple(param_option(p) for p in PARAMS)


OPTIONS: tuple[Option, ...] = (
    Option(
        "--sadl-coverage",
        "sadl_coverage",
        "measure surprise adequacy and neuron coverage of the model",
        "bool",
        False,
        "bool",
    ),
    Option(
        "--sadl-model",
        "sadl_model",
        "the model (Keras, or a torch.nn.Module): a .keras file or 'package.module:function' (or define a sadl_model fixture)",
        kind="path",
        metavar="PATH",
        field="model",
    ),
    Option(
        "--sadl-train",
        "sadl_train",
        "training data: a .npz/.npy file or 'package.module:function' (or define a sadl_train fixture)",
        kind="path",
        metavar="PATH",
        field="train",
    ),
    Option(
        "--sadl-layers",
        "sadl_layers",
        "layers for LSA/DSA, names or indices, comma-separated (default: the last hidden layer)",
        "linelist",
        None,
        "list",
        "L1,L2",
        field="sa_layers",
    ),
    Option(
        "--sadl-coverage-layers",
        "sadl_coverage_layers",
        "layers for NC/KMNC/NBC/SNAC (default: every layer with neurons, each neuron once after its activation)",
        "linelist",
        None,
        "list",
        "L1,L2",
        field="coverage_layers",
    ),
    Option(
        "--sadl-output",
        "sadl_output",
        "which output of a model with several gives the class (or marks a regression): a name or an index (default: the first)",
        metavar="NAME",
        field="output",
        parse=_layer_token,
    ),
    Option(
        "--sadl-sc-bounds",
        "sadl_sc_bounds",
        "each surprise coverage's bucket range and count, e.g. lsc:0:100:1000,dsc:0:2 "
        f"({SC_BOUNDS_FORM}; {', '.join(SURPRISE)}; an empty field or a metric not named: "
        "the bounds from the training profile, 1000 buckets)",
        "linelist",
        None,
        "str",
        "SPEC",
    ),
    *_PARAM_OPTIONS,
    Option(
        "--sadl-var-threshold",
        "sadl_var_threshold",
        "LSA and MDSA drop neurons whose training variance is below this, per class or in any class (see --sadl-var-rule) (default 1e-5)",
        None,
        1e-5,
        "float",
        "V",
        field="var_threshold",
        at_least=0,
        at_least_why="the variance threshold must be >= 0",
    ),
    Option(
        "--sadl-var-rule",
        "sadl_var_rule",
        "which neurons LSA and MDSA drop for too little variance: 'class', each class's KDE over the neurons that vary in that class; 'paper', a neuron below the threshold in any class is dropped from all, as the paper (default class)",
        None,
        "class",
        "str",
        "class|paper",
        field="var_rule",
        choices=("class", "paper"),
        choices_why="use 'class' (drop, per class, the neurons that do not vary in it) or 'paper' (drop a neuron that does not vary in any one class, from all)",
    ),
    Option(
        "--sadl-sa-components",
        "sadl_sa_components",
        "LSA, MDSA, MLSA and MMDSA on the first N principal axes of the SA layer's training traces (for layers too wide for a KDE or a covariance per class; DSA is not projected) (default: off, every neuron)",
        None,
        None,
        "int",
        "N",
        limit=4096,
        limit_why="a projection is for few dimensions: a KDE over N needs more than N training traces per class",
        field="sa_components",
        at_least=1,
        at_least_why="project onto at least 1 principal axis, or leave it out to measure every neuron",
    ),
    Option(
        "--sadl-lsa-near-singular",
        "sadl_lsa_near_singular",
        "LSA on a nearly singular covariance (softmax layers): drop dependent neurons (default) or keep the full covariance where it is positive definite, as SciPy and the paper's code do",
        None,
        "drop",
        "str",
        "drop|keep",
        field="lsa_near_singular",
        choices=("drop", "keep"),
        choices_why="use 'drop' (drop neurons that make the covariance nearly singular) or 'keep' (the full covariance, as SciPy's gaussian_kde)",
    ),
    Option(
        "--sadl-dsa-precompute",
        "sadl_dsa_precompute",
        "compute every training trace's nearest other-class distance (DSA's dist_b) when the profile is built; default: only those the tests' inputs need, kept in the profile for the next run",
        "bool",
        False,
        "bool",
        field="dsa_precompute",
    ),
    Option(
        "--sadl-batch-size",
        "sadl_batch_size",
        "inputs per forward pass when tracing the training set (default 256)",
        None,
        256,
        "int",
        "N",
        limit=65_536,
        limit_why="one batch of every traced layer's outputs is held in memory at once",
        field="batch_size",
        at_least=1,
        at_least_why="the batch size must be >= 1",
    ),
    Option(
        "--sadl-groups",
        "sadl_groups",
        "the order of the groups in the cumulative table (Table VI), comma-separated; groups not named follow, by their first test id (default: every group by its first test id)",
        "linelist",
        None,
        "list",
        "G1,G2",
    ),
    Option(
        "--sadl-ood-reference",
        "sadl_ood_reference",
        "the group whose inputs are in-distribution in the reports' OOD section (each other group's AUROC, AUPR "
        "and FPR@95 per score); default: the held-out training traces the profile keeps",
        None,
        None,
        "str",
        "GROUP",
        field="ood_reference",
        parse=_text_or_none,
    ),
    Option(
        "--sadl-report",
        "sadl_report",
        "report type: term, term-verbose, json[:PATH], html[:DIR], markdown[:PATH], badge[:DIR] (one shields.io file per metric); repeatable (default term)",
        "linelist",
        None,
        "append",
        "TYPE",
    ),
    Option(
        "--sadl-metrics",
        "sadl_metrics",
        "the metrics to compute and report, comma-separated, or all (every registered criterion); "
        f"default: {','.join(DEFAULT_METRICS)}",
        "linelist",
        None,
        "str",
        "LIST",
    ),
    Option(
        "--sadl-fail-under",
        "sadl_fail_under",
        "fail when a metric is below a percentage, e.g. lsc:30,dsc:40,nc:50",
        "linelist",
        None,
        "str",
        "SPEC",
    ),
    Option(
        "--sadl-cache-dir",
        "sadl_cache_dir",
        "where training profiles are cached (default: .pytest_cache/d/sadl)",
        kind="path",
        metavar="DIR",
        field="cache_dir",
        parse=Path,
    ),
    Option(
        "--sadl-lock-timeout",
        "sadl_lock_timeout",
        "seconds to wait for another process building the same training profile (its lock) before building it in memory, unsaved (default 300)",
        None,
        300.0,
        "float",
        "S",
        field="lock_timeout",
        at_least=0,
        at_least_why="the lock wait limit is a number of seconds >= 0",
    ),
    Option(
        "--sadl-dask",
        "sadl_dask",
        "build the training profile on the workers of the Dask scheduler at this address, e.g. tcp://host:8786 (the same profile as a local build), and with 20,000 training traces or more score LSA and DSA there (the same scores); needs pytest-sadl[dask]",
        metavar="ADDRESS",
        field="dask",
        parse=_text_or_none,
    ),
    Option(
        "--sadl-compare",
        "sadl_compare",
        "a baseline results JSON to compare this run's metrics with",
        kind="path",
        metavar="BASELINE.json",
    ),
    Option(
        "--sadl-compare-fail",
        "sadl_compare_fail",
        "fail when a metric drops by more than this many points from the baseline, e.g. lsc:-2",
        "linelist",
        None,
        "str",
        "SPEC",
    ),
    Option(
        "--sadl-gate-partial",
        "sadl_gate_partial",
        "apply --sadl-fail-under and --sadl-compare-fail to a partial run too (-x, --maxfail, -k, -m, --lf, --sw, "
        "--deselect): by default a run that measured only some marked tests says so and does not gate",
        "bool",
        False,
        "bool",
        field="gate_partial",
    ),
    Option(
        "--sadl-omit-covered-sets",
        "sadl_omit_covered_sets",
        "leave each test's covered sets (the results' covered section, MBs on a big model) out of the JSON "
        "results: the per-test unique counts are still computed, but sadl combine, sadl minimize and a "
        "partial run's like-with-like comparison against this file need them",
        "bool",
        False,
        "bool",
        field="omit_covered_sets",
    ),
    *_BOUND_ALIASES,
)


#: boolean options with a ``--no-`` twin that wins over the ini: (its destination, help)
_NEGATED = {
    "sadl_coverage": ("sadl_no_coverage", "switch measuring off, even when sadl_coverage = true in the ini file"),
    "sadl_dsa_precompute": (
        "sadl_no_dsa_precompute",
        "do not compute every dist_b at build, even when sadl_dsa_precompute = true in the ini file",
    ),
}


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("sadl", "surprise adequacy and neuron coverage (pytest-sadl)")
    for opt in OPTIONS:
        group.addoption(opt.flag, **_flag_kwargs(opt))
        if opt.ini in _NEGATED:
            group.addoption(
                "--no-" + opt.flag[2:],
                dest=_NEGATED[opt.ini][0],
                action="store_true",
                default=False,
                help=_NEGATED[opt.ini][1],
            )
        _add_ini(parser, opt)


def _flag_kwargs(opt: Option) -> dict[str, Any]:
    """The command-line flag's ``addoption`` arguments (an alias is hidden from the help)."""
    kwargs: dict[str, Any] = {"dest": opt.ini, "help": argparse.SUPPRESS if opt.alias else opt.help}
    if opt.kind == "bool":
        kwargs.update(action="store_true", default=None)
    elif opt.kind == "append":
        kwargs.update(action="append", default=None, metavar=opt.metavar)
    else:
        kwargs.update(action="store", default=None, metavar=opt.metavar)
    return kwargs


def _add_ini(parser: pytest.Parser, opt: Option) -> None:
    """The option's ini key, of its ini type."""
    if opt.ini_type == "linelist":
        parser.addini(opt.ini, opt.help, type="linelist", default=[])
    elif opt.ini_type == "bool":
        parser.addini(opt.ini, opt.help, type="bool", default=opt.default)
    else:
        parser.addini(opt.ini, opt.help, default=None)


def parse_thresholds(spec: str, option: str = "--sadl-fail-under") -> dict[str, float]:
    """``"lsc:30,dsc:40"`` to ``{"lsc": 30.0, "dsc": 40.0}`` (percent), a bad one a usage error."""
    try:
        return parse_metric_numbers(spec, option)
    except ValueError as exc:
        raise _usage(str(exc)) from None


def parse_report(spec: str, base: Path) -> Report:
    kind, sep, path = spec.partition(":")
    kind = kind.strip().lower()
    if kind not in REPORT_KINDS:
        raise _usage(f"--sadl-report={spec!r}: unknown report type {kind!r}; use one of {', '.join(REPORT_KINDS)}")
    if kind.startswith("term"):
        if sep:
            raise _usage(f"--sadl-report={spec!r}: the terminal report takes no path")
        return Report(kind)
    target = Path(path.strip()) if sep and path.strip() else _default_report_path(kind)
    return Report(kind, target if target.is_absolute() else base / target)


def _default_report_path(kind: str) -> Path:
    """Where a report of ``kind`` goes without a path (Markdown: a GitHub Actions job
    summary when there is one)."""
    if kind == "markdown" and os.environ.get("GITHUB_STEP_SUMMARY"):
        return Path(os.environ["GITHUB_STEP_SUMMARY"])
    return Path(DEFAULT_REPORT_PATHS[kind])


def check_report_paths(reports: tuple[Report, ...], where: str = "--sadl-report") -> tuple[Report, ...]:
    """The reports, each file written once: two kinds to one path (after resolving ``..``
    and symbolic links: ``json:same.out`` and ``markdown:./same.out``) are a usage error
    naming both, since one would silently overwrite the other; the same kind twice to one
    path is one report. An HTML report is its folder's ``index.html``."""
    seen: dict[str, Report] = {}
    out = []
    for report in reports:
        if report.path is None:
            out.append(report)
            continue
        key = os.path.realpath(report.path / "index.html" if report.kind == "html" else report.path)
        first = seen.get(key)
        if first is None:
            seen[key] = report
            out.append(report)
        elif first.kind != report.kind:
            raise _usage(
                f"{where}: {first.kind}:{first.path} and {report.kind}:{report.path} write the same file "
                f"({key}); give each report its own path"
            )
    return tuple(out)


#: What each kind of option takes in a TOML file (the values pytest turns into strings).
_TOML_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "bool": ((bool, str), "true or false"),
    "float": ((int, float, str), "a number"),
    "int": ((int, str), "an integer"),
    "path": ((str,), "a path or 'package.module:function' (a string)"),
    "str": ((str, list), 'a string such as "lsc:30,nc:50" or a list of them'),
    "list": ((str, list), "a list of names or a comma-separated string"),
    "append": ((str, list), "a list of report types or a comma-separated string"),
}


def _one_value(opt: Option, ini: Any) -> Any:
    """An ini value as one value, unless the option takes a list: a list for a ``str``
    option joined with commas (``sadl_fail_under = ["lsc:30", "nc:50"]``), else refused."""
    if isinstance(ini, list) and opt.kind not in ("list", "append"):
        if opt.kind != "str":
            raise _usage(f"{opt.ini} (ini)={ini!r}: expected one value, not a list")
        return ",".join(str(item) for item in ini)
    return ini


def _pytest_table(path: Path) -> dict[str, Any]:
    """The pytest table of the TOML file ``path`` (``ini_options`` over ``[tool.pytest]``);
    empty when it cannot be read."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10: pytest's own dependency
        import tomli as tomllib
    with contextlib.suppress(OSError, ValueError):
        tool = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {}).get("pytest", {})
        return {**tool, **tool.get("ini_options", {})}
    return {}


class _Reader:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.inidir = Path(config.inipath).parent if config.inipath else Path(config.rootpath)
        self.cwd = Path(config.invocation_params.dir)
        self._toml: dict[str, Any] | None = None

    def toml_values(self) -> dict[str, Any]:
        """The ``[tool.pytest.ini_options]`` (or ``[tool.pytest]``) table with its TOML types:
        pytest hands ``sadl_cache_dir = true`` over as the string ``"True"``."""
        if self._toml is None:
            self._toml = {}
            path = Path(self.config.inipath) if self.config.inipath else None
            if path is not None and path.suffix == ".toml":
                self._toml = _pytest_table(path)
        return self._toml

    def raw(self, opt: Option) -> tuple[Any, Path]:
        """(value, directory relative paths resolve against); (None, _) when unset."""
        value = self.config.getoption(opt.ini)
        if value is not None:
            return value, self.cwd
        native = self.toml_values().get(opt.ini)
        self._check_toml_type(opt, native)
        ini = self._ini(opt, native)
        if ini in (None, "", []):
            return None, self.inidir
        return _one_value(opt, ini), self.inidir

    def _check_toml_type(self, opt: Option, native: Any) -> None:
        """A value of the TOML table of a type the option takes (``True`` for a path is not)."""
        types, what = _TOML_TYPES[opt.kind]
        if native is not None and not isinstance(native, types) or (isinstance(native, bool) and bool not in types):
            raise _usage(
                f"{opt.ini} = {_toml_repr(native)} in {Path(self.config.inipath).name}: expected {what}"  # type: ignore[arg-type]
            )

    def _ini(self, opt: Option, native: Any) -> Any:
        """The option's ini value as pytest gives it (``native``: its TOML value, if any)."""
        try:
            return self.config.getini(opt.ini)
        except _usage_error():
            # pytest 9's native [tool.pytest] table checks TOML types itself: a string where
            # the option is declared a line list; the value passed the check above
            if native is None:
                raise
            return [native] if isinstance(native, str) else native

    def label(self, opt: Option) -> str:
        """How to name the option in a message: as the user gave it."""
        return opt.flag if self.config.getoption(opt.ini) is not None else f"{opt.ini} (ini)"

    def number(self, opt: Option, cast: type) -> Any:
        value, _ = self.raw(opt)
        if value is None:
            return opt.default
        where = self.label(opt)
        number = _cast_number(value, cast, where)
        if opt.limit is not None and number > opt.limit:
            raise _usage(f"{where}={value}: at most {opt.limit:,.0f} ({opt.limit_why})")
        return number


def _cast_number(value: Any, cast: type, where: str) -> Any:
    """``value`` as an ``int`` or a finite ``float``; else a usage error naming ``where``."""
    try:
        number = cast(str(value).strip())
    except ValueError:
        kind = "an integer" if cast is int else "a number"
        raise _usage(f"{where}={value!r} is not {kind}") from None
    if cast is float and not math.isfinite(number):
        raise _usage(f"{where}={value!r} must be finite")
    return number


def _toml_repr(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else repr(value)


def _switch(config: pytest.Config, name: str) -> bool:
    """A boolean option: its flag, or ``name = true`` in the ini, unless its ``--no-`` flag."""
    if name in _NEGATED and config.getoption(_NEGATED[name][0]):
        return False
    try:
        ini = bool(config.getini(name))
    except (ValueError, _usage_error()) as exc:
        # pytest < 9.2 raises ValueError, 9.2+ a UsageError, both "invalid truth value 'maybe'":
        # neither names the option, so say which one and how to write it
        raise _usage(f"{name} (ini) is not a boolean: {exc}; write true or false") from None
    return bool(config.getoption(name)) or ini


def _enabled(config: pytest.Config) -> bool:
    """``--sadl-coverage`` or ``sadl_coverage = true``, unless ``--no-sadl-coverage``."""
    return _switch(config, "sadl_coverage")


def _path_or_spec(value: str, base: Path) -> str:
    """A ``pkg.mod:func`` spec as it is; a path made absolute against ``base``."""
    text = str(value).strip()
    from pytest_sadl.specs import is_callable_spec  # pure Python, no TensorFlow

    if is_callable_spec(text) and not (base / text).exists():
        return text
    path = Path(text).expanduser()
    return str(path if path.is_absolute() else base / path)


def _compare_fail(
    r: _Reader, opts: dict[str, Option], compare: str | None, metrics: tuple[str, ...] = METRICS
) -> dict[str, float]:
    """``--sadl-compare-fail``'s allowed drops per metric (``all``: every metric of the
    run), with the ``--sadl-compare`` baseline (``compare``, its path) checked as well."""
    compare_fail_value, _ = r.raw(opts["sadl_compare_fail"])
    compare_fail: dict[str, float] = {}
    if compare_fail_value:
        label = r.label(opts["sadl_compare_fail"])
        try:
            compare_fail = parse_metric_numbers(str(compare_fail_value), label, drops=True, every=metrics)
        except ValueError as exc:
            raise _usage(str(exc)) from None
        check_chosen(compare_fail, metrics, label)
    if compare is not None:
        _check_baseline(compare)
    if compare_fail and compare is None:
        raise _usage("--sadl-compare-fail needs a baseline: add --sadl-compare=BASELINE.json")
    return compare_fail


def _check_baseline(compare: str) -> None:
    """A missing, broken or newer ``--sadl-compare`` baseline is a usage error now, not at the end."""
    from pytest_sadl.resultsfile import load_results

    try:
        load_results(compare)
    except ValueError as exc:
        raise _usage(f"--sadl-compare: {exc}") from None


def read_options(config: pytest.Config) -> SadlOptions:
    """Parse and validate; a bad value is a :class:`pytest.UsageError` naming option and fix.

    Each row with a ``field`` is read by :func:`read_value` (its kind, limits and choices);
    the reports, thresholds and bounds by their own functions."""
    r = _Reader(config)
    opts = {o.ini: o for o in OPTIONS}
    if not _enabled(config):  # only what the fixtures need: a broken threshold must not break `pytest --help`
        model, train = read_value(r, opts["sadl_model"]), read_value(r, opts["sadl_train"])
        return SadlOptions(enabled=False, model=model, train=train, base_dir=r.inidir)
    values = {opt.field: read_value(r, opt) for opt in OPTIONS if opt.field is not None}
    metrics = parse_metrics(r.raw(opts["sadl_metrics"])[0], r.label(opts["sadl_metrics"]))
    compare = read_value(r, opts["sadl_compare"])
    return SadlOptions(
        enabled=True,
        sc_bounds=read_sc_bounds(r, opts),
        reports=_reports(r, opts["sadl_report"]),
        groups=_groups(r, opts["sadl_groups"]),
        fail_under=_fail_under(r, opts["sadl_fail_under"], metrics),
        metrics=metrics,
        compare=Path(compare) if compare else None,
        compare_fail=_compare_fail(r, opts, compare, metrics),
        base_dir=r.inidir,
        **with_params(values),
    )


def read_value(r: _Reader, opt: Option) -> Any:
    """One row's value by its kind: a switch, a number within its limits, one of its
    choices, a layer list, a path (made absolute), or text (``parse`` applied)."""
    if opt.kind == "bool":
        return _switch(r.config, opt.ini)
    if opt.kind in ("int", "float"):
        return _number(r, opt)
    value, base = r.raw(opt)
    if opt.kind == "list":
        return parse_layers(value)
    if value is None:
        return opt.default
    return _text_value(r, opt, value, base)


def _text_value(r: _Reader, opt: Option, value: Any, base: Path) -> Any:
    """A set value of a text row: a path (made absolute against ``base``), one of its
    choices, or text; its ``parse`` applied."""
    if opt.kind == "path":
        value = _path_or_spec(value, base)
    elif opt.choices:
        value = _choice(r, opt, value)
    return opt.parse(value) if opt.parse is not None else value


def _number(r: _Reader, opt: Option) -> Any:
    value = r.number(opt, int if opt.kind == "int" else float)
    if value is None:
        return None
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    if (opt.at_least is not None and value < opt.at_least) or value in opt.refused:
        raise _usage(f"{r.label(opt)}={shown}: {opt.at_least_why}")
    if opt.below is not None and value >= opt.below:
        raise _usage(f"{r.label(opt)}={shown}: {opt.below_why}")
    return value


def _choice(r: _Reader, opt: Option, value: Any) -> str:
    text = str(value).strip()
    if text not in opt.choices:
        raise _usage(f"{r.label(opt)}={value!r}: {opt.choices_why}")
    return text


def _reports(r: _Reader, opt: Option) -> tuple[Report, ...]:
    values, base = r.raw(opt)
    specs = _split_list(values) if values else ["term"]
    reports = tuple(dict.fromkeys(parse_report(s, base) for s in specs))
    return check_report_paths(reports, r.label(opt))


def _groups(r: _Reader, opt: Option) -> tuple[str, ...]:
    value, _ = r.raw(opt)
    if not value:
        return ()
    return tuple(dict.fromkeys(_split_list(value if isinstance(value, list) else [value])))


def _fail_under(r: _Reader, opt: Option, metrics: tuple[str, ...]) -> dict[str, float]:
    value, _ = r.raw(opt)
    fail_under = parse_thresholds(str(value), r.label(opt)) if value else {}
    check_chosen(fail_under, metrics, r.label(opt))
    return fail_under


def read_sc_bounds(r: _Reader, opts: dict[str, Option]) -> dict[str, Bounds]:
    """``--sadl-sc-bounds`` (and its deprecated per-metric aliases) as each surprise
    coverage's :class:`Bounds`; a field set twice, or a bad one, is a usage error."""
    value, _ = r.raw(opts["sadl_sc_bounds"])
    label = r.label(opts["sadl_sc_bounds"])
    try:
        given = parse_sc_bounds(str(value), label) if value else {}
        out = {}
        for metric in SURPRISE:
            lower, upper, buckets = _with_aliases(r, opts, metric, given.get(metric, (None, None, None)), label)
            if metric in given:
                check_bounds(metric, lower, upper, label)
            else:
                _check_alias_order(r, opts, metric, lower, upper)
            out[metric] = Bounds(lower, upper, 1000 if buckets is None else buckets)
    except ValueError as exc:
        raise _usage(str(exc)) from None
    return out


def _check_alias_order(
    r: _Reader, opts: dict[str, Option], metric: str, lower: float | None, upper: float | None
) -> None:
    """The deprecated per-metric aliases' upper bound above their lower one."""
    if lower is not None and upper is not None and upper <= lower:
        raise ValueError(
            f"{r.label(opts[f'sadl_{metric}_upper'])}={upper:g} is not above "
            f"{r.label(opts[f'sadl_{metric}_lower'])}={lower:g}; "
            f"{metric.upper()}'s buckets divide (lower, upper], so upper must be greater"
        )


def _with_aliases(r: _Reader, opts: dict[str, Option], metric: str, given: PartBounds, label: str) -> PartBounds:
    """A metric's bounds from ``--sadl-sc-bounds`` with the deprecated aliases' fields added."""
    lower, upper, buckets = given
    for part, mine in (("lower", lower), ("upper", upper), ("buckets", buckets)):
        if r.raw(opts[f"sadl_{metric}_{part}"])[0] is not None and mine is not None:
            raise ValueError(
                f"{r.label(opts[f'sadl_{metric}_{part}'])} and {label} both set the {part} of "
                f"{metric.upper()}'s buckets; keep {label} (the per-metric options are deprecated)"
            )
    lower = lower if lower is not None else r.number(opts[f"sadl_{metric}_lower"], float)
    upper = upper if upper is not None else r.number(opts[f"sadl_{metric}_upper"], float)
    if buckets is None:
        buckets = _alias_buckets(r, opts[f"sadl_{metric}_buckets"])
    return lower, upper, buckets


def _alias_buckets(r: _Reader, opt: Option) -> int | None:
    """A deprecated ``--sadl-<metric>-buckets`` alias's count, None when unset."""
    if r.raw(opt)[0] is None:
        return None
    buckets = int(r.number(opt, int))
    if buckets < 1:
        raise ValueError(f"{r.label(opt)}={buckets}: needs at least 1 bucket")
    return buckets


def with_params(values: dict[str, Any]) -> dict[str, Any]:
    """``SadlOptions`` keyword arguments of criteria parameters: a field where the
    dataclass has one (``tknp_k``), the rest (a criterion from outside) in ``extra``."""
    fields = {f.name for f in dataclasses.fields(SadlOptions)}
    known = {k: v for k, v in values.items() if k in fields}
    return {**known, "extra": {k: v for k, v in values.items() if k not in fields}}


def parse_metrics(value: Any, option: str = "--sadl-metrics") -> tuple[str, ...]:
    """The one ``--sadl-metrics`` parser (also ``--metrics`` of the ``sadl`` commands): a
    comma list (or a list of them) to the metrics in report order; ``all`` for every
    registered criterion; nothing: the default ones. An unknown name is a usage error
    whose one line lists the valid names."""
    from pytest_sadl.criteria.registry import choose

    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    try:
        return choose(None if value is None else str(value))
    except ValueError as exc:
        raise _usage(f"{option}={value!r}: {exc}") from None


def check_chosen(thresholds: dict[str, float], metrics: tuple[str, ...], option: str) -> None:
    """A threshold on a metric the run does not compute is a usage error."""
    missing = [m for m in thresholds if m not in metrics]
    if missing:
        raise _usage(
            f"{option} sets {', '.join(missing)}, which this run does not compute "
            f"(--sadl-metrics={','.join(metrics)}); add {', '.join(missing)} to --sadl-metrics or drop the threshold"
        )


def check_paths(options: SadlOptions) -> None:
    """Missing model/training files are usage errors; ``pkg.mod:func`` specs are checked when loaded."""
    for flag, value, kind in (
        ("--sadl-model", options.model, "a .keras model file"),
        ("--sadl-train", options.train, "a .npz/.npy file"),
    ):
        if value is not None and os.path.isabs(value) and not Path(value).exists():
            raise _usage(
                f"{flag}: {value!r} does not exist; give {kind} "
                f"(ini paths are relative to {options.base_dir}) or 'package.module:function'"
            )
