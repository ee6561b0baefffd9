"""Unit tests of the attack and transformation helpers in ``attacks.py`` (not recorded).

These are not marked ``sadl``: they check the helpers, not the model, so their inputs
do not count towards surprise coverage.
"""

from __future__ import annotations

import attacks
import numpy as np
import pytest
from attacks import AttackInputError


@pytest.fixture(scope="module")
def few(test_split):
    """Eight held-out images and labels."""
    return test_split.x[:8], test_split.y[:8]


def _loss(model, x, y):
    p = np.asarray(model(x, training=False), dtype=np.float64)
    return -np.log(p[np.arange(len(y)), y])


@pytest.fixture(scope="module")
def softmax_regression():
    """A smooth model (softmax of one dense layer, random weights) with a known gradient."""
    import keras

    keras.utils.set_random_seed(5)
    model = keras.Sequential(
        [keras.Input((8, 8, 1)), keras.layers.Flatten(), keras.layers.Dense(10, activation="softmax")]
    )
    return model


def test_loss_gradient_matches_the_analytic_gradient(softmax_regression, few):
    """For p = softmax(W.x + b), d(-log p_y)/dx = W (p - onehot(y))."""
    x, y = few
    w, _ = softmax_regression.get_weights()
    p = np.asarray(softmax_regression(x, training=False), dtype=np.float64)
    expected = ((p - np.eye(10)[y]) @ w.T.astype(np.float64)).reshape(x.shape)
    np.testing.assert_allclose(attacks.loss_gradient(softmax_regression, x, y), expected, rtol=1e-4, atol=1e-6)


def test_loss_gradient_matches_finite_differences_on_a_smooth_model(softmax_regression, few):
    x, y = few
    grad = attacks.loss_gradient(softmax_regression, x, y)
    h = 1e-2
    for i, (r, c) in enumerate([(1, 2), (3, 3), (4, 5), (6, 1), (2, 6), (5, 4), (0, 0), (7, 7)]):
        plus, minus = x[i : i + 1].copy(), x[i : i + 1].copy()
        plus[0, r, c, 0] += h
        minus[0, r, c, 0] -= h
        numeric = (_loss(softmax_regression, plus, y[i : i + 1]) - _loss(softmax_regression, minus, y[i : i + 1]))[0]
        assert grad[i, r, c, 0] == pytest.approx(numeric / (2 * h), rel=1e-2, abs=1e-4)


def test_a_small_step_along_the_gradient_sign_raises_the_loss(sadl_model, test_split):
    """On the (piecewise linear) ConvNet the FGSM direction goes uphill, to first order.

    Only images whose loss is above 1e-3 are compared: for the others the softmax is
    saturated in float32 and a step of 1e-3 does not change the loss at all.
    """
    x, y = test_split.x, test_split.y
    before = _loss(sadl_model, x, y)
    step = np.clip(x + 1e-3 * np.sign(attacks.loss_gradient(sadl_model, x, y)), 0.0, 1.0)
    after = _loss(sadl_model, step, y)
    unsaturated = before > 1e-3
    assert unsaturated.sum() >= 20
    assert np.all(after[unsaturated] > before[unsaturated])


def test_fgsm_moves_every_pixel_by_eps_along_the_gradient_sign(sadl_model, few):
    x, y = few
    eps = 0.1
    grad = attacks.loss_gradient(sadl_model, x, y)
    adv = attacks.fgsm(sadl_model, x, y, eps)
    expected = np.clip(x + eps * np.sign(grad), 0.0, 1.0)
    np.testing.assert_allclose(adv, expected, atol=1e-6)


def test_one_bim_step_of_size_eps_is_fgsm(sadl_model, few):
    x, y = few
    np.testing.assert_allclose(
        attacks.bim(sadl_model, x, y, 0.2, alpha=0.2, steps=1), attacks.fgsm(sadl_model, x, y, 0.2), atol=1e-6
    )


def test_bim_raises_the_loss_over_fgsm_step(sadl_model, few):
    """More (projected) steps find a higher loss than the first step alone."""
    x, y = few
    one = attacks.bim(sadl_model, x, y, 0.1, steps=1)
    ten = attacks.bim(sadl_model, x, y, 0.1, steps=10)
    assert _loss(sadl_model, ten, y).mean() > _loss(sadl_model, one, y).mean()


def test_rotate_by_90_degrees_is_rot90(few):
    x, _ = few
    np.testing.assert_allclose(attacks.rotate(x, 90), np.rot90(x, k=1, axes=(1, 2)), atol=1e-5)
    np.testing.assert_allclose(attacks.rotate(x, 0), x, atol=1e-6)


def test_integer_shift_moves_pixels_and_fills_zeros(few):
    x, _ = few
    out = attacks.shift(x, 1, -2)
    expected = np.zeros_like(x)
    expected[:, 1:, :-2] = x[:, :-1, 2:]
    np.testing.assert_allclose(out, expected, atol=1e-6)


def test_noise_is_seeded_and_has_the_requested_spread():
    grey = np.full((200, 8, 8, 1), 0.5, dtype=np.float32)  # far from the clip bounds
    a = attacks.gaussian_noise(grey, 0.05, seed=3)
    np.testing.assert_array_equal(a, attacks.gaussian_noise(grey, 0.05, seed=3))
    assert not np.array_equal(a, attacks.gaussian_noise(grey, 0.05, seed=4))
    assert np.std(a - grey) == pytest.approx(0.05, rel=0.05)
    np.testing.assert_array_equal(attacks.gaussian_noise(grey, 0.0), grey)


def test_contrast_scales_about_the_image_mean(few):
    x, _ = few
    np.testing.assert_allclose(attacks.contrast(x, 1.0), x, atol=1e-6)
    flat = attacks.contrast(x, 0.0)
    np.testing.assert_allclose(flat, np.broadcast_to(x.mean(axis=(1, 2, 3), keepdims=True), x.shape), atol=1e-6)
    low = attacks.contrast(x, 0.5)
    assert np.all(low.std(axis=(1, 2, 3)) < x.std(axis=(1, 2, 3)))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m, x, y: attacks.fgsm(m, x[0], y, 0.1), "4-D batch"),
        (lambda m, x, y: attacks.fgsm(m, x * 16, y, 0.1), r"pixels in \[0, 1\]"),
        (lambda m, x, y: attacks.fgsm(m, x, y, 0.0), "eps must be in"),
        (lambda m, x, y: attacks.fgsm(m, x, y[:3], 0.1), "labels must be 8 integer"),
        (lambda m, x, y: attacks.bim(m, x, y, 0.1, steps=0), "steps must be a positive"),
        (lambda m, x, y: attacks.bim(m, x, y, 0.1, alpha=2.0), "alpha must be in"),
        (lambda m, x, y: attacks.gaussian_noise(x, -1.0), "sigma must be"),
        (lambda m, x, y: attacks.contrast(x[:0], 1.0), "empty batch"),
        (lambda m, x, y: attacks.rotate(np.full_like(x, np.nan), 5), "NaN"),
    ],
    ids=["3-D", "0..16", "eps-0", "labels", "steps-0", "alpha-2", "sigma", "empty", "nan"],
)
def test_bad_arguments_are_named(sadl_model, few, call, message):
    x, y = few
    with pytest.raises(AttackInputError, match=message):
        call(sadl_model, x, y)
