"""``sadl select`` on a real model and pool: every strategy, its files, and the coverage
strategy against a naive greedy reference over the pool's real scores."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import naive
import numpy as np
import pytest

from pytest_sadl.cli.main import main
from pytest_sadl.engine import ProfileView
from pytest_sadl.errors import SadlWarning
from pytest_sadl.profile.build import ProfileOptions
from pytest_sadl.profile.lookup import load_or_build


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, conv_model_path: Path, digits: Any) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("select")
    shutil.copy(conv_model_path, root / "m.keras")
    np.savez(root / "train.npz", x=digits.x_train)
    np.savez(root / "pool.npz", x=digits.x_test, y=digits.y_test)
    np.save(root / "pool.npy", digits.x_test)
    base = [
        "--model",
        "m.keras",
        "--train",
        "train.npz",
        "--sa-layers",
        "hidden",
        "--rootdir",
        str(root),
        "--cache-dir",
        str(root / "cache"),
    ]
    profile = load_or_build(
        str(root / "m.keras"), str(root / "train.npz"), ProfileOptions(sa_layers=("hidden",)), root / "cache"
    )
    import keras

    model = keras.models.load_model(root / "m.keras")
    traces = profile.trace_model(model).traces(digits.x_test)
    scores = ProfileView.of(profile).score(traces.sa.astype(np.float64), traces.pred)
    return {"root": root, "base": base, "scores": scores, "output": np.asarray(traces.output)}


def _run(setup: dict[str, Any], *args: str) -> dict[str, Any]:
    out = setup["root"] / "out"
    shutil.rmtree(out, ignore_errors=True)
    assert main(["select", str(setup["root"] / "pool.npz"), *setup["base"], "--out", str(out), *args]) == 0
    return json.loads((out / "selection.json").read_text())


def test_surprise_and_deepgini_pick_the_highest_and_write_the_inputs(setup, digits, capsys):
    doc = _run(setup, "--strategy", "surprise", "--by", "mdsa", "--budget", "7")
    mdsa = setup["scores"]["mdsa"]
    assert doc["indices"] == np.argsort(-mdsa, kind="stable")[:7].tolist()
    with np.load(setup["root"] / "out" / "selected.npz") as npz:
        np.testing.assert_array_equal(npz["x"], digits.x_test[doc["indices"]])
        np.testing.assert_array_equal(npz["y"], digits.y_test[doc["indices"]])
        assert npz["index"].tolist() == doc["indices"]
    page = (setup["root"] / "out" / "index.html").read_text()
    assert page.count('<img src="data:image/png;base64,') == 7
    for i in doc["indices"]:  # each pick's scores under its thumbnail
        assert f"MDSA {mdsa[i]:.3g}" in page
    assert "selected 7 of" in capsys.readouterr().out
    doc = _run(setup, "--strategy", "deepgini", "--budget", "5")
    p = setup["output"]
    assert doc["indices"] == np.argsort(-(1 - (p * p).sum(axis=1)), kind="stable")[:5].tolist()


def test_coverage_strategy_starts_from_the_tests_buckets_and_matches_naive_greedy(setup):
    scores = setup["scores"]
    bounds = {
        "lsc": (0.0, float(np.nanmax(scores["lsa"])) * 1.2, 40),
        "dsc": (0.0, 2.0, 30),
        "mdsc": (0.0, float(scores["mdsa"].max()) * 1.1, 25),
    }
    tested = np.arange(0, len(scores["lsa"]), 3)  # the inputs the current tests fed
    results = {
        "schema": "pytest-sadl/results",
        "version": 1,
        "metrics": {},
        "config": {m: {"lower": lo, "upper": up, "buckets": n} for m, (lo, up, n) in bounds.items()},
        "inputs": {k: scores[k][tested].tolist() for k in ("lsa", "dsa", "mdsa")},
    }
    (setup["root"] / "results.json").write_text(json.dumps(results))
    doc = _run(setup, "--strategy", "coverage", "--budget", "60", "--results", str(setup["root"] / "results.json"))
    key = {"lsc": "lsa", "dsc": "dsa", "mdsc": "mdsa"}

    def buckets(i: int) -> set[tuple[str, int]]:
        found = {(m, naive.bucket_of(scores[key[m]][i], *bounds[m])) for m in bounds}
        return {b for b in found if b[1] is not None}

    prior = set().union(*(buckets(int(i)) for i in tested))
    expected = naive.greedy_bucket_cover([buckets(i) for i in range(len(scores["lsa"]))], 60, scores["lsa"], prior)
    assert doc["indices"] == expected
    assert sum(doc["new_buckets"]) == len(set().union(*(buckets(i) for i in expected)) - prior) > 0


@pytest.mark.parametrize("upto", ["0.25", "1"])
def test_ranges_strategy_samples_inside_the_range_from_an_npy_pool(setup, upto):
    out = setup["root"] / "out-npy"
    assert (
        main(
            [
                "select",
                str(setup["root"] / "pool.npy"),
                *setup["base"],
                "--out",
                str(out),
                "--strategy",
                "ranges",
                "--by",
                "dsa",
                "--upto",
                upto,
                "--budget",
                "15",
            ]
        )
        == 0
    )
    doc = json.loads((out / "selection.json").read_text())
    lower, top = doc["range"]
    dsa = setup["scores"]["dsa"]
    assert len(doc["indices"]) == min(15, doc["eligible"]) and all(lower <= dsa[i] <= top for i in doc["indices"])
    assert doc["eligible"] == int(((dsa >= lower) & (dsa <= top)).sum())
    with np.load(out / "selected.npz") as npz:
        assert "y" not in npz.files


def test_bad_arguments_are_one_line_errors(setup, capsys):
    assert main(["select", str(setup["root"] / "pool.npz"), *setup["base"], "--budget", "0"]) == 2
    assert main(["select", str(setup["root"] / "missing.npz"), *setup["base"]]) == 2
    assert main(["select", str(setup["root"] / "pool.npz"), *setup["base"], "--strategy", "ranges", "--upto", "2"]) == 2
    err = capsys.readouterr().err
    assert "--budget=0" in err and "missing.npz" in err and "--upto=2.0" in err
    assert "Traceback" not in err and err.count("\n") == 3


def test_select_is_a_listed_subcommand_with_its_strategies(capsys):
    with pytest.raises(SystemExit):
        main(["select", "--help"])
    out = capsys.readouterr().out
    for word in ("surprise", "coverage", "ranges", "deepgini", "--budget", "--results", "--upto"):
        assert word in out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "select" in capsys.readouterr().out


def test_layers_and_cache_come_from_the_projects_ini(setup, tmp_path, capsys):
    """No --sa-layers or --cache-dir: the project's pyproject gives them (conv2, not the
    default last hidden layer)."""
    from pytest_sadl.profile.lookup import list_profiles

    for name in ("m.keras", "train.npz", "pool.npz"):
        shutil.copy(setup["root"] / name, tmp_path / name)
    cache = tmp_path / "my-cache"
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nsadl_layers = ["conv2"]\nsadl_cache_dir = "my-cache"\n'
    )
    out = tmp_path / "out"
    assert (
        main(
            [
                "select",
                str(tmp_path / "pool.npz"),
                "--model",
                "m.keras",
                "--train",
                "train.npz",
                "--rootdir",
                str(tmp_path),
                "--out",
                str(out),
                "--budget",
                "4",
            ]
        )
        == 0
    ), capsys.readouterr().err
    (info,) = list_profiles(cache)
    assert info.meta["sa_layers"] == ["conv2"]
    assert len(json.loads((out / "selection.json").read_text())["indices"]) == 4


def test_out_errors_come_before_the_model_is_loaded(setup, tmp_path, capsys):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    args = [
        "select",
        str(setup["root"] / "pool.npz"),
        "--model",
        "nope.keras",
        "--train",
        "train.npz",
        "--rootdir",
        str(setup["root"]),
    ]
    assert main([*args, "--out", str(a_file)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sadl: error: --out ") and "is a file" in err and "nope" not in err and err.count("\n") == 1
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.access(locked, os.W_OK):  # root writes anywhere: a file in the way of the path instead
        assert main([*args, "--out", str(a_file / "sub")]) == 2
    else:
        assert main([*args, "--out", str(locked / "sub")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sadl: error: --out ") and "nope" not in err and err.count("\n") == 1


def test_results_measured_with_other_layers_is_a_one_line_error(setup, capsys):
    results = {
        "schema": "pytest-sadl/results",
        "version": 1,
        "metrics": {},
        "inputs": {},
        "config": {"sa_layers": ["conv1"]},
    }
    path = setup["root"] / "other-layers.json"
    path.write_text(json.dumps(results))
    assert (
        main(
            [
                "select",
                str(setup["root"] / "pool.npz"),
                *setup["base"],
                "--out",
                str(setup["root"] / "o2"),
                "--results",
                str(path),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "--results was measured with sa_layers ['conv1']" in err and "'hidden'" in err and err.count("\n") == 1


def test_a_pool_for_a_two_input_model_is_bound_by_input_name(tmp_path, kind_model_path, capsys):
    import _models

    x_train, _, x_pool = _models.kind_data("two_input")
    np.savez(tmp_path / "train.npz", **x_train)
    np.savez(tmp_path / "pool.npz", **x_pool)
    out = tmp_path / "out"
    # the kind's training data has only 3 examples of class 6: too few for its KDE and MDSA
    with (
        pytest.warns(SadlWarning, match="class 6 has 3 training traces"),
        pytest.warns(SadlWarning, match="MDSA: the training covariance of class.es. 6 .rank 2, 3 traces"),
    ):
        code = main(
            [
                "select",
                str(tmp_path / "pool.npz"),
                "--model",
                str(kind_model_path("two_input")),
                "--train",
                str(tmp_path / "train.npz"),
                "--cache-dir",
                str(tmp_path / "cache"),
                "--rootdir",
                str(tmp_path),
                "--out",
                str(out),
                "--budget",
                "5",
            ]
        )
    assert code == 0, capsys.readouterr().err
    doc = json.loads((out / "selection.json").read_text())
    with np.load(out / "selected.npz") as npz:
        assert sorted(npz.files) == ["aux", "image", "index"]
        np.testing.assert_array_equal(npz["image"], x_pool["image"][doc["indices"]])
        np.testing.assert_array_equal(npz["aux"], x_pool["aux"][doc["indices"]])


def test_ctm_and_cam_order_the_pool_by_a_neuron_criterion_and_report_apfd(setup, digits, capsys):
    import keras

    from pytest_sadl.criteria.prioritise import apfd, faults_of

    doc = _run(setup, "--strategy", "cam", "--criterion", "nbc", "--budget", "6")
    out = capsys.readouterr().out
    assert doc["criterion"] == "nbc" and len(doc["indices"]) == 6 and doc["new_targets"][0] > 0
    assert doc["new_targets"] == sorted(doc["new_targets"], reverse=True), "greedy: gains never grow"
    model = keras.models.load_model(setup["root"] / "m.keras")
    faults = faults_of(model.predict(digits.x_test, verbose=0).argmax(axis=1), digits.y_test)
    assert doc["faults"] == int(faults.sum())
    assert f"APFD of the cam order of the pool: {doc['apfd']:.4f}" in out
    doc = _run(setup, "--strategy", "ctm", "--criterion", "nbc", "--budget", "6")
    assert doc["new_targets"] == sorted(doc["new_targets"], reverse=True)
    # an opt-in surprise coverage: its score is set up for the order (each input opens one bucket at most)
    doc = _run(setup, "--strategy", "cam", "--criterion", "mlsc", "--budget", "4")
    assert doc["criterion"] == "mlsc" and doc["new_targets"] == [1, 1, 1, 1]
    doc = _run(setup, "--strategy", "surprise", "--by", "lsa", "--budget", "3")
    order = np.argsort(-setup["scores"]["lsa"], kind="stable")
    assert doc["apfd"] == pytest.approx(apfd(order, faults)), "APFD of the whole order by LSA"
    assert main(["select", str(setup["root"] / "pool.npz"), *setup["base"], "--strategy", "ctm"]) == 2
    assert "add --criterion" in capsys.readouterr().err


def test_the_model_training_data_layers_and_cache_come_from_the_projects_ini(setup, tmp_path, monkeypatch, capsys):
    """In a project whose pyproject names them (paths relative to the ini), `sadl select`
    needs no --model/--train/--sa-layers/--cache-dir, finds the same cached profile and
    chooses what the flags choose."""
    root = setup["root"]
    (tmp_path / "nets").mkdir()
    shutil.copy(root / "m.keras", tmp_path / "nets" / "m.keras")
    shutil.copy(root / "train.npz", tmp_path / "nets" / "train.npz")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nsadl_model = "nets/m.keras"\nsadl_train = "nets/train.npz"\n'
        f'sadl_layers = ["hidden"]\nsadl_cache_dir = "{root / "cache"}"\n'
    )
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    entries = sorted(p.name for p in (root / "cache").iterdir())
    pick = ["--strategy", "surprise", "--by", "mdsa", "--budget", "7"]
    assert main(["select", str(root / "pool.npz"), "--out", str(tmp_path / "out"), *pick]) == 0
    doc = json.loads((tmp_path / "out" / "selection.json").read_text())
    assert doc["indices"] == _run(setup, *pick)["indices"]
    assert sorted(p.name for p in (root / "cache").iterdir()) == entries  # the flags' profile, found
    assert "selected 7 of" in capsys.readouterr().out
