"""Arguments shared by the ``sadl`` subcommands, and the project's configuration for them.

``sadl profile build`` and ``sadl select`` must build the same training profile the plugin
uses, so they read the project's pytest configuration (``pyproject.toml``
``[tool.pytest.ini_options]``, ``pytest.ini``, ``tox.ini``, ``setup.cfg``; rootdir and
inifile found by pytest itself) through :func:`pytest_sadl.plugin.options.read_options`, the one
parser of the plugin's options. Command-line flags are handed to it as the plugin's own
``--sadl-*`` flags, so they override the ini exactly as they do under ``pytest``.
Pure Python: no TensorFlow is imported here.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from pytest_sadl.plugin.options import (
    parse_layers,  # the one layer-list parser, shared with the plugin
)

__all__ = ["parse_layers", "add_location", "add_metrics", "project_options", "cache_dir_for"]


def add_location(p: argparse.ArgumentParser) -> None:
    """``--cache-dir`` and ``--rootdir``: where the profile cache and the project are."""
    p.add_argument(
        "--cache-dir",
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


def add_profile_options(p: argparse.ArgumentParser) -> None:
    """The options that make up a profile's fingerprint; unset ones come from the ini."""
    p.add_argument(
        "--sa-layers",
        nargs="+",
        metavar="LAYER",
        help="layers for LSA/DSA/MDSA, by name or index (default: sadl_layers of the ini, else the last hidden layer)",
    )
    p.add_argument(
        "--coverage-layers",
        nargs="+",
        metavar="LAYER",
        help="layers for NC/KMNC/NBC/SNAC (default: sadl_coverage_layers of the ini, else every layer with neurons)",
    )
    p.add_argument(
        "--output",
        metavar="NAME",
        help="which output of a model with several gives the class (default: sadl_output of the ini, else the first)",
    )
    p.add_argument(
        "--var-threshold",
        type=float,
        metavar="V",
        help="LSA/MDSA variance threshold (default: sadl_var_threshold, else 1e-5)",
    )
    p.add_argument(
        "--var-rule",
        choices=("class", "paper"),
        help="which neurons LSA/MDSA drop for too little variance: per class, or the paper's rule "
        "(default: sadl_var_rule, else class)",
    )
    p.add_argument(
        "--lsa-near-singular",
        choices=("drop", "keep"),
        help="LSA on a nearly singular covariance: drop dependent neurons or keep the full covariance "
        "(default: sadl_lsa_near_singular, else drop)",
    )
    p.add_argument(
        "--batch-size", type=int, metavar="N", help="inputs per forward pass (default: sadl_batch_size, else 256)"
    )


def add_metrics(p: argparse.ArgumentParser) -> None:
    """``--metrics``: the plugin's ``--sadl-metrics`` (the same parser, and the ini's
    ``sadl_metrics`` when not given)."""
    p.add_argument(
        "--metrics",
        metavar="LIST",
        help="the metrics to compute, comma-separated, or all (default: sadl_metrics of the ini, else the default ones)",
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
    """The :class:`~pytest_sadl.plugin.options.SadlOptions` a ``pytest --sadl-coverage`` run in the
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
        args.pytest_cache_dir = pytest_cache or None
    except pytest.UsageError as exc:
        raise SadlConfigError(_our_flags(str(exc))) from None
    finally:
        config._ensure_unconfigure()
    return options


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
