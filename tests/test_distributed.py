"""The Dask build (``sadl profile build --dask``): a LocalCluster's workers trace the shards
of the training data and the profile equals a local build's bit for bit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_sadl.errors import SadlConfigError
from pytest_sadl.profile.build import ProfileOptions
from pytest_sadl.profile.distributed import shards
from pytest_sadl.profile.lookup import load_or_build
from tests._recorded import KEEP_RECORDED, recorded

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def cluster() -> Any:
    """Two worker processes, one thread each, for the module's tests."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        yield c


def test_shards_are_whole_batches_of_the_canonical_order() -> None:
    assert shards(10, 3, batches_per_shard=2) == [(0, 6), (6, 10)]
    assert shards(12, 3, batches_per_shard=2) == [(0, 6), (6, 12)]
    assert shards(0, 3) == []
    assert all(a % (64 * 8) == 0 for a, _ in shards(1347, 64))


def test_local_cluster_build_equals_local_build(
    dense_model_path: Path, digits: Any, tmp_path: Path, cluster: Any
) -> None:
    options = ProfileOptions(batch_size=64)  # 1,347 rows: three shards of eight batches on two workers
    # the rows in another order than the canonical one: the shards must follow the canonical order
    x = digits.x_train[::-1].copy()
    local = load_or_build(str(dense_model_path), x, options, tmp_path / "local")
    lines: list[str] = []
    seen: list[tuple[int, int | None]] = []
    remote = load_or_build(
        str(dense_model_path),
        x,
        options,
        tmp_path / "dask",
        dask=cluster.scheduler_address,
        status=lines.append,
        progress=lambda done, total: seen.append((done, total)),
    )
    assert remote.built and remote.path is not None
    assert remote.fingerprint == local.fingerprint
    assert remote.sa_traces.tobytes() == local.sa_traces.tobytes()
    assert remote.sa_pred.tobytes() == local.sa_pred.tobytes()
    assert np.array_equal(remote.row_keys, local.row_keys)
    for a, b in zip(remote.ranges.low + remote.ranges.high, local.ranges.low + local.ranges.high, strict=True):
        assert a.tobytes() == b.tobytes()
    test = local.trace_model(local_model := _load(dense_model_path)).traces(digits.x_test[:50])
    del local_model
    np.testing.assert_allclose(remote.lsa()(test.sa, test.pred), local.lsa()(test.sa, test.pred), rtol=0, atol=1e-9)
    # progress: one call per shard as it finishes, in inputs, ending at the total
    assert [t for _, t in seen] == [1347] * 3 and sorted(d for d, _ in seen) == [d for d, _ in seen]
    assert seen[-1][0] == 1347
    assert any("tracing on 2 Dask worker(s)" in line and "3 shards" in line for line in lines)


def test_dask_build_progress_in_a_log_is_status_lines(dense_model_path: Path, digits: Any, cluster: Any) -> None:
    """Without a progress bar (a log, not a TTY) the shards done are status lines, no bar."""
    lines: list[str] = []
    load_or_build(
        str(dense_model_path),
        digits.x_train,
        ProfileOptions(batch_size=64),
        None,
        dask=cluster.scheduler_address,
        status=lines.append,
    )
    done = [line for line in lines if "shards done" in line]
    assert done and done[-1].startswith("traced: 3/3 shards done (1347/1347 inputs")
    assert not any("\r" in line or "\x1b" in line for line in lines)


def test_sadl_profile_build_dask_prints_progress_lines_in_a_log(
    dense_model_path: Path, digits: Any, tmp_path: Path, cluster: Any
) -> None:
    np.save(tmp_path / "train.npy", digits.x_train)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_sadl",
            "profile",
            "build",
            "--model",
            str(dense_model_path),
            "--train",
            str(tmp_path / "train.npy"),
            "--sadl-dask",
            cluster.scheduler_address,
            "--batch-size",
            "64",
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "sadl: tracing on 2 Dask worker(s)" in run.stderr
    assert "sadl: traced: 3/3 shards done (1347/1347 inputs" in run.stderr
    assert "\r" not in run.stderr and "\x1b[K" not in run.stderr  # no bar in a log
    assert "built profile" in run.stdout


@pytest.fixture(scope="module")
def dense_profile(dense_model_path: Path, digits: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return load_or_build(str(dense_model_path), digits.x_train, ProfileOptions(), tmp_path_factory.mktemp("dp"))


@pytest.fixture(scope="module")
def test_traces(dense_profile: Any, dense_model: Any, digits: Any) -> Any:
    return dense_profile.trace_model(dense_model).traces(digits.x_test)


def test_cluster_dsa_equals_local_bit_for_bit(dense_profile: Any, test_traces: Any, cluster: Any) -> None:
    from pytest_sadl.profile.cluster import ClusterScorer

    sa, pred = test_traces.sa.astype(np.float64), test_traces.pred
    local = dense_profile.dsa()(sa, pred)
    with ClusterScorer(cluster.scheduler_address, dense_profile) as scorer:
        assert len(scorer._parts) == 4  # two shards per worker
        remote = scorer.dsa(sa, pred)
        again = scorer.dsa(sa[:7], pred[:7])  # the shards stay on the workers
    assert remote.tobytes() == local.tobytes()
    assert again.tobytes() == local[:7].tobytes()


def test_cluster_dsa_ties_take_the_first_training_row(cluster: Any, tmp_path: Path) -> None:
    """Duplicated training rows in different shards: the first in training order is x_a, as
    locally; and a memory-mapped set is opened by the workers, an in-memory one sent."""
    from types import SimpleNamespace

    from pytest_sadl.criteria.surprise import DSA
    from pytest_sadl.profile.cluster import ClusterScorer

    rng = np.random.default_rng(3)
    base = rng.normal(size=(40, 5)).astype(np.float32)
    x = np.concatenate([base, base, base[::-1]])  # every row three times, across the shards
    pred = np.tile(np.arange(4), 30)[: len(x)]
    pred[40:80] = pred[:40]
    q = np.concatenate([base[:10].astype(np.float64), rng.normal(size=(20, 5))])
    qp = np.concatenate([pred[:10], rng.integers(0, 4, 20)])
    local = DSA(x, pred)(q, qp)
    np.save(tmp_path / "x.npy", x)
    for traces in (x, np.load(tmp_path / "x.npy", mmap_mode="r")):
        profile = SimpleNamespace(sa_traces=traces, sa_pred=pred, lsa_arrays={})
        with ClusterScorer(cluster.scheduler_address, profile) as scorer:
            remote = scorer.dsa(q, qp)
            index, _ = scorer._reduce(
                __import__("pytest_sadl.profile.cluster", fromlist=["_nearest_in"])._nearest_in, q, qp, "x", pair=True
            )
            assert isinstance(scorer._shard_data()[0], tuple) == isinstance(traces, np.memmap)
        np.testing.assert_array_equal(remote, local)
        naive = [
            min(
                (i for i in range(len(x)) if pred[i] == qp[j]),
                key=lambda i: (np.linalg.norm(x[i].astype(np.float64) - q[j]), i),
            )
            for j in range(len(q))
        ]
        assert index.tolist() == naive


def test_cluster_lsa_equals_local(dense_profile: Any, test_traces: Any, cluster: Any) -> None:
    from pytest_sadl.profile import cluster as cluster_mod
    from pytest_sadl.profile.cluster import ClusterScorer

    sa, pred = test_traces.sa.astype(np.float64), test_traces.pred
    local = dense_profile.lsa()(sa, pred)
    old = cluster_mod.QUERY_ROWS
    cluster_mod.QUERY_ROWS = 100  # several blocks, on both workers
    try:
        with ClusterScorer(cluster.scheduler_address, dense_profile) as scorer:
            remote = scorer.lsa(sa, pred)
    finally:
        cluster_mod.QUERY_ROWS = old
    np.testing.assert_allclose(remote, local, rtol=0, atol=1e-9)


def test_cluster_class_moments_equal_the_local_ones(dense_profile: Any, cluster: Any) -> None:
    from pytest_sadl.profile.cluster import ClusterScorer

    x = np.asarray(dense_profile.sa_traces, dtype=np.float64)
    pred = np.asarray(dense_profile.sa_pred)
    with ClusterScorer(cluster.scheduler_address, dense_profile) as scorer:
        counts, means, covs = scorer.class_moments()
    assert sorted(counts) == sorted(set(pred.tolist()))
    for c in counts:
        rows = x[pred == c]
        assert counts[c] == len(rows)
        np.testing.assert_allclose(means[c], rows.mean(axis=0), rtol=0, atol=1e-9)
        if len(rows) > 1:
            np.testing.assert_allclose(covs[c], np.cov(rows, rowvar=False), rtol=0, atol=1e-9)


def _load(path: Path) -> Any:
    from pytest_sadl.capture.model import load_model

    return load_model(str(path))


def test_dask_needs_a_model_the_workers_can_load(dense_model: Any, digits: Any) -> None:
    with pytest.raises(SadlConfigError, match="--dask needs the model as a .keras path"):
        load_or_build(dense_model, digits.x_train, dask="tcp://127.0.0.1:1")


def test_unreachable_scheduler_is_one_line(
    dense_model_path: Path, digits: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_sadl.profile.distributed import DaskTracer

    monkeypatch.setattr(DaskTracer, "connect_timeout", 1.0)
    with pytest.raises(SadlConfigError) as info:
        load_or_build(str(dense_model_path), digits.x_train[:64], dask="tcp://127.0.0.1:9")
    message = str(info.value)
    assert "\n" not in message and "tcp://127.0.0.1:9" in message and "--dask" in message
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_a_cache_hit_needs_no_scheduler_and_an_unreachable_one_is_tried_once(
    dense_model_path: Path, digits: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_sadl.profile import distributed as dist

    monkeypatch.setattr(dist.DaskTracer, "connect_timeout", 1.0)
    tries: list[str] = []
    real = dist.connect
    monkeypatch.setattr(dist, "connect", lambda address, timeout: tries.append(address) or real(address, timeout))
    x = digits.x_train[:64]
    load_or_build(str(dense_model_path), x, None, tmp_path)
    dist.load_ahead("tcp://127.0.0.1:9", str(dense_model_path), None)  # as sadl profile build does first
    hit = load_or_build(str(dense_model_path), x, None, tmp_path, dask="tcp://127.0.0.1:9")
    assert not hit.built and tries == ["tcp://127.0.0.1:9"]
    with pytest.raises(SadlConfigError, match="cannot reach the Dask scheduler"):
        load_or_build(str(dense_model_path), x, None, tmp_path, dask="tcp://127.0.0.1:9", rebuild=True)


def test_dask_is_imported_only_for_a_dask_build() -> None:
    code = (
        "import sys, pytest_sadl.plugin.hooks, pytest_sadl.profile.lookup, pytest_sadl.cli.main; "
        "print([m for m in ('dask', 'distributed') if m in sys.modules])"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert run.stdout.strip() == "[]"


def test_sadl_select_dask_equals_local_selection(
    dense_model_path: Path, digits: Any, tmp_path: Path, cluster: Any, capsys: Any
) -> None:
    import json

    from pytest_sadl.cli.main import main

    np.savez(tmp_path / "train.npz", x=digits.x_train)
    np.savez(tmp_path / "pool.npz", x=digits.x_test, y=digits.y_test)
    base = [
        "--model",
        str(dense_model_path),
        "--train",
        str(tmp_path / "train.npz"),
        "--cache-dir",
        str(tmp_path / "c"),
        "--rootdir",
        str(tmp_path),
        "--budget",
        "20",
    ]
    chosen = {}
    for name, extra in (("local", []), ("dask", ["--dask", cluster.scheduler_address])):
        for by in ("dsa", "lsa"):
            out = tmp_path / f"{name}-{by}"
            assert main(["select", str(tmp_path / "pool.npz"), *base, "--by", by, "--out", str(out), *extra]) == 0
            chosen[name, by] = json.loads((out / "selection.json").read_text())
            err = capsys.readouterr().err
            assert ("sadl: traced the pool: 1/1 shards done (450/450 inputs" in err) == (name == "dask"), err

    def pool_models() -> list[bool]:  # on a worker: the trace models with extrema (the pool's)
        from pytest_sadl.profile import distributed as d

        return [bool(key[6]) for key in d._MODELS if len(key) > 6]

    with distributed.Client(cluster.scheduler_address) as client:
        assert any(True in found for found in client.run(pool_models).values())  # the pool was traced there
    for by in ("dsa", "lsa"):
        local, remote = chosen["local", by], chosen["dask", by]
        assert remote["indices"] == local["indices"]
        np.testing.assert_allclose(remote["scores"][by], local["scores"][by], rtol=0, atol=1e-9)


def test_plugin_dask_build_and_scores_on_the_cluster(
    pytester: pytest.Pytester, dense_model_path: Path, digits: Any, cluster: Any
) -> None:
    """The plugin with --sadl-dask: the build's shards in status lines (no progress bar in
    a log), and, the training set being large enough (the threshold lowered for the test),
    LSA and DSA of the recorded inputs scored on the cluster: the scores a local profile
    gives."""
    import json
    import shutil

    shutil.copy(dense_model_path, pytester.path / "model.keras")
    np.savez(pytester.path / "train.npz", x=digits.x_train)
    np.save(pytester.path / "inputs.npy", digits.x_test[:60])
    pytester.makefile(
        ".ini", pytest="[pytest]\nsadl_model = model.keras\nsadl_train = train.npz\nsadl_batch_size = 64\n"
    )
    pytester.makeconftest(
        "import pytest_sadl.profile.cluster as c\n\nc.MIN_TRAIN = 1000  # 1,347 traces pay here\n" + KEEP_RECORDED
    )
    pytester.makepyfile(
        "import numpy as np\nimport pytest\n\n\n@pytest.mark.sadl\ndef test_predict(sadl_model):\n"
        "    sadl_model.predict(np.load('inputs.npy'), verbose=0)\n"
    )
    args = ("-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist", "--sadl-coverage")
    remote = pytester.runpytest_subprocess(
        *args,
        "--sadl-cache-dir=dask",
        "--sadl-report=json:dask.json",
        f"--sadl-dask={cluster.scheduler_address}",
        timeout=300,
    )
    assert remote.ret == 0, remote.stdout.str() + remote.stderr.str()
    out = remote.stdout.str()
    remote.stdout.fnmatch_lines(["sadl: tracing on 2 Dask worker(s) at tcp://*: 3 shards of up to 512 inputs"])
    remote.stdout.fnmatch_lines(["sadl: traced: 3/3 shards done (1347/1347 inputs, *s)"])
    remote.stdout.fnmatch_lines(["sadl: scoring LSA and DSA on 2 Dask worker(s) at tcp://*"])
    assert "\r" not in out and "\x1b[K" not in out
    # The recorded inputs' LSA and DSA as the profile the run built scores them here, on the
    # traces the run recorded (tests/_recorded.py: traced again in this process, in another
    # batch split, their float32 last bits may differ on CPUs whose kernels block by shape).
    # That the Dask build equals a local one is test_local_cluster_build_equals_local_build's.
    before = sorted((pytester.path / "dask").glob("profile-*"))
    profile = load_or_build(
        str(dense_model_path), digits.x_train, ProfileOptions(batch_size=64), pytester.path / "dask"
    )
    assert sorted((pytester.path / "dask").glob("profile-*")) == before, "the run's profile, loaded, not built again"
    sa, pred = recorded(pytester.path)
    lsa, dsa = profile.lsa()(sa, pred), profile.dsa()(sa, pred)
    top = json.loads((pytester.path / "dask.json").read_text())["top_inputs"]
    assert {t["by"] for t in top} >= {"lsa", "dsa"}
    # The same float64 arithmetic on inputs split into other shards (other BLAS block
    # shapes): rounding differs by a few ulps of the sums (scores ~10, sums of <= 1,347
    # terms: < 1e-12), far inside 1e-9; a wrong trace or training row moves a score by >= 1e-3.
    for t in top:
        assert t["lsa"] == pytest.approx(lsa[t["input"]], rel=0, abs=1e-9)
        assert t["dsa"] == pytest.approx(dsa[t["input"]], rel=0, abs=1e-9)


def test_when_the_cluster_scores() -> None:
    from pytest_sadl.profile.cluster import MIN_TRAIN, use_cluster

    assert not use_cluster(None, 10**6, explicit=False)
    assert not use_cluster("", 10**6, explicit=True)
    assert use_cluster("tcp://h:8786", 10, explicit=True)  # --dask on the command line: always
    assert not use_cluster("tcp://h:8786", MIN_TRAIN - 1, explicit=False)  # the ini's: a large set only
    assert use_cluster("tcp://h:8786", MIN_TRAIN, explicit=False)


def test_sadl_select_dask_unreachable_is_one_line(
    dense_model_path: Path, digits: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from pytest_sadl.cli.main import main
    from pytest_sadl.profile.cluster import ClusterScorer

    monkeypatch.setattr(ClusterScorer, "connect_timeout", 1.0)
    np.savez(tmp_path / "train.npz", x=digits.x_train)
    np.savez(tmp_path / "pool.npz", x=digits.x_test[:50])
    args = [
        "select",
        str(tmp_path / "pool.npz"),
        "--model",
        str(dense_model_path),
        "--train",
        str(tmp_path / "train.npz"),
    ]
    args += ["--rootdir", str(tmp_path), "--cache-dir", str(tmp_path / "c"), "--out", str(tmp_path / "out")]
    assert main([*args, "--sadl-dask", "tcp://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in err[0]
    assert not (tmp_path / "out" / "selection.json").exists()
