"""The ``sadl`` command end to end: console script, ``python -m pytest_sadl``, profile
build and list, errors as one line with exit status 2, the progress bar."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_sadl.cli.args import parse_layers
from pytest_sadl.cli.main import ProgressBar, build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def run(args: list[str], cwd: Path, *, module: bool = False) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))
    exe = shutil.which("sadl")
    cmd = [sys.executable, "-m", "pytest_sadl", *args] if module or exe is None else [exe, *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _ours(stderr: str) -> list[str]:
    """stderr without TensorFlow's C++ start-up log (absl prints it whatever the log level)."""
    tf_log = ("WARNING: All log messages before absl", "I0000 ", "W0000 ", "To enable the following instructions")
    return [line for line in stderr.splitlines() if not line.startswith(tf_log)]


@pytest.fixture()
def project(tmp_path: Path, conv_model_path: Path, digits: Any) -> Path:
    """A user's project: pyproject with a pytest section, a model and training data."""
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = ''\n")
    (tmp_path / "models").mkdir()
    (tmp_path / "data").mkdir()
    shutil.copy(conv_model_path, tmp_path / "models" / "m.keras")
    np.savez(tmp_path / "data" / "train.npz", x=digits.x_train, y=digits.y_train)
    (tmp_path / "sub").mkdir()
    return tmp_path


def test_help_reads_well(tmp_path: Path) -> None:
    top = run(["--help"], tmp_path)
    assert top.returncode == 0
    for word in ("profile", "report", "compare", "Surprise Adequacy"):
        assert word in top.stdout
    build = run(["profile", "build", "--help"], tmp_path, module=True)
    assert build.returncode == 0
    for opt in ("--model", "--train", "--sa-layers", "--coverage-layers", "--cache-dir", "--quiet", "--rebuild"):
        assert opt in build.stdout
    for opt in ("--sadl-model", "--sadl-train", "--sadl-layers", "--sadl-coverage-layers", "sadl_model of the"):
        assert opt in build.stdout  # the plugin's spellings, and where the defaults come from
    assert "Traceback" not in top.stderr + build.stderr


def test_version_needs_no_command(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from pytest_sadl import __version__

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"sadl (pytest-sadl) {__version__}\n"
    done = run(["--version"], tmp_path)  # the console script itself
    assert (done.returncode, done.stdout, done.stderr) == (0, f"sadl (pytest-sadl) {__version__}\n", "")


def test_profile_list_finds_the_ini_cache_dir_from_a_subdirectory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sadl profile list` looks where `pytest --sadl-coverage` would: the ini's
    sadl_cache_dir, relative to the ini, from any directory below it; --cache-dir wins."""
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\nsadl_cache_dir = "store/sadl"\n')
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "store" / "sadl").mkdir(parents=True)
    (tmp_path / "store" / "sadl" / "profile-feed.npz").write_bytes(b"not a profile")
    listed = run(["profile", "list", "--json"], tmp_path / "a" / "b")
    assert listed.returncode == 0, listed.stderr
    js = json.loads(listed.stdout)
    assert js["cache_dir"] == str(tmp_path / "store" / "sadl") and [r["fingerprint"] for r in js["profiles"]] == [
        "feed"
    ]
    monkeypatch.chdir(tmp_path / "a")  # in process: a second console-script start would add nothing
    assert main(["profile", "list", "--sadl-cache-dir=elsewhere"]) == 0
    assert f"no training profiles in {tmp_path / 'a' / 'elsewhere'}" in capsys.readouterr().out


HEAVY = ("numpy", "scipy", "pytest", "_pytest", "keras", "tensorflow", "jax", "jinja2")


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--version"],
        ["report", "--help"],
        ["compare", "--help"],
        ["profile", "--help"],
        ["profile", "build", "--help"],
        ["select", "--help"],
    ],
)
def test_help_and_version_import_nothing_heavy(args: list[str]) -> None:
    """`sadl --help` starts at once: it imports no NumPy, SciPy, pytest or backend (they took
    1.5 s); `select`, whose module needs NumPy, is registered in full only when it runs, and
    its module imports NumPy and the selection only when a selection runs (1.7 s before)."""
    code = (
        "import contextlib, io, sys\n"
        "from pytest_sadl.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n        main(sys.argv[1:])\n    except SystemExit:\n        pass\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules], 'usage:' in out.getvalue() or 'sadl' in out.getvalue())\n"
    )
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[] True", done.stdout + done.stderr


def test_select_help_names_the_selections_strategies() -> None:
    """`sadl select` names the strategies without importing the selection (NumPy): the
    two lists are the same."""
    from pytest_sadl.cli.select import STRATEGIES
    from pytest_sadl.criteria.selection import STRATEGIES as SELECTION_STRATEGIES

    assert STRATEGIES == SELECTION_STRATEGIES


def test_select_help_still_lists_its_own_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["select", "--help"])
    out = capsys.readouterr().out
    assert "--budget" in out and "--strategy" in out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "select" in capsys.readouterr().out


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
    assert "COMMAND" in capsys.readouterr().err


@pytest.mark.tf
def test_build_then_list_end_to_end(project: Path) -> None:
    first = run(
        ["profile", "build", "--model", "models/m.keras", "--train", "data/train.npz", "--sa-layers", "hidden"], project
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("built profile ")
    assert "Traceback" not in first.stderr and "\r" not in first.stderr  # no bar when not a TTY
    cache = project / ".pytest_cache" / "d" / "sadl"
    files = [p for p in cache.glob("profile-*") if p.is_dir()]
    assert len(files) == 1
    fp = files[0].name[len("profile-") :]
    # the CLI made .pytest_cache: it is git-ignored as pytest's own would be
    assert (project / ".pytest_cache" / ".gitignore").read_text().splitlines()[-1] == "*"
    assert fp[:16] in first.stdout

    # from a subdirectory: the same rootdir, so the same cache, and a hit
    again = run(
        ["profile", "build", "--model", "../models/m.keras", "--train", "../data/train.npz", "--quiet"], project / "sub"
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("found cached profile " + fp[:16]) and _ours(again.stderr) == []
    assert re.search(r"in \d+\.\ds \(TensorFlow import \d+\.\ds, loading \d+\.\ds\)", again.stdout)

    listed = run(["profile", "list"], project / "sub")
    assert listed.returncode == 0 and fp[:16] in listed.stdout and "digits_conv" in listed.stdout
    assert "KiB" in listed.stdout and str(cache) in listed.stdout
    js = json.loads(run(["profile", "list", "--json"], project).stdout)
    (row,) = js["profiles"]
    assert row["fingerprint"] == fp and row["ok"] and row["n_train"] > 1000 and row["sa_layers"] == ["hidden"]
    assert row["size"] == sum(f.stat().st_size for f in files[0].iterdir()) and row["age_seconds"] >= 0

    other = project / "elsewhere"
    built = run(
        [
            "profile",
            "build",
            "--model",
            "models/m.keras",
            "--train",
            "data/train.npz",
            "--coverage-layers",
            "conv1,hidden",
            "--cache-dir",
            str(other),
            "-q",
        ],
        project,
    )
    assert built.returncode == 0, built.stderr
    assert (
        len([p for p in other.glob("profile-*") if p.is_dir()]) == 1
        and len([p for p in cache.glob("profile-*") if p.is_dir()]) == 1
    )


@pytest.mark.tf
def test_errors_are_one_line_exit_2(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """In process (the console script's main), so no second TensorFlow start-up."""
    base = ["profile", "build", "--rootdir", str(project), "--model", "models/m.keras", "-q"]
    assert main([*base, "--train", "data/train.npz", "--sa-layers", "dense9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sadl: error: SA layers: model 'digits_conv' has no layer 'dense9'")
    assert "hidden" in err and "Traceback" not in err and err.count("\n") == 1
    assert (
        main(
            [
                "profile",
                "build",
                "--rootdir",
                str(project),
                "--model",
                "models/nope.keras",
                "--train",
                "data/train.npz",
                "-q",
            ]
        )
        == 2
    )
    assert "does not exist" in capsys.readouterr().err
    np.savez(project / "data" / "flat.npz", x=np.zeros((10, 64), np.float32))
    assert main([*base, "--train", "data/flat.npz"]) == 2
    assert "expects (8, 8, 1)" in capsys.readouterr().err
    assert main([*base, "--train", "data/train.npz", "--batch-size", "0"]) == 2
    assert "--batch-size=0: the batch size must be >= 1" in capsys.readouterr().err
    assert not (project / ".pytest_cache").exists()


@pytest.mark.tf
def test_build_reads_the_projects_ini_so_the_plugin_finds_the_profile(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pyproject sets sadl_layers and sadl_var_threshold: `sadl profile build` without flags
    stores the profile under the fingerprint the plugin's options give (found, not rebuilt)."""
    from pytest_sadl.profile.build import ProfileOptions
    from pytest_sadl.profile.lookup import load_or_build

    (project / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nsadl_layers = ["conv2"]\nsadl_var_threshold = "1e-4"\n'
    )
    assert (
        main(
            [
                "profile",
                "build",
                "--rootdir",
                str(project),
                "--model",
                "models/m.keras",
                "--train",
                "data/train.npz",
                "-q",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("built profile ") and "SA layers conv2;" in out
    cache = project / ".pytest_cache" / "d" / "sadl"
    again = load_or_build(
        str(project / "models" / "m.keras"),
        str(project / "data" / "train.npz"),
        ProfileOptions(sa_layers=("conv2",), var_threshold=1e-4),
        cache,
    )
    assert not again.built and again.fingerprint[:16] in out
    assert (
        main(
            [
                "profile",
                "build",
                "--rootdir",
                str(project),
                "--model",
                "models/m.keras",
                "--train",
                "data/train.npz",
                "--sa-layers",
                "hidden",
                "-q",
            ]
        )
        == 0
    )  # a flag overrides the ini: another profile
    assert "built profile" in capsys.readouterr().out and len([p for p in cache.glob("profile-*") if p.is_dir()]) == 2


@pytest.mark.tf
def test_build_computes_every_dsa_distance_when_the_flag_or_the_ini_asks(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = [
        "profile",
        "build",
        "--rootdir",
        str(project),
        "--model",
        "models/m.keras",
        "--train",
        "data/train.npz",
        "-q",
    ]
    cache = project / ".pytest_cache" / "d" / "sadl"

    def precomputed(layer: str) -> bool:
        metas = [json.loads((p / "meta.json").read_text())["meta"] for p in cache.glob("profile-*") if p.is_dir()]
        (meta,) = [m for m in metas if m["sa_layers"] == [layer]]
        return meta["dsa_precomputed"]

    assert main([*base, "--sa-layers", "hidden"]) == 0
    assert precomputed("hidden") is False  # the default: dist_b only when inputs need them
    assert main([*base, "--sa-layers", "hidden", "--dsa-precompute"]) == 0
    assert precomputed("hidden") is True  # the same profile, completed
    (project / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nsadl_layers = ["conv2"]\nsadl_dsa_precompute = true\n'
    )
    assert main(base) == 0
    assert precomputed("conv2") is True
    assert main([*base, "--no-dsa-precompute", "--rebuild"]) == 0  # the flag wins over the ini
    assert precomputed("conv2") is False


def test_list_in_process_needs_no_tensorflow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "list", "--cache-dir", str(tmp_path / "none")]) == 0
    assert "no training profiles in" in capsys.readouterr().out
    (tmp_path / "profile-abc.npz").write_bytes(b"junk")
    assert main(["profile", "list", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "abc" in out and "(unusable)" in out and "rebuilt" in out
    os.mkfifo(tmp_path / "profile-fifo")  # a FIFO named like a profile: listed, never waited on
    (tmp_path / "profile-dir").mkdir()
    os.mkfifo(tmp_path / "profile-dir" / "meta.json")
    assert main(["profile", "list", "--cache-dir", str(tmp_path), "--json"]) == 0
    rows = {r["fingerprint"]: r for r in json.loads(capsys.readouterr().out)["profiles"]}
    assert not rows["fifo"]["ok"] and "not a folder" in rows["fifo"]["problem"]
    assert not rows["dir"]["ok"] and "not a regular file" in rows["dir"]["problem"]


@pytest.mark.tf
def test_build_into_an_unwritable_cache_succeeds_uncached(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "blocked").write_text("a file where the cache folder would go")
    base = [
        "profile",
        "build",
        "--rootdir",
        str(project),
        "--model",
        "models/m.keras",
        "--train",
        "data/train.npz",
        "-q",
    ]
    assert main([*base, "--cache-dir", str(project / "blocked" / "cache")]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("built (not cached) profile ")
    (line,) = captured.err.splitlines()
    assert (
        line.startswith("sadl: warning: pytest-sadl: could not cache the training profile in ")
        and "NotADirectoryError" in line
    )
    monkeypatch.setenv("HOME", str(project / "home"))
    assert main([*base, "--cache-dir", "~/sadl-cache"]) == 0  # ~ is the user's home, not a folder named "~"
    assert [p.name[:8] for p in (project / "home" / "sadl-cache").iterdir() if p.is_dir()] == ["profile-"]


def test_progress_bar() -> None:
    quiet = io.StringIO()
    bar = ProgressBar(quiet)  # StringIO is not a TTY: no bar
    bar(5, 10)
    bar.status("phase")
    assert quiet.getvalue() == "sadl: phase\n"
    tty = io.StringIO()
    bar = ProgressBar(tty, enabled=True)
    bar(5, 10)
    bar(10, 10)
    text = tty.getvalue()
    assert "\r[" in text and "10/10 inputs" in text and "100%" in text and text.endswith("\n")
    silent = io.StringIO()
    bar = ProgressBar(silent, enabled=True, quiet=True)
    bar(1, 2)
    bar.status("x")
    assert silent.getvalue() == ""
    unknown = io.StringIO()
    ProgressBar(unknown, enabled=True)(300, None)
    assert "300 inputs" in unknown.getvalue()


def test_layer_arguments() -> None:
    assert parse_layers(None) is None
    assert parse_layers(["a", "b,c", "3", "-1"]) == ("a", "b", "c", 3, -1)
    args = build_parser().parse_args(["profile", "build", "--model", "m", "--train", "t", "--sa-layers", "x", "y"])
    assert (
        args.sa_layers == ["x", "y"] and args.batch_size is None and not args.quiet
    )  # None: the ini (else 256) decides


def test_the_plugins_flag_spellings_mean_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--sadl-layers=A,B` (the plugin's spelling) and `--sa-layers A B` give the same options."""
    from pytest_sadl.cli.args import project_options

    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\nsadl_batch_size = 64\n")
    ours = ["profile", "build", "--sa-layers", "a", "b", "--coverage-layers", "c", "--batch-size", "32"]
    ours += ["--var-threshold", "0.01", "--var-rule", "paper", "--lsa-near-singular", "keep", "--cache-dir", "cache"]
    plugin = ["profile", "build", "--sadl-layers=a,b", "--sadl-coverage-layers=c", "--sadl-batch-size=32"]
    plugin += ["--sadl-var-threshold=0.01", "--sadl-var-rule=paper", "--sadl-lsa-near-singular=keep"]
    plugin += ["--sadl-cache-dir=cache", "--sadl-model=m", "--sadl-train=t"]
    mixed = ["profile", "build", "--sa-layers=a,b", "--sadl-coverage-layers", "c", "--batch-size=32"]
    mixed += ["--var-threshold=0.01", "--var-rule=paper", "--lsa-near-singular=keep", "--cache-dir=cache"]
    one, two, three = (build_parser(argv).parse_args(argv) for argv in (ours + ["--model", "m"], plugin, mixed))
    options = project_options(two)
    assert project_options(one) == options == project_options(three)
    assert (two.model, two.train, two.cache_dir) == ("m", "t", "cache")
    assert options.sa_layers == ("a", "b") and options.coverage_layers == ("c",)
    assert (options.batch_size, options.var_threshold, options.lsa_near_singular) == (32, 0.01, "keep")
    assert options.var_rule == "paper"
    select = ["select", "pool.npz", "--sadl-metrics=lsc,nc", "--sadl-layers=a,b", "--sadl-model=m"]
    picked = build_parser(select).parse_args(select)
    assert (picked.metrics, picked.sa_layers, picked.model) == ("lsc,nc", ["a,b"], "m")
    assert project_options(picked).metrics == ("lsc", "nc")
    assert (
        options.batch_size
        != project_options(build_parser(["profile", "build"]).parse_args(["profile", "build"])).batch_size
    )


def test_no_model_anywhere_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\nsadl_train = "t.npz"\n')
    assert main(["profile", "build", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sadl: error: no model given: pass --model PATH, or set sadl_model")
    assert str(tmp_path / "pyproject.toml") in err  # names the file the project's configuration is in
    assert main(["select", "pool.npz", "--out", str(tmp_path / "o")]) == 2
    assert "no model given" in capsys.readouterr().err
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    assert main(["profile", "build", "--model", "m.keras"]) == 2
    assert "no training data given: pass --train PATH, or set sadl_train" in capsys.readouterr().err
    (tmp_path / "pyproject.toml").unlink()  # no configuration at all: both named, and where they could go
    assert main(["profile", "build", "--rootdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no model and no training data given: pass --model PATH and --train PATH, or set sadl_model and" in err
    assert "pyproject.toml [tool.pytest.ini_options], pytest.ini" in err and err.count("\n") == 1


@pytest.mark.tf
def test_model_and_data_come_from_the_ini(project: Path, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Where the project's pyproject names sadl_model and sadl_train, `sadl profile build`
    needs no flag (from a subdirectory: found upwards as pytest finds it; the ini's paths
    relative to the ini), builds the plugin's profile, and the flags' spelling finds it."""
    (project / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nsadl_model = "models/m.keras"\nsadl_train = "data/train.npz"\n'
        'sadl_layers = ["hidden"]\n'
    )
    monkeypatch.chdir(project / "sub")
    assert main(["profile", "build", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("built profile ") and "SA layers hidden;" in out
    fingerprint = out.split()[2]
    flags = ["--sadl-model=../models/m.keras", "--sadl-train=../data/train.npz", "--sadl-layers=hidden"]
    assert main(["profile", "build", "-q", *flags]) == 0
    assert capsys.readouterr().out.startswith(f"found cached profile {fingerprint}")
    assert main(["profile", "layers", "--json"]) == 0
    layers = json.loads(capsys.readouterr().out)
    assert layers["model"] == "digits_conv" and any(row["path"] == "hidden" for row in layers["layers"])


@pytest.mark.tf
def test_profile_layers_usable_says_which_layers_each_sa_measure_can_use(
    project: Path, capsys: pytest.CaptureFixture[str], digits: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sadl profile layers --usable` traces the training data and sets LSA, DSA and MDSA up
    on every coverage layer: with a variance threshold no neuron meets, LSA and MDSA fit
    nowhere (the run's own reason given), DSA everywhere; on training inputs of one predicted
    class, DSA nowhere. The verdicts are the engine's: a run on the same layer computes a
    metric exactly when this says it can."""
    import keras

    from pytest_sadl.engine import ProfileView
    from pytest_sadl.profile.build import ProfileOptions
    from pytest_sadl.profile.lookup import load_or_build

    monkeypatch.chdir(project)
    base = ["profile", "layers", "--model", "models/m.keras", "--train", "data/train.npz", "--usable", "--json"]
    assert main(base) == 0
    rows = {r["path"]: r for r in json.loads(capsys.readouterr().out)["layers"]}
    checked = {p: r["usable"] for p, r in rows.items() if "usable" in r}
    assert checked and set(checked) == {p for p, r in rows.items() if r["coverage"]}
    view = ProfileView.of(
        load_or_build(
            keras.saving.load_model(project / "models" / "m.keras"),
            digits.x_train,
            ProfileOptions(sa_layers=("hidden",)),
            project / "cache",
        )
    )
    for key in ("lsa", "dsa", "mdsa"):
        assert (checked["hidden"][key] is None) == (view.scorer(key) is not None), key

    assert main([*base, "--var-threshold=1e9"]) == 0
    strict = [r["usable"] for r in json.loads(capsys.readouterr().out)["layers"] if "usable" in r]
    assert all("var_threshold=1e+09" in u["lsa"] and "var_threshold=1e+09" in u["mdsa"] for u in strict)
    assert all(u["dsa"] is None for u in strict)

    pred = keras.saving.load_model(project / "models" / "m.keras").predict(digits.x_train, verbose=0).argmax(axis=1)
    np.save(project / "data" / "one.npy", digits.x_train[pred == 0])
    assert main(["profile", "layers", "--model", "models/m.keras", "--train", "data/one.npy", "--usable"]) == 0
    out = capsys.readouterr().out
    assert f"DSA can be set up on 0 of {len(checked)} layers" in out
    assert "not on the default SA layer hidden: DSA needs training traces of at least two predicted classes" in out
    assert re.search(r"^LSA can be set up on [1-9]\d* of", out, re.M)


@pytest.mark.tf
def test_a_module_function_of_the_project_loads_as_under_pytest(project: Path) -> None:
    """`sadl_train = "loaders:train"` names a module of the project, which pytest imports
    from the rootdir; the console script (whose sys.path starts at its bin folder) finds
    it too, from a subdirectory of the project."""
    (project / "loaders.py").write_text(
        "from pathlib import Path\n\nimport numpy as np\n\n\ndef train():\n"
        "    return np.load(Path(__file__).parent / 'data' / 'train.npz')['x'][:200]\n"
    )
    (project / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nsadl_model = "models/m.keras"\nsadl_train = "loaders:train"\n'
    )
    # from a subdirectory, where only the rootdir (found upwards, as pytest finds it) holds it
    done = run(["profile", "build", "-q"], project / "sub")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("built profile ") and "(200 inputs" in done.stdout, done.stdout
