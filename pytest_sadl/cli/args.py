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


def add_profile_options(p: argparse.ArgumentParser) -> None:
    """The options that make up a profile's fingerprint; unset ones come from the ini.

    Each takes this command's spelling and the plugin's (``--sa-layers A B`` or
    ``--sadl-layers=A,B``; a comma-separated list works in both)."""
    p.add_argument(
        "--sa-layers",
        "--sadl-layers",
        dest="sa_layers",
        nargs="+",
        metavar="LAYER",
        help="layers for LSA/DSA/MDSA, by name or index (default: sadl_layers of the ini, else the last hidden layer)",
    )
    p.add_argument(
        "--coverage-layers",
        "--sadl-coverage-layers",
        dest="coverage_layers",
        nargs="+",
        metavar="LAYER",
        help="layers for NC/KMNC/NBC/SNAC (default: sadl_coverage_layers of the ini, else every layer with neurons, each neuron once after its activation)",
    )
    p.add_argument(
        "--output",
        "--sadl-output",
        dest="output",
        metavar="NAME",
        help="which output of a model with several gives the class (default: sadl_output of the ini, else the first)",
    )
    p.add_argument(
        "--var-threshold",
        "--sadl-var-threshold",
        dest="var_threshold",
        type=float,
        metavar="V",
        help="LSA/MDSA variance threshold (default: sadl_var_threshold, else 1e-5)",
    )
    p.add_argument(
        "--var-rule",
        "--sadl-var-rule",
        dest="var_rule",
        choices=("class", "paper"),
        help="which neurons LSA/MDSA drop for too little variance: per class, or the paper's rule "
        "(default: sadl_var_rule, else class)",
    )
    p.add_argument(
        "--lsa-near-singular",
        "--sadl-lsa-near-singular",
        dest="lsa_near_singular",
        choices=("drop", "keep"),
        help="LSA on a nearly singular covariance: drop dependent neurons or keep the full covariance "
        "(default: sadl_lsa_near_singular, else drop)",
    )
    p.add_argument(
        "--batch-size",
        "--sadl-batch-size",
        dest="batch_size",
        type=int,
        metavar="N",
        help="inputs per forward pass (default: sadl_batch_size, else 256)",
    )


def add_metrics(p: argparse.ArgumentParser) -> None:
    """``--metrics``: the plugin's ``--sadl-metrics`` (the same parser, and the ini's
    ``sadl_metrics`` when not given)."""
    p.add_argument(
        "--metrics",
        "--sadl-metrics",
        dest="metrics",
        metavar="LIST",
        help="the metrics to compute, comma-separated, or all (default: sadl_metrics of the ini, else the default ones)",
    )


def add_sa_components(p: argparse.ArgumentParser) -> None:
    """``--sa-components``: the plugin's ``--sadl-sa-components`` (LSA, MDSA, MLSA and MMDSA
    on the first N principal axes of the SA traces)."""
    p.add_argument(
        "--sa-components",
        "--sadl-sa-components",
        dest="sa_components",
        type=int,
        metavar="N",
        help="LSA/MDSA/MLSA/MMDSA on the first N principal axes of the SA layer's training traces "
        "(default: sadl_sa_components of the ini, else every neuron)",
    )


#: argparse destination -> the plugin's flag it stands for
_FLAGS = {
    "metrics": "--sadl-metrics",
    "sa_layers": "--sadl-layers",
    "coverage_layers": "--sadl-coverage-layers",
    "output": "--sadl-output",
    "var_threshold": "--sadl-var-threshold",
    "var_rule": "--sadl-var-rule",
    "lsa_near_singular": "--sadl-lsa-near-singular",
    "batch_size": "--sadl-batch-size",
    "sa_components": "--sadl-sa-components",
    "cache_dir": "--sadl-cache-dir",
    "lock_timeout": "--sadl-lock-timeout",
}


def _our_flags(message: str) -> str:
    """A message of the plugin's option parser, naming this command's flags (``--batch-size``
    rather than ``--sadl-batch-size``)."""
    for dest, flag in _FLAGS.items():
        message = message.replace(flag + "=", "--" + dest.replace("_", "-") + "=")
    return message


def project_options(args: argparse.Namespace) -> Any:
    """The :class:`~pytest_sadl.config.SadlOptions` a ``pytest --sadl-coverage`` run in the
    project would use, with the subcommand's flags in place of the ini's values. Also
    sets ``args.project_rootdir`` and ``args.pytest_cache_dir`` (pytest's ``cache_dir``)."""
    import pytest
    from _pytest.config import (
        _prepareconfig,  # how pytest itself finds the rootdir and inifile
    )

    from pytest_sadl.errors import SadlConfigError
    from pytest_sadl.plugin.options import read_options

    argv = ["--sadl-coverage", "--noconftest", "-o", "addopts="]  # the project's addopts may need its conftest
    if getattr(args, "rootdir", None):
        argv.append(f"--rootdir={args.rootdir}")
    for dest, flag in _FLAGS.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        if isinstance(value, list):
            value = ",".join(value)
        argv.append(f"{flag}={value}")
    if getattr(args, "rootdir", None):
        argv.append(str(Path(args.rootdir)))
    try:
        config = _prepareconfig(argv)
    except pytest.UsageError as exc:
        raise SadlConfigError(_our_flags(str(exc))) from None
    try:
        options = read_options(config)
        try:
            pytest_cache = config.getini("cache_dir")
        except ValueError:
            pytest_cache = None
        args.project_rootdir = Path(config.rootpath)
        args.project_inifile = None if config.inipath is None else str(config.inipath)
        args.pytest_cache_dir = pytest_cache or None
    except pytest.UsageError as exc:
        raise SadlConfigError(_our_flags(str(exc))) from None
    finally:
        config._ensure_unconfigure()
    return options


def model_and_train(
    args: argparse.Namespace, options: Any, *, need_train: bool = True
) -> tuple[str, str | None, Path | None]:
    """The model and training data to use, and the directory the flags' relative paths start
    from: ``--model``/``--train`` where given (relative to ``--rootdir``, else the current
    directory), else the ini's ``sadl_model``/``sadl_train`` (relative to the ini file, as
    the plugin takes them). A one-line :class:`~pytest_sadl.errors.SadlConfigError` when
    neither names one."""
    from pytest_sadl.errors import SadlConfigError

    model = args.model if args.model is not None else options.model
    train = args.train if args.train is not None else options.train
    missing = [
        (what, flag, ini)
        for what, flag, ini, value in (
            ("model", "--model", "sadl_model", model),
            ("training data", "--train", "sadl_train", train),
        )
        if value is None and (need_train or flag == "--model")
    ]
    if missing:
        flags = " and ".join(f"{flag} PATH" for _, flag, _ in missing)
        inis = " and ".join(ini for _, _, ini in missing)
        where = (
            getattr(args, "project_inifile", None)
            or "pyproject.toml [tool.pytest.ini_options], pytest.ini, tox.ini or setup.cfg"
        )
        raise SadlConfigError(
            f"no {' and no '.join(what for what, _, _ in missing)} given: pass {flags}, "
            f"or set {inis} in the project's pytest configuration ({where})"
        )
    base_dir = Path(args.rootdir) if getattr(args, "rootdir", None) else None
    _importable_from_project(args)
    return str(model), None if train is None else str(train), base_dir


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
    root = getattr(args, "project_rootdir", None) or args.rootdir
    if options is not None and options.cache_dir is not None:
        return expand_path(options.cache_dir, root)
    return default_cache_dir(root, getattr(args, "pytest_cache_dir", None))
