"""Finding a training profile in the cache folder, or building and storing it.

:func:`load_or_build` resolves the model and the data, computes the profile's
fingerprint, and loads the stored profile of that fingerprint when it can be trusted;
otherwise it builds one (:mod:`pytest_sadl.profile.build`) under the store's lock and
stores it (:mod:`pytest_sadl.profile.files`), or keeps it in memory with one warning when
the folder cannot be written. Stale entries (format 1, leftovers of killed writers) are
swept, and a small history of each source's data fingerprint tells a randomly augmenting
``sadl_train`` apart. :func:`list_profiles` describes what the folder holds.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_sadl.errors import SadlCacheWarning
from pytest_sadl.profile.build import (
    DSA_DISTANCES,
    ProfileOptions,
    Progress,
    Status,
    TrainingProfile,
    build_profile,
    prepare,
)
from pytest_sadl.profile.files import (
    check_meta,
    check_shapes,
    load_profile,
    save_profile,
)
from pytest_sadl.store import cycle, history, locks
from pytest_sadl.store import entry as store
from pytest_sadl.store.entry import FORMAT_VERSION, Invalid

__all__ = ["load_or_build", "list_profiles", "ProfileInfo", "profile_path"]


# ----------------------------------------------------------------------------- where


def profile_path(cache_dir: str | os.PathLike[str], fingerprint: str) -> Path:
    """Where the profile of ``fingerprint`` is stored under ``cache_dir`` (a folder)."""
    return Path(cache_dir) / f"{store.PREFIX}{fingerprint}"


def _try_load(path: Path, fingerprint: str, warn: bool) -> TrainingProfile | None:
    if not os.path.lexists(path):
        return None
    try:
        return load_profile(path, fingerprint)
    except Invalid as exc:
        if warn:
            warnings.warn(
                f"pytest-sadl: the cached training profile {path} cannot be used ({exc}); rebuilding it",
                SadlCacheWarning,
                stacklevel=4,
            )
        return None


def _drop_stale(cache_dir: Path) -> None:
    """Remove the profiles of format 1 in ``cache_dir`` (no version reads them), saying so
    (what killed writers left is swept by every ``load_or_build``)."""
    old = store.stale_files(cache_dir)
    if not old:
        return
    warnings.warn(
        f"pytest-sadl: {len(old)} training profile(s) of format 1 in {cache_dir} are stale "
        f"(this version reads format {FORMAT_VERSION}); removing them and building the profile anew",
        SadlCacheWarning,
        stacklevel=4,
    )
    for file in old:
        try:
            file.unlink()
        except IsADirectoryError:
            shutil.rmtree(file, ignore_errors=True)
        except OSError:
            pass


def _note_data(cache_dir: Path, profile: TrainingProfile) -> None:
    """Warn when the same model's training data from the same source changed since the
    last profile while keeping its size: the sign of a randomly augmenting ``sadl_train``."""
    key = hashlib.sha256(f"{profile.model_fingerprint}\0{profile.data_source}".encode()).hexdigest()[:32]
    before = history.note_data(cache_dir, key, profile.data_fingerprint, profile.n_train)
    if before is not None and before["data"] != profile.data_fingerprint and before["n"] == profile.n_train:
        warnings.warn(
            f"pytest-sadl: the {profile.data_source or 'training data'} holds other inputs than in the last run "
            f"with the same model (again {profile.n_train} inputs): if sadl_train augments or samples at "
            "random, LSC/DSC change from run to run and each run caches another profile; make it "
            "deterministic (ignore this if you changed the data on purpose)",
            SadlCacheWarning,
            stacklevel=4,
        )


def _derived_arrays(path: Path) -> dict[str, Any]:
    """The derived arrays of the entry ``path`` that still hold once it is rewritten with
    the same numbers (all but the kept DSA distances, which the new entry holds whole);
    unreadable ones are left behind, to be computed again."""
    out = {}
    for name in store.extra_names(path):
        if name == DSA_DISTANCES:
            continue
        with contextlib.suppress(Invalid, OSError):
            value = store.read_extra(path, name)
            if value is not None:
                out[name] = value
    return out


def load_or_build(
    model: Any,
    train: Any,
    options: ProfileOptions | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    progress: Progress | None = None,
    status: Status | None = None,
    rebuild: bool = False,
    base_dir: str | os.PathLike[str] | None = None,
    lock_timeout: float | None = locks.DEFAULT_LOCK_TIMEOUT,
    dask: str | None = None,
    dask_model: Any = None,
) -> TrainingProfile:
    """The training profile of ``model`` on ``train``: loaded when cached, else built.

    ``cache_dir=None`` builds without caching. ``progress(done, total)`` is called per
    batch of the forward pass; ``status(message)`` at each phase. ``rebuild=True``
    ignores a cached profile. Relative paths in ``model``/``train`` resolve against
    ``base_dir`` (the rootdir). Raises :class:`~pytest_sadl.errors.SadlConfigError`
    subclasses for bad models, layers, options and data; a cached profile that must not
    be trusted only warns (:class:`SadlCacheWarning`) and is rebuilt; a cache that
    cannot be written warns and the profile is kept in memory. Waiting for another
    process's build lock says so through ``status`` after a few seconds (naming the
    holder), takes over the lock of a holder that is gone, and after ``lock_timeout``
    seconds builds the profile in memory with a :class:`SadlCacheWarning`, unsaved.
    ``dask``: the address of a Dask scheduler whose workers trace the training data
    (:mod:`pytest_sadl.profile.distributed`; the same profile as a local build);
    ``dask_model``: the model's path or spec for the workers when ``model`` is a loaded one.
    """
    options = options or ProfileOptions()
    tracer = None
    if dask:
        from pytest_sadl.profile.distributed import DaskTracer

        tracer = DaskTracer(dask, model if dask_model is None else dask_model, base_dir, status=status)
        tracer.start(strict=False)  # the workers load the model while this process fingerprints
    model, tm, data, mfp, fp = prepare(model, train, options, base_dir)

    def build() -> TrainingProfile:
        return build_profile(
            tm, data, options, fingerprint=fp, model_fp=mfp, progress=progress, status=status, tracer=tracer
        )

    if cache_dir is None:
        return build()
    cache_dir = Path(cache_dir)
    path = profile_path(cache_dir, fp)
    store.sweep(cache_dir)  # killed writers' leftovers, LEFTOVER_AGE old: loading or building

    def ready(p: TrainingProfile) -> bool:
        return not options.dsa_precompute or not p.classifier or p.dsa_arrays is not None

    carried: dict[str, Any] = {}

    def make(partial: TrainingProfile | None) -> TrainingProfile:
        if partial is not None:  # same numbers, DSA distances missing: complete the profile
            if status:
                status(f"DSA: nearest other-class distance of {partial.n_train} training traces")
            try:
                dsa = partial.dsa()  # starts from the distances kept so far
            except ValueError:  # DSA cannot be set up on these traces: the run says why
                return partial
            partial.dsa_arrays = dsa.to_arrays()
            partial.options = replace(partial.options, dsa_precompute=True)
            carried.update(_derived_arrays(path))  # the held-out scores survive the rewrite
            return partial
        _drop_stale(cache_dir)
        profile = build()
        if status:
            status(f"writing {path}")
        return profile

    def save(p: TrainingProfile, target: Path) -> None:
        save_profile(p, target)
        p.path = target
        p.stored_digest = store.entry_digest(target)
        for name, value in carried.items():
            store.write_extra(target, name, value)

    profile, _stored = cycle.cached_build(
        path,
        load=lambda p, warn: _try_load(p, fp, warn),
        ready=ready,
        make=make,
        save=save,
        rebuild=rebuild,
        lock_timeout=lock_timeout,
        notice=status,
    )
    if profile.built:
        _note_data(cache_dir, profile)
    return profile


# ----------------------------------------------------------------------------- listing


@dataclass
class ProfileInfo:
    """One stored profile, as :func:`list_profiles` reads it (the arrays are not read)."""

    path: Path
    fingerprint: str
    size: int
    mtime: float
    ok: bool
    problem: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def age_seconds(self) -> float:
        return max(0.0, time.time() - self.mtime)


def _size(path: Path) -> int:
    """Bytes of a file, or of the regular files directly in a folder."""
    if not path.is_dir():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.iterdir() if p.is_file())


def list_profiles(cache_dir: str | os.PathLike[str]) -> list[ProfileInfo]:
    """The profiles in ``cache_dir``, newest first; unreadable or stale ones have
    ``ok=False`` and a ``problem``. Headers and metadata are checked, the arrays'
    digests are not (that is a load's work); nothing can hang on a FIFO."""
    out = []
    for path in store.entries(cache_dir):
        fp = path.name[len(store.PREFIX) :]
        st = path.lstat()
        info = ProfileInfo(path=path, fingerprint=fp, size=0, mtime=st.st_mtime, ok=True)
        with contextlib.suppress(OSError):
            info.size = _size(path)
        if path.suffix == ".npz":
            info.fingerprint = fp[: -len(".npz")]
            info.ok, info.problem = False, "format 1 (stale: rebuilt on the next run, then removed)"
        else:
            try:
                entry = store.open_entry(path)
                info.meta = entry.meta
                check_meta(entry.meta)
                if entry.meta["fingerprint"] != fp:
                    info.ok, info.problem = False, "fingerprint does not match the folder name"
                else:
                    check_shapes(entry.meta, entry)
            except Invalid as exc:
                info.ok, info.problem = False, f"unusable ({exc})"
        out.append(info)
    out.sort(key=lambda i: i.mtime, reverse=True)
    return out
