"""Arguments shared by the ``sadl`` subcommands, and the project's configuration for them.

``sadl profile build`` and ``sadl select`` must build the same training profile the plugin
uses, so they read the project's pytest configuration (``pyproject.toml``
``[tool.pytest.ini_options]``, ``pytest.ini``, ``tox.ini``, ``setup.cfg``; rootdir and
inifile found by pytest itself) through :func:`pytest_sadl.plugin.options.read_options`, the one
parser of the plugin's options. Command-line flags are handed to it as the plugin's own
``--sadl-*`` flags, so they override the ini exactly as they do under ``pytest``. The
model and the training data come from the ini's ``sadl_model`` and ``sadl_train`` too when
``--model``/``--train`` are not given. Every flag also takes the plugin's spelling
(``--sadl-layers=A,B`` as well as ``--sa-layers A B``).
Pure Python: no TensorFlow is imported here, and nothing but the standard library at
import, so that ``sadl --help`` starts at once.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

__all__ = [
    "parse_layers",
    "add_location",
    "add_metrics",
    "add_model_options",
    "add_profile_options",
    "project_options",
    "model_and_train",
    "cache_dir_for",
]


def parse_layers(values: list[str] | str | None) -> tuple[str | int, ...] | None:
    """The plugin's one layer-list parser (:func:`pytest_sadl.config.parse_layers`)."""
    from pytest_sadl.config import parse_layers as parse

    return parse(values)


def add_location(p: argparse.ArgumentParser) -> None:
    """``--cache-dir`` and ``--rootdir``: where the profile cache and the project are."""
    p.add_argument(
        "--cache-dir",
        "--sadl-cache-dir",
        dest="cache_dir",
        metavar="DIR",
        help="profile cache directory (default: sadl_cache_dir of the project's pytest configuration, "
        "else .pytest_cache/d/sadl under the rootdir: the same place pytest --sadl-coverage uses)",
    )
    p.add_argument(
        "--rootdir",
        metavar="DIR",
        help="project root: its pytest configuration is read, and relative --model/--train paths and the "
        "default cache directory are taken from here (default: found upwards from the current directory, as pytest does)",
    )


def add_model_options(p: argparse.ArgumentParser, train_help: str) -> None:
    """``--model`` and ``--train`` (also ``--sadl-model``, ``--sadl-train``): optional where
    the project's ini names ``sadl_model`` and ``sadl_train``."""
    p.add_argument(
        "--model",
        "--sadl-model",
        dest="model",
        metavar="M",
        help="the model: a .keras file or 'package.module:function' (default: sadl_model of the project's ini)",
    )
    p.add_argument("--train", "--sadl-train", dest="train", metavar="T", help=train_help)


#: the plugin's options the ``sadl`` commands take under their own name: (flag, ini row,
#: list-valued); the type, choices, metavar and help come from the row
#: (:data:`pytest_sadl.plugin.options.OPTIONS`), the plugin's spelling works too
SHARED: dict[str, tuple[str, str, bool]] = {
    "sa_layers": ("--sa-layers", "sadl_layers", True),
    "coverage_layers": ("--coverage-layers", "sadl_coverage_layers", True),
    "output": ("--output", "sadl_output", False),
    "var_threshold": ("--var-threshold", "sadl_var_threshold", False),
    "var_rule": ("--var-rule", "sadl_var_rule", False),
    "lsa_near_singular": ("--lsa-near-singular", "sadl_lsa_near_singular", False),
    "batch_size": ("--batch-size", "sadl_batch_size", False),
    "metrics": ("--metrics", "sadl_metrics", False),
    "sa_components": ("--sa-components", "sadl_sa_components", False),
    "lock_timeout": ("--lock-timeout", "sadl_lock_timeout", False),
    "dask": ("--dask", "sadl_dask", False),
}
_TYPES: dict[str, type] = {"int": int, "float": float}


def add_shared(p: argparse.ArgumentParser, dest: str) -> None:
    """One of :data:`SHARED` as the plugin's row declares it: its type and choices, its
    help (the ini's value is the default), this command's flag and the plugin's."""
    from pytest_sadl.plugin.options import OPTIONS

    flag, ini, many = SHARED[dest]
    row = next(o for o in OPTIONS if o.ini == ini)
    kwargs: dict[str, Any] = {"dest": dest, "help": f"{row.help}; when not given: the ini's {ini}"}
    if many:
        kwargs.update(nargs="+", metavar="LAYER")
    elif row.choices:
        kwargs["choices"] = row.choices
    else:
        kwargs.update(type=_TYPES.get(row.kind, str), metavar=row.metavar)
    p.add_argument(flag, row.flag, **kwargs)


def add_profile_options(p: argparse.ArgumentParser) -> None:
    """The options that make up a profile's fingerprint; unset ones come from the ini.

    Each takes this command's spelling and the plugin's (``--sa-layers A B`` or
    ``--sadl-layers=A,B``; a comma-separated list works in both)."""
    for dest in ("sa_layers", "coverage_layers", "output", "var_threshold", "var_rule"):
        add_shared(p, dest)
    add_shared(p, "lsa_near_singular")
    add_shared(p, "batch_size")


def add_metrics(p: argparse.ArgumentParser) -> None:
    """``--metrics``: the plugin's ``--sadl-metrics`` (the same parser, and the ini's
    ``sadl_metrics`` when not given)."""
    add_shared(p, "metrics")


def add_sa_components(p: argparse.ArgumentParser) -> None:
    """``--sa-components``: the plugin's ``--sadl-sa-components`` (LSA, MDSA, MLSA and MMDSA
    on the first N principal axes of the SA traces)."""
    add_shared(p, "sa_components")


#: argparse destination -> the plugin's flag it stands for
_FLAGS = {dest: "--" + ini.replace("_", "-") for dest, (_, ini, _) in SHARED.items() if dest != "dask"}
_FLAGS["cache_dir"] = "--sadl-cache-dir"


def _our_flags(message: str) -> str:
    """A message of the plugin's option parser, naming this command's flags (``--batch-size``
    rather than ``--sadl-batch-size``)."""
    for dest, flag in _FLAGS.items():
        message = message.replace(flag + "=", "--" + dest.replace("_", "-") + "=")
    return message


def _pytest_argv(args: argparse.Namespace) -> list[str]:
    """The pytest command line the subcommand's flags stand for (``--batch-size=64`` as
    ``--sadl-batch-size=64``), with its ``--rootdir`` as pytest's rootdir and argument."""
    argv = ["--sadl-coverage", "--noconftest"]  # not the project's conftest (nor its addopts, which may need it)
    rootdir = getattr(args, "rootdir", None)
    if rootdir:
        argv.append(f"--rootdir={rootdir}")
    for dest, flag in _FLAGS.items():
        value = getattr(args, dest, None)
        if value is not None:
            argv.append(f"{flag}={','.join(value) if isinstance(value, list) else value}")
    if rootdir:
        argv.append(str(Path(rootdir)))
    return argv


def _pytest_cache_dir(config: Any) -> str | None:
    """pytest's ``cache_dir`` ini value, ``None`` when unset or undeclared (``-p no:cacheprovider``)."""
    try:
        value = config.getini("cache_dir")
    except ValueError:
        return None
    return value or None


def project_options(args: argparse.Namespace) -> Any:
    """The :class:`~pytest_sadl.config.SadlOptions` a ``pytest --sadl-coverage`` run in the
    project would use, with the subcommand's flags in place of the ini's values. Also
    sets ``args.project_rootdir`` and ``args.pytest_cache_dir`` (pytest's ``cache_dir``)."""
    import pytest

    from pytest_sadl.errors import SadlConfigError
    from pytest_sadl.plugin.options import read_options

    try:
        # pytest's own rootdir and inifile discovery, through its public constructor (the
        # one pytest-xdist's workers use); the project's addopts are not applied
        config = pytest.Config.fromdictargs({}, _pytest_argv(args))
    except pytest.UsageError as exc:
        raise SadlConfigError(_our_flags(str(exc))) from None
    try:
        options = read_options(config)
        args.project_rootdir = Path(config.rootpath)
        args.project_inifile = None if config.inipath is None else str(config.inipath)
        args.pytest_cache_dir = _pytest_cache_dir(config)
    except pytest.UsageError as exc:
        raise SadlConfigError(_our_flags(str(exc))) from None
    return options


def model_and_train(
    args: argparse.Namespace, options: Any, *, need_train: bool = True
) -> tuple[str, str | None, Path | None]:
    """The model and training data to use, and the directory the flags' relative paths start
    from: ``--model``/``--train`` where given (relative to ``--rootdir``, else the current
    directory), else the ini's ``sadl_model``/``sadl_train`` (relative to the ini file, as
    the plugin takes them). A one-line :class:`~pytest_sadl.errors.SadlConfigError` when
    neither names one."""
    model = args.model if args.model is not None else options.model
    train = args.train if args.train is not None else options.train
    missing = _missing(model, train, need_train)
    if missing:
        raise _nothing_given(args, missing)
    base_dir = Path(args.rootdir) if getattr(args, "rootdir", None) else None
    _importable_from_project(args)
    return str(model), None if train is None else str(train), base_dir


def _missing(model: object, train: object, need_train: bool) -> list[tuple[str, str, str]]:
    """What is named neither by a flag nor by the ini (``None``): the model and/or (when
    needed) the training data, each with its flag and ini key."""
    wanted = [("model", "--model", "sadl_model", model)]
    if need_train:
        wanted.append(("training data", "--train", "sadl_train", train))
    return [(what, flag, ini) for what, flag, ini, value in wanted if value is None]


def _nothing_given(args: argparse.Namespace, missing: list[tuple[str, str, str]]) -> Exception:
    """The one-line error for a model and/or training data named neither by a flag nor by
    the project's configuration (``missing``: what, its flag, its ini key)."""
    from pytest_sadl.errors import SadlConfigError

    flags = " and ".join(f"{flag} PATH" for _, flag, _ in missing)
    inis = " and ".join(ini for _, _, ini in missing)
    where = (
        getattr(args, "project_inifile", None)
        or "pyproject.toml [tool.pytest.ini_options], pytest.ini, tox.ini or setup.cfg"
    )
    return SadlConfigError(
        f"no {' and no '.join(what for what, _, _ in missing)} given: pass {flags}, "
        f"or set {inis} in the project's pytest configuration ({where})"
    )


def _importable_from_project(args: argparse.Namespace) -> None:
    """Make ``module:function`` specs importable as under pytest: the project's rootdir
    (where a rootdir ``conftest.py`` puts pytest's imports) and the current directory
    first on ``sys.path`` (a console script's own is its ``bin`` folder)."""
    import sys

    for folder in (getattr(args, "project_rootdir", None), getattr(args, "rootdir", None), os.getcwd()):
        if folder and str(folder) not in sys.path:
            sys.path.insert(0, str(folder))


def cache_dir_for(args: argparse.Namespace, options: Any | None = None) -> Path:
    """The profile cache: ``--cache-dir`` (relative to the current directory), else the
    ini's ``sadl_cache_dir``, else ``<pytest cache_dir>/d/sadl`` under the rootdir: the
    folder the plugin uses."""
    from pytest_sadl.store.location import default_cache_dir, expand_path

    if args.cache_dir:
        return expand_path(args.cache_dir, os.getcwd())
    root = getattr(args, "project_rootdir", None)
    if root is None:  # pytest's rootdir, as pytest finds it (project_options sets it)
        project_options(args)
        root = args.project_rootdir
    if options is not None and options.cache_dir is not None:
        return expand_path(options.cache_dir, root)
    return default_cache_dir(root, getattr(args, "pytest_cache_dir", None))


def check_out_dir(out: str | os.PathLike[str], what: str) -> Path:
    """``out`` as a directory a ``sadl`` command can write ``what`` into (made if missing); a
    :class:`~pytest_sadl.errors.SadlConfigError` naming the problem otherwise. Checked before
    the model is loaded, so a typo costs no tracing."""
    from pytest_sadl.errors import SadlConfigError

    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise SadlConfigError(f"--out {folder}: is a file; give a directory for {what}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SadlConfigError(
            f"--out {folder}: cannot create the directory ({exc.strerror or exc}); give a writable one"
        ) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise SadlConfigError(f"--out {folder}: the directory is not writable; give a writable one")
    return folder
