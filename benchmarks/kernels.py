"""How far the example's numbers move with the CPU's kernels: oneDNN on or off, 1 or 2 threads.

TensorFlow computes a float32 trace with whichever kernels the CPU gets: oneDNN's where it
is on (by default only on CPUs with AVX512_VNNI/AVX512_BF16/AMX; ``TF_ENABLE_ONEDNN_OPTS``
forces it either way), Eigen's elsewhere, each blocking its sums by the CPU's caches, the
matrix shapes and the number of threads. So the same model and data can give traces that
differ in their last bits from one machine (or setting) to the next, and every number built
on them moves by as much as that rounding is amplified. This script measures it on the real
thing: the main job (``pytest example_project --sadl-coverage``, the profile built anew in
each run) under each kernel setting in a fresh process, then every metric and every
input's score compared with the first setting's, side by side.

Usage::

    python benchmarks/kernels.py                    # the four settings
    python benchmarks/kernels.py --settings 0:2,1:2 # oneDNN off and on, two threads

Prints, per setting, the largest change of any metric (in percentage points, and which),
the largest relative change of each per-input score, and how many predictions changed.
The exit status is 0 unless a run fails. ``docs/semantics.md`` ("Across machines") quotes
its output.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def run(onednn: str, threads: int, out: Path) -> dict:
    """The main job under one kernel setting, in a fresh process and a fresh cache."""
    env = dict(os.environ)
    env.update(
        TF_ENABLE_ONEDNN_OPTS=onednn,
        TF_NUM_INTRAOP_THREADS=str(threads),
        TF_NUM_INTEROP_THREADS=str(threads),
        OMP_NUM_THREADS=str(threads),
        OPENBLAS_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        TF_CPP_MIN_LOG_LEVEL="3",
        KERAS_BACKEND="tensorflow",
    )
    report = out / f"onednn{onednn}-t{threads}.json"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "example_project",
        "-q",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
        "--sadl-coverage",
        f"--sadl-cache-dir={out / f'cache-{onednn}-{threads}'}",
        f"--sadl-report=json:{report}",
    ]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"kernels: the run with oneDNN={onednn}, {threads} thread(s) failed:\n{done.stdout[-3000:]}")
    data: dict = json.loads(report.read_text())
    return data


def compare(base: dict, other: dict) -> tuple[str, dict[str, float], int]:
    """The largest metric change (points, which metric), the largest relative change of each
    score, and the number of changed predictions."""
    worst, which = 0.0, "-"
    for name, metric in base["metrics"].items():  # the default metrics: fractions, shown as percentages
        a, b = metric.get("value"), other["metrics"].get(name, {}).get("value")
        if a is not None and b is not None and abs(a - b) * 100 > worst:
            worst, which = abs(a - b) * 100, name
    for group_a, group_b in zip(base.get("groups", []), other.get("groups", []), strict=False):
        for name, a in group_a.get("cumulative", {}).items():  # Table VI's rows
            b = group_b.get("cumulative", {}).get(name)
            if a is not None and b is not None and abs(a - b) * 100 > worst:
                worst, which = abs(a - b) * 100, f"{name} at + {group_a['name']}"
    scores = {}
    for name in ("lsa", "dsa", "mdsa"):
        a = np.asarray(base["inputs"].get(name, []), dtype=float)
        b = np.asarray(other["inputs"].get(name, []), dtype=float)
        if a.size and a.shape == b.shape:
            scores[name] = float(np.max(np.abs(a - b) / np.maximum(np.abs(a), 1e-300)))
    pa, pb = base["inputs"].get("pred", []), other["inputs"].get("pred", [])
    changed = sum(x != y for x, y in zip(pa, pb, strict=False))
    return f"{worst:.2f} ({which})", scores, changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default="1:2,0:2,1:1,0:1", help="ONEDNN:THREADS,... (the first is the reference)")
    args = parser.parse_args(argv)
    settings = [(s.split(":")[0], int(s.split(":")[1])) for s in args.settings.split(",")]
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown CPU")  # fmt: skip
    print(f"kernels: the example project's main job on {cpu}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        runs = [run(o, t, Path(tmp)) for o, t in settings]
    (o0, t0), base = settings[0], runs[0]
    print(f"reference: oneDNN={o0}, {t0} thread(s)")
    print(
        f"{'setting':<22} {'largest metric change (points)':<34} {'LSA rel':>9} {'DSA rel':>9} {'MDSA rel':>9} {'pred':>5}"
    )
    for (o, t), data in zip(settings[1:], runs[1:], strict=True):
        worst, scores, changed = compare(base, data)
        cells = [f"{scores[s]:9.1e}" if s in scores else f"{'-':>9}" for s in ("lsa", "dsa", "mdsa")]
        print(f"{f'oneDNN={o}, {t} thread(s)':<22} {worst:<34} {' '.join(cells)} {changed:>5}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
