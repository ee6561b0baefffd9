"""The training profile: contents equal to the engine on manual traces, fingerprint
invalidation, corrupt and interrupted files, concurrent builders, the cache directory."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_sadl.errors import (
    SadlCacheWarning,
    SadlDataError,
    SadlLayerError,
    SadlModelError,
)
from pytest_sadl.profile.build import ProfileOptions, model_fingerprint
from pytest_sadl.profile.files import load_profile, save_profile
from pytest_sadl.profile.lookup import list_profiles, load_or_build, profile_path
from pytest_sadl.store.entry import FORMAT_VERSION, Invalid
from pytest_sadl.store.location import default_cache_dir

try:
    from tests import _models, naive
except ImportError:  # pragma: no cover
    import _models  # type: ignore[no-redef]
    import naive  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def _no_cache_warning() -> Iterator[None]:
    """Turn SadlCacheWarning into an error inside the block."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", SadlCacheWarning)
        yield


@pytest.fixture(scope="module")
def train_npz(tmp_path_factory: pytest.TempPathFactory, digits: Any) -> Path:
    path = tmp_path_factory.mktemp("train") / "train.npz"
    np.savez(path, x=digits.x_train, y=digits.y_train)
    return path


# ----------------------------------------------------------------------------- contents


@pytest.mark.tf
def test_profile_matches_engine_on_manual_traces(conv_model: Any, digits: Any, tmp_path: Path) -> None:
    from pytest_sadl.capture import TraceModel
    from pytest_sadl.criteria.neurons import fit_ranges
    from pytest_sadl.criteria.surprise import DSA, LSA

    prof = load_or_build(conv_model, digits.x_train, ProfileOptions(batch_size=100, dsa_precompute=True), tmp_path)
    assert prof.built and prof.path == profile_path(tmp_path, prof.fingerprint) and prof.path.is_dir()
    from pytest_sadl.fingerprint import canonical_order, row_digests

    t = TraceModel(conv_model).traces(digits.x_train)
    order = canonical_order(row_digests(digits.x_train))  # the profile keeps the inputs' canonical order
    np.testing.assert_allclose(prof.sa_traces, t.sa[order], atol=1e-5)
    np.testing.assert_array_equal(prof.sa_pred, t.pred[order])
    ref_ranges = fit_ranges(t.coverage)
    for lo, hi, rlo, rhi in zip(prof.ranges.low, prof.ranges.high, ref_ranges.low, ref_ranges.high, strict=True):
        np.testing.assert_allclose(lo, rlo, atol=1e-5)
        np.testing.assert_allclose(hi, rhi, atol=1e-5)
    assert prof.sa_layers == ["hidden"] and prof.coverage_layers == ["conv1", "pool1", "conv2", "hidden", "probs"]
    assert prof.classifier and prof.n_classes == 10 and prof.n_train == len(digits.x_train)
    assert prof.ranges.names == tuple(prof.coverage_layers)

    test = TraceModel(conv_model).traces(digits.x_test)
    # the references set up on the profile's own traces (checked against a TraceModel's to
    # 1e-5 above): traced again in other batches, float32 traces may differ in their last
    # bits on CPUs whose kernels block by shape, and a narrow KDE amplifies that
    ref_lsa = LSA(prof.sa_traces, prof.sa_pred)(test.sa, test.pred)
    ref_dsa = DSA(prof.sa_traces, prof.sa_pred)(test.sa, test.pred)
    with _no_cache_warning():
        hit = load_or_build(conv_model, digits.x_train, ProfileOptions(batch_size=100, dsa_precompute=True), tmp_path)
    assert not hit.built and hit.fingerprint == prof.fingerprint
    assert hit.dsa_arrays is not None and np.isfinite(hit.dsa_arrays["other_dist"]).all()
    for p in (prof, hit):
        np.testing.assert_allclose(p.lsa()(test.sa, test.pred), ref_lsa, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(p.dsa()(test.sa, test.pred), ref_dsa, rtol=1e-4, atol=1e-6)
    assert hit.lsa() is hit.lsa() and hit.dsa() is hit.dsa()
    tm = hit.trace_model(conv_model)
    assert tm.sa_layers == hit.sa_layers and tm.coverage_layers == hit.coverage_layers


@pytest.mark.tf
def test_regression_profile(regression_model: Any, digits: Any, tmp_path: Path) -> None:
    said: list[str] = []
    prof = load_or_build(regression_model, digits.x_train, None, tmp_path, status=said.append)
    assert not prof.classifier and prof.dsa() is None and prof.dsa_arrays is None and prof.n_classes is None
    assert "fitting neuron ranges" in said and not any("DSA" in m for m in said)
    with _no_cache_warning():
        hit = load_or_build(regression_model, digits.x_train, None, tmp_path)
    assert not hit.built
    scores = hit.lsa()(prof.sa_traces[:20])
    assert scores.shape == (20,) and np.isfinite(scores).all()
    mdsa = hit.mdsa()(prof.sa_traces[:20])  # one mean and covariance over all traces
    assert mdsa.shape == (20,) and np.isfinite(mdsa).all() and hit.mdsa() is hit.mdsa()


@pytest.mark.tf
def test_folder_holds_numbers_only_and_dedupes_traces(conv_model: Any, digits: Any, tmp_path: Path) -> None:
    prof = load_or_build(conv_model, digits.x_train, ProfileOptions(dsa_precompute=True), tmp_path)
    doc = json.loads((prof.path / "meta.json").read_text())
    meta = doc["meta"]
    assert doc["version"] == FORMAT_VERSION and meta["fingerprint"] == prof.fingerprint
    for name, rec in doc["arrays"].items():
        a = np.load(prof.path / f"{name}.npy", allow_pickle=False, mmap_mode="r")
        assert a.dtype.kind in "biuf" and a.dtype.str == rec["dtype"] and list(a.shape) == rec["shape"]
    # the engine's copies of the training traces are stored as references, once
    assert "lsa.train_ats" in meta["refs"] and "dsa.train_ats" in meta["refs"]
    assert "lsa.train_ats" not in doc["arrays"]
    hit = load_profile(prof.path, prof.fingerprint)
    assert isinstance(hit.sa_traces, np.memmap), "a warm run maps the traces, it does not read them whole"


@pytest.mark.tf
def test_lazy_dsa_then_completed(conv_model: Any, digits: Any, tmp_path: Path) -> None:
    from pytest_sadl.criteria.surprise import DSA

    lazy = load_or_build(conv_model, digits.x_train, ProfileOptions(), tmp_path)
    assert lazy.dsa_arrays is None and lazy.dsa().known == 0, "the default build computes no dist_b"
    q = digits.x_test[:40]
    t = lazy.trace_model(conv_model).traces(q)
    lazy_values = lazy.dsa()(t.sa, t.pred)
    assert lazy.keep_dsa_distances() > 0
    lazy.cached_array("heldout-x", lambda: np.arange(3.0))
    full = load_or_build(conv_model, digits.x_train, ProfileOptions(dsa_precompute=True), tmp_path)
    assert full.fingerprint == lazy.fingerprint and not full.built and full.dsa_arrays is not None
    # against a precompute that never saw the kept distances (completing starts from them)
    reference = DSA(np.asarray(lazy.sa_traces), lazy.sa_pred).precompute()
    np.testing.assert_array_equal(np.asarray(full.dsa_arrays["other_dist"]), reference.to_arrays()["other_dist"])
    np.testing.assert_array_equal(lazy_values, reference(t.sa, t.pred))
    np.testing.assert_array_equal(full.dsa()(t.sa, t.pred), lazy_values)
    # the rewrite keeps the other derived arrays, drops the now redundant kept distances
    names = sorted(p.name.split(".")[1] for p in full.path.glob("extra.*"))
    assert names == ["heldout-x"]
    again = load_or_build(conv_model, digits.x_train, ProfileOptions(), tmp_path)
    assert not again.built and again.dsa_arrays is not None
    assert len(list_profiles(tmp_path)) == 1


@pytest.mark.tf
def test_lazy_dist_b_is_kept_for_the_next_session(conv_model: Any, digits: Any, tmp_path: Path) -> None:
    """Each session computes dist_b only for the training traces its inputs land next to,
    and keeps them: the next session (another process, modelled by a fresh load) starts
    with them known, computes only the new ones, and the values equal a full precompute's."""
    from pytest_sadl.criteria.surprise import DSA

    first = load_or_build(conv_model, digits.x_train, ProfileOptions(), tmp_path)
    tm = first.trace_model(conv_model)
    a, b = tm.traces(digits.x_test[:30]), tm.traces(digits.x_test[30:90])
    got_a = first.dsa()(a.sa, a.pred)
    known_a = first.dsa().known
    # exactly the x_a of the inputs, found by the paper's loop, and nothing else
    x_a = naive.x_a_rows(np.asarray(first.sa_traces, dtype=np.float64), first.sa_pred, a.sa, a.pred)
    kept_rows = np.flatnonzero(~np.isnan(first.dsa().to_arrays(complete=False)["other_dist"]))
    np.testing.assert_array_equal(kept_rows, np.unique(x_a))
    assert known_a == len(np.unique(x_a))
    assert first.keep_dsa_distances() == known_a
    assert first.keep_dsa_distances() == 0, "nothing new: nothing written"
    with _no_cache_warning():
        second = load_or_build(conv_model, digits.x_train, ProfileOptions(), tmp_path)
    assert not second.built and second.dsa().known == known_a
    got_b = second.dsa()(b.sa, b.pred)
    assert second.dsa().known > known_a
    second.keep_dsa_distances()
    reference = DSA(second.sa_traces, second.sa_pred).precompute()
    np.testing.assert_array_equal(got_a, reference(a.sa, a.pred))
    np.testing.assert_array_equal(got_b, reference(b.sa, b.pred))
    third = load_or_build(conv_model, digits.x_train, ProfileOptions(), tmp_path)
    assert third.dsa().known == second.dsa().known
    np.testing.assert_array_equal(third.dsa()(a.sa, a.pred), got_a)


@pytest.mark.tf
def test_kept_dist_b_merge_across_concurrent_sessions(conv_model: Any, digits: Any, tmp_path: Path) -> None:
    """Two sessions opened the same profile and scored different inputs: whichever
    writes last, the stored distances are the union of both."""
    base = load_or_build(conv_model, digits.x_train, ProfileOptions(), tmp_path)
    tm = base.trace_model(conv_model)
    one = load_or_build(conv_model, digits.x_train, ProfileOptions(), tmp_path)
    two = load_or_build(conv_model, digits.x_train, ProfileOptions(), tmp_path)
    a, b = tm.traces(digits.x_test[:25]), tm.traces(digits.x_test[25:50])
    one.dsa()(a.sa, a.pred)
    two.dsa()(b.sa, b.pred)
    one.keep_dsa_distances()
    total = two.keep_dsa_distances()
    mine, theirs = (p.dsa().to_arrays(complete=False)["other_dist"] for p in (one, two))
    union = np.where(np.isnan(theirs), mine, theirs)
    assert np.isnan(mine).sum() > np.isnan(union).sum() < np.isnan(theirs).sum(), "each session added its own"
    assert total == int((~np.isnan(union)).sum())
    fresh = load_or_build(conv_model, digits.x_train, ProfileOptions(), tmp_path)
    np.testing.assert_array_equal(fresh.dsa().to_arrays(complete=False)["other_dist"], union)


@pytest.mark.tf
@pytest.mark.parametrize("change", ["deleted", "rebuilt"])
def test_kept_dist_b_go_only_into_the_profile_they_were_computed_for(
    conv_model: Any, digits: Any, tmp_path: Path, change: str
) -> None:
    """A folder deleted or rebuilt since this session loaded it gets nothing: no folder
    is recreated holding only distances, no other profile gets distances not its own."""
    prof = load_or_build(conv_model, digits.x_train, ProfileOptions(), tmp_path)
    t = prof.trace_model(conv_model).traces(digits.x_test[:20])
    prof.dsa()(t.sa, t.pred)
    if change == "deleted":
        shutil.rmtree(prof.path)
    else:
        load_or_build(conv_model, digits.x_train, ProfileOptions(), tmp_path, rebuild=True)
    assert prof.keep_dsa_distances() == 0
    if change == "deleted":
        assert not prof.path.exists()
    else:
        assert not list(prof.path.glob("extra.dsa-dist_b.*"))


@pytest.mark.tf
def test_keeping_dist_b_does_not_wait_for_a_busy_profile(conv_model: Any, digits: Any, tmp_path: Path) -> None:
    """While another process holds the profile's lock (building or completing it), the end
    of a session skips keeping instead of waiting for minutes."""
    from pytest_sadl.store import locks

    prof = load_or_build(conv_model, digits.x_train, ProfileOptions(), tmp_path)
    t = prof.trace_model(conv_model).traces(digits.x_test[:20])
    prof.dsa()(t.sa, t.pred)
    lock = prof.path.with_name(prof.path.name + ".lock")
    ready, release = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child holds the lock until told
        with locks.locked(lock):
            os.write(ready[1], b"x")
            os.read(release[0], 1)
        os._exit(0)
    try:
        os.read(ready[0], 1)
        with pytest.raises(BlockingIOError):
            prof.keep_dsa_distances()
    finally:
        os.write(release[1], b"x")
        os.waitpid(pid, 0)
    assert prof.keep_dsa_distances() > 0


@pytest.mark.tf
@pytest.mark.parametrize("damage", ["negative", "shape", "bytes"])
def test_damaged_kept_dist_b_is_recomputed(conv_model: Any, digits: Any, tmp_path: Path, damage: str) -> None:
    from pytest_sadl.profile.build import DSA_DISTANCES
    from pytest_sadl.store import entry as store

    prof = load_or_build(conv_model, digits.x_train, ProfileOptions(), tmp_path)
    t = prof.trace_model(conv_model).traces(digits.x_test[:20])
    want = prof.dsa()(t.sa, t.pred)
    prof.keep_dsa_distances()
    (file,) = prof.path.glob(f"extra.{DSA_DISTANCES}.*.npy")
    kept = np.load(file)
    if damage == "negative":
        kept[np.flatnonzero(~np.isnan(kept))[0]] = -1.0
        file.unlink()
        store.write_extra(prof.path, DSA_DISTANCES, kept)
    elif damage == "shape":
        file.unlink()
        store.write_extra(prof.path, DSA_DISTANCES, kept[:-1])
    else:
        raw = bytearray(file.read_bytes())
        raw[-3] ^= 0xFF
        file.write_bytes(bytes(raw))
    again = load_or_build(conv_model, digits.x_train, ProfileOptions(), tmp_path)
    with pytest.warns(SadlCacheWarning, match="DSA distances kept in .* cannot be used"):
        dsa = again.dsa()
    assert dsa.known == 0
    np.testing.assert_array_equal(dsa(t.sa, t.pred), want)
    assert again.keep_dsa_distances() > 0  # and the good ones replace the damaged file
    with _no_cache_warning():
        assert load_or_build(conv_model, digits.x_train, ProfileOptions(), tmp_path).dsa().known == dsa.known


# ----------------------------------------------------------------------------- fingerprint


@pytest.mark.tf
def test_model_fingerprint(dense_model_path: Path) -> None:
    a, b = _models.load_model(dense_model_path), _models.load_model(dense_model_path)
    fa = model_fingerprint(a)
    assert len(fa) == 64 and fa == model_fingerprint(b)
    w = b.get_layer("hidden2").kernel
    value = w.numpy()
    value[3, 2] += 1e-4
    w.assign(value)
    assert model_fingerprint(b) != fa
    value[3, 2] -= 1e-4
    w.assign(value)
    assert model_fingerprint(b) == fa


@pytest.mark.tf
def test_profile_fingerprint_changes_with_weight_input_or_option(
    dense_model_path: Path, digits: Any, tmp_path: Path
) -> None:
    model = _models.load_model(dense_model_path)
    x = digits.x_train.copy()
    base = load_or_build(model, x, None, tmp_path)
    seen = {base.fingerprint}

    # changing nothing: a hit, and options that do not change the numbers are a hit too
    for same in (
        load_or_build(_models.load_model(dense_model_path), x.copy(), None, tmp_path),
        load_or_build(model, x, ProfileOptions(batch_size=7), tmp_path),
        load_or_build(model, x, ProfileOptions(sa_layers=("hidden2",), coverage_layers=(1, 2, 3)), tmp_path),
    ):
        assert same.fingerprint == base.fingerprint and not same.built

    changed_input = x.copy()
    changed_input[5, 4, 4, 0] += 0.01
    # the same model and size with other inputs, then back: the data history warns each time
    with pytest.warns(SadlCacheWarning) as changed:
        fps = [
            load_or_build(model, changed_input, None, tmp_path).fingerprint,
            load_or_build(model, x, ProfileOptions(var_threshold=1e-4), tmp_path).fingerprint,
        ]
    assert [str(w.message).split(" (again")[0] for w in changed] == [
        "pytest-sadl: the training data holds other inputs than in the last run with the same model"
    ] * 2
    fps += [
        load_or_build(model, x, ProfileOptions(sa_layers=("hidden1",)), tmp_path).fingerprint,
        load_or_build(model, x, ProfileOptions(coverage_layers=("hidden1",)), tmp_path).fingerprint,
        load_or_build(model, x, ProfileOptions(classifier=False), tmp_path).fingerprint,
    ]
    w = model.get_layer("probs").bias
    w.assign(w.numpy() + np.eye(1, 10, 4, dtype=np.float32)[0] * 1e-3)
    changed_weight = load_or_build(model, x, None, tmp_path)
    assert changed_weight.built
    fps.append(changed_weight.fingerprint)
    assert len(set(fps) | seen) == len(fps) + 1, "every change gives its own fingerprint"
    assert len(list_profiles(tmp_path)) == len(fps) + 1


# ----------------------------------------------------------------------------- robustness


def _arrays_of(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A stored profile's metadata and arrays, read into memory."""
    from pytest_sadl.store import entry as store

    entry = store.open_entry(path)
    return dict(entry.meta), {k: np.array(v) for k, v in entry.arrays.items()}


def _craft(path: Path, meta: dict[str, Any] | None = None, **arrays: np.ndarray) -> None:
    """Rewrite the profile at ``path`` with changed metadata or arrays and *valid* digests:
    what a crafted profile looks like (the digest then proves nothing, the checks must)."""
    from pytest_sadl.store import entry as store

    old_meta, old_arrays = _arrays_of(path)
    store.write_entry(path, {**old_meta, **(meta or {})}, {**old_arrays, **arrays})


def _set_array_raw(path: Path, name: str, value: np.ndarray) -> None:
    """Replace one .npy in place with a valid .npy of ``value``, leaving the digests alone."""
    with open(path / f"{name}.npy", "wb") as fh:
        np.save(fh, value)


def _damage_garbage(path: Path, other: Path, meta_file: Path, traces: Path) -> None:
    meta_file.write_bytes(b"\x00" * 1000)


def _damage_truncated(path: Path, other: Path, meta_file: Path, traces: Path) -> None:
    """What a non-atomic, interrupted write would leave."""
    raw = traces.read_bytes()
    traces.write_bytes(raw[: len(raw) // 2])


def _damage_empty(path: Path, other: Path, meta_file: Path, traces: Path) -> None:
    meta_file.write_bytes(b"")


def _damage_missing_array(path: Path, other: Path, meta_file: Path, traces: Path) -> None:
    traces.unlink()


def _damage_wrong_fingerprint(path: Path, other: Path, meta_file: Path, traces: Path) -> None:
    shutil.rmtree(path)
    shutil.copytree(other, path)


def _damage_tampered_numbers(path: Path, other: Path, meta_file: Path, traces: Path) -> None:
    """A valid .npy with changed numbers, digests untouched."""
    a = np.load(traces)
    a[0, 0] += 1.0
    _set_array_raw(path, "sa_traces", a)


def _damage_tampered_metadata(path: Path, other: Path, meta_file: Path, traces: Path) -> None:
    """A plausible value, digest untouched."""
    doc = json.loads(meta_file.read_text())
    doc["meta"]["var_threshold"] = 0.5
    meta_file.write_text(json.dumps(doc))


def _damage_pickled(path: Path, other: Path, meta_file: Path, traces: Path) -> None:
    with open(path / "sa_pred.npy", "wb") as fh:
        np.save(fh, np.array([{"run": "code"}], dtype=object), allow_pickle=True)


def _damage_dtype_O_in_metadata(path: Path, other: Path, meta_file: Path, traces: Path) -> None:
    doc = json.loads(meta_file.read_text())
    doc["arrays"]["sa_pred"]["dtype"] = "|O"
    meta_file.write_text(json.dumps(doc))


def _damage_old_version(path: Path, other: Path, meta_file: Path, traces: Path) -> None:
    doc = json.loads(meta_file.read_text())
    doc["version"] = FORMAT_VERSION + 1
    meta_file.write_text(json.dumps(doc))


def _damage_impossible_shape(path: Path, other: Path, meta_file: Path, traces: Path) -> None:
    """A header claiming 10^12 rows in a file of a few KiB."""
    a = np.load(traces)
    with open(traces, "r+b") as fh:
        header = fh.read(128).decode("latin1")
        fh.seek(0)
        fh.write(header.replace(f"({a.shape[0]}, ", f"({10**12}, ").encode("latin1")[:128])


def _damage_sparse_bomb(path: Path, other: Path, meta_file: Path, traces: Path) -> None:
    """Consistent metadata, a 4 GiB sparse file: never read."""
    _, arrays = _arrays_of(path)
    n = (4 << 30) // (4 * arrays["sa_traces"].shape[1])
    from pytest_sadl.store import entry as store

    meta, _ = _arrays_of(path)
    doc = json.loads(meta_file.read_text())
    with open(traces, "r+b") as fh:
        header = np.lib.format.header_data_from_array_1_0(arrays["sa_traces"])
        header["shape"] = (n, arrays["sa_traces"].shape[1])
        fh.seek(0)
        fh.truncate()
        np.lib.format.write_array_header_1_0(fh, header)
        fh.truncate(fh.tell() + n * arrays["sa_traces"].shape[1] * 4)
    doc["arrays"]["sa_traces"]["shape"] = [n, arrays["sa_traces"].shape[1]]
    doc["meta"]["n_train"] = n
    doc["digest"] = store._meta_digest(doc)
    meta_file.write_text(json.dumps(doc))


def _damage_fifo_meta(path: Path, other: Path, meta_file: Path, traces: Path) -> None:
    meta_file.unlink()
    os.mkfifo(meta_file)


def _damage_fifo_array(path: Path, other: Path, meta_file: Path, traces: Path) -> None:
    traces.unlink()
    os.mkfifo(traces)


def _damage_fifo_profile(path: Path, other: Path, meta_file: Path, traces: Path) -> None:
    shutil.rmtree(path)
    os.mkfifo(path)


def _damage_crafted_nan_ranges(path: Path, other: Path, meta_file: Path, traces: Path) -> None:
    _, arrays = _arrays_of(path)
    low = arrays["ranges.low"].copy()
    low[3] = np.nan
    _craft(path, **{"ranges.low": low})


def _damage_crafted_nan_traces(path: Path, other: Path, meta_file: Path, traces: Path) -> None:
    _, arrays = _arrays_of(path)
    sa = arrays["sa_traces"].copy()
    sa[7, 1] = np.inf
    _craft(path, sa_traces=sa)


def _damage_crafted_nan_var_threshold(path: Path, other: Path, meta_file: Path, traces: Path) -> None:
    """JSON NaN, digest recomputed as a crafter would."""
    doc = json.loads(meta_file.read_text())
    doc["meta"]["var_threshold"] = float("nan")
    body = {k: doc[k] for k in ("format", "version", "meta", "arrays")}
    import hashlib

    doc["digest"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    meta_file.write_text(json.dumps(doc))


def _damage_crafted_short_traces(path: Path, other: Path, meta_file: Path, traces: Path) -> None:
    _, arrays = _arrays_of(path)
    _craft(path, sa_traces=arrays["sa_traces"][:-1])


def _damage_crafted_class_out_of_range(path: Path, other: Path, meta_file: Path, traces: Path) -> None:
    _, arrays = _arrays_of(path)
    pred = arrays["sa_pred"].copy()
    pred[0] = 99
    _craft(path, sa_pred=pred)


_DAMAGES = {
    "garbage": _damage_garbage,
    "truncated": _damage_truncated,
    "empty": _damage_empty,
    "missing-array": _damage_missing_array,
    "wrong-fingerprint": _damage_wrong_fingerprint,
    "tampered-numbers": _damage_tampered_numbers,
    "tampered-metadata": _damage_tampered_metadata,
    "pickled": _damage_pickled,
    "dtype-O-in-metadata": _damage_dtype_O_in_metadata,
    "old-version": _damage_old_version,
    "impossible-shape": _damage_impossible_shape,
    "sparse-bomb": _damage_sparse_bomb,
    "fifo-meta": _damage_fifo_meta,
    "fifo-array": _damage_fifo_array,
    "fifo-profile": _damage_fifo_profile,
    "crafted-nan-ranges": _damage_crafted_nan_ranges,
    "crafted-nan-traces": _damage_crafted_nan_traces,
    "crafted-nan-var-threshold": _damage_crafted_nan_var_threshold,
    "crafted-short-traces": _damage_crafted_short_traces,
    "crafted-class-out-of-range": _damage_crafted_class_out_of_range,
}


def _damage(damage: str, path: Path, other: Path) -> None:
    """Damage the stored profile at ``path`` the way ``damage`` names (``other``: another
    profile's folder, for a wrong fingerprint)."""
    _DAMAGES[damage](path, other, path / "meta.json", path / "sa_traces.npy")


DAMAGES = list(_DAMAGES)


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory, dense_model: Any, digits: Any) -> tuple[Any, Any]:
    """A good profile and one of other options, built once (tests damage copies)."""
    cache = tmp_path_factory.mktemp("stored")
    return (
        load_or_build(dense_model, digits.x_train, None, cache),
        load_or_build(dense_model, digits.x_train, ProfileOptions(var_threshold=1e-3), cache),
    )


@pytest.mark.tf
@pytest.mark.parametrize("damage", DAMAGES)
def test_bad_cache_entry_is_rebuilt_with_a_one_line_warning(
    damage: str, stored: tuple[Any, Any], dense_model: Any, digits: Any, tmp_path: Path
) -> None:
    good, other = stored
    path = tmp_path / good.path.name
    shutil.copytree(good.path, path)
    _damage(damage, path, other.path)
    start = time.monotonic()
    infos = list_profiles(tmp_path)  # never hangs on a FIFO, never reads the arrays
    listed = next(i for i in infos if i.path == path)
    if damage not in (
        "truncated",
        "tampered-numbers",
        "crafted-nan-ranges",
        "crafted-nan-traces",
        "crafted-class-out-of-range",
        "pickled",
    ):
        assert not listed.ok and listed.problem  # the rest is found by a load (digests, values)
    with pytest.warns(SadlCacheWarning) as caught:
        again = load_or_build(dense_model, digits.x_train, None, tmp_path)
    messages = [str(w.message) for w in caught]
    assert any("cannot be used" in m and "rebuilding" in m for m in messages), messages
    assert all("\n" not in m for m in messages)
    assert time.monotonic() - start < 60
    assert again.built and again.fingerprint == good.fingerprint
    with _no_cache_warning():
        hit = load_or_build(dense_model, digits.x_train, None, tmp_path)
    assert not hit.built
    np.testing.assert_array_equal(hit.sa_traces, good.sa_traces)
    for lo, glo in zip(hit.ranges.low, good.ranges.low, strict=True):
        np.testing.assert_array_equal(lo, glo)


@pytest.mark.tf
def test_inconsistent_arrays_name_the_problem(dense_model: Any, digits: Any, tmp_path: Path) -> None:
    good = load_or_build(dense_model, digits.x_train, None, tmp_path)
    _damage("crafted-short-traces", good.path, good.path)
    with pytest.raises(Invalid, match=r"sa_traces is float32 \(\d+, \d+\), expected shape"):
        load_profile(good.path, good.fingerprint)
    good = load_or_build(dense_model, digits.x_train, None, tmp_path / "b")
    _damage("tampered-numbers", good.path, good.path)
    with pytest.raises(Invalid, match="sa_traces.npy does not match its digest"):
        load_profile(good.path, good.fingerprint)


@pytest.mark.tf
def test_format_1_profiles_are_stale_and_removed_with_a_warning(dense_model: Any, digits: Any, tmp_path: Path) -> None:
    old = tmp_path / "profile-0123abcd.npz"
    np.savez(
        old, meta=np.array(json.dumps({"format": "pytest-sadl/profile", "version": 1})), sa_traces=np.zeros((3, 2))
    )
    info = list_profiles(tmp_path)
    assert len(info) == 1 and not info[0].ok and "format 1" in info[0].problem
    with pytest.warns(SadlCacheWarning, match="format 1.*stale"):
        prof = load_or_build(dense_model, digits.x_train, None, tmp_path)
    assert prof.built and not old.exists()
    assert [i.ok for i in list_profiles(tmp_path)] == [True]


def _child(code: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(ROOT),
    )


def test_interrupted_writes_leave_the_old_content_and_no_temp(tmp_path: Path) -> None:
    from pytest_sadl.atomic import (
        atomic_directory,
        atomic_open,
        atomic_write_text,
        durable_write,
    )

    target = tmp_path / "x.json"
    atomic_write_text(target, "old")
    with pytest.raises(KeyboardInterrupt), atomic_open(target) as fh:
        fh.write(b"half of the new")
        raise KeyboardInterrupt  # an interrupt in the middle of writing
    assert target.read_text() == "old" and oct(target.stat().st_mode & 0o777) != "0o600"
    folder = tmp_path / "entry"
    with atomic_directory(folder) as tmp:
        durable_write(tmp / "a", lambda fh: fh.write(b"1"))
    with pytest.raises(KeyboardInterrupt), atomic_directory(folder) as tmp:
        durable_write(tmp / "a", lambda fh: fh.write(b"2"))
        raise KeyboardInterrupt
    assert (folder / "a").read_bytes() == b"1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry", "x.json"]


@pytest.mark.tf
def test_killed_writer_leaves_the_profile_intact(dense_model: Any, digits: Any, tmp_path: Path) -> None:
    good = load_or_build(dense_model, digits.x_train, None, tmp_path)
    before = {p.name: p.read_bytes() for p in good.path.iterdir()}
    child = _child(
        """
        import sys
        from pathlib import Path
        import numpy as np
        from pytest_sadl.store import entry as store
        from pytest_sadl.store import cycle
        from pytest_sadl.store import locks
        print("ready", flush=True)
        store.write_entry(Path(sys.argv[1]), {}, {"big": np.ones((768, 1024, 1024), np.uint8)})
        """,
        str(good.path),
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 60
    while not any(p.name.startswith(".tmp-") for p in tmp_path.iterdir()):
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        assert time.monotonic() < deadline
        time.sleep(0.002)
    time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert child.returncode == -signal.SIGKILL, "the writer finished before it was killed"
    assert {p.name: p.read_bytes() for p in good.path.iterdir()} == before
    with _no_cache_warning():
        hit = load_or_build(dense_model, digits.x_train, None, tmp_path)
    assert not hit.built
    assert [i.path for i in list_profiles(tmp_path)] == [good.path]  # the orphan temp folder is ignored
    (orphan,) = [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    load_or_build(dense_model, digits.x_train, None, tmp_path, rebuild=True)
    assert orphan.exists()  # it might be a live writer's: kept while it is younger than LEFTOVER_AGE
    for p in (orphan, *orphan.iterdir()):
        os.utime(p, (time.time() - 7200, time.time() - 7200))
    load_or_build(dense_model, digits.x_train, None, tmp_path, rebuild=True)
    assert not orphan.exists()


@pytest.mark.tf
def test_two_processes_building_at_once(dense_model_path: Path, train_npz: Path, tmp_path: Path) -> None:
    code = """
        import sys
        from pytest_sadl.profile.lookup import load_or_build
        p = load_or_build(sys.argv[1], sys.argv[2], None, sys.argv[3])
        print("built" if p.built else "loaded", p.fingerprint)
        """
    cache = tmp_path / "cache"
    children = [_child(code, str(dense_model_path), str(train_npz), str(cache)) for _ in range(2)]
    outs = []
    for c in children:
        out, err = c.communicate(timeout=300)
        assert c.returncode == 0, err
        outs.append(out.split())
    assert sorted(o[0] for o in outs) == ["built", "loaded"]
    assert outs[0][1] == outs[1][1]
    infos = list_profiles(cache)
    assert len(infos) == 1 and infos[0].ok and infos[0].fingerprint == outs[0][1]
    assert not [p for p in cache.iterdir() if p.name.startswith((".tmp-", ".old-"))]
    assert load_profile(infos[0].path, outs[0][1]).n_train > 0


# ----------------------------------------------------------------------------- errors


@pytest.mark.tf
def test_errors_are_value_errors_naming_the_fix(conv_model: Any, digits: Any, tmp_path: Path, train_npz: Path) -> None:
    with pytest.raises(SadlLayerError, match="no layer 'dense'.*hidden"):
        load_or_build(conv_model, train_npz, ProfileOptions(sa_layers=("dense",)), tmp_path)
    with pytest.raises(SadlDataError, match=r"expects \(8, 8, 1\)"):
        load_or_build(conv_model, digits.x_train.reshape(len(digits.x_train), 64), None, tmp_path)
    with pytest.raises(SadlModelError, match="does not exist"):
        load_or_build(tmp_path / "nope.keras", train_npz, None, tmp_path)
    with pytest.raises(SadlDataError, match="does not exist"):
        load_or_build(conv_model, "data/train.npz", None, tmp_path, base_dir=tmp_path)
    with pytest.raises(ValueError, match="batch_size"):
        ProfileOptions(batch_size=0)
    with pytest.raises(ValueError, match="var_threshold"):
        ProfileOptions(var_threshold=-1.0)
    assert list_profiles(tmp_path) == []


# ----------------------------------------------------------------------------- cache dir


def test_default_cache_dir(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = '-q'\n")
    assert default_cache_dir(tmp_path) == tmp_path.resolve() / ".pytest_cache" / "d" / "sadl"
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\ncache_dir = 'build/cache'\n")
    assert default_cache_dir(tmp_path) == tmp_path.resolve() / "build" / "cache" / "d" / "sadl"
    assert default_cache_dir(tmp_path, "given") == tmp_path.resolve() / "given" / "d" / "sadl"  # pytest's value first
    other = tmp_path / "other"
    other.mkdir()
    (other / "pyproject.toml").write_text("[project]\nname = 'x'\n")  # no pytest section: not a rootdir
    (other / "pytest.ini").write_text("[pytest]\ncache_dir = .c\n")
    assert default_cache_dir(other) == other.resolve() / ".c" / "d" / "sadl"


def test_the_sadl_commands_cache_is_under_pytests_rootdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from a subfolder, ``sadl`` finds the rootdir as pytest does (no finder of its own)."""
    import argparse

    from pytest_sadl.cli.args import cache_dir_for

    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\ncache_dir = 'build/cache'\n")
    sub = tmp_path / "pkg" / "deep"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    args = argparse.Namespace(cache_dir=None, rootdir=None)
    assert cache_dir_for(args) == tmp_path.resolve() / "build" / "cache" / "d" / "sadl"
    assert args.project_rootdir == tmp_path.resolve()


def test_cache_dir_matches_pytest(pytester: pytest.Pytester) -> None:
    """The directory is the one pytest's own ``config.cache.mkdir("sadl")`` gives."""
    pytester.makepyprojecttoml("[tool.pytest.ini_options]\ncache_dir = 'here/cache'\n")
    pytester.makeconftest(
        "def pytest_configure(config):\n    (config.rootpath / 'out.txt').write_text(str(config.cache.mkdir('sadl')))\n"
    )
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "no:xdist")
    result.assert_outcomes(passed=1)
    got = Path((pytester.path / "out.txt").read_text())
    assert got == default_cache_dir(pytester.path)
    assert got == pytester.path.resolve() / "here" / "cache" / "d" / "sadl"


def test_list_profiles_on_missing_dir(tmp_path: Path) -> None:
    assert list_profiles(tmp_path / "nothing") == []


@pytest.mark.tf
def test_save_profile_roundtrip(functional_model: Any, digits: Any, tmp_path: Path) -> None:
    prof = load_or_build(functional_model, digits.x_train, None, None)
    assert prof.path is None and prof.built
    path = save_profile(prof, tmp_path / "p")
    back = load_profile(path, prof.fingerprint)
    np.testing.assert_array_equal(back.sa_traces, prof.sa_traces)
    assert back.meta() == {**prof.meta(), "created": back.created}
    for a, b in zip(back.ranges.high, prof.ranges.high, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.tf
def test_cached_array_in_the_profile(dense_model: Any, digits: Any, tmp_path: Path) -> None:
    prof = load_or_build(dense_model, digits.x_train, None, tmp_path)
    calls = []

    def compute() -> np.ndarray:
        calls.append(1)
        return np.arange(5.0)

    np.testing.assert_array_equal(prof.cached_array("bounds-v1", compute), np.arange(5.0))
    hit = load_or_build(dense_model, digits.x_train, None, tmp_path)
    np.testing.assert_array_equal(hit.cached_array("bounds-v1", compute), np.arange(5.0))
    assert len(calls) == 1
    (side,) = prof.path.glob("extra.bounds-v1.*.npy")
    with open(side, "wb") as fh:  # valid .npy, other numbers: its digest (in its name) differs
        np.save(fh, np.arange(5.0) + 1)
    again = load_or_build(dense_model, digits.x_train, None, tmp_path)
    with pytest.warns(SadlCacheWarning, match="does not match its digest.*recomputing"):
        np.testing.assert_array_equal(again.cached_array("bounds-v1", compute), np.arange(5.0))
    assert len(calls) == 2 and len(list(prof.path.glob("extra.bounds-v1.*.npy"))) == 1
    with pytest.raises(ValueError, match="must be letters"):
        hit.cached_array("../evil", compute)
    assert [i.path for i in list_profiles(tmp_path)] == [prof.path]


# ----------------------------------------------------------------------------- cache folder


def test_cache_folder_expands_home_and_is_git_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_sadl.store.location import ensure_cache_dir, expand_path

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SADL_TEST_SUB", "sub")
    target = expand_path("~/caches/$SADL_TEST_SUB/sadl", tmp_path / "project")
    assert target == tmp_path / "home" / "caches" / "sub" / "sadl"
    (tmp_path / "home").mkdir()
    ensure_cache_dir(target)
    assert target.is_dir()
    top = tmp_path / "home" / "caches"  # the topmost folder this made: ignored as pytest does
    assert (top / ".gitignore").read_text().splitlines()[-1] == "*"
    assert (top / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert not (tmp_path / "home" / ".gitignore").exists()  # never above what it made


# ----------------------------------------------------------------------------- order independence


@pytest.mark.tf
def test_shuffled_inputs_give_the_same_profile_bounds_and_numbers(conv_model: Any, digits: Any, tmp_path: Path) -> None:
    import tensorflow as tf

    from pytest_sadl.engine import ProfileView, default_bounds

    x = digits.x_train
    perm = np.random.default_rng(7).permutation(len(x))
    a = load_or_build(conv_model, x, None, tmp_path)
    with _no_cache_warning():
        hit = load_or_build(conv_model, x[perm], None, tmp_path)  # the same inputs: the same profile
    assert not hit.built and hit.fingerprint == a.fingerprint
    b = load_or_build(conv_model, x[perm], None, None)  # built anew from the other order
    shuffled = tf.data.Dataset.from_tensor_slices(x).shuffle(len(x), reshuffle_each_iteration=True).batch(64)
    with _no_cache_warning():
        c = load_or_build(conv_model, shuffled, None, None)
    t = a.trace_model(conv_model).traces(digits.x_test[:50])
    # an array in another order: bitwise the same profile, held-out sample, bounds and scores
    assert b.fingerprint == a.fingerprint and b.data_fingerprint == a.data_fingerprint
    np.testing.assert_array_equal(b.sa_traces, a.sa_traces)
    np.testing.assert_array_equal(b.row_keys, a.row_keys)
    np.testing.assert_array_equal(b.lsa()(t.sa, t.pred), a.lsa()(t.sa, t.pred))
    np.testing.assert_array_equal(b.dsa()(t.sa, t.pred), a.dsa()(t.sa, t.pred))
    va, vb = ProfileView.of(a).held_out(), ProfileView.of(b).held_out()
    assert sorted(va) == sorted(vb) == ["dsa", "lsa", "mdsa"]
    for key in va:
        np.testing.assert_array_equal(vb[key], va[key])
        assert default_bounds(vb[key]) == default_bounds(va[key])
    # a shuffled dataset: the same fingerprint (so the cached profile), row keys and held-out
    # sample; a fresh build's traces equal to the forward pass's float rounding
    assert c.fingerprint == a.fingerprint
    np.testing.assert_array_equal(c.row_keys, a.row_keys)
    np.testing.assert_allclose(c.sa_traces, a.sa_traces, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c.dsa()(t.sa, t.pred), a.dsa()(t.sa, t.pred), rtol=1e-4)


@pytest.mark.tf
def test_held_out_scores_are_stored_with_the_profile(
    dense_model: Any, digits: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_sadl import engine

    prof = load_or_build(dense_model, digits.x_train, None, tmp_path)
    first = engine.ProfileView.of(prof).held_out()
    assert len(list(prof.path.glob("extra.heldout-*.npy"))) == len(first) == 3  # LSA, DSA, MDSA
    with _no_cache_warning():
        hit = load_or_build(dense_model, digits.x_train, None, tmp_path)

    def never(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("the held-out scores were recomputed")

    monkeypatch.setattr(engine, "held_out_sa", never)
    again = engine.ProfileView.of(hit).held_out()
    for key in first:
        np.testing.assert_array_equal(again[key], first[key])


@pytest.mark.tf
def test_a_randomly_augmenting_dataset_is_told(dense_model: Any, digits: Any) -> None:
    import tensorflow as tf

    x = digits.x_train[:400]
    rng = np.random.default_rng()  # advances from pass to pass, as an augmentation does

    def augmented() -> Any:
        for i in range(0, len(x), 50):
            yield x[i : i + 50] + rng.uniform(0.0, 0.01, x[i : i + 50].shape).astype(np.float32)

    spec = tf.TensorSpec(shape=(None, *x.shape[1:]), dtype=tf.float32)
    noisy = tf.data.Dataset.from_generator(augmented, output_signature=spec)
    with pytest.warns(SadlCacheWarning, match="other inputs on its second pass.*augmentation"):
        load_or_build(dense_model, noisy, None, None)
    with _no_cache_warning():  # a deterministic dataset is not
        load_or_build(dense_model, tf.data.Dataset.from_tensor_slices(x).batch(50), None, None)


@pytest.mark.tf
def test_a_source_changing_from_run_to_run_is_told(dense_model: Any, digits: Any, tmp_path: Path) -> None:
    x = digits.x_train[:400]
    rng = np.random.default_rng(0)
    with _no_cache_warning():
        load_or_build(dense_model, x, None, tmp_path)
        load_or_build(dense_model, x, None, tmp_path)  # the same data again: a hit, nothing to say
        load_or_build(dense_model, x[:300], None, tmp_path)  # other data of another size: a change
    with pytest.warns(SadlCacheWarning, match="other inputs than in the last run with the same model"):
        load_or_build(dense_model, x[:300] + rng.uniform(0, 0.01, x[:300].shape).astype(np.float32), None, tmp_path)


# ----------------------------------------------------------------------------- unwritable cache


@pytest.mark.tf
def test_an_unwritable_cache_builds_in_memory_with_one_warning(dense_model: Any, digits: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # mkdir below it fails for root too
    with pytest.warns(SadlCacheWarning) as caught:
        prof = load_or_build(dense_model, digits.x_train, None, blocker / "cache")
    (message,) = [str(w.message) for w in caught]
    assert "could not cache the training profile" in message and "NotADirectoryError" in message
    assert "\n" not in message
    assert prof.built and prof.path is None and prof.n_train == len(digits.x_train)
    np.testing.assert_array_equal(prof.cached_array("x", lambda: np.arange(3)), np.arange(3))


def _as_nobody(fn: Any) -> dict[str, Any]:
    """Run ``fn()`` (returning JSON-able data) in a forked child as an unprivileged user:
    root ignores file permissions, so a test that runs as root would prove nothing."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        try:
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            out = {"ok": True, "value": fn()}
        except BaseException as exc:  # report, never run the parent's code on
            out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 1 << 16):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    out = json.loads(b"".join(chunks))
    assert out["ok"], out.get("error")
    return out["value"]


@pytest.mark.tf
@pytest.mark.skipif(not hasattr(os, "fork") or not hasattr(os, "setuid"), reason="POSIX only")
def test_a_read_only_cache_as_a_non_root_user(dense_model: Any, digits: Any) -> None:
    import tempfile

    from pytest_sadl.profile.lookup import _try_load
    from pytest_sadl.store import cycle

    prof = load_or_build(dense_model, digits.x_train, None, None)
    base = Path(tempfile.mkdtemp(prefix="sadl-ro-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        empty = base / "empty"  # read-only and empty: nothing can be cached
        empty.mkdir(mode=0o555)
        full = base / "full"  # read-only holding a good profile: it loads, derived arrays stay in memory
        save_profile(prof, profile_path(full, prof.fingerprint))
        os.chmod(full, 0o555)

        def child() -> dict[str, Any]:
            assert os.geteuid() != 0
            results: dict[str, Any] = {}
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                value, stored = cycle.cached_build(
                    profile_path(empty, prof.fingerprint),
                    load=lambda p, warn: _try_load(p, prof.fingerprint, warn),
                    ready=lambda p: True,
                    make=lambda partial: prof,
                    save=save_profile,
                )
                results["empty"] = [stored, value is prof, [str(w.message) for w in caught]]
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                hit = load_profile(profile_path(full, prof.fingerprint), prof.fingerprint)
                same = bool(np.array_equal(hit.sa_traces, prof.sa_traces))
                extra = hit.cached_array("heldout-x", lambda: np.arange(4.0)).tolist()
                results["full"] = [same, extra, [str(w.message) for w in caught]]
            # DSA scores; keeping its distances raises (the plugin ignores that) and changes nothing
            scores = hit.dsa()(np.asarray(hit.sa_traces[:20]), hit.sa_pred[:20])
            try:
                hit.keep_dsa_distances()
                results["keep"] = [bool(np.isfinite(scores).all()), "no error"]
            except OSError as exc:
                results["keep"] = [bool(np.isfinite(scores).all()), type(exc).__name__]
            results["files"] = sorted(p.name for p in hit.path.iterdir())
            return results

        got = _as_nobody(child)
    finally:
        for d in (base / "empty", base / "full"):
            if d.exists():
                os.chmod(d, 0o755)
        shutil.rmtree(base, ignore_errors=True)
    stored, same_value, messages = got["empty"]
    assert not stored and same_value
    assert (
        len(messages) == 1
        and "could not cache the training profile" in messages[0]
        and "PermissionError" in messages[0]
    )
    same, extra, messages = got["full"]
    assert same and extra == [0.0, 1.0, 2.0, 3.0]
    assert len(messages) == 1 and "PermissionError" in messages[0]
    assert got["keep"] == [True, "PermissionError"]
    assert not any(name.startswith("extra.") for name in got["files"])


@pytest.mark.tf
def test_an_unwritable_cache_does_not_change_a_pytest_run(
    pytester: pytest.Pytester, dense_model_path: Path, digits: Any
) -> None:
    shutil.copy(dense_model_path, pytester.path / "model.keras")
    np.savez(pytester.path / "train.npz", x=digits.x_train)
    np.save(pytester.path / "inputs.npy", digits.x_test[:30])
    pytester.makefile(".ini", pytest="[pytest]\nsadl_model = model.keras\nsadl_train = train.npz\n")
    pytester.makepyfile(
        "import numpy as np\nimport pytest\n\n\n@pytest.mark.sadl\ndef test_predict(sadl_model):\n"
        "    sadl_model.predict(np.load('inputs.npy'), verbose=0)\n"
    )
    args = ("-p", "no:cacheprovider", "-p", "no:randomly", "--sadl-coverage", "--sadl-fail-under=nc:1")
    (pytester.path / "blocked").write_text("a file where the cache folder would go")
    bad = pytester.runpytest_inprocess(*args, "--sadl-cache-dir=blocked/sadl", "--sadl-report=json:bad.json")
    good = pytester.runpytest_inprocess(*args, "--sadl-cache-dir=cache", "--sadl-report=json:good.json")
    assert bad.ret == good.ret == 0, bad.stdout.str()
    assert "INTERNALERROR" not in bad.stdout.str() + bad.stderr.str()
    bad.stdout.fnmatch_lines(
        [
            "sadl: warning: pytest-sadl: could not cache the training profile in *blocked* (NotADirectoryError*); it is built in memory for this run"
        ]
    )
    a, b = (json.loads((pytester.path / f"{n}.json").read_text()) for n in ("bad", "good"))
    assert a["metrics"] == b["metrics"]
    assert any("could not cache" in w for w in a["outcome"]["warnings"])


# ----------------------------------------------------------------------------- training data as Keras takes it


@pytest.mark.tf
def test_training_data_as_a_directory_dataset_a_pydataset_or_a_generator_gives_the_arrays_profile(
    dense_model: Any, digits: Any, tmp_path: Path
) -> None:
    """Issue 21: sadl_train as `image_dataset_from_directory` gives it (batched, shuffled
    (x, y)), a keras.utils.PyDataset, a generator with a known length: the same profile
    as the arrays, and their labels kept."""
    import keras
    import tensorflow as tf

    from pytest_sadl.capture.data import load_training_data

    x, y = digits.x_train[:600], digits.y_train[:600]
    ref = load_or_build(dense_model, x, None, tmp_path / "arrays")
    # the digits as 8-bit PNGs, one folder per class (values 0..16 times 15: exact in uint8)
    for i, (img, label) in enumerate(zip(x, y, strict=True)):
        (tmp_path / "images" / str(label)).mkdir(parents=True, exist_ok=True)
        png = tf.io.encode_png(np.round(img * 16 * 15).astype(np.uint8))  # no PIL needed
        tf.io.write_file(str(tmp_path / "images" / str(label) / f"{i}.png"), png)
    from_dir = keras.utils.image_dataset_from_directory(
        tmp_path / "images", image_size=(8, 8), color_mode="grayscale", batch_size=32, seed=1, verbose=False
    ).map(lambda image, label: (image / 240.0, label))

    class Batches(keras.utils.PyDataset):
        def __len__(self) -> int:
            return 6

        def __getitem__(self, i: int) -> Any:
            return x[i * 100 : (i + 1) * 100], y[i * 100 : (i + 1) * 100]

    class Endless:  # a Keras-style `while True` generator that says how many batches make the data
        def __init__(self) -> None:
            self.i = 0

        def __iter__(self) -> Any:
            return self

        def __next__(self) -> Any:
            i, self.i = self.i % 4, self.i + 1
            return x[i * 150 : (i + 1) * 150], y[i * 150 : (i + 1) * 150]

        def __len__(self) -> int:
            return 4

    def generator() -> Any:
        for i in range(0, 600, 64):
            yield (x[i : i + 64], y[i : i + 64])

    for name, source in (
        ("dir", from_dir),
        ("pydataset", Batches()),
        ("endless", Endless()),
        ("generator", generator()),
    ):
        data = load_training_data(source)
        prof = load_or_build(dense_model, data, None, tmp_path / name)
        assert prof.data_fingerprint == ref.data_fingerprint, name
        np.testing.assert_allclose(prof.sa_traces, ref.sa_traces, rtol=1e-5, atol=1e-6)
        assert data.y is not None, name
        if name == "dir":  # shuffled by the dataset: the labels of the pass, in its order
            np.testing.assert_array_equal(np.bincount(data.y), np.bincount(y))
        else:
            np.testing.assert_array_equal(data.y, y)


@pytest.mark.filterwarnings("ignore:MDSA. the training covariance:pytest_sadl.errors.SadlWarning")
def test_a_layer_whose_neurons_are_each_constant_in_one_class_gets_a_profile(tmp_path: Path):
    """The failure mode of briefly trained keras.applications models (issue 21): every
    neuron of the default SA layer is constant (a ReLU that never fires) in some predicted
    class. The paper's variance rule keeps no neuron and the build used to stop; the
    default rule (per class) sets LSA, DSA and MDSA up, and the held-out SC bounds too."""
    import keras

    from pytest_sadl.engine import ProfileView, default_sc_bounds

    inputs = keras.Input((2,))
    hidden = keras.layers.Dense(2, activation="relu", name="hidden")(inputs)
    probs = keras.layers.Dense(2, activation="softmax", name="probs")(hidden)
    model = keras.Model(inputs, probs)
    model.get_layer("hidden").set_weights([np.eye(2, dtype="float32"), np.zeros(2, "float32")])
    model.get_layer("probs").set_weights([5 * np.eye(2, dtype="float32"), np.zeros(2, "float32")])
    rng = np.random.default_rng(0)
    x = np.abs(rng.normal(size=(400, 2))).astype("float32") + 0.1
    x[:200, 1] *= -1  # class 0: neuron 1 never fires
    x[200:, 0] *= -1  # class 1: neuron 0 never fires
    # the paper's rule keeps no neuron: the profile is still built and cached, and a run
    # reports LSA as not available (with why) while the other metrics are computed
    paper = ProfileView.of(load_or_build(model, x, ProfileOptions(var_rule="paper"), tmp_path / "paper"))
    assert paper.scorer("lsa") is None and paper.scorer("dsa") is not None
    assert re.search(r"LSA cannot be set up on SA layers \['hidden'\].*every one of the 2", paper.unavailable["lsa"])
    prof = load_or_build(model, x, ProfileOptions(), tmp_path / "class")
    assert prof.sa_layers == ["hidden"] and prof.options.var_rule == "class"
    assert {c: v.tolist() for c, v in prof.lsa().kept_by_class.items()} == {0: [0], 1: [1]}
    assert prof.dsa() is not None and prof.mdsa().kept.tolist() == [0, 1]
    again = load_or_build(model, x, ProfileOptions(), tmp_path / "class")
    assert not again.built and again.lsa().var_rule == "class"
    lsc = default_sc_bounds(ProfileView.of(again))["lsc"]
    assert np.isfinite(lsc[0]) and lsc[1] > lsc[0]
