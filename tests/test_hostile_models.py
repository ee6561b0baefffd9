"""The user's model failing while the plugin traces it (issue 34): NaN traces, a layer name
TensorFlow refuses as a name scope, a model that fails on its inputs. Each is one line
naming the layer (or input) and the fix, exit 4 in pytest, 2 in ``sadl``; never
INTERNALERROR. Real Keras models built by a ``pkg.mod:function`` loader, real pytest runs
(in process: TensorFlow is imported once)."""

from __future__ import annotations

import numpy as np
import pytest

try:
    from tests.test_plugin import THRESHOLD_TESTS, _warm_imports, project, run  # noqa: F401  (fixtures)
except ImportError:  # pragma: no cover - tests/ itself on sys.path
    from test_plugin import THRESHOLD_TESTS, _warm_imports, project, run  # type: ignore[no-redef]  # noqa: F401

pytestmark = pytest.mark.tf

keras = pytest.importorskip("keras")

LOADERS = '''
import os

import keras
import numpy as np


def nan_output():
    """The project's model with one output unit's weights set to NaN."""
    model = keras.saving.load_model("model.keras")
    kernel, bias = model.get_layer("probs").get_weights()
    kernel[:, 3] = np.nan
    model.get_layer("probs").set_weights([kernel, bias])
    return model


def inf_hidden():
    """The project's model with one unit of its SA layer, hidden, computing inf (a NaN
    there would not do: the ReLU turns NaN into 0)."""
    model = keras.saving.load_model("model.keras")
    kernel, bias = model.get_layer("hidden").get_weights()
    bias[5] = np.inf
    model.get_layer("hidden").set_weights([kernel, bias])
    return model


def named():
    """A small model whose second hidden layer is named by $LAYER_NAME (Sequential or functional)."""
    layers = [
        keras.layers.Flatten(name="flatten"),
        keras.layers.Dense(16, activation="relu", name="hidden"),
        keras.layers.Dense(8, activation="relu", name=os.environ["LAYER_NAME"]),
        keras.layers.Dense(10, activation="softmax", name="probs"),
    ]
    if os.environ.get("FUNCTIONAL"):
        x = inp = keras.Input((8, 8, 1))
        for layer in layers:
            x = layer(x)
        return keras.Model(inp, x)
    return keras.Sequential([keras.Input((8, 8, 1)), *layers])


def fails_on_data():
    """A model whose layer refuses real inputs (a run-time check of their values, as an
    op that fails on some data does); the symbolic probe passes."""
    import tensorflow as tf

    class Picky(keras.layers.Layer):
        def call(self, x):
            check = tf.debugging.assert_less(
                tf.reduce_max(x), -1.0, message="Picky takes negative inputs only\\nsecond line\\x1b[2J"
            )
            with tf.control_dependencies([check]):
                return tf.identity(x)

    x = inp = keras.Input((8, 8, 1))
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(16, activation="relu", name="hidden")(x)
    x = Picky(name="picky")(x)
    return keras.Model(inp, keras.layers.Dense(10, activation="softmax")(x))
'''


def _configured(project, loader: str):
    pytester = project(THRESHOLD_TESTS)
    ini = pytester.path / "pytest.ini"
    ini.write_text(ini.read_text().replace("sadl_model = model.keras", f"sadl_model = loaders:{loader}"))
    (pytester.path / "loaders.py").write_text(LOADERS)
    pytester.syspathinsert()
    return pytester


def _one_line(res: pytest.RunResult) -> str:
    out = res.stdout.str() + "\n" + res.stderr.str()
    assert res.ret == 4, out
    assert "INTERNALERROR" not in out and "Traceback" not in out, out
    lines = [line for line in out.splitlines() if "pytest-sadl" in line]
    assert len(lines) == 1 and lines[0].startswith("ERROR: pytest-sadl: "), out
    return lines[0]


def test_a_model_whose_output_holds_nan_is_one_line_naming_the_layer(project):
    pytester = _configured(project, "nan_output")
    line = _one_line(run(pytester, "--sadl-coverage"))
    assert "computes NaN values at layer 'probs' for all 1347 of the training inputs" in line, line
    assert "check the model's weights for NaN/inf" in line, line


def test_inf_in_an_sa_layer_no_coverage_layer_sees_is_one_line_naming_it(project):
    """The SA traces are checked on their own: with the coverage layers elsewhere (conv1),
    inf at the SA layer would be stored and refused on every load."""
    pytester = _configured(project, "inf_hidden")
    ini = pytester.path / "pytest.ini"
    ini.write_text(ini.read_text().rstrip("\n") + "\nsadl_coverage_layers = conv1\n")
    line = _one_line(run(pytester, "--sadl-coverage"))
    assert "computes inf values at layer 'hidden' for all 1347 of the training inputs" in line, line


@pytest.mark.parametrize("functional", [False, True], ids=["sequential", "functional"])
@pytest.mark.parametrize("name", ["hidden 2 (relu)", "h2<img src=x onerror=alert(1)>"])
def test_a_layer_name_tensorflow_refuses_as_a_scope_is_one_line(project, monkeypatch, name, functional):
    monkeypatch.setenv("LAYER_NAME", name)
    if functional:
        monkeypatch.setenv("FUNCTIONAL", "1")
    pytester = _configured(project, "named")
    line = _one_line(run(pytester, "--sadl-coverage"))
    assert f"layer {name!r} of model" in line and "refuses as a name scope" in line, line
    assert "Keras' own model.predict fails on it too; rename the layer" in line, line


def test_a_model_that_fails_on_the_training_data_is_one_line_with_the_backend_s_message(project):
    pytester = _configured(project, "fails_on_data")
    line = _one_line(run(pytester, "--sadl-coverage"))
    assert "failed on the training data" in line and "Picky takes negative inputs only" in line, line
    assert "\x1b" not in line and "check that model.predict runs on them" in line, line


def test_the_scope_check_names_the_layer_before_any_pass():
    from pytest_sadl.capture import TraceModel
    from pytest_sadl.errors import SadlLayerError

    inp = keras.Input((4,))
    h = keras.layers.Dense(3, name="ok")(inp)
    out = keras.layers.Dense(2, name="bad\x1b[2J\nname")(h)
    model = keras.Model(inp, out)
    if keras.backend.backend() != "tensorflow":
        TraceModel(model, ["ok"], None, jit=False).traces(np.zeros((2, 4), "float32"))
        return
    with pytest.raises(SadlLayerError) as err:
        TraceModel(model, ["ok"], None, jit=False)
    message = str(err.value)
    assert "\n" not in message and "\x1b" not in message, message
    assert "layer 'bad\\x1b[2J\\nname' of model" in message and "name='bad_2J_name'" in message, message


def test_a_loader_s_message_of_several_lines_and_colours_is_one_line(tmp_path, monkeypatch):
    from pytest_sadl.errors import SadlModelError
    from pytest_sadl.specs import call_spec

    (tmp_path / "loud_loader.py").write_text(
        "def model():\n    raise ValueError('\\x1b[1mfirst line\\n\\nsecond line\\x1b[0m \\x00 \\u202e')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SadlModelError) as err:
        call_spec("loud_loader:model", what="--sadl-model", error=SadlModelError)
    assert str(err.value) == (
        "--sadl-model: calling 'loud_loader:model' raised ValueError: first line second line \\x00 \\u202e"
    )


INTERRUPTED_TESTS = '''
import keras
import numpy as np
import pytest

X = np.load("inputs.npy")


class Timeout(keras.callbacks.Callback):
    """What pytest-timeout does (a pytest failure raised in the main thread), after 4 batches."""

    def on_predict_batch_end(self, batch, logs=None):
        if batch == 3:
            pytest.fail("Timeout (>1.0s) from pytest-timeout.")


@pytest.mark.sadl(group="slow")
def test_timed_out(sadl_model):
    sadl_model.predict(X, batch_size=5, verbose=0, callbacks=[Timeout()])


@pytest.mark.sadl(group="fast")
def test_after(sadl_model):
    sadl_model.predict(X[:7], verbose=0)
'''


def test_the_batches_a_test_fed_before_a_timeout_are_kept_and_counted(project):
    import json

    pytester = project(INTERRUPTED_TESTS)
    res = run(pytester, "--sadl-coverage", "--sadl-report=json:out.json")
    res.assert_outcomes(passed=1, failed=1)
    data = json.loads((pytester.path / "out.json").read_text())
    tests = {t["nodeid"].split("::")[1]: t for t in data["tests"]}
    assert tests["test_timed_out"]["inputs"] == 20 and tests["test_timed_out"]["outcome"] == "failed"
    assert tests["test_after"]["inputs"] == 7
    assert {g["name"]: g["inputs"] for g in data["groups"]} == {"slow": 20, "fast": 7}


def test_a_pass_interrupted_between_batches_hands_over_the_batches_done(conv_model, digits):
    from pytest_sadl.capture import TraceModel

    tm = TraceModel(conv_model, ["hidden"], None, jit=False, extrema=True)
    x = digits.x_test[:50]

    def interrupt(done, total):
        if done == 30:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as stopped:
        tm.traces(x, batch_size=10, progress=interrupt)
    partial = stopped.value.sadl_partial
    whole = tm.traces(x, batch_size=10)
    assert len(partial) == 30
    np.testing.assert_allclose(partial.sa, whole.sa[:30], rtol=1e-6)
    for got, want in zip(partial.coverage, whole.coverage, strict=True):
        np.testing.assert_allclose(got, want[:30], rtol=1e-6, atol=1e-7)
