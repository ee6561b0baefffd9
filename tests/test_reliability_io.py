"""Faults around files, locks, imports and interrupts (issue 15): each ends as pytest or
the ``sadl`` command promises, never a crash, a hang or a lie.

Real files (a FIFO read by a thread, ``/dev/stdout`` of a subprocess, ``/dev/null`` checked
afterwards), real second processes holding a lock (stopped with SIGSTOP, killed), a real
``keras`` import that fails, a real SIGINT.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pytest_sadl.atomic import atomic_write_text

try:
    from tests.test_plugin import THRESHOLD_TESTS, _warm_imports, project, results, run  # noqa: F401  (fixtures)
except ImportError:  # pragma: no cover - tests/ itself on sys.path
    from test_plugin import THRESHOLD_TESTS, _warm_imports, project, results, run  # type: ignore[no-redef]  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]

HUGE_TESTS = """
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
"""


@pytest.mark.tf
def test_huge_inputs_under_w_error_keep_every_result(project):
    pytester = project(HUGE_TESTS)
    # -p no:benchmark: pytest-benchmark, where a machine has it, warns at configure time
    # when it sees xdist (this suite's workers), which -W error would make an INTERNALERROR
    res = run(
        pytester,
        "-p",
        "no:benchmark",
        "-W",
        "error",
        "--sadl-coverage",
        "--sadl-report=json:out.json",
        "--sadl-report=term",
    )
    out = res.stdout.str()
    assert res.ret == 0, out
    assert "could not compute" not in out and "Warning" not in out, out
    data = results(pytester)
    assert {t["nodeid"].split("::")[1]: t["inputs"] for t in data["tests"]} == {"test_huge": 5, "test_plain": 20}
    assert data["metrics"]["lsc"]["count"] == 25 and data["metrics"]["kmnc"]["value"] > 0


# ----------------------------------------------------------------------------- report paths


def _null_device(path: Path) -> Path:
    """A private character device equal to /dev/null (major 1, minor 3): a test that went
    wrong would replace it, never the machine's /dev/null (the tests run as root)."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, AttributeError):  # pragma: no cover - no CAP_MKNOD
        pytest.skip("cannot make a character device here")
    return path


def _read_fifo_in_thread(fifo: Path) -> tuple[threading.Thread, list[bytes]]:
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as fh:
            got.append(fh.read())

    thread = threading.Thread(target=read, daemon=True)  # daemon: a wrong writer never opens it
    thread.start()
    return thread, got


def test_the_atomic_writer_streams_into_special_files_and_replaces_links(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    thread, got = _read_fifo_in_thread(fifo)
    atomic_write_text(fifo, "through the pipe\n")
    thread.join(30)
    assert got == [b"through the pipe\n"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    device = _null_device(tmp_path / "null")
    atomic_write_text(device, "x" * 100_000)
    assert stat.S_ISCHR(os.lstat(device).st_mode)
    # a symbolic link to a regular file: the link is replaced, the file it named is untouched
    (tmp_path / "elsewhere.txt").write_text("keep me")
    (tmp_path / "link.txt").symlink_to(tmp_path / "elsewhere.txt")
    atomic_write_text(tmp_path / "link.txt", "new")
    assert not (tmp_path / "link.txt").is_symlink() and (tmp_path / "link.txt").read_text() == "new"
    assert (tmp_path / "elsewhere.txt").read_text() == "keep me"
    # a link to a FIFO (as /dev/stdout is to a pipe) reaches the FIFO
    (tmp_path / "to-pipe").symlink_to(fifo)
    thread, got = _read_fifo_in_thread(fifo)
    atomic_write_text(tmp_path / "to-pipe", "via the link\n")
    thread.join(30)
    assert got == [b"via the link\n"] and (tmp_path / "to-pipe").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere.txt", "link.txt", "null", "pipe", "to-pipe"]


@pytest.mark.tf
def test_reports_go_into_a_fifo_and_a_device_and_two_to_one_file_are_a_usage_error(project):
    pytester = project(THRESHOLD_TESTS)
    fifo = pytester.path / "report.pipe"
    os.mkfifo(fifo)
    device = _null_device(pytester.path / "null")
    thread, got = _read_fifo_in_thread(fifo)
    res = run(
        pytester,
        "--sadl-coverage",
        f"--sadl-report=json:{fifo}",
        f"--sadl-report=markdown:{device}",
        "--sadl-report=badge:badges",
    )
    thread.join(60)
    assert res.ret == 0, res.stdout.str()
    assert json.loads(got[0])["metrics"]["lsc"]["count"] == 60
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and stat.S_ISCHR(os.lstat(device).st_mode)
    assert f"sadl: json report written to {fifo}" in res.stdout.str()
    assert json.loads((pytester.path / "badges" / "sadl-badge-lsc.json").read_text())["label"] == "LSC"

    res = run(
        pytester,
        "--sadl-coverage",
        "--sadl-report=json:same.out",
        "--sadl-report=markdown:sub/../same.out",
        "--sadl-report=json:./same.out",
    )
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    line = res.stderr.str().strip().splitlines()[-1]
    assert "json:" in line and "markdown:" in line and "write the same file" in line, line
    assert not (pytester.path / "same.out").exists()


@pytest.mark.tf
def test_dev_stdout_and_dev_null_in_a_subprocess(project):
    """The machine's own /dev/stdout and /dev/null, in a real interpreter whose stdout is a
    pipe: the Markdown report arrives on it, and both stay what they were."""
    pytester = project(THRESHOLD_TESTS)
    null_before, stdout_link = os.stat("/dev/null"), os.readlink("/dev/stdout")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:randomly",
                "--sadl-coverage",
                "--sadl-report=markdown:/dev/stdout",
                "--sadl-report=json:/dev/null",
            ],
            cwd=pytester.path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        null_ok = stat.S_ISCHR(os.lstat("/dev/null").st_mode)
        stdout_ok = os.path.islink("/dev/stdout") and os.readlink("/dev/stdout") == stdout_link
        _restore_dev(null_ok, stdout_ok, null_before, stdout_link)
    assert null_ok and stdout_ok
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| LSC |" in proc.stdout and "sadl: markdown report written to /dev/stdout" in proc.stdout


def _restore_dev(null_ok: bool, stdout_ok: bool, null_before: os.stat_result, stdout_link: str) -> None:
    """Put /dev/null and /dev/stdout back should a broken writer have replaced them."""
    if not null_ok:  # pragma: no cover - only when the writer is broken
        os.unlink("/dev/null")
        os.mknod("/dev/null", stat.S_IFCHR | 0o666, null_before.st_rdev)
        os.chmod("/dev/null", 0o666)
    if not stdout_ok:  # pragma: no cover
        os.unlink("/dev/stdout")
        os.symlink(stdout_link, "/dev/stdout")


# ----------------------------------------------------------------------------- locks

HOLDER = """
import os, sys, time
from pathlib import Path
from pytest_sadl.store.locks import locked

with locked(Path(sys.argv[1])):
    child = os.fork() if sys.argv[2] == "fork" else None
    if child == 0:  # inherits the locked descriptor and outlives its parent
        time.sleep(300)
        os._exit(0)
    print(child or 0, flush=True)
    time.sleep(300)
"""


def _hold_lock(lock: Path, mode: str) -> tuple[subprocess.Popen, int]:
    """A real second process holding ``lock`` (with ``mode="fork"``, a child shares it);
    returns the process and the child's pid (0: none)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), mode], stdout=subprocess.PIPE, text=True, env=env)
    child = int(proc.stdout.readline())  # printed once the lock is held
    return proc, child


def _end(proc: subprocess.Popen, child: int) -> None:
    for pid in (proc.pid, child):
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                os.kill(pid, signal.SIGCONT)
    proc.wait(30)


@pytest.mark.tf
def test_a_stopped_lock_holder_is_named_and_a_gone_one_taken_over(project):
    pytester = project(THRESHOLD_TESTS, extra="sadl_cache_dir = cache")
    assert run(pytester, "--sadl-coverage").ret == 0  # to learn the profile's name
    (entry,) = (pytester.path / "cache").glob("profile-*[!k]")
    shutil.rmtree(entry)
    lock = entry.with_name(entry.name + ".lock")

    holder, _ = _hold_lock(lock, "plain")
    try:
        os.kill(holder.pid, signal.SIGSTOP)  # a hung job on a shared cache
        res = run(
            pytester, "--sadl-coverage", "--sadl-lock-timeout=4", "--sadl-report=json:out.json", "--sadl-report=term"
        )
    finally:
        _end(holder, 0)
    out = res.stdout.str()
    assert res.ret == 0, out
    (waiting,) = [line for line in res.stdout.lines if "waiting for the lock" in line]
    assert f"held by process {holder.pid} on host {socket.gethostname()} since " in waiting
    assert f"kill {holder.pid}" in waiting and "--sadl-lock-timeout" in waiting
    (warning,) = [w for w in results(pytester)["outcome"]["warnings"] if "lock" in w]
    assert "waited 4 s" in warning and "built in memory for this run, not saved" in warning, warning
    assert results(pytester)["metrics"]["lsc"]["count"] == 60 and not entry.exists()

    holder, child = _hold_lock(lock, "fork")
    try:
        os.kill(holder.pid, signal.SIGKILL)  # the holder dies; its child keeps the lock held
        holder.wait(30)
        res = run(pytester, "--sadl-coverage", "--sadl-lock-timeout=60")
    finally:
        _end(holder, child)
    assert res.ret == 0, res.stdout.str()
    (taken,) = [line for line in res.stdout.lines if "taking it over" in line]
    assert f"held by process {holder.pid} on host" in taken and "which is gone" in taken
    assert entry.is_dir()  # built and saved under the new lock, at once
