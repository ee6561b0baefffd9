"""Benchmark: the profile build on a library model against its plain forward pass.

timm's ``efficientnet_b0`` (built from its config, no weights; ``--model`` picks another timm
model, or ``tv:mobilenet_v3_small`` a torchvision one) on ``--n`` generated images of
``--px`` pixels, one torch thread. Alternating, ``--reps`` times each, in one process:

* ``forward``: ``model(batch)`` over the same data in batches of ``--batch-size``, under
  ``torch.no_grad()`` in eval mode: what the model costs without pytest-sadl;
* ``traces``: :meth:`TorchTraceModel.traces` on a model already probed (every coverage
  layer tapped, the per-channel means and extrema reduced);
* ``build``: the default profile, :func:`load_or_build` with ``rebuild=True`` into a
  temporary cache (the probe pass, fingerprints, the traced pass, neuron ranges, LSA and
  DSA set-up, the atomic write).

The minimum wall time and process CPU time of each are printed, and the ratio of the minima
to ``forward`` (the target: the build within 1.3x of the forward pass), wall and CPU, with the
machine's load (on a shared machine the CPU time is the steadier measure). The issue that asked
for it measured 5.4x before timm's fused ``BatchNormAct2d`` was measured once.

Needs torch, timm and torchvision that import together (docs/library-models.md, "Installing
the libraries"). Usage: python benchmarks/bench_library_profile.py [--n 60 --px 128 --reps 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def build_model(name: str, classes: int) -> Any:
    if name.startswith("tv:"):
        import torchvision.models

        return getattr(torchvision.models, name[3:])(weights=None, num_classes=classes)
    import timm

    return timm.create_model(name, pretrained=False, num_classes=classes)


def timed(run: Callable[[], Any]) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - t0, time.process_time() - c0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="efficientnet_b0", help="timm model, or tv:NAME (default %(default)s)")
    ap.add_argument("--n", type=int, default=60, help="images (default %(default)s)")
    ap.add_argument("--px", type=int, default=128, help="image size (default %(default)s)")
    ap.add_argument("--batch-size", type=int, default=32, help="batch size (default %(default)s)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions of each (default %(default)s)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default %(default)s)")
    args = ap.parse_args(argv)

    import torch

    from pytest_sadl.capture.data import load_training_data
    from pytest_sadl.capture.torch import TorchTraceModel
    from pytest_sadl.profile.build import ProfileOptions
    from pytest_sadl.profile.lookup import load_or_build

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build_model(args.model, 4).eval()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.n, 3, args.px, args.px)).astype(np.float32)
    xt = torch.from_numpy(x)
    bs = args.batch_size

    def forward() -> None:
        with torch.no_grad():
            for batch in xt.split(bs):
                model(batch)

    tm = TorchTraceModel(model)
    tm.prepare(load_training_data(x[:bs], what="inputs"))
    cache = tempfile.mkdtemp(prefix="sadl-bench-lib-")
    opts = ProfileOptions(batch_size=bs)
    runs: dict[str, Callable[[], Any]] = {
        "forward": forward,
        "traces": lambda: tm.traces(x, batch_size=bs),
        "build": lambda: load_or_build(model, x, opts, cache, rebuild=True),
    }
    for run in runs.values():  # warm-up: first calls, allocator, the cache directory
        run()
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
    for _ in range(args.reps):
        for name, run in runs.items():
            times[name].append(timed(run))
    print(
        f"{args.model}: {args.n} images of {args.px} px, batch {bs}, {args.threads} thread(s), "
        f"{len(tm.coverage_layers)} coverage layers, SA {tm.sa_layers}; min of {args.reps} alternating reps"
    )
    base_wall = min(w for w, _ in times["forward"])
    base_cpu = min(c for _, c in times["forward"])
    for name, ts in times.items():
        wall, cpu = min(w for w, _ in ts), min(c for _, c in ts)
        print(f"  {name:8s} wall {wall:7.3f} s ({wall / base_wall:4.2f}x)   cpu {cpu:7.3f} s ({cpu / base_cpu:4.2f}x)")
    # on a shared machine (load above its cores) the wall times measure the waiting too: the
    # process CPU time is then the steadier measure of the work done
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    for what, i, base in (("wall", 0, base_wall), ("cpu", 1, base_cpu)):
        ratio = min(t[i] for t in times["build"]) / base
        print(f"build / forward ({what}) = {ratio:.2f}x (target 1.3x): {'met' if ratio <= 1.3 else 'MISSED'}")
    print(f"load average {load:.1f} on {cores} cores" + (": judge by the cpu ratio" if load > cores else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
