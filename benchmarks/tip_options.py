"""dnn-tip's options in pytest-sadl beside dnn-tip itself (issue 36), on the same traces.

dnn-tip 0.1.1 (Weiss and Tonella, ISSTA 2022; ``pip install dnn-tip``, imported as it is)
against pytest-sadl's options of the same name:

* NBC and SNAC with ``scaler`` S (``--sadl-nbc-std``, ``--sadl-snac-std``): the fraction
  of corners covered;
* LSA with ``max_features`` M (``--sadl-lsa-max-features``), per class as dnn-tip's
  ``MultiModalSA.build_by_class`` sets LSA up;
* DSA with ``subsampling`` N and ``subsampling_seed`` (``--sadl-dsa-subsample``,
  ``--sadl-dsa-seed``);
* MMDSA with the modes chosen by the silhouette score among 2..K
  (``--sadl-mmdsa-silhouette``): dnn-tip's ``build_with_kmeans(potential_k=range(2, K+1))``
  per class, its ``KMeans`` seeded (``random_state=0``, as ours) so that both cluster the
  same way; dnn-tip's MDSA is the squared distance under the ddof=0 covariance, so ours is
  compared squared times ``n_m / (n_m - 1)`` (see docs/metrics.md).

The traces: ``benchmarks/peers_surprise.py``'s digits MLP, its 32-neuron hidden layer
(1,200 training traces, 1,194 test traces, half of them noisy). Prints the largest
difference of each, and for MMDSA the modes each tool chose per class.

    python benchmarks/tip_options.py      # about a minute
"""

from __future__ import annotations

import contextlib
import functools
import io
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def quiet() -> Any:
    """dnn-tip's prints, progress bars and warnings silenced."""
    stack = contextlib.ExitStack()
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    return stack


def line(name: str, ours: np.ndarray, theirs: np.ndarray, note: str = "") -> None:
    ours, theirs = np.atleast_1d(ours).astype(float), np.atleast_1d(theirs).astype(float)
    both = np.isfinite(ours) & np.isfinite(theirs)
    diff = np.abs(ours[both] - theirs[both])
    rel = diff / np.maximum(np.abs(theirs[both]), 1e-12)
    left = int((~both).sum())
    print(
        f"{name:<30} max |diff| {diff.max(initial=0):9.2e}  max rel {rel.max(initial=0):9.2e}  "
        f"({both.sum()} values{f', {left} not finite in one tool' if left else ''}) {note}"
    )


def corners(tip: Any, train: np.ndarray, tests: np.ndarray) -> None:
    from pytest_sadl.criteria.neurons import fit_ranges, nbc, snac

    ranges = fit_ranges([train])
    mins, maxs, stds = [train.min(axis=0)], [train.max(axis=0)], [train.std(axis=0)]
    dead = int((train.std(axis=0) == 0).sum())
    for s in (0.0, 0.5, 1.0):
        theirs_nbc = tip.NBC(mins, maxs, stds, s)
        _, prof = theirs_nbc([tests])
        line(f"NBC scaler {s}", nbc([tests], ranges, s), prof.reshape(len(tests), -1).any(axis=0).mean())
        low, high = ranges.widened(0, s)
        bounds = np.concatenate([low - theirs_nbc.min_boundaries, high - theirs_nbc.max_boundaries])
        line("  its boundaries", np.abs(bounds), np.zeros_like(bounds))
        strict = np.concatenate([tests < theirs_nbc.min_boundaries, tests > theirs_nbc.max_boundaries], axis=1)
        line("  its boundaries, strict", nbc([tests], ranges, s), strict.any(axis=0).mean())
        _, prof = tip.SNAC(maxs, stds, s)([tests])
        line(f"SNAC scaler {s}", snac([tests], ranges, s), prof.any(axis=0).mean())
    print(
        f"{'':<30} dnn-tip's corners are >= / <=, ours strict (DeepGauge's): a test value equal to a boundary "
        f"counts for dnn-tip only; here {dead} of {train.shape[1]} neurons never fire in training (std 0, "
        "low = high = 0), so every test value 0 covers both their corners in dnn-tip, whatever the scaler"
    )


def lsa(surprise: Any, train: np.ndarray, pred: np.ndarray, tests: np.ndarray, tests_pred: np.ndarray) -> None:
    from pytest_sadl.criteria.surprise import LSA

    for m in (5, 10):
        with quiet():
            ours = LSA(train, pred, max_features=m)(tests, tests_pred)
            sa = surprise.MultiModalSA.build_by_class(
                train, pred, lambda a, _p, m=m: surprise.LSA(a, var_threshold=None, max_features=m)
            )
            theirs = sa(tests, tests_pred)
        line(f"LSA max_features {m}", ours, theirs, "(dnn-tip: -log of the density, inf where it underflows)")


def dsa(surprise: Any, train: np.ndarray, pred: np.ndarray, tests: np.ndarray, tests_pred: np.ndarray) -> None:
    from pytest_sadl.config import SadlOptions
    from pytest_sadl.criteria.metrics.dsc import fit
    from pytest_sadl.criteria.shape import Training

    for size, seed in ((300, 0), (300, 1), (600, 0), (5000, 0)):
        options = SadlOptions(extra={"dsa_subsample": size, "dsa_seed": seed})
        ours = fit(Training(train, pred, options=options))(tests, tests_pred)
        with quiet():
            theirs = surprise.DSA(train, pred, subsampling=size, subsampling_seed=seed)(tests, tests_pred)
        line(f"DSA subsampling {size}, seed {seed}", ours, theirs)


def mmdsa(surprise: Any, train: np.ndarray, pred: np.ndarray, tests: np.ndarray, tests_pred: np.ndarray) -> None:
    from sklearn.cluster import KMeans

    from pytest_sadl.criteria.mixture import one_thread
    from pytest_sadl.criteria.modes import MMDSA

    for most in (3, 5):
        with quiet():
            model = MMDSA(train, pred, silhouette=most)
            ours = model(tests, tests_pred)
        a, b = train[:, model.kept], tests[:, model.kept]
        chosen: dict[int, int] = {}

        def per_class(x: np.ndarray, p: Any, most: int = most, chosen: dict[int, int] = chosen) -> Any:
            sa = surprise.MultiModalSA.build_with_kmeans(
                x, None, lambda z, _q: surprise.MDSA(z), potential_k=range(2, most + 1)
            )
            chosen[len(chosen)] = sa.discriminator.best_k
            return sa

        original = surprise.KMeans
        surprise.KMeans = functools.partial(KMeans, random_state=0)  # seeded, as ours
        try:
            with quiet(), one_thread():
                sa = surprise.MultiModalSA.build_by_class(a, pred, per_class)
                theirs = sa(b, tests_pred, num_threads=2 * len(np.unique(pred)))
        finally:
            surprise.KMeans = original
        n_m = model.mode_sizes[model.mode_of(tests, tests_pred)]
        line(f"MMDSA silhouette 2..{most}", ours**2 * n_m / (n_m - 1), theirs, "(ours squared, ddof 0)")
        mine = [km.n_clusters for _, (km, _) in sorted(model.kmeans.items())]
        print(f"{'':<30} modes per class: pytest-sadl {mine}, dnn-tip {[chosen[i] for i in sorted(chosen)]}")


def main() -> None:
    import dnn_tip
    from dnn_tip import neuron_coverage, surprise
    from peers_surprise import traces

    train, pred, tests, tests_pred, _ = traces()
    print(f"dnn-tip {getattr(dnn_tip, '__version__', '0.1.1')} beside pytest-sadl; digits MLP hidden layer")
    print(f"{len(train)} training traces x {train.shape[1]} neurons, {len(tests)} test traces\n")
    corners(neuron_coverage, train, tests)
    lsa(surprise, train, pred, tests, tests_pred)
    dsa(surprise, train, pred, tests, tests_pred)
    mmdsa(surprise, train, pred, tests, tests_pred)


if __name__ == "__main__":
    main()
