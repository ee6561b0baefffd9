"""The on-disk store of training profiles: format, digests, validation, locks, the cycle.

Nothing read from the cache is trusted: a cache folder may be truncated by a killed
process, corrupted on disk, restored from an old CI cache, or crafted. Every problem is
an :class:`Invalid` with a one-line reason; the caller warns and rebuilds. Nothing is
ever unpickled, and no read can hang (FIFOs and devices are refused before reading).

Format history
--------------
1. (pytest-sadl 0.1) one ``profile-<fingerprint>.npz`` file, no digests. Read by no
   version since 2: such files are stale; :func:`stale_files` finds them and the profile
   is rebuilt (with a warning naming them).
2. a folder ``profile-<fingerprint>/`` holding

   * ``<name>.npy``: one uncompressed array per entry, little-endian numbers only
     (bool, int, uint, float), opened memory-mapped, so a warm run reads only the pages
     it uses (NumPy ignores ``mmap_mode`` for ``.npz``);
   * ``meta.json``: ``{"format", "version", "meta": {...}, "arrays": {name: {"dtype",
     "shape", "sha256"}}, "digest"}``, where ``digest`` is the sha256 of the canonical
     JSON of the rest, so a changed metadata value is a mismatch too;
   * ``extra.<name>.<sha256>.npy``: arrays derived later (e.g. held-out scores for the
     default SC bounds), written one atomic file each, their digest in their name.

   The folder is written whole into a temporary folder and renamed into place
   (:func:`pytest_sadl.atomic.atomic_directory`).

What a read checks, in this order (so that nothing is read, let alone decompressed,
before its size is known to be what the metadata says):

1. the entry is a real folder and each file a regular file, opened non-blocking (a FIFO
   named like a profile is refused, never waited on); ``meta.json`` at most 1 MiB, JSON
   of the expected types (deep nesting is refused, not a ``RecursionError``);
2. the metadata digest;
3. each ``.npy`` header: dtype in a short allow-list (never ``"O"``, strings or records),
   C order, the shape and dtype the metadata lists, and a file size of exactly header +
   data (no amplification is possible: an ``.npy`` is not compressed), and a file over
   1 GiB must not be sparse (a few blocks claiming terabytes would make the digest
   check read zeros for hours);
4. the caller's shape checks (:meth:`Entry.shapes` gives them without reading data);
5. :meth:`Entry.verify`: the sha256 of every array's bytes, streamed through the
   memory map in 8 MiB pieces (never a second copy). On this machine sha256 runs at
   about 1.3 GB/s: ~2 ms for the 60,000 x 10 traces of a softmax layer, ~25 ms for
   60,000 x 128, ~0.2 s per 256 MiB. The guarantee: every number a profile is loaded
   with is the number that was written with that metadata, or the profile is rebuilt.
   The digest detects corruption and edits that did not update it; it is not a
   signature (whoever can write the cache can write a consistent profile), so the
   caller also checks what must hold of any profile (finite traces and ranges...).

Public API
----------
``write_entry(path, meta, arrays)``, ``open_entry(path) -> Entry``, ``Invalid``,
``lock_path(entry)``, ``locked(file)``, ``cached_build(...)`` (the lock-build-load cycle),
``read_extra(path, name)``/``write_extra(path, name, array)``, ``stale_files(dir)``,
``sweep(dir)`` (what killed writers left),
``entries(dir)``, ``note_data(dir, key, fingerprint, n)``, ``SadlCacheWarning``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import numpy as np

from pytest_sadl.atomic import atomic_directory, atomic_open, atomic_write_text, durable_write
from pytest_sadl._checks import SadlWarning
from pytest_sadl.cache import ensure_cache_dir

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "PREFIX",
    "Entry",
    "Invalid",
    "SadlCacheWarning",
    "write_entry",
    "open_entry",
    "read_extra",
    "write_extra",
    "locked",
    "LockTimeout",
    "DEFAULT_LOCK_TIMEOUT",
    "cached_build",
    "stale_files",
    "sweep",
    "entries",
    "note_data",
]

FORMAT = "pytest-sadl/profile"
FORMAT_VERSION = 2
PREFIX = "profile-"
META = "meta.json"
MAX_META_BYTES = 1 << 20
#: the only dtypes an array of the store may have (``.npy`` descr strings)
DTYPES = frozenset({"|b1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f2", "<f4", "<f8"})
_CHUNK = 1 << 23
_SMALL = 1 << 16
#: files larger than this must occupy at least half their size on disk: a sparse file
#: claiming terabytes (the ``.npy`` twin of a zip bomb) is refused before it is read
SPARSE_CHECK_BYTES = 1 << 30
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.[]")

T = TypeVar("T")


class SadlCacheWarning(SadlWarning):
    """The profile cache could not be used or written; the run goes on without it."""


class Invalid(Exception):
    """A cache entry that must not be trusted; the message says why (one line)."""


def _name_ok(name: object) -> bool:
    return isinstance(name, str) and bool(name) and name[0] != "." and set(name) <= _NAME_CHARS and len(name) <= 100


def _check_name(name: str) -> str:
    if not _name_ok(name):
        raise Invalid(f"array name {name!r} is not allowed")
    return name


def _file_name(name: str) -> str:
    return name.replace("[", "(").replace("]", ")") + ".npy"


# ----------------------------------------------------------------------------- writing


def _little(a: np.ndarray) -> np.ndarray:
    a = a if a.flags.c_contiguous else a.copy(order="C")  # (ascontiguousarray makes 0-d 1-d)
    if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and not np.little_endian):
        a = a.astype(a.dtype.newbyteorder("<"))
    return a


def _sha_of(a: np.ndarray) -> str:
    h = hashlib.sha256()
    flat = a.reshape(-1)
    step = max(1, _CHUNK // max(1, a.dtype.itemsize))
    for i in range(0, flat.shape[0], step):
        h.update(memoryview(np.ascontiguousarray(flat[i : i + step])).cast("B"))
    return h.hexdigest()


def _meta_digest(doc: Mapping[str, Any]) -> str:
    body = {k: doc[k] for k in ("format", "version", "meta", "arrays")}
    return hashlib.sha256(json.dumps(body, sort_keys=True, allow_nan=False).encode()).hexdigest()


def write_entry(path: str | os.PathLike[str], meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> Path:
    """Write the folder ``path`` (format 2) atomically: one ``.npy`` per array and
    ``meta.json`` with the digests. Raises ``ValueError`` for a dtype outside
    :data:`DTYPES` (a bug in the caller, never written) and ``OSError`` from the disk."""
    path = Path(path)
    records: dict[str, Any] = {}
    prepared: dict[str, np.ndarray] = {}
    for name, value in arrays.items():
        _check_name(name)
        a = _little(np.asarray(value))
        if a.dtype.str not in DTYPES:
            raise ValueError(f"array {name!r} has dtype {a.dtype}, which the profile store does not hold")
        prepared[name] = a
        records[name] = {"dtype": a.dtype.str, "shape": [int(s) for s in a.shape], "sha256": _sha_of(a)}
    doc: dict[str, Any] = {"format": FORMAT, "version": FORMAT_VERSION, "meta": dict(meta), "arrays": records}
    doc["digest"] = _meta_digest(doc)
    text = json.dumps(doc, sort_keys=True, indent=1, allow_nan=False)
    with atomic_directory(path) as tmp:
        for name, a in prepared.items():
            durable_write(tmp / _file_name(name), lambda fh, a=a: np.save(fh, a, allow_pickle=False))
        durable_write(tmp / META, lambda fh: fh.write(text.encode()))
    return path


# ----------------------------------------------------------------------------- reading


@contextlib.contextmanager
def _open_regular(path: Path) -> Iterator[BinaryIO]:
    """Open ``path`` for reading only if it is a regular file; never blocks (a FIFO opened
    with ``O_NONBLOCK`` returns at once and is then refused)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise Invalid(f"{path.name} is missing") from None
    except OSError as exc:
        raise Invalid(f"{path.name} cannot be opened ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Invalid(f"{path.name} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as fh:
        yield fh


def _read_header(fh: BinaryIO, name: str) -> tuple[tuple[int, ...], str, int]:
    """(shape, dtype descr, data offset) of an ``.npy``; only the header is read."""
    fmt = np.lib.format
    try:
        major, _minor = fmt.read_magic(fh)
        if major == 1:
            shape, fortran, dtype = fmt.read_array_header_1_0(fh)
        elif major in (2, 3):
            shape, fortran, dtype = fmt.read_array_header_2_0(fh)
        else:
            raise Invalid(f"{name}: .npy format version {major} is unknown")
    except Invalid:
        raise
    except Exception as exc:  # ValueError, EOFError, SyntaxError from a hostile header...
        raise Invalid(f"{name}: not a valid .npy header ({type(exc).__name__})") from None
    if fortran:
        raise Invalid(f"{name}: Fortran order")
    if dtype.str not in DTYPES or dtype.names is not None or dtype.subdtype is not None:
        raise Invalid(f"{name}: dtype {dtype.str!r} is not a plain number type")
    return tuple(int(s) for s in shape), dtype.str, fh.tell()


@dataclass
class Entry:
    """An opened, header-checked entry: ``meta`` (the caller's metadata) and ``arrays``
    (read-only memory maps; nothing read yet beyond the headers)."""

    path: Path
    meta: dict[str, Any]
    arrays: dict[str, np.ndarray]
    records: dict[str, dict[str, Any]]
    digest: str = ""  # the sha256 of the metadata: which write of the entry this is

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {k: tuple(v.shape) for k, v in self.arrays.items()}

    def verify(self) -> None:
        """Stream every array's bytes through sha256 and compare with the metadata
        (see the module docstring for the cost); raise :class:`Invalid` on a mismatch."""
        for name, a in self.arrays.items():
            if _sha_of(a) != self.records[name]["sha256"]:
                raise Invalid(f"the content of {_file_name(name)} does not match its digest (changed or corrupt)")


def _load_json(fh: BinaryIO, name: str, limit: int) -> Any:
    raw = fh.read(limit + 1)
    if len(raw) > limit:
        raise Invalid(f"{name} is larger than {limit} bytes")
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=lambda c: float("nan"))
    except (ValueError, RecursionError) as exc:
        raise Invalid(f"{name} is not valid JSON ({type(exc).__name__})") from None


def _is_shape(value: Any) -> bool:
    return isinstance(value, list) and len(value) <= 8 and all(type(s) is int and 0 <= s < 1 << 40 for s in value)


def open_entry(path: str | os.PathLike[str]) -> Entry:
    """Open the format-2 entry ``path``: checks 1 to 3 of the module docstring (no
    array data is read). Raises :class:`Invalid`."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise Invalid("it does not exist") from None
    except OSError as exc:
        raise Invalid(f"it cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise Invalid("it is not a folder")
    with _open_regular(path / META) as fh:
        doc = _load_json(fh, META, MAX_META_BYTES)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise Invalid("it is not a pytest-sadl profile")
    if doc.get("version") != FORMAT_VERSION:
        raise Invalid(f"it has format version {doc.get('version')!r}, this pytest-sadl reads {FORMAT_VERSION}")
    meta, records = doc.get("meta"), doc.get("arrays")
    if not isinstance(meta, dict) or not isinstance(records, dict):
        raise Invalid(f"{META} lacks its 'meta' or 'arrays' object")
    try:
        same = doc.get("digest") == _meta_digest(doc)
    except ValueError:  # NaN or inf smuggled into the metadata
        same = False
    if not same:
        raise Invalid(f"{META} does not match its digest (changed or corrupt)")
    arrays: dict[str, np.ndarray] = {}
    for name, rec in records.items():
        _check_name(name)
        if (
            not isinstance(rec, dict)
            or rec.get("dtype") not in DTYPES
            or not _is_shape(rec.get("shape"))
            or not isinstance(rec.get("sha256"), str)
        ):
            raise Invalid(f"{META}: the record of {name!r} is malformed")
        file = path / _file_name(name)
        with _open_regular(file) as fh:
            shape, dtype, offset = _read_header(fh, file.name)
            if list(shape) != rec["shape"] or dtype != rec["dtype"]:
                raise Invalid(f"{file.name} holds {dtype} {shape}, the metadata says {rec['dtype']} {tuple(rec['shape'])}")
            nbytes = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
            st = os.fstat(fh.fileno())
            if st.st_size != offset + nbytes:
                raise Invalid(f"{file.name} is {st.st_size} bytes, its header says {offset + nbytes} (truncated or padded)")
            blocks = getattr(st, "st_blocks", None)
            if blocks is not None and st.st_size > SPARSE_CHECK_BYTES and blocks * 512 < st.st_size // 2:
                raise Invalid(f"{file.name} claims {st.st_size} bytes but occupies {blocks * 512} on disk (a sparse file)")
            if nbytes < _SMALL:  # read small arrays (0-d ones included) into memory
                data = fh.read(nbytes)
                arrays[name] = np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape).copy()
            else:
                try:
                    arrays[name] = np.memmap(fh, dtype=np.dtype(dtype), mode="r", shape=shape, offset=offset)
                except (OSError, ValueError) as exc:
                    raise Invalid(f"{file.name} cannot be memory-mapped ({exc})") from None
    return Entry(path=path, meta=meta, arrays=arrays, records=records, digest=str(doc["digest"]))


def entry_digest(path: str | os.PathLike[str]) -> str | None:
    """The metadata digest of the entry ``path`` as it is on disk now (``None``: there is
    no readable entry), to tell whether it is still the entry that was loaded."""
    try:
        with _open_regular(Path(path) / META) as fh:
            doc = _load_json(fh, META, MAX_META_BYTES)
    except Invalid:
        return None
    digest = doc.get("digest") if isinstance(doc, dict) else None
    return digest if isinstance(digest, str) else None


# ----------------------------------------------------------------------------- extras


#: The largest derived array read back (they are loaded into memory whole).
MAX_EXTRA_BYTES = 1 << 28


def _extra_files(path: Path, name: str) -> list[Path]:
    return sorted(path.glob(f"extra.{name}.*.npy"))


def extra_names(path: str | os.PathLike[str]) -> list[str]:
    """The names of the derived arrays stored in the entry ``path``."""
    names = {f.name[len("extra.") :].rsplit(".", 2)[0] for f in Path(path).glob("extra.*.*.npy")}
    return sorted(n for n in names if _name_ok(n))


def read_extra(path: str | os.PathLike[str], name: str) -> np.ndarray | None:
    """The derived array ``name`` stored in the entry ``path`` (loaded into memory and
    checked against the digest in its file name), or ``None`` when there is none.
    Raises :class:`Invalid` for one that fails its checks. A version replaced by a
    writer while this reads is not an error: the newer one is read."""
    _check_name(name)
    for _attempt in range(3):
        files = _extra_files(Path(path), name)
        if not files:
            return None
        file = files[0]
        try:
            return _read_extra_file(file, file.name[len(f"extra.{name}.") : -len(".npy")])
        except Invalid:
            if file.exists():
                raise
    return None


def _read_extra_file(file: Path, digest: str) -> np.ndarray:
    with _open_regular(file) as fh:
        shape, dtype, offset = _read_header(fh, file.name)
        nbytes = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
        if os.fstat(fh.fileno()).st_size != offset + nbytes or nbytes > MAX_EXTRA_BYTES:
            raise Invalid(f"{file.name} has the wrong size")
        value = np.frombuffer(fh.read(nbytes), dtype=dtype).reshape(shape)
    if _sha_of(value) != digest:
        raise Invalid(f"the content of {file.name} does not match its digest")
    return value


def write_extra(path: str | os.PathLike[str], name: str, value: np.ndarray) -> None:
    """Store ``value`` as the derived array ``name`` of the entry ``path`` (one atomic
    file; older versions of it are removed). Raises ``OSError`` from the disk."""
    _check_name(name)
    a = _little(np.asarray(value))
    if a.dtype.str not in DTYPES:
        raise ValueError(f"extra {name!r} has dtype {a.dtype}, which the profile store does not hold")
    target = Path(path) / f"extra.{name}.{_sha_of(a)}.npy"
    old = [f for f in _extra_files(Path(path), name) if f != target]
    with atomic_open(target) as fh:
        np.save(fh, a, allow_pickle=False)
    for file in old:
        with contextlib.suppress(OSError):
            file.unlink()


# ----------------------------------------------------------------------------- the cycle


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
    return json.dumps({"pid": os.getpid(), "host": _host(), "since": time.time(),
                       "start": _start_ticks(os.getpid())})


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
                holder = read_holder(fd)
                waited = time.monotonic() - start
                if holder is not None and holder_gone(holder):
                    with contextlib.suppress(OSError):
                        if os.stat(file).st_ino == st.st_ino:  # still the file the holder locked
                            os.unlink(file)
                    if notice:
                        notice(f"the lock {file} was held by {describe_holder(holder)}, which is gone; taking it over")
                    continue
                if timeout is not None and waited >= timeout:
                    raise LockTimeout(
                        f"waited {waited:.0f} s for the lock {file}, held by {describe_holder(holder)}"
                    ) from None
                if not told and waited >= patience and notice:
                    told = True
                    limit = "as long as it takes" if timeout is None else f"up to {timeout:g} s in all"
                    pid = f"kill {holder['pid']}" if holder else "end it"
                    notice(
                        f"waiting for the lock {file}, held by {describe_holder(holder)} (building this profile?); "
                        f"waiting {limit} (--sadl-lock-timeout); if that process is stuck, {pid} or delete the lock file"
                    )
                time.sleep(_POLL)
                continue
            try:
                if os.stat(file).st_ino != st.st_ino:  # taken over (replaced) while we waited: again
                    continue
            except FileNotFoundError:
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
    reason = f"{type(exc).__name__}: {exc.strerror}" if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}"
    warnings.warn(
        f"pytest-sadl: could not cache the training profile in {directory} ({reason}); "
        "it is built in memory for this run",
        SadlCacheWarning,
        stacklevel=3,
    )


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
    if hit is not None and ready(hit):
        return hit, True
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
            if hit is not None and ready(hit):
                return hit, True
        value = make(hit)
        try:
            save(value, path)
        except OSError as exc:
            uncached_warning(directory, exc)
            return value, False
    return value, True


# ----------------------------------------------------------------------------- listing


def stale_files(directory: str | os.PathLike[str]) -> list[Path]:
    """Profiles of format 1 (``profile-*.npz``) in ``directory``: no version reads them."""
    d = Path(directory)
    return sorted(d.glob(f"{PREFIX}*.npz")) if d.is_dir() else []


def sweep(directory: str | os.PathLike[str], older_than: float = 3600.0) -> list[Path]:
    """Remove what killed writers left in ``directory`` (hidden ``.tmp-profile-*`` and
    ``.old-profile-*`` entries whose files were all untouched for ``older_than``
    seconds: a live writer's file changes all the time); return what was removed."""
    import shutil
    import time

    d = Path(directory)
    removed = []
    for p in (*d.glob(f".tmp-{PREFIX}*"), *d.glob(f".old-{PREFIX}*")) if d.is_dir() else ():
        with contextlib.suppress(OSError):
            parts = [p, *p.iterdir()] if p.is_dir() and not p.is_symlink() else [p]
            if time.time() - max(q.lstat().st_mtime for q in parts) > older_than:
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
                removed.append(p)
    return removed


def entries(directory: str | os.PathLike[str]) -> list[Path]:
    """The ``profile-*`` folders and format-1 files of ``directory`` (not lock files,
    not temporary folders)."""
    d = Path(directory)
    if not d.is_dir():
        return []
    return sorted(p for p in d.glob(f"{PREFIX}*") if not p.name.endswith(".lock"))


# ----------------------------------------------------------------------------- data history

_HISTORY = "data-history.json"


def note_data(directory: str | os.PathLike[str], key: str, fingerprint: str, n: int) -> dict[str, Any] | None:
    """Remember that ``key`` (a model and a data source) was last profiled with data of
    ``fingerprint`` and ``n`` inputs; return what was remembered before (``None`` when
    nothing, or when the history cannot be read). Best effort: ``OSError`` is ignored."""
    file = Path(directory) / _HISTORY
    history: dict[str, Any] = {}
    with contextlib.suppress(Invalid, OSError):
        with _open_regular(file) as fh:
            loaded = _load_json(fh, _HISTORY, MAX_META_BYTES // 4)
        if isinstance(loaded, dict):
            history = {k: v for k, v in loaded.items() if isinstance(v, dict)}
    before = history.get(key)
    history.pop(key, None)
    history[key] = {"data": str(fingerprint), "n": int(n)}
    while len(history) > 200:  # bounded: the oldest entries go first
        history.pop(next(iter(history)))
    with contextlib.suppress(OSError):
        atomic_write_text(file, json.dumps(history, indent=1))
    if before is None or not isinstance(before.get("data"), str) or type(before.get("n")) is not int:
        return None
    return before
