"""A profile build on a Dask LocalCluster (two worker processes) against a local build,
side by side in one run; prints the times, their ratio and whether the two profiles are
bit for bit equal.

    nice python benchmarks/bench_dask.py [--workers 2] [--n 60000]

The model is the example project's digits ConvNet (8 x 8 images); its 1,437 training
images are grown to ``--n`` inputs by shifts of up to two pixels and a little pixel
noise (seeded), the way benchmarks/bench_profile.py grows MNIST. ``--n 0`` builds on the
1,437 images as they are.

Two Dask times are printed: with the cluster's start (worker processes, TensorFlow
imported in each) and the build alone, on a cluster already up (a real cluster's case:
``dask scheduler`` and ``dask worker`` run before the build). On one machine the cluster
cannot win (its two workers share the cores the local build uses); the ratio shows the
fixed cost (the model loaded on each worker, the shards sent) a real cluster pays before
its workers share a large training set's forward pass.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[1] / "example_project"


def grown(n: int) -> Any:
    """The example's training images grown to ``n`` by shifts and noise (seeded)."""
    import numpy as np

    x = np.load(EXAMPLE / "data/train.npz")["x"]
    if n <= len(x):
        return x[:n] if n else x
    rng = np.random.default_rng(0)
    parts, total = [x], len(x)
    while total < n:
        dy, dx = rng.integers(-2, 3, size=2)
        shifted = np.roll(x, (int(dy), int(dx)), axis=(1, 2))
        noisy = shifted + rng.normal(0, 0.02, size=x.shape).astype(np.float32)
        parts.append(np.clip(noisy, 0, None).astype(np.float32))
        total += len(x)
    return np.concatenate(parts)[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--n", type=int, default=60_000, help="training inputs (0: the example's 1,437)")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    import distributed

    from pytest_sadl.profile.build import ProfileOptions
    from pytest_sadl.profile.lookup import load_or_build

    model, train = str(EXAMPLE / "models/digits_cnn.keras"), grown(args.n)
    options = ProfileOptions(batch_size=args.batch_size)
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
            t_build = time.perf_counter() - start - t_start
            again = time.perf_counter()  # a second build on the warm cluster: the models are loaded
            load_or_build(model, train, options, None, dask=cluster.scheduler_address)
            t_warm = time.perf_counter() - again
        t_dask = time.perf_counter() - start
    same = remote.fingerprint == local.fingerprint and remote.sa_traces.tobytes() == local.sa_traces.tobytes()
    print(f"training inputs: {local.n_train}, workers: {args.workers}, batch size {args.batch_size}")
    print(f"local build:                      {t_local:7.2f} s")
    print(f"LocalCluster, start + build:      {t_dask:7.2f} s (of which {t_start:.2f} s starting the cluster)")
    print(f"build on a cluster already up:    {t_build:7.2f} s")
    print(f"again, workers' models loaded:    {t_warm:7.2f} s (not cached)")
    print(
        f"ratio dask/local: {t_dask / t_local:5.2f}x with the start, {t_build / t_local:5.2f}x on a running cluster, "
        f"{t_warm / t_local:5.2f}x warm; bit for bit equal: {same}"
    )


if __name__ == "__main__":
    main()
