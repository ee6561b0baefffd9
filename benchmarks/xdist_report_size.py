"""How much a pytest-xdist run's test reports weigh, with and without pytest-sadl.

Under pytest-xdist a worker used to hang each test's recordings on the test's teardown
report (base64 ``.npz``), so everything that keeps or writes reports (``--report-log``,
junitxml's properties, a CI's own hooks) carried MBs (issue 18: 131 KB to 16.4 MB on the
example project). Now a worker on the controller's machine writes them to a file in the
controller's spool folder and the report carries a reference of a few hundred bytes
(:mod:`pytest_sadl.plugin.transport`).

This copies ``example_project/`` to a temporary folder and runs it with ``-n 2``, side by
side in one run:

* without ``--sadl-coverage``: the floor;
* with ``--sadl-coverage``: this checkout;
* with ``--sadl-coverage`` and ``--baseline-src DIR`` (a checkout of an older pytest-sadl,
  e.g. ``git archive <commit> pytest_sadl | tar -x -C DIR``): that version, if given.

Each run writes what ``--report-log`` (pytest-reportlog) writes of every report, on the
controller (a small plugin, so pytest-reportlog need not be installed). It prints each
log's size, its ratio to the floor, the largest line, and the bytes of recordings that
went through spool files instead. Usage::

    python benchmarks/xdist_report_size.py [--baseline-src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = '''
"""What pytest-reportlog writes of each report, on the controller; and the size of each
spool file a report refers to, read before pytest-sadl reads and removes it."""
import json
import os
from pathlib import Path

import pytest

CONFIG = []
SPOOL = []


def pytest_configure(config):
    CONFIG.append(config)


@pytest.hookimpl(trylast=True)
def pytest_configure_node(node):
    spool = node.workerinput.get("sadl_spool")
    if spool and not SPOOL:
        SPOOL.append(Path(spool))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    config = CONFIG[0]
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    with open(os.environ["SADL_PROBE_LOG"], "a") as fh:
        fh.write(json.dumps(data, default=str) + "\\n")  # as pytest-reportlog cleans up
    ref = getattr(report, "sadl_record", None)
    if isinstance(ref, dict) and ref.get("file") and SPOOL:
        with open(os.environ["SADL_PROBE_LOG"] + ".spool", "a") as fh:
            fh.write(f"{(SPOOL[0] / ref['file']).stat().st_size}\\n")
'''


def run(project: Path, probe_dir: Path, name: str, args: list[str], src: Path) -> dict[str, float]:
    log = project / f"{name}.jsonl"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(probe_dir), str(src)]),
        "SADL_PROBE_LOG": str(log),
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "_sadl_probe", "-p", "no:randomly", "-n", "2", *args]
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=1800)
    if not log.exists():
        raise SystemExit(f"{name}: no report log (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    lines = log.read_text().splitlines()
    spool = Path(f"{log}.spool")
    spooled = sum(int(x) for x in spool.read_text().split()) if spool.exists() else 0
    refs = [json.loads(line).get("sadl_record") for line in lines]
    return {
        "exit": done.returncode,
        "reports": len(lines),
        "bytes": sum(len(line) + 1 for line in lines),
        "largest": max(map(len, lines)),
        "ref_bytes": sum(len(json.dumps(r)) for r in refs if r is not None),
        "spooled": spooled,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-src", type=Path, help="a checkout of an older pytest_sadl (its parent folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sadl-report-size-") as tmp:
        project = Path(tmp) / "example_project"
        shutil.copytree(ROOT / "example_project", project, ignore=shutil.ignore_patterns(".sadl*", "__pycache__"))
        probe = Path(tmp) / "probe"
        probe.mkdir()
        (probe / "_sadl_probe.py").write_text(PROBE)
        runs = {"-n 2, no --sadl-coverage": run(project, probe, "plain", [], ROOT)}
        runs["-n 2 --sadl-coverage (this checkout)"] = run(project, probe, "now", ["--sadl-coverage"], ROOT)
        if args.baseline_src is not None:
            runs["-n 2 --sadl-coverage (baseline)"] = run(
                project, probe, "before", ["--sadl-coverage"], args.baseline_src.resolve()
            )
    floor = next(iter(runs.values()))["bytes"]
    print(
        f"{'run':40} {'exit':>4} {'reports':>7} {'log KB':>10} {'x floor':>8} {'largest':>9} {'refs KB':>8} {'spooled KB':>10}"
    )
    for name, r in runs.items():
        print(
            f"{name:40} {r['exit']:>4} {r['reports']:>7} {r['bytes'] / 1e3:>10.1f} {r['bytes'] / floor:>8.2f} "
            f"{r['largest']:>9} {r['ref_bytes'] / 1e3:>8.1f} {r['spooled'] / 1e3:>10.1f}"
        )


if __name__ == "__main__":
    main()
