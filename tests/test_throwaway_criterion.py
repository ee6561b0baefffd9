"""A new criterion is one file plus one registry line: ``tests/throwaway_pac.py`` (PAC,
positive activation coverage, with its own ``--sadl-pac-threshold``) registered by its
last line, in real pytest sessions on the trained ConvNet and in ``sadl select``. It is
seen in the options (``pytest --help``), the terminal, JSON (valid against the schema),
HTML, Markdown and badge reports, ``--sadl-fail-under``, ``--sadl-compare`` and
``sadl select``, and its number is the naive one computed here from the model's layers.

Every run is a fresh interpreter: the registration comes before pytest-sadl's plugin is
imported (``-p throwaway_pac``), as a user's plugin would do it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.tf

HERE = Path(__file__).parent

TESTS = """
import numpy as np
import pytest

X = np.load("inputs.npy")


@pytest.mark.sadl(group="first")
def test_first(sadl_model):
    sadl_model.predict(X[:30], verbose=0)


@pytest.mark.sadl(group="second")
def test_second(sadl_model):
    sadl_model.predict(X[30:60], verbose=0)
"""


@pytest.fixture
def project(pytester: pytest.Pytester, conv_model_path: Path, digits) -> pytest.Pytester:
    shutil.copy(conv_model_path, pytester.path / "model.keras")
    shutil.copy(HERE / "throwaway_pac.py", pytester.path / "throwaway_pac.py")
    np.savez(pytester.path / "train.npz", x=digits.x_train, y=digits.y_train)
    np.save(pytester.path / "inputs.npy", digits.x_test[:60])
    pytester.makefile(
        ".ini", pytest="[pytest]\nsadl_model = model.keras\nsadl_train = train.npz\nsadl_layers = hidden\n"
    )
    pytester.makepyfile(test_project=TESTS)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-p", "throwaway_pac", "-p", "no:cacheprovider", "-p", "no:randomly", *args, timeout=600
    )


def naive_pac(model_path: Path, layers: list[str], x: np.ndarray, threshold: float) -> float:
    """PAC by its definition: each coverage layer's outputs (a conv channel's mean over
    its map), a neuron covered when some input's value is above the threshold."""
    import keras

    model = keras.models.load_model(model_path)
    covered = total = 0
    for name in layers:
        out = keras.Model(model.inputs, model.get_layer(name).output).predict(x, verbose=0)
        out = out.reshape(len(x), -1, out.shape[-1]).mean(axis=1) if out.ndim > 2 else out
        covered += int((out > threshold).any(axis=0).sum())
        total += out.shape[1]
    return covered / total


def test_a_throwaway_criterion_is_seen_everywhere(project: pytest.Pytester, digits) -> None:
    from pytest_sadl.resultsfile import load_results

    helped = run(project, "--help")
    assert "--sadl-pac-threshold=T" in helped.stdout.str()
    assert "sadl_pac_threshold" in helped.stdout.str()
    bad = run(project, "--sadl-coverage", "--sadl-metrics=pac", "--sadl-pac-threshold=-1")
    assert bad.ret == 4 and "--sadl-pac-threshold=-1: PAC's threshold must be >= 0" in bad.stderr.str()

    reports = ["--sadl-report=term", "--sadl-report=json:out.json", "--sadl-report=html:html"]
    reports += ["--sadl-report=markdown:out.md", "--sadl-report=badge:badges"]
    first = run(
        project,
        "--sadl-coverage",
        "--sadl-metrics=lsc,nc,pac",
        "--sadl-pac-threshold=0.1",
        "--sadl-fail-under=pac:100",
        *reports,
    )
    out = first.stdout.str()
    data = json.loads((project.path / "out.json").read_text())
    load_results(project.path / "out.json")  # valid against the results schema (PAC: a share in [0, 1])
    pac = data["metrics"]["pac"]
    expected = naive_pac(project.path / "model.keras", data["config"]["coverage_layers"], digits.x_test[:60], 0.1)
    assert pac["value"] == pytest.approx(expected)
    assert 0 < pac["value"] < 1 and pac["covered"] == round(pac["value"] * pac["total"])
    assert data["config"]["pac_threshold"] == 0.1  # its parameter, recorded with its number
    assert [g["name"] for g in data["groups"]] == ["first", "second"]
    assert all("pac" in g["cumulative"] for g in data["groups"]) and all("pac" in lay for lay in data["layers"])
    text = f"{pac['value'] * 100:.2f}%"
    # --sadl-fail-under: PAC below 100% fails the session, named
    assert first.ret == 1 and any(f["metric"] == "pac" for f in data["outcome"]["failures"]), out
    assert "PAC" in out and text in out
    html = (project.path / "html" / "index.html").read_text()
    assert "Positive activation coverage" in html and text in html
    assert "--c-pac: #0f766e;" in html and ".m-pac { stroke: var(--c-pac);" in html  # its colour, its line
    assert 'class="m-pac"' in html  # drawn in the cumulative chart
    assert "A neuron is covered when some input drives it above the threshold." in html
    markdown = (project.path / "out.md").read_text()
    assert "PAC" in markdown and text in markdown
    badge = json.loads((project.path / "badges" / "sadl-badge-pac.json").read_text())
    assert badge["label"] == "PAC" and badge["message"] == f"{pac['value'] * 100:.1f}%"

    # --sadl-compare: a higher threshold covers fewer neurons, a drop the limit catches
    shutil.copy(project.path / "out.json", project.path / "baseline.json")
    second = run(
        project,
        "--sadl-coverage",
        "--sadl-metrics=lsc,nc,pac",
        "--sadl-pac-threshold=2",
        "--sadl-compare=baseline.json",
        "--sadl-compare-fail=pac:-0.5",
        "--sadl-report=json:second.json",
    )
    again = json.loads((project.path / "second.json").read_text())
    assert again["metrics"]["pac"]["value"] < pac["value"]
    assert second.ret == 1, second.stdout.str()
    assert "FAIL PAC dropped by" in second.stdout.str() and "--sadl-compare-fail=pac:-0.5" in second.stdout.str()

    # sadl select: order the pool by the new criterion (cam), as by any registry criterion
    np.savez(project.path / "pool.npz", x=digits.x_test[60:100], y=digits.y_test[60:100])
    script = textwrap.dedent(
        """
        import sys
        import throwaway_pac  # the registration: before the rest of pytest-sadl is imported
        from pytest_sadl.cli.main import main
        sys.exit(main(sys.argv[1:]))
        """
    )
    args = ["select", "pool.npz", "--strategy", "cam", "--criterion", "pac", "--budget", "5", "--out", "sel"]
    args += ["--cache-dir", str(project.path / ".sadl-cache")]
    done = subprocess.run(
        [sys.executable, "-c", script, *args], cwd=project.path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    chosen = json.loads((project.path / "sel" / "selection.json").read_text())
    assert chosen["criterion"] == "pac" and len(chosen["indices"]) == 5
    assert chosen["new_targets"] == sorted(chosen["new_targets"], reverse=True) and chosen["new_targets"][0] > 0
