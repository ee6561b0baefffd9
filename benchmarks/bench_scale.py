"""The criteria at ImageNet scale: 1,000 classes, memory-mapped float32 traces (issue 20).

Traces are class-structured and synthetic (made here, cached under ``benchmarks/.cache``
or ``$SADL_BENCH_CACHE``, never committed): ``N`` rows of ``d`` float32 neurons, each row
its class's centre plus Gaussian noise, classes drawn at random so that a class's rows
are scattered through the file as in a real training set; the inputs scored are new
rows drawn the same way. The machine's float32 matrix-product speed (``A @ B.T``) is
measured in the same run, and every DSA line says which fraction of it the search
reached for the flops an exact search needs (``2 (d + 1)`` per pair of traces compared:
every training trace of the input's class for ``dist_a``, every trace of the other
classes for each new ``x_a``'s ``dist_b``).

For each ``N x d`` the table prints, for DSA, LSA, MDSA and the neuron criteria
(``fit_ranges`` over the training set, then KMNC/NBC/SNAC of the inputs), the set-up
and scoring time, the peak of NumPy's allocations during them (tracemalloc: memory-mapped
pages are not allocations) and, for DSA, the GEMM fraction. A criterion that refuses
(a one-line error) or fails shows that instead of its times.

    python benchmarks/bench_scale.py --quick       # N = 10k, 100k; d = 64 (a few minutes)
    python benchmarks/bench_scale.py               # N = 10k, 100k, 1.28M; d = 64, 512
    python benchmarks/bench_scale.py --sizes 100000 --dims 2048 --only dsa mdsa
    python benchmarks/bench_scale.py --only classes   # DSA with 10 against 1,000 classes

``classes`` (in the default set) compares DSA scoring over the largest ``N x 64`` with 10
and with 1,000 classes: the target is within 3x.

The targets are printed at the end as ``met`` or ``MISSED``: exact DSA at 2,048 neurons
over at least 500k rows (issue 35 measured 640k, issue 20 1.28M) within 2x of the
matrix-product limit (issue 35's target; issue 20 asked for 3x): a share of at least half
of the GEMM rate, judged by CPU time, which another process's load moves far less than
wall time (both are printed, each against the better of the rates measured
just before and just after the search); 1,000 classes within 3x of 10, and no
``MemoryError`` anywhere in the table. The 1.28M x 2,048 set is 10 GiB::

    python benchmarks/bench_scale.py --sizes 1280000 --dims 2048 --inputs 2000 --max-gib 12 --only dsa
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import tracemalloc
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np

from pytest_sadl.criteria.mahalanobis import MDSA
from pytest_sadl.criteria.neurons import (
    KMultisectionCoverage,
    NeuronBoundaryCoverage,
    StrongNeuronActivationCoverage,
    fit_ranges,
)
from pytest_sadl.criteria.projection import Projected, Projection
from pytest_sadl.criteria.surprise import DSA, LSA
from pytest_sadl.errors import SadlWarning

CACHE = Path(os.environ.get("SADL_BENCH_CACHE", Path(__file__).resolve().parent / ".cache"))


# ------------------------------------------------------------------ data


def traces(n: int, d: int, classes: int, seed: int = 0, spread: float = 0.6) -> tuple[np.ndarray, np.ndarray]:
    """``(n, d)`` float32 traces, memory-mapped, and their ``(n,)`` classes: class centres
    ``N(0, 1)`` per neuron (the same centres for every seed of a ``(d, classes)``), each
    row its centre plus ``N(0, spread^2)`` noise; made in chunks, cached by every argument."""
    stem = CACHE / f"scale-{n}x{d}-k{classes}-s{seed}"
    path, pred_path = stem.with_name(stem.name + ".npy"), stem.with_name(stem.name + "-pred.npy")
    if not (path.exists() and pred_path.exists()):
        CACHE.mkdir(parents=True, exist_ok=True)
        centres = np.random.default_rng(1000 + d * 7 + classes).normal(size=(classes, d)).astype(np.float32)
        rng = np.random.default_rng(seed)
        pred = rng.integers(0, classes, n).astype(np.int64)
        tmp = path.with_suffix(".tmp.npy")
        out = np.lib.format.open_memmap(tmp, "w+", np.float32, (n, d))
        step = max(1, 2**26 // (4 * d))
        for s in range(0, n, step):
            e = min(n, s + step)
            out[s:e] = centres[pred[s:e]] + rng.normal(scale=spread, size=(e - s, d)).astype(np.float32)
        out.flush()
        del out
        os.replace(tmp, path)
        np.save(pred_path, pred)
    return np.load(path, mmap_mode="r"), np.load(pred_path)


def inputs(m: int, d: int, classes: int) -> tuple[np.ndarray, np.ndarray]:
    x, p = traces(m, d, classes, seed=99)
    return np.asarray(x, dtype=np.float64), p


# ------------------------------------------------------------------ measuring


class Rate(NamedTuple):
    """A float32 matrix-product speed: GFLOP per wall second and per CPU second (the
    process's CPU time, every thread): on a shared machine the wall rate moves with the
    other processes' load, the CPU rate much less."""

    wall: float
    cpu: float


def gemm_rate(d: int = 2048, repeats: int = 3) -> Rate:
    """This machine's float32 ``A @ B.T`` speed (best of ``repeats``), on square ``d x d``
    matrices: the limit the searches are measured against. Measured again (1024^3) before
    and after every DSA scoring, whose fraction is of the better of the two."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(d, d)).astype(np.float32)
    b = rng.normal(size=(d, d)).astype(np.float32)
    a @ b.T  # warm-up
    wall = cpu = np.inf
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        a @ b.T
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
    flops = 2.0 * d**3 / 1e9
    return Rate(flops / wall, flops / max(cpu, 1e-9))


def fraction(flops: float, seconds: float, cpu_seconds: float, before: Rate, after: Rate) -> Rate:
    """The share of the GEMM limit a search reached for ``flops``, by wall and by CPU time,
    each against the better of the rates measured just before and just after it."""
    return Rate(
        flops / 1e9 / seconds / max(before.wall, after.wall),
        flops / 1e9 / max(cpu_seconds, 1e-9) / max(before.cpu, after.cpu),
    )


#: what every run checks, filled as the sections run: (target, value, met)
TARGETS: list[tuple[str, str, bool]] = []


MEMORY_ERRORS: list[str] = []  # every MemoryError the table met (the target: none)


def measured(fn, *, cpu: list[float] | None = None):
    """``(seconds, peak MiB of allocations, result or the exception)``; the process CPU
    seconds appended to ``cpu`` when given. A ``MemoryError`` is kept in ``MEMORY_ERRORS``."""
    gc.collect()
    tracemalloc.start()
    start, start_cpu = time.perf_counter(), time.process_time()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SadlWarning)
            out = fn()
    except (ValueError, MemoryError) as exc:
        out = exc
        if isinstance(exc, MemoryError):
            MEMORY_ERRORS.append(str(exc).splitlines()[0] if str(exc) else "MemoryError")
    seconds = time.perf_counter() - start
    if cpu is not None:
        cpu.append(time.process_time() - start_cpu)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return seconds, peak / 2**20, out


def failed(out) -> str | None:
    if isinstance(out, BaseException):
        text = str(out).splitlines()[0] if str(out) else ""
        return f"{type(out).__name__}: {text[:110]}"
    return None


def row(name: str, setup: tuple, score: tuple | None, extra: str = "") -> None:
    t_set, m_set, obj = setup
    if failed(obj):
        print(f"  {name:8s} set-up {t_set:8.2f} s -> {failed(obj)}")
        return
    assert score is not None
    t_score, m_score, out = score
    if failed(out):
        print(f"  {name:8s} set-up {t_set:8.2f} s {m_set:7.0f} MiB | scoring {t_score:8.2f} s -> {failed(out)}")
        return
    print(f"  {name:8s} set-up {t_set:8.2f} s {m_set:7.0f} MiB | scoring {t_score:8.2f} s {m_score:7.0f} MiB {extra}")


def dsa_flops(dsa: DSA, train_pred: np.ndarray, pred: np.ndarray, known_before: int) -> float:
    """The flops an exact search needs for this scoring call: each input against its
    class's training traces, each newly needed ``x_a`` against the other classes'."""
    n = len(train_pred)
    counts = np.bincount(train_pred, minlength=int(max(train_pred.max(), pred.max())) + 1)
    d = dsa.n_features_in
    new = dsa.known - known_before
    # new x_a are of the inputs' classes; their other-class counts, averaged over the inputs
    other = float(np.mean(n - counts[pred])) * new
    return 2.0 * (d + 1) * (float(counts[pred].sum()) + other)


# ------------------------------------------------------------------ sections


def dsa_row(args, n: int, d: int, train, tp, x_in, p_in) -> None:
    m = min(args.inputs, args.dsa_inputs.get(n, args.inputs))
    setup = measured(lambda: DSA(train, tp))
    dsa = setup[2]
    if failed(dsa):
        row("DSA", setup, None)
        return
    before, cpu = dsa.known, []
    rate = gemm_rate(1024)
    score = measured(lambda: dsa(x_in[:m], p_in[:m]), cpu=cpu)
    after = gemm_rate(1024)
    flops = dsa_flops(dsa, tp, p_in[:m], before)
    frac = fraction(flops, score[0], cpu[0], rate, after)
    extra = (
        f"({m} inputs, {dsa.search}; {flops / 1e9:,.1f} GFLOP: {100 * frac.wall:.1f}% of GEMM by wall "
        f"({max(rate.wall, after.wall):.0f} GFLOP/s), {100 * frac.cpu:.1f}% by CPU time)"
    )
    if n >= 500_000 and d >= 2048 and not failed(score[2]):
        TARGETS.append(
            (
                f"exact DSA, {m:,d} inputs over {n:,d} x {d}: within 2x of GEMM (>= 50% by CPU time)",
                f"{100 * frac.cpu:.1f}% by CPU time, {100 * frac.wall:.1f}% by wall",
                frac.cpu >= 1 / 2,
            )
        )
    row("DSA", setup, score, extra)


def sa_row(name: str, make, train, tp, x_in, p_in) -> None:
    setup = measured(lambda: make(train, tp))
    score = None if failed(setup[2]) else measured(lambda: setup[2](x_in, p_in))
    extra = ""
    if score is not None and not failed(score[2]):
        extra = f"({int(np.count_nonzero(np.isnan(score[2])))} NaN)"
    row(name, setup, score, extra)


def pca_row(k: int, train, tp, x_in, p_in) -> None:
    """``--sadl-sa-components``: LSA and MDSA on the first ``k`` principal axes."""

    def projected():
        pca = Projection.fit(train, k)
        p_train = pca(train)
        return Projected(LSA(p_train, tp), pca), Projected(MDSA(p_train, tp), pca)

    setup = measured(projected)
    score = None
    if not failed(setup[2]):
        lsa, mdsa = setup[2]
        score = measured(lambda: (lsa(x_in, p_in), mdsa(x_in, p_in)))
    row(f"PCA{k}", setup, score, "(axes + LSA + MDSA set-up | LSA + MDSA scoring)")


def neurons_row(train, x_in) -> None:
    setup = measured(lambda: fit_ranges([train]))

    def cover():
        for kind in (
            KMultisectionCoverage(setup[2], k=100),
            NeuronBoundaryCoverage(setup[2]),
            StrongNeuronActivationCoverage(setup[2]),
        ):
            kind.update([x_in])

    row("neurons", setup, None if failed(setup[2]) else measured(cover), "(fit_ranges | KMNC k=100, NBC, SNAC)")


def table(args) -> None:
    print(f"\n== {args.classes:,d} classes, {args.inputs} inputs scored; peak = largest NumPy allocation total ==")
    for d in args.dims:
        x_in, p_in = inputs(args.inputs, d, args.classes)
        for n in args.sizes:
            if n * d * 4 > args.max_gib * 2**30:
                print(
                    f"\n{n:,d} x {d}: skipped (the traces would be {n * d * 4 / 2**30:.1f} GiB > --max-gib {args.max_gib:g})"
                )
                continue
            t0 = time.perf_counter()
            train, tp = traces(n, d, args.classes)
            made = time.perf_counter() - t0
            print(
                f"\n{n:,d} x {d} float32 memmap ({train.nbytes / 2**20:,.0f} MiB{f', made in {made:.0f} s' if made > 1 else ''})"
            )
            if "dsa" in args.only:
                dsa_row(args, n, d, train, tp, x_in, p_in)
            for name, make in (("LSA", LSA), ("MDSA", MDSA)):
                if name.lower() in args.only:
                    sa_row(name, make, train, tp, x_in, p_in)
            if "pca" in args.only:
                pca_row(args.components, train, tp, x_in, p_in)
            if "neurons" in args.only:
                neurons_row(train, x_in)


def classes(args) -> None:
    n = max(args.sizes)
    m = min(args.inputs, args.dsa_inputs.get(n, args.inputs))
    print(f"\n== DSA over {n:,d} x 64, {m} inputs: 10 against {args.classes:,d} classes (target: within 3x) ==")
    times = {}
    for k in (10, args.classes):
        train, tp = traces(n, 64, k)
        x_in, p_in = inputs(m, 64, k)
        dsa = DSA(train, tp)
        before, cpu = dsa.known, []
        rate = gemm_rate(1024)
        t, _, _ = measured(lambda dsa=dsa, x_in=x_in, p_in=p_in: dsa(x_in, p_in), cpu=cpu)
        frac = fraction(dsa_flops(dsa, tp, p_in, before), t, cpu[0], rate, gemm_rate(1024))
        times[k] = cpu[0]
        print(
            f"  {k:5,d} classes: scoring {t:8.2f} s, {cpu[0]:8.2f} CPU-s "
            f"({100 * frac.wall:5.1f}% of GEMM by wall, {100 * frac.cpu:5.1f}% by CPU time)"
        )
    ratio = times[args.classes] / times[10]
    print(f"  {args.classes:,d} / 10 classes (CPU time): {ratio:.2f}x ({'met' if ratio <= 3 else 'MISSED'})")
    TARGETS.append((f"DSA over {n:,d} x 64: {args.classes:,d} classes within 3x of 10", f"{ratio:.2f}x", ratio <= 3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="N = 10k, 100k and d = 64 only")
    parser.add_argument("--sizes", type=lambda s: [int(v) for v in s.split(",")], help="training rows, comma-separated")
    parser.add_argument("--dims", type=lambda s: [int(v) for v in s.split(",")], help="neurons, comma-separated")
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--inputs", type=int, default=200, help="inputs scored (DSA: see --dsa-inputs-large)")
    parser.add_argument("--dsa-inputs-large", type=int, default=None, help="DSA inputs at N >= 1M (default: --inputs)")
    parser.add_argument("--max-gib", type=float, default=4.0, help="skip trace sets larger than this")
    parser.add_argument("--only", nargs="+", choices=("dsa", "lsa", "mdsa", "pca", "neurons", "classes"))
    parser.add_argument("--components", type=int, default=64, help="pca: principal axes (--sadl-sa-components)")
    args = parser.parse_args()
    args.sizes = args.sizes or ([10000, 100000] if args.quick else [10000, 100000, 1280000])
    args.dims = args.dims or ([64] if args.quick else [64, 512])
    args.only = set(args.only or ("dsa", "lsa", "mdsa", "pca", "neurons", "classes"))
    large = args.dsa_inputs_large or args.inputs
    args.dsa_inputs = {n: large for n in args.sizes if n >= 1_000_000}
    print(f"numpy {np.__version__}, {os.cpu_count()} cpus, python {sys.version.split()[0]}")
    gflops = gemm_rate()
    print(f"float32 GEMM (2048^3, A @ B.T): {gflops.wall:.1f} GFLOP/s, {gflops.cpu:.1f} GFLOP per CPU-s")
    if args.only - {"classes"}:
        table(args)
    if "classes" in args.only:
        classes(args)
    end = gemm_rate()
    print(f"\nfloat32 GEMM again at the end: {end.wall:.1f} GFLOP/s, {end.cpu:.1f} GFLOP per CPU-s")
    TARGETS.append(
        (
            "no MemoryError anywhere in the table",
            f"{len(MEMORY_ERRORS)}" + (f" ({MEMORY_ERRORS[0]})" if MEMORY_ERRORS else ""),
            not MEMORY_ERRORS,
        )
    )
    print("\ntargets:")
    for target, value, met in TARGETS:
        print(f"  {'met' if met else 'MISSED':6s} {target}: {value}")


if __name__ == "__main__":
    main()
