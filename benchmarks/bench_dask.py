"""A profile build on a Dask LocalCluster (two worker processes) against a local build of
the example project's training data, side by side in one run; prints the times, their
ratio and whether the two profiles are bit for bit equal.

    nice python benchmarks/bench_dask.py [--workers 2]

On one machine the cluster cannot win: it shows the fixed cost (worker start, the model
loaded on each worker, the shards sent) that a real cluster pays before its workers
share a large training set's forward pass.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "example_project"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    import distributed

    from pytest_sadl.profile.build import ProfileOptions
    from pytest_sadl.profile.lookup import load_or_build

    model, train = str(EXAMPLE / "models/digits_cnn.keras"), str(EXAMPLE / "data/train.npz")
    options = ProfileOptions(batch_size=256)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        local = load_or_build(model, train, options, Path(tmp) / "local")
        t_local = time.perf_counter() - start
        start = time.perf_counter()
        with distributed.LocalCluster(
            n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster:
            t_start = time.perf_counter() - start
            remote = load_or_build(model, train, options, Path(tmp) / "dask", dask=cluster.scheduler_address)
        t_dask = time.perf_counter() - start
    same = remote.fingerprint == local.fingerprint and remote.sa_traces.tobytes() == local.sa_traces.tobytes()
    print(f"training inputs: {local.n_train}, workers: {args.workers}")
    print(f"local build:       {t_local:7.2f} s")
    print(f"LocalCluster build:{t_dask:7.2f} s (of which {t_start:.2f} s starting the cluster)")
    print(f"ratio dask/local:  {t_dask / t_local:7.2f}x; bit for bit equal: {same}")


if __name__ == "__main__":
    main()
