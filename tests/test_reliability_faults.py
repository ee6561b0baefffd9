"""Faults from outside the project's code (issue 15): a Keras that cannot be imported, a
loader that calls ``sys.exit`` or is interrupted, Ctrl-C while the reports are written.
Each ends as pytest (or ``sadl``) ends it: one line, the documented exit status, no
traceback, nothing half-written.

Real subprocesses throughout: a real broken ``keras`` package first on ``PYTHONPATH``, a
real ``ulimit -v`` (``resource.setrlimit`` in the child), a real SIGINT sent while the run
is blocked writing a report into a FIFO.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

try:
    from tests.test_plugin import THRESHOLD_TESTS, _warm_imports, project, run  # noqa: F401  (fixtures)
except ImportError:  # pragma: no cover - tests/ itself on sys.path
    from test_plugin import THRESHOLD_TESTS, _warm_imports, project, run  # type: ignore[no-redef]  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
INSTALL = 'pip install "pytest-sadl[tensorflow]"'

BROKEN_KERAS = {
    "import-error": 'raise ImportError("this keras is broken: its native part is missing")\n',
    "not-found": 'raise ModuleNotFoundError("No module named \'keras\'", name="keras")\n',
}


def _env(*first: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, first), str(ROOT)])
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def _limit_memory(mib: int):
    def limit() -> None:  # in the child, before exec: the native libraries cannot be mapped
        resource.setrlimit(resource.RLIMIT_AS, (mib << 20, mib << 20))

    return limit


def _runs(
    cwd: Path, env: dict[str, str], preexec=None
) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """(``pytest --sadl-coverage``, ``sadl profile build``) in ``cwd``."""
    pytest_run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "-p",
            "no:xdist",
            "--sadl-coverage",
        ],
        cwd=cwd,
        env=env,
        preexec_fn=preexec,
        capture_output=True,
        text=True,
        timeout=300,
    )
    sadl_run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_sadl",
            "profile",
            "build",
            "--model",
            "model.keras",
            "--train",
            "train.npz",
            "-q",
        ],
        cwd=cwd,
        env=env,
        preexec_fn=preexec,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return pytest_run, sadl_run


def _assert_one_line(
    pytest_run: subprocess.CompletedProcess, sadl_run: subprocess.CompletedProcess, cause: str
) -> None:
    out = pytest_run.stdout + pytest_run.stderr
    assert pytest_run.returncode == 4, out
    assert "Traceback" not in out and "INTERNALERROR" not in out, out
    errors = [line for line in out.splitlines() if "pytest-sadl" in line]
    assert len(errors) == 1, out
    assert (
        errors[0].startswith("ERROR: pytest-sadl: cannot import keras (")
        and INSTALL in errors[0]
        and cause in errors[0]
    ), out
    assert sadl_run.returncode == 2, sadl_run.stdout + sadl_run.stderr
    assert "Traceback" not in sadl_run.stderr, sadl_run.stderr
    lines = [line for line in sadl_run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("sadl: error: cannot import keras (") and INSTALL in lines[0], (
        sadl_run.stderr
    )


@pytest.mark.tf
@pytest.mark.parametrize("kind", sorted(BROKEN_KERAS))
def test_a_broken_keras_is_one_line_saying_what_to_install(project, tmp_path, kind):
    pytester = project(THRESHOLD_TESTS)
    broken = tmp_path / "broken"
    (broken / "keras").mkdir(parents=True)
    (broken / "keras" / "__init__.py").write_text(BROKEN_KERAS[kind])
    pytest_run, sadl_run = _runs(pytester.path, _env(broken))
    cause = "this keras is broken" if kind == "import-error" else "No module named 'keras'"
    _assert_one_line(pytest_run, sadl_run, cause)


@pytest.mark.tf
def test_a_low_ulimit_v_is_the_same_one_line(project):
    pytester = project(THRESHOLD_TESTS)
    # 600 MiB of address space: Python, pytest and NumPy fit, TensorFlow's native library
    # cannot be mapped ("failed to map segment from shared object")
    probe = subprocess.run(
        [sys.executable, "-c", "import keras"],
        env=_env(),
        preexec_fn=_limit_memory(600),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if probe.returncode == 0 or "ImportError" not in probe.stderr:  # pragma: no cover - another platform
        pytest.skip(
            f"importing keras under ulimit -v 600M does not fail with an ImportError here: {probe.stderr[-300:]}"
        )
    pytest_run, sadl_run = _runs(pytester.path, _env(), preexec=_limit_memory(600))
    _assert_one_line(pytest_run, sadl_run, "ImportError")
    assert "ulimit -v" in pytest_run.stdout + pytest_run.stderr


def test_only_a_backend_import_is_translated(monkeypatch):
    from pytest_sadl.capture.backend import backend_error

    assert backend_error(ModuleNotFoundError("No module named 'pandas'", name="pandas")) is None  # the user's own
    assert backend_error(OSError(28, "No space left on device")) is None  # not an import
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    err = backend_error(ModuleNotFoundError("No module named 'jax'", name="jax"))
    assert err is not None and 'pip install "pytest-sadl[jax]"' in str(err) and "\n" not in str(err)


LOADER = """
import os
import sys


def model():
    if os.environ["SADL_LOADER"] == "exit":
        sys.exit(3)
    raise KeyboardInterrupt  # Ctrl-C while a slow loader runs
"""


def _pytest(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.tf
def test_a_loader_calling_sys_exit_is_a_usage_error_and_an_interrupt_ends_as_one(project):
    pytester = project(THRESHOLD_TESTS)
    ini = pytester.path / "pytest.ini"
    ini.write_text(ini.read_text().replace("sadl_model = model.keras", "sadl_model = loaders:model"))
    (pytester.path / "loaders.py").write_text(LOADER)
    env = _env(pytester.path)
    res = _pytest(pytester.path, "--sadl-coverage", "-p", "no:xdist", env={**env, "SADL_LOADER": "exit"})
    out = res.stdout + res.stderr
    assert res.returncode == 4, out
    assert "INTERNALERROR" not in out and "Traceback" not in out, out
    assert [line for line in out.splitlines() if "pytest-sadl" in line] == [
        "ERROR: pytest-sadl: loaders:model called sys.exit(3) while loading the model (--sadl-model); a loader "
        "must return the model or raise an exception that says what is wrong"
    ], out
    res = _pytest(pytester.path, "--sadl-coverage", "-p", "no:xdist", env={**env, "SADL_LOADER": "interrupt"})
    out = res.stdout + res.stderr
    assert res.returncode == 2, out  # pytest's exit status for an interrupted run
    assert "INTERNALERROR" not in out and "Traceback" not in out, out
    sadl = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_sadl",
            "profile",
            "build",
            "--model",
            "loaders:model",
            "--train",
            "train.npz",
            "-q",
        ],
        cwd=pytester.path,
        env={**env, "SADL_LOADER": "exit"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert sadl.returncode == 2 and "Traceback" not in sadl.stderr, sadl.stderr
    assert [line for line in sadl.stderr.splitlines() if line.startswith("sadl")] == [
        "sadl: error: loaders:model called sys.exit(3) while loading the model (model); a loader must return "
        "the model or raise an exception that says what is wrong"
    ], sadl.stderr


def _wchan(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/wchan").read_text()
    except OSError:  # pragma: no cover - gone
        return ""


@pytest.mark.tf
def test_ctrl_c_while_the_reports_are_written_ends_as_an_interrupt_with_nothing_half_written(project):
    pytester = project(THRESHOLD_TESTS)
    fifo = pytester.path / "report.fifo"
    os.mkfifo(fifo)
    out = pytester.path / "out.txt"
    with open(out, "wb") as fh:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:randomly",
                "-p",
                "no:xdist",
                "--sadl-coverage",
                "--sadl-report=json:a.json",
                f"--sadl-report=markdown:{fifo}",
                "--sadl-report=html:b.html",
                "--sadl-report=term",
            ],
            cwd=pytester.path,
            env=_env(),
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 240
        # the run is blocked opening the FIFO for writing (no reader yet): its last report but one
        while _wchan(proc.pid) != "wait_for_partner":
            assert proc.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:  # pragma: no cover - the interrupt was lost: let it go on
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
            raise
    finally:
        if proc.poll() is None:  # pragma: no cover
            proc.kill()
            proc.wait()
    text = out.read_text()
    assert proc.returncode == 2, text  # pytest's exit status for an interrupted run (was -2)
    assert "Traceback" not in text and "INTERNALERROR" not in text, text
    assert (
        f"pytest-sadl: interrupted (Ctrl-C) while writing the reports; written: {pytester.path / 'a.json'}; "
        f"not written: markdown:{fifo}, html:{pytester.path / 'b.html'}"
    ) in text, text
    import json

    assert json.loads((pytester.path / "a.json").read_text())["metrics"]["lsc"]["count"] == 60  # whole
    assert not (pytester.path / "b.html").exists()  # absent
    assert [p.name for p in pytester.path.iterdir() if p.name.startswith(".tmp-")] == []  # no temporary file left
