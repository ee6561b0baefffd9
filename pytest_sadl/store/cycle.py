"""The lock-build-load cycle: load an entry, or build it under its lock and store it.

An ``OSError`` on the folder, the lock or the write is one
:class:`~pytest_sadl.errors.SadlCacheWarning` and the value is kept in memory; a lock
held past the timeout builds in memory too (with its warning).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pytest_sadl.errors import SadlCacheWarning
from pytest_sadl.store.location import ensure_cache_dir
from pytest_sadl.store.locks import DEFAULT_LOCK_TIMEOUT, LockTimeout, lock_path, locked


def uncached_warning(directory: Path, exc: BaseException) -> None:
    """The one line said when the cache cannot be written: the run goes on in memory."""
    if isinstance(exc, LockTimeout):
        warnings.warn(
            f"pytest-sadl: {exc}; the profile is built in memory for this run, not saved "
            "(raise --sadl-lock-timeout to wait longer)",
            SadlCacheWarning,
            stacklevel=3,
        )
        return
    reason = (
        f"{type(exc).__name__}: {exc.strerror}"
        if isinstance(exc, OSError) and exc.strerror
        else f"{type(exc).__name__}: {exc}"
    )
    warnings.warn(
        f"pytest-sadl: could not cache the training profile in {directory} ({reason}); "
        "it is built in memory for this run",
        SadlCacheWarning,
        stacklevel=3,
    )


T = TypeVar("T")


def cached_build(
    path: Path,
    *,
    load: Callable[[Path, bool], T | None],
    ready: Callable[[T], bool],
    make: Callable[[T | None], T],
    save: Callable[[T, Path], None],
    rebuild: bool = False,
    lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT,
    notice: Callable[[str], None] | None = None,
) -> tuple[T, bool]:
    """The lock-build-load cycle of the cache entry ``path``; returns ``(value, stored)``.

    ``load(path, warn)``: the cached value, or ``None`` when there is none or it must not
    be trusted (saying why when ``warn``). ``ready(value)``: whether a loaded value can
    be used as it is. ``make(partial)``: builds the value, completing ``partial`` (a
    loaded value that is not ready) when it is given. ``save(value, path)`` writes it.

    A ready cached value is returned without taking the lock. Otherwise concurrent
    builders (xdist workers, CI jobs) serialise on ``<path>.lock``: the first builds and
    writes, the others then load its result. When the cache folder, the lock or the
    entry cannot be written (``OSError``: a read-only checkout, a full disk), a
    :class:`SadlCacheWarning` says so in one line and the value is built in memory
    (``stored`` is ``False``). Waiting for another process's lock is bounded: ``notice``
    gets one line naming the holder after a few seconds, a gone holder's lock is taken
    over, and after ``lock_timeout`` seconds the value is built in memory with a warning
    (see :func:`locked`).
    """
    hit = None if rebuild else load(path, True)
    if _usable(hit, ready):
        return hit, True  # type: ignore[return-value]
    directory = path.parent
    with contextlib.ExitStack() as stack:
        try:
            ensure_cache_dir(directory)
            stack.enter_context(locked(lock_path(path), timeout=lock_timeout, notice=notice))
        except OSError as exc:
            uncached_warning(directory, exc)
            return make(hit), False
        if not rebuild:  # another process may have built it while we waited
            hit = load(path, False)
            if _usable(hit, ready):
                return hit, True  # type: ignore[return-value]
        value = make(hit)
        return value, _saved(value, path, save)


def _usable(hit: T | None, ready: Callable[[T], bool]) -> bool:
    """A loaded value that can be used as it is."""
    return hit is not None and ready(hit)


def _saved(value: T, path: Path, save: Callable[[T, Path], None]) -> bool:
    """Whether ``value`` was written to ``path``; a warning says why it was not."""
    try:
        save(value, path)
    except OSError as exc:
        uncached_warning(path.parent, exc)
        return False
    return True


# ----------------------------------------------------------------------------- listing
