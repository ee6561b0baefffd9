"""What pytest-sadl costs: a real suite, and thousands of small recorded calls.

Case ``example`` (the default): ``pytest example_project`` with and without the plugin.
Case ``calls``: a generated project on the example's model where ``--tests`` tests each
call ``model(x)`` on 20 inputs ``--calls`` times; every call is timed inside the test
(``time.perf_counter`` around ``model(x)``), so the script prints the per-call cost with
and without recording side by side (plain, recorded, their ratio), and the wall time of
the whole run, which adds the plugin's per-test bookkeeping. A recorded call runs the
trace model's compiled pass, so it can cost less than the plain eager ``model(x)``: the
ratio is then below 1. Case ``loops``: the same with ``evaluate(x, y)`` and
``predict(dataset)`` on 360 inputs per test (``--tests`` of them), Keras' own loops, which
recording runs once with the step tapped (no second forward pass). ``--case all`` runs all three.

In the example case, both runs are the same command in a fresh subprocess (TensorFlow import, model load and
all 62 tests included), once with ``--sadl-coverage`` and once without. The training
profile is warmed first (one untimed run with the plugin on builds and caches it), so the
timed runs measure what a developer pays on every run after the first: recording the
inputs, tracing them, the criteria and the report. The two kinds of run alternate, in
swapped order each round, so that drift of the machine affects both alike; the ratio
is that of the medians.

Usage::

    python benchmarks/bench_plugin_overhead.py                # 5 rounds of the example
    python benchmarks/bench_plugin_overhead.py --case calls --tests 2000 --calls 1 --rounds 1
    python benchmarks/bench_plugin_overhead.py --case loops --tests 20 --rounds 3
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


def _run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall time and CPU time (user + system, all threads) of one run in seconds.

    Exits with the run's output if the run fails.
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONDONTWRITEBYTECODE="1", **(env or {}))
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


CALLS_TESTS = """
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

X = np.load(Path(__file__).parent / "inputs.npy")
TIMES = []


@pytest.fixture(scope="session", autouse=True)
def _write_times():
    yield
    with open(os.environ["BENCH_TIMES"], "w") as fh:
        json.dump(TIMES, fh)


@pytest.mark.sadl
@pytest.mark.parametrize("i", range({tests}))
def test_small_calls(sadl_model, i):
    x = X[(i * 20) % 400:][:20]
    for _ in range({calls}):
        start = time.perf_counter()
        sadl_model(x)
        TIMES.append(time.perf_counter() - start)
"""


def _calls_project(directory: Path, tests: int, calls: int) -> Path:
    """A project on the example's model and data whose tests each make ``calls`` small calls."""
    import shutil

    import numpy as np

    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(PROJECT / "models" / "digits_cnn.keras", directory / "model.keras")
    shutil.copy(PROJECT / "data" / "train.npz", directory / "train.npz")
    with np.load(PROJECT / "data" / "test.npz") as test:
        np.save(directory / "inputs.npy", np.resize(test["x"], (420, *test["x"].shape[1:])))
    (directory / "pytest.ini").write_text(
        "[pytest]\nsadl_model = model.keras\nsadl_train = train.npz\nsadl_layers = dense_hidden\n"
    )
    (directory / "test_calls.py").write_text(CALLS_TESTS.format(tests=tests, calls=calls))
    return directory


def run_calls(args: argparse.Namespace, extra: list[str]) -> int:
    """Per-call cost of ``model(x)`` (20 inputs) with and without recording, and the run's wall time."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory(prefix="sadl-bench-calls-") as tmp:
        project = _calls_project(Path(tmp) / "project", args.tests, args.calls)
        times_file = Path(tmp) / "times.json"
        base = [
            sys.executable,
            "-m",
            "pytest",
            str(project),
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            f"--sadl-cache-dir={Path(tmp) / 'cache'}",
        ]
        commands = {False: base, True: [*base, "--sadl-coverage", *extra]}
        n = args.tests * args.calls
        print(f"case calls: {args.tests} tests x {args.calls} call(s) of model(x) on 20 inputs = {n} recorded calls")
        _run(commands[True], env={"BENCH_TIMES": str(times_file)})  # builds the profile
        per_call: dict[bool, list[float]] = {False: [], True: []}
        wall: dict[bool, list[float]] = {False: [], True: []}
        for i in range(args.rounds):
            for plugin_on in (False, True) if i % 2 == 0 else (True, False):
                wall[plugin_on].append(_run(commands[plugin_on], env={"BENCH_TIMES": str(times_file)})[0])
                per_call[plugin_on].append(statistics.median(json.loads(times_file.read_text())))
        call_off, call_on = (statistics.median(per_call[k]) * 1e3 for k in (False, True))
        wall_off, wall_on = (statistics.median(wall[k]) for k in (False, True))
    print(
        f"median per call: plain {call_off:.3f} ms, recorded {call_on:.3f} ms, "
        f"recorded/plain {call_on / call_off:.2f}x (recording adds {call_on - call_off:+.3f} ms)"
    )
    print(
        f"median wall time: off {wall_off:.2f} s, on {wall_on:.2f} s; the plugin adds "
        f"{(wall_on - wall_off) / n * 1e3:.2f} ms per recorded call all told "
        "(recording, per-test bookkeeping, the metrics and the report at the end)"
    )
    return 0


LOOPS_TESTS = """
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

X = np.load(Path(__file__).parent / "inputs.npy")[:360]
Y = np.load(Path(__file__).parent / "labels.npy")[:360]
TIMES = {{"evaluate": [], "predict_dataset": []}}


@pytest.fixture(scope="session", autouse=True)
def _write_times():
    yield
    with open(os.environ["BENCH_TIMES"], "w") as fh:
        json.dump(TIMES, fh)


@pytest.mark.sadl
@pytest.mark.parametrize("i", range({tests}))
def test_loops(sadl_model, i):
    start = time.perf_counter()
    sadl_model.evaluate(X, Y, verbose=0)
    TIMES["evaluate"].append(time.perf_counter() - start)
    test_ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(32)
    start = time.perf_counter()
    sadl_model.predict(test_ds, verbose=0)
    TIMES["predict_dataset"].append(time.perf_counter() - start)
"""


def run_loops(args: argparse.Namespace, extra: list[str]) -> int:
    """Per-call cost of ``evaluate(x, y)`` and ``predict(dataset)`` (360 inputs, Keras' own
    loops) with and without recording: recording runs the same loop with the step's
    layers tapped, one forward pass, no second one."""
    import json
    import tempfile

    import numpy as np

    with tempfile.TemporaryDirectory(prefix="sadl-bench-loops-") as tmp:
        project = _calls_project(Path(tmp) / "project", args.tests, 1)
        with np.load(PROJECT / "data" / "test.npz") as test:
            np.save(project / "inputs.npy", test["x"])
            np.save(project / "labels.npy", test["y"])
        (project / "test_calls.py").write_text(LOOPS_TESTS.format(tests=args.tests))
        times_file = Path(tmp) / "times.json"
        base = [
            sys.executable,
            "-m",
            "pytest",
            str(project),
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            f"--sadl-cache-dir={Path(tmp) / 'cache'}",
        ]
        commands = {False: base, True: [*base, "--sadl-coverage", *extra]}
        print(f"case loops: {args.tests} tests, each evaluate(x, y) and predict(dataset) on 360 inputs")
        _run(commands[True], env={"BENCH_TIMES": str(times_file)})  # builds the profile
        per_call: dict[bool, dict[str, list[float]]] = {False: {}, True: {}}
        for i in range(args.rounds):
            for plugin_on in (False, True) if i % 2 == 0 else (True, False):
                _run(commands[plugin_on], env={"BENCH_TIMES": str(times_file)})
                for name, times in json.loads(times_file.read_text()).items():
                    per_call[plugin_on].setdefault(name, []).append(statistics.median(times))
    for name in per_call[False]:
        off, on = (statistics.median(per_call[k][name]) * 1e3 for k in (False, True))
        print(f"median {name}: plain {off:.1f} ms, recorded {on:.1f} ms, recorded/plain {on / off:.2f}x")
    return 0


def run_example(args: argparse.Namespace, extra: list[str]) -> int:
    """``pytest example_project`` with and without the plugin; wall and CPU time ratios."""
    off_cmd, on_cmd = _command(False, extra), _command(True, extra)
    print(f"plugin off: {' '.join(off_cmd[1:])}")
    print(f"plugin on:  {' '.join(on_cmd[1:])}")
    warm_on, warm_off = _run(on_cmd), _run(off_cmd)
    print(f"warm-up (builds the training profile if it is not cached): on {warm_on[0]:.2f} s, off {warm_off[0]:.2f} s")

    times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for i in range(args.rounds):
        order = [(False, off_cmd), (True, on_cmd)] if i % 2 == 0 else [(True, on_cmd), (False, off_cmd)]
        for plugin_on, cmd in order:
            times[plugin_on].append(_run(cmd))
        (w_off, c_off), (w_on, c_on) = times[False][-1], times[True][-1]
        print(
            f"round {i + 1}: wall off {w_off:.2f} s, on {w_on:.2f} s, ratio {w_on / w_off:.3f}; "
            f"cpu off {c_off:.2f} s, on {c_on:.2f} s, ratio {c_on / c_off:.3f}"
        )

    med = {k: (statistics.median(t[0] for t in v), statistics.median(t[1] for t in v)) for k, v in times.items()}
    ratio = med[True][0] / med[False][0]
    cpu_ratio = med[True][1] / med[False][1]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"median wall time: off {med[False][0]:.2f} s, on {med[True][0]:.2f} s "
        f"(plugin adds {med[True][0] - med[False][0]:+.2f} s)"
    )
    print(
        f"median cpu time:  off {med[False][1]:.2f} s, on {med[True][1]:.2f} s "
        f"(plugin adds {med[True][1] - med[False][1]:+.2f} s), cpu ratio {cpu_ratio:.3f}x"
    )
    if load > (os.cpu_count() or 1):
        print(
            f"note: load average {load:.1f} on {os.cpu_count()} cores; other work skews the wall times, "
            "trust the cpu ratio more"
        )
    verdict = "within" if ratio <= args.target else "ABOVE"
    print(f"ratio: {ratio:.3f}x ({verdict} the target of {args.target:.2f}x)")
    return 1 if args.check and ratio > args.target else 0


def main(argv: list[str] | None = None) -> int:
    """Run the chosen case(s) and print the figures."""
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--case",
        choices=("example", "calls", "loops", "all"),
        default="example",
        help="what to measure (default %(default)s)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="timed pairs of runs (default %(default)s)")
    parser.add_argument(
        "--target", type=float, default=1.3, help="acceptable ratio, example case (default %(default)s)"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when the ratio exceeds --target")
    parser.add_argument("--tests", type=int, default=2000, help="tests of the calls case (default %(default)s)")
    parser.add_argument("--calls", type=int, default=1, help="calls per test of the calls case (default %(default)s)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.tests < 1 or args.calls < 1:
        parser.error("--rounds, --tests and --calls must be at least 1")
    status = 0
    if args.case in ("calls", "all"):
        status |= run_calls(args, extra)
    if args.case in ("loops", "all"):
        status |= run_loops(args, extra)
    if args.case in ("example", "all"):
        status |= run_example(args, extra)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
