"""``sadl estimate`` validated where the truth is known: the example project's groups as
unlabelled pools, the model's accuracy on each estimated from a few labels over many seeds.

For each pool (the example project's held-out split and its FGSM, BIM and transformed
versions, as its test groups make them, and all of them together), each labelling method
of :mod:`pytest_sadl.criteria.estimate` chooses ``budget`` inputs with seeds 0..N-1, the
estimate is made from their true labels, and its error against the pool's true accuracy
is averaged: the mean absolute error (MAE), and how often the 95% interval held the truth.
The claim under test (Kim et al. ESEC/FSE 2020, Li et al. ESEC/FSE 2019): the same error as
simple random sampling with about half the labels, i.e. a method at budget 50 about as
good as random at budget 100.

Methods: ``random``; ``stratified`` by LSA (ten strata of equal size, proportional
allocation) and, for comparison, by MSP (``1 - max softmax``, Hendrycks and Gimpel's
baseline); ``ces`` (Li et al.: cross-entropy over the SA layer's neuron sections).

Run from the repository root (a few minutes on two cores)::

    python benchmarks/estimate.py [--seeds 100] [--budgets 50,100]

Not part of the test suite: it prints the table; docs/ood.md records what it showed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "example_project"
sys.path[:0] = [str(ROOT), str(EXAMPLE)]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

METHODS = (("random", None), ("stratified", "lsa"), ("stratified", "msp"), ("ces", None))


def _pools(model: Any, x: np.ndarray, y: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The example project's groups, made as its tests make them."""
    import attacks

    fgsm = [attacks.fgsm(model, x, y, eps) for eps in (0.1, 0.2, 0.3)]
    bim = [attacks.bim(model, x, y, eps, steps=10) for eps in (0.1, 0.2)]
    transforms = [
        attacks.gaussian_noise(x, 0.05, seed=1),
        attacks.gaussian_noise(x, 0.1, seed=2),
        attacks.gaussian_noise(x, 0.2, seed=3),
        attacks.contrast(x, 0.5),
        attacks.contrast(x, 2.0),
        attacks.rotate(x, 10),
        attacks.rotate(x, -20),
        attacks.shift(x, 1, 0),
    ]
    pools = {
        "test": (x, y),
        "fgsm": (np.concatenate(fgsm), np.tile(y, 3)),
        "bim": (np.concatenate(bim), np.tile(y, 2)),
        "transform": (np.concatenate(transforms), np.tile(y, len(transforms))),
    }
    pools["all"] = (np.concatenate([p[0] for p in pools.values()]), np.concatenate([p[1] for p in pools.values()]))
    return pools


def _trials(
    method: str, by: str | None, budget: int, seeds: int, sa: np.ndarray, scores: dict[str, np.ndarray], ok: np.ndarray
) -> tuple[float, float]:
    """(mean absolute error, interval coverage) over ``seeds`` plans."""
    from pytest_sadl.criteria.estimate import choose, estimate

    truth = ok.mean()
    errors, covered = [], []
    for seed in range(seeds):
        plan = choose(method, budget, n=len(ok), seed=seed, scores=None if by is None else scores[by], features=sa)
        got = estimate(plan, ok[plan.indices])
        errors.append(abs(got.accuracy - truth))
        covered.append(got.low <= truth <= got.high)
    return float(np.mean(errors)), float(np.mean(covered))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=100, help="plans per cell (default %(default)s)")
    parser.add_argument("--budgets", default="50,100", help="labels per plan, comma separated (default %(default)s)")
    args = parser.parse_args(argv)
    budgets = [int(b) for b in args.budgets.split(",")]

    import keras

    from pytest_sadl.engine import ProfileView
    from pytest_sadl.profile.build import ProfileOptions
    from pytest_sadl.profile.lookup import load_or_build

    started = time.perf_counter()
    model = keras.models.load_model(EXAMPLE / "models" / "digits_cnn.keras")
    with np.load(EXAMPLE / "data" / "train.npz") as d:
        x_train = d["x"].astype(np.float32)
    with np.load(EXAMPLE / "data" / "test.npz") as d:
        x_test, y_test = d["x"].astype(np.float32), d["y"].astype(np.int64)
    with tempfile.TemporaryDirectory(prefix="sadl-estimate-") as cache:
        profile = load_or_build(model, x_train, ProfileOptions(sa_layers=("dense_hidden",)), Path(cache))
        tm = profile.trace_model(model)
        view = ProfileView.of(profile, ["lsc"])
        rows = []
        for name, (x, y) in _pools(model, x_test, y_test).items():
            traces = tm.traces(x)
            sa, pred = np.asarray(traces.sa, dtype=np.float64), np.asarray(traces.pred)
            scores = {"lsa": view.score(sa, pred)["lsa"], "msp": 1.0 - np.asarray(traces.output).max(axis=1)}
            ok = pred == y
            for method, by in METHODS:
                cells = [_trials(method, by, b, args.seeds, sa, scores, ok) for b in budgets if b <= len(ok)]
                rows.append((name, len(ok), ok.mean(), method + (f" by {by.upper()}" if by else ""), cells))
    head = "".join(f"  MAE@{b:<4} cover@{b:<4}" for b in budgets)
    print(f"{args.seeds} seeds per cell; MAE: mean |estimate - true accuracy|, in points; cover: 95% interval")
    print(f"{'pool':<10} {'inputs':>6} {'accuracy':>8}  {'method':<16}{head}")
    for name, n, acc, label, cells in rows:
        values = "".join(f"  {mae * 100:8.2f} {cov * 100:9.0f}%" for mae, cov in cells)
        print(f"{name:<10} {n:>6} {acc * 100:7.1f}%  {label:<16}{values}")
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
