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

distributed = pytest.importorskip("distributed")


def test_shards_are_whole_batches_of_the_canonical_order() -> None:
    assert shards(10, 3, batches_per_shard=2) == [(0, 6), (6, 10)]
    assert shards(12, 3, batches_per_shard=2) == [(0, 6), (6, 12)]
    assert shards(0, 3) == []
    assert all(a % (64 * 8) == 0 for a, _ in shards(1347, 64))


def test_local_cluster_build_equals_local_build(dense_model_path: Path, digits: Any, tmp_path: Path) -> None:
    options = ProfileOptions(batch_size=64)  # 1,347 rows: three shards of eight batches on two workers
    # the rows in another order than the canonical one: the shards must follow the canonical order
    x = digits.x_train[::-1].copy()
    local = load_or_build(str(dense_model_path), x, options, tmp_path / "local")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        remote = load_or_build(str(dense_model_path), x, options, tmp_path / "dask", dask=cluster.scheduler_address)
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


def test_dask_is_imported_only_for_a_dask_build() -> None:
    code = (
        "import sys, pytest_sadl.plugin.hooks, pytest_sadl.profile.lookup, pytest_sadl.cli.main; "
        "print([m for m in ('dask', 'distributed') if m in sys.modules])"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert run.stdout.strip() == "[]"
