"""What pytest-sadl costs on a real suite: ``pytest example_project`` with and without it.

Both runs are the same command in a fresh subprocess (TensorFlow import, model load and
all 62 tests included), once with ``--sadl-coverage`` and once without. The training
profile is warmed first (one untimed run with the plugin on builds and caches it), so the
timed runs measure what a developer pays on every run after the first: recording the
inputs, tracing them, the criteria and the report. The two kinds of run alternate, in
swapped order each round, so that drift of the machine affects both alike; the ratio
is that of the medians.

Usage::

    python benchmarks/bench_plugin_overhead.py                # 5 rounds
    python benchmarks/bench_plugin_overhead.py --rounds 9 --target 1.3
    python benchmarks/bench_plugin_overhead.py -- --sadl-report=json:/tmp/r.json

Arguments after ``--`` are added to the plugin-on command. Prints the wall times and
``ratio: X.XXx`` (the target is on wall time), and the CPU time of each run (user +
system of the subprocess, all threads): on a busy machine the wall times drift with
the other work, the CPU times much less; the exit status is 0 unless a run fails, or the ratio exceeds
``--target`` and ``--check`` is given.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "example_project"


def _command(plugin_on: bool, extra: list[str]) -> list[str]:
    """The pytest command line of one run, from the repository root."""
    cmd = [sys.executable, "-m", "pytest", str(PROJECT.relative_to(ROOT)), "-q", "-p", "no:randomly"]
    if plugin_on:
        cmd += ["--sadl-coverage", *extra]
    return cmd


def _run(cmd: list[str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system, all threads) of one run in seconds.

    Exits with the run's output if the run fails.
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONDONTWRITEBYTECODE="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        sys.stderr.write(f"bench: {' '.join(cmd)} exited with {proc.returncode}\n")
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(2)
    return elapsed, cpu


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the wall times and the ratio of the medians."""
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed pairs of runs (default %(default)s)")
    parser.add_argument("--target", type=float, default=1.3, help="acceptable ratio (default %(default)s)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the ratio exceeds --target")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    off_cmd, on_cmd = _command(False, extra), _command(True, extra)
    print(f"plugin off: {' '.join(off_cmd[1:])}")
    print(f"plugin on:  {' '.join(on_cmd[1:])}")
    warm_on, warm_off = _run(on_cmd), _run(off_cmd)
    print(f"warm-up (builds the training profile if it is not cached): "
          f"on {warm_on[0]:.2f} s, off {warm_off[0]:.2f} s")

    times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for i in range(args.rounds):
        order = [(False, off_cmd), (True, on_cmd)] if i % 2 == 0 else [(True, on_cmd), (False, off_cmd)]
        for plugin_on, cmd in order:
            times[plugin_on].append(_run(cmd))
        (w_off, c_off), (w_on, c_on) = times[False][-1], times[True][-1]
        print(f"round {i + 1}: wall off {w_off:.2f} s, on {w_on:.2f} s, ratio {w_on / w_off:.3f}; "
              f"cpu off {c_off:.2f} s, on {c_on:.2f} s, ratio {c_on / c_off:.3f}")

    med = {k: (statistics.median(t[0] for t in v), statistics.median(t[1] for t in v)) for k, v in times.items()}
    ratio = med[True][0] / med[False][0]
    cpu_ratio = med[True][1] / med[False][1]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"median wall time: off {med[False][0]:.2f} s, on {med[True][0]:.2f} s "
          f"(plugin adds {med[True][0] - med[False][0]:+.2f} s)")
    print(f"median cpu time:  off {med[False][1]:.2f} s, on {med[True][1]:.2f} s "
          f"(plugin adds {med[True][1] - med[False][1]:+.2f} s), cpu ratio {cpu_ratio:.3f}x")
    if load > (os.cpu_count() or 1):
        print(f"note: load average {load:.1f} on {os.cpu_count()} cores; other work skews the wall times, "
              "trust the cpu ratio more")
    verdict = "within" if ratio <= args.target else "ABOVE"
    print(f"ratio: {ratio:.3f}x ({verdict} the target of {args.target:.2f}x)")
    return 1 if args.check and ratio > args.target else 0


if __name__ == "__main__":
    raise SystemExit(main())
