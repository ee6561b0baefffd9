"""The one durable, atomic file writer that every file pytest-sadl writes goes through.

A reader (a later run, a browser, a CI upload step, another xdist worker) sees either the
old file or the complete new one, never a half-written file, and a power cut after the
call returned does not lose the write:

1. the content goes into a temporary file in the target's directory (same file system),
2. the temporary file is flushed and ``fsync``-ed,
3. ``os.replace`` renames it over the target (atomic on POSIX and on Windows),
4. the directory is ``fsync``-ed, so that the rename itself is durable.

Any error (an interrupt included) removes the temporary file; a killed process leaves at
most an ignored hidden ``.tmp-*`` file. Files get the usual ``0o666 & ~umask`` mode
(``mkstemp`` alone would make them ``0600``, unreadable to the rest of a shared CI cache).

Public API
----------
``atomic_write_bytes(path, data) -> Path`` / ``atomic_write_text(path, text) -> Path``
    Write a whole file (text as UTF-8 with ``\\n`` line ends). Parent folders are created.
``atomic_open(path) -> ContextManager[BinaryIO]``
    For streamed writers (``np.save(fh, ...)``): the file appears only when the block
    ends without an error.
``atomic_directory(path) -> ContextManager[Path]``
    A folder written as one unit: fill the temporary folder the block gets (with
    :func:`durable_write`), and it replaces ``path`` (a file or a folder) when the
    block ends without an error.
``durable_write(path, write)``
    Create a *new* file (never one that exists), ``write(fh)``, fsync: for the files of
    an :func:`atomic_directory`.

This module imports only the standard library.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_open", "atomic_directory", "durable_write"]


def _mode(base: int) -> int:
    """``base`` masked by the process umask (read without changing it for long)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return base & ~mask


def _fsync_dir(directory: Path) -> None:
    """Make a rename or a new entry in ``directory`` durable (best effort: some file
    systems and Windows cannot open a directory)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary file handle whose content replaces ``path`` atomically and durably when
    the block ends without an error (see the module docstring)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{target.name}-", dir=target.parent)
    try:
        os.chmod(tmp, _mode(0o666))
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically and durably; return the path."""
    with atomic_open(path) as fh:
        fh.write(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8, ``\\n`` line ends as given) to ``path`` atomically and
    durably; return the path."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def durable_write(path: str | os.PathLike[str], write: Callable[[BinaryIO], None]) -> None:
    """Create the new file ``path`` (an existing one is an error: ``FileExistsError``),
    ``write(fh)`` into it and fsync it. Not atomic by itself: use it inside an
    :func:`atomic_directory`, whose rename publishes all its files at once."""
    with open(path, "xb") as fh:
        write(fh)
        fh.flush()
        os.fsync(fh.fileno())


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary folder that replaces ``path`` when the block ends without an error.

    Fill it with :func:`durable_write`. On success the folder is fsync-ed, an existing
    ``path`` (file or folder) is first renamed aside, the new folder renamed to
    ``path``, the parent fsync-ed, and the old one deleted. Two renames, so a reader
    racing the swap may find nothing for an instant (and then builds or waits on the
    builder's lock): it never finds a mix of old and new files. Callers that can run
    concurrently hold a lock around the write.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        os.chmod(tmp, _mode(0o777))
        yield tmp
        _fsync_dir(tmp)
        old: Path | None = None
        if os.path.lexists(target):
            old = Path(tempfile.mkdtemp(prefix=f".old-{target.name}-", dir=target.parent))
            os.replace(target, old / "x")
        os.replace(tmp, target)
        _fsync_dir(target.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
