"""Benchmark: tracing on Keras' JAX backend against the TensorFlow backend.

For the example project (``example_project/models/digits_cnn.keras`` on its training
data, ``example_project/data/train.npz``), each backend in a fresh subprocess
(``KERAS_BACKEND``), it times:

* ``predict``: ``model.predict(x, batch_size=B)``, warmed up first (the reference);
* ``traces, first``: ``TraceModel(model)`` plus its first ``.traces(x)``: the probe of the
  layers, the compilation (``tf.function``; ``jax.jit``) and the pass;
* ``traces``: a second ``.traces(x)`` on the same trace model (compiled already);
* ``record``: one recorded call's capture, ``call_and_trace`` on 32 inputs (the per-call
  cost a marked test's ``predict`` pays), warm;

repeated ``--reps`` times, interleaved, minimum wall time; then prints the two backends
side by side with the JAX / TensorFlow ratio, and the largest difference between the two
backends' traces.

Usage::

    python benchmarks/bench_backends.py [--reps 3] [--batch-size 256]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
sys.path.insert(0, {root!r})
import keras
from pytest_sadl.capture.model import load_model
from pytest_sadl.capture import TraceModel

x = np.load({train!r})["x"]
model = load_model({model!r})
model.predict(x[:{bs}], batch_size={bs}, verbose=0)
out = {{"backend": keras.backend.backend(), "n": int(len(x))}}
t = time.perf_counter(); model.predict(x, batch_size={bs}, verbose=0); out["predict"] = time.perf_counter() - t
t = time.perf_counter(); tm = TraceModel(model); tr = tm.traces(x, batch_size={bs}); out["traces_first"] = time.perf_counter() - t
t = time.perf_counter(); tr = tm.traces(x, batch_size={bs}); out["traces"] = time.perf_counter() - t
rec = TraceModel(model, jit=False, extrema=True)
rec.call_and_trace(x[:32], batch_size=32)
t = time.perf_counter()
for _ in range(20):
    rec.call_and_trace(x[:32], batch_size=32)
out["record"] = (time.perf_counter() - t) / 20
np.savez({npz!r}.format(out["backend"]), sa=tr.sa, *tr.coverage)
print("RESULT" + json.dumps(out))
"""


def measure(backend: str, reps: int, batch_size: int, tmp: str) -> dict[str, float]:
    """Minimum over ``reps`` fresh processes of each timing, for one backend."""
    script = CHILD.format(
        root=str(ROOT),
        train=str(ROOT / "example_project" / "data" / "train.npz"),
        model=str(ROOT / "example_project" / "models" / "digits_cnn.keras"),
        bs=batch_size,
        npz=os.path.join(tmp, "{}.npz"),
    )
    best: dict[str, float] = {}
    for _ in range(reps):
        env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
        run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=900)
        if run.returncode != 0:
            raise SystemExit(f"{backend} failed:\n{run.stderr[-3000:]}")
        result = json.loads(run.stdout.split("RESULT", 1)[1])
        for key, value in result.items():
            if isinstance(value, float):
                best[key] = min(best.get(key, value), value)
            else:
                best[key] = value
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        results: dict[str, dict[str, float]] = {"tensorflow": {}, "jax": {}}
        for _ in range(args.reps):  # interleaved, so that a busy spell hits both
            for backend in results:
                one = measure(backend, 1, args.batch_size, tmp)
                for key, value in one.items():
                    if isinstance(value, float):
                        results[backend][key] = min(results[backend].get(key, value), value)
                    else:
                        results[backend][key] = value
        with np.load(os.path.join(tmp, "tensorflow.npz")) as a, np.load(os.path.join(tmp, "jax.npz")) as b:
            diff = max(float(np.max(np.abs(a[k] - b[k]))) for k in a.files)
    tf, jx = results["tensorflow"], results["jax"]
    print(
        f"example project: {tf['n']} training inputs, batch size {args.batch_size}, min of {args.reps} fresh processes per backend"
    )
    print(f"{'':34} {'TensorFlow':>11} {'JAX':>11} {'JAX / TF':>9}")
    rows = [
        ("model.predict (warm)", "predict"),
        ("traces, first (probe+compile+pass)", "traces_first"),
        ("traces (compiled)", "traces"),
        ("recorded call, 32 inputs (warm)", "record"),
    ]
    for label, key in rows:
        print(f"{label:34} {tf[key]:10.3f}s {jx[key]:10.3f}s {jx[key] / tf[key]:8.2f}x")
    print(f"{'traces / predict':34} {tf['traces'] / tf['predict']:10.2f}x {jx['traces'] / jx['predict']:10.2f}x")
    print(f"largest |TF - JAX| difference of the traces: {diff:.2e}")


if __name__ == "__main__":
    main()
