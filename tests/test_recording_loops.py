"""Recording the tests teams write: ``predict`` on a ``tf.data.Dataset``, a generator or a
``keras.utils.PyDataset``, ``evaluate`` and ``test_on_batch`` (issue 21).

Each call runs inside ``Recorder.recording`` on a real trained model and is compared with
the same call on the unwrapped model: the same values, shape and dtype, the same number
of batches taken from a generator; the recorded traces are those of the inputs the call
saw (against ``TraceModel.traces``), and a ``y`` the data carries becomes the inputs'
labels. Runs on the TensorFlow and the JAX backend (``scripts/test.sh``).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

from pytest_sadl.capture import TraceModel
from pytest_sadl.errors import SadlRecordingWarning
from pytest_sadl.plugin.recorder import Recorder
from pytest_sadl.records import TestRecord, input_digests
from tests import _models

pytestmark = pytest.mark.tf


def _recorder() -> Recorder:
    # what the plugin's factory makes (pytest_sadl.plugin: no XLA, extrema for NC)
    return Recorder(lambda model: TraceModel(model, jit=False, extrema=True))


def _recorded(
    model: Any, call: Any, recorder: Recorder | None = None, nodeid: str = "t.py::test"
) -> tuple[Any, TestRecord]:
    recorder = recorder or _recorder()
    rec = recorder.record_for(nodeid, 0, "g")
    with recorder.recording(rec, model):
        out = call()
    return out, rec


def _labels_of(rec: TestRecord, x: Any) -> np.ndarray:
    """The labels ``rec`` holds for the rows of ``x``, in order (by digest, as the engine)."""
    table = {int(d): v for digests, values in rec.labels for d, v in zip(digests.tolist(), values, strict=True)}
    return np.array([table[int(d)] for d in input_digests(x).tolist()])


def _traces_of(rec: TestRecord) -> np.ndarray:
    return np.concatenate([b.sa for b in rec.batches])


def _same(a: Any, b: Any) -> None:
    """The same structure, shapes, dtypes and values (the graphs differ by the taps' extra
    outputs only; allow float round-off)."""
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for u, v in zip(a, b, strict=True):
            _same(u, v)
    elif isinstance(a, np.ndarray):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    else:
        assert a == pytest.approx(b, rel=1e-6)


@pytest.fixture(scope="module")
def dense(dense_model_path: Path) -> Any:
    """A private copy of the compiled dense classifier (sparse labels, accuracy metric)."""
    return _models.load_model(dense_model_path)


@pytest.mark.parametrize("form", ["x", "(x,)", "(x, y)", "(x, y, w)"])
def test_predict_on_a_dataset_records_every_batch_and_returns_what_keras_returns(
    dense: Any, digits: Any, form: str
) -> None:
    x, y = digits.x_test[:150], digits.y_test[:150]
    w = np.linspace(0.5, 1.5, len(x)).astype(np.float32)
    slices = {"x": x, "(x,)": (x,), "(x, y)": (x, y), "(x, y, w)": (x, y, w)}[form]
    ds = tf.data.Dataset.from_tensor_slices(slices).batch(64)  # 64 + 64 + 22: a partial last batch
    plain = dense.predict(ds, verbose=0)
    out, rec = _recorded(dense, lambda: dense.predict(ds, verbose=0))
    _same(out, plain)
    assert rec.n_inputs == 150 and [len(b) for b in rec.batches] == [64, 64, 22]
    tm = TraceModel(dense, jit=False)
    np.testing.assert_allclose(_traces_of(rec), tm.traces(x).sa, rtol=1e-5, atol=1e-6)
    if "y" in form:
        np.testing.assert_array_equal(_labels_of(rec, x)[:, 0], y)
    else:
        assert rec.labels == []


def test_predict_with_steps_takes_what_keras_takes_from_a_generator(dense: Any, digits: Any) -> None:
    x = digits.x_test

    def batches(taken: list[int]) -> Any:
        for i in range(0, 450, 9):  # 50 batches of 9
            taken.append(i)
            yield (x[i : i + 9],)

    taken_plain: list[int] = []
    gen = batches(taken_plain)
    plain = dense.predict(gen, steps=3, verbose=0)
    consumed_plain = len(taken_plain)
    taken: list[int] = []
    gen = batches(taken)
    out, rec = _recorded(dense, lambda: dense.predict(gen, steps=3, verbose=0))
    _same(out, plain)
    assert rec.n_inputs == 27 == len(out)  # only the batches Keras used are recorded
    np.testing.assert_allclose(_traces_of(rec), TraceModel(dense, jit=False).traces(x[:27]).sa, rtol=1e-5, atol=1e-6)
    # One pass, Keras' own: the generator is never read again from its start, nor to its end.
    assert taken == sorted(set(taken)) and len(taken) < 50
    if keras.backend.backend() == "jax":  # Keras reads a generator in step on JAX: exactly as far
        assert len(taken) == consumed_plain
    else:  # tf.data prefetches (AUTOTUNE) a few batches ahead, for the plain call too
        assert len(taken) <= consumed_plain + 8 and consumed_plain < 50


def test_predict_and_evaluate_on_a_pydataset_keep_its_labels(dense: Any, digits: Any) -> None:
    x, y = digits.x_test[:100], digits.y_test[:100]

    class Batches(keras.utils.PyDataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> Any:
            return x[i * 25 : (i + 1) * 25], y[i * 25 : (i + 1) * 25]

    plain, plain_eval = dense.predict(Batches(), verbose=0), dense.evaluate(Batches(), verbose=0)
    recorder = _recorder()
    out, rec = _recorded(
        dense, lambda: (dense.predict(Batches(), verbose=0), dense.evaluate(Batches(), verbose=0)), recorder
    )
    _same(out, (plain, plain_eval))
    assert rec.n_inputs == 200  # both calls' inputs
    np.testing.assert_array_equal(_labels_of(rec, x)[:, 0], y)


def test_a_later_tests_evaluate_on_batches_of_another_shape_is_traced(dense: Any, digits: Any) -> None:
    """Issue 37's regression: the test function compiled at one test's evaluate() is kept for
    the next test's, and Keras' JAX trainer bound it to the first test's recorded step; a
    generator of smaller batches makes JAX retrace that step, which must still find the
    running test's traced loop (it once ran untraced, and Keras failed in its callback
    thread: "'str' object has no attribute 'items'")."""
    x, y = digits.x_test[:80], digits.y_test[:80]

    def batches() -> Any:
        for a in range(50, 80, 10):
            yield x[a : a + 10], y[a : a + 10]

    plain_first, plain_second = (
        dense.evaluate(x[:50], y[:50], batch_size=25, verbose=0),
        dense.evaluate(batches(), verbose=0),
    )
    recorder = _recorder()
    first, rec_first = _recorded(
        dense, lambda: dense.evaluate(x[:50], y[:50], batch_size=25, verbose=0), recorder, "t.py::a"
    )
    second, rec_second = _recorded(dense, lambda: dense.evaluate(batches(), verbose=0), recorder, "t.py::b")
    _same((first, second), (plain_first, plain_second))
    assert [len(b) for b in rec_first.batches] == [25, 25] and [len(b) for b in rec_second.batches] == [10, 10, 10]
    np.testing.assert_allclose(
        _traces_of(rec_second), TraceModel(dense, jit=False).traces(x[50:]).sa, rtol=1e-5, atol=1e-6
    )
    np.testing.assert_array_equal(_labels_of(rec_second, x[50:])[:, 0], y[50:])


def test_evaluate_and_test_on_batch_return_keras_numbers_with_y_as_labels(dense: Any, digits: Any) -> None:
    x, y = digits.x_test, digits.y_test
    ds = tf.data.Dataset.from_tensor_slices((x[:100], y[:100])).batch(32)
    calls = (
        lambda: dense.evaluate(x, y, verbose=0),
        lambda: dense.evaluate(x, y, batch_size=50, verbose=0, return_dict=True),
        lambda: dense.evaluate(ds, verbose=0, return_dict=True),
        lambda: dense.evaluate(ds, steps=2, verbose=0),
        lambda: dense.test_on_batch(x[:40], y[:40]),
        lambda: dense.test_on_batch(x[:40], y[:40], return_dict=True),
    )
    plain = [c() for c in calls]
    out, rec = _recorded(dense, lambda: [c() for c in calls])
    _same(out, plain)
    assert isinstance(out[1], dict) and set(out[1]) == {"loss", "accuracy"}
    assert rec.n_inputs == len(x) * 2 + 100 + 64 + 40 * 2
    np.testing.assert_array_equal(_labels_of(rec, x)[:, 0], y)


def test_one_hot_and_regression_targets_become_labels(dense_model_path: Path, regression: Any, digits: Any) -> None:
    x, y = digits.x_test[:64], digits.y_test[:64]
    model = _models.load_model(dense_model_path)
    model.compile(loss="categorical_crossentropy", metrics=["accuracy"])
    onehot = np.eye(10, dtype=np.float32)[y]
    plain = model.evaluate(x, onehot, verbose=0)
    out, rec = _recorded(model, lambda: model.evaluate(x, onehot, verbose=0))
    _same(out, plain)
    np.testing.assert_array_equal(_labels_of(rec, x)[:, 0], y)  # class ids, not one-hot rows

    target = y.astype(np.float32)
    plain = regression.evaluate(x, target, verbose=0)
    out, rec = _recorded(regression, lambda: regression.evaluate(x, target, verbose=0))
    _same(out, plain)
    np.testing.assert_allclose(_labels_of(rec, x)[:, 0], target)


@pytest.fixture(scope="module")
def regression(regression_model_path: Path) -> Any:
    return _models.load_model(regression_model_path)


def test_several_inputs_and_outputs_from_dict_elements(kind_model_path: Any) -> None:
    model = _models.load_model(kind_model_path("two_input"))
    _, _, x = _models.kind_data("two_input")
    y = {"digit": np.arange(len(x["image"])) % 10, "value": np.linspace(0, 9, len(x["image"])).astype(np.float32)}
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(50)
    plain, plain_eval = model.predict(ds, verbose=0), model.evaluate(ds, verbose=0, return_dict=True)
    out, rec = _recorded(model, lambda: (model.predict(ds, verbose=0), model.evaluate(ds, verbose=0, return_dict=True)))
    _same(out, (plain, plain_eval))
    assert rec.n_inputs == 2 * len(x["image"])
    # the measured output is the first ("digit"): its targets are the labels
    np.testing.assert_array_equal(_labels_of(rec, x)[:, 0], y["digit"])


def test_what_still_runs_unrecorded_is_named_once_per_test(dense_model_path: Path, digits: Any) -> None:
    model = _models.load_model(dense_model_path)
    model.compile(loss="sparse_categorical_crossentropy", metrics=["accuracy"], steps_per_execution=2)
    x, y = digits.x_test[:64], digits.y_test[:64]
    plain = model.evaluate(x, y, verbose=0)
    recorder = _recorder()
    with pytest.warns(SadlRecordingWarning) as caught:
        for test in ("t.py::test_a", "t.py::test_b"):
            out, rec = _recorded(model, lambda: [model.evaluate(x, y, verbose=0) for _ in range(2)], recorder, test)
            _same(out, [plain, plain])
            assert rec.n_inputs == 0
    named = [str(w.message) for w in caught if "unrecorded" in str(w.message)]
    assert len(named) == 2, named  # once per test, not once per session nor per call
    assert "t.py::test_a" in named[0] and "t.py::test_b" in named[1]
    assert "steps_per_execution" in named[0]
    assert recorder.messages == named


def test_a_model_error_on_a_generator_is_the_models_and_consumes_no_more(dense_model_path: Path) -> None:
    taken: list[int] = []

    def bad() -> Any:
        for i in range(3):
            taken.append(i)
            yield (np.zeros((4, 5), np.float32),)  # not the model's (8, 8, 1)

    # private copies: a failed predict leaves a JAX model's variables purged (Keras 3.15)
    model = _models.load_model(dense_model_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SadlRecordingWarning)
        with pytest.raises(ValueError) as recorded_error:
            _recorded(model, lambda: model.predict(bad(), verbose=0))
    recorded_taken, taken[:] = list(taken), []
    model = _models.load_model(dense_model_path)
    with pytest.raises(ValueError) as plain_error:
        model.predict(bad(), verbose=0)
    assert taken == recorded_taken and taken  # one pass: the generator is not run again
    assert str(recorded_error.value).splitlines()[0] == str(plain_error.value).splitlines()[0]


@pytest.fixture(scope="module")
def tabular() -> tuple[Any, dict[str, np.ndarray], np.ndarray]:
    """A tabular regressor with two ``Input((1,))`` columns, fed column arrays ``(n,)``
    (which Keras takes), trained for a moment on a synthetic target."""
    keras.utils.set_random_seed(0)
    age, income = keras.Input((1,), name="age"), keras.Input((1,), name="income")
    h = keras.layers.Dense(8, activation="relu", name="hidden")(keras.layers.Concatenate()([age, income]))
    model = keras.Model({"age": age, "income": income}, keras.layers.Dense(1, name="price")(h))
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    rng = np.random.default_rng(0)
    cols = {"age": rng.uniform(0, 1, 300).astype(np.float32), "income": rng.uniform(0, 1, 300).astype(np.float32)}
    y = (cols["age"] + 2 * cols["income"]).astype(np.float32)
    model.fit(cols, y, epochs=2, verbose=0)
    return model, cols, y


def test_column_arrays_for_input_1_are_profiled_and_recorded_as_keras_takes_them(tabular: Any, tmp_path: Path) -> None:
    from pytest_sadl.profile.build import ProfileOptions
    from pytest_sadl.profile.lookup import load_or_build

    model, cols, y = tabular
    prof = load_or_build(model, (cols, y), ProfileOptions(), tmp_path)
    assert prof.n_train == 300 and not prof.classifier
    tm = TraceModel(model, jit=False)
    as_columns = tm.traces(cols)  # (n,) arrays: was "has inputs of shape () but the model expects (1,)"
    as_matrix = tm.traces({k: v[:, None] for k, v in cols.items()})
    np.testing.assert_array_equal(as_columns.sa, as_matrix.sa)
    part = {k: v[:50] for k, v in cols.items()}
    calls = (
        lambda: model.predict(part, verbose=0),
        lambda: model.evaluate(part, y[:50], verbose=0),
        lambda: model.predict(tf.data.Dataset.from_tensor_slices((part, y[:50])).batch(20), verbose=0),
    )
    plain = [c() for c in calls]
    out, rec = _recorded(model, lambda: [c() for c in calls])
    _same(out, plain)
    assert rec.n_inputs == 150
    np.testing.assert_allclose(_traces_of(rec)[:50], as_matrix.sa[:50], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_labels_of(rec, part)[:, 0], y[:50])  # evaluate's and the dataset's targets


def test_a_column_array_for_an_image_model_is_one_line(dense: Any) -> None:
    from pytest_sadl.errors import SadlDataError

    with pytest.raises(
        SadlDataError, match=r"^training data has inputs of shape \(\) but the model expects \(8, 8, 1\)$"
    ):
        TraceModel(dense, jit=False).traces(np.zeros(5, np.float32), what="training data")


def test_a_subclassed_model_takes_only_what_its_call_takes(kind_model_path: Any, digits: Any) -> None:
    from pytest_sadl.errors import SadlDataError

    _models._subclassed_class()
    model = _models.load_model(kind_model_path("subclassed"))
    with pytest.raises(SadlDataError, match=r"\(8, 8\).*expects \(8, 8, 1\).*x\[\.\.\., None\]"):
        TraceModel(model, jit=False).traces(digits.x_test[:10, :, :, 0])


@pytest.mark.filterwarnings("ignore:Your input ran out of data:UserWarning")  # Keras' own, for any finite generator
@pytest.mark.skipif(
    keras.backend.backend() == "jax",
    reason="Keras' JAX predict purges the model's variables while it "
    "runs: a generator cannot call the model, recorded or not",
)
def test_a_generator_that_calls_the_model_does_not_deadlock(dense: Any, digits: Any) -> None:
    """An attack written as a generator calls the model while Keras waits for its next
    batch, on TensorFlow from tf.data's own thread: the recorder must not hold its lock
    across the loop (it did: a hang)."""
    import threading

    x = digits.x_test[:100]

    def attacked() -> Any:
        for i in range(0, 100, 20):
            probs = np.asarray(dense(x[i : i + 20]))  # e.g. to pick the target class
            yield (np.clip(x[i : i + 20] + 0.01 * probs.argmax(1)[:, None, None, None], 0, 1).astype(np.float32),)

    plain = dense.predict(attacked(), verbose=0)
    done: list[Any] = []
    worker = threading.Thread(
        target=lambda: done.append(_recorded(dense, lambda: dense.predict(attacked(), verbose=0))), daemon=True
    )
    worker.start()
    worker.join(timeout=120)
    assert done, "model.predict(generator) hung while recorded"
    out, rec = done[0]
    _same(out, plain)
    assert rec.n_inputs >= 100  # the predicted batches (and the generator's own calls, as any call the test makes)
