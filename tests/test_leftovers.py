"""What killed writers leave (issue 34): a ``.tmp-*`` file of the atomic writer in a report
folder, a ``.tmp-profile-*`` folder in the profile cache. The next write into that folder,
by any run, removes those untouched for ``LEFTOVER_AGE`` seconds, and never a young one (a
concurrent writer's). Real files, real runs."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from pytest_sadl.atomic import LEFTOVER_AGE, atomic_write_text, sweep_leftovers

try:
    from tests.test_plugin import THRESHOLD_TESTS, _warm_imports, project, run  # noqa: F401  (fixtures)
except ImportError:  # pragma: no cover - tests/ itself on sys.path
    from test_plugin import THRESHOLD_TESTS, _warm_imports, project, run  # type: ignore[no-redef]  # noqa: F401


def _age(path: Path, seconds: float) -> None:
    when = time.time() - seconds
    for p in (path, *path.rglob("*")) if path.is_dir() else (path,):
        os.utime(p, (when, when), follow_symlinks=False)


def _leftovers(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    old_file = folder / ".tmp-index.html-k1ll3d"
    old_file.write_text("<html>half")
    young_file = folder / ".tmp-index.html-l1v3"
    young_file.write_text("<html>being written")
    old_dir = folder / ".tmp-profile-abc-k1ll3d"
    old_dir.mkdir()
    (old_dir / "sa.npy").write_bytes(b"\x93NUMPY")
    busy_dir = folder / ".tmp-profile-def-busy"
    busy_dir.mkdir()
    (busy_dir / "sa.npy").write_bytes(b"\x93NUMPY")
    _age(old_file, LEFTOVER_AGE + 60)
    _age(old_dir, LEFTOVER_AGE + 60)
    _age(busy_dir, LEFTOVER_AGE + 60)
    (busy_dir / "ranges.npy").write_bytes(b"\x93NUMPY")  # a live writer's newest file
    return {"old_file": old_file, "young_file": young_file, "old_dir": old_dir, "busy_dir": busy_dir}


def test_the_next_write_into_a_folder_removes_only_old_leftovers(tmp_path):
    found = _leftovers(tmp_path / "out")
    atomic_write_text(tmp_path / "out" / "report.md", "text")
    assert not found["old_file"].exists() and not found["old_dir"].exists()
    assert found["young_file"].exists() and found["busy_dir"].exists()
    assert sweep_leftovers(tmp_path / "out") == []  # nothing else is old enough
    assert sweep_leftovers(tmp_path / "out", older_than=-1) != []  # (everything is a leftover then)


@pytest.mark.tf
def test_a_run_sweeps_its_report_folders_and_its_profile_cache(project, monkeypatch):
    from pytest_sadl import atomic

    pytester = project(THRESHOLD_TESTS)
    cache = pytester.path / "cache"
    args = ("--sadl-coverage", f"--sadl-cache-dir={cache}", "--sadl-report=json:out.json", "--sadl-report=html:html")
    assert run(pytester, *args).ret == 0  # builds the profile
    html, cache_found = _leftovers(pytester.path / "html"), _leftovers(cache)
    root = pytester.path / ".tmp-out.json-k1ll3d"
    root.write_text("{")
    _age(root, LEFTOVER_AGE + 60)
    monkeypatch.setattr(atomic, "_swept", set())  # a new run is a new process: it has swept nothing yet
    res = run(pytester, *args)  # loads the profile: it still writes in the cache (data history)
    assert res.ret == 0
    assert json.loads((pytester.path / "out.json").read_text())["tests"]
    for found in (html, cache_found):
        assert not found["old_file"].exists() and not found["old_dir"].exists()
        assert found["young_file"].exists() and found["busy_dir"].exists()
    assert not root.exists()
