"""The example's output quoted in the docs, generated from a run and checked against one.

Each quoted block is a fenced block right after a marker line naming the main job's extra
arguments, the sections of its terminal report it holds (each by the start of its first
line; a section runs to the next blank line) and the kernels it was generated on:

    <!-- example-output: --sadl-metrics=all | cumulative coverage by group | kernels: ... -->

``python scripts/example_tables.py`` runs ``pytest example_project --sadl-coverage`` once
per set of arguments (random order off) and writes every block anew;
``--check`` (CI) runs the same and exits 1 naming each block that differs, so a number in
the README cannot go stale.

The numbers depend on the CPU's kernels (docs/semantics.md, "Across machines";
``benchmarks/kernels.py``): on the kernels a block was generated on (the same CPU model,
oneDNN on or off) it must be equal character for character; on others its text must be the
same and each number within 5% of the quoted one plus 5 units of its last printed digit
(measured across kernels: SNAC 1.45 points of 81.88, 1.8%; LSA's bounds 1e-2 relative).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = ("README.md", "docs/index.md", "docs/ood.md", "example_project/README.md")
MARKER = re.compile(r"^<!-- example-output: (?P<args>[^|]*)\|(?P<sections>[^|]*)\| kernels: (?P<kernels>.*) -->$")
SUMMARY = re.compile(r"^=* ?\d+ (passed|failed|error)")  # pytest's last line ends a section
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
#: environment variables that select other kernels on the same CPU model
KERNEL_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "OPENBLAS_CORETYPE")


def kernels() -> str:
    """This machine's CPU model and whether TensorFlow's oneDNN kernels are on (the
    variable, else TensorFlow's default: on where the CPU has AVX512_VNNI, AVX512_BF16 or AMX)."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), []))
    default = bool(flags & {"avx512_vnni", "avx512_bf16", "amx_tile"})
    setting = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    onednn = default if setting is None else setting.strip().lower() in ("1", "true")
    # the variables that choose other kernels on the same CPU (oneDNN's and OpenBLAS' ISA caps,
    # used to run as another CPU kind would) make them other kernels too
    caps = [f"{v}={os.environ[v]}" for v in KERNEL_VARIABLES if os.environ.get(v)]
    return ", ".join([model, f"oneDNN {'on' if onednn else 'off'}", *caps])


def run(args: str) -> list[str]:
    """The terminal report of the main job with ``args``."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"}
    cmd = [sys.executable, "-m", "pytest", "example_project", "-q", "-p", "no:randomly", "--sadl-coverage"]
    done = subprocess.run([*cmd, *args.split()], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"example_tables: `{' '.join(cmd)} {args}` failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return done.stdout.splitlines()


def sections(lines: list[str], names: list[str]) -> list[str]:
    out: list[str] = []
    for name in names:
        start = next((i for i, line in enumerate(lines) if line.startswith(name)), None)
        if start is None:
            sys.exit(f"example_tables: the run printed no section starting {name!r}")
        end = next((i for i in range(start, len(lines)) if not lines[i].strip() or SUMMARY.match(lines[i])), len(lines))
        out += ([""] if out else []) + lines[start:end]
    return out


def close(quoted: str, fresh: str) -> bool:
    """The same text, each number within 5% plus 5 units of its last printed digit."""
    if NUMBER.sub("#", quoted) != NUMBER.sub("#", fresh):
        return False
    for a, b in zip(NUMBER.findall(quoted), NUMBER.findall(fresh), strict=True):
        x, y = float(a.replace(",", "")), float(b.replace(",", ""))
        unit = 10.0 ** -len(a.split(".")[1]) if "." in a else 1.0
        if abs(x - y) > 0.05 * max(abs(x), abs(y)) + 5 * unit:
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing; exit 1 on a stale block")
    check = parser.parse_args(argv).check
    here, runs, stale = kernels(), {}, []
    for name in FILES:
        path = ROOT / name
        lines = path.read_text().split("\n")
        i = 0
        while i < len(lines):
            marker = MARKER.match(lines[i])
            if not marker:
                i += 1
                continue
            if lines[i + 1] != "```":
                sys.exit(f"example_tables: {name}:{i + 1}: the marker is not followed by a fenced block")
            end = lines.index("```", i + 2)
            args = marker["args"].strip()
            if args not in runs:
                runs[args] = run(args)
            fresh = sections(runs[args], [s.strip() for s in marker["sections"].split(",")])
            quoted, same_kernels = lines[i + 2 : end], marker["kernels"] == here
            if check:
                ok = quoted == fresh if same_kernels else close("\n".join(quoted), "\n".join(fresh))
                if not ok:
                    stale.append(f"{name}:{i + 1} ({'exact' if same_kernels else 'within tolerance'})")
                i = end + 1
            else:
                block = [
                    f"<!-- example-output: {args} |{marker['sections']}| kernels: {here} -->",
                    "```",
                    *fresh,
                    "```",
                ]
                lines[i : end + 1] = block
                i += len(block)
        if not check:
            path.write_text("\n".join(lines))
    if stale:
        print("example_tables: stale example output (run `python scripts/example_tables.py`):", file=sys.stderr)
        for where in stale:
            print(f"  {where}", file=sys.stderr)
        return 1
    print(f"example_tables: {'checked' if check else 'wrote'} the quoted output of {len(runs)} run(s) on {here}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
