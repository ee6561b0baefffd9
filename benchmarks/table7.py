"""The paper's Table VII (RQ4) on the example project: does sampling retraining inputs from
wider surprise ranges make retraining work better against adversarial inputs?

Kim, Feldt and Yoo (ICSE 2019), section IV-D: for U the upper bound of surprise coverage,
sample 100 adversarial inputs from each of the widening SA ranges [0, U/4], [0, 2U/4],
[0, 3U/4] and [0, U], retrain the model on them for a few additional epochs, and measure
its accuracy on the adversarial inputs; repeat with several seeds and report the mean and
standard deviation. Here, on the example project's digits ConvNet:

* adversarial pools: FGSM (eps 0.2) and BIM (eps 0.1) of the training split, the inputs
  ranges are sampled from (with their true labels);
* evaluation: the same attack on the held-out split, never sampled from (the paper
  evaluated on the whole adversarial set, samples included; we keep them apart);
* SA: LSA and DSA of the model's ``dense_hidden`` layer from its training profile; U and
  the lower bound are the default SC bounds a pytest-sadl run uses (held-out training
  traces), and the sampling is :func:`pytest_sadl.criteria.selection.select` with
  ``strategy="ranges"``;
* retraining: a fresh copy of the model, Adam(1e-3), the 100 inputs for ``--epochs``
  epochs (5, as in the paper), batch size 32; R = "-" is the model before retraining.

Run from the repository root (takes a few minutes on two cores)::

    python benchmarks/table7.py [--seeds 5] [--epochs 5] [--n 100]

Not part of the test suite: it prints the table; docs/table7.md records what it showed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "example_project"
sys.path[:0] = [str(ROOT), str(EXAMPLE)]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

RANGES = (0.25, 0.5, 0.75, 1.0)
ATTACKS = (("FGSM", "fgsm", 0.2), ("BIM", "bim", 0.1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="repetitions per cell (default %(default)s)")
    parser.add_argument("--epochs", type=int, default=5, help="retraining epochs (default %(default)s)")
    parser.add_argument("--n", type=int, default=100, help="inputs sampled per retraining (default %(default)s)")
    args = parser.parse_args(argv)

    import attacks
    import keras
    import train_model

    from pytest_sadl.criteria.selection import select
    from pytest_sadl.engine import ProfileView, default_sc_bounds
    from pytest_sadl.profile.build import ProfileOptions
    from pytest_sadl.profile.lookup import load_or_build

    start = time.monotonic()
    model = keras.models.load_model(train_model.MODEL_PATH)
    with np.load(train_model.TRAIN_PATH) as f:
        x_train, y_train = f["x"].astype(np.float32), f["y"].astype(np.int64)
    with np.load(train_model.TEST_PATH) as f:
        x_test, y_test = f["x"].astype(np.float32), f["y"].astype(np.int64)
    profile = load_or_build(
        model,
        train_model.TRAIN_PATH,
        ProfileOptions(sa_layers=("dense_hidden",)),
        EXAMPLE / ".pytest_cache" / "d" / "sadl",
    )
    view = ProfileView.of(profile)
    bounds = default_sc_bounds(view)
    tm = profile.trace_model(model)

    def accuracy(m: keras.Model, x: np.ndarray, y: np.ndarray) -> float:
        return float((np.asarray(m.predict(x, verbose=0, batch_size=256)).argmax(axis=1) == y).mean())

    rows: list[tuple[str, str, str, float, float]] = []
    for name, attack, eps in ATTACKS:
        make = getattr(attacks, attack)
        pool_x = make(model, x_train, y_train, eps)
        eval_x = make(model, x_test, y_test, eps)
        traces = tm.traces(pool_x)
        scores = view.score(traces.sa.astype(np.float64), traces.pred)
        before = accuracy(model, eval_x, y_test)
        print(
            f"{name} eps={eps}: pool {len(pool_x)} inputs, held-out accuracy before retraining {before:.4f}", flush=True
        )
        for sa in ("lsa", "dsa"):
            rows.append((name, sa.upper(), "-", before, 0.0))
            for upto in RANGES:
                accs = []
                for seed in range(args.seeds):
                    chosen = select("ranges", args.n, scores=scores, by=sa, bounds=bounds, upto=upto, seed=seed)
                    keras.utils.set_random_seed(seed)
                    fresh = keras.models.clone_model(model)
                    fresh.set_weights(model.get_weights())
                    fresh.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy")
                    idx = chosen.indices
                    fresh.fit(pool_x[idx], y_train[idx], epochs=args.epochs, batch_size=32, shuffle=True, verbose=0)
                    accs.append(accuracy(fresh, eval_x, y_test))
                label = f"{int(upto * 4)}/4"
                rows.append((name, sa.upper(), label, float(np.mean(accs)), float(np.std(accs))))
                print(
                    f"  {sa.upper()} {label}: {chosen.eligible} eligible, accuracy {np.mean(accs):.4f} "
                    f"+- {np.std(accs):.4f} over {args.seeds} seeds",
                    flush=True,
                )

    print()
    print(
        f"Table VII on the example project ({args.n} inputs per retraining, {args.epochs} epochs, "
        f"{args.seeds} seeds; accuracy on the held-out adversarial inputs)"
    )
    print()
    print("| Attack | SA | R | mean | std |")
    print("|:--|:--|:-:|--:|--:|")
    for name, sa, r, mean, std in rows:
        print(f"| {name} | {sa} | {r} | {100 * mean:.2f}% | {100 * std:.2f} |")
    print()
    print("SC bounds used: " + ", ".join(f"{m.upper()} ({lo:.4g}, {up:.4g}]" for m, (lo, up, _) in bounds.items()))
    print(f"took {time.monotonic() - start:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
