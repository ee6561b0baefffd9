"""pytest-sadl's MLSA, MMDSA, CTM, CAM and APFD beside dnn-tip's on the same traces.

``benchmarks/peers.py`` runs this beside every other peer in one run (its traces and
model come from here).

dnn-tip (Weiss and Tonella, ISSTA 2022) is not a dependency and is not fetched here: give
a checkout of https://github.com/testingautomated-usi/dnn-tip with ``--repo`` (its
``dnn_tip`` package is imported as it is, with stand-ins for ``psutil`` and ``tqdm`` when
they are not installed: only its DSA's memory warning and progress bars use them).

The traces: scikit-learn's bundled digits, a small MLP (64 -> 32 ReLU -> 10) trained on
1,200 of them (seeded); the hidden layer's outputs, with the predicted classes, of the
training images and of the 597 others plus a noisy copy of each (so that some inputs are
misclassified: the faults APFD counts). dnn-tip gets the neurons pytest-sadl keeps after
its variance filter, and its per-class forms (``MultiModalSA.build_by_class``); its
scikit-learn fits are unseeded, so NumPy's global generator is seeded before each class's
fit with the seed pytest-sadl passes as ``random_state`` (the same random stream).
dnn-tip's MDSA is the squared Mahalanobis distance under the maximum-likelihood
covariance: its MMDSA is compared with ours squared times ``n_m / (n_m - 1)``.

Prints, for each measure, the largest difference between the two tools' scores, and the
time each took (set-up plus scoring, the minimum of ``--reps`` runs, side by side in this
run); for CTM and CAM whether the orders agree (exactly, and up to dnn-tip's unstable sort
of ties), and the APFD of each order by both tools.

    python benchmarks/peers_surprise.py --repo /path/to/dnn-tip
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
import time
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np


@contextlib.contextmanager
def stand_ins() -> Iterator[None]:
    """``psutil`` and ``tqdm`` stand-ins while dnn-tip is imported, where they are missing."""
    made = []
    for name, attrs in (("psutil", {}), ("tqdm", {"tqdm": lambda it, **_: it})):
        try:
            importlib.import_module(name)
        except ImportError:
            module = types.ModuleType(name)
            module.__dict__.update(attrs)
            sys.modules[name] = module
            made.append(name)
    try:
        yield
    finally:
        for name in made:
            del sys.modules[name]


def load_dnn_tip(repo: Path) -> tuple[Any, Any, Any]:
    """dnn-tip's ``surprise``, ``prioritizers`` and ``apfd`` modules from a checkout."""
    sys.path.insert(0, str(repo))
    try:
        with stand_ins():
            return tuple(importlib.import_module(f"dnn_tip.{m}") for m in ("surprise", "prioritizers", "apfd"))  # type: ignore[return-value]
    finally:
        sys.path.remove(str(repo))


def traces(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train traces, train predictions, test traces, test predictions, test faults)."""
    from sklearn.datasets import load_digits
    from sklearn.neural_network import MLPClassifier

    x, y = load_digits(return_X_y=True)
    x = x / 16.0
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlp = MLPClassifier(hidden_layer_sizes=(32,), max_iter=300, random_state=seed).fit(x[:1200], y[:1200])
    noisy = np.clip(x[1200:] + np.random.default_rng(seed + 1).normal(scale=0.35, size=x[1200:].shape), 0, 1)
    x_test, y_test = np.vstack([x[1200:], noisy]), np.concatenate([y[1200:], y[1200:]])
    # shuffled: CTM and CAM break ties by pool index, dnn-tip by its unstable sort; a pool
    # with all noisy inputs last would make that tie rule decide APFD
    mix = np.random.default_rng(seed + 2).permutation(len(x_test))
    x_test, y_test = x_test[mix], y_test[mix]

    def hidden(a: np.ndarray) -> np.ndarray:
        return np.maximum(a @ mlp.coefs_[0] + mlp.intercepts_[0], 0.0)

    return hidden(x[:1200]), mlp.predict(x[:1200]), hidden(x_test), mlp.predict(x_test), mlp.predict(x_test) != y_test


def timed(fn: Callable[[], Any], reps: int) -> tuple[Any, float]:
    best, out = float("inf"), None
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return out, best


def seeded(seed: int, build: Callable[..., Any]) -> Callable[..., Any]:
    """dnn-tip's per-class constructor, NumPy's global generator seeded before each class's fit."""

    def make(a: np.ndarray, p: Any) -> Any:
        np.random.seed(seed)
        return build(a, p)

    return make


def row(name: str, ours: np.ndarray, theirs: np.ndarray, t_ours: float, t_theirs: float, note: str = "") -> None:
    diff = np.abs(ours - theirs)
    rel = diff / np.maximum(np.abs(theirs), 1e-12)
    print(
        f"{name:<18} max |diff| {diff.max():9.2e}  max rel {rel.max():9.2e}   "
        f"pytest-sadl {t_ours * 1e3:8.1f} ms   dnn-tip {t_theirs * 1e3:8.1f} ms   ratio {t_theirs / t_ours:5.2f}x {note}"
    )


def surprise_rows(tip: Any, data: tuple[np.ndarray, ...], reps: int) -> None:
    from pytest_sadl.criteria.mixture import MLSA, one_thread
    from pytest_sadl.criteria.modes import MMDSA

    train, train_pred, test, test_pred, _ = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in (2, 3):
            ours, t_ours = timed(lambda k=k: MLSA(train, train_pred, components=k)(test, test_pred), reps)
            kept = MLSA(train, train_pred, components=k).kept
            a, b = train[:, kept], test[:, kept]

            def theirs_mlsa(k: int = k, a: np.ndarray = a, b: np.ndarray = b) -> np.ndarray:
                with one_thread():
                    sa = tip.MultiModalSA.build_by_class(a, train_pred, seeded(0, lambda x, _p: tip.MLSA(x, k)))
                    return sa(b, test_pred)

            theirs, t_theirs = timed(theirs_mlsa, reps)
            row(f"MLSA k={k}", ours, theirs, t_ours, t_theirs)
        for m in (2, 3):
            model = MMDSA(train, train_pred, modes=m)
            ours, t_ours = timed(lambda m=m: MMDSA(train, train_pred, modes=m)(test, test_pred), reps)
            a, b = train[:, model.kept], test[:, model.kept]

            def theirs_mmdsa(m: int = m, a: np.ndarray = a, b: np.ndarray = b) -> np.ndarray:
                def per_class(x: np.ndarray, _p: Any) -> Any:
                    return tip.MultiModalSA.build_with_kmeans(x, None, lambda z, _q: tip.MDSA(z), potential_k=[m])

                with one_thread():
                    sa = tip.MultiModalSA.build_by_class(a, train_pred, seeded(0, per_class))
                    # nested modes need a thread each (num_threads=1 leaves the inner ones 0 workers)
                    return sa(b, test_pred, num_threads=2 * len(np.unique(train_pred)))

            theirs, t_theirs = timed(theirs_mmdsa, reps)
            # dnn-tip's MDSA is sklearn's EmpiricalCovariance.mahalanobis: the *squared* distance, under
            # the maximum-likelihood covariance (ddof=0): ours squared times n_m / (n_m - 1)
            n_m = model.mode_sizes[model.mode_of(test, test_pred)]
            row(f"MMDSA modes={m}", ours**2 * n_m / (n_m - 1), theirs, t_ours, t_theirs, "(ours squared, ddof 0)")


def prioritiser_rows(tip: Any, prio: Any, apfd_mod: Any, data: tuple[np.ndarray, ...], reps: int) -> None:
    from pytest_sadl.criteria.mahalanobis import MDSA
    from pytest_sadl.criteria.neurons import KMultisectionCoverage, fit_ranges
    from pytest_sadl.criteria.prioritise import apfd, prioritise
    from pytest_sadl.criteria.shape import Batch, Setup
    from pytest_sadl.criteria.surprise import bucket_edges, bucket_index

    train, train_pred, test, test_pred, faults = data
    mdsa = MDSA(train, train_pred)(test, test_pred)
    bounds = (0.0, float(np.quantile(mdsa, 0.99)) * 1.2, 50)
    ranges = fit_ranges([train])
    options = types.SimpleNamespace(nc_threshold=0.5, kmnc_k=10)
    setup = Setup(ranges, options, bounds={"mdsc": bounds})
    batch = Batch({"mdsa": mdsa}, [test], [None])
    n = len(test)
    # the same targets as dense profiles for dnn-tip: MDSC's buckets, KMNC's sections
    idx = bucket_index(mdsa, bucket_edges(*bounds))
    sc_profile = np.zeros((n, bounds[2]), dtype=bool)
    inside = (idx >= 0) & (idx < bounds[2])
    sc_profile[np.flatnonzero(inside), idx[inside]] = True
    km = KMultisectionCoverage(ranges, options.kmnc_k)
    sections = km.sections(0, test)
    km_profile = np.zeros((n, test.shape[1], options.kmnc_k), dtype=bool)
    rows, cols = np.nonzero(sections >= 0)
    km_profile[rows, cols, sections[rows, cols]] = True
    km_profile = km_profile[:, km._valid(0)].reshape(n, -1)
    for name, profile in (("mdsc", sc_profile), ("kmnc", km_profile)):
        counts = profile.sum(axis=1)
        for strategy in ("ctm", "cam"):
            (ours, _), t_ours = timed(lambda s=strategy, m=name: prioritise(s, m, setup, batch), reps)
            if strategy == "ctm":
                theirs, t_theirs = timed(lambda c=counts: np.array(list(prio.ctm(c.astype(float)))), reps)
            else:
                theirs, t_theirs = timed(
                    lambda p=profile, c=counts: np.array(list(prio.cam(c.astype(float), p.copy()))), reps
                )
            same = np.array_equal(ours, theirs)
            # up to ties: the same count at every position (dnn-tip's argsort is not stable)
            if strategy == "ctm":
                tie_same = np.array_equal(counts[ours], counts[theirs])
            else:
                greedy = _greedy_len(profile, ours)
                tie_same = np.array_equal(ours[:greedy], theirs[:greedy]) and np.array_equal(
                    counts[ours[greedy:]], counts[theirs[greedy:]]
                )
            a_ours, a_theirs = apfd(ours, faults), apfd_mod.apfd_from_order(faults, theirs)
            a_cross = apfd_mod.apfd_from_order(faults, ours)
            print(
                f"{strategy.upper()} by {name.upper():<5} orders equal: {same!s:<5} up to ties: {tie_same!s:<5} "
                f"APFD ours {a_ours:.4f} (dnn-tip on our order {a_cross:.4f}) theirs {a_theirs:.4f}   "
                f"pytest-sadl {t_ours * 1e3:8.1f} ms   dnn-tip {t_theirs * 1e3:8.1f} ms (on a ready profile)"
            )


def _greedy_len(profile: np.ndarray, order: np.ndarray) -> int:
    """How many leading picks of ``order`` each add a target (the greedy part of CAM)."""
    covered = np.zeros(profile.shape[1], dtype=bool)
    for j, i in enumerate(order):
        new = profile[i] & ~covered
        if not new.any():
            return j
        covered |= new
    return len(order)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True, help="a checkout of dnn-tip")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    surprise, prio, apfd_mod = load_dnn_tip(args.repo)
    data = traces()
    print(
        f"digits MLP hidden layer: {len(data[0])} training traces, {len(data[2])} test traces "
        f"({int(data[4].sum())} misclassified), {data[0].shape[1]} neurons"
    )
    surprise_rows(surprise, data, args.reps)
    prioritiser_rows(surprise, prio, apfd_mod, data, args.reps)


if __name__ == "__main__":
    main()
