"""Building the training profile: what the criteria need from the training set, once.

One forward pass of the training set through the model (:class:`~pytest_sadl.capture.TraceModel`)
gives the SA traces of the chosen layers with their predicted classes and the per-neuron
``[low, high]`` of the coverage layers; LSA and DSA are set up on those traces.

Order independence: the same multiset of training inputs gives the same profile. The
data fingerprint is order-free (:mod:`pytest_sadl.fingerprint`), the traces are stored in
the canonical order of the inputs' row digests (so LSA and DSA are set up from the same
arrays in the same order), and ``row_keys`` (the digests' first 8 bytes) choose the
held-out sample of the default SC bounds. A ``tf.data.Dataset`` is read twice (the
fingerprint, then the traces): when the second pass holds other inputs than the first (a
random augmentation), a :class:`SadlCacheWarning` says so.

How a profile is written to and read from the store is :mod:`pytest_sadl.profile.files`;
finding it in the cache, or building and storing it, is :mod:`pytest_sadl.profile.lookup`.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from pytest_sadl.capture.data import (
    TrainingData,
    batch_row_digests,
    load_training_data,
    row_format,
    take_rows,
)
from pytest_sadl.capture.identity import model_fingerprint
from pytest_sadl.errors import SadlCacheWarning, SadlConfigError
from pytest_sadl.store import cycle, locks
from pytest_sadl.store import entry as store
from pytest_sadl.store.entry import FORMAT, FORMAT_VERSION, Invalid

__all__ = [
    "ProfileOptions",
    "TrainingProfile",
    "build_profile",
    "prepare",
    "model_fingerprint",
    "profile_fingerprint",
]

Progress = Callable[[int, "int | None"], None]
Status = Callable[[str], None]

#: The derived array of a stored profile that keeps DSA's lazily computed ``dist_b``.
DSA_DISTANCES = "dsa-dist_b"
#: Below this size a memory-mapped array is handed to the engine as a plain ndarray view
#: (still paged in lazily): the engine then takes the same in-memory path as on a freshly
#: built profile (a k-d tree for low dimensions; the same numbers bit for bit, so a serial
#: run that builds equals an xdist run that loads); above, the map itself, scored in chunks.
ENGINE_MAP_BYTES = 1 << 30


def engine_view(a: np.ndarray) -> np.ndarray:
    """``a`` as the engine should get it: see :data:`ENGINE_MAP_BYTES`."""
    return np.asarray(a) if isinstance(a, np.memmap) and a.nbytes < ENGINE_MAP_BYTES else a


def _check_distances(value: np.ndarray, n: int) -> None:
    """Kept ``dist_b``: one float64 per training trace, each ``NaN`` (not computed) or a
    finite distance >= 0; anything else raises :class:`Invalid`."""
    if value.shape != (n,) or value.dtype != np.float64:
        raise Invalid(f"it is {value.dtype} {value.shape}, expected float64 ({n},)")
    known = value[~np.isnan(value)]
    if known.size and not (np.isfinite(known).all() and (known >= 0).all()):
        raise Invalid("it holds negative or infinite distances")


# ----------------------------------------------------------------------------- options


@dataclass(frozen=True)
class ProfileOptions:
    """What goes into a profile.

    ``sa_layers``/``coverage_layers``: layer names or indices, ``None`` for the defaults
    (the last hidden layer; every layer with neurons). ``var_threshold``: LSA's variance
    filter. ``lsa_near_singular``: LSA's ``near_singular`` (``"drop"`` or ``"keep"``). ``batch_size``: inputs per forward pass (does not change the numbers, so it is
    not in the fingerprint). ``classifier``: ``None`` to detect
    (:func:`pytest_sadl.capture.is_classifier`). ``dsa_precompute``: compute every training
    trace's nearest other-class distance (DSA's ``dist_b``) at build time and store it.
    ``False`` (the default): DSA computes ``dist_b`` only for the training traces that some
    scored input's nearest same-class trace is, and :meth:`TrainingProfile.keep_dsa_distances`
    adds them to the stored profile, so each session computes only what no earlier one did.
    Not in the fingerprint: a later build with ``True`` completes the stored profile.
    ``output``: which output of a multi-output model gives the class (name or index;
    ``None``: the first).
    """

    sa_layers: tuple[str | int, ...] | None = None
    coverage_layers: tuple[str | int, ...] | None = None
    var_threshold: float = 1e-5
    lsa_near_singular: str = "drop"
    batch_size: int = 256
    var_rule: str = "class"
    classifier: bool | None = None
    dsa_precompute: bool = False
    output: str | int | None = None

    @classmethod
    def from_sadl(cls, options: Any, **overrides: Any) -> ProfileOptions:
        """The profile options of a run's :class:`~pytest_sadl.config.SadlOptions` (the
        plugin's and the ``sadl`` commands' one way to make them), ``overrides`` applied."""
        values = {
            "sa_layers": options.sa_layers,
            "coverage_layers": options.coverage_layers,
            "output": options.output,
            "var_threshold": options.var_threshold,
            "lsa_near_singular": options.lsa_near_singular,
            "var_rule": options.var_rule,
            "dsa_precompute": options.dsa_precompute,
            "batch_size": options.batch_size,
        }
        return cls(**{**values, **overrides})

    def __post_init__(self) -> None:
        for name in ("sa_layers", "coverage_layers"):
            object.__setattr__(self, name, _layer_names(getattr(self, name)))
        if not _is_positive_int(self.batch_size):
            raise SadlConfigError(f"batch_size must be an integer >= 1, got {self.batch_size!r}")
        if not _finite_non_negative(self.var_threshold):
            raise SadlConfigError(f"var_threshold must be a finite number >= 0, got {self.var_threshold!r}")
        if self.lsa_near_singular not in ("drop", "keep"):
            raise SadlConfigError(f"lsa_near_singular must be 'drop' or 'keep', got {self.lsa_near_singular!r}")
        if self.var_rule not in ("class", "paper"):
            raise SadlConfigError(f"var_rule must be 'class' or 'paper', got {self.var_rule!r}")


def _check_extra_name(name: str) -> None:
    """A derived array's name is letters, digits, '-', '_' and '.', not hidden."""
    if not name or not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
        raise SadlConfigError(f"cached_array name {name!r} must be letters, digits, '-', '_' and '.'")


def _layer_names(value: Any) -> tuple[Any, ...] | None:
    """Layers as given (one name or index, or several) as a tuple; ``None`` (or none): the default."""
    if isinstance(value, (str, int)):
        value = (value,)
    return None if value is None else tuple(value) or None


def _is_positive_int(value: Any) -> bool:
    """An integer >= 1 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _finite_non_negative(value: Any) -> bool:
    """A finite number >= 0 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return bool(np.isfinite(value)) and value >= 0


# ----------------------------------------------------------------------------- fingerprints


def _versions() -> dict[str, str]:
    import pytest_sadl

    out = {"pytest_sadl": pytest_sadl.__version__, "numpy": np.__version__}
    for name in ("keras", "torch"):
        module = sys.modules.get(name)
        if module is not None:
            out[name] = str(module.__version__)
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
    var_rule: str = "class",
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
        "var_rule": var_rule,
        "classifier": bool(classifier),
        "keras": keras_version,
    }
    if output is not None:
        payload["output"] = output
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


# ----------------------------------------------------------------------------- profile


@dataclass
class TrainingProfile:
    """What the criteria need from the training set; see the module docstring.

    ``lsa_arrays``/``dsa_arrays`` are the engine's ``to_arrays()`` dicts (``dsa_arrays`` is
    ``None`` for a regression model, or when built with ``dsa_precompute=False``: then the
    ``dist_b`` computed so far are a derived array of the stored profile, see :meth:`dsa`).
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
    ranges: Any  # pytest_sadl.criteria.neurons.NeuronRanges
    row_keys: np.ndarray  # (n_train,) uint64: the inputs' row digests, in the traces' order
    lsa_arrays: Mapping[str, np.ndarray]
    dsa_arrays: Mapping[str, np.ndarray] | None
    created: str
    versions: dict[str, str] = field(default_factory=dict)
    data_source: str = ""
    path: Path | None = None
    built: bool = False
    stored_digest: str | None = None  # the metadata digest of the entry at ``path`` when loaded or saved
    _lsa: Any = field(default=None, repr=False, compare=False)
    _dsa: Any = field(default=None, repr=False, compare=False)
    _mdsa: Any = field(default=None, repr=False, compare=False)
    _dsa_known: int = field(default=0, repr=False, compare=False)
    _extras: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)
    #: the output layer as a map of the SA traces (``kernel``, ``bias``: the logits are
    #: ``sa_traces @ kernel + bias``; :mod:`pytest_sadl.capture.logits`), ``None`` where
    #: there is none; ``head_reason`` then says why
    head_arrays: Mapping[str, np.ndarray] | None = None
    head_reason: str = ""

    @property
    def n_classes(self) -> int | None:
        """Number of output classes of a classifier (2 for one sigmoid unit), else ``None``."""
        if not self.classifier:
            return None
        return 2 if self.n_outputs == 1 else self.n_outputs

    def lsa(self) -> Any:
        """The :class:`pytest_sadl.criteria.surprise.LSA` of the training traces (built on first call).

        Per predicted class for a classifier, one KDE for a regression model."""
        if self._lsa is None:
            from pytest_sadl.criteria.surprise import LSA

            self._lsa = LSA.from_arrays(self.lsa_arrays)
        return self._lsa

    def dsa(self) -> Any:
        """The :class:`pytest_sadl.criteria.surprise.DSA` (``None`` for a regression model), from the
        nearest-other-class distances (``dist_b``) the profile holds: every one when it
        was built with ``dsa_precompute=True``, else those earlier sessions computed and
        kept (:meth:`keep_dsa_distances`); the rest are computed when an input needs them."""
        if not self.classifier:
            return None
        if self._dsa is None:
            from pytest_sadl.criteria.surprise import DSA

            if self.dsa_arrays is not None:
                self._dsa = DSA.from_arrays(self.dsa_arrays)
            else:
                x, pred = engine_view(self.sa_traces), engine_view(self.sa_pred)
                self._dsa = DSA(x, pred, dist_b=self._kept_distances())
            self._dsa_known = self._dsa.known
        return self._dsa

    def _kept_distances(self, warn: bool = True) -> np.ndarray | None:
        """The ``dist_b`` earlier sessions kept in the stored profile (``NaN``: not yet
        computed), or ``None``. One that fails its checks is ignored (with a warning when
        ``warn``)."""
        if self.path is None:
            return None
        try:
            value = store.read_extra(self.path, DSA_DISTANCES)
            if value is not None:
                _check_distances(value, self.n_train)
        except Invalid as exc:
            if not warn:
                return None
            warnings.warn(
                f"pytest-sadl: the DSA distances kept in {self.path} cannot be used ({exc}); computing them anew",
                SadlCacheWarning,
                stacklevel=3,
            )
            return None
        return value

    def _may_keep_distances(self) -> bool:
        """Whether this process computed new ``dist_b`` that a stored profile can keep (not
        all stored at build, and few enough to be read back)."""
        dsa = self._dsa
        if dsa is None or self.dsa_arrays is not None or self.path is None:
            return False
        return dsa.known > self._dsa_known and self.n_train * 8 <= store.MAX_EXTRA_BYTES

    def keep_dsa_distances(self) -> int:
        """Add the ``dist_b`` this process computed to the stored profile, so later
        sessions skip them; returns how many training traces the stored array now knows
        (0 when nothing was written: a regression model, every ``dist_b`` stored at build,
        nothing new, no cache folder, or the folder no longer holds the profile this one
        was loaded from — deleted, rebuilt or completed meanwhile).

        Concurrent sessions merge: under the profile's lock the stored array is read again
        and its entries fill this one's gaps (both are the same exact distances). Raises
        ``OSError`` when the folder cannot be written (a read-only cache: the distances are
        then computed again next time, nothing else changes) or when another process holds
        the lock (building or completing this profile: keeping is skipped, not waited for)."""
        dsa, path = self._dsa, self.path
        if dsa is None or path is None or not self._may_keep_distances():
            return 0
        mine = dsa.to_arrays(complete=False)["other_dist"]
        with locks.locked(locks.lock_path(path), wait=False):
            if self.stored_digest is None or store.entry_digest(path) != self.stored_digest:
                return 0
            theirs = self._kept_distances(warn=False)  # a damaged file was reported on load
            if theirs is not None:
                mine = np.where(np.isnan(mine), theirs, mine)
            store.write_extra(path, DSA_DISTANCES, mine)
        self._dsa_known = dsa.known
        return int(np.count_nonzero(~np.isnan(mine)))

    def mdsa(self) -> Any:
        """The :class:`pytest_sadl.criteria.surprise.MDSA` of the training traces (built on first call;
        per predicted class for a classifier). Fitting it is one mean and one covariance per
        class, milliseconds, so it is made from the stored traces rather than stored."""
        if self._mdsa is None:
            from pytest_sadl.criteria.surprise import MDSA

            self._mdsa = MDSA(
                engine_view(self.sa_traces),
                engine_view(self.sa_pred) if self.classifier else None,
                var_threshold=self.options.var_threshold,
                var_rule=self.options.var_rule,
            )
        return self._mdsa

    def logit_head(self) -> tuple[np.ndarray, np.ndarray]:
        """``(kernel, bias)`` of the output layer (the logits of SA traces ``h`` are
        ``h @ kernel + bias``): what energy, MaxLogit and MSP need. Raises ``ValueError``
        with the one-line reason where the model has none (a regression model...)."""
        if self.head_arrays is None:
            raise ValueError(
                self.head_reason
                or "this profile was stored before pytest-sadl kept the output layer's logits; "
                "rebuild it (sadl profile build --rebuild) for energy, MaxLogit and MSP"
            )
        return np.asarray(self.head_arrays["kernel"]), np.asarray(self.head_arrays["bias"])

    def cached_array(self, name: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
        """A derived array kept in the profile's folder: loaded when it is there (and
        matches its digest), else ``compute()``-d and stored atomically.

        For values that depend only on the profile and ``name`` (put any parameter in the
        name, e.g. ``"heldout-lsa-1000"``), such as default bounds computed from the
        training traces. Without a cache folder (``path is None``) it just computes. An
        unreadable file is recomputed with a :class:`SadlCacheWarning`, an unwritable
        folder keeps the value in memory (with one such warning).
        """
        _check_extra_name(name)
        if name in self._extras:
            return self._extras[name]
        hit = self._stored_extra(name)
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
                cycle.uncached_warning(self.path, exc)
        self._extras[name] = value
        return value

    def _stored_extra(self, name: str) -> np.ndarray | None:
        """The derived array ``name`` stored in the profile's folder, ``None`` when there is
        no folder, no such array, or one that cannot be used (with a warning)."""
        if self.path is None:
            return None
        try:
            hit: np.ndarray | None = store.read_extra(self.path, name)
        except Invalid as exc:
            warnings.warn(
                f"pytest-sadl: cached array {name!r} of {self.path} cannot be used ({exc}); recomputing it",
                SadlCacheWarning,
                stacklevel=3,  # cached_array's caller
            )
            return None
        return hit

    def trace_model(self, model: Any) -> Any:
        """A :class:`~pytest_sadl.capture.TraceModel` of ``model`` with this profile's layers,
        whose traces carry each conv layer's per-input extrema (what NC's scaling needs)."""
        from pytest_sadl.capture import trace_model

        return trace_model(
            model,
            self.sa_layers,
            self.coverage_layers,
            classifier=self.classifier,
            output=self.options.output,
            extrema=True,
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
            "var_rule": self.options.var_rule,
            "dsa_precomputed": self.dsa_arrays is not None,
            "created": self.created,
            "versions": self.versions,
            "data_source": self.data_source,
            "output": self.options.output,
            "head_reason": self.head_reason,
        }


def _now() -> str:
    """The build's UTC time to the microsecond: it is in the stored metadata's digest, so
    a profile rebuilt from the same inputs (the same arrays) within one second is still
    told apart from the one a session loaded (``keep_dsa_distances``)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")


def prepare(model: Any, train: Any, options: ProfileOptions, base_dir: Any) -> tuple[Any, Any, TrainingData, str, str]:
    """(model, TraceModel, data, model fingerprint, profile fingerprint)."""
    from pytest_sadl.capture import trace_model
    from pytest_sadl.capture.model import load_model

    model = load_model(model, base_dir=base_dir)
    tm = trace_model(
        model, options.sa_layers, options.coverage_layers, classifier=options.classifier, output=options.output
    )
    data = tm.prepare(load_training_data(train, base_dir=base_dir))
    mfp = model_fingerprint(model)
    fp = profile_fingerprint(
        mfp,
        data.fingerprint(),
        sa_layers=tm.sa_layers,
        coverage_layers=tm.coverage_layers,
        var_threshold=options.var_threshold,
        classifier=tm.classifier,
        lsa_near_singular=options.lsa_near_singular,
        var_rule=options.var_rule,
        keras_version=tm.framework_version,
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
        canonical.batches = (  # type: ignore[method-assign]
            lambda batch_size: (take_rows(x, order[i : i + batch_size]) for i in range(0, len(order), batch_size))
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


def _check_finite_sa(sa: np.ndarray, tm: Any) -> None:
    """The SA layers' traces finite (when no coverage layer is an SA layer, the ranges'
    check has not seen them): NaN there would be stored and refused on every load. The
    ranges' own check, on the SA traces as one layer: its :class:`NonFiniteTraces` names
    the SA layers, the rows and the first."""
    from pytest_sadl.criteria.neurons import RangeFit

    if len(sa):
        fit = RangeFit([sa.shape[1]], [", ".join(tm.sa_layers)])
        fit.update(0, sa, 0)
        fit.result()


def _non_finite(tm: Any, data: TrainingData, exc: Any) -> SadlConfigError:
    """NaN or inf traces of the training data: which layer, how many inputs, the first (by
    its index in the data as given, when the data are arrays) and the fix, in one line."""
    from pytest_sadl.errors import SadlModelError
    from pytest_sadl.fingerprint import canonical_order
    from pytest_sadl.text import terminal

    one = f"input {exc.first} in the profile's order"
    if data.x is not None:  # traced in canonical order: the row the user knows
        one = f"input {int(canonical_order(data.row_digests())[exc.first])}"
    rows = f"all {exc.rows}" if exc.rows == data.n else f"{exc.rows}"
    example = "" if exc.rows == data.n else f"e.g. {one} "
    layer = "a layer" if exc.layer is None else f"layer {terminal(repr(exc.layer))}"
    return SadlModelError(
        f"model {terminal(repr(tm.name))} computes {exc.kind} values at {layer} for {rows} of the "
        f"training inputs ({example}of {terminal(data.source)}), whose values are finite; "
        "the traces must be finite: check the model's weights for NaN/inf (a diverged fit, a bad load)"
    )


def _trace(
    tm: Any,
    data: TrainingData,
    traced: Any,
    options: ProfileOptions,
    progress: Progress | None,
    tracer: Any,
    say: Status,
) -> tuple[Any, Any]:
    """The build's one pass: the traces and the coverage layers' ranges. The user's model
    and data run here: whatever fails is theirs, said in one line."""
    from pytest_sadl.capture.failures import pass_failure
    from pytest_sadl.criteria.neurons import NonFiniteTraces
    from pytest_sadl.fingerprint import canonical_order

    try:
        if tracer is not None:
            order = canonical_order(data.row_digests())
            traces, ranges = tracer(tm, data.x, order, options.batch_size, progress)
        else:  # the coverage layers' ranges folded in the pass (Keras and torch trace models)
            traces, ranges = tm.traces_and_ranges(traced, batch_size=options.batch_size, progress=progress)
        say("fitting neuron ranges")
        _check_finite_sa(traces.sa, tm)
    except (SadlConfigError, MemoryError):
        raise
    except NonFiniteTraces as exc:
        raise _non_finite(tm, data, exc) from None
    except Exception as exc:
        raise pass_failure(tm.name, f"the training data ({data.source})", exc) from None
    return traces, ranges


def _lsa_arrays(sa_traces: np.ndarray, sa_pred: np.ndarray | None, options: ProfileOptions) -> dict[str, np.ndarray]:
    """What the stored LSA is made of: the traces (and a classifier's classes) and its settings."""
    lsa_arrays = {
        "train_ats": sa_traces,
        "var_threshold": np.array(float(options.var_threshold)),
        "near_singular": np.array(options.lsa_near_singular),
        "var_rule": np.array(options.var_rule),
    }
    if sa_pred is not None:
        lsa_arrays["train_pred"] = sa_pred
    return lsa_arrays


def _dsa_arrays(sa_traces: np.ndarray, sa_pred: np.ndarray, say: Status) -> dict[str, np.ndarray] | None:
    """``dsa_precompute``: every training trace's nearest other-class distance, stored with the profile."""
    from pytest_sadl.criteria.surprise import DSA

    try:
        dsa = DSA(sa_traces, sa_pred)
    except ValueError as exc:  # reported by the run as DSA's reason; nothing to precompute
        say(f"DSA cannot be set up, nothing to precompute: {exc}")
        return None
    say(f"DSA: nearest other-class distance of {len(sa_traces)} training traces")
    arrays: dict[str, np.ndarray] = dsa.to_arrays()
    return arrays


def _canonical(
    data: TrainingData, traced: Any, digests: list[np.ndarray], traces: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The SA traces, the predictions and the row keys in canonical order: the same inputs
    in any order give the same arrays in the same order. Array data was traced in that
    order already; a dataset's rows are reordered (after checking its second pass)."""
    from pytest_sadl.fingerprint import canonical_order, row_keys

    if data.x is not None:
        rows = data.row_digests()
        return traces.sa, traces.pred, row_keys(rows[canonical_order(rows)])
    rows = np.concatenate(digests)
    _check_second_pass(data, traced, rows)
    order = canonical_order(rows)
    return traces.sa[order], traces.pred[order], row_keys(rows[order])


def build_profile(
    tm: Any,
    data: TrainingData,
    options: ProfileOptions,
    *,
    fingerprint: str,
    model_fp: str,
    progress: Progress | None = None,
    status: Status | None = None,
    tracer: Any = None,
) -> TrainingProfile:
    """Trace the training data through ``tm`` (a :class:`TraceModel`) and set the criteria up.

    Lower-level than :func:`load_or_build` (no cache); ``fingerprint``/``model_fp`` are
    recorded as given. ``tracer(tm, x, order, batch_size, progress)``, when given, makes the
    traces of array data's rows in canonical ``order`` and their coverage layers' ranges,
    ``(traces, ranges)``, in its place (the Dask build, :mod:`pytest_sadl.profile.distributed`:
    the same batches, so the same traces and ranges)."""

    say = status or (lambda _msg: None)
    total = data.n
    say(f"tracing {'all' if total is None else total} training inputs through {tm.name!r}")
    traced, digests = _digesting(data)
    if tracer is not None and data.x is None:
        raise SadlConfigError(
            f"a Dask build needs the training data as arrays, not a dataset ({data.source}); "
            "return an array or (x, y) from sadl_train, or build without --dask"
        )
    traces, ranges = _trace(tm, data, traced, options, progress, tracer, say)
    n = len(traces)
    n_outputs = int(traces.output.shape[1]) if traces.output.ndim == 2 else 1
    sa_traces, sa_pred, keys = _canonical(data, traced, digests, traces)
    del traces  # the coverage traces are done with: free them before the engine's set-up
    # The surprise measures are set up when a run needs them (ProfileView): one that cannot
    # be set up on these traces (too few classes, too little variance) is then reported as
    # not available while the others are computed, and the profile is cached either way.
    lsa_arrays = _lsa_arrays(sa_traces, sa_pred if tm.classifier else None, options)
    dsa_arrays = _dsa_arrays(sa_traces, sa_pred, say) if tm.classifier and options.dsa_precompute else None
    resolved = replace(
        options,
        sa_layers=tuple(tm.sa_layers),
        coverage_layers=tuple(tm.coverage_layers),
        classifier=tm.classifier,
        output=tm.output_name,
    )
    head_arrays, head_reason = _logit_head(tm)
    profile = TrainingProfile(
        fingerprint=fingerprint,
        options=resolved,
        model_fingerprint=model_fp,
        data_fingerprint=data.fingerprint(),
        model_name=str(tm.name),
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
        lsa_arrays=lsa_arrays,
        dsa_arrays=dsa_arrays,
        created=_now(),
        versions=_versions(),
        data_source=data.source,
        built=True,
        head_arrays=head_arrays,
        head_reason=head_reason,
    )
    return profile


def _logit_head(tm: Any) -> tuple[dict[str, np.ndarray] | None, str]:
    """The output layer's kernel and bias over the SA traces, or the reason there are none."""
    from pytest_sadl.capture.logits import logit_head

    try:
        kernel, bias = logit_head(tm)
    except SadlConfigError as exc:
        return None, str(exc)
    return {"kernel": kernel, "bias": bias}, ""
