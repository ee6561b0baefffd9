"""One entry of the on-disk store of training profiles: its format, digests and validation.

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
``read_extra(path, name)``/``write_extra(path, name, array)``, ``stale_files(dir)``,
``sweep(dir)`` (what killed writers left), ``entries(dir)``. Locks are
:mod:`pytest_sadl.store.locks`, the lock-build-load cycle :mod:`pytest_sadl.store.cycle`,
the data history :mod:`pytest_sadl.store.history`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import numpy as np

from pytest_sadl.atomic import (
    LEFTOVER_AGE,
    atomic_directory,
    atomic_open,
    durable_write,
    sweep_leftovers,
)

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "PREFIX",
    "Entry",
    "Invalid",
    "write_entry",
    "open_entry",
    "read_extra",
    "write_extra",
    "stale_files",
    "sweep",
    "entries",
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
        h.update(np.ascontiguousarray(flat[i : i + step]).data.cast("B"))
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

            def save(fh: BinaryIO, a: np.ndarray = a) -> None:
                np.save(fh, a, allow_pickle=False)

            durable_write(tmp / _file_name(name), save)
        durable_write(tmp / META, lambda fh: fh.write(text.encode()))
    return path


# ----------------------------------------------------------------------------- reading


@contextlib.contextmanager
def open_regular(path: Path) -> Iterator[BinaryIO]:
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
    try:
        shape, fortran, dtype = _header_fields(fh, name)
    except Invalid:
        raise
    except Exception as exc:  # ValueError, EOFError, SyntaxError from a hostile header...
        raise Invalid(f"{name}: not a valid .npy header ({type(exc).__name__})") from None
    if fortran:
        raise Invalid(f"{name}: Fortran order")
    if dtype.str not in DTYPES or dtype.names is not None or dtype.subdtype is not None:
        raise Invalid(f"{name}: dtype {dtype.str!r} is not a plain number type")
    return tuple(int(s) for s in shape), dtype.str, fh.tell()


def _header_fields(fh: BinaryIO, name: str) -> tuple[Any, bool, np.dtype[Any]]:
    """(shape, Fortran order, dtype) of an ``.npy`` header of a known format version."""
    fmt = np.lib.format
    major, _minor = fmt.read_magic(fh)
    if major == 1:
        return fmt.read_array_header_1_0(fh)
    if major in (2, 3):
        return fmt.read_array_header_2_0(fh)
    raise Invalid(f"{name}: .npy format version {major} is unknown")


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


def load_json(fh: BinaryIO, name: str, limit: int) -> Any:
    raw = fh.read(limit + 1)
    if len(raw) > limit:
        raise Invalid(f"{name} is larger than {limit} bytes")
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=lambda c: float("nan"))
    except (ValueError, RecursionError) as exc:
        raise Invalid(f"{name} is not valid JSON ({type(exc).__name__})") from None


def _is_shape(value: Any) -> bool:
    return isinstance(value, list) and len(value) <= 8 and all(type(s) is int and 0 <= s < 1 << 40 for s in value)


def _open_array(file: Path, rec: dict[str, Any]) -> np.ndarray:
    """The array in ``file``, checked against its metadata record ``rec`` (check 3 of the
    module docstring): read into memory when small, memory-mapped otherwise."""
    with open_regular(file) as fh:
        shape, dtype, offset = _read_header(fh, file.name)
        if list(shape) != rec["shape"] or dtype != rec["dtype"]:
            raise Invalid(f"{file.name} holds {dtype} {shape}, the metadata says {rec['dtype']} {tuple(rec['shape'])}")
        nbytes = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
        _check_file_size(file, os.fstat(fh.fileno()), offset + nbytes)
        if nbytes < _SMALL:  # read small arrays (0-d ones included) into memory
            data = fh.read(nbytes)
            loaded: np.ndarray = np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape).copy()
            return loaded
        try:
            mapped: np.ndarray = np.memmap(fh, dtype=np.dtype(dtype), mode="r", shape=shape, offset=offset)
            return mapped
        except (OSError, ValueError) as exc:
            raise Invalid(f"{file.name} cannot be memory-mapped ({exc})") from None


def _check_file_size(file: Path, st: os.stat_result, size: int) -> None:
    """The file is the ``size`` bytes its header says, and not sparse (a large file that
    occupies less than half of its size on disk)."""
    if st.st_size != size:
        raise Invalid(f"{file.name} is {st.st_size} bytes, its header says {size} (truncated or padded)")
    blocks = getattr(st, "st_blocks", None)
    if blocks is not None and st.st_size > SPARSE_CHECK_BYTES and blocks * 512 < st.st_size // 2:
        raise Invalid(f"{file.name} claims {st.st_size} bytes but occupies {blocks * 512} on disk (a sparse file)")


def open_entry(path: str | os.PathLike[str]) -> Entry:
    """Open the format-2 entry ``path``: checks 1 to 3 of the module docstring (no
    array data is read). Raises :class:`Invalid`."""
    path = Path(path)
    _check_folder(path)
    with open_regular(path / META) as fh:
        doc = load_json(fh, META, MAX_META_BYTES)
    meta, records = _check_doc(doc)
    arrays: dict[str, np.ndarray] = {}
    for name, rec in records.items():
        _check_name(name)
        if not _is_record(rec):
            raise Invalid(f"{META}: the record of {name!r} is malformed")
        arrays[name] = _open_array(path / _file_name(name), rec)
    return Entry(path=path, meta=meta, arrays=arrays, records=records, digest=str(doc["digest"]))


def _is_record(rec: Any) -> bool:
    """An array's metadata record: a known dtype, a shape and a sha256."""
    return (
        isinstance(rec, dict)
        and rec.get("dtype") in DTYPES
        and _is_shape(rec.get("shape"))
        and isinstance(rec.get("sha256"), str)
    )


def _check_folder(path: Path) -> None:
    """``path`` is a folder (not a link to one); :class:`Invalid` otherwise."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise Invalid("it does not exist") from None
    except OSError as exc:
        raise Invalid(f"it cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise Invalid("it is not a folder")


def _check_doc(doc: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``meta`` and ``arrays`` objects of an entry's ``meta.json`` document, once its
    format, version and digest are checked; :class:`Invalid` otherwise."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise Invalid("it is not a pytest-sadl profile")
    if doc.get("version") != FORMAT_VERSION:
        raise Invalid(f"it has format version {doc.get('version')!r}, this pytest-sadl reads {FORMAT_VERSION}")
    meta, records = doc.get("meta"), doc.get("arrays")
    if not isinstance(meta, dict) or not isinstance(records, dict):
        raise Invalid(f"{META} lacks its 'meta' or 'arrays' object")
    if not _digest_matches(doc):
        raise Invalid(f"{META} does not match its digest (changed or corrupt)")
    return meta, records


def _digest_matches(doc: dict[str, Any]) -> bool:
    try:
        return bool(doc.get("digest") == _meta_digest(doc))
    except ValueError:  # NaN or inf smuggled into the metadata
        return False


def entry_digest(path: str | os.PathLike[str]) -> str | None:
    """The metadata digest of the entry ``path`` as it is on disk now (``None``: there is
    no readable entry), to tell whether it is still the entry that was loaded."""
    try:
        with open_regular(Path(path) / META) as fh:
            doc = load_json(fh, META, MAX_META_BYTES)
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
    with open_regular(file) as fh:
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


def stale_files(directory: str | os.PathLike[str]) -> list[Path]:
    """Profiles of format 1 (``profile-*.npz``) in ``directory``: no version reads them."""
    d = Path(directory)
    return sorted(d.glob(f"{PREFIX}*.npz")) if d.is_dir() else []


def sweep(directory: str | os.PathLike[str], older_than: float = LEFTOVER_AGE) -> list[Path]:
    """Remove what killed writers left in ``directory`` (hidden ``.tmp-*`` files and
    folders, ``.old-profile-*`` folders) whose files were all untouched for ``older_than``
    seconds (:func:`pytest_sadl.atomic.sweep_leftovers`: a live writer's file changes all
    the time); return what was removed."""
    return sweep_leftovers(directory, older_than)


def entries(directory: str | os.PathLike[str]) -> list[Path]:
    """The ``profile-*`` folders and format-1 files of ``directory`` (not lock files,
    not temporary folders)."""
    d = Path(directory)
    if not d.is_dir():
        return []
    return sorted(p for p in d.glob(f"{PREFIX}*") if not p.name.endswith(".lock"))


# ----------------------------------------------------------------------------- data history
