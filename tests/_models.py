"""Tiny real Keras models trained on scikit-learn's bundled digits, for the test suite.

Everything here is plain functions (no pytest); ``tests/conftest.py`` turns them into
session fixtures. Keras is imported lazily, inside the functions, so importing this
module costs no TensorFlow import.

The models (all take ``(8, 8, 1)`` float32 images in [0, 1]):

``dense``
    ``Flatten -> Dense(32, relu) "hidden1" -> Dense(16, relu) "hidden2" -> Dense(10, softmax) "probs"``
``conv``
    ``Conv2D(8) "conv1" -> MaxPooling2D "pool1" -> Conv2D(16) "conv2" -> Flatten -> Dropout
    -> Dense(32, relu) "hidden" -> Dense(10, softmax) "probs"``
``functional``
    two branches joined by ``Concatenate``: ``Conv2D(8) "fconv" -> GlobalAveragePooling2D``
    and ``Flatten -> Dense(16) "fdense"``, then ``Dense(24, relu) "fhidden" -> Dense(10, softmax) "fprobs"``
``regression``
    ``Flatten -> Dense(16, relu) "rhidden" -> Dense(1) "value"``, trained with MSE to
    predict the digit's value (0..9) as a float.

Seeds are fixed, so a retrain on the same machine gives the same weights.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np

SEED = 1234
MODEL_NAMES = ("dense", "conv", "functional", "regression")


class Digits(NamedTuple):
    """The digits split: images ``(n, 8, 8, 1)`` float32 in [0, 1] and int64 labels."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load_digits_split(seed: int = SEED, test_fraction: float = 0.25) -> Digits:
    """Return scikit-learn's bundled digits (no download), split 75/25 stratified by class."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0)[..., np.newaxis]
    y = d.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=test_fraction, stratify=y, random_state=seed
    )
    return Digits(x_train, y_train, x_test, y_test)


def build_dense() -> Any:
    """The Dense MLP (Sequential)."""
    import keras
    from keras import layers

    return keras.Sequential(
        [
            keras.Input(shape=(8, 8, 1), name="image"),
            layers.Flatten(name="flatten"),
            layers.Dense(32, activation="relu", name="hidden1"),
            layers.Dense(16, activation="relu", name="hidden2"),
            layers.Dense(10, activation="softmax", name="probs"),
        ],
        name="digits_dense",
    )


def build_conv() -> Any:
    """The small ConvNet (Sequential): Conv2D, MaxPooling2D, Flatten, Dropout, Dense."""
    import keras
    from keras import layers

    return keras.Sequential(
        [
            keras.Input(shape=(8, 8, 1), name="image"),
            layers.Conv2D(8, 3, activation="relu", padding="same", name="conv1"),
            layers.MaxPooling2D(2, name="pool1"),
            layers.Conv2D(16, 3, activation="relu", name="conv2"),
            layers.Flatten(name="flatten"),
            layers.Dropout(0.25, name="dropout"),
            layers.Dense(32, activation="relu", name="hidden"),
            layers.Dense(10, activation="softmax", name="probs"),
        ],
        name="digits_conv",
    )


def build_functional() -> Any:
    """A functional model with two branches joined by Concatenate."""
    import keras
    from keras import layers

    inp = keras.Input(shape=(8, 8, 1), name="image")
    a = layers.Conv2D(8, 3, activation="relu", padding="same", name="fconv")(inp)
    a = layers.GlobalAveragePooling2D(name="gap")(a)
    b = layers.Flatten(name="fflat")(inp)
    b = layers.Dense(16, activation="relu", name="fdense")(b)
    h = layers.Concatenate(name="join")([a, b])
    h = layers.Dense(24, activation="relu", name="fhidden")(h)
    out = layers.Dense(10, activation="softmax", name="fprobs")(h)
    return keras.Model(inp, out, name="digits_functional")


def build_regression() -> Any:
    """A regression model: one linear output, the digit's value as a float."""
    import keras
    from keras import layers

    return keras.Sequential(
        [
            keras.Input(shape=(8, 8, 1), name="image"),
            layers.Flatten(name="flatten"),
            layers.Dense(16, activation="relu", name="rhidden"),
            layers.Dense(1, name="value"),
        ],
        name="digits_regression",
    )


BUILDERS: dict[str, Callable[[], Any]] = {
    "dense": build_dense,
    "conv": build_conv,
    "functional": build_functional,
    "regression": build_regression,
}
EPOCHS = {"dense": 10, "conv": 10, "functional": 10, "regression": 10}


def train_model(name: str, data: Digits, seed: int = SEED) -> Any:
    """Build and train the named model for a few epochs; return the trained model."""
    import keras

    keras.utils.set_random_seed(seed)
    model = BUILDERS[name]()
    if name == "regression":
        model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="mse")
        y = data.y_train.astype(np.float32)
    else:
        model.compile(
            optimizer=keras.optimizers.Adam(3e-3),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
        )
        y = data.y_train
    model.fit(data.x_train, y, epochs=EPOCHS[name], batch_size=32, shuffle=True, verbose=0)
    return model


def ensure_saved_model(directory: Path, name: str, data: Digits) -> Path:
    """Train the named model once and save it as ``<name>.keras`` under ``directory``.

    Safe under pytest-xdist: an exclusive ``fcntl`` lock on ``directory/<name>.lock``
    makes the first worker train while the others wait, then everyone loads the same
    file (two workers can train two different models at once). The file is written to
    a temporary name and renamed, so a reader never sees half a model.
    """
    import fcntl

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.keras"
    with open(directory / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not path.is_file():
                model = train_model(name, data)
                tmp = path.with_name(f"tmp-{os.getpid()}-{path.name}")  # keras wants .keras
                model.save(tmp)
                os.replace(tmp, path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return path


def ensure_saved_models(directory: Path, data: Digits) -> dict[str, Path]:
    """:func:`ensure_saved_model` for every model; returns ``{name: path}``."""
    return {name: ensure_saved_model(directory, name, data) for name in MODEL_NAMES}


def load_model(path: Path) -> Any:
    """Load a saved test model (safe mode on); every call returns a private copy."""
    import keras

    return keras.saving.load_model(path, safe_mode=True)


def accuracy(model: Any, x: np.ndarray, y: np.ndarray) -> float:
    """Classification accuracy of ``model`` on ``(x, y)``."""
    return float(np.mean(model.predict(x, verbose=0).argmax(axis=1) == y))
