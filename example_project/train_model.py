"""Train the example project's digit classifier and save it with its data splits.

The model is a small ConvNet on scikit-learn's bundled 8x8 digits (no download).
Everything is seeded, so a retrain on the same machine and library versions gives
the same weights (checked: bit-identical); other machines or versions may give slightly
different weights, and the tests' bounds leave a margin for that.

Usage (from anywhere)::

    python example_project/train_model.py

writes ``models/digits_cnn.keras``, ``data/train.npz`` and ``data/test.npz`` next to
this file. ``conftest.py`` checks :func:`artifacts_missing` and retrains before the
tests run, so a clean checkout that lacks them still works.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # keras is imported lazily: checking for the files must not pay for TensorFlow
    import keras

HERE = Path(__file__).resolve().parent
MODEL_PATH = HERE / "models" / "digits_cnn.keras"
TRAIN_PATH = HERE / "data" / "train.npz"
TEST_PATH = HERE / "data" / "test.npz"

SEED = 20190527  # ICSE 2019; any fixed value works
TEST_FRACTION = 0.2
EPOCHS = 40
BATCH_SIZE = 32
HIDDEN_LAYER = "dense_hidden"


def load_split(seed: int = SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(x_train, y_train, x_test, y_test)``: digits as ``(n, 8, 8, 1)`` float32 in [0, 1].

    The split is stratified by class, 80/20, with a fixed seed, so it is the same on
    every machine (it depends only on scikit-learn's bundled data).
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0)[..., np.newaxis]
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=TEST_FRACTION, stratify=y, random_state=seed)
    return x_train, y_train, x_test, y_test


def build_model() -> keras.Model:
    """The ConvNet: two convolutions, then the hidden dense layer SA is measured on."""
    import keras
    from keras import layers

    return keras.Sequential(
        [
            keras.Input(shape=(8, 8, 1), name="image"),
            layers.Conv2D(16, 3, activation="relu", padding="same", name="conv1"),
            layers.MaxPooling2D(2, name="pool1"),
            layers.Conv2D(32, 3, activation="relu", name="conv2"),
            layers.Flatten(name="flatten"),
            layers.Dropout(0.25, name="dropout"),
            layers.Dense(64, activation="relu", name=HIDDEN_LAYER),
            layers.Dense(10, activation="softmax", name="probs"),
        ],
        name="digits_cnn",
    )


def train(seed: int = SEED, epochs: int = EPOCHS, verbose: int = 0) -> tuple[keras.Model, float]:
    """Train the ConvNet on the training split; return ``(model, test_accuracy)``."""
    import keras

    keras.utils.set_random_seed(seed)
    x_train, y_train, x_test, y_test = load_split(seed)
    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    model.fit(x_train, y_train, epochs=epochs, batch_size=BATCH_SIZE, shuffle=True, verbose=verbose)
    pred = model.predict(x_test, verbose=0).argmax(axis=1)
    return model, float(np.mean(pred == y_test))


def save_artifacts(model: keras.Model, out_dir: Path = HERE, seed: int = SEED) -> None:
    """Write the model and both splits under ``out_dir`` (atomically per file)."""
    x_train, y_train, x_test, y_test = load_split(seed)
    (out_dir / "models").mkdir(parents=True, exist_ok=True)
    (out_dir / "data").mkdir(parents=True, exist_ok=True)
    model_path = out_dir / "models" / MODEL_PATH.name
    tmp_model = model_path.with_name("tmp-" + model_path.name)  # keras needs the .keras suffix
    model.save(tmp_model)
    os.replace(tmp_model, model_path)
    for path, x, y in (
        (out_dir / "data" / TRAIN_PATH.name, x_train, y_train),
        (out_dir / "data" / TEST_PATH.name, x_test, y_test),
    ):
        tmp = path.with_name("tmp-" + path.name)
        np.savez_compressed(tmp, x=x, y=y)
        os.replace(tmp, path)


def artifacts_missing(out_dir: Path = HERE) -> list[Path]:
    """The artifact files that do not exist under ``out_dir``."""
    paths = [
        out_dir / "models" / MODEL_PATH.name,
        out_dir / "data" / TRAIN_PATH.name,
        out_dir / "data" / TEST_PATH.name,
    ]
    return [p for p in paths if not p.is_file()]


def main(argv: list[str] | None = None) -> int:
    """Command line: train, print the test accuracy, save the artifacts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="training epochs (default %(default)s)")
    parser.add_argument("--out", type=Path, default=HERE, help="directory to write models/ and data/ into")
    parser.add_argument("--verbose", type=int, default=0, help="Keras fit verbosity (0, 1 or 2)")
    args = parser.parse_args(argv)
    model, acc = train(epochs=args.epochs, verbose=args.verbose)
    save_artifacts(model, args.out)
    print(f"test accuracy {acc:.4f}; saved {args.out / 'models' / MODEL_PATH.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
