"""Raw-string inputs: a Keras model whose first layer is ``TextVectorization`` takes text
(object arrays of ``str``, NumPy ``str``/``bytes`` arrays, TensorFlow string tensors). Its
training data is traced into a profile, its calls are recorded, its inputs digested by
their text (``str`` and ``bytes`` alike), and ragged rows are refused in one line. Every
trace is checked against the model's own layers called through a sub-model.

TensorFlow only: on JAX and torch, Keras runs ``TextVectorization`` in a ``tf.data``
pipeline, not inside a model."""

from __future__ import annotations

import html
import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_sadl.errors import SadlDataError

pytestmark = pytest.mark.tf

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")
from keras import layers  # noqa: E402

from pytest_sadl.capture import TraceModel  # noqa: E402
from pytest_sadl.capture.data import load_training_data  # noqa: E402
from pytest_sadl.records import input_digests, thumbnails  # noqa: E402
from tests import _models  # noqa: E402


def _hidden(model: Any, x: np.ndarray) -> np.ndarray:
    return np.asarray(keras.Model(model.inputs, model.get_layer("hidden").output).predict(x, verbose=0))


def test_every_form_of_text_gives_the_traces_of_the_model_s_own_layers(text_model: Any, text: Any) -> None:
    x = text.x_test[:12]
    expected = _hidden(text_model, x)
    tm = TraceModel(text_model, ["hidden"], ["pool", "hidden"], jit=False)
    forms = {
        "object str": x,
        "numpy str": x.astype(str),
        "numpy bytes": np.array([s.encode() for s in x]),
        "tf string tensor": tf.constant(list(x)),
        "column (n, 1)": x.reshape(-1, 1),
    }
    for name, form in forms.items():
        traces = tm.traces(form, batch_size=5)
        np.testing.assert_allclose(traces.sa, expected, rtol=1e-5, atol=1e-6, err_msg=name)
        assert traces.pred.tolist() == text_model.predict(x, verbose=0).argmax(1).tolist(), name
    out, traces = tm.call_and_trace(x)
    np.testing.assert_allclose(np.asarray(out), text_model.predict(x, verbose=0), rtol=1e-5, atol=1e-6)
    # model(x) as a test calls it, on (n,) and (n, 1), then a profile pass: each rank has
    # its own compiled pass (one relaxed to an unknown rank cannot trace TextVectorization)
    tm = TraceModel(text_model, ["hidden"], jit=False)
    for form in (x, x.reshape(-1, 1), x[:5]):
        np.testing.assert_allclose(tm.call_tensors(form)[1].sa, expected[: len(form)], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tm.traces(x, batch_size=7).sa, expected, rtol=1e-5, atol=1e-6)


def test_a_model_taking_one_string_per_input_of_shape_empty(text: Any) -> None:
    model = _models.build_text(text.x_train[:20], input_shape=())  # untrained: the traces are what count
    tm = TraceModel(model, ["pool"], jit=False)
    np.testing.assert_allclose(
        tm.traces(text.x_test[:6]).sa,
        keras.Model(model.inputs, model.get_layer("pool").output).predict(text.x_test[:6], verbose=0),
        rtol=1e-5,
        atol=1e-6,
    )


def test_a_string_lookup_model_is_traced_as_its_layers(text: Any) -> None:
    words = np.array([[s.split()[0]] for s in text.x_test[:9]], dtype=object)  # one word per input
    inp = keras.Input((1,), dtype="string")
    h = layers.StringLookup(vocabulary=list(_models.FILLER + _models.POSITIVE), name="lookup")(inp)
    h = layers.Flatten()(layers.Embedding(40, 4, name="embed")(h))
    model = keras.Model(inp, layers.Dense(3, activation="softmax", name="probs")(layers.Dense(5, name="hidden")(h)))
    tm = TraceModel(model, ["hidden"], jit=False)
    hidden = keras.Model(model.inputs, model.get_layer("hidden").output)
    # model(x), as Keras' predict refuses an (n, 1) object array ("Invalid dtype: object")
    np.testing.assert_allclose(tm.traces(words).sa, np.asarray(hidden(tf.constant(words))), rtol=1e-5, atol=1e-6)
    assert tm.traces(words.astype(bytes)).pred.tolist() == np.asarray(model(tf.constant(words))).argmax(1).tolist()


def test_text_digests_and_fingerprints_do_not_depend_on_str_or_bytes(text: Any) -> None:
    x = text.x_train[:30]
    as_bytes = np.array([s.encode() for s in x], dtype=object)
    forms = [x, x.astype(str), x.astype("U64"), as_bytes, as_bytes.astype(bytes), tf.constant(list(x))]
    digests = [input_digests(f) for f in forms]
    for d in digests[1:]:
        np.testing.assert_array_equal(d, digests[0])
    assert len(set(digests[0].tolist())) == len(set(x.tolist()))  # one digest per distinct sentence
    other = x.copy()
    other[3] = other[3] + " "
    assert input_digests(other)[3] != digests[0][3] and (input_digests(other)[:3] == digests[0][:3]).all()
    assert input_digests(np.array(["1.5", "2"]))[0] != input_digests(np.array([1.5, 2.0], np.float32))[0]
    # the training data's fingerprint: the same text in any form, and in any order
    fps = {load_training_data(f).fingerprint() for f in forms[:5]} | {load_training_data(x[::-1]).fingerprint()}
    assert len(fps) == 1
    assert load_training_data(other).fingerprint() not in fps
    assert thumbnails(x) is None and thumbnails(x.reshape(5, 3, 2)) is None


def test_the_profile_of_text_training_data_from_an_npz(text_model: Any, text: Any, tmp_path: Path) -> None:
    from pytest_sadl.profile import lookup
    from pytest_sadl.profile.build import ProfileOptions

    np.savez(tmp_path / "train.npz", x=text.x_train.astype(str), y=text.y_train)  # no pickles: a str array
    options = ProfileOptions(sa_layers=("hidden",))
    profile = lookup.load_or_build(text_model, tmp_path / "train.npz", options, tmp_path / "cache")
    assert profile.n_train == len(text.x_train)
    np.testing.assert_allclose(
        np.sort(profile.sa_traces, axis=0), np.sort(_hidden(text_model, text.x_train), axis=0), rtol=1e-4, atol=1e-5
    )
    # the same sentences as an object array find the same cached profile
    again = lookup.load_or_build(text_model, text.x_train, options, tmp_path / "cache")
    assert again.fingerprint == profile.fingerprint and profile.built and not again.built


@pytest.mark.parametrize(
    "bad, match",
    [
        ([[1, 2, 3], [4, 5]], r"ragged \(rows of different lengths\).*keras.utils.pad_sequences"),
        (np.array([[1, 2], [3]], dtype=object), "ragged .*pad the rows to one length"),
        (np.array([{"a": 1}], dtype=object), "neither numbers nor strings"),
    ],
)
def test_ragged_or_object_training_data_is_one_line_naming_the_fix(bad: Any, match: str) -> None:
    with pytest.raises(SadlDataError, match=match) as info:
        load_training_data(bad)
    assert "\n" not in str(info.value)


def test_ragged_tensors_and_wrong_kinds_of_input_are_one_line_errors(text_model: Any, dense_model: Any) -> None:
    with pytest.raises(SadlDataError, match=r"is ragged \(rows of different lengths\).*pad_sequences") as info:
        load_training_data(tf.ragged.constant([[1, 2, 3], [4]]))
    assert "\n" not in str(info.value)
    tm = TraceModel(text_model, ["hidden"], jit=False)
    with pytest.raises(SadlDataError, match="takes strings; give the raw text"):
        tm.traces(np.zeros((3, 1), np.float32))
    with pytest.raises(SadlDataError, match="holds strings but the model's input .* takes float32.*TextVectorization"):
        TraceModel(dense_model, ["hidden1"], jit=False).traces(np.full((2, 8, 8, 1), "a"))


PROJECT_TESTS = """
import numpy as np
import pytest
import tensorflow as tf

X = np.load("inputs.npz")["x"].astype(object)  # the sentences as Keras takes them
Y = np.load("inputs.npz")["y"]


@pytest.mark.sadl(group="call")
def test_call(sadl_model):
    assert sadl_model(X[:10]).shape == (10, 2)


@pytest.mark.sadl(group="predict")
def test_predict_with_labels(sadl_model, sadl_labels):
    sadl_labels(X[10:20].astype(str), Y[10:20])  # matched by the text, whatever its dtype
    assert sadl_model.predict(X[10:20], verbose=0).argmax(1).shape == (10,)


@pytest.mark.sadl(group="call")
def test_string_tensor(sadl_model):
    assert sadl_model(tf.constant([s.encode() for s in X[20:25]])).shape == (5, 2)


@pytest.mark.sadl(group="predict")
def test_evaluate(sadl_model):
    loss, acc = sadl_model.evaluate(X[25:40], Y[25:40], verbose=0)
    assert acc > 0.5


@pytest.mark.sadl(group="predict")
def test_predict_on_a_dataset(sadl_model):
    f = np.load("inputs.npz")
    ds = tf.data.Dataset.from_tensor_slices((f["xd"].astype(object), f["yd"])).batch(3)
    assert sadl_model.predict(ds, verbose=0).shape == (8, 2)


@pytest.mark.sadl(group="predict")
def test_predict_refuses_a_numpy_str_array_as_keras_does(sadl_model):
    with pytest.raises(ValueError, match="Invalid dtype"):
        sadl_model.predict(X[:3].astype(str), verbose=0)
"""


def test_a_text_project_end_to_end(pytester: pytest.Pytester, text_model_path: Path, text: Any) -> None:
    """The issue's project: the model from the ini, the training data from a fixture as
    strings; every test that passes without the plugin passes with it, and it measures."""
    shutil.copy(text_model_path, pytester.path / "model.keras")
    np.savez(
        pytester.path / "inputs.npz",
        x=text.x_test.astype(str),
        y=text.y_test,
        xd=text.x_train[:8].astype(str),
        yd=text.y_train[:8],
    )
    np.savez(pytester.path / "train.npz", x=text.x_train.astype(str), y=text.y_train)
    pytester.makefile(".ini", pytest="[pytest]\nsadl_model = model.keras\nsadl_layers = hidden\n")
    pytester.makeconftest(
        textwrap.dedent(
            """
            import numpy as np
            import pytest

            @pytest.fixture(scope="session")
            def sadl_train():
                with np.load("train.npz") as f:
                    return f["x"], f["y"]
            """
        )
    )
    pytester.makepyfile(test_project=PROJECT_TESTS)
    base = ("-p", "no:cacheprovider", "-p", "no:randomly")
    plain = pytester.runpytest_inprocess(*base)
    plain.assert_outcomes(passed=6)
    res = pytester.runpytest_inprocess(*base, "--sadl-coverage", "--sadl-report=json:out.json")
    res.assert_outcomes(passed=6)
    assert res.ret == 0
    assert "not a numeric array" not in res.stdout.str()
    data = json.loads((pytester.path / "out.json").read_text())
    tests = {t["nodeid"].split("::")[1]: t["inputs"] for t in data["tests"]}
    assert tests == {
        "test_call": 10,
        "test_predict_with_labels": 10,
        "test_string_tensor": 5,
        "test_evaluate": 15,
        "test_predict_on_a_dataset": 8,
        "test_predict_refuses_a_numpy_str_array_as_keras_does": 0,
    }
    for metric in ("lsc", "dsc", "nc", "kmnc"):
        assert data["metrics"][metric]["value"] > 0, metric
    # labels from sadl_labels (matched by text), evaluate's y and the dataset's (x, y)
    assert data["mistakes"]["overall"]["labelled"] == 33
    model = keras.saving.load_model(text_model_path)
    # the inputs by node id: call, evaluate, predict_on_a_dataset, predict_with_labels, string_tensor
    x_in = np.concatenate(
        [text.x_test[:10], text.x_test[25:40], text.x_train[:8], text.x_test[10:20], text.x_test[20:25]]
    )
    assert data["inputs"]["pred"] == model.predict(x_in, verbose=0).argmax(1).tolist()
    # the most surprising inputs are shown by their text (no thumbnail), in the JSON and the HTML
    texts = {str(s) for s in x_in}
    top = [t for t in data["top_inputs"] if t["by"] == "lsa"]
    assert top and all(t["image"] is None and t["text"] in texts for t in top)
    assert top[0]["text"] == str(x_in[top[0]["input"]])
    res = pytester.runpytest_inprocess(*base, "--sadl-coverage", "--sadl-report=html:html")
    page = (pytester.path / "html" / "index.html").read_text()
    assert f'<blockquote class="snippet">{html.escape(top[0]["text"])}</blockquote>' in page


def test_snippets_are_the_start_of_each_text_input() -> None:
    """A text input's snippet: its strings joined by " | ", whitespace collapsed, cut at 80
    characters with an ellipsis; str and bytes alike; nothing for numbers."""
    from pytest_sadl.records import SNIPPET_MAX, snippets

    long = "word " * 40
    got = snippets(np.array([["a  b", "c"], [long, b"d"]], dtype=object))
    assert got is not None and got[0] == "a b | c"
    assert len(got[1]) == SNIPPET_MAX and got[1].endswith("\u2026") and got[1].startswith("word word")
    assert snippets(np.zeros((3, 4), np.float32)) is None
    assert snippets({"ids": np.zeros((2, 3)), "text": np.array(["x", "y"])}).tolist() == ["x", "y"]


def test_sadl_select_on_a_pool_of_text(text_model_path: Path, text: Any, tmp_path: Path, capsys: Any) -> None:
    """``sadl select`` takes a pool of raw strings: scored by the profile of text training
    data, the most surprising chosen (the engine's own scores, computed here from the
    model's traces), the chosen sentences written back as text with their labels, and
    shown by their snippets in the selection page."""
    from pytest_sadl.cli.main import main
    from pytest_sadl.engine import ProfileView
    from pytest_sadl.profile.build import ProfileOptions
    from pytest_sadl.profile.lookup import load_or_build

    shutil.copy(text_model_path, tmp_path / "m.keras")
    np.savez(tmp_path / "train.npz", x=text.x_train.astype(str), y=text.y_train)
    pool, labels = text.x_test.astype(str), text.y_test
    np.savez(tmp_path / "pool.npz", x=pool, y=labels)
    out = tmp_path / "out"
    args = ["select", str(tmp_path / "pool.npz"), "--model", "m.keras", "--train", "train.npz"]
    args += ["--sa-layers", "hidden", "--rootdir", str(tmp_path), "--cache-dir", str(tmp_path / "cache")]
    assert main([*args, "--by", "dsa", "--budget", "6", "--out", str(out)]) == 0
    assert "selected 6 of 40" in capsys.readouterr().out

    profile = load_or_build(
        str(tmp_path / "m.keras"),
        str(tmp_path / "train.npz"),
        ProfileOptions(sa_layers=("hidden",)),
        tmp_path / "cache",
    )
    assert not profile.built  # the profile select made and stored
    traces = profile.trace_model(keras.saving.load_model(tmp_path / "m.keras")).traces(pool)
    dsa = ProfileView.of(profile).score(traces.sa.astype(np.float64), traces.pred)["dsa"]
    doc = json.loads((out / "selection.json").read_text())
    assert doc["indices"] == np.argsort(-dsa, kind="stable")[:6].tolist()
    with np.load(out / "selected.npz") as npz:
        assert npz["x"].tolist() == pool[doc["indices"]].tolist()
        assert npz["y"].tolist() == labels[doc["indices"]].tolist()
    page = (out / "index.html").read_text()
    assert "<img" not in page and "built-in method" not in page
    for i in doc["indices"]:
        assert html.escape(str(pool[i])) in page
        assert f"DSA {dsa[i]:.3g}" in page  # each pick's scores under it
