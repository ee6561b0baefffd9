"""How long ``sadl --help`` takes to start, beside what it would cost with the heavy imports.

``sadl --help`` (and ``--version``, ``sadl report --help``, ``sadl profile --help``)
imports nothing but the standard library: each subcommand's module is imported only when
that subcommand runs (:data:`pytest_sadl.cli.main.LAZY`); ``tests/test_cli.py`` checks
which modules it imports. This prints, side by side in one run, the median wall time of
a fresh interpreter for:

* ``python -c pass``: the interpreter's own start, the floor;
* ``sadl --help`` (``python -m pytest_sadl --help``);
* ``sadl profile build --help``;
* ``sadl select --help`` (NumPy and the selection imported only when a selection runs);
* ``import numpy, scipy, pytest``: what ``sadl --help`` paid before (issue 18: 1.5 s);

and each one's ratio to the floor. Usage::

    python benchmarks/bench_cli_startup.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    "python -c pass": ["-c", "pass"],
    "sadl --help": ["-m", "pytest_sadl", "--help"],
    "sadl profile build --help": ["-m", "pytest_sadl", "profile", "build", "--help"],
    "sadl select --help": ["-m", "pytest_sadl", "select", "--help"],
    "import numpy, scipy, pytest": ["-c", "import numpy, scipy.spatial, scipy.linalg, pytest"],
}


def _time(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="fresh interpreters per case (default 5)")
    repeat = parser.parse_args().repeat
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(repeat):  # interleaved, so a busy moment of the machine hits every case alike
        for name, args in CASES.items():
            times[name].append(_time(args, env))
    floor = statistics.median(times["python -c pass"])
    print(f"{'case':30} {'median':>8} {'x floor':>8}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:30} {median:7.3f}s {median / floor:7.1f}x")


if __name__ == "__main__":
    main()
