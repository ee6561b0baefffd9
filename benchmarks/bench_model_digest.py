"""What noticing a changed model costs: the digest of a model's weights, by method.

The plugin computes :func:`pytest_sadl.capture.identity.model_digest` when the profile's
model is bound and at the end of each marked test that recorded inputs. This prints,
side by side in one run, the time of one digest of the example project's model
(``example_project/models/digits_cnn.keras``) and of a ~5M-parameter dense model, by:

* ``read``: only reading every weight into NumPy (``np.asarray(weight.value)``), the
  floor every method pays;
* ``crc32`` (what the plugin uses), ``adler32``, ``blake2b`` over each weight's bytes;
* ``sum``: a NumPy sum of each weight's bytes as uint32 (cheap, but blind to weights
  that are swapped or permuted: it is shown to be no faster than worth that blindness);

then the ratio of each to ``read``, and whether each notices one ``fit`` step and a
``set_weights`` that swaps two kernels' rows (``sum`` does not). Usage::

    python benchmarks/bench_model_digest.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import time
import zlib
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _weights(model):
    return [np.ascontiguousarray(np.asarray(w.value)) for w in model.weights]


def read(model):
    return len(_weights(model))


def crc32(model):
    from pytest_sadl.capture.identity import model_digest

    return model_digest(model)


def adler32(model):
    h = 1
    for w in _weights(model):
        h = zlib.adler32(w.reshape(-1).view(np.uint8), h)
    return h


def blake2b(model):
    h = hashlib.blake2b(digest_size=16)
    for w in _weights(model):
        h.update(w.reshape(-1).view(np.uint8))
    return h.hexdigest()


def numpy_sum(model):
    total = 0
    for w in _weights(model):
        b = w.reshape(-1).view(np.uint8)
        b = b[: b.size // 4 * 4].view(np.uint32)
        total += int(b.sum(dtype=np.uint64))
    return total


METHODS = {"read": read, "crc32": crc32, "adler32": adler32, "blake2b": blake2b, "sum": numpy_sum}


def big_model():
    import keras

    inputs = keras.Input((784,))
    x = keras.layers.Dense(2048, activation="relu")(inputs)
    x = keras.layers.Dense(2048, activation="relu")(x)
    outputs = keras.layers.Dense(10, activation="softmax")(x)
    model = keras.Model(inputs, outputs)
    model.compile("sgd", "sparse_categorical_crossentropy")
    return model


def timed(fn, model, repeat):
    fn(model)  # warm
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(model)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def notices(model, fn):
    """(one fit step changes it, swapping two rows of the first kernel changes it)"""
    before = fn(model)
    weights = model.get_weights()
    x = np.random.default_rng(0).normal(size=(8, *model.input_shape[1:])).astype("float32")
    model.fit(x, np.zeros(8, "int64"), epochs=1, verbose=0)
    after_fit = fn(model)
    model.set_weights(weights)
    swapped = [w.copy() for w in weights]
    k = swapped[0].reshape(-1, swapped[0].shape[-1])
    k[[0, 1]] = k[[1, 0]]
    model.set_weights(swapped)
    after_swap = fn(model)
    model.set_weights(weights)
    return after_fit != before, after_swap != before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    import keras

    models = {
        "example digits_cnn": keras.saving.load_model(ROOT / "example_project" / "models" / "digits_cnn.keras"),
        "dense 5.8M": big_model(),
    }
    for name, model in models.items():
        params = model.count_params()
        times = {m: timed(fn, model, args.repeat) for m, fn in METHODS.items()}
        print(f"{name}: {params:,} parameters, {len(model.weights)} weights, median of {args.repeat}")
        for m, t in times.items():
            fit, swap = notices(model, METHODS[m]) if m != "read" else ("-", "-")
            print(
                f"  {m:8s} {t * 1e3:8.2f} ms  x{t / times['read']:5.2f} of read   notices fit: {fit!s:5s} swap: {swap}"
            )


if __name__ == "__main__":
    main()
