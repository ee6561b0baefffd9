"""Test inputs for the digits model: adversarial attacks and DeepTest-style transformations.

Images are float arrays ``(n, 8, 8, 1)`` with pixels in [0, 1]; every function returns
a new float32 array of the same shape, clipped to [0, 1].

* :func:`fgsm` and :func:`bim` need the model (a Keras model, or any callable that maps
  a batch to class probabilities) and the true labels; gradients come from
  ``tf.GradientTape`` on ``model(x, training=False)``.
* :func:`rotate`, :func:`shift`, :func:`gaussian_noise` and :func:`contrast` are the
  image transformations of DeepTest (Tian et al., ICSE 2018) that make sense for 8x8
  grey digits; they use SciPy and NumPy only.

Bad arguments raise :class:`AttackInputError` (a ``ValueError``) naming the argument.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import ndimage


class AttackInputError(ValueError):
    """An argument of an attack or a transformation is out of range or badly shaped."""


def _images(x: Any) -> np.ndarray:
    """Validate a batch of images and return it as float32 ``(n, h, w, c)``."""
    arr = np.asarray(x, dtype=np.float32)
    if arr.ndim != 4:
        raise AttackInputError(
            f"images must be a 4-D batch (n, height, width, channels), got shape {arr.shape}; "
            "add the batch axis with x[np.newaxis] or the channel axis with x[..., np.newaxis]"
        )
    if arr.shape[0] == 0:
        raise AttackInputError("images is an empty batch; pass at least one image")
    if not np.all(np.isfinite(arr)):
        raise AttackInputError("images contain NaN or infinite values")
    if arr.min() < 0.0 or arr.max() > 1.0:
        raise AttackInputError(
            f"images must have pixels in [0, 1], got [{arr.min():.3g}, {arr.max():.3g}]; "
            "scale them first (the digits are 0..16: divide by 16)"
        )
    return arr


def _labels(y: Any, n: int) -> np.ndarray:
    """Validate integer class labels for a batch of ``n`` images."""
    arr = np.asarray(y)
    if arr.shape != (n,) or not np.issubdtype(arr.dtype, np.integer):
        raise AttackInputError(f"labels must be {n} integer class indices (shape ({n},)), got {arr.dtype} {arr.shape}")
    return arr.astype(np.int64)


def _epsilon(name: str, value: float) -> float:
    """Validate a perturbation bound in the [0, 1] pixel scale."""
    value = float(value)
    if not (0.0 < value <= 1.0):
        raise AttackInputError(f"{name} must be in (0, 1] (pixel scale), got {value}")
    return value


def loss_gradient(model: Callable[..., Any], x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Gradient of the cross-entropy loss with respect to the input, ``(n, h, w, c)``.

    ``model(x, training=False)`` must return class probabilities (a softmax output).
    """
    import tensorflow as tf

    xt = tf.convert_to_tensor(x, dtype=tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        probs = model(xt, training=False)
        loss = tf.keras.losses.sparse_categorical_crossentropy(tf.convert_to_tensor(y), probs)
    grad = tape.gradient(loss, xt)
    if grad is None:
        raise AttackInputError("the model's output does not depend on its input; cannot take gradients")
    return np.asarray(grad, dtype=np.float32)


def fgsm(model: Callable[..., Any], x: Any, y: Any, eps: float) -> np.ndarray:
    """Fast Gradient Sign Method (Goodfellow et al. 2015): one step of size ``eps``.

    ``x_adv = clip(x + eps * sign(grad_x loss(model(x), y)), 0, 1)``, so
    ``max |x_adv - x| <= eps``.
    """
    xs = _images(x)
    ys = _labels(y, len(xs))
    eps = _epsilon("eps", eps)
    grad = loss_gradient(model, xs, ys)
    return np.clip(xs + eps * np.sign(grad), 0.0, 1.0).astype(np.float32)


def bim(
    model: Callable[..., Any],
    x: Any,
    y: Any,
    eps: float,
    *,
    alpha: float | None = None,
    steps: int = 10,
) -> np.ndarray:
    """Basic Iterative Method (Kurakin et al. 2017): ``steps`` FGSM steps of size ``alpha``.

    After each step the image is projected back onto the L-infinity ball of radius
    ``eps`` around ``x`` and onto [0, 1]. ``alpha`` defaults to ``eps / 4`` (BIM's
    usual choice of a step smaller than the ball, so that iterates can turn).
    """
    xs = _images(x)
    ys = _labels(y, len(xs))
    eps = _epsilon("eps", eps)
    alpha = eps / 4 if alpha is None else _epsilon("alpha", alpha)
    if int(steps) != steps or steps < 1:
        raise AttackInputError(f"steps must be a positive integer, got {steps!r}")
    lo, hi = np.clip(xs - eps, 0.0, 1.0), np.clip(xs + eps, 0.0, 1.0)
    adv = xs.copy()
    for _ in range(int(steps)):
        adv = adv + alpha * np.sign(loss_gradient(model, adv, ys))
        adv = np.clip(adv, lo, hi)  # projection onto the eps-ball intersected with [0, 1]
    return adv.astype(np.float32)


def rotate(x: Any, degrees: float) -> np.ndarray:
    """Rotate every image by ``degrees`` (counter-clockwise) about its centre, bilinear."""
    xs = _images(x)
    out = ndimage.rotate(xs, float(degrees), axes=(2, 1), reshape=False, order=1, mode="constant", cval=0.0)
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def shift(x: Any, dy: float, dx: float) -> np.ndarray:
    """Translate every image by ``(dy, dx)`` pixels (down, right); vacated pixels are 0."""
    xs = _images(x)
    out = ndimage.shift(xs, (0.0, float(dy), float(dx), 0.0), order=1, mode="constant", cval=0.0)
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def gaussian_noise(x: Any, sigma: float, *, seed: int = 0) -> np.ndarray:
    """Add i.i.d. Gaussian noise of standard deviation ``sigma`` (seeded), then clip."""
    xs = _images(x)
    sigma = float(sigma)
    if not sigma >= 0.0:
        raise AttackInputError(f"sigma must be >= 0, got {sigma}")
    noise = np.random.default_rng(seed).normal(0.0, sigma, size=xs.shape)
    return np.clip(xs + noise, 0.0, 1.0).astype(np.float32)


def contrast(x: Any, factor: float) -> np.ndarray:
    """Scale every image's contrast about its own mean pixel value by ``factor``, then clip."""
    xs = _images(x)
    factor = float(factor)
    if not factor >= 0.0:
        raise AttackInputError(f"factor must be >= 0, got {factor}")
    mean = xs.mean(axis=(1, 2, 3), keepdims=True)
    return np.clip((xs - mean) * factor + mean, 0.0, 1.0).astype(np.float32)


def accuracy(probs: Any, y: Any) -> float:
    """Fraction of rows of ``probs`` whose argmax equals the label."""
    p = np.asarray(probs)
    yy = np.asarray(y)
    if p.ndim != 2 or len(p) != len(yy):
        raise AttackInputError(f"probs must be (n, classes) for {len(yy)} labels, got shape {p.shape}")
    return float(np.mean(p.argmax(axis=1) == yy))
