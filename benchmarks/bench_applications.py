"""Benchmark: the defaults on ``keras.applications`` models (issue 21), measured.

MobileNetV2, EfficientNetB0 and ResNet50, built with ``weights=None`` at 32x32 with a
3-class head, trained briefly (``--epochs``, batch 16, Adam) on scikit-learn's bundled
digits 0-2 (537 images, 8x8 upscaled to 32x32 and repeated to three channels; no
download). Each model is trained once and cached in ``benchmarks/.cache`` (or
``$SADL_BENCH_CACHE``). For each model, in a fresh subprocess, printed:

* the default SA layer and coverage layers the trace model picks (count, neurons);
* the predicted classes of the training data (a briefly trained BatchNorm network in
  inference mode often predicts one class: then DSA is undefined, whatever the rule);
* what each variance rule leaves on the SA layer: ``paper`` (a neuron whose variance is
  below ``var_threshold`` in any class is dropped from all, the paper's filter) and
  ``class`` (each class's KDE over the neurons that vary in that class, the default), and
  whether LSA, DSA and MDSA can be set up with it;
* the default profile build (:func:`load_or_build` on an empty cache) against
  ``model.predict`` (batch 256) over the same training data, at the 441 training images
  and at those images tiled ``--repeat`` times (3,528 by default, a realistic training
  set: at 441 the fixed costs of a build, probing the model and tracing its graph with
  every layer tapped, dominate). Each size is timed in two fresh subprocesses, one
  calling ``predict`` first and one the build first, each then calling both again in
  ``--rounds`` interleaved rounds (wall and process CPU time):

  - *cold*: the first call of a fresh process (TensorFlow imported and the model
    loaded, nothing run on it): ``predict`` traces its function, the build probes the
    model and traces its tapped pass. The build of the build-first process against the
    ``predict`` of the predict-first process, in ``--reps`` such pairs, the pair of the
    median wall ratio printed (every pair's ratio beside it: one cold call is one sample).
  - *warm*: the later calls, after both ran once in the process (the minimum over both
    processes' rounds, wall and CPU apart: a second call is often slower than the
    steady state): ``predict`` reuses its traced function, and the build the model's
    probe and tapped pass (kept on the model, as ``predict_function`` is); this is
    ``bench_profile.py``'s comparison, both warmed up. Beside it, the build's pass
    alone (a new trace model's ``traces_and_ranges``: every coverage layer tapped and
    folded into its ranges), which splits the build's cost into the tapped forward pass
    and the rest (fingerprints of model and data, the SA set-ups, the atomic write).

  Each ratio is printed against the <= 1.3x target of ``bench_profile.py`` as ``met`` or
  ``MISSED``, wall and CPU (on two shared cores the CPU time is the steadier measure),
  with the build's peak resident memory above the process's before it (``VmHWM`` after a
  ``clear_refs`` reset; TensorFlow allocates outside ``tracemalloc``), from its cold call;
* the size of the JSON and HTML reports of a run that recorded 96 held-back digits
  (the results computed by the engine from the profile and those inputs' traces).

Usage::

    python benchmarks/bench_applications.py [--models MobileNetV2,EfficientNetB0,ResNet50] [--epochs 4] [--repeat 8]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from _memory import SOURCE  # the children's status() and reset_peak()

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("SADL_BENCH_CACHE", Path(__file__).resolve().parent / ".cache"))
MODELS = ("MobileNetV2", "EfficientNetB0", "ResNet50")
TARGET = 1.3  # build / predict, as bench_profile.py

CHILD = r"""
import json, os, sys, tempfile, time, warnings
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
from pathlib import Path
import numpy as np
import keras
from sklearn.datasets import load_digits

name, cache, epochs = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
res = {"model": name}

{MEMORY}
d = load_digits()
keep = d.target < 3
x_all = np.kron(d.images[keep] / 16.0, np.ones((4, 4)))[..., None].repeat(3, axis=-1).astype("float32")
y_all = d.target[keep]
x, y, x_test = x_all[:-96], y_all[:-96], x_all[-96:]
path = cache / f"app-{name}-e{epochs}.keras"
if not path.exists():
    keras.utils.set_random_seed(0)
    m = getattr(keras.applications, name)(weights=None, input_shape=(32, 32, 3), classes=3)
    m.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    t = time.perf_counter()
    m.fit(x, y, epochs=epochs, batch_size=16, verbose=0)
    res["fit_s"] = time.perf_counter() - t
    cache.mkdir(parents=True, exist_ok=True)
    m.save(path)
model = keras.saving.load_model(path, compile=False)

from pytest_sadl.capture import TraceModel
from pytest_sadl.criteria.surprise import DSA, LSA, MDSA
tm = TraceModel(model)
res["sa_layers"] = tm.sa_layers
res["sa_neurons"] = sum(tm.sa_sizes)
res["coverage_layers"] = len(tm.coverage_layers)
res["coverage_neurons"] = sum(tm.coverage_sizes)
tr = tm.traces(x)
pred = tr.pred
res["train_accuracy"] = float((pred == y).mean())
res["pred_classes"] = np.bincount(pred, minlength=3).tolist()
sa = tr.sa
t = 1e-5
per_class = {int(c): int((sa[pred == c].astype(np.float64).var(0) >= t).sum()) for c in np.unique(pred) if (pred == c).sum() >= 2}
res["varying_per_class"] = per_class
res["paper_kept"] = int(np.all([sa[pred == c].astype(np.float64).var(0) >= t for c in per_class], axis=0).sum())
def attempt(make):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            make()
            return "ok"
        except ValueError as exc:
            return str(exc)[:160]
for rule in ("paper", "class"):
    res[f"lsa_{rule}"] = attempt(lambda: LSA(sa, pred, var_rule=rule))
    res[f"mdsa_{rule}"] = attempt(lambda: MDSA(sa, pred, var_rule=rule))
res["dsa"] = attempt(lambda: DSA(sa, pred))
del tr

# a profile for the reports (built as the timed builds are, untimed here)
from pytest_sadl.profile.build import ProfileOptions
from pytest_sadl.profile.lookup import load_or_build
with tempfile.TemporaryDirectory() as tmp:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            profile = load_or_build(model, x, ProfileOptions(), tmp, rebuild=True)
        res["build"] = "ok"
    except Exception as exc:
        res["build"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        profile = None
    if profile is not None:
        from pytest_sadl.engine import ProfileView, compute
        from pytest_sadl.config import SadlOptions
        from pytest_sadl.records import Batch, TestRecord
        from pytest_sadl.report.html import render_html
        from pytest_sadl.results import Results, write_json
        ptm = profile.trace_model(model)
        got = ptm.traces(x_test)
        batch = Batch(got.sa, got.coverage, got.pred, extrema=got.coverage_extrema, output=got.output)
        records = [TestRecord("tests/test_app.py::test_predict", 0, "default", batches=[batch])]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results = compute(ProfileView.of(profile), records, SadlOptions(), {"name": name})
        doc = json.loads(json.dumps(results.to_dict(), default=float))
        write_json(results.to_dict(), Path(tmp) / "r.json")
        doc = json.loads((Path(tmp) / "r.json").read_text())
        html = render_html(Results.from_dict(doc))
        res["json_kib"] = (Path(tmp) / "r.json").stat().st_size / 1024
        res["html_kib"] = len(html.encode()) / 1024
        res["metrics"] = {k: (None if m.value is None else round(100 * m.value, 2)) for k, m in results.metrics.items()}
        res["warnings"] = [w[:160] for w in results.warnings]
print("RESULT " + json.dumps(res))
"""

TIMING = r"""
import json, os, sys, tempfile, time, warnings
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
from pathlib import Path
import numpy as np
import keras
from sklearn.datasets import load_digits

name, cache, epochs, repeat, first, rounds = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
d = load_digits()
keep = d.target < 3
x_all = np.kron(d.images[keep] / 16.0, np.ones((4, 4)))[..., None].repeat(3, axis=-1).astype("float32")
x = np.tile(x_all[:-96], (repeat, 1, 1, 1))
model = keras.saving.load_model(cache / f"app-{name}-e{epochs}.keras", compile=False)
keras.ops.add(np.float32(1), np.float32(1))  # the backend's runtime up, nothing of the model run
from pytest_sadl.profile.build import ProfileOptions
from pytest_sadl.profile.lookup import load_or_build

{MEMORY}
def predict():
    model.predict(x, batch_size=256, verbose=0)

def build():
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        load_or_build(model, x, ProfileOptions(), tmp, rebuild=True)

def tapped_pass():
    from pytest_sadl.capture import TraceModel
    TraceModel(model).traces_and_ranges(x, batch_size=256)  # the build's pass alone

res = {"n": len(x), "first": first}
order = [("predict", predict), ("build", build)]
if first == "build":
    order.reverse()

def timed(what, fn, call):
    before = status()["VmRSS"]
    reset_peak()
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    res.setdefault(f"{what}_{call}", []).append((time.perf_counter() - t0, time.process_time() - c0))
    res[f"{what}_{call}_peak_mib"] = (status()["VmHWM"] - before) / 2**20

for what, fn in order:
    timed(what, fn, "cold")
for _ in range(rounds):  # warm: interleaved rounds, the minimum kept
    for what, fn in order + [("pass", tapped_pass)]:
        timed(what, fn, "warm")
print("RESULT " + json.dumps(res))
"""
CHILD, TIMING = (script.replace("{MEMORY}", SOURCE) for script in (CHILD, TIMING))


def _child(code: str, *args: Any) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(  # in ROOT: python -c puts the working folder first on sys.path
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    raise RuntimeError(f"{args[0]} failed:\n{proc.stderr[-3000:]}")


def timings(name: str, epochs: int, repeat: int, rounds: int, reps: int) -> dict[str, Any]:
    """Cold and warm build and predict at the 441 images tiled ``repeat`` times: ``reps``
    pairs of fresh processes, one calling predict first, one the build (see the module
    docstring). Cold: the pair whose build/predict wall ratio is the median of the pairs'
    (its CPU times beside); warm: the minimum, wall and CPU apart, over every process's
    ``rounds`` rounds."""
    pairs = [
        (
            _child(TIMING, name, CACHE, epochs, repeat, "predict", rounds),
            _child(TIMING, name, CACHE, epochs, repeat, "build", rounds),
        )
        for _ in range(reps)
    ]
    pairs.sort(key=lambda pb: pb[1]["build_cold"][0][0] / pb[0]["predict_cold"][0][0])
    p, b = pairs[(len(pairs) - 1) // 2]
    out: dict[str, Any] = {"n": p["n"], "peak_mib": b["build_cold_peak_mib"]}
    out["cold"] = {"predict": p["predict_cold"][0], "build": b["build_cold"][0]}
    out["cold_ratios"] = [pb[1]["build_cold"][0][0] / pb[0]["predict_cold"][0][0] for pb in pairs]
    out["warm"] = {
        what: [min(t[i] for pb in pairs for run in pb for t in run[f"{what}_warm"]) for i in (0, 1)]
        for what in ("predict", "build", "pass")
    }
    return out


def measure(name: str, epochs: int) -> dict[str, Any]:
    """The model (trained and cached on first use) described, and a run's reports."""
    return _child(CHILD, name, CACHE, epochs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated keras.applications names")
    ap.add_argument("--epochs", type=int, default=4, help="training epochs of 34 steps (default %(default)s)")
    ap.add_argument(
        "--repeat",
        type=int,
        default=8,
        help="also time the build at the images tiled this many times (default %(default)s)",
    )
    ap.add_argument("--rounds", type=int, default=3, help="warm rounds in each process (default %(default)s)")
    ap.add_argument("--reps", type=int, default=3, help="pairs of fresh processes per size (default %(default)s)")
    args = ap.parse_args(argv)
    rows: list[tuple[str, dict[str, Any]]] = []
    for name in args.models.split(","):
        r = measure(name, args.epochs)
        print(f"\n== {name} (weights=None, 32x32, 3 classes, {args.epochs} epochs)")
        print(f"  default SA layer      {r['sa_layers']} ({r['sa_neurons']:,d} neurons)")
        print(f"  coverage layers       {r['coverage_layers']} ({r['coverage_neurons']:,d} neurons)")
        print(f"  predicted classes     {r['pred_classes']} (training accuracy {100 * r['train_accuracy']:.1f}%)")
        print(f"  varying per class     {r['varying_per_class']}; paper's rule keeps {r['paper_kept']}")
        for rule in ("paper", "class"):
            print(f"  LSA  var_rule={rule:5s}  {r[f'lsa_{rule}']}")
            print(f"  MDSA var_rule={rule:5s}  {r[f'mdsa_{rule}']}")
        print(f"  DSA                   {r['dsa']}")
        print(f"  build                 {r['build']}")
        if "json_kib" in r:
            print(f"  reports               JSON {r['json_kib']:.0f} KiB, HTML {r['html_kib']:.0f} KiB")
            print(f"  metrics (%)           {r['metrics']}")
            for w in r["warnings"]:
                print(f"  warning               {w}")
        for repeat in sorted({1, args.repeat}):
            t = timings(name, args.epochs, repeat, args.rounds, args.reps)
            rows.append((name, t))
            print(f"  {t['n']:,d} inputs, build peak memory {t['peak_mib']:.0f} MiB above the process's")
            print(f"  cold wall ratios of the {args.reps} pairs: {', '.join(f'{r:.2f}x' for r in t['cold_ratios'])}")
            for call in ("cold", "warm"):
                print("  " + _ratio_line(call, t[call]))
            (pw, pc), (sw, sc) = t["warm"]["predict"], t["warm"]["pass"]
            print(
                f"  warm, the build's pass alone (every layer tapped, ranges folded): {sw:.2f} s / {sc:.2f} s "
                f"CPU = {sw / pw:.2f}x / {sc / pc:.2f}x predict; the rest of the build (fingerprints, "
                f"SA set-up, write) {t['warm']['build'][0] - sw:.2f} s"
            )
    print("\n| model | inputs | call | predict wall / CPU | build wall / CPU | ratio wall | ratio CPU |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, t in rows:
        for call in ("cold", "warm"):
            (pw, pc), (bw, bc) = t[call]["predict"], t[call]["build"]
            print(
                f"| {name} | {t['n']:,d} | {call} | {pw:.2f} s / {pc:.2f} s | {bw:.2f} s / {bc:.2f} s "
                f"| {bw / pw:.2f}x {_verdict(bw / pw)} | {bc / pc:.2f}x {_verdict(bc / pc)} |"
            )
    return 0


def _verdict(ratio: float) -> str:
    return "met" if ratio <= TARGET else "MISSED"


def _ratio_line(call: str, t: dict[str, Any]) -> str:
    (pw, pc), (bw, bc) = t["predict"], t["build"]
    return (
        f"{call}: build {bw:.2f} s / predict {pw:.2f} s = {bw / pw:.2f}x wall ({_verdict(bw / pw)}), "
        f"CPU {bc:.2f} s / {pc:.2f} s = {bc / pc:.2f}x ({_verdict(bc / pc)}); target <= {TARGET}x"
    )


if __name__ == "__main__":
    raise SystemExit(main())
