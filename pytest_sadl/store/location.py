"""Where the profile cache lives, and making that folder as pytest makes its own.

Public API
----------
``default_cache_dir(rootdir, cache_dir=None) -> Path``
    ``<rootdir>/.pytest_cache/d/sadl`` (or ``<cache_dir>/d/sadl`` when the pytest
    configuration, or the ``cache_dir`` argument, sets pytest's ``cache_dir``): what
    ``config.cache.mkdir("sadl")`` gives, without creating it. ``rootdir`` is pytest's
    (``config.rootpath``): the plugin's and the ``sadl`` command's, which reads the
    project's configuration through pytest (:func:`pytest_sadl.cli.args.project_options`).
``expand_path(value, base) -> Path``
    A user-given folder: ``~`` and ``$VARS`` expanded, relative to ``base``.
``ensure_cache_dir(path) -> Path``
    Create the folder (and its parents); the topmost folder this call creates gets a
    ``.gitignore`` of ``*`` (and a ``CACHEDIR.TAG``), as pytest writes into the
    ``.pytest_cache`` it creates, so a cache never ends up committed. Raises
    ``OSError`` when it cannot (a read-only checkout): callers warn and keep going.

Only the standard library; nothing here imports pytest or NumPy.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from pytest_sadl.atomic import atomic_write_text

__all__ = ["default_cache_dir", "expand_path", "ensure_cache_dir"]

_INI_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
GITIGNORE = "# Created by pytest-sadl automatically.\n*\n"
CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by pytest-sadl.\n"
    "# For information about cache directory tags, see:\n"
    "#\thttps://bford.info/cachedir/spec.html\n"
)


def _ini_cache_dir(path: Path) -> tuple[bool, str | None]:
    """(is this a pytest config file, its ``cache_dir`` option)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False, None
    if path.name == "pyproject.toml":
        return _toml_cache_dir(text)
    return _cfg_cache_dir(path.name, text)


def _toml_cache_dir(text: str) -> tuple[bool, str | None]:
    """A ``pyproject.toml``: a pytest configuration when it has ``[tool.pytest.ini_options]``."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        ini = tomllib.loads(text).get("tool", {}).get("pytest", {}).get("ini_options")
    except Exception:
        return False, None
    if not isinstance(ini, dict):
        return False, None
    value = ini.get("cache_dir")
    return True, None if value is None else str(value)


def _cfg_cache_dir(name: str, text: str) -> tuple[bool, str | None]:
    """An ini-style file ``name``: ``pytest.ini`` (and ``.pytest.ini``) always is a pytest
    configuration; ``tox.ini`` with a ``[pytest]``, ``setup.cfg`` with a ``[tool:pytest]`` section."""
    import configparser

    always = name in ("pytest.ini", ".pytest.ini")
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return always, None
    section = "pytest" if always or name == "tox.ini" else "tool:pytest"
    if not parser.has_section(section):
        return always, None
    return True, parser.get(section, "cache_dir", fallback=None)


def _configured_cache_dir(root: Path) -> str | None:
    """The ``cache_dir`` set in ``root``'s pytest configuration file, if any (the first
    file pytest would take as the configuration, in pytest's order)."""
    for name in _INI_FILES:
        candidate = root / name
        if candidate.is_file():
            is_config, value = _ini_cache_dir(candidate)
            if is_config:
                return value
    return None


def expand_path(value: str | os.PathLike[str], base: str | os.PathLike[str]) -> Path:
    """``value`` with ``~`` and environment variables expanded, relative to ``base``
    (as pytest resolves its own ``cache_dir``)."""
    return Path(base) / os.path.expanduser(os.path.expandvars(os.fspath(value)))


def default_cache_dir(rootdir: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``<rootdir>/.pytest_cache/d/sadl`` (or ``<cache_dir>/d/sadl`` when pytest's
    ``cache_dir`` is given, or set in the rootdir's pytest configuration): what
    ``config.cache.mkdir("sadl")`` gives. The folder is not created here.

    ``rootdir`` is pytest's (``config.rootpath``), and ``cache_dir`` pytest's ``cache_dir``
    ini value when pytest knows it. The rootdir's configuration file is read for
    ``cache_dir`` only when it is not given: with ``-p no:cacheprovider`` pytest does not
    declare the option, and the folder is still the one a run with the cache would use.
    """
    root = Path(rootdir).resolve()
    if cache_dir is None:
        cache_dir = _configured_cache_dir(root)
    base = root / ".pytest_cache" if cache_dir is None else expand_path(cache_dir, root)
    return base / "d" / "sadl"


def ensure_cache_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` and any missing parents; the topmost folder created here gets a
    ``.gitignore`` of ``*`` and a ``CACHEDIR.TAG`` (what pytest writes into a
    ``.pytest_cache`` it creates: were pytest-sadl the first to make ``.pytest_cache``,
    pytest would not write them later). Raises ``OSError`` when it cannot."""
    target = Path(path)
    missing = target
    while not missing.parent.exists() and missing.parent != missing:
        missing = missing.parent
    created = not target.exists()
    target.mkdir(parents=True, exist_ok=True)
    if created and missing.is_dir():
        with contextlib.suppress(OSError):  # the cache works without them
            atomic_write_text(missing / ".gitignore", GITIGNORE)
            atomic_write_text(missing / "CACHEDIR.TAG", CACHEDIR_TAG)
    return target
