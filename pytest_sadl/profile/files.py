"""A training profile on the store: what is written, and what a read must check.

:func:`save_profile` turns a :class:`~pytest_sadl.profile.build.TrainingProfile` into the
flat arrays and metadata of one :mod:`pytest_sadl.store.entry` entry (format 2: a folder of
``.npy`` files and a ``meta.json`` with their sha256s). An engine array that repeats the
training traces (in their order, or sorted by class) is stored once, as a reference.
:func:`load_profile` checks the metadata's fields, the arrays' headers (before any data is
read), the digests and the values (finite traces, ordered ranges, classes in range), then
rebuilds the profile with its traces memory-mapped; anything wrong raises
:class:`~pytest_sadl.store.entry.Invalid` with one line saying what.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pytest_sadl.profile.build import ProfileOptions, TrainingProfile, engine_view
from pytest_sadl.store import entry as store
from pytest_sadl.store.entry import Invalid

__all__ = ["save_profile", "load_profile", "check_meta", "check_shapes"]


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


# ----------------------------------------------------------------------------- storage


def _candidates(profile: TrainingProfile) -> dict[str, Callable[[], np.ndarray]]:
    """Arrays an engine array may duplicate (made on demand), so that it is stored once."""
    out: dict[str, Callable[[], np.ndarray]] = {
        "sa_traces": lambda: profile.sa_traces,
        "sa_pred": lambda: profile.sa_pred,
    }
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
    if not _holds_exactly(a.dtype, b.dtype):
        return False
    step = max(1, (1 << 22) // max(1, int(np.prod(a.shape[1:], dtype=np.int64))))
    return all(np.array_equal(a[i : i + step], b[i : i + step].astype(a.dtype)) for i in range(0, len(a), step))


def _holds_exactly(into: np.dtype[Any], dtype: np.dtype[Any]) -> bool:
    """Whether numbers of ``dtype`` are held exactly by ``into`` (the same, or a safe cast)."""
    return dtype.kind in "biuf" and (into == dtype or np.can_cast(dtype, into, casting="safe"))


def _to_file_arrays(profile: TrainingProfile) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Flat ``{key: array}`` for the store and the references of deduplicated arrays."""
    arrays = _plain_arrays(profile)
    refs: dict[str, Any] = {"strings": {}}
    need_order = False
    cands = _candidates(profile)
    for group, d in (("lsa", profile.lsa_arrays), ("dsa", profile.dsa_arrays)):
        if d is not None:
            need_order |= _score_arrays(profile, cands, (group, d), arrays, refs)
    if need_order:
        arrays["order"] = np.argsort(profile.sa_pred, kind="stable")
    return arrays, refs


def _plain_arrays(profile: TrainingProfile) -> dict[str, np.ndarray]:
    """The traces, classes, row keys, neuron ranges and output layer, as the store keeps them."""
    arrays: dict[str, np.ndarray] = {
        "sa_traces": np.ascontiguousarray(profile.sa_traces),
        "sa_pred": np.ascontiguousarray(profile.sa_pred),
        "row_keys": np.ascontiguousarray(profile.row_keys, dtype=np.uint64),
    }
    for key, value in profile.ranges.to_arrays().items():
        if key != "names":  # strings go into the metadata: the store holds numbers only
            arrays[f"ranges.{key}"] = value
    for key, value in (profile.head_arrays or {}).items():
        arrays[f"head.{key}"] = np.ascontiguousarray(value, dtype=np.float64)
    return arrays


def _score_arrays(
    profile: TrainingProfile,
    cands: dict[str, Callable[[], np.ndarray]],
    score: tuple[str, Mapping[str, Any]],
    arrays: dict[str, np.ndarray],
    refs: dict[str, Any],
) -> bool:
    """A score's arrays (``score``: its group, ``"lsa"`` or ``"dsa"``, and its arrays) into
    ``arrays``, or into ``refs`` as a reference to one of the ``cands`` they repeat
    (strings: ``refs["strings"]``). Returns whether a reference needs the classes' ``order``."""
    group, d = score
    shape_of = {"sa_traces": profile.sa_traces.shape, "sa_pred": profile.sa_pred.shape}
    need_order = False
    for key, value in d.items():
        value = np.asarray(value)
        name = f"{group}.{key}"
        if value.dtype.kind == "U":  # an option such as LSA's near_singular: the store holds numbers only
            refs["strings"][name] = value.tolist()
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
    return need_order


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


def check_meta(meta: dict[str, Any]) -> None:
    """The metadata fields a profile is rebuilt from, with their types and ranges."""
    _check_counts(meta)
    _check_names(meta)
    _check_values(meta)


def _bad(meta: dict[str, Any], key: str, what: str) -> Invalid:
    return Invalid(f"metadata {key!r} is {meta.get(key)!r}, expected {what}")


def _check_counts(meta: dict[str, Any]) -> None:
    """The strings, the counts and the layers' sizes."""
    for key in ("fingerprint", "model_fingerprint", "data_fingerprint", "model_name", "created"):
        if not isinstance(meta.get(key), str):
            raise _bad(meta, key, "a string")
    for key in ("n_train", "n_outputs"):
        if not _is_int(meta.get(key), 1):
            raise _bad(meta, key, "an integer >= 1")
    for key in ("sa_sizes", "coverage_sizes"):
        if not _is_sizes(meta.get(key)):
            raise _bad(meta, key, "a list of integers >= 1")


def _is_sizes(value: Any) -> bool:
    """A non-empty list of integers >= 1."""
    return isinstance(value, list) and bool(value) and all(_is_int(v, 1) for v in value)


def _is_names(value: Any, n: int) -> bool:
    """A list of ``n`` strings."""
    return isinstance(value, list) and len(value) == n and all(isinstance(v, str) for v in value)


def _check_names(meta: dict[str, Any]) -> None:
    """One name per layer size."""
    for key, size_key in (
        ("sa_layers", "sa_sizes"),
        ("coverage_layers", "coverage_sizes"),
        ("range_names", "coverage_sizes"),
    ):
        if not _is_names(meta.get(key), len(meta[size_key])):
            raise _bad(meta, key, f"a list of {len(meta[size_key])} names")


def _check_values(meta: dict[str, Any]) -> None:
    """The classifier flag, the variance threshold, the input shape and the objects."""
    if not isinstance(meta.get("classifier"), bool):
        raise _bad(meta, "classifier", "true or false")
    if not _is_threshold(meta.get("var_threshold")):
        raise _bad(meta, "var_threshold", "a finite number >= 0")
    if not _is_shape(meta.get("input_shape")):
        raise _bad(meta, "input_shape", "a list of sizes")
    if not isinstance(meta.get("refs", {}), dict) or not isinstance(meta.get("versions", {}), dict):
        raise Invalid("metadata 'refs' or 'versions' is not an object")


def _is_shape(value: Any) -> bool:
    """A list of sizes, ``None`` where a size is free (the batch's)."""
    return isinstance(value, list) and all(v is None or _is_int(v) for v in value)


def _is_threshold(value: Any) -> bool:
    """A finite number >= 0 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return bool(np.isfinite(value)) and value >= 0


def check_shapes(meta: dict[str, Any], entry: store.Entry) -> None:
    """What the arrays' headers must say, checked before any data is read."""
    shapes = entry.shapes()
    want = _wanted_shapes(meta, shapes)
    for key, (shape, kind) in want.items():
        if key not in shapes:
            raise Invalid(f"array {key!r} is missing")
        if shapes[key] != shape or entry.arrays[key].dtype.kind not in kind:
            raise Invalid(f"{key} is {entry.arrays[key].dtype} {shapes[key]}, expected shape {shape}")
    _check_no_stray_arrays(shapes, want, meta["n_train"])


def _wanted_shapes(meta: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[tuple[Any, ...], str]]:
    """Each array a profile of ``meta`` must hold: its shape and the dtype kinds it may have
    (``order`` and the output layer's ``head.*`` when the entry holds them)."""
    n, d = meta["n_train"], sum(meta["sa_sizes"])
    n_cov, n_layers = sum(meta["coverage_sizes"]), len(meta["coverage_sizes"])
    pred_shape = shapes.get("sa_pred", ())
    want: dict[str, tuple[tuple[Any, ...], str]] = {
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
    if "ranges.std" in shapes:  # the per-neuron training std (absent: stored before it was kept)
        want["ranges.std"] = ((n_cov,), "f")
    if "head.kernel" in shapes or "head.bias" in shapes:  # the output layer over the SA traces
        want["head.kernel"] = ((d, meta["n_outputs"]), "f")
        want["head.bias"] = ((meta["n_outputs"],), "f")
    return want


def _check_no_stray_arrays(shapes: dict[str, tuple[int, ...]], want: dict[str, Any], n: int) -> None:
    """Beside the wanted arrays, only the LSA's and DSA's, none longer than the ``n`` inputs."""
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
    line saying why) when it must not be trusted: see :mod:`pytest_sadl.store.entry` for the
    order of the checks. The traces stay memory-mapped."""
    from pytest_sadl.criteria.neurons import NeuronRanges

    path = Path(path)
    entry = store.open_entry(path)
    meta = entry.meta
    check_meta(meta)
    if fingerprint is not None and meta["fingerprint"] != fingerprint:
        raise Invalid("its fingerprint does not match its name")
    check_shapes(meta, entry)
    entry.verify()
    a = entry.arrays
    _check_content(meta, a)
    try:
        profile = _from_entry(path, meta, a, NeuronRanges)
    except Invalid:
        raise
    except Exception as exc:
        raise Invalid(f"its content is inconsistent ({type(exc).__name__}: {exc})") from exc
    profile.stored_digest = entry.digest
    return profile


def _check_content(meta: dict[str, Any], a: dict[str, np.ndarray]) -> None:
    """The values a verified entry's arrays must hold: finite traces, sound ranges, classes
    and order in range, the LSA's threshold the metadata's."""
    if not _all_finite(a["sa_traces"]):
        raise Invalid("sa_traces holds NaN or inf")
    if not _sound_ranges(np.asarray(a["ranges.low"]), np.asarray(a["ranges.high"])):
        raise Invalid("the neuron ranges hold NaN, inf or low > high")
    std = a.get("ranges.std")
    if std is not None and not _sound_std(np.asarray(std)):
        raise Invalid("the neuron ranges' standard deviations hold NaN, inf or negative values")
    if list(np.asarray(a["ranges.sizes"])) != meta["coverage_sizes"]:
        raise Invalid(f"the neuron ranges have sizes {list(a['ranges.sizes'])}, expected {meta['coverage_sizes']}")
    _check_indices(meta, a)


def _sound_ranges(low: np.ndarray, high: np.ndarray) -> bool:
    """Finite bounds with ``low <= high``."""
    return bool(np.isfinite(low).all() and np.isfinite(high).all() and (low <= high).all())


def _sound_std(std: np.ndarray) -> bool:
    """Finite standard deviations, none negative."""
    return bool(np.isfinite(std).all() and (std >= 0).all())


def _check_indices(meta: dict[str, Any], a: dict[str, np.ndarray]) -> None:
    """Classes and order in range, and the LSA's threshold the metadata's."""
    n_classes = 2 if meta["n_outputs"] == 1 else meta["n_outputs"]
    if meta["classifier"] and not _within(a["sa_pred"], n_classes):
        raise Invalid(f"sa_pred holds classes outside [0, {n_classes})")
    order = a.get("order")
    if order is not None and not _within(order, meta["n_train"]):
        raise Invalid("order is malformed")
    if "lsa.var_threshold" in a and float(a["lsa.var_threshold"]) != float(meta["var_threshold"]):
        raise Invalid("the LSA's var_threshold differs from the metadata's")


def _within(indices: np.ndarray, stop: int) -> bool:
    """Every index in ``[0, stop)`` (an empty array is)."""
    return not len(indices) or (int(indices.min()) >= 0 and int(indices.max()) < stop)


def _head(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """The output layer's kernel and bias (``head.*``), ``None`` when the profile has none."""
    return arrays or None


def _from_entry(path: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray], ranges_cls: Any) -> TrainingProfile:
    sa, pred, n = arrays["sa_traces"], arrays["sa_pred"], meta["n_train"]
    order = arrays.get("order")
    arrays = {k: engine_view(v) for k, v in arrays.items()}  # what the engine gets: see engine_view
    groups = _groups(arrays, meta)
    refs = _references(meta, _ref_sources(arrays, order))
    ranges = ranges_cls.from_arrays({**groups["ranges"], "names": np.asarray(meta["range_names"], dtype=np.str_)})
    classifier = meta["classifier"]
    options = _options(meta)
    lsa_arrays = _Arrays(groups["lsa"], refs["lsa"])
    dsa_arrays = _dsa_arrays(groups["dsa"], refs["dsa"], n)
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
        lsa_arrays=lsa_arrays,
        dsa_arrays=dsa_arrays,
        created=meta["created"],
        versions={str(k): str(v) for k, v in meta.get("versions", {}).items()},
        data_source=str(meta.get("data_source", "")),
        path=path,
        built=False,
        head_arrays=_head(groups["head"]),
        head_reason=str(meta.get("head_reason", "")),
    )


def _dsa_arrays(stored: dict[str, np.ndarray], refs: dict[str, Callable[[], np.ndarray]], n: int) -> _Arrays | None:
    """The DSA's arrays (stored and referenced), None when the profile keeps none."""
    if not (stored or refs):
        return None
    if "other_dist" in stored and stored["other_dist"].shape != (n,):
        raise Invalid("dsa.other_dist has the wrong shape")
    return _Arrays(stored, refs)


def _options(meta: dict[str, Any]) -> ProfileOptions:
    """The profile's options as its metadata holds them."""
    return ProfileOptions(
        sa_layers=tuple(meta["sa_layers"]),
        coverage_layers=tuple(meta["coverage_layers"]),
        var_threshold=float(meta["var_threshold"]),
        lsa_near_singular=str(meta.get("lsa_near_singular", "drop")),
        var_rule=str(meta.get("var_rule", "paper")),  # a profile stored before the rule existed used the paper's
        classifier=meta["classifier"],
        dsa_precompute=bool(meta.get("dsa_precomputed")),
        output=meta.get("output"),
    )


def _ref_sources(arrays: dict[str, np.ndarray], order: np.ndarray | None) -> dict[str, Callable[[], np.ndarray]]:
    """The arrays a reference may name: the traces and classes, and (with an ``order``) both reordered."""
    esa, epred = arrays["sa_traces"], arrays["sa_pred"]
    cands: dict[str, Callable[[], np.ndarray]] = {"sa_traces": lambda: esa, "sa_pred": lambda: epred}
    if order is not None:
        cands["sa_traces[order]"] = lambda: esa[order]
        cands["sa_pred[order]"] = lambda: epred[order]
    return cands


def _groups(arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    """The stored arrays (and the metadata's strings) of the LSA, the DSA, the ranges and the output layer (head), by name."""
    groups: dict[str, dict[str, np.ndarray]] = {"lsa": {}, "dsa": {}, "ranges": {}, "head": {}}
    for key, value in arrays.items():
        group, _, sub = key.partition(".")
        if group in groups and sub:
            groups[group][sub] = value
    _add_strings(groups, meta)
    return groups


def _add_strings(groups: dict[str, dict[str, np.ndarray]], meta: dict[str, Any]) -> None:
    """The metadata's strings (options such as LSA's near_singular) into their groups."""
    strings = meta.get("refs", {}).get("strings", {})
    if not isinstance(strings, dict):
        raise Invalid("metadata 'refs.strings' is not an object")
    for name, value in strings.items():
        group, _, sub = name.partition(".")
        if group not in groups or not isinstance(value, str) or len(value) > 100 or not sub:
            raise Invalid(f"string entry {name!r} -> {value!r} is unknown")
        groups[group][sub] = np.array(value)


def _references(
    meta: dict[str, Any], cands: dict[str, Callable[[], np.ndarray]]
) -> dict[str, dict[str, Callable[[], np.ndarray]]]:
    """The LSA's and DSA's arrays stored as references to the traces: each made when first read."""
    refs: dict[str, dict[str, Callable[[], np.ndarray]]] = {"lsa": {}, "dsa": {}}
    for name, ref in meta.get("refs", {}).items():
        if name == "strings":
            continue
        group, _, sub = name.partition(".")
        if group not in refs or not _is_reference(ref, cands):
            raise Invalid(f"reference {name!r} -> {ref!r} is unknown")
        refs[group][sub] = _cast_ref(cands[ref["ref"]], np.dtype(ref["dtype"]))
    return refs


def _is_reference(ref: Any, cands: dict[str, Callable[[], np.ndarray]]) -> bool:
    """``{"ref": one of cands, "dtype": a dtype the store holds}``."""
    return isinstance(ref, dict) and ref.get("ref") in cands and ref.get("dtype") in store.DTYPES


def _cast_ref(make: Callable[[], np.ndarray], dtype: np.dtype[Any]) -> Callable[[], np.ndarray]:
    """``make`` whose array is cast to ``dtype``: called lazily, when first read."""

    def cast_ref() -> np.ndarray:
        return make().astype(dtype, copy=False)

    return cast_ref
