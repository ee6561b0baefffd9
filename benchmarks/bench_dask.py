"""A profile build on a Dask LocalCluster (two worker processes) against a local build,
side by side in one run; and, with ``--scores``, DSA, LSA and the class moments on the
cluster against the local criteria.

    nice python benchmarks/bench_dask.py [--workers 2] [--n 60000] [--reps 2]
    SADL_BENCH_CACHE=/tmp/bench-dask nice python benchmarks/bench_dask.py --scores [--train 100000] [--dims 64] [--classes 10]

Builds: the model is the example project's digits ConvNet (8 x 8 images); its 1,437
training images are grown to ``--n`` inputs by shifts of up to two pixels and a little
pixel noise (seeded), the way benchmarks/bench_profile.py grows MNIST (``--n 0``: the
1,437 as they are). Each build is a fresh ``sadl profile build`` process on an empty
cache, as a user or a CI job runs it (TensorFlow imported in it): locally, then with
``--dask`` against workers just started (they import TensorFlow and load the model
during the build), workers started with ``preload=["keras"]`` (``dask worker
--preload keras``: Keras imported before the build) and workers that built before (the
model loaded). The kinds alternate ``--reps`` times and the minimum of each is printed
(the machine is shared), with the ratio to the local build and whether the local and
the Dask profile are bit for bit equal. On one machine the cluster cannot win (its
workers share the cores the local build uses): the ratios show the fixed cost a real
cluster pays before its workers share a large training set's forward pass.

``--scores``: DSA, LSA and MDSA's class moments over benchmarks/bench_scale.py's
class-structured memory-mapped traces (``--train`` x ``--dims``, ``--classes``), on the
cluster (:class:`~pytest_sadl.profile.cluster.ClusterScorer`, the workers opening the
same file) against the local criteria, side by side: the times (set-up and scoring
together: the cluster sets its shards up on first use), their ratio and the largest
difference of the values.
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


def scores(args: argparse.Namespace) -> None:
    """The cluster's DSA, LSA and class moments against the local criteria."""
    import sys
    from types import SimpleNamespace

    import distributed
    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_scale import inputs, traces

    from pytest_sadl.criteria.checks import class_moments
    from pytest_sadl.criteria.surprise import DSA, LSA
    from pytest_sadl.profile.cluster import ClusterScorer

    x, pred = traces(args.train, args.dims, args.classes)
    q, qp = inputs(args.inputs, args.dims, args.classes)
    arrays = {
        "train_ats": x,
        "train_pred": pred,
        "var_threshold": np.array(1e-5),
        "near_singular": np.array("drop"),
        "var_rule": np.array("class"),
    }
    profile = SimpleNamespace(sa_traces=x, sa_pred=pred, lsa_arrays=arrays)
    print(f"training traces {args.train} x {args.dims} ({args.classes} classes, memory-mapped), {args.inputs} inputs")
    local: dict[str, tuple[float, Any]] = {}
    refused: dict[str, str] = {}
    for name, fn in (
        ("DSA", lambda: DSA(x, pred)(q, qp)),
        ("LSA", lambda: LSA.from_arrays(arrays)(q, qp)),
        (
            "moments",
            lambda: {int(c): class_moments(x, np.flatnonzero(pred == c), 16 * 2**20)[:2] for c in np.unique(pred)},
        ),
    ):
        start = time.perf_counter()
        try:
            value = fn()
        except ValueError as exc:  # LSA over too few traces per class: refused locally and on the cluster
            refused[name] = str(exc).split(";")[0]
            continue
        local[name] = (time.perf_counter() - start, value)
    with (
        distributed.LocalCluster(
            n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        ClusterScorer(cluster.scheduler_address, profile) as scorer,
    ):
        remote: dict[str, tuple[float, Any]] = {}
        for name, fn in (
            ("DSA", lambda: scorer.dsa(q, qp)),
            ("LSA", lambda: scorer.lsa(q, qp)),
            ("moments", scorer.class_moments),
        ):
            if name in refused:
                continue
            start = time.perf_counter()
            value = fn()
            remote[name] = (time.perf_counter() - start, value)
    for name in ("DSA", "LSA", "moments"):
        if name in refused:
            print(f"{name:8s} refused: {refused[name]}")
            continue
        (t_l, v_l), (t_r, v_r) = local[name], remote[name]
        if name == "moments":
            _, means, covs = v_r
            diff = max(
                max(float(np.max(np.abs(means[c] - m))), float(np.max(np.abs(covs[c] - s / (np.sum(pred == c) - 1)))))
                for c, (m, s) in v_l.items()
            )
            same = ""
        else:
            diff = float(np.nanmax(np.abs(v_r - v_l)))
            same = f"; bit for bit: {v_r.tobytes() == v_l.tobytes()}"
        print(
            f"{name:8s} local {t_l:7.2f} s  cluster {t_r:7.2f} s  ratio {t_r / t_l:5.2f}x  largest difference {diff:.1e}{same}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--n", type=int, default=60_000, help="training inputs (0: the example's 1,437)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--scores", action="store_true", help="DSA, LSA and the class moments instead of a build")
    parser.add_argument("--train", type=int, default=100_000)
    parser.add_argument("--dims", type=int, default=64)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--inputs", type=int, default=2000)
    args = parser.parse_args()
    if args.scores:
        scores(args)
        return
    builds(args)


def _sadl(tmp: Path, cache: str, *extra: str) -> float:
    """Seconds of one ``sadl profile build`` in a fresh process (as a user runs it)."""
    import subprocess
    import sys

    model = str(EXAMPLE / "models/digits_cnn.keras")
    cmd = [sys.executable, "-m", "pytest_sadl", "profile", "build", "--model", model, "--train", str(tmp / "train.npy")]
    cmd += ["--batch-size", str(ARGS_BATCH[0]), "--cache-dir", str(tmp / cache), "-q", *extra]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - start


ARGS_BATCH = [256]


def builds(args: argparse.Namespace) -> None:
    """``sadl profile build`` locally and with ``--dask`` (cold, preloaded, warm workers)."""
    import distributed
    import numpy as np

    from pytest_sadl.profile.files import load_profile
    from pytest_sadl.profile.lookup import list_profiles

    ARGS_BATCH[0] = args.batch_size
    best: dict[str, float] = {}

    def keep(name: str, value: float) -> None:
        best[name] = min(best.get(name, value), value)

    def kind(name: str, preload: list[str]) -> None:
        with distributed.LocalCluster(
            n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None, preload=preload
        ) as cluster:
            if preload:  # the workers' preload (importing Keras) done before the build is timed
                distributed.Client(cluster.scheduler_address).close()
                time.sleep(0.5)
            keep(name, _sadl(tmp, f"{name}{rep}", "--dask", cluster.scheduler_address))
            keep("warm", _sadl(tmp, f"warm{rep}", "--dask", cluster.scheduler_address))

    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        np.save(tmp / "train.npy", grown(args.n))
        for rep in range(args.reps):
            keep("local", _sadl(tmp, f"local{rep}"))
            kind("cold", [])
            kind("preloaded", ["keras"])
        a, b = (load_profile(list_profiles(tmp / c)[0].path) for c in ("local0", "cold0"))
        same = a.fingerprint == b.fingerprint and np.asarray(a.sa_traces).tobytes() == np.asarray(b.sa_traces).tobytes()
    t = best
    print(
        f"training inputs: {args.n or 1437}, workers: {args.workers}, batch size {args.batch_size}; "
        f"each a fresh `sadl profile build` process (TensorFlow imported in it), minimum of {args.reps} rep(s)"
    )
    print(f"local:                                  {t['local']:7.2f} s")
    print(f"--dask, workers just started (cold):    {t['cold']:7.2f} s  {t['cold'] / t['local']:5.2f}x")
    print(f"--dask, workers preloaded with keras:   {t['preloaded']:7.2f} s  {t['preloaded'] / t['local']:5.2f}x")
    print(f"--dask, workers that built before:      {t['warm']:7.2f} s  {t['warm'] / t['local']:5.2f}x")
    print(f"bit for bit equal (local and cold --dask): {same}")
    print("target (issue 20): a Dask build within 1.5x of the local build")
    for name, what in (("cold", "workers just started"), ("preloaded", "workers preloaded"), ("warm", "workers up")):
        ratio = t[name] / t["local"]
        print(f"  {'met' if ratio <= 1.5 else 'MISSED':6s} {what}: {ratio:.2f}x")


if __name__ == "__main__":
    main()
