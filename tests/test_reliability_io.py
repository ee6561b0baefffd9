"""Faults around files, locks, imports and interrupts (issue 15): each ends as pytest or
the ``sadl`` command promises, never a crash, a hang or a lie.

Real files (a FIFO read by a thread, ``/dev/stdout`` of a subprocess, ``/dev/null`` checked
afterwards), real second processes holding a lock (stopped with SIGSTOP, killed), a real
``keras`` import that fails, a real SIGINT.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from pytest_sadl.atomic import atomic_write_text

try:
    from tests.test_plugin import _warm_imports, project, results, run  # noqa: F401  (fixtures)
except ImportError:  # pragma: no cover - tests/ itself on sys.path
    from test_plugin import _warm_imports, project, results, run  # type: ignore[no-redef]  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]

HUGE_TESTS = '''
import numpy as np
import pytest

X = np.load("inputs.npy")


@pytest.mark.sadl(group="huge")
def test_huge(sadl_model):
    sadl_model.predict(np.full((3, 8, 8, 1), 1e30, np.float32), verbose=0)
    sadl_model.predict(np.full((2, 8, 8, 1), -1e30, np.float32), verbose=0)


@pytest.mark.sadl(group="plain")
def test_plain(sadl_model):
    sadl_model.predict(X[:20], verbose=0)
'''


@pytest.mark.tf
def test_huge_inputs_under_w_error_keep_every_result(project):
    pytester = project(HUGE_TESTS)
    # -p no:benchmark: pytest-benchmark, where a machine has it, warns at configure time
    # when it sees xdist (this suite's workers), which -W error would make an INTERNALERROR
    res = run(pytester, "-p", "no:benchmark", "-W", "error", "--sadl-coverage", "--sadl-report=json:out.json", "--sadl-report=term")
    out = res.stdout.str()
    assert res.ret == 0, out
    assert "could not compute" not in out and "Warning" not in out, out
    data = results(pytester)
    assert {t["nodeid"].split("::")[1]: t["inputs"] for t in data["tests"]} == {"test_huge": 5, "test_plain": 20}
    assert data["metrics"]["lsc"]["count"] == 25 and data["metrics"]["kmnc"]["value"] > 0
