"""The training profile: what the criteria need from the training set, cached on disk.

One forward pass of the training set through the model (:class:`~pytest_sadl.traces.TraceModel`)
gives the SA traces of the chosen layers with their predicted classes and the per-neuron
``[low, high]`` of the coverage layers; the DSA set-up (every training trace's distance to
its nearest other-class trace, the expensive part) is computed once too. All of it is
stored in one versioned ``.npz`` file named by a fingerprint, loaded with
``allow_pickle=False`` (a cache file can never run code).

Public API
----------
``ProfileOptions(sa_layers=None, coverage_layers=None, var_threshold=1e-5, batch_size=256,
classifier=None, dsa_precompute=True)``
    What to build. ``None`` layers mean the defaults of :mod:`pytest_sadl.traces`.
``load_or_build(model, train, options=None, cache_dir=None, *, progress=None, status=None,
rebuild=False, base_dir=None) -> TrainingProfile``
    The cached profile when its fingerprint matches, else built (and stored when
    ``cache_dir`` is given). ``model``: a ``keras.Model`` or anything
    :func:`pytest_sadl.modelio.load_model` takes; ``train``: anything
    :func:`pytest_sadl.data.load_training_data` takes.
``TrainingProfile``
    ``.lsa()`` / ``.dsa()`` (engine objects, built once per profile from the cached arrays;
    ``dsa()`` is ``None`` for a regression model), ``.ranges`` (:class:`NeuronRanges` of the
    coverage layers), ``.trace_model(model)``, ``.cached_array(name, compute)`` (a derived
    array stored beside the profile, e.g. training-set scores for default bounds), ``.fingerprint``, ``.model_fingerprint``,
    ``.data_fingerprint``, ``.sa_traces``, ``.sa_pred``, ``.sa_layers``, ``.coverage_layers``,
    ``.classifier``, ``.n_classes``, ``.n_train``, ``.path``, ``.built``...
``model_fingerprint(model) -> str``, ``profile_fingerprint(...) -> str``
    sha256 hex digests (see :func:`profile_fingerprint` for what goes in).
``default_cache_dir(rootdir=None) -> Path``, ``find_rootdir(start=None) -> Path``
    ``<rootdir>/.pytest_cache/d/sadl``: the directory pytest's ``config.cache.mkdir("sadl")``
    gives (honouring ``cache_dir`` in ``[tool.pytest.ini_options]``/``pytest.ini``).
``list_profiles(cache_dir) -> list[ProfileInfo]``
    The profiles stored there, newest first, each with its fingerprint, size, age and
    whether it is readable.

Storage
-------
``<cache_dir>/profile-<fingerprint>.npz``; written to a temporary file in the same
directory, fsync-ed, then renamed over the target (atomic on POSIX), under an exclusive
``fcntl`` lock on ``profile-<fingerprint>.lock`` so that concurrent builders (pytest-xdist
workers, parallel CI jobs) build once and the others load the result. A file that is
truncated, corrupt, of another format version, or whose content does not match its
fingerprint is never trusted: a :class:`SadlCacheWarning` says so and the profile is
rebuilt over it.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from pytest_sadl.data import SadlConfigError, SadlDataError, TrainingData, load_training_data

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "ProfileOptions",
    "TrainingProfile",
    "ProfileInfo",
    "SadlCacheWarning",
    "load_or_build",
    "build_profile",
    "load_profile",
    "model_fingerprint",
    "profile_fingerprint",
    "default_cache_dir",
    "find_rootdir",
    "list_profiles",
    "profile_path",
]

FORMAT = "pytest-sadl/profile"
FORMAT_VERSION = 1
_PREFIX = "profile-"
_SUFFIX = ".npz"

Progress = Callable[[int, "int | None"], None]
Status = Callable[[str], None]


class SadlCacheWarning(UserWarning):
    """A cached profile could not be used (corrupt, truncated, another version); it is rebuilt."""


class _Invalid(Exception):
    """A cache file that must not be trusted; the message says why."""


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


# ----------------------------------------------------------------------------- cache dir


_INI_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")


def _ini_cache_dir(path: Path) -> tuple[bool, str | None]:
    """(is this a pytest config file, its ``cache_dir`` option)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return False, None
    if path.name == "pyproject.toml":
        try:
            import tomllib
        except ImportError:  # pragma: no cover - Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]
        try:
            ini = tomllib.loads(text).get("tool", {}).get("pytest", {}).get("ini_options")
        except Exception:
            return False, None
        if ini is None:
            return False, None
        value = ini.get("cache_dir")
        return True, None if value is None else str(value)
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return path.name in ("pytest.ini", ".pytest.ini"), None
    section = "pytest" if path.name in ("pytest.ini", ".pytest.ini", "tox.ini") else "tool:pytest"
    if not parser.has_section(section):
        return path.name in ("pytest.ini", ".pytest.ini"), None
    return True, parser.get(section, "cache_dir", fallback=None)


def find_rootdir(start: str | os.PathLike[str] | None = None) -> Path:
    """pytest's rootdir for ``start`` (default: the current directory), simplified: the
    first directory upwards holding a pytest configuration (``pytest.ini``,
    ``.pytest.ini``, ``pyproject.toml`` with ``[tool.pytest.ini_options]``, ``tox.ini``
    or ``setup.cfg`` with a pytest section), else ``start`` itself."""
    here = Path(start if start is not None else os.getcwd()).resolve()
    for directory in (here, *here.parents):
        for name in _INI_FILES:
            candidate = directory / name
            if candidate.is_file() and _ini_cache_dir(candidate)[0]:
                return directory
    return here


def default_cache_dir(rootdir: str | os.PathLike[str] | None = None) -> Path:
    """``<rootdir>/.pytest_cache/d/sadl`` (or ``<cache_dir>/d/sadl`` when the rootdir's
    pytest configuration sets ``cache_dir``): what ``config.cache.mkdir("sadl")`` gives.

    The plugin passes ``config.rootpath`` (or uses ``config.cache.mkdir("sadl")``
    directly); the CLI passes nothing, and the rootdir is found from the current
    directory with :func:`find_rootdir`. The directory is not created here.
    """
    root = Path(rootdir).resolve() if rootdir is not None else find_rootdir()
    cache = None
    for name in _INI_FILES:
        candidate = root / name
        if candidate.is_file():
            is_config, value = _ini_cache_dir(candidate)
            if is_config:
                cache = value
                break
    base = root / ".pytest_cache" if cache is None else (root / os.path.expandvars(cache))
    return base / "d" / "sadl"


def profile_path(cache_dir: str | os.PathLike[str], fingerprint: str) -> Path:
    """Where the profile of ``fingerprint`` is stored under ``cache_dir``."""
    return Path(cache_dir) / f"{_PREFIX}{fingerprint}{_SUFFIX}"


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
        """A derived array kept next to the profile file: loaded when it is there, else
        ``compute()``-d and stored atomically (``profile-<fingerprint>.<name>.npy``).

        For values that depend only on the profile and ``name`` (put any parameter in the
        name, e.g. ``"heldout-lsa-seed0"``), such as default bounds computed from the
        training traces. Without a cache file (``path is None``) it just computes. An
        unreadable file is recomputed with a :class:`SadlCacheWarning`.
        """
        if not name or not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
            raise SadlConfigError(f"cached_array name {name!r} must be letters, digits, '-', '_' and '.'")
        if self.path is None:
            return np.asarray(compute())
        side = self.path.with_name(f"{self.path.stem}.{name}.npy")
        if side.exists():
            try:
                return np.load(side, allow_pickle=False)
            except Exception as exc:
                warnings.warn(
                    f"pytest-sadl: cached array {side} cannot be read ({type(exc).__name__}: {exc}); recomputing it",
                    SadlCacheWarning,
                    stacklevel=2,
                )
        value = np.asarray(compute())
        if value.dtype.kind not in "biuf":
            raise SadlConfigError(f"cached_array {name!r}: compute() returned dtype {value.dtype}, not numbers")
        _atomic_write(side, lambda fh: np.save(fh, value, allow_pickle=False), suffix=".npy")
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
    from pytest_sadl.neurons import fit_ranges
    from pytest_sadl.surprise import DSA, LSA

    say = status or (lambda _msg: None)
    total = data.n
    say(f"tracing {'all' if total is None else total} training inputs through {tm.model.name!r}")
    traces = tm.traces(data, batch_size=options.batch_size, progress=progress)
    n = len(traces)
    say(f"fitting neuron ranges and {'LSA and DSA' if tm.classifier else 'LSA (DSA needs a classifier)'}")
    ranges = fit_ranges(traces.coverage, names=tm.coverage_layers)
    n_outputs = int(traces.output.shape[1]) if traces.output.ndim == 2 else 1
    sa_traces, sa_pred = traces.sa, traces.pred
    del traces  # the coverage traces are done with: free them before the engine's set-up
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
    """Flat ``{key: array}`` for ``np.savez`` and the references of deduplicated arrays."""
    arrays: dict[str, np.ndarray] = {
        "sa_traces": np.ascontiguousarray(profile.sa_traces),
        "sa_pred": np.ascontiguousarray(profile.sa_pred),
    }
    for key, value in profile.ranges.to_arrays().items():
        arrays[f"ranges.{key}"] = value
    refs: dict[str, Any] = {}
    cands = _candidates(profile)
    need_order = False
    for group, d in (("lsa", profile.lsa_arrays), ("dsa", profile.dsa_arrays)):
        if d is None:
            continue
        for key, value in d.items():
            value = np.asarray(value)
            name = f"{group}.{key}"
            shape_of = {"sa_traces": profile.sa_traces.shape, "sa_pred": profile.sa_pred.shape}
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


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _atomic_write(path: Path, write: Callable[[Any], None], *, suffix: str = _SUFFIX) -> None:
    """Write ``path`` atomically: ``write(fh)`` into a temporary file of the same
    directory, fsync, rename over ``path``; the temporary file is removed on any error
    (an interrupt included). A killed process leaves at most an ignored ``.tmp-*`` file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.stem}-", suffix=suffix, dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a shared CI cache needs the usual mode
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _atomic_savez(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` as an uncompressed ``.npz`` at ``path`` atomically."""
    _atomic_write(path, lambda fh: np.savez(fh, **arrays))


def save_profile(profile: TrainingProfile, path: str | os.PathLike[str]) -> Path:
    """Store ``profile`` at ``path`` atomically; returns the path."""
    path = Path(path)
    arrays, refs = _to_file_arrays(profile)
    meta = profile.meta()
    meta["refs"] = refs
    meta["keys"] = sorted(arrays)
    arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
    _atomic_savez(path, arrays)
    return path


def _read_meta(npz: Any) -> dict[str, Any]:
    if "meta" not in npz.files:
        raise _Invalid("it has no 'meta' entry")
    raw = npz["meta"]
    if raw.dtype.kind != "U" or raw.ndim != 0:
        raise _Invalid("its 'meta' entry is not a JSON string")
    meta = json.loads(str(raw))
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _Invalid("it is not a pytest-sadl profile")
    return meta


def load_profile(path: str | os.PathLike[str], fingerprint: str | None = None) -> TrainingProfile:
    """Load and validate the profile at ``path``; raise ``_Invalid`` (internal) when it
    must not be trusted (unreadable, truncated, wrong version or fingerprint, inconsistent)."""
    from pytest_sadl.neurons import NeuronRanges

    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            meta = _read_meta(npz)
            if meta.get("version") != FORMAT_VERSION:
                raise _Invalid(f"it has format version {meta.get('version')!r}, this pytest-sadl reads {FORMAT_VERSION}")
            if fingerprint is not None and meta.get("fingerprint") != fingerprint:
                raise _Invalid("its fingerprint does not match its name")
            missing = [k for k in meta.get("keys", []) if k not in npz.files]
            if missing:
                raise _Invalid(f"entries {missing} are missing")
            arrays = {k: npz[k] for k in npz.files if k != "meta"}
    except _Invalid:
        raise
    except Exception as exc:  # BadZipFile, EOFError, OSError, ValueError (pickles), JSON...
        raise _Invalid(f"{type(exc).__name__}: {exc}") from exc
    try:
        return _from_file_arrays(path, meta, arrays, NeuronRanges)
    except _Invalid:
        raise
    except Exception as exc:
        raise _Invalid(f"its content is inconsistent ({type(exc).__name__}: {exc})") from exc


def _from_file_arrays(path: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray], ranges_cls: Any) -> TrainingProfile:
    for key, value in arrays.items():
        if value.dtype.kind not in "biufU":
            raise _Invalid(f"entry {key!r} has dtype {value.dtype}")
    sa, pred = arrays["sa_traces"], arrays["sa_pred"]
    n = int(meta["n_train"])
    if sa.ndim != 2 or sa.shape != (n, int(sum(meta["sa_sizes"]))):
        raise _Invalid(f"sa_traces has shape {sa.shape}, expected ({n}, {sum(meta['sa_sizes'])})")
    if pred.shape[0] != n:
        raise _Invalid(f"sa_pred has {pred.shape[0]} rows, expected {n}")
    if not np.isfinite(sa).all():
        raise _Invalid("sa_traces holds NaN or inf")
    order = arrays.get("order")
    if order is not None and (order.shape != (n,) or order.dtype.kind not in "iu" or order.min() < 0 or order.max() >= n):
        raise _Invalid("order is malformed")
    cands: dict[str, Callable[[], np.ndarray]] = {"sa_traces": lambda: sa, "sa_pred": lambda: pred}
    if order is not None:
        cands["sa_traces[order]"] = lambda: sa[order]
        cands["sa_pred[order]"] = lambda: pred[order]
    groups: dict[str, dict[str, np.ndarray]] = {"lsa": {}, "dsa": {}, "ranges": {}}
    for key, value in arrays.items():
        group, _, sub = key.partition(".")
        if group in groups and sub:
            groups[group][sub] = value
    refs: dict[str, dict[str, Callable[[], np.ndarray]]] = {"lsa": {}, "dsa": {}}
    for name, ref in meta.get("refs", {}).items():
        group, _, sub = name.partition(".")
        if ref.get("ref") not in cands or group not in refs:
            raise _Invalid(f"reference {name!r} -> {ref!r} is unknown")
        make, dtype = cands[ref["ref"]], np.dtype(ref["dtype"])
        refs[group][sub] = lambda make=make, dtype=dtype: make().astype(dtype, copy=False)
    ranges = ranges_cls.from_arrays(groups["ranges"])
    if list(ranges.sizes) != list(meta["coverage_sizes"]):
        raise _Invalid(f"neuron ranges have sizes {list(ranges.sizes)}, expected {meta['coverage_sizes']}")
    classifier = bool(meta["classifier"])
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
        raise _Invalid("dsa.other_dist has the wrong shape")
    return TrainingProfile(
        fingerprint=str(meta["fingerprint"]),
        options=options,
        model_fingerprint=str(meta["model_fingerprint"]),
        data_fingerprint=str(meta["data_fingerprint"]),
        model_name=str(meta["model_name"]),
        classifier=classifier,
        n_train=n,
        n_outputs=int(meta["n_outputs"]),
        input_shape=tuple(meta["input_shape"]),
        sa_layers=list(meta["sa_layers"]),
        coverage_layers=list(meta["coverage_layers"]),
        sa_sizes=[int(s) for s in meta["sa_sizes"]],
        coverage_sizes=[int(s) for s in meta["coverage_sizes"]],
        sa_traces=sa,
        sa_pred=pred,
        ranges=ranges,
        lsa_arrays=lsa_arrays,  # type: ignore[arg-type]
        dsa_arrays=dsa_arrays,  # type: ignore[arg-type]
        created=str(meta["created"]),
        versions=dict(meta.get("versions", {})),
        data_source=str(meta.get("data_source", "")),
        path=path,
        built=False,
    )


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """An exclusive advisory lock (``fcntl.flock``; no lock where fcntl does not exist)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: atomic rename still protects readers
        yield
        return
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _try_load(path: Path, fingerprint: str, *, warn: bool) -> TrainingProfile | None:
    if not path.exists():
        return None
    try:
        return load_profile(path, fingerprint)
    except _Invalid as exc:
        if warn:
            warnings.warn(
                f"pytest-sadl: the cached training profile {path} cannot be used ({exc}); "
                "rebuilding it",
                SadlCacheWarning,
                stacklevel=3,
            )
        return None


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
    ignores a cached file. Relative paths in ``model``/``train`` resolve against
    ``base_dir`` (the rootdir). Raises :class:`~pytest_sadl.data.SadlConfigError`
    subclasses for bad models, layers, options and data; a corrupt cache file only
    warns (:class:`SadlCacheWarning`) and is rebuilt.
    """
    options = options or ProfileOptions()
    model, tm, data, mfp, fp = _resolve(model, train, options, base_dir)

    def build() -> TrainingProfile:
        return build_profile(tm, data, options, fingerprint=fp, model_fp=mfp, progress=progress, status=status)

    if cache_dir is None:
        return build()
    path = profile_path(cache_dir, fp)

    def usable(p: TrainingProfile | None) -> bool:
        return p is not None and (not options.dsa_precompute or not p.classifier or p.dsa_arrays is not None)

    if not rebuild:
        hit = _try_load(path, fp, warn=True)
        if usable(hit):
            return hit  # type: ignore[return-value]
    with _locked(path.with_suffix(".lock")):
        if not rebuild:  # another process may have built it while we waited
            hit = _try_load(path, fp, warn=False)
            if usable(hit):
                return hit  # type: ignore[return-value]
            if hit is not None:  # same numbers, DSA distances missing: complete the file
                if status:
                    status(f"DSA: nearest other-class distance of {hit.n_train} training traces")
                hit.dsa_arrays = hit.dsa().to_arrays()
                hit.options = replace(hit.options, dsa_precompute=True)
                save_profile(hit, path)
                return hit
        profile = build()
        if status:
            status(f"writing {path}")
        save_profile(profile, path)
        profile.path = path
        return profile


# ----------------------------------------------------------------------------- listing


@dataclass
class ProfileInfo:
    """One stored profile, as :func:`list_profiles` reads it (the arrays are not loaded)."""

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


def list_profiles(cache_dir: str | os.PathLike[str]) -> list[ProfileInfo]:
    """The profile files in ``cache_dir``, newest first; unreadable ones have ``ok=False``."""
    directory = Path(cache_dir)
    if not directory.is_dir():
        return []
    out = []
    for path in directory.glob(f"{_PREFIX}*{_SUFFIX}"):
        fp = path.name[len(_PREFIX) : -len(_SUFFIX)]
        st = path.stat()
        info = ProfileInfo(path=path, fingerprint=fp, size=st.st_size, mtime=st.st_mtime, ok=True)
        try:
            with np.load(path, allow_pickle=False) as npz:
                info.meta = _read_meta(npz)
            if info.meta.get("fingerprint") != fp:
                info.ok, info.problem = False, "fingerprint does not match the file name"
            elif info.meta.get("version") != FORMAT_VERSION:
                info.ok, info.problem = False, f"format version {info.meta.get('version')!r}"
        except Exception as exc:
            info.ok, info.problem = False, f"unreadable ({type(exc).__name__}: {exc})"
        out.append(info)
    out.sort(key=lambda i: i.mtime, reverse=True)
    return out
