"""Benchmark: building the training profile against a plain ``model.predict``.

On an MNIST-sized set (default 60,000 synthetic 28x28x1 inputs) through a small ConvNet
(Conv2D 32 -> MaxPool -> Conv2D 64 -> MaxPool -> Flatten -> Dropout -> Dense 128 (the SA
layer) -> Dense 10), it prints, side by side:

* ``predict``: ``model.predict(x, batch_size=B)``, the forward pass alone;
* ``traces``: :meth:`TraceModel.traces` (the same pass with every coverage layer tapped),
  warmed up (XLA-compiled) first as ``predict`` is; the compile time is printed apart;
* ``build``: :func:`load_or_build` on an empty cache with ``dsa_precompute=False``
  (XLA compile + traces + neuron ranges + LSA set-up + fingerprints + atomic write);
* ``build+dsa``: the same with the DSA precompute (every training trace's nearest
  other-class distance, O(n^2 d), done by the engine);
* ``hit``: :func:`load_or_build` on a warm cache (order-free fingerprint of model and
  data + memory-mapped load + digest verification + validation) and the default SC
  bounds from the held-out scores stored in the profile (the target: under 1 s), then
  ``profile.lsa()`` and ``profile.dsa()`` set-up (printed apart);

and their ratios to ``predict``. Each measurement runs in a fresh subprocess (TensorFlow
is imported and warmed up on one batch first, outside the timing), repeated ``--reps``
times, interleaved, and the minimum wall time and the minimum process CPU time are
reported (on a shared machine the CPU time is the steadier measure of the work done).

Peak memory: TensorFlow allocates outside Python's tracemalloc, so the peak resident
set (``VmHWM`` of ``/proc/self/status``) is read after the measured call, having been
reset (``/proc/self/clear_refs`` = 5) right before it; the figure is the peak above the
resident set at the start of the call. It is compared with the size of the traces
(the SA and coverage traces and the output of all inputs) plus one batch of full
feature maps of every layer.

Usage::

    python benchmarks/bench_profile.py [--n 60000] [--reps 3] [--batch-size 256] [--no-dsa]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, os, sys, time
from pathlib import Path
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np

def status():
    out = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM"):
            out[k] = int(v.split()[0]) * 1024
    return out

def reset_peak():
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")

what, model_path, data_path, cache, bs = sys.argv[1:6]
bs = int(bs)
import keras
from pytest_sadl.profile import ProfileOptions, load_or_build
from pytest_sadl.traces import TraceModel
model = keras.saving.load_model(model_path, compile=False)
x = np.load(data_path)
res = {}
if what == "predict":
    model.predict(x[: bs + 7], batch_size=bs, verbose=0)  # both batch shapes traced
    run = lambda: model.predict(x, batch_size=bs, verbose=0)
elif what == "traces":
    tm = TraceModel(model, jit=True)  # what a large pass uses; warmed up like predict
    t = time.perf_counter()
    tm.traces(x[: bs + 7], batch_size=bs)
    res["warmup"] = time.perf_counter() - t
    run = lambda: tm.traces(x, batch_size=bs)
elif what in ("build", "build+dsa"):
    TraceModel(model).traces(x[: bs + 7], batch_size=bs)  # warm TF up as the others do
    opts = ProfileOptions(batch_size=bs, dsa_precompute=(what == "build+dsa"))
    run = lambda: load_or_build(model, x, opts, cache, rebuild=True)
elif what == "hit":
    opts = ProfileOptions(batch_size=bs, dsa_precompute=sys.argv[6] == "1")
    TraceModel(model).traces(x[: bs + 7], batch_size=bs)
    from pytest_sadl.engine import ProfileView, default_bounds, stored_held_out_sa
    first = load_or_build(model, x, opts, cache)  # the first session computes and stores the bounds
    t = time.perf_counter()
    stored_held_out_sa(first, lambda: ProfileView.of(first))
    res["bounds_first"] = time.perf_counter() - t
    del first
    def run():
        p = load_or_build(model, x, opts, cache)
        assert not p.built, "expected a cache hit"
        t = time.perf_counter()
        held = stored_held_out_sa(p, lambda: ProfileView.of(p))
        [default_bounds(v) for v in held.values()]
        res["bounds"] = time.perf_counter() - t
        res["load_and_bounds"] = time.perf_counter() - t0
        t = time.perf_counter(); p.lsa(); res["lsa_setup"] = time.perf_counter() - t
        t = time.perf_counter(); p.dsa(); res["dsa_setup"] = time.perf_counter() - t
        return p
else:
    raise SystemExit(what)
before = status()["VmRSS"]
reset_peak()
t0, c0 = time.perf_counter(), time.process_time()
out = run()
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
peak = status()["VmHWM"]
res.update(wall=wall, cpu=cpu, extra_peak=peak - before, rss_before=before)
if what == "hit":
    res["wall"] = wall - res["lsa_setup"] - res["dsa_setup"]
    res["file_size"] = sum(f.stat().st_size for f in out.path.iterdir())
print("RESULT " + json.dumps(res))
'''


def make_inputs(workdir: Path, n: int, seed: int = 0) -> tuple[Path, Path, dict[str, int]]:
    """Save the ConvNet and ``n`` synthetic inputs; return their paths and layer sizes."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import numpy as np
    from keras import layers

    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            layers.Conv2D(32, 3, activation="relu", name="conv1"),
            layers.MaxPooling2D(2, name="pool1"),
            layers.Conv2D(64, 3, activation="relu", name="conv2"),
            layers.MaxPooling2D(2, name="pool2"),
            layers.Flatten(name="flatten"),
            layers.Dropout(0.5, name="dropout"),
            layers.Dense(128, activation="relu", name="dense"),
            layers.Dense(10, activation="softmax", name="probs"),
        ],
        name="mnist_cnn",
    )
    rng = np.random.default_rng(seed)
    # MNIST-like: mostly dark pixels, a bright blob whose position depends on a "class",
    # so that the untrained net still predicts several classes
    x = (rng.random((n, 28, 28, 1), dtype=np.float32) * 0.2).astype(np.float32)
    cls = rng.integers(0, 10, n)
    for c in range(10):
        r, col = 4 + 2 * (c % 5), 4 + 10 * (c // 5)
        x[cls == c, r : r + 8, col : col + 8, 0] += 0.8
    model_path = workdir / "mnist_cnn.keras"
    model.save(model_path)
    data_path = workdir / "x.npy"
    np.save(data_path, x)
    per_input_maps = sum(int(np.prod(layer.output.shape[1:])) for layer in model.layers)
    sizes = {
        "sa": 128,
        "coverage": 32 + 32 + 64 + 64 + 128 + 10,
        "output": 10,
        "per_input_feature_maps": per_input_maps,
    }
    return model_path, data_path, sizes


def measure(what: str, model: Path, data: Path, cache: Path, bs: int, dsa: bool) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), what, str(model), str(data), str(cache), str(bs), "1" if dsa else "0"],
        capture_output=True, text=True, env=env,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{what} failed:\n{proc.stderr[-3000:]}")


def mib(n: float) -> str:
    return f"{n / 2**20:7.1f} MiB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=60000, help="training inputs (default %(default)s)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per measurement (default %(default)s)")
    ap.add_argument("--batch-size", type=int, default=256, help="batch size (default %(default)s)")
    ap.add_argument("--no-dsa", action="store_true", help="skip the build with the O(n^2) DSA precompute")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="sadl-bench-") as tmp:
        work = Path(tmp)
        model, data, sizes = make_inputs(work, args.n)
        # each build kind writes its own cache; the hit reads the most complete one
        caches = {"build": work / "cache-build", "build+dsa": work / "cache-dsa", "predict": work / "unused", "traces": work / "unused"}
        caches["hit"] = caches["build"] if args.no_dsa else caches["build+dsa"]
        kinds = ["predict", "traces", "build"] + ([] if args.no_dsa else ["build+dsa"]) + ["hit"]
        results: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
        for rep in range(args.reps):
            for kind in kinds:
                if kind == "build+dsa" and rep > 0:
                    continue  # minutes per run: once is enough to see the order of magnitude
                results[kind].append(measure(kind, model, data, caches[kind], args.batch_size, not args.no_dsa))
                print(f"  rep {rep + 1} {kind:10} {results[kind][-1]['wall']:8.2f}s", file=sys.stderr, flush=True)

        best = {k: min(v, key=lambda r: r["wall"]) for k, v in results.items()}
        base = best["predict"]["wall"]
        n, bs = args.n, args.batch_size
        traces_bytes = 4 * n * (sizes["sa"] + sizes["coverage"] + sizes["output"])
        batch_maps = 4 * bs * sizes["per_input_feature_maps"]
        bound = traces_bytes + batch_maps
        print(f"bench_profile: {n} inputs 28x28x1, ConvNet 'mnist_cnn', batch {bs}, "
              f"min of {args.reps} runs (build+dsa: 1), each in a fresh process; {os.cpu_count()} cores")
        cbase = min(r["cpu"] for r in results["predict"])
        print(f"{'':12} {'wall':>9} {'x predict':>10} {'cpu':>9} {'x predict':>10} {'peak extra RSS':>16}")
        for k in kinds:
            r = best[k]
            c = min(x["cpu"] for x in results[k])
            print(f"{k:12} {r['wall']:8.2f}s {r['wall'] / base:9.2f}x {c:8.2f}s {c / cbase:9.2f}x {mib(r['extra_peak']):>16}")
        print(f"XLA compile + first two batches of the traces model (excluded above, included in build): "
              f"{min(r['warmup'] for r in results['traces']):.2f}s")
        hit = best["hit"]
        print(f"cache hit: {hit['wall']:.3f}s (fingerprints + load + digests + checks; profile {mib(hit['file_size']).strip()}), "
              f"then lsa() set-up {hit['lsa_setup']:.3f}s, dsa() set-up {hit['dsa_setup']:.3f}s")
        print(f"warm profile load + default SC bounds (stored held-out scores): {hit['load_and_bounds']:.3f}s "
              f"(target < 1 s; the bounds alone {hit['bounds']:.3f}s, computed once by the first session in "
              f"{max(r['bounds_first'] for r in results['hit']):.2f}s)")
        cpu = {k: min(x["cpu"] for x in v) for k, v in results.items()}
        print(f"cpu-time ratio build/predict = {cpu['build'] / cpu['predict']:.2f}, traces/predict = "
              f"{cpu['traces'] / cpu['predict']:.2f} (process CPU time, steadier than wall time on a shared machine)")
        print(f"ratio build/predict = {best['build']['wall'] / base:.2f} (target <= 1.3); "
              f"traces/predict = {best['traces']['wall'] / base:.2f}"
              + ("" if args.no_dsa else f"; build+dsa/predict = {best['build+dsa']['wall'] / base:.2f}"))
        print(f"memory: traces of all inputs {mib(traces_bytes).strip()} + one batch of feature maps "
              f"{mib(batch_maps).strip()} = {mib(bound).strip()}; peak extra RSS of traces "
              f"{mib(best['traces']['extra_peak']).strip()} ({best['traces']['extra_peak'] / bound:.2f}x), "
              f"of build {mib(best['build']['extra_peak']).strip()} ({best['build']['extra_peak'] / bound:.2f}x), "
              f"of predict {mib(best['predict']['extra_peak']).strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
