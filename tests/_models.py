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

Models of other kinds (built by :func:`build_kind`, trained by :func:`train_kind` on
data made by :func:`kind_data`; no downloads, seconds of training):

``subclassed``
    a subclassed ``keras.Model`` holding a custom block (``block/conv_a``,
    ``block/conv_b``), then ``Flatten -> Dense(16) "hidden" -> Dense(10, softmax) "probs"``.
``nested``
    a Sequential holding a functional ``encoder`` model (``encoder/conv1``,
    ``encoder/conv2``, ``encoder/pool``), then ``Dense(16) "hidden" -> Dense(10) "probs"``.
``two_input``
    functional, inputs ``image`` (8, 8, 1) and ``aux`` (8,) (the image's row means),
    outputs ``digit`` (10-way softmax) and ``value`` (the digit as a float).
``mnist``, ``cifar``
    the paper's ConvNets in small: MNIST-style on digits; CIFAR-10-style (two conv
    blocks of two convs, 3 channels) on digits upsampled to 16x16 and tinted in RGB.
``dave2``
    Dave-2: five convs (three 5x5 stride 2, two 3x3), four dense (100, 50, 10 and the
    one steering output), on 32x64x3 synthetic "roads" whose steering is the slope of
    a bright line.
``chauffeur``
    Chauffeur-like: ``TimeDistributed`` conv and pooling over 4 frames of 16x16, an
    LSTM (``return_sequences``) and an LSTM, ``Dense(1)`` steering; synthetic moving
    dots whose steering is the horizontal speed.

The raw-text classifier (:func:`build_text`, :func:`train_text` on :func:`text_data`):

``text``
    ``TextVectorization -> Embedding -> GlobalAveragePooling1D "pool" -> Dense "hidden" ->
    Dense(2, softmax) "probs"`` on synthetic positive/negative sentences given as raw
    strings (object arrays of ``str``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

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
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=test_fraction, stratify=y, random_state=seed)
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
    return _ensure_saved(directory, name, lambda: train_model(name, data))


def _ensure_saved(directory: Path, name: str, train: Callable[[], Any]) -> Path:
    import fcntl

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.keras"
    with open(directory / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not path.is_file():
                model = train()
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


# ----------------------------------------------------------------------------- other kinds


KINDS = ("subclassed", "nested", "two_input", "mnist", "cifar", "dave2", "chauffeur")
REGRESSORS = ("dave2", "chauffeur")


def kind_data(kind: str, seed: int = SEED) -> tuple[Any, Any, Any]:
    """``(x_train, y_train, x_test)`` for a model kind; ``x`` a dict by input name for
    ``two_input``. Small: a few hundred training inputs."""
    rng = np.random.default_rng(seed)
    if kind in ("subclassed", "nested", "mnist"):
        d = load_digits_split(seed)
        return d.x_train, d.y_train, d.x_test[:120]
    if kind == "two_input":
        d = load_digits_split(seed)

        def both(x: np.ndarray) -> dict[str, np.ndarray]:
            return {"image": x, "aux": x.mean(axis=2)[..., 0].astype(np.float32)}

        y = {"digit": d.y_train, "value": d.y_train.astype(np.float32)}
        return both(d.x_train), y, both(d.x_test[:120])
    if kind == "cifar":
        d = load_digits_split(seed)

        def rgb(x: np.ndarray, y: np.ndarray) -> np.ndarray:
            big = x.repeat(2, axis=1).repeat(2, axis=2)  # 16x16x1
            tint = np.stack([(y % 3 + 1) / 3, ((y + 1) % 3 + 1) / 3, ((y + 2) % 3 + 1) / 3], axis=1)
            return (big * tint[:, None, None, :]).astype(np.float32)

        return rgb(d.x_train, d.y_train), d.y_train, rgb(d.x_test[:120], d.y_test[:120])
    if kind == "dave2":
        n = 420
        slope = rng.uniform(-1, 1, n).astype(np.float32)
        x = rng.uniform(0, 0.2, (n, 32, 64, 3)).astype(np.float32)
        rows = np.arange(32)
        for i in range(n):
            cols = np.clip((32 + slope[i] * (31 - rows)).astype(int), 0, 63)
            x[i, rows, cols, :] = 1.0
        return x[:300], slope[:300, None], x[300:]
    if kind == "chauffeur":
        n = 260
        speed = rng.uniform(-2, 2, n).astype(np.float32)
        x = np.zeros((n, 4, 16, 16, 1), np.float32)
        for i in range(n):
            r, c = rng.integers(4, 12, 2)
            for t in range(4):
                x[i, t, r, int(np.clip(c + speed[i] * t, 0, 15)), 0] = 1.0
        return x[:200], speed[:200, None], x[200:]
    raise KeyError(kind)


def build_kind(kind: str) -> Any:
    """The untrained model of a kind (see the module docstring)."""
    import keras
    from keras import layers

    if kind == "subclassed":
        return _subclassed_class()()
    if kind == "nested":
        inp = keras.Input((8, 8, 1), name="image")
        h = layers.Conv2D(8, 3, padding="same", activation="relu", name="conv1")(inp)
        h = layers.Conv2D(8, 3, activation="relu", name="conv2")(h)
        encoder = keras.Model(inp, layers.GlobalAveragePooling2D(name="pool")(h), name="encoder")
        return keras.Sequential(
            [
                keras.Input((8, 8, 1)),
                encoder,
                layers.Dense(16, activation="relu", name="hidden"),
                layers.Dense(10, activation="softmax", name="probs"),
            ],
            name="nested",
        )
    if kind == "two_input":
        image = keras.Input((8, 8, 1), name="image")
        aux = keras.Input((8,), name="aux")
        h = layers.Conv2D(8, 3, activation="relu", name="conv")(image)
        h = layers.GlobalAveragePooling2D(name="gap")(h)
        a = layers.Dense(8, activation="relu", name="aux_dense")(aux)
        h = layers.Dense(16, activation="relu", name="hidden")(layers.Concatenate(name="join")([h, a]))
        digit = layers.Dense(10, activation="softmax", name="digit")(h)
        value = layers.Dense(1, name="value")(h)
        return keras.Model({"image": image, "aux": aux}, {"digit": digit, "value": value}, name="two_input")
    if kind == "mnist":
        return keras.Sequential(
            [
                keras.Input((8, 8, 1)),
                layers.Conv2D(8, 3, activation="relu", name="conv1"),
                layers.Conv2D(8, 3, activation="relu", name="conv2"),
                layers.MaxPooling2D(2, name="pool"),
                layers.Flatten(),
                layers.Dense(16, activation="relu", name="dense1"),
                layers.Dense(10, activation="softmax", name="probs"),
            ],
            name="mnist_convnet",
        )
    if kind == "cifar":
        return keras.Sequential(
            [
                keras.Input((16, 16, 3)),
                layers.Conv2D(8, 3, padding="same", activation="relu", name="conv1"),
                layers.Conv2D(8, 3, padding="same", activation="relu", name="conv2"),
                layers.MaxPooling2D(2, name="pool1"),
                layers.Conv2D(16, 3, padding="same", activation="relu", name="conv3"),
                layers.Conv2D(16, 3, padding="same", activation="relu", name="conv4"),
                layers.MaxPooling2D(2, name="pool2"),
                layers.Flatten(),
                layers.Dropout(0.25),
                layers.Dense(32, activation="relu", name="dense1"),
                layers.Dense(10, activation="softmax", name="probs"),
            ],
            name="cifar_convnet",
        )
    if kind == "dave2":
        return keras.Sequential(
            [
                keras.Input((32, 64, 3)),
                layers.Conv2D(6, 5, strides=2, padding="same", activation="relu", name="conv1"),
                layers.Conv2D(8, 5, strides=2, padding="same", activation="relu", name="conv2"),
                layers.Conv2D(12, 5, strides=2, padding="same", activation="relu", name="conv3"),
                layers.Conv2D(16, 3, padding="same", activation="relu", name="conv4"),
                layers.Conv2D(16, 3, padding="same", activation="relu", name="conv5"),
                layers.Flatten(),
                layers.Dense(100, activation="relu", name="fc1"),
                layers.Dense(50, activation="relu", name="fc2"),
                layers.Dense(10, activation="relu", name="fc3"),
                layers.Dense(1, name="steering"),
            ],
            name="dave2",
        )
    if kind == "chauffeur":
        return keras.Sequential(
            [
                keras.Input((4, 16, 16, 1)),
                layers.TimeDistributed(layers.Conv2D(8, 3, activation="relu"), name="td_conv"),
                layers.TimeDistributed(layers.MaxPooling2D(2), name="td_pool"),
                layers.TimeDistributed(layers.Flatten(), name="td_flat"),
                layers.LSTM(16, return_sequences=True, name="lstm1"),
                layers.LSTM(8, name="lstm2"),
                layers.Dense(1, name="steering"),
            ],
            name="chauffeur",
        )
    raise KeyError(kind)


def _subclassed_class() -> Any:
    """The subclassed model's class (registered, so that a saved copy loads safely)."""
    import keras
    from keras import layers

    @keras.saving.register_keras_serializable(package="sadl_tests")
    class ConvBlock(layers.Layer):
        """Two convs: a custom block whose layers are named by path (``block/conv_a``)."""

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.conv_a = layers.Conv2D(8, 3, padding="same", activation="relu", name="conv_a")
            self.conv_b = layers.Conv2D(8, 3, activation="relu", name="conv_b")

        def call(self, x: Any) -> Any:
            return self.conv_b(self.conv_a(x))

    @keras.saving.register_keras_serializable(package="sadl_tests")
    class DigitsNet(keras.Model):
        """A subclassed classifier; its head is declared before its body on purpose
        (the default layers follow the call order, not the attribute order)."""

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(name=kwargs.pop("name", "digits_subclassed"), **kwargs)
            self.probs = layers.Dense(10, activation="softmax", name="probs")
            self.block = ConvBlock(name="block")
            self.flat = layers.Flatten(name="flatten")
            self.hidden = layers.Dense(16, activation="relu", name="hidden")

        def call(self, x: Any, training: Any = None) -> Any:
            return self.probs(self.hidden(self.flat(self.block(x))))

    return DigitsNet


def train_kind(kind: str, seed: int = SEED, epochs: int = 4) -> Any:
    """Build and train a model of ``kind`` for a few epochs on :func:`kind_data`."""
    import keras

    keras.utils.set_random_seed(seed)
    x, y, _ = kind_data(kind, seed)
    model = build_kind(kind)
    if kind == "two_input":
        model.compile(
            optimizer=keras.optimizers.Adam(3e-3), loss={"digit": "sparse_categorical_crossentropy", "value": "mse"}
        )
    elif kind in REGRESSORS:
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    else:
        model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="sparse_categorical_crossentropy")
    model.fit(x, y, epochs=epochs, batch_size=32, verbose=0)
    return model


def ensure_saved_kind(directory: Path, kind: str) -> Path:
    """:func:`ensure_saved_model` for a model of another kind (``<kind>.keras``), trained
    once per session under the same file lock."""
    return _ensure_saved(directory, kind, lambda: train_kind(kind))


# ----------------------------------------------------------------------------- raw text

POSITIVE = ("good", "great", "fine", "nice", "happy", "love", "bright", "warm")
NEGATIVE = ("bad", "awful", "poor", "sad", "hate", "ugly", "dull", "cold")
FILLER = ("the", "film", "was", "a", "day", "really", "very", "this", "so", "and", "it", "felt")


class Text(NamedTuple):
    """Sentences as object arrays of ``str`` (how Keras takes raw text) and int64 labels
    (1: more positive than negative words)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def text_data(seed: int = SEED, n_train: int = 240, n_test: int = 40) -> Text:
    """Synthetic two-class sentences of 3 to 8 words: filler words and a majority of
    positive or negative ones (a few of the other kind mixed in)."""
    rng = np.random.default_rng(seed)
    n = n_train + n_test
    y = rng.integers(0, 2, n).astype(np.int64)
    sentences = []
    for label in y:
        major, minor = (POSITIVE, NEGATIVE) if label else (NEGATIVE, POSITIVE)
        k = int(rng.integers(1, 4))
        words = [*rng.choice(FILLER, int(rng.integers(2, 5))), *rng.choice(major, k)]
        words += list(rng.choice(minor, int(rng.integers(0, k))))
        rng.shuffle(words)
        sentences.append(" ".join(words))
    x = np.array(sentences, dtype=object)
    return Text(x[:n_train], y[:n_train], x[n_train:], y[n_train:])


def build_text(adapt_on: np.ndarray, input_shape: tuple[int, ...] = (1,)) -> Any:
    """``TextVectorization "vectorize" -> Embedding(24, 8) "embed" -> GlobalAveragePooling1D
    "pool" -> Dense(12, tanh) "hidden" -> Dense(2, softmax) "probs"``, its vocabulary adapted
    on ``adapt_on`` (a handful of sentences); the input takes raw strings of ``input_shape``
    (``(1,)`` as Keras' text guides write it, or ``()``)."""
    import keras
    from keras import layers

    vectorize = layers.TextVectorization(max_tokens=24, output_sequence_length=8, name="vectorize")
    vectorize.adapt(adapt_on)
    inp = keras.Input(input_shape, dtype="string", name="text")
    h = layers.Embedding(24, 8, name="embed")(vectorize(inp))
    h = layers.GlobalAveragePooling1D(name="pool")(h)
    h = layers.Dense(12, activation="tanh", name="hidden")(h)
    return keras.Model(inp, layers.Dense(2, activation="softmax", name="probs")(h), name="text_classifier")


def train_text(seed: int = SEED, epochs: int = 12) -> Any:
    """The text classifier, trained for a few epochs on :func:`text_data`."""
    import keras

    keras.utils.set_random_seed(seed)
    d = text_data(seed)
    model = build_text(d.x_train[:40])
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(d.x_train, d.y_train, epochs=epochs, batch_size=32, verbose=0)
    return model


def ensure_saved_text(directory: Path) -> Path:
    """:func:`ensure_saved_model` for the text classifier (``text.keras``)."""
    return _ensure_saved(directory, "text", train_text)


# ----------------------------------------------------------------------------- PyTorch twins

TWIN_KINDS = ("mnist", "cifar", "dave2", "chauffeur")


def torch_kind(kind: str) -> Any:
    """The untrained ``torch.nn.Module`` twin of the paper's subject ``kind``: the same
    layers as :func:`build_kind`'s, channels first (inputs ``(n, c, h, w)``; Chauffeur's
    ``(n, t, c, h, w)``), so that :func:`copy_into_twin` gives it the Keras model's numbers.
    Keras' ``padding="same"`` with stride 2 pads one more row and column at the end than
    at the start: an explicit ``ZeroPad2d`` before those convolutions. torch is imported
    here only."""
    from torch import nn

    if kind == "mnist":
        return nn.Sequential(
            nn.Conv2d(1, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 10), nn.Softmax(dim=1),
        )  # fmt: skip
    if kind == "cifar":
        return nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Dropout(0.25), nn.Linear(256, 32), nn.ReLU(), nn.Linear(32, 10), nn.Softmax(dim=1),
        )  # fmt: skip
    if kind == "dave2":
        return nn.Sequential(
            nn.ZeroPad2d((1, 2, 1, 2)), nn.Conv2d(3, 6, 5, stride=2), nn.ReLU(),
            nn.ZeroPad2d((1, 2, 1, 2)), nn.Conv2d(6, 8, 5, stride=2), nn.ReLU(),
            nn.ZeroPad2d((1, 2, 1, 2)), nn.Conv2d(8, 12, 5, stride=2), nn.ReLU(),
            nn.Conv2d(12, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
            nn.Flatten(), nn.Linear(512, 100), nn.ReLU(), nn.Linear(100, 50), nn.ReLU(), nn.Linear(50, 10),
            nn.ReLU(), nn.Linear(10, 1),
        )  # fmt: skip
    if kind == "chauffeur":
        return _chauffeur_twin()
    raise KeyError(kind)


def _chauffeur_twin() -> Any:
    import torch
    from torch import nn

    class LastStep(nn.Module):
        """The last step of a sequence: Keras' ``LSTM(return_sequences=False)`` output."""

        def forward(self, seq: torch.Tensor) -> torch.Tensor:
            return seq[:, -1]

    class Chauffeur(nn.Module):
        """Frames through one conv and pool (as Keras' ``TimeDistributed``), flattened in
        Keras' ``(h, w, c)`` order, then two LSTMs; the layers are named as the Keras
        model's where they are measured (``lstm1``, ``lstm2``, ``steering``)."""

        def __init__(self) -> None:
            super().__init__()
            self.td_conv = nn.Conv2d(1, 8, 3)
            self.td_act = nn.ReLU()
            self.td_pool = nn.MaxPool2d(2)
            self.lstm1 = nn.LSTM(392, 16, batch_first=True)
            self.rnn2 = nn.LSTM(16, 8, batch_first=True)
            self.lstm2 = LastStep()
            self.steering = nn.Linear(8, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            n, t = x.shape[:2]
            h = self.td_pool(self.td_act(self.td_conv(x.reshape(n * t, *x.shape[2:]))))
            h = h.permute(0, 2, 3, 1).reshape(n, t, -1)
            seq, _ = self.lstm1(h)
            seq, _ = self.rnn2(seq)
            out: torch.Tensor = self.steering(self.lstm2(seq))
            return out

    return Chauffeur()


#: the layers both twins of Chauffeur measure (its frame convolution runs once per frame
#: in PyTorch, n * t rows: not a layer of the per-input kind)
CHAUFFEUR_LAYERS = {"sa": ["lstm2"], "coverage": ["lstm1", "lstm2", "steering"]}


def copy_into_twin(keras_model: Any, module: Any) -> Any:
    """The Keras model's weights into its :func:`torch_kind` twin, layer by layer in
    order: a Conv2D kernel ``(kh, kw, in, out)`` to ``(out, in, kh, kw)``, a Dense kernel
    transposed (its rows permuted from the ``(h, w, c)`` order of the Flatten before it to
    PyTorch's ``(c, h, w)``), an LSTM's kernels transposed (both order their gates
    i, f, c, o; Keras has one bias, PyTorch two: the second is zero). Returns the module
    in ``eval()`` mode."""
    import torch
    from keras import layers as kl
    from torch import nn

    weighted = [m for m in module.modules() if isinstance(m, (nn.Linear, nn.Conv2d, nn.LSTM))]
    layers = [layer for layer in keras_model.layers if layer.get_weights()]
    assert len(weighted) == len(layers), (len(weighted), len(layers))
    flat: tuple[int, ...] | None = None
    pairs = iter(zip(layers, weighted, strict=True))
    for layer in keras_model.layers:
        if isinstance(layer, kl.Flatten) and len(layer.input.shape) == 4:
            flat = tuple(int(d) for d in layer.input.shape[1:])
        if not layer.get_weights():
            continue
        _, m = next(pairs)
        params = [np.asarray(w) for w in layer.get_weights()]
        if isinstance(m, nn.LSTM):
            kernel, recurrent, bias = params
            new = {
                "weight_ih_l0": kernel.T,
                "weight_hh_l0": recurrent.T,
                "bias_ih_l0": bias,
                "bias_hh_l0": np.zeros_like(bias),
            }
        elif isinstance(m, nn.Conv2d):
            new = {"weight": params[0].transpose(3, 2, 0, 1), "bias": params[1]}
        else:
            kernel = params[0]
            if flat is not None and kernel.shape[0] == int(np.prod(flat)):
                h, w, c = flat
                kernel = kernel.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(kernel.shape[0], -1)
            flat = None
            new = {"weight": kernel.T, "bias": params[1]}
        with torch.no_grad():
            for name, value in new.items():
                getattr(m, name).copy_(torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32)))
    return module.eval()


def channels_first(x: np.ndarray) -> np.ndarray:
    """Keras' channels-last inputs in PyTorch's layout: ``(n, h, w, c)`` to ``(n, c, h, w)``,
    frames ``(n, t, h, w, c)`` to ``(n, t, c, h, w)``."""
    axes = (0, 3, 1, 2) if x.ndim == 4 else (0, 1, 4, 2, 3)
    return np.ascontiguousarray(x.transpose(axes))
