"""Group ``test``: the held-out split, as a team checks a model before it ships."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from attacks import accuracy

pytestmark = pytest.mark.sadl(group="test")


def test_overall_accuracy(sadl_model, test_split):
    """The release bar: at least 95 % on digits the model never saw.

    Keras' own ``evaluate``; its ``y`` is what pytest-sadl takes as the true labels
    ("does surprise predict mistakes?"), no ``sadl_labels`` call needed."""
    loss, acc = sadl_model.evaluate(test_split.x, test_split.y, verbose=0)
    assert acc >= 0.95
    assert loss < 0.2


@pytest.mark.parametrize("digit", range(10))
def test_recall_per_digit(sadl_model, test_split, digit):
    """No digit is left behind: each class is recognised at least 85 % of the time."""
    subset = test_split.of_class(digit)
    assert len(subset.y) >= 30  # the stratified split keeps ~36 images per digit
    probs = sadl_model.predict(subset.x, verbose=0)
    assert accuracy(probs, subset.y) >= 0.85


def test_outputs_are_probability_distributions(sadl_model, test_split):
    """The softmax head gives one non-negative row per image that sums to 1, fed as
    Keras' guides feed a model: a batched ``tf.data.Dataset`` of ``(image, label)``."""
    test_ds = tf.data.Dataset.from_tensor_slices((test_split.x, test_split.y)).batch(32)
    probs = sadl_model.predict(test_ds, verbose=0)
    assert probs.shape == (len(test_split.y), 10)
    assert np.all(probs >= 0.0)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)


def test_prediction_does_not_depend_on_batching(sadl_model, test_split):
    """Serving one image at a time gives the same answers as a full batch."""
    x = test_split.x[:40]
    whole = np.asarray(sadl_model.predict(x, verbose=0))
    one_by_one = np.concatenate([np.asarray(sadl_model.predict_on_batch(x[i : i + 1])) for i in range(len(x))])
    np.testing.assert_allclose(one_by_one, whole, atol=1e-5)


def test_wrong_answers_are_less_confident(sadl_model, test_split):
    """Mistakes come with lower confidence than correct answers (a usable reject signal)."""
    probs = np.asarray(sadl_model.predict(test_split.x, verbose=0))
    confidence = probs.max(axis=1)
    right = probs.argmax(axis=1) == test_split.y
    assert 0 < (~right).sum() < len(right)
    assert confidence[~right].mean() < confidence[right].mean()
