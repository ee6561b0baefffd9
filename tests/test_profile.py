"""The training profile: contents equal to the engine on manual traces, fingerprint
invalidation, corrupt and interrupted files, concurrent builders, the cache directory."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from pytest_sadl.data import SadlDataError, SadlLayerError, SadlModelError
from pytest_sadl.profile import (
    FORMAT_VERSION,
    ProfileOptions,
    SadlCacheWarning,
    default_cache_dir,
    find_rootdir,
    list_profiles,
    load_or_build,
    load_profile,
    model_fingerprint,
    profile_path,
    save_profile,
)

try:
    from tests import _models
except ImportError:  # pragma: no cover
    import _models  # type: ignore[no-redef]

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
    from pytest_sadl.neurons import fit_ranges
    from pytest_sadl.surprise import DSA, LSA
    from pytest_sadl.traces import TraceModel

    prof = load_or_build(conv_model, digits.x_train, ProfileOptions(batch_size=100), tmp_path)
    assert prof.built and prof.path == profile_path(tmp_path, prof.fingerprint) and prof.path.is_file()
    t = TraceModel(conv_model).traces(digits.x_train)
    np.testing.assert_allclose(prof.sa_traces, t.sa, atol=1e-5)
    np.testing.assert_array_equal(prof.sa_pred, t.pred)
    ref_ranges = fit_ranges(t.coverage)
    for lo, hi, rlo, rhi in zip(prof.ranges.low, prof.ranges.high, ref_ranges.low, ref_ranges.high):
        np.testing.assert_allclose(lo, rlo, atol=1e-5)
        np.testing.assert_allclose(hi, rhi, atol=1e-5)
    assert prof.sa_layers == ["hidden"] and prof.coverage_layers == ["conv1", "pool1", "conv2", "hidden", "probs"]
    assert prof.classifier and prof.n_classes == 10 and prof.n_train == len(digits.x_train)
    assert prof.ranges.names == tuple(prof.coverage_layers)

    test = TraceModel(conv_model).traces(digits.x_test)
    ref_lsa = LSA(t.sa, t.pred)(test.sa, test.pred)
    ref_dsa = DSA(t.sa, t.pred)(test.sa, test.pred)
    with _no_cache_warning():
        hit = load_or_build(conv_model, digits.x_train, ProfileOptions(batch_size=100), tmp_path)
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
    assert "fitting neuron ranges and LSA (DSA needs a classifier)" in said and not any("LSA and DSA" in m for m in said)
    hit = load_or_build(regression_model, digits.x_train, None, tmp_path)
    assert not hit.built
    scores = hit.lsa()(prof.sa_traces[:20])
    assert scores.shape == (20,) and np.isfinite(scores).all()
    mdsa = hit.mdsa()(prof.sa_traces[:20])  # one mean and covariance over all traces
    assert mdsa.shape == (20,) and np.isfinite(mdsa).all() and hit.mdsa() is hit.mdsa()


@pytest.mark.tf
def test_file_holds_no_pickles_and_dedupes_traces(conv_model: Any, digits: Any, tmp_path: Path) -> None:
    prof = load_or_build(conv_model, digits.x_train, None, tmp_path)
    with np.load(prof.path, allow_pickle=False) as npz:
        meta = json.loads(str(npz["meta"]))
        assert meta["version"] == FORMAT_VERSION and meta["fingerprint"] == prof.fingerprint
        assert all(npz[k].dtype != object for k in npz.files)
        # the engine's copies of the training traces are stored as references, once
        assert "lsa.train_ats" in meta["refs"] and "dsa.train_ats" in meta["refs"]
        assert "lsa.train_ats" not in npz.files


@pytest.mark.tf
def test_lazy_dsa_then_completed(conv_model: Any, digits: Any, tmp_path: Path) -> None:
    lazy = load_or_build(conv_model, digits.x_train, ProfileOptions(dsa_precompute=False), tmp_path)
    assert lazy.dsa_arrays is None
    full = load_or_build(conv_model, digits.x_train, ProfileOptions(), tmp_path)
    assert full.fingerprint == lazy.fingerprint and not full.built and full.dsa_arrays is not None
    q = digits.x_test[:40]
    t = lazy.trace_model(conv_model).traces(q)
    np.testing.assert_allclose(lazy.dsa()(t.sa, t.pred), full.dsa()(t.sa, t.pred), rtol=1e-6)
    again = load_or_build(conv_model, digits.x_train, ProfileOptions(dsa_precompute=False), tmp_path)
    assert not again.built and again.dsa_arrays is not None
    assert len(list_profiles(tmp_path)) == 1


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
def test_profile_fingerprint_changes_with_weight_input_or_option(dense_model_path: Path, digits: Any, tmp_path: Path) -> None:
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
    fps = [
        load_or_build(model, changed_input, None, tmp_path).fingerprint,
        load_or_build(model, x, ProfileOptions(var_threshold=1e-4), tmp_path).fingerprint,
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


@pytest.mark.tf
@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "wrong-fingerprint", "pickled", "old-version"])
def test_bad_cache_file_is_rebuilt_with_a_warning(damage: str, dense_model: Any, digits: Any, tmp_path: Path) -> None:
    good = load_or_build(dense_model, digits.x_train, None, tmp_path)
    path = good.path
    raw = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"\x00" * 1000)
    elif damage == "truncated":  # what a non-atomic, interrupted write would leave
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "wrong-fingerprint":
        other = load_or_build(dense_model, digits.x_train, ProfileOptions(var_threshold=1e-3), tmp_path)
        path.write_bytes(other.path.read_bytes())
    elif damage == "pickled":
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        arrays["sa_pred"] = np.array([{"run": "code"}], dtype=object)
        np.savez(path, **arrays)
    elif damage == "old-version":
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        meta = json.loads(str(arrays["meta"]))
        meta["version"] = FORMAT_VERSION + 1
        arrays["meta"] = np.array(json.dumps(meta))
        np.savez(path, **arrays)
    if damage != "pickled":  # listing reads the metadata only; loading finds the rest
        assert not next(i for i in list_profiles(tmp_path) if i.path == path).ok
    with pytest.warns(SadlCacheWarning, match="cannot be used.*rebuilding"):
        again = load_or_build(dense_model, digits.x_train, None, tmp_path)
    assert again.built and again.fingerprint == good.fingerprint
    with _no_cache_warning():
        hit = load_or_build(dense_model, digits.x_train, None, tmp_path)
    assert not hit.built
    np.testing.assert_array_equal(hit.sa_traces, good.sa_traces)


@pytest.mark.tf
def test_inconsistent_arrays_are_not_trusted(dense_model: Any, digits: Any, tmp_path: Path) -> None:
    good = load_or_build(dense_model, digits.x_train, None, tmp_path)
    with np.load(good.path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["sa_traces"] = arrays["sa_traces"][:-1]
    np.savez(good.path, **arrays)
    from pytest_sadl.profile import _Invalid

    with pytest.raises(_Invalid, match="sa_traces has shape"):
        load_profile(good.path, good.fingerprint)


def _child(code: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT),
    )


def test_atomic_write_failure_leaves_old_file_and_no_temp(tmp_path: Path) -> None:
    from pytest_sadl.profile import _atomic_savez

    target = tmp_path / "x.npz"
    _atomic_savez(target, {"a": np.arange(3)})

    class Boom:
        def __array__(self, *a: Any, **k: Any) -> np.ndarray:
            raise KeyboardInterrupt  # an interrupt in the middle of writing

    with pytest.raises(KeyboardInterrupt):
        _atomic_savez(target, {"a": np.arange(5), "b": Boom()})  # type: ignore[dict-item]
    with np.load(target) as npz:
        np.testing.assert_array_equal(npz["a"], np.arange(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npz"]


@pytest.mark.tf
def test_killed_writer_leaves_the_profile_intact(dense_model: Any, digits: Any, tmp_path: Path) -> None:
    good = load_or_build(dense_model, digits.x_train, None, tmp_path)
    before = good.path.read_bytes()
    child = _child(
        """
        import sys
        from pathlib import Path
        import numpy as np
        from pytest_sadl.profile import _atomic_savez
        print("ready", flush=True)
        _atomic_savez(Path(sys.argv[1]), {"big": np.ones((768, 1024, 1024), np.uint8)})
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
    assert good.path.read_bytes() == before
    with _no_cache_warning():
        hit = load_or_build(dense_model, digits.x_train, None, tmp_path)
    assert not hit.built
    assert [i.path for i in list_profiles(tmp_path)] == [good.path]  # the orphan temp file is ignored


@pytest.mark.tf
def test_two_processes_building_at_once(dense_model_path: Path, train_npz: Path, tmp_path: Path) -> None:
    code = """
        import sys
        from pytest_sadl.profile import load_or_build
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
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp-")]
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


def test_default_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = '-q'\n")
    sub = tmp_path / "pkg" / "deep"
    sub.mkdir(parents=True)
    assert find_rootdir(sub) == tmp_path.resolve()
    assert default_cache_dir(tmp_path) == tmp_path.resolve() / ".pytest_cache" / "d" / "sadl"
    monkeypatch.chdir(sub)
    assert default_cache_dir() == tmp_path.resolve() / ".pytest_cache" / "d" / "sadl"
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\ncache_dir = 'build/cache'\n")
    assert default_cache_dir() == tmp_path.resolve() / "build" / "cache" / "d" / "sadl"
    other = tmp_path / "other"
    other.mkdir()
    (other / "pyproject.toml").write_text("[project]\nname = 'x'\n")  # no pytest section: not a rootdir
    (other / "pytest.ini").write_text("[pytest]\ncache_dir = .c\n")
    assert default_cache_dir(other) == other.resolve() / ".c" / "d" / "sadl"


def test_cache_dir_matches_pytest(pytester: pytest.Pytester) -> None:
    """The directory is the one pytest's own ``config.cache.mkdir("sadl")`` gives."""
    pytester.makepyprojecttoml("[tool.pytest.ini_options]\ncache_dir = 'here/cache'\n")
    pytester.makeconftest(
        "def pytest_configure(config):\n"
        "    (config.rootpath / 'out.txt').write_text(str(config.cache.mkdir('sadl')))\n"
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
    path = save_profile(prof, tmp_path / "p.npz")
    back = load_profile(path, prof.fingerprint)
    np.testing.assert_array_equal(back.sa_traces, prof.sa_traces)
    assert back.meta() == {**prof.meta(), "created": back.created}
    for a, b in zip(back.ranges.high, prof.ranges.high):
        np.testing.assert_array_equal(a, b)


@pytest.mark.tf
def test_cached_array_beside_the_profile(dense_model: Any, digits: Any, tmp_path: Path) -> None:
    prof = load_or_build(dense_model, digits.x_train, None, tmp_path)
    calls = []

    def compute() -> np.ndarray:
        calls.append(1)
        return np.arange(5.0)

    np.testing.assert_array_equal(prof.cached_array("bounds-v1", compute), np.arange(5.0))
    hit = load_or_build(dense_model, digits.x_train, None, tmp_path)
    np.testing.assert_array_equal(hit.cached_array("bounds-v1", compute), np.arange(5.0))
    assert len(calls) == 1
    side = prof.path.with_name(prof.path.stem + ".bounds-v1.npy")
    side.write_bytes(b"junk")
    with pytest.warns(SadlCacheWarning, match="recomputing"):
        hit.cached_array("bounds-v1", compute)
    assert len(calls) == 2 and np.load(side).shape == (5,)
    with pytest.raises(ValueError, match="must be letters"):
        hit.cached_array("../evil", compute)
    assert [i.path for i in list_profiles(tmp_path)] == [prof.path]
