"""Locks on store entries that never hang silently.

The holder writes its pid, host and start time into the lock file; a waiter names the
holder after :data:`NOTICE_AFTER` seconds, takes over the lock of a holder that is gone
(same host, the process no longer there or another process under its pid), and gives up
after the caller's timeout with :class:`LockTimeout`.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def lock_path(entry: Path) -> Path:
    """The lock file of the entry ``entry``: builders, completers and writers of its
    derived arrays serialise on it."""
    return entry.with_name(entry.name + ".lock")


#: How long a lock is waited for before one line names its holder (seconds; at most half
#: the wait limit), and how often it is tried meanwhile.
NOTICE_AFTER = 5.0
_POLL = 0.1
#: The default wait limit for another process's lock (``--sadl-lock-timeout``), seconds.
DEFAULT_LOCK_TIMEOUT = 300.0


class LockTimeout(TimeoutError):
    """Another process held the lock for longer than the wait limit (an ``OSError``: the
    cycle then builds in memory, as for any cache that cannot be written)."""


def _host() -> str:
    import socket

    return socket.gethostname()


def _start_ticks(pid: int) -> str | None:
    """When process ``pid`` started (``/proc/<pid>/stat``), to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == b"Z":  # a zombie holds nothing: its files are closed
        return "zombie"
    return fields[19].decode() if len(fields) > 19 else None


def _holder_text() -> str:
    return json.dumps({"pid": os.getpid(), "host": _host(), "since": time.time(), "start": _start_ticks(os.getpid())})


def read_holder(fd: int) -> dict[str, Any] | None:
    """Who holds the lock whose file is open as ``fd`` (what it wrote on taking it)."""
    try:
        raw = os.pread(fd, 4096, 0)
        doc = json.loads(raw.decode("utf-8")) if raw else None
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or type(doc.get("pid")) is not int or not isinstance(doc.get("host"), str):
        return None
    return doc


def holder_gone(holder: dict[str, Any]) -> bool:
    """Whether the process that wrote ``holder`` is known to be gone: it ran on this host
    and no process of its pid (started when it did) is alive. A holder on another host
    is never judged gone."""
    if holder.get("host") != _host() or holder["pid"] == os.getpid():
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        pass
    start = _start_ticks(holder["pid"])
    return start == "zombie" or (start is not None and holder.get("start") not in (None, start))


def describe_holder(holder: dict[str, Any] | None) -> str:
    """``process 123 on host ci-7 since 10:20:01 (42 s ago)``."""
    if holder is None:
        return "another process (it did not say which)"
    since = holder.get("since")
    when = ""
    if isinstance(since, (int, float)):
        when = f" since {time.strftime('%H:%M:%S', time.localtime(since))} ({max(0, time.time() - since):.0f} s ago)"
    return f"process {holder['pid']} on host {holder['host']}{when}"


@contextlib.contextmanager
def locked(
    file: Path,
    *,
    wait: bool = True,
    timeout: float | None = None,
    notice: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """An exclusive advisory lock (``fcntl.flock``; none where fcntl does not exist).

    The holder writes its pid, host, start time and the time it took the lock into the
    lock file. A waiter polls; after :data:`NOTICE_AFTER` seconds (at most half of
    ``timeout``) it calls ``notice`` once with one line naming the holder and what to do.
    A holder that is gone (its pid is not alive on this host, yet the lock is still held,
    e.g. by a child that inherited the descriptor) is taken over: the lock file is
    replaced by a new one, and ``notice`` says so. After ``timeout`` seconds it raises
    :class:`LockTimeout` naming the holder (``None``: wait for as long as it takes).

    Raises ``OSError`` when the lock file cannot be created (a read-only cache), and
    ``BlockingIOError`` (an ``OSError``) when ``wait=False`` and another process holds it."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: the atomic rename still protects readers
        yield
        return
    start = time.monotonic()
    told = False
    patience = NOTICE_AFTER if timeout is None else min(NOTICE_AFTER, timeout / 2)
    while True:
        fd = os.open(file, os.O_RDWR | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0), 0o666)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(f"{file} is not a regular file")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait:
                    raise
                wait_state = (time.monotonic() - start, patience, told)
                told = _wait_turn(file, fd, st.st_ino, wait_state, timeout=timeout, notice=notice)
                continue
            if not _same_file(file, st.st_ino):  # taken over (replaced) while we waited: again
                continue
            try:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, _holder_text().encode(), 0)
                yield
            finally:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
            return
        finally:
            os.close(fd)


def _same_file(file: Path, inode: int) -> bool:
    """``file`` is still the file of inode ``inode`` (not removed nor replaced)."""
    try:
        return os.stat(file).st_ino == inode
    except FileNotFoundError:
        return False


def _take_over(file: Path, inode: int, holder: dict[str, Any], notice: Callable[[str], None] | None) -> None:
    """A gone holder's lock file removed (when it is still the file the holder locked), said."""
    with contextlib.suppress(OSError):
        if os.stat(file).st_ino == inode:  # still the file the holder locked
            os.unlink(file)
    if notice:
        notice(f"the lock {file} was held by {describe_holder(holder)}, which is gone; taking it over")


def _waiting_notice(file: Path, holder: dict[str, Any] | None, timeout: float | None) -> str:
    """The one notice of a long wait: who holds the lock, how long this waits, what to do."""
    limit = "as long as it takes" if timeout is None else f"up to {timeout:g} s in all"
    pid = f"kill {holder['pid']}" if holder else "end it"
    return (
        f"waiting for the lock {file}, held by {describe_holder(holder)} (building this profile?); "
        f"waiting {limit} (--sadl-lock-timeout); if that process is stuck, {pid} or delete the lock file"
    )


def _wait_turn(
    file: Path,
    fd: int,
    inode: int,
    state: tuple[float, float, bool],
    *,
    timeout: float | None,
    notice: Callable[[str], None] | None,
) -> bool:
    """One turn of a waiter on a lock another process holds (``state``: the seconds waited,
    the patience before a notice, whether it was given): a gone holder's lock file is
    removed (to be taken over at once), past ``timeout`` :class:`LockTimeout`, after the
    patience one notice, else a short sleep. Returns whether the notice has been given."""
    waited, patience, told = state
    holder = read_holder(fd)
    if holder is not None and holder_gone(holder):
        _take_over(file, inode, holder, notice)
        return told
    if timeout is not None and waited >= timeout:
        raise LockTimeout(f"waited {waited:.0f} s for the lock {file}, held by {describe_holder(holder)}") from None
    if not told and waited >= patience and notice:
        told = True
        notice(_waiting_notice(file, holder, timeout))
    time.sleep(_POLL)
    return told
