"""The training profile: what the criteria need from the training set, built once.

One forward pass of the training set through the model (:class:`~pytest_sadl.traces.TraceModel`)
gives the SA traces of the chosen layers with their predicted classes and the per-neuron
``[low, high]`` of the coverage layers; the DSA set-up (every training trace's distance to
its nearest other-class trace, the expensive part) is computed once too. The profile is
stored by :mod:`pytest_sadl.store` (a folder of memory-mapped ``.npy`` files with digests,
named by the fingerprint, in the folder :mod:`pytest_sadl.cache` finds).

Order independence: the same multiset of training inputs gives the same profile. The
data fingerprint is order-free (:mod:`pytest_sadl.fingerprint`), the traces are stored in
the canonical order of the inputs' row digests (so LSA and DSA are set up from the same
arrays in the same order), and ``row_keys`` (the digests' first 8 bytes) choose the
held-out sample of the default SC bounds. A ``tf.data.Dataset`` is read twice (the
fingerprint, then the traces): when the second pass holds other inputs than the first (a
random augmentation), a :class:`SadlCacheWarning` says so; a source whose inputs differ
from the previous run's with the same model and the same count (an augmenting fixture)
is told the same, from a small history kept in the cache folder.

Public API
----------
``ProfileOptions(sa_layers=None, coverage_layers=None, var_threshold=1e-5, batch_size=256,
classifier=None, dsa_precompute=True)``
    What to build. ``None`` layers mean the defaults of :mod:`pytest_sadl.traces`.
``load_or_build(model, train, options=None, cache_dir=None, *, progress=None, status=None,
rebuild=False, base_dir=None) -> TrainingProfile``
    The cached profile when its fingerprint matches, else built (and stored when
    ``cache_dir`` is given and writable; else kept in memory with a one-line
    :class:`SadlCacheWarning`). ``model``: a ``keras.Model`` or anything
    :func:`pytest_sadl.modelio.load_model` takes; ``train``: anything
    :func:`pytest_sadl.data.load_training_data` takes.
``TrainingProfile``
    ``.lsa()`` / ``.dsa()`` (engine objects, built once per profile from the cached arrays;
    ``dsa()`` is ``None`` for a regression model), ``.ranges`` (:class:`NeuronRanges` of the
    coverage layers), ``.trace_model(model)``, ``.cached_array(name, compute)`` (a derived
    array stored in the profile, e.g. held-out scores for default bounds), ``.fingerprint``,
    ``.model_fingerprint``, ``.data_fingerprint``, ``.sa_traces``, ``.sa_pred``,
    ``.row_keys``, ``.sa_layers``, ``.coverage_layers``, ``.classifier``, ``.n_classes``,
    ``.n_train``, ``.path``, ``.built``...
``model_fingerprint(model) -> str``, ``profile_fingerprint(...) -> str``
    sha256 hex digests (see :func:`profile_fingerprint` for what goes in).
``save_profile(profile, path)``, ``load_profile(path, fingerprint=None)``
    The store's format 2 for a profile; ``load_profile`` raises :class:`Invalid` when the
    folder must not be trusted.
``default_cache_dir(rootdir=None) -> Path``, ``find_rootdir(start=None) -> Path``
    From :mod:`pytest_sadl.cache`.
``list_profiles(cache_dir) -> list[ProfileInfo]``
    The profiles stored there, newest first, each with its fingerprint, size, age and
    whether it is readable.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from pytest_sadl import store
from pytest_sadl.cache import default_cache_dir, find_rootdir
from pytest_sadl.data import (
    SadlConfigError,
    SadlDataError,
    TrainingData,
    batch_row_digests,
    load_training_data,
    row_format,
    take_rows,
)
from pytest_sadl.store import FORMAT, FORMAT_VERSION, Invalid, SadlCacheWarning

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "ProfileOptions",
    "TrainingProfile",
    "ProfileInfo",
    "SadlCacheWarning",
    "Invalid",
    "load_or_build",
    "build_profile",
    "load_profile",
    "save_profile",
    "model_fingerprint",
    "profile_fingerprint",
    "default_cache_dir",
    "find_rootdir",
    "list_profiles",
    "profile_path",
]

_ENGINE_MAP_BYTES = 1 << 30
Progress = Callable[[int, "int | None"], None]
Status = Callable[[str], None]


class _Arrays(Mapping[str, np.ndarray]):
    """An engine's ``to_arrays()`` dict read from a file: entries stored once in the file
    (the training traces) are rebuilt from it only when the engine asks for them, so a
    cache hit does not pay for float64 copies it may never use."""

    def __init__(self, stored: dict[str, np.ndarray], refs: dict[str, Callable[[], np.ndarray]]) -> None:
        self._stored = stored
        self._refs = refs

    def __getitem__(self, key: str) -> np.ndarray:
        if key in self._stored:
            return self._stored[key]
        if key in self._refs:
            return self._refs[key]()
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        yield from self._stored
        yield from (k for k in self._refs if k not in self._stored)

    def __len__(self) -> int:
        return len(set(self._stored) | set(self._refs))


# ----------------------------------------------------------------------------- options


@dataclass(frozen=True)
class ProfileOptions:
    """What goes into a profile.

    ``sa_layers``/``coverage_layers``: layer names or indices, ``None`` for the defaults
    (the last hidden layer; every layer with neurons). ``var_threshold``: LSA's variance
    filter. ``lsa_near_singular``: LSA's ``near_singular`` (``"drop"`` or ``"keep"``). ``batch_size``: inputs per forward pass (does not change the numbers, so it is
    not in the fingerprint). ``classifier``: ``None`` to detect
    (:func:`pytest_sadl.traces.is_classifier`). ``dsa_precompute``: compute every training
    trace's nearest other-class distance at build time and store it (``False``: the DSA
    computes it lazily, for the training traces that test inputs land next to, in every
    session; not in the fingerprint, a later build with ``True`` completes the file).
    ``output``: which output of a multi-output model gives the class (name or index;
    ``None``: the first).
    """

    sa_layers: tuple[str | int, ...] | None = None
    coverage_layers: tuple[str | int, ...] | None = None
    var_threshold: float = 1e-5
    lsa_near_singular: str = "drop"
    batch_size: int = 256
    classifier: bool | None = None
    dsa_precompute: bool = True
    output: str | int | None = None

    def __post_init__(self) -> None:
        for name in ("sa_layers", "coverage_layers"):
            value = getattr(self, name)
            if isinstance(value, (str, int)):
                value = (value,)
            if value is not None:
                object.__setattr__(self, name, tuple(value) or None)
        if not isinstance(self.batch_size, int) or isinstance(self.batch_size, bool) or self.batch_size < 1:
            raise SadlConfigError(f"batch_size must be an integer >= 1, got {self.batch_size!r}")
        vt = self.var_threshold
        if isinstance(vt, bool) or not isinstance(vt, (int, float)) or not np.isfinite(vt) or vt < 0:
            raise SadlConfigError(f"var_threshold must be a finite number >= 0, got {vt!r}")
        if self.lsa_near_singular not in ("drop", "keep"):
            raise SadlConfigError(f"lsa_near_singular must be 'drop' or 'keep', got {self.lsa_near_singular!r}")


# ----------------------------------------------------------------------------- fingerprints


def _sha() -> Any:
    return hashlib.sha256()


def model_fingerprint(model: Any) -> str:
    """sha256 hex of the model's architecture (``get_config()`` as sorted JSON) and every
    weight (path, shape, dtype and bytes, trainable and not). Changing one weight or one
    layer option changes it; loading the same ``.keras`` file twice does not."""
    h = _sha()
    h.update(f"{type(model).__module__}.{type(model).__qualname__}\0".encode())
    try:
        config = model.get_config()
    except Exception:  # a subclassed model without get_config: the weights still count
        config = {"layers": [(layer.name, type(layer).__qualname__) for layer in getattr(model, "layers", [])]}
    h.update(json.dumps(config, sort_keys=True, default=str).encode())
    for w in model.weights:
        value = np.asarray(w.numpy() if hasattr(w, "numpy") else w)
        h.update(f"\0{getattr(w, 'path', getattr(w, 'name', ''))}\0{value.dtype.str}\0{value.shape}\0".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    return h.hexdigest()


def _versions() -> dict[str, str]:
    import pytest_sadl

    out = {"pytest_sadl": pytest_sadl.__version__, "numpy": np.__version__}
    keras = sys.modules.get("keras")
    if keras is not None:
        out["keras"] = keras.__version__
    return out


def profile_fingerprint(
    model_fp: str,
    data_fp: str,
    *,
    sa_layers: Sequence[str],
    coverage_layers: Sequence[str],
    var_threshold: float,
    classifier: bool,
    lsa_near_singular: str = "drop",
    keras_version: str | None = None,
    output: str | None = None,
) -> str:
    """sha256 hex of everything that changes the profile's numbers: the format version,
    the model fingerprint, the training data fingerprint, the resolved layer names, the
    variance threshold, the classifier flag and the Keras version. The batch size and
    ``dsa_precompute`` are left out: they do not change the numbers, nor does the Keras
    backend (TensorFlow and JAX give the same traces). ``output`` (the measured output of
    a model with several) goes in only when given, so one-output models keep their
    fingerprints."""
    payload = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "model": model_fp,
        "data": data_fp,
        "sa_layers": list(sa_layers),
        "coverage_layers": list(coverage_layers),
        "var_threshold": float(var_threshold),
        "lsa_near_singular": lsa_near_singular,
        "classifier": bool(classifier),
        "keras": keras_version,
    }
    if output is not None:
        payload["output"] = output
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


# ----------------------------------------------------------------------------- where


def profile_path(cache_dir: str | os.PathLike[str], fingerprint: str) -> Path:
    """Where the profile of ``fingerprint`` is stored under ``cache_dir`` (a folder)."""
    return Path(cache_dir) / f"{store.PREFIX}{fingerprint}"


# ----------------------------------------------------------------------------- profile


@dataclass
class TrainingProfile:
    """What the criteria need from the training set; see the module docstring.

    ``lsa_arrays``/``dsa_arrays`` are the engine's ``to_arrays()`` dicts (``dsa_arrays`` is
    ``None`` for a regression model, or when built with ``dsa_precompute=False``).
    ``options`` holds the *resolved* layer names. ``path`` is the cache file (``None`` when
    not cached); ``built`` says whether this call built it (``False``: loaded from cache).
    """

    fingerprint: str
    options: ProfileOptions
    model_fingerprint: str
    data_fingerprint: str
    model_name: str
    classifier: bool
    n_train: int
    n_outputs: int
    input_shape: tuple[int | None, ...]
    sa_layers: list[str]
    coverage_layers: list[str]
    sa_sizes: list[int]
    coverage_sizes: list[int]
    sa_traces: np.ndarray
    sa_pred: np.ndarray
    ranges: Any  # pytest_sadl.neurons.NeuronRanges
    row_keys: np.ndarray  # (n_train,) uint64: the inputs' row digests, in the traces' order
    lsa_arrays: Mapping[str, np.ndarray]
    dsa_arrays: Mapping[str, np.ndarray] | None
    created: str
    versions: dict[str, str] = field(default_factory=dict)
    data_source: str = ""
    path: Path | None = None
    built: bool = False
    _lsa: Any = field(default=None, repr=False, compare=False)
    _dsa: Any = field(default=None, repr=False, compare=False)
    _mdsa: Any = field(default=None, repr=False, compare=False)
    _extras: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_classes(self) -> int | None:
        """Number of output classes of a classifier (2 for one sigmoid unit), else ``None``."""
        if not self.classifier:
            return None
        return 2 if self.n_outputs == 1 else self.n_outputs

    def lsa(self) -> Any:
        """The :class:`pytest_sadl.surprise.LSA` of the training traces (built on first call).

        Per predicted class for a classifier, one KDE for a regression model."""
        if self._lsa is None:
            from pytest_sadl.surprise import LSA

            self._lsa = LSA.from_arrays(self.lsa_arrays)
        return self._lsa

    def dsa(self) -> Any:
        """The :class:`pytest_sadl.surprise.DSA` (``None`` for a regression model), from the
        cached nearest-other-class distances when the profile holds them."""
        if not self.classifier:
            return None
        if self._dsa is None:
            from pytest_sadl.surprise import DSA

            if self.dsa_arrays is not None:
                self._dsa = DSA.from_arrays(self.dsa_arrays)
            else:
                self._dsa = DSA(self.sa_traces, self.sa_pred)
        return self._dsa

    def mdsa(self) -> Any:
        """The :class:`pytest_sadl.surprise.MDSA` of the training traces (built on first call;
        per predicted class for a classifier). Fitting it is one mean and one covariance per
        class, milliseconds, so it is made from the stored traces rather than stored."""
        if self._mdsa is None:
            from pytest_sadl.surprise import MDSA

            self._mdsa = MDSA(
                self.sa_traces, self.sa_pred if self.classifier else None, var_threshold=self.options.var_threshold
            )
        return self._mdsa

    def cached_array(self, name: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
        """A derived array kept in the profile's folder: loaded when it is there (and
        matches its digest), else ``compute()``-d and stored atomically.

        For values that depend only on the profile and ``name`` (put any parameter in the
        name, e.g. ``"heldout-lsa-1000"``), such as default bounds computed from the
        training traces. Without a cache folder (``path is None``) it just computes. An
        unreadable file is recomputed with a :class:`SadlCacheWarning`, an unwritable
        folder keeps the value in memory (with one such warning).
        """
        if not name or not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
            raise SadlConfigError(f"cached_array name {name!r} must be letters, digits, '-', '_' and '.'")
        if name in self._extras:
            return self._extras[name]
        if self.path is not None:
            try:
                hit = store.read_extra(self.path, name)
            except Invalid as exc:
                hit = None
                warnings.warn(
                    f"pytest-sadl: cached array {name!r} of {self.path} cannot be used ({exc}); recomputing it",
                    SadlCacheWarning,
                    stacklevel=2,
                )
            if hit is not None:
                self._extras[name] = hit
                return hit
        value = np.asarray(compute())
        if value.dtype.kind not in "biuf":
            raise SadlConfigError(f"cached_array {name!r}: compute() returned dtype {value.dtype}, not numbers")
        if self.path is not None:
            try:
                store.write_extra(self.path, name, value)
            except OSError as exc:
                store.uncached_warning(self.path, exc)
        self._extras[name] = value
        return value

    def trace_model(self, model: Any) -> Any:
        """A :class:`~pytest_sadl.traces.TraceModel` of ``model`` with this profile's layers,
        whose traces carry each conv layer's per-input extrema (what NC's scaling needs)."""
        from pytest_sadl.traces import TraceModel

        return TraceModel(
            model, self.sa_layers, self.coverage_layers, classifier=self.classifier, output=self.options.output, extrema=True
        )

    def meta(self) -> dict[str, Any]:
        """The JSON-able description stored in the file (no arrays)."""
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "fingerprint": self.fingerprint,
            "model_fingerprint": self.model_fingerprint,
            "data_fingerprint": self.data_fingerprint,
            "model_name": self.model_name,
            "classifier": self.classifier,
            "n_train": self.n_train,
            "n_outputs": self.n_outputs,
            "input_shape": list(self.input_shape),
            "sa_layers": self.sa_layers,
            "coverage_layers": self.coverage_layers,
            "sa_sizes": self.sa_sizes,
            "coverage_sizes": self.coverage_sizes,
            "var_threshold": self.options.var_threshold,
            "lsa_near_singular": self.options.lsa_near_singular,
            "dsa_precomputed": self.dsa_arrays is not None,
            "created": self.created,
            "versions": self.versions,
            "data_source": self.data_source,
            "output": self.options.output,
        }


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _resolve(
    model: Any, train: Any, options: ProfileOptions, base_dir: Any
) -> tuple[Any, Any, TrainingData, str, str]:
    """(model, TraceModel, data, model fingerprint, profile fingerprint)."""
    from pytest_sadl.modelio import load_model
    from pytest_sadl.traces import TraceModel

    model = load_model(model, base_dir=base_dir)
    tm = TraceModel(model, options.sa_layers, options.coverage_layers, classifier=options.classifier, output=options.output)
    data = tm.prepare(load_training_data(train, base_dir=base_dir))
    import keras

    mfp = model_fingerprint(model)
    fp = profile_fingerprint(
        mfp,
        data.fingerprint(),
        sa_layers=tm.sa_layers,
        coverage_layers=tm.coverage_layers,
        var_threshold=options.var_threshold,
        classifier=tm.classifier,
        lsa_near_singular=options.lsa_near_singular,
        keras_version=keras.__version__,
        output=tm.output_name if len(tm.output_names) > 1 else None,
    )
    return model, tm, data, mfp, fp


def _digesting(data: TrainingData) -> tuple[TrainingData, list[np.ndarray]]:
    """``data`` for the tracing pass, and the list that pass fills with the batches' row
    digests of a dataset, in the order it yields them.

    An array is traced in the canonical order of its rows (the forward pass's float
    rounding can depend on which inputs share a batch, so the same batches are what makes
    a profile of the same inputs in another order bitwise equal). A dataset is traced in
    the order it yields and sorted afterwards: the same fingerprint, row keys and
    held-out sample, numbers equal to the forward pass's rounding (~1e-6 relative)."""
    from pytest_sadl.fingerprint import canonical_order

    seen: list[np.ndarray] = []
    if data.x is not None:  # traced in canonical order: the same batches whatever the order given
        x, order = data.x, canonical_order(data.row_digests())
        canonical = replace(data)
        canonical.batches = lambda batch_size: (  # type: ignore[method-assign]
            take_rows(x, order[i : i + batch_size])
            for i in range(0, len(order), batch_size)
        )
        return canonical, seen

    inner = data.batches
    header: list[tuple[str, tuple[int, ...]]] = []

    def batches(batch_size: int) -> Iterator[Any]:
        for batch in inner(batch_size):
            if not isinstance(batch, (dict, list)):
                batch = np.asarray(batch)
            if not header:
                header.append(row_format(batch))
            seen.append(batch_row_digests(batch))
            yield batch

    traced = replace(data)
    traced.batches = batches  # type: ignore[method-assign]
    traced.header = header  # type: ignore[attr-defined]
    return traced, seen


def _check_second_pass(data: TrainingData, traced: TrainingData, rows: np.ndarray) -> None:
    """Warn when a dataset's tracing pass held other inputs than its fingerprint pass
    (the fingerprints of the two passes are compared: order does not matter)."""
    from pytest_sadl.fingerprint import multiset_fingerprint

    dtype, shape = traced.header[0] if traced.header else ("", ())  # type: ignore[attr-defined]
    if multiset_fingerprint(rows, dtype=dtype, row_shape=shape) != data.fingerprint():
        warnings.warn(
            f"pytest-sadl: the training data {data.source} gave other inputs on its second pass than on "
            "its first (random augmentation or sampling in sadl_train?): the profile and so LSC/DSC "
            "change from run to run, and each run caches another profile; make sadl_train deterministic",
            SadlCacheWarning,
            stacklevel=4,
        )


def build_profile(
    tm: Any,
    data: TrainingData,
    options: ProfileOptions,
    *,
    fingerprint: str,
    model_fp: str,
    progress: Progress | None = None,
    status: Status | None = None,
) -> TrainingProfile:
    """Trace the training data through ``tm`` (a :class:`TraceModel`) and set the criteria up.

    Lower-level than :func:`load_or_build` (no cache); ``fingerprint``/``model_fp`` are
    recorded as given."""
    from pytest_sadl.fingerprint import canonical_order, row_keys
    from pytest_sadl.neurons import fit_ranges
    from pytest_sadl.surprise import DSA, LSA

    say = status or (lambda _msg: None)
    total = data.n
    say(f"tracing {'all' if total is None else total} training inputs through {tm.model.name!r}")
    traced, digests = _digesting(data)
    traces = tm.traces(traced, batch_size=options.batch_size, progress=progress)
    n = len(traces)
    say(f"fitting neuron ranges and {'LSA and DSA' if tm.classifier else 'LSA (DSA needs a classifier)'}")
    ranges = fit_ranges(traces.coverage, names=tm.coverage_layers)
    n_outputs = int(traces.output.shape[1]) if traces.output.ndim == 2 else 1
    # canonical order: the same inputs in any order give the same arrays in the same order
    if data.x is not None:  # traced in canonical order already
        rows = data.row_digests()
        order = canonical_order(rows)
        sa_traces, sa_pred, keys = traces.sa, traces.pred, row_keys(rows[order])
    else:
        rows = np.concatenate(digests)
        _check_second_pass(data, traced, rows)
        order = canonical_order(rows)
        sa_traces, sa_pred, keys = traces.sa[order], traces.pred[order], row_keys(rows[order])
    del traces, rows  # the coverage traces are done with: free them before the engine's set-up
    pred = sa_pred if tm.classifier else None
    try:
        lsa = LSA(sa_traces, pred, var_threshold=options.var_threshold, near_singular=options.lsa_near_singular)
    except ValueError as exc:
        raise SadlDataError(f"LSA cannot be set up on SA layers {tm.sa_layers}: {exc}") from exc
    dsa_arrays = None
    dsa = None
    if tm.classifier:
        try:
            dsa = DSA(sa_traces, sa_pred)
        except ValueError as exc:
            raise SadlDataError(f"DSA cannot be set up on SA layers {tm.sa_layers}: {exc}") from exc
        if options.dsa_precompute:
            say(f"DSA: nearest other-class distance of {n} training traces")
            dsa_arrays = dsa.to_arrays()
    resolved = replace(
        options, sa_layers=tuple(tm.sa_layers), coverage_layers=tuple(tm.coverage_layers), classifier=tm.classifier,
        output=tm.output_name,
    )
    profile = TrainingProfile(
        fingerprint=fingerprint,
        options=resolved,
        model_fingerprint=model_fp,
        data_fingerprint=data.fingerprint(),
        model_name=str(tm.model.name),
        classifier=tm.classifier,
        n_train=n,
        n_outputs=n_outputs,
        input_shape=tuple(tm.input_shape),
        sa_layers=list(tm.sa_layers),
        coverage_layers=list(tm.coverage_layers),
        sa_sizes=list(tm.sa_sizes),
        coverage_sizes=list(tm.coverage_sizes),
        sa_traces=sa_traces,
        sa_pred=sa_pred,
        ranges=ranges,
        row_keys=keys,
        lsa_arrays=lsa.to_arrays(),
        dsa_arrays=dsa_arrays,
        created=_now(),
        versions=_versions(),
        data_source=data.source,
        built=True,
    )
    profile._lsa = lsa
    profile._dsa = dsa
    return profile


# ----------------------------------------------------------------------------- storage


def _candidates(profile: TrainingProfile) -> dict[str, Callable[[], np.ndarray]]:
    """Arrays an engine array may duplicate (made on demand), so that it is stored once."""
    out: dict[str, Callable[[], np.ndarray]] = {"sa_traces": lambda: profile.sa_traces, "sa_pred": lambda: profile.sa_pred}
    if profile.classifier:
        order = np.argsort(profile.sa_pred, kind="stable")
        out["sa_traces[order]"] = lambda: profile.sa_traces[order]
        out["sa_pred[order]"] = lambda: profile.sa_pred[order]
    return out


def _same(a: np.ndarray, make: Callable[[], np.ndarray], shape: tuple[int, ...]) -> bool:
    """Whether ``a`` holds exactly the values of ``make()`` (compared in row chunks,
    so no full-size cast is made)."""
    if a.shape != shape or a.dtype.kind not in "biuf":
        return False
    b = make()
    if b.dtype.kind not in "biuf" or not (a.dtype == b.dtype or np.can_cast(b.dtype, a.dtype, casting="safe")):
        return False
    step = max(1, (1 << 22) // max(1, int(np.prod(a.shape[1:], dtype=np.int64))))
    return all(np.array_equal(a[i : i + step], b[i : i + step].astype(a.dtype)) for i in range(0, len(a), step))


def _to_file_arrays(profile: TrainingProfile) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Flat ``{key: array}`` for the store and the references of deduplicated arrays."""
    arrays: dict[str, np.ndarray] = {
        "sa_traces": np.ascontiguousarray(profile.sa_traces),
        "sa_pred": np.ascontiguousarray(profile.sa_pred),
        "row_keys": np.ascontiguousarray(profile.row_keys, dtype=np.uint64),
    }
    for key, value in profile.ranges.to_arrays().items():
        if key != "names":  # strings go into the metadata: the store holds numbers only
            arrays[f"ranges.{key}"] = value
    refs: dict[str, Any] = {"strings": {}}
    strings = refs["strings"]
    cands = _candidates(profile)
    need_order = False
    for group, d in (("lsa", profile.lsa_arrays), ("dsa", profile.dsa_arrays)):
        if d is None:
            continue
        for key, value in d.items():
            value = np.asarray(value)
            name = f"{group}.{key}"
            shape_of = {"sa_traces": profile.sa_traces.shape, "sa_pred": profile.sa_pred.shape}
            if value.dtype.kind == "U":  # an option such as LSA's near_singular: the store holds numbers only
                strings[name] = value.tolist()
                continue
            ref = next(
                (c for c, make in cands.items() if value.ndim and _same(value, make, shape_of[c.split("[")[0]])),
                None,
            )
            if ref is not None:
                refs[name] = {"ref": ref, "dtype": value.dtype.str}
                need_order |= ref.endswith("[order]")
            else:
                arrays[name] = value
    if need_order:
        arrays["order"] = np.argsort(profile.sa_pred, kind="stable")
    return arrays, refs


def save_profile(profile: TrainingProfile, path: str | os.PathLike[str]) -> Path:
    """Store ``profile`` as the folder ``path`` (format 2, atomically); returns the path.
    Raises ``OSError`` when it cannot be written."""
    arrays, refs = _to_file_arrays(profile)
    meta = profile.meta()
    meta["refs"] = refs
    meta["range_names"] = list(profile.ranges.names)
    return store.write_entry(path, meta, arrays)


def _is_int(value: Any, low: int = 0) -> bool:
    return type(value) is int and low <= value < 1 << 40


def _check_meta(meta: dict[str, Any]) -> None:
    """The metadata fields a profile is rebuilt from, with their types and ranges."""

    def bad(key: str, what: str) -> Invalid:
        return Invalid(f"metadata {key!r} is {meta.get(key)!r}, expected {what}")

    for key in ("fingerprint", "model_fingerprint", "data_fingerprint", "model_name", "created"):
        if not isinstance(meta.get(key), str):
            raise bad(key, "a string")
    for key in ("n_train", "n_outputs"):
        if not _is_int(meta.get(key), 1):
            raise bad(key, "an integer >= 1")
    for key in ("sa_sizes", "coverage_sizes"):
        value = meta.get(key)
        if not isinstance(value, list) or not value or not all(_is_int(v, 1) for v in value):
            raise bad(key, "a list of integers >= 1")
    for key, size_key in (("sa_layers", "sa_sizes"), ("coverage_layers", "coverage_sizes"), ("range_names", "coverage_sizes")):
        value = meta.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or len(value) != len(meta[size_key]):
            raise bad(key, f"a list of {len(meta[size_key])} names")
    if not isinstance(meta.get("classifier"), bool):
        raise bad("classifier", "true or false")
    vt = meta.get("var_threshold")
    if isinstance(vt, bool) or not isinstance(vt, (int, float)) or not np.isfinite(vt) or vt < 0:
        raise bad("var_threshold", "a finite number >= 0")
    shape = meta.get("input_shape")
    if not isinstance(shape, list) or not all(v is None or _is_int(v) for v in shape):
        raise bad("input_shape", "a list of sizes")
    if not isinstance(meta.get("refs", {}), dict) or not isinstance(meta.get("versions", {}), dict):
        raise Invalid("metadata 'refs' or 'versions' is not an object")


def _check_shapes(meta: dict[str, Any], entry: store.Entry) -> None:
    """What the arrays' headers must say, checked before any data is read."""
    n, d = meta["n_train"], sum(meta["sa_sizes"])
    n_cov, n_layers = sum(meta["coverage_sizes"]), len(meta["coverage_sizes"])
    shapes, kinds = entry.shapes(), {k: v.dtype.kind for k, v in entry.arrays.items()}
    pred_shape = shapes.get("sa_pred", ())
    want = {
        "sa_traces": ((n, d), "f"),
        # a classifier's predicted classes; a regression model's outputs (n,) or (n, k)
        "sa_pred": ((n,), "iu") if meta["classifier"] else ((n, *pred_shape[1:2]), "iuf"),
        "row_keys": ((n,), "u"),
        "ranges.low": ((n_cov,), "f"),
        "ranges.high": ((n_cov,), "f"),
        "ranges.sizes": ((n_layers,), "iu"),
    }
    if "order" in shapes:
        want["order"] = ((n,), "iu")
    for key, (shape, kind) in want.items():
        if key not in shapes:
            raise Invalid(f"array {key!r} is missing")
        if shapes[key] != shape or kinds[key] not in kind:
            raise Invalid(f"{key} is {entry.arrays[key].dtype} {shapes[key]}, expected shape {shape}")
    for key, shape in shapes.items():
        group = key.partition(".")[0]
        if key not in want and (group not in ("lsa", "dsa") or (shape and shape[0] > n)):
            raise Invalid(f"array {key!r} {shape} does not belong in a profile of {n} inputs")


def _all_finite(a: np.ndarray) -> bool:
    """``np.isfinite(a).all()`` a few MiB at a time (a memory map is not copied whole)."""
    flat = a.reshape(-1)
    step = 1 << 20
    return all(bool(np.isfinite(flat[i : i + step]).all()) for i in range(0, flat.shape[0], step))


def load_profile(path: str | os.PathLike[str], fingerprint: str | None = None) -> TrainingProfile:
    """Open, check and verify the profile folder ``path``; raise :class:`Invalid` (one
    line saying why) when it must not be trusted: see :mod:`pytest_sadl.store` for the
    order of the checks. The traces stay memory-mapped."""
    from pytest_sadl.neurons import NeuronRanges

    path = Path(path)
    entry = store.open_entry(path)
    meta = entry.meta
    _check_meta(meta)
    if fingerprint is not None and meta["fingerprint"] != fingerprint:
        raise Invalid("its fingerprint does not match its name")
    _check_shapes(meta, entry)
    entry.verify()
    a = entry.arrays
    if not _all_finite(a["sa_traces"]):
        raise Invalid("sa_traces holds NaN or inf")
    low, high = np.asarray(a["ranges.low"]), np.asarray(a["ranges.high"])
    if not (np.isfinite(low).all() and np.isfinite(high).all() and (low <= high).all()):
        raise Invalid("the neuron ranges hold NaN, inf or low > high")
    if list(np.asarray(a["ranges.sizes"])) != meta["coverage_sizes"]:
        raise Invalid(f"the neuron ranges have sizes {list(a['ranges.sizes'])}, expected {meta['coverage_sizes']}")
    pred = a["sa_pred"]
    n_classes = 2 if meta["n_outputs"] == 1 else meta["n_outputs"]
    if meta["classifier"] and len(pred) and (int(pred.min()) < 0 or int(pred.max()) >= n_classes):
        raise Invalid(f"sa_pred holds classes outside [0, {n_classes})")
    order = a.get("order")
    if order is not None and len(order) and (int(order.min()) < 0 or int(order.max()) >= meta["n_train"]):
        raise Invalid("order is malformed")
    if "lsa.var_threshold" in a and float(a["lsa.var_threshold"]) != float(meta["var_threshold"]):
        raise Invalid("the LSA's var_threshold differs from the metadata's")
    try:
        return _from_entry(path, meta, a, NeuronRanges)
    except Invalid:
        raise
    except Exception as exc:
        raise Invalid(f"its content is inconsistent ({type(exc).__name__}: {exc})") from exc


def _from_entry(path: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray], ranges_cls: Any) -> TrainingProfile:
    sa, pred, n = arrays["sa_traces"], arrays["sa_pred"], meta["n_train"]
    order = arrays.get("order")
    # The engine gets plain-ndarray views of the maps (still paged in lazily) below 1 GiB,
    # so it takes the same in-memory path as on a freshly built profile: the same numbers
    # bit for bit (a serial run that builds equals an xdist run that loads); above, the
    # maps themselves, which the engine scores in chunks.
    arrays = {k: (np.asarray(v) if isinstance(v, np.memmap) and v.nbytes < _ENGINE_MAP_BYTES else v) for k, v in arrays.items()}
    esa, epred = arrays["sa_traces"], arrays["sa_pred"]
    cands: dict[str, Callable[[], np.ndarray]] = {"sa_traces": lambda: esa, "sa_pred": lambda: epred}
    if order is not None:
        cands["sa_traces[order]"] = lambda: esa[order]
        cands["sa_pred[order]"] = lambda: epred[order]
    groups: dict[str, dict[str, np.ndarray]] = {"lsa": {}, "dsa": {}, "ranges": {}}
    for key, value in arrays.items():
        group, _, sub = key.partition(".")
        if group in groups and sub:
            groups[group][sub] = value
    refs: dict[str, dict[str, Callable[[], np.ndarray]]] = {"lsa": {}, "dsa": {}}
    strings = meta.get("refs", {}).get("strings", {})
    if not isinstance(strings, dict):
        raise Invalid("metadata 'refs.strings' is not an object")
    for name, value in strings.items():
        group, _, sub = name.partition(".")
        if group not in groups or not isinstance(value, str) or len(value) > 100 or not sub:
            raise Invalid(f"string entry {name!r} -> {value!r} is unknown")
        groups[group][sub] = np.array(value)
    for name, ref in meta.get("refs", {}).items():
        if name == "strings":
            continue
        group, _, sub = name.partition(".")
        if not isinstance(ref, dict) or ref.get("ref") not in cands or group not in refs or ref.get("dtype") not in store.DTYPES:
            raise Invalid(f"reference {name!r} -> {ref!r} is unknown")
        make, dtype = cands[ref["ref"]], np.dtype(ref["dtype"])
        refs[group][sub] = lambda make=make, dtype=dtype: make().astype(dtype, copy=False)
    ranges = ranges_cls.from_arrays({**groups["ranges"], "names": np.asarray(meta["range_names"], dtype=np.str_)})
    classifier = meta["classifier"]
    options = ProfileOptions(
        sa_layers=tuple(meta["sa_layers"]),
        coverage_layers=tuple(meta["coverage_layers"]),
        var_threshold=float(meta["var_threshold"]),
        lsa_near_singular=str(meta.get("lsa_near_singular", "drop")),
        classifier=classifier,
        dsa_precompute=bool(meta.get("dsa_precomputed")),
        output=meta.get("output"),
    )
    lsa_arrays = _Arrays(groups["lsa"], refs["lsa"])
    dsa_arrays = _Arrays(groups["dsa"], refs["dsa"]) if (groups["dsa"] or refs["dsa"]) else None
    if dsa_arrays is not None and "other_dist" in groups["dsa"] and groups["dsa"]["other_dist"].shape != (n,):
        raise Invalid("dsa.other_dist has the wrong shape")
    return TrainingProfile(
        fingerprint=meta["fingerprint"],
        options=options,
        model_fingerprint=meta["model_fingerprint"],
        data_fingerprint=meta["data_fingerprint"],
        model_name=meta["model_name"],
        classifier=classifier,
        n_train=n,
        n_outputs=meta["n_outputs"],
        input_shape=tuple(meta["input_shape"]),
        sa_layers=list(meta["sa_layers"]),
        coverage_layers=list(meta["coverage_layers"]),
        sa_sizes=list(meta["sa_sizes"]),
        coverage_sizes=list(meta["coverage_sizes"]),
        sa_traces=sa,
        sa_pred=pred,
        ranges=ranges,
        row_keys=arrays["row_keys"],
        lsa_arrays=lsa_arrays,  # type: ignore[arg-type]
        dsa_arrays=dsa_arrays,  # type: ignore[arg-type]
        created=meta["created"],
        versions={str(k): str(v) for k, v in meta.get("versions", {}).items()},
        data_source=str(meta.get("data_source", "")),
        path=path,
        built=False,
    )


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
    """Remove the profiles of format 1 in ``cache_dir`` (no version reads them), saying so,
    and what killed writers left an hour ago or more."""
    store.sweep(cache_dir)
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
    before = store.note_data(cache_dir, key, profile.data_fingerprint, profile.n_train)
    if before is not None and before["data"] != profile.data_fingerprint and before["n"] == profile.n_train:
        warnings.warn(
            f"pytest-sadl: the training data {profile.data_source} holds other inputs than in the last run "
            f"with the same model (again {profile.n_train} inputs): if sadl_train augments or samples at "
            "random, LSC/DSC change from run to run and each run caches another profile; make it "
            "deterministic (ignore this if you changed the data on purpose)",
            SadlCacheWarning,
            stacklevel=4,
        )


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
) -> TrainingProfile:
    """The training profile of ``model`` on ``train``: loaded when cached, else built.

    ``cache_dir=None`` builds without caching. ``progress(done, total)`` is called per
    batch of the forward pass; ``status(message)`` at each phase. ``rebuild=True``
    ignores a cached profile. Relative paths in ``model``/``train`` resolve against
    ``base_dir`` (the rootdir). Raises :class:`~pytest_sadl.data.SadlConfigError`
    subclasses for bad models, layers, options and data; a cached profile that must not
    be trusted only warns (:class:`SadlCacheWarning`) and is rebuilt; a cache that
    cannot be written warns and the profile is kept in memory.
    """
    options = options or ProfileOptions()
    model, tm, data, mfp, fp = _resolve(model, train, options, base_dir)

    def build() -> TrainingProfile:
        return build_profile(tm, data, options, fingerprint=fp, model_fp=mfp, progress=progress, status=status)

    if cache_dir is None:
        return build()
    cache_dir = Path(cache_dir)
    path = profile_path(cache_dir, fp)

    def ready(p: TrainingProfile) -> bool:
        return not options.dsa_precompute or not p.classifier or p.dsa_arrays is not None

    def make(partial: TrainingProfile | None) -> TrainingProfile:
        if partial is not None:  # same numbers, DSA distances missing: complete the profile
            if status:
                status(f"DSA: nearest other-class distance of {partial.n_train} training traces")
            partial.dsa_arrays = partial.dsa().to_arrays()
            partial.options = replace(partial.options, dsa_precompute=True)
            return partial
        _drop_stale(cache_dir)
        profile = build()
        if status:
            status(f"writing {path}")
        return profile

    def save(p: TrainingProfile, target: Path) -> None:
        save_profile(p, target)
        p.path = target

    profile, _stored = store.cached_build(
        path, load=lambda p, warn: _try_load(p, fp, warn), ready=ready, make=make, save=save, rebuild=rebuild
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
                _check_meta(entry.meta)
                if entry.meta["fingerprint"] != fp:
                    info.ok, info.problem = False, "fingerprint does not match the folder name"
                else:
                    _check_shapes(entry.meta, entry)
            except Invalid as exc:
                info.ok, info.problem = False, f"unusable ({exc})"
        out.append(info)
    out.sort(key=lambda i: i.mtime, reverse=True)
    return out
