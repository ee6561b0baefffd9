"""The one durable, atomic file writer that every file pytest-sadl writes goes through.

A reader (a later run, a browser, a CI upload step, another xdist worker) sees either the
old file or the complete new one, never a half-written file, and a power cut after the
call returned does not lose the write:

1. the content goes into a temporary file in the target's directory (same file system),
2. the temporary file is flushed and ``fsync``-ed,
3. ``os.replace`` renames it over the target (atomic on POSIX and on Windows),
4. the directory is ``fsync``-ed, so that the rename itself is durable.

Any error (an interrupt included) removes the temporary file; a killed process leaves at
most an ignored hidden ``.tmp-*`` file (or ``.tmp-*`` / ``.old-*`` folder), which the next
write into that folder by any process removes once it is :data:`LEFTOVER_AGE` seconds
old (:func:`sweep_leftovers`, once per folder and process): a live writer's temporary
file is seconds old, so a concurrent writer is never hurt. Files get the usual ``0o666 & ~umask`` mode
(``mkstemp`` alone would make them ``0600``, unreadable to the rest of a shared CI cache).

Special files are streams, not files to replace. A path that exists and is (or whose
symbolic links lead to) a FIFO or a character device (``/dev/null``, ``/dev/tty``, a
named pipe, ``/dev/stdout`` on a pipe or terminal) is opened for writing and written to
directly: renaming over it would replace the device or pipe by a regular file (as root,
``/dev/null`` itself). A path that goes through a process's file descriptor
(``/dev/stdout``, ``/dev/fd/N``, ``/proc/self/fd/N``) is written to directly too, in
append mode when it ends at a regular file (``pytest > out.txt`` with
``markdown:/dev/stdout``): the descriptor's file gets the text, and the symbolic link
``/dev/stdout`` is never replaced. Such a write is not atomic (a stream cannot be) and
a FIFO blocks until a reader opens it, as the shell's ``>`` does. A block device or a
socket is refused (``OSError``). Any other symbolic link keeps the rule above: the link
itself is replaced by the new file, and the file it pointed to is never written.

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
``sweep_leftovers(directory, older_than=LEFTOVER_AGE) -> list[Path]``
    Remove the ``.tmp-*`` and ``.old-*`` entries killed writers left in ``directory``
    (every file in them untouched for ``older_than`` seconds); what was removed.
``durable_write(path, write)``
    Create a *new* file (never one that exists), ``write(fh)``, fsync: for the files of
    an :func:`atomic_directory`.

This module imports only the standard library.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_open",
    "atomic_directory",
    "durable_write",
    "sweep_leftovers",
    "LEFTOVER_AGE",
]

#: How old (seconds since any of its files changed) a ``.tmp-*`` or ``.old-*`` entry must be
#: before a writer into its folder removes it: a write takes seconds, a profile folder's
#: write a minute at most, so ten minutes leaves every live writer alone.
LEFTOVER_AGE = 600.0
_swept: set[str] = set()  # the folders this process has swept


def sweep_leftovers(directory: str | os.PathLike[str], older_than: float = LEFTOVER_AGE) -> list[Path]:
    """Remove the hidden ``.tmp-*`` files and folders (and ``.old-*`` folders) that killed
    writers left in ``directory``: those whose files were all untouched for ``older_than``
    seconds (a live writer's file is new, or changes all the time). Errors (a file another
    sweeper removed first, no permission) are ignored; returns what was removed."""
    import time

    now = time.time()
    return [p for p in _leftovers(Path(directory)) if _remove_if_untouched(p, now, older_than)]


def _leftovers(directory: Path) -> list[Path]:
    """The hidden ``.tmp-*`` and ``.old-*`` entries of ``directory`` (none when it cannot be listed)."""
    try:
        return [p for p in directory.iterdir() if p.name.startswith((".tmp-", ".old-"))]
    except OSError:
        return []


def _remove_if_untouched(entry: Path, now: float, older_than: float) -> bool:
    """Remove ``entry`` (a file, or a folder and all in it) when none of its files changed
    in the ``older_than`` seconds before ``now``; whether it was removed (``False`` on any error)."""
    with contextlib.suppress(OSError):
        folder = entry.is_dir() and not entry.is_symlink()
        parts = [entry, *entry.rglob("*")] if folder else [entry]
        if now - max(q.lstat().st_mtime for q in parts) > older_than:
            shutil.rmtree(entry) if folder else entry.unlink()
            return True
    return False


def _sweep_once(directory: Path) -> None:
    key = os.path.abspath(directory)
    if key not in _swept:
        _swept.add(key)
        sweep_leftovers(directory)


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


#: a path naming one of a process's open file descriptors (Linux, macOS)
_DESCRIPTOR = re.compile(r"/(?:proc/(?:self|thread-self|[0-9]+)|dev)/fd/[0-9]+")


def _through_descriptor(path: str) -> bool:
    """Whether ``path`` or a symbolic link it leads to names a file descriptor
    (``/dev/stdout`` -> ``/proc/self/fd/1``)."""
    p = os.path.abspath(path)
    for _hop in range(40):
        if _DESCRIPTOR.fullmatch(p):
            return True
        try:
            link = os.readlink(p)
        except OSError:  # not a link (or gone)
            return False
        p = os.path.normpath(os.path.join(os.path.dirname(p), link))
    return False


def _stream_flags(target: Path) -> int | None:
    """The ``os.open`` flags to write to ``target`` directly, or ``None`` to replace it
    atomically (see the module docstring). Raises ``OSError`` for a block device or a
    socket."""
    try:
        st = os.stat(target)  # follows links: what a write would reach
    except OSError:  # missing (or a dangling link): a new file
        return None
    if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        return os.O_WRONLY
    _refuse_unwritable(st.st_mode, target)
    if stat.S_ISREG(st.st_mode) and _through_descriptor(str(target)):
        return os.O_WRONLY | os.O_APPEND
    return None


def _refuse_unwritable(mode: int, target: Path) -> None:
    """``OSError`` when ``target`` (of the stat ``mode``) is a block device or a socket."""
    if stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        what = "a block device" if stat.S_ISBLK(mode) else "a socket"
        raise OSError(errno.EINVAL, f"it is {what}; give a regular file, a FIFO or a character device", str(target))


@contextlib.contextmanager
def _stream(target: Path, flags: int) -> Iterator[BinaryIO]:
    """Write to the existing special file ``target`` directly (no rename, no fsync)."""
    fd = os.open(target, flags | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "wb") as fh:
        yield fh
        fh.flush()


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary file handle whose content replaces ``path`` atomically and durably when
    the block ends without an error (see the module docstring); for a FIFO, a
    character device or a file descriptor's path, the handle writes to it directly."""
    target = Path(path)
    flags = _stream_flags(target)
    if flags is not None:
        with _stream(target, flags) as fh:
            yield fh
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    _sweep_once(target.parent)
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


def durable_write(path: str | os.PathLike[str], write: Callable[[BinaryIO], object]) -> None:
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
    _sweep_once(target.parent)
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
