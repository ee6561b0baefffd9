"""The plugin's options: command line flags, their ini twins, parsing and validation.

Every option ``--sadl-foo`` has an ini twin ``sadl_foo`` (``[tool.pytest.ini_options]``);
the command line wins. Ini paths are relative to the ini file's directory (the rootdir),
command-line paths to the directory pytest was invoked from. Everything here is pure
Python: parsing the options imports no TensorFlow.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sadl.config import (
    DEFAULT_REPORT_PATHS,
    REPORT_KINDS,
    Bounds,
    Report,
    SadlOptions,
    _split_list,
    layer_token,
    parse_layers,
    parse_metric_numbers,
)
from pytest_sadl.criteria.registry import DEFAULT_METRICS, METRICS

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
    ),
    Option(
        "--sadl-train",
        "sadl_train",
        "training data: a .npz/.npy file or 'package.module:function' (or define a sadl_train fixture)",
        kind="path",
        metavar="PATH",
    ),
    Option(
        "--sadl-layers",
        "sadl_layers",
        "layers for LSA/DSA, names or indices, comma-separated (default: the last hidden layer)",
        "linelist",
        None,
        "list",
        "L1,L2",
    ),
    Option(
        "--sadl-coverage-layers",
        "sadl_coverage_layers",
        "layers for NC/KMNC/NBC/SNAC (default: every layer with neurons, each neuron once after its activation)",
        "linelist",
        None,
        "list",
        "L1,L2",
    ),
    Option(
        "--sadl-output",
        "sadl_output",
        "which output of a model with several gives the class (or marks a regression): a name or an index (default: the first)",
        metavar="NAME",
    ),
    Option(
        "--sadl-lsc-lower",
        "sadl_lsc_lower",
        "lower bound of LSC's buckets (default: from the training profile)",
        kind="float",
        metavar="X",
    ),
    Option(
        "--sadl-lsc-upper",
        "sadl_lsc_upper",
        "upper bound of LSC's buckets (default: from the training profile)",
        kind="float",
        metavar="X",
    ),
    Option(
        "--sadl-lsc-buckets",
        "sadl_lsc_buckets",
        "number of LSC buckets (default 1000)",
        None,
        1000,
        "int",
        "N",
        limit=1_000_000,
        limit_why="each run keeps a flag per bucket, for the total and for every group",
    ),
    Option(
        "--sadl-dsc-lower",
        "sadl_dsc_lower",
        "lower bound of DSC's buckets (default: from the training profile)",
        kind="float",
        metavar="X",
    ),
    Option(
        "--sadl-dsc-upper",
        "sadl_dsc_upper",
        "upper bound of DSC's buckets (default: from the training profile)",
        kind="float",
        metavar="X",
    ),
    Option(
        "--sadl-dsc-buckets",
        "sadl_dsc_buckets",
        "number of DSC buckets (default 1000)",
        None,
        1000,
        "int",
        "N",
        limit=1_000_000,
        limit_why="each run keeps a flag per bucket, for the total and for every group",
    ),
    Option(
        "--sadl-mdsc-lower",
        "sadl_mdsc_lower",
        "lower bound of MDSC's buckets (default: from the training profile)",
        kind="float",
        metavar="X",
    ),
    Option(
        "--sadl-mdsc-upper",
        "sadl_mdsc_upper",
        "upper bound of MDSC's buckets (default: from the training profile)",
        kind="float",
        metavar="X",
    ),
    Option(
        "--sadl-mdsc-buckets",
        "sadl_mdsc_buckets",
        "number of MDSC buckets (default 1000)",
        None,
        1000,
        "int",
        "N",
        limit=1_000_000,
        limit_why="each run keeps a flag per bucket, for the total and for every group",
    ),
    Option(
        "--sadl-mlsc-lower",
        "sadl_mlsc_lower",
        "lower bound of MLSC's buckets (default: from the training profile)",
        kind="float",
        metavar="X",
    ),
    Option(
        "--sadl-mlsc-upper",
        "sadl_mlsc_upper",
        "upper bound of MLSC's buckets (default: from the training profile)",
        kind="float",
        metavar="X",
    ),
    Option(
        "--sadl-mlsc-buckets",
        "sadl_mlsc_buckets",
        "number of MLSC buckets (default 1000)",
        None,
        1000,
        "int",
        "N",
        limit=1_000_000,
        limit_why="each run keeps a flag per bucket, for the total and for every group",
    ),
    Option(
        "--sadl-mmdsc-lower",
        "sadl_mmdsc_lower",
        "lower bound of MMDSC's buckets (default: from the training profile)",
        kind="float",
        metavar="X",
    ),
    Option(
        "--sadl-mmdsc-upper",
        "sadl_mmdsc_upper",
        "upper bound of MMDSC's buckets (default: from the training profile)",
        kind="float",
        metavar="X",
    ),
    Option(
        "--sadl-mmdsc-buckets",
        "sadl_mmdsc_buckets",
        "number of MMDSC buckets (default 1000)",
        None,
        1000,
        "int",
        "N",
        limit=1_000_000,
        limit_why="each run keeps a flag per bucket, for the total and for every group",
    ),
    Option(
        "--sadl-mlsa-components",
        "sadl_mlsa_components",
        "MLSA: Gaussian mixture components per class (default 2)",
        None,
        2,
        "int",
        "K",
    ),
    Option(
        "--sadl-mmdsa-modes",
        "sadl_mmdsa_modes",
        "MMDSA: k-means modes per class (default 2)",
        None,
        2,
        "int",
        "K",
    ),
    Option(
        "--sadl-nc-threshold",
        "sadl_nc_threshold",
        "NC activation threshold on the min-max scaled output (default 0.5)",
        None,
        0.5,
        "float",
        "T",
    ),
    Option(
        "--sadl-kmnc-k",
        "sadl_kmnc_k",
        "KMNC's number of sections per neuron (default 1000)",
        None,
        1000,
        "int",
        "K",
        limit=10_000,
        limit_why="KMNC keeps neurons x k flags, for the total and for every group; the paper uses 1000",
    ),
    Option(
        "--sadl-tknc-k",
        "sadl_tknc_k",
        "TKNC: a neuron is covered when among the k most active of its layer for some input (default 2)",
        None,
        2,
        "int",
        "K",
    ),
    Option(
        "--sadl-tknp-k",
        "sadl_tknp_k",
        "TKNP: a pattern is the top-k set of every coverage layer (default 2)",
        None,
        2,
        "int",
        "K",
    ),
    Option(
        "--sadl-cc-threshold",
        "sadl_cc_threshold",
        "CC: an input farther than this Euclidean distance from every cluster centre of a layer starts a new one (default 10)",
        None,
        10.0,
        "float",
        "D",
    ),
    Option(
        "--sadl-var-threshold",
        "sadl_var_threshold",
        "LSA and MDSA drop neurons whose training variance is below this, per class or in any class (see --sadl-var-rule) (default 1e-5)",
        None,
        1e-5,
        "float",
        "V",
    ),
    Option(
        "--sadl-var-rule",
        "sadl_var_rule",
        "which neurons LSA and MDSA drop for too little variance: 'class', each class's KDE over the neurons that vary in that class; 'paper', a neuron below the threshold in any class is dropped from all, as the paper (default class)",
        None,
        "class",
        "str",
        "class|paper",
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
    ),
    Option(
        "--sadl-lsa-near-singular",
        "sadl_lsa_near_singular",
        "LSA on a nearly singular covariance (softmax layers): drop dependent neurons (default) or keep the full covariance where it is positive definite, as SciPy and the paper's code do",
        None,
        "drop",
        "str",
        "drop|keep",
    ),
    Option(
        "--sadl-dsa-precompute",
        "sadl_dsa_precompute",
        "compute every training trace's nearest other-class distance (DSA's dist_b) when the profile is built; default: only those the tests' inputs need, kept in the profile for the next run",
        "bool",
        False,
        "bool",
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
    ),
    Option(
        "--sadl-lock-timeout",
        "sadl_lock_timeout",
        "seconds to wait for another process building the same training profile (its lock) before building it in memory, unsaved (default 300)",
        None,
        300.0,
        "float",
        "S",
    ),
    Option(
        "--sadl-dask",
        "sadl_dask",
        "build the training profile on the workers of the Dask scheduler at this address, e.g. tcp://host:8786 (the same profile as a local build), and with 20,000 training traces or more score LSA and DSA there (the same scores); needs pytest-sadl[dask]",
        metavar="ADDRESS",
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
    ),
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
        kwargs: dict[str, Any] = {"dest": opt.ini, "help": opt.help}
        if opt.kind == "bool":
            kwargs.update(action="store_true", default=None)
        elif opt.kind == "append":
            kwargs.update(action="append", default=None, metavar=opt.metavar)
        else:
            kwargs.update(action="store", default=None, metavar=opt.metavar)
        group.addoption(opt.flag, **kwargs)
        if opt.ini in _NEGATED:
            group.addoption(
                "--no-" + opt.flag[2:],
                dest=_NEGATED[opt.ini][0],
                action="store_true",
                default=False,
                help=_NEGATED[opt.ini][1],
            )
        ini_default = opt.default if opt.ini_type in ("bool",) else None
        if opt.ini_type == "linelist":
            parser.addini(opt.ini, opt.help, type="linelist", default=[])
        elif opt.ini_type == "bool":
            parser.addini(opt.ini, opt.help, type="bool", default=ini_default)
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
    default = DEFAULT_REPORT_PATHS[kind]
    if kind == "markdown" and os.environ.get("GITHUB_STEP_SUMMARY"):
        default = os.environ["GITHUB_STEP_SUMMARY"]  # a GitHub Actions job summary
    target = Path(path.strip()) if sep and path.strip() else Path(default)
    return Report(kind, target if target.is_absolute() else base / target)


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
                if sys.version_info >= (3, 11):
                    import tomllib
                else:  # pragma: no cover - Python 3.10: pytest's own dependency
                    import tomli as tomllib
                with contextlib.suppress(OSError, ValueError):
                    tool = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {}).get("pytest", {})
                    self._toml = {**tool, **tool.get("ini_options", {})}
        return self._toml

    def raw(self, opt: Option) -> tuple[Any, Path]:
        """(value, directory relative paths resolve against); (None, _) when unset."""
        value = self.config.getoption(opt.ini)
        if value is not None:
            return value, self.cwd
        native = self.toml_values().get(opt.ini)
        types, what = _TOML_TYPES[opt.kind]
        if native is not None and not isinstance(native, types) or (isinstance(native, bool) and bool not in types):
            raise _usage(
                f"{opt.ini} = {_toml_repr(native)} in {Path(self.config.inipath).name}: expected {what}"  # type: ignore[arg-type]
            )
        try:
            ini = self.config.getini(opt.ini)
        except _usage_error():
            # pytest 9's native [tool.pytest] table checks TOML types itself: a string where
            # the option is declared a line list; the value passed the check above
            if native is None:
                raise
            ini = [native] if isinstance(native, str) else native
        if ini in (None, "", []):
            return None, self.inidir
        if isinstance(ini, list) and opt.kind not in ("list", "append"):
            if opt.kind != "str":
                raise _usage(f"{opt.ini} (ini)={ini!r}: expected one value, not a list")
            ini = ",".join(str(item) for item in ini)  # sadl_fail_under = ["lsc:30", "nc:50"]
        return ini, self.inidir

    def label(self, opt: Option) -> str:
        """How to name the option in a message: as the user gave it."""
        return opt.flag if self.config.getoption(opt.ini) is not None else f"{opt.ini} (ini)"

    def number(self, opt: Option, cast: type) -> Any:
        value, _ = self.raw(opt)
        if value is None:
            return opt.default
        where = self.label(opt)
        try:
            number = cast(str(value).strip())
        except ValueError:
            kind = "an integer" if cast is int else "a number"
            raise _usage(f"{where}={value!r} is not {kind}") from None
        if cast is float and not math.isfinite(number):
            raise _usage(f"{where}={value!r} must be finite")
        if opt.limit is not None and number > opt.limit:
            raise _usage(f"{where}={value}: at most {opt.limit:,.0f} ({opt.limit_why})")
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
        from pytest_sadl.resultsfile import load_results

        try:  # a missing, broken or newer baseline is a usage error now, not at the end
            load_results(compare)
        except ValueError as exc:
            raise _usage(f"--sadl-compare: {exc}") from None
    if compare_fail and compare is None:
        raise _usage("--sadl-compare-fail needs a baseline: add --sadl-compare=BASELINE.json")
    return compare_fail


def read_options(config: pytest.Config) -> SadlOptions:
    """Parse and validate; a bad value is a :class:`pytest.UsageError` naming option and fix."""
    r = _Reader(config)
    opts = {o.ini: o for o in OPTIONS}
    enabled = _enabled(config)

    def path(name: str) -> str | None:
        value, base = r.raw(opts[name])
        return None if value is None else _path_or_spec(value, base)

    if not enabled:  # only what the fixtures need: a broken threshold must not break `pytest --help`
        return SadlOptions(enabled=False, model=path("sadl_model"), train=path("sadl_train"), base_dir=r.inidir)

    def layers(name: str) -> tuple[str | int, ...] | None:
        return parse_layers(r.raw(opts[name])[0])

    def bounds(prefix: str) -> Bounds:
        lo_opt, up_opt, n_opt = (opts[f"sadl_{prefix}_{k}"] for k in ("lower", "upper", "buckets"))
        lower, upper, buckets = r.number(lo_opt, float), r.number(up_opt, float), r.number(n_opt, int)
        if buckets < 1:
            raise _usage(f"{r.label(n_opt)}={buckets}: needs at least 1 bucket")
        if lower is not None and upper is not None and upper <= lower:
            raise _usage(
                f"{r.label(up_opt)}={upper:g} is not above {r.label(lo_opt)}={lower:g}; "
                f"{prefix.upper()}'s buckets divide (lower, upper], so upper must be greater"
            )
        return Bounds(lower, upper, buckets)

    def at_least(name: str, cast: type, low: float, what: str) -> Any:
        value = r.number(opts[name], cast)
        if value < low:
            raise _usage(f"{r.label(opts[name])}={value:g}: {what}")
        return value

    k = at_least("sadl_kmnc_k", int, 1, "KMNC needs k >= 1 sections per neuron")
    components = at_least("sadl_mlsa_components", int, 1, "MLSA needs at least 1 mixture component per class")
    modes = at_least("sadl_mmdsa_modes", int, 1, "MMDSA needs at least 1 k-means mode per class")
    tknc_k = at_least("sadl_tknc_k", int, 1, "TKNC needs k >= 1 neurons per layer")
    tknp_k = at_least("sadl_tknp_k", int, 1, "TKNP needs k >= 1 neurons per layer")
    cc_threshold = at_least("sadl_cc_threshold", float, 0, "CC's distance threshold must be >= 0")
    var_threshold = at_least("sadl_var_threshold", float, 0, "the variance threshold must be >= 0")
    sa_components = r.number(opts["sadl_sa_components"], int)
    if sa_components is not None and sa_components < 1:
        raise _usage(
            f"{r.label(opts['sadl_sa_components'])}={sa_components}: project onto at least 1 principal axis, "
            "or leave it out to measure every neuron"
        )
    near_value, _ = r.raw(opts["sadl_lsa_near_singular"])
    lsa_near_singular = "drop" if near_value is None else str(near_value).strip()
    if lsa_near_singular not in ("drop", "keep"):
        raise _usage(
            f"{r.label(opts['sadl_lsa_near_singular'])}={near_value!r}: use 'drop' (drop neurons that make "
            "the covariance nearly singular) or 'keep' (the full covariance, as SciPy's gaussian_kde)"
        )
    rule_value, _ = r.raw(opts["sadl_var_rule"])
    var_rule = "class" if rule_value is None else str(rule_value).strip()
    if var_rule not in ("class", "paper"):
        raise _usage(
            f"{r.label(opts['sadl_var_rule'])}={rule_value!r}: use 'class' (drop, per class, the neurons "
            "that do not vary in it) or 'paper' (drop a neuron that does not vary in any one class, from all)"
        )
    batch_size = at_least("sadl_batch_size", int, 1, "the batch size must be >= 1")
    lock_timeout = at_least("sadl_lock_timeout", float, 0, "the lock wait limit is a number of seconds >= 0")
    nc_threshold = at_least(
        "sadl_nc_threshold", float, 0, "NC's threshold applies to outputs scaled to [0, 1]; use a value in [0, 1)"
    )
    if nc_threshold >= 1:
        raise _usage(
            f"{r.label(opts['sadl_nc_threshold'])}={nc_threshold:g}: NC's threshold applies to outputs "
            "scaled to [0, 1], so no neuron could exceed it; use a value in [0, 1)"
        )

    report_values, report_base = r.raw(opts["sadl_report"])
    specs = _split_list(report_values) if report_values else ["term"]
    reports = tuple(dict.fromkeys(parse_report(s, report_base) for s in specs))
    reports = check_report_paths(reports, r.label(opts["sadl_report"]))

    groups_value, _ = r.raw(opts["sadl_groups"])
    groups = (
        tuple(dict.fromkeys(_split_list(groups_value if isinstance(groups_value, list) else [groups_value])))
        if groups_value
        else ()
    )

    metrics_value, _ = r.raw(opts["sadl_metrics"])
    metrics = parse_metrics(metrics_value, r.label(opts["sadl_metrics"]))
    fail_value, _ = r.raw(opts["sadl_fail_under"])
    fail_under = parse_thresholds(str(fail_value), r.label(opts["sadl_fail_under"])) if fail_value else {}
    check_chosen(fail_under, metrics, r.label(opts["sadl_fail_under"]))
    compare = path("sadl_compare")
    compare_fail = _compare_fail(r, opts, compare, metrics)
    dask_value, _ = r.raw(opts["sadl_dask"])
    dask = (str(dask_value).strip() or None) if dask_value is not None else None
    cache, _ = r.raw(opts["sadl_cache_dir"])
    cache_dir = None
    if cache is not None:
        cache_dir = Path(path("sadl_cache_dir"))  # type: ignore[arg-type]

    return SadlOptions(
        enabled=enabled,
        model=path("sadl_model"),
        train=path("sadl_train"),
        sa_layers=layers("sadl_layers"),
        coverage_layers=layers("sadl_coverage_layers"),
        output=layer_token(str(r.raw(opts["sadl_output"])[0]).strip())
        if r.raw(opts["sadl_output"])[0] is not None
        else None,
        lsc=bounds("lsc"),
        dsc=bounds("dsc"),
        mdsc=bounds("mdsc"),
        mlsc=bounds("mlsc"),
        mmdsc=bounds("mmdsc"),
        mlsa_components=components,
        mmdsa_modes=modes,
        nc_threshold=nc_threshold,
        kmnc_k=k,
        tknc_k=tknc_k,
        tknp_k=tknp_k,
        cc_threshold=cc_threshold,
        var_threshold=var_threshold,
        var_rule=var_rule,
        sa_components=sa_components,
        lsa_near_singular=lsa_near_singular,
        dsa_precompute=_switch(config, "sadl_dsa_precompute"),
        gate_partial=_switch(config, "sadl_gate_partial"),
        batch_size=batch_size,
        reports=reports,
        groups=groups,
        fail_under=fail_under,
        metrics=metrics,
        cache_dir=cache_dir,
        lock_timeout=lock_timeout,
        dask=dask,
        compare=Path(compare) if compare else None,
        compare_fail=compare_fail,
        base_dir=r.inidir,
    )


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
