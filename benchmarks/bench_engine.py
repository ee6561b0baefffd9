"""Speed and memory of the SA engine, side by side with the paper's reference method.

The reference method is written here, as the paper's reference code does it: a Python
loop over inputs, nearest neighbours by ``np.linalg.norm`` per input (DSA) and
``gaussian_kde.logpdf`` per input (LSA). SciPy's vectorised ``logpdf`` per class is timed
too. Traces are synthetic, shaped like MNIST: 60,000 training traces in 10 classes,
10,000 new inputs, at 10 and 128 dimensions.

The per-input loops are timed on ``--loop-inputs`` inputs (1,000 by default: the full
10,000 at 128 dimensions take minutes) and their time per input is scaled to the whole
set; the fast engine is always timed on all inputs. Values are compared on every input
the loop scored.

    python benchmarks/bench_engine.py            # the issue's sizes
    python benchmarks/bench_engine.py --quick    # a smaller smoke run
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
import warnings

import numpy as np
import scipy.stats

from pytest_sadl.surprise import DSA, LSA, SadlWarning


def traces(rng, n, d, classes, spread, centres=None):
    """Traces clustered by class around ``centres`` (new ones when not given)."""
    if centres is None:
        centres = rng.normal(scale=3.0, size=(classes, d))
    pred = rng.integers(0, classes, n)
    return centres[pred] + rng.normal(scale=spread, size=(n, d)), pred


def clock(fn, *args):
    gc.collect()
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def rel_diff(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-12)))


def loop_dsa(train, tp, tests, pred):
    out = np.empty(len(tests))
    for i, (x, c) in enumerate(zip(tests, pred)):
        same, other = train[tp == c], train[tp != c]
        d_same = np.linalg.norm(same - x, axis=1)
        x_a = same[np.argmin(d_same)]
        out[i] = d_same.min() / np.linalg.norm(other - x_a, axis=1).min()
    return out


def loop_lsa(kdes, tests, pred):
    return np.array([-kdes[c].logpdf(x[:, None])[0] for x, c in zip(tests, pred)])


def vector_lsa(kdes, tests, pred):
    out = np.empty(len(tests))
    for c, kde in kdes.items():
        m = pred == c
        out[m] = -kde.logpdf(tests[m].T)
    return out


def peak_mib(fn):
    gc.collect()
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def check(ok):
    return "met" if ok else "MISSED"


def bench(d, args, rng):
    centres = rng.normal(scale=3.0, size=(args.classes, d))
    train, tp = traces(rng, args.n_train, d, args.classes, 1.0, centres)
    tests, pred = traces(rng, args.n_test, d, args.classes, 1.3, centres)  # new inputs, a little wider
    sub = slice(0, args.loop_inputs)
    scale = args.n_test / args.loop_inputs
    print(f"\n== {d} dimensions: {args.n_train} training traces, {args.classes} classes, {args.n_test} new inputs ==")

    # DSA ------------------------------------------------------------------
    t_loop, ref = clock(loop_dsa, train, tp, tests[sub], pred[sub])
    t_loop *= scale
    t_init, dsa = clock(DSA, train, tp)
    t_first, got = clock(dsa, tests, pred)
    t_score, again = clock(dsa, tests, pred)  # every dist_b needed is known now, as from a cached profile
    t_setup = t_init + t_first - t_score
    assert np.array_equal(got, again)
    diff = rel_diff(got[sub], ref)
    print(f"DSA  per-input loop          {t_loop:9.2f} s   ({args.loop_inputs} inputs timed, scaled)")
    print(f"DSA  set-up (dist_b of x_a)  {t_setup:9.2f} s")
    print(f"DSA  scoring                 {t_score:9.2f} s")
    r1, r2 = t_loop / t_score, t_loop / (t_setup + t_score)
    print(f"DSA  scoring speed-up        {r1:9.1f} x   (target >= 100x: {check(r1 >= 100)})")
    print(f"DSA  set-up+scoring speed-up {r2:9.1f} x   (target >= 20x: {check(r2 >= 20)})")
    print(f"DSA  largest relative diff   {diff:9.2e}     (target < 1e-6: {check(diff < 1e-6)})")
    mem = peak_mib(lambda: DSA(train, tp)(tests, pred))
    print(
        f"DSA  extra peak memory       {mem:9.1f} MiB (target < 1024 MiB: {check(mem < 1024)}; "
        f"an n_test x n_train matrix would be {args.n_test * args.n_train * 8 / 2**20:.0f} MiB)"
    )

    # LSA ------------------------------------------------------------------
    kdes = {c: scipy.stats.gaussian_kde(train[tp == c].T) for c in range(args.classes)}
    t_loop, ref_loop = clock(loop_lsa, kdes, tests[sub], pred[sub])
    t_loop *= scale
    t_vec, ref = clock(vector_lsa, kdes, tests, pred)
    t_init, lsa = clock(LSA, train, tp)
    t_score, got = clock(lsa, tests, pred)
    assert lsa.kept.size == d
    diff = max(rel_diff(got, ref), rel_diff(got[sub], ref_loop))
    r1, r2 = t_loop / t_score, t_vec / t_score
    target = 1.0 if d <= 10 else 3.0
    print(f"LSA  per-input logpdf        {t_loop:9.2f} s   ({args.loop_inputs} inputs timed, scaled)")
    print(f"LSA  scipy vectorised logpdf {t_vec:9.2f} s")
    print(f"LSA  set-up                  {t_init:9.2f} s")
    print(f"LSA  scoring                 {t_score:9.2f} s")
    print(f"LSA  vs per-input logpdf     {r1:9.1f} x   (target >= 10x: {check(r1 >= 10)})")
    print(f"LSA  vs vectorised logpdf    {r2:9.1f} x   (target >= {target:g}x: {check(r2 >= target)})")
    print(f"LSA  largest relative diff   {diff:9.2e}     (target < 1e-6: {check(diff < 1e-6)})")


def near_singular(args, rng):
    """Covariances that are singular up to rounding (softmax rows sum to one) or close to it."""
    print("\n== near-singular covariances (10 neurons, 20,000 training traces, 2,000 inputs) ==")
    centres = rng.normal(scale=3.0, size=(10, 10))
    logits, tp = traces(rng, min(args.n_train, 20000), 10, 10, 1.0, centres)
    probs = np.exp(logits / 3) / np.exp(logits / 3).sum(axis=1, keepdims=True)
    tests, pred = traces(rng, 2000, 10, 10, 1.3, centres)
    tests = np.exp(tests / 3) / np.exp(tests / 3).sum(axis=1, keepdims=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SadlWarning)
        lsa = LSA(probs, tp, var_threshold=0.0)
    got = lsa(tests, pred)
    kept = lsa.kept
    ref = vector_lsa({c: scipy.stats.gaussian_kde(probs[tp == c][:, kept].T) for c in lsa.classes}, tests[:, kept], pred)
    print(f"softmax outputs: kept {kept.size} of 10 neurons after {len(caught)} warning(s) (dependent neuron dropped);")
    print(f"  largest relative diff from scipy on the kept neurons {rel_diff(got, ref):.2e}")
    try:
        vector_lsa({c: scipy.stats.gaussian_kde(probs[tp == c].T) for c in range(10)}, tests, pred)
        print("  scipy on all 10 neurons: accepted the singular covariance (values dominated by rounding)")
    except np.linalg.LinAlgError:
        print("  scipy on all 10 neurons: fails (singular covariance)")
    centres = rng.normal(scale=3.0, size=(10, 9))
    base, tp = traces(rng, 20000, 9, 10, 1.0, centres)
    tests9, pred9 = traces(rng, 2000, 9, 10, 1.3, centres)
    for noise in (1e-2, 1e-3, 1e-4):
        train = np.hstack([base, base.sum(axis=1, keepdims=True) + rng.normal(scale=noise, size=(20000, 1))])
        x = np.hstack([tests9, tests9.sum(axis=1, keepdims=True) + rng.normal(scale=noise, size=(2000, 1))])
        cond = np.linalg.cond(np.cov(train[tp == 0].T))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SadlWarning)
            lsa = LSA(train, tp)
        got = lsa(x, pred9)
        if lsa.kept.size < 10:
            print(f"a neuron = sum of 9 others + noise {noise:g} (condition {cond:.1e}): treated as singular, dropped")
            continue
        ref = vector_lsa({c: scipy.stats.gaussian_kde(train[tp == c].T) for c in range(10)}, x, pred9)
        print(
            f"a neuron = sum of 9 others + noise {noise:g} (condition {cond:.1e}): "
            f"largest relative diff from scipy {rel_diff(got, ref):.2e}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-train", type=int, default=60000)
    parser.add_argument("--n-test", type=int, default=10000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--dims", type=int, nargs="+", default=[10, 128])
    parser.add_argument("--loop-inputs", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="6,000 training traces, 1,000 inputs, 200 looped")
    args = parser.parse_args()
    if args.quick:
        args.n_train, args.n_test, args.loop_inputs = 6000, 1000, 200
    args.loop_inputs = min(args.loop_inputs, args.n_test)
    rng = np.random.default_rng(2019)
    for d in args.dims:
        bench(d, args, rng)
    near_singular(args, rng)


if __name__ == "__main__":
    main()
