"""The plugin end to end, in real pytest runs (pytester) of small projects on real models.

Most runs are in process: TensorFlow is already imported here, and importing it again in
a subprocess costs ~10 s a run. pytest-xdist runs start real worker processes anyway, and
the check that the plugin off imports no TensorFlow needs a fresh interpreter: those go
through ``runpytest_subprocess``.
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.tf

INI = """
[pytest]
sadl_model = model.keras
sadl_train = train.npz
sadl_layers = hidden
{extra}
"""

RECORDING_TESTS = '''
import numpy as np
import pytest
import tensorflow as tf

X = np.load("inputs.npy")


@pytest.mark.sadl(group="held-out")
def test_predict(sadl_model, sadl_labels):
    sadl_labels(X[:10].astype(np.float64), np.load("labels.npy")[:10])  # matched by value, not dtype
    assert sadl_model.predict(X[:10], verbose=0).shape == (10, 10)


@pytest.mark.sadl(group="attack")
def test_call_keeps_gradients(sadl_model):
    x = tf.constant(X[10:15])
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(sadl_model(x, training=False)[:, 0])
    assert tape.gradient(loss, x) is not None
    assert getattr(type(sadl_model), "_sadl_recording", False)


@pytest.mark.sadl(group="attack")
def test_predict_on_batch(sadl_model):
    assert np.asarray(sadl_model.predict_on_batch(X[15:18])).shape == (3, 10)


@pytest.mark.sadl
def test_explicit_record(sadl_record):
    sadl_record(X[18:20])


@pytest.mark.sadl(group="held-out")
def test_failing_still_counts(sadl_model):
    sadl_model.predict(X[20:25], verbose=0)
    assert False, "this test fails on purpose"


def test_unmarked_is_not_recorded(sadl_model):
    sadl_model.predict(X[25:40], verbose=0)
    assert not getattr(type(sadl_model), "_sadl_recording", False)


@pytest.mark.sadl(group="held-out")
def test_model_saves_and_behaves_as_before_while_recorded(sadl_model, tmp_path):
    import keras

    assert type(sadl_model).__name__ == "Sequential"
    sadl_model.save(tmp_path / "copy.keras")
    copy = keras.models.load_model(tmp_path / "copy.keras")
    np.testing.assert_allclose(copy.predict(X[:2], verbose=0), sadl_model.predict(X[:2], verbose=0), rtol=1e-6)
    nan = np.full((1, 8, 8, 1), np.nan, np.float32)
    assert np.isnan(sadl_model.predict(nan, verbose=0)).all()  # passed through, not recorded
'''


@pytest.fixture(scope="session", autouse=True)
def _warm_imports(conv_model_path: Path, digits, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Import everything an in-process run will, before any pytester snapshot of sys.modules.

    pytester restores ``sys.modules`` after each in-process run, dropping modules the run
    imported first; TensorFlow cannot be imported twice in one process (it aborts on
    re-registering its ops), so the modules must already be there.
    """
    import keras
    import tensorflow as tf

    from pytest_sadl import engine, plugin, profile, traces  # noqa: F401
    from pytest_sadl.report import badge, compare, html, markdown, terminal  # noqa: F401

    model = keras.models.load_model(conv_model_path)
    tm = traces.TraceModel(model, ["hidden"], None, jit=False, extrema=True)
    tm.call_and_trace(digits.x_test[:4], batch_size=2)
    x = tf.constant(digits.x_test[:2])
    with tf.GradientTape() as tape:
        tape.watch(x)
        out, _ = tm.call_tensors(x)
    tape.gradient(out, x)
    model.save(tmp_path_factory.mktemp("warm") / "m.keras")
    cache = tmp_path_factory.mktemp("warm-cache")
    prof = profile.load_or_build(model, digits.x_train, profile.ProfileOptions(sa_layers=("hidden",)), cache)
    profile.load_profile(prof.path)
    html.render_html(json.loads((Path(__file__).parent / "data" / "results-classifier.json").read_text()))


@pytest.fixture
def project(pytester: pytest.Pytester, conv_model_path: Path, digits):
    """A project configured for the conv model, with its training data and test inputs."""

    def make(tests: str = RECORDING_TESTS, extra: str = "", model: Path = conv_model_path, layers: str = "hidden"):
        shutil.copy(model, pytester.path / "model.keras")
        np.savez(pytester.path / "train.npz", x=digits.x_train, y=digits.y_train)
        np.save(pytester.path / "inputs.npy", digits.x_test[:60])
        np.save(pytester.path / "labels.npy", digits.y_test[:60])
        ini = INI.format(extra=extra).replace("sadl_layers = hidden", f"sadl_layers = {layers}")
        pytester.makefile(".ini", pytest=ini)
        pytester.makepyfile(test_project=tests)
        return pytester

    return make


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    base = ("-p", "no:cacheprovider", "-p", "no:randomly")
    if "-n" in args:  # xdist starts its own worker processes: keep the controller apart too
        return pytester.runpytest_subprocess(*base, *args, timeout=300)
    return pytester.runpytest_inprocess(*base, *args)


def run_fresh(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """In a new interpreter (nothing imported yet)."""
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", *args, timeout=300)


def results(pytester: pytest.Pytester, name: str = "out.json") -> dict:
    return json.loads((pytester.path / name).read_text())


def test_recording_groups_failures_and_values(project, digits):
    pytester = project()
    res = run(pytester, "--sadl-coverage", "--sadl-report=json:out.json", "--sadl-report=term")
    res.assert_outcomes(passed=6, failed=1)
    assert res.ret == 1
    data = results(pytester)
    tests = {t["nodeid"].split("::")[1]: t for t in data["tests"]}
    assert {k: v["inputs"] for k, v in tests.items()} == {
        "test_predict": 10,
        "test_call_keeps_gradients": 5,
        "test_predict_on_batch": 3,
        "test_explicit_record": 2,
        "test_failing_still_counts": 5,
        "test_model_saves_and_behaves_as_before_while_recorded": 2,  # the NaN input is not recorded
    }
    assert tests["test_failing_still_counts"]["outcome"] == "failed"
    assert tests["test_explicit_record"]["group"] == "default"
    assert [g["name"] for g in data["groups"]] == ["held-out", "attack", "default"]
    assert [g["inputs"] for g in data["groups"]] == [17, 8, 2]
    # Each input's SA equals the engine's on traces computed here by hand, layer by layer.
    import keras

    from pytest_sadl.surprise import DSA, LSA

    model = keras.models.load_model(pytester.path / "model.keras")
    hidden = keras.Model(model.inputs, model.get_layer("hidden").output)
    train_ats = hidden.predict(digits.x_train, verbose=0)
    train_pred = model.predict(digits.x_train, verbose=0).argmax(1)
    # the tests, in collection order: predict, call, predict_on_batch, record, failing, save
    x_in = np.concatenate(
        [digits.x_test[0:10], digits.x_test[10:15], digits.x_test[15:18], digits.x_test[18:20], digits.x_test[20:25], digits.x_test[:2]]
    )
    ats = hidden.predict(x_in, verbose=0)
    pred = model.predict(x_in, verbose=0).argmax(1)
    assert data["inputs"]["pred"] == pred.tolist()
    np.testing.assert_allclose(data["inputs"]["lsa"], LSA(train_ats, train_pred)(ats, pred), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(data["inputs"]["dsa"], DSA(train_ats, train_pred)(ats, pred), rtol=1e-4, atol=1e-4)
    # NC as DeepXplore on the full feature maps, every default coverage layer
    from pytest_sadl.neurons import fit_ranges, kmnc, nc

    names = data["config"]["coverage_layers"]
    assert names[:3] == ["conv1", "pool1", "conv2"] and "dropout" not in names and "flatten" not in names
    full = [keras.Model(model.inputs, model.get_layer(n).output).predict(x_in, verbose=0) for n in names]
    assert data["metrics"]["nc"]["value"] == pytest.approx(nc(full, 0.5))
    train_full = [keras.Model(model.inputs, model.get_layer(n).output).predict(digits.x_train, verbose=0) for n in names]
    assert data["metrics"]["kmnc"]["value"] == pytest.approx(kmnc(full, fit_ranges(train_full), 1000), abs=2e-3)
    assert data["metrics"]["lsc"]["count"] == 27
    assert any("non-finite" in w for w in data["outcome"]["warnings"])
    out = res.stdout.str()
    assert "pytest-sadl: surprise adequacy and neuron coverage" in out
    assert "27 inputs recorded: 6 of 6 marked tests fed the model, in 3 group(s)" in out
    # labels: test_predict's ten inputs, matched by value, also where the save test feeds
    # two of them again; and the figures in every report
    labels = digits.y_test[:10].tolist() + [None] * 15 + digits.y_test[:2].tolist()
    assert data["inputs"]["label"] == labels
    labelled = [i for i, v in enumerate(labels) if v is not None]
    assert data["mistakes"]["overall"]["labelled"] == 12
    assert data["mistakes"]["overall"]["errors"] == int((pred[labelled] != np.array([labels[i] for i in labelled])).sum())
    assert "does surprise predict this model's mistakes?" in out
    assert re.search(r"\+ attack\s+2\s+8", out)


THRESHOLD_TESTS = '''
import numpy as np
import pytest

X = np.load("inputs.npy")


@pytest.mark.sadl(group="held-out")
def test_predict(sadl_model):
    sadl_model.predict(X, verbose=0)
'''


def test_thresholds_met_and_missed_set_the_exit_code(project):
    pytester = project(THRESHOLD_TESTS)
    res = run(pytester, "--sadl-coverage", "--sadl-fail-under=lsc:100,nc:1", "--sadl-report=json:out.json")
    assert res.ret == 1  # every test passed: the exit code is the threshold's
    res.assert_outcomes(passed=1)
    data = results(pytester)
    lsc = round(data["metrics"]["lsc"]["value"] * 100, 2)
    res.stdout.fnmatch_lines([f"FAIL LSC {lsc:.2f}% is below --sadl-fail-under=lsc:100 (100.00%)"])
    assert "FAIL NC" not in res.stdout.str()  # met
    assert [f["metric"] for f in data["outcome"]["failures"]] == ["lsc"] and data["outcome"]["passed"] is False


def test_no_recorded_inputs_fails_a_threshold(project):
    pytester = project("def test_nothing():\n    pass\n")
    res = run(pytester, "--sadl-coverage", "--sadl-fail-under=lsc:10")
    assert res.ret == 1
    res.stdout.fnmatch_lines(["*no inputs were recorded*", "FAIL LSC: no inputs were recorded*"])


def test_xdist_equals_serial(project):
    pytester = project()
    serial = run(pytester, "--sadl-coverage", "--sadl-report=json:serial.json")
    dist = run(pytester, "--sadl-coverage", "-n", "2", "--sadl-report=json:dist.json")
    assert serial.ret == dist.ret == 1
    a, b = results(pytester, "serial.json"), results(pytester, "dist.json")
    for key in ("metrics", "groups", "tests", "inputs", "layers", "config"):
        assert a[key] == b[key], key


def test_strict_config_and_markers_pass_with_every_ini_option(project):
    extra = "\n".join(
        [
            "sadl_coverage = true",
            "sadl_coverage_layers = conv1,hidden",
            "sadl_lsc_lower = -50", "sadl_lsc_upper = 500", "sadl_lsc_buckets = 100",
            "sadl_dsc_lower = 0", "sadl_dsc_upper = 3", "sadl_dsc_buckets = 100",
            "sadl_nc_threshold = 0.25", "sadl_kmnc_k = 10", "sadl_var_threshold = 1e-6",
            "sadl_batch_size = 64", "sadl_report = json:ini.json", "sadl_fail_under = nc:1",
            "sadl_cache_dir = .sadl-cache",
        ]
    )
    pytester = project(THRESHOLD_TESTS, extra=extra)
    res = run(pytester, "--strict-config", "--strict-markers")
    assert res.ret == 0, res.stdout.str() + res.stderr.str()
    data = results(pytester, "ini.json")
    assert data["config"]["lsc"] == {"lower": -50.0, "upper": 500.0, "buckets": 100, "rule": "configured"}
    assert data["config"]["coverage_layers"] == ["conv1", "hidden"] and data["config"]["kmnc_k"] == 10
    kmnc_total = data["metrics"]["kmnc"]["total"]  # k x neurons, less neurons constant in training
    assert kmnc_total % 10 == 0 and 0 < kmnc_total <= 10 * (8 + 32)
    assert [p for p in (pytester.path / ".sadl-cache").glob("profile-*") if p.is_dir()]
    res.stdout.fnmatch_lines(["sadl: model=*model.keras; train=*train.npz; SA layers=hidden; reports=json:*"])


def test_plugin_off_imports_no_tensorflow(pytester: pytest.Pytester):
    pytester.makefile(".ini", pytest=INI.format(extra=""))
    pytester.makepyfile(
        """
        import sys

        def test_no_tf():
            assert "tensorflow" not in sys.modules and "keras" not in sys.modules
        """
    )
    res = run_fresh(pytester)
    res.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sadl-model=missing.keras"], "--sadl-model: '*missing.keras' does not exist*"),
        (["--sadl-fail-under=lsc:30,foo:2"], "*unknown metric 'foo'; use one of lsc, dsc, mdsc, nc, kmnc, nbc, snac*"),
        (["--sadl-fail-under=lsc"], "*needs the form METRIC:PERCENT*"),
        (["--sadl-lsc-lower=10", "--sadl-lsc-upper=5"], "*--sadl-lsc-upper=5 is not above --sadl-lsc-lower=10*"),
        (["--sadl-kmnc-k=0"], "*KMNC needs k >= 1*"),
        (["--sadl-report=pdf"], "*unknown report type 'pdf'*"),
        (["--sadl-dsc-buckets=many"], "*--sadl-dsc-buckets='many' is not an integer*"),
    ],
)
def test_bad_configuration_is_a_usage_error(pytester: pytest.Pytester, args, message):
    pytester.makefile(".ini", pytest="[pytest]\n")
    pytester.makepyfile("def test_never_runs():\n    raise AssertionError\n")
    res = pytester.runpytest_inprocess("--sadl-coverage", *args)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([f"ERROR: {message}"])


def test_unknown_layer_is_a_usage_error_before_tests_run(project):
    pytester = project(THRESHOLD_TESTS, layers="hiden")
    res = run(pytester, "--sadl-coverage")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    err = res.stderr.str()
    assert "hiden" in err and "hidden" in err and "Traceback" not in err
    assert "test_predict" not in res.stdout.str()


REGRESSION_TESTS = '''
import numpy as np
import pytest

X = np.load("inputs.npy")


@pytest.mark.sadl(group="held-out")
def test_predict(sadl_model):
    sadl_model.predict(X, verbose=0)
'''


def test_regression_model_has_no_dsa(project, regression_model_path):
    pytester = project(REGRESSION_TESTS, model=regression_model_path, layers="rhidden")
    res = run(pytester, "--sadl-coverage", "--sadl-report=json:out.json", "--sadl-report=term", "--sadl-fail-under=dsc:10")
    assert res.ret == 1
    data = results(pytester)
    assert data["metrics"]["dsc"]["applicable"] is False and data["metrics"]["dsc"]["value"] is None
    assert data["metrics"]["lsc"]["count"] == 60 and data["model"]["classifier"] is False
    assert set(data["inputs"]["dsa"]) == {None} and set(data["inputs"]["pred"]) == {None}
    res.stdout.fnmatch_lines(["*DSC*not applicable*", "FAIL DSC is not applicable to this model*"])


MODEL_FIXTURE = f"""
import keras
import pytest

@pytest.fixture(scope="session")
def sadl_model():
    return keras.models.load_model({{path!r}})
"""

TRAIN_FIXTURE = """
import numpy as np
import pytest

@pytest.fixture(scope="session")
def sadl_train():
    return np.load("train.npz")["x"]
"""


@pytest.mark.parametrize("from_fixture", ["model", "train"])
def test_project_fixtures_under_xdist(pytester: pytest.Pytester, conv_model_path, digits, from_fixture):
    """Only the workers have a project fixture's model or data: they build the profile."""
    np.savez(pytester.path / "train.npz", x=digits.x_train)
    np.save(pytester.path / "inputs.npy", digits.x_test[:20])
    shutil.copy(conv_model_path, pytester.path / "model.keras")
    if from_fixture == "model":
        pytester.makefile(".ini", pytest="[pytest]\nsadl_train = train.npz\n")
        pytester.makeconftest(MODEL_FIXTURE.format(path=str(pytester.path / "model.keras")))
    else:
        pytester.makefile(".ini", pytest="[pytest]\nsadl_model = model.keras\n")
        pytester.makeconftest(TRAIN_FIXTURE)
    pytester.makepyfile(test_project=THRESHOLD_TESTS)
    dist = run(pytester, "--sadl-coverage", "-n", "2", "--sadl-report=json:dist.json")
    assert dist.ret == 0, dist.stdout.str() + dist.stderr.str()
    data = results(pytester, "dist.json")
    assert data["metrics"]["lsc"]["count"] == 20 and data["model"]["n_train"] == len(digits.x_train)
    assert data["model"]["name"] == "digits_conv" and data["config"]["sa_layers"] == ["hidden"]
    assert data["model"]["source"] == ("fixture" if from_fixture == "model" else str(pytester.path / "model.keras"))


CRASHING_TESTS = THRESHOLD_TESTS + """

@pytest.mark.sadl(group="crash")
def test_worker_dies(sadl_model):
    import os

    sadl_model.predict(X[:5], verbose=0)
    os._exit(1)
"""


def test_a_crashed_worker_is_reported_not_hidden(project):
    pytester = project(CRASHING_TESTS)
    res = run(pytester, "--sadl-coverage", "-n", "2", "--sadl-report=json:out.json", "--sadl-report=term")
    assert res.ret != 0
    warnings = results(pytester)["outcome"]["warnings"]
    assert any("ended without sending its recordings" in w and "incomplete" in w for w in warnings), warnings


def test_a_failure_at_the_end_is_one_line_and_other_plugins_still_finish(project):
    pytester = project(THRESHOLD_TESTS)
    (pytester.path / "adir").mkdir()
    res = run(pytester, "--sadl-coverage", "--sadl-report=json:adir", "--junitxml=junit.xml")
    assert res.ret == 1
    res.stdout.fnmatch_lines(["pytest-sadl: could not compute the results: *"])
    assert "Traceback" not in res.stdout.str() + res.stderr.str()
    assert (pytester.path / "junit.xml").exists()  # the hooks after ours still ran


def test_plugin_off_ignores_broken_sadl_settings(pytester: pytest.Pytester):
    pytester.makefile(".ini", pytest="[pytest]\nsadl_fail_under = lsc30\nsadl_compare = missing.json\n")
    pytester.makepyfile("def test_ok():\n    pass\n")
    pytester.runpytest_inprocess().assert_outcomes(passed=1)
    assert pytester.runpytest_inprocess("--help").ret == 0
    res = pytester.runpytest_inprocess("--sadl-coverage")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["ERROR: sadl_fail_under (ini)='lsc30': 'lsc30' needs the form METRIC:PERCENT*"])


def test_no_sadl_coverage_switches_an_ini_default_off(pytester: pytest.Pytester):
    pytester.makefile(".ini", pytest="[pytest]\nsadl_coverage = true\nsadl_model = missing.keras\n")
    pytester.makepyfile("def test_ok():\n    pass\n")
    assert pytester.runpytest_inprocess().ret == pytest.ExitCode.USAGE_ERROR  # on, and the model is missing
    res = pytester.runpytest_inprocess("--no-sadl-coverage")
    res.assert_outcomes(passed=1)
    assert "sadl:" not in res.stdout.str()


def test_collect_only_measures_nothing(pytester: pytest.Pytester):
    (pytester.path / "model.keras").write_bytes(b"not loaded when only collecting")
    pytester.makefile(".ini", pytest="[pytest]\nsadl_model = model.keras\n")
    pytester.makepyfile("import pytest\n\n@pytest.mark.sadl\ndef test_marked():\n    pass\n")
    res = pytester.runpytest_inprocess("--co", "--sadl-coverage", "--sadl-fail-under=nc:10", "--sadl-report=json:co.json")
    assert res.ret == 0 and not (pytester.path / "co.json").exists()
    assert "FAIL" not in res.stdout.str()


def test_marker_is_registered_without_the_plugin_on(pytester: pytest.Pytester):
    pytester.makepyfile(
        textwrap.dedent(
            """
            import pytest

            @pytest.mark.sadl(group="g")
            def test_marked():
                pass
            """
        )
    )
    res = pytester.runpytest_inprocess("--strict-markers")
    res.assert_outcomes(passed=1)
    res = pytester.runpytest_inprocess("--markers")
    res.stdout.fnmatch_lines(["@pytest.mark.sadl(group='name'): record every input*"])
