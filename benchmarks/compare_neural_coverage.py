"""pytest-sadl beside NeuraL-Coverage (Yuan et al., ICSE 2023) on one small PyTorch model.

``benchmarks/peers.py`` runs this beside every other peer in one run (its traces and
model come from here).

NeuraL-Coverage is not a dependency and is not fetched here: give a checkout of
https://github.com/Yuanyuan-Yuan/NeuraL-Coverage with ``--repo``. Its ``coverage.py``,
``tool.py`` and ``constants.py`` are imported as they are, with stand-ins for the imports
when they are not installed: ``torchvision`` (unused here), ``tqdm``'s progress bars, and
``pyflann``'s ``FLANN``, which its CC consults for the nearest cluster centre, replaced by
an exact search (CC also takes the exact minimum over all centres, so an approximate
neighbour never changes its value; the time of FLANN's index is not measured).

Besides NC, KMNC, NBC and SNAC it runs the peers' criteria of issue 17 with
NeuraL-Coverage's ``TKNC``, ``TKNP``, ``NLC`` and ``CC`` classes: TKNC and TKNP at the
same ``k``, CC at ``--cc-threshold`` (NeuraL-Coverage's ``hyper`` is its square: it
compares squared distances). Two of them cannot run as committed (each is shown, with its
error): ``TKNP.init_variable`` fills ``self.layer_pattern``, which it never creates, and
``CC`` adds to ``self.current``, which it never sets; they run here with those two
attributes created empty (0) and nothing else changed. NLC is run on several orders and
batchings of the same test inputs, since NeuraL-Coverage keeps a layer's statistics of a
batch only when they raise that layer's value.

Then LSC, DSC and MDSC by NeuraL-Coverage's ``LSC``, ``DSC`` and ``MDSC`` classes
(``min_var`` 1e-5 as in its scripts; ``--sc-width``: their ``hyper``, the bucket width)
beside pytest-sadl's ``LSA``, ``DSA`` and ``MDSA`` with ``SurpriseCoverage``: both on
NeuraL-Coverage's features (every ``Linear``/``Conv2d`` output, a conv's channel means,
concatenated: pytest-sadl traces those modules as its SA layers), both given the model's
predicted classes for the training and the test inputs. NeuraL-Coverage's ``LSC`` cannot
run as committed on NumPy >= 1.23 (it calls ``np.asscalar``; shown, then run with it
restored as ``.item()``). Its per-input values are read through its own ``calculate``, one
input at a time with a bucket width of 1e-9 (its bucket is ``int(SA / width)``); the
coverages are over the same buckets (ours: ``(lower, upper]`` cut at multiples of the
width to hold every value of both tools; theirs: the number of distinct buckets, which it
reports). Set-up (training pass and fit) and scoring (test pass, scores, coverage) are timed
each, the two tools in turns, the minimum of ``--reps``.

The model: a ConvNet on scikit-learn's digits (Conv2d-ReLU, MaxPool, Conv2d-ReLU,
Linear-ReLU, Linear), trained for a few epochs here (seeded). Both tools get the same
training inputs (ranges) and the same test inputs, and measure the same modules: the
Linear and Conv2d modules NeuraL-Coverage measures (their outputs before the ReLU that
follows; pytest-sadl named them explicitly, where its defaults would take the ReLU
outputs). Prints each metric by both tools, the counts behind them, and the time each
took over the same passes (minimum of ``--reps`` runs, side by side).

    python benchmarks/compare_neural_coverage.py --repo /path/to/NeuraL-Coverage
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import types
from pathlib import Path

import numpy as np


class ExactFLANN:
    """pyflann's ``FLANN`` as NeuraL-Coverage's CC uses it, by exact search: ``build_index``
    of the points, ``nn_index`` returning the nearest one's index and squared distance."""

    def build_index(self, points: np.ndarray, **_: object) -> None:
        self.points = np.atleast_2d(np.asarray(points, dtype=np.float64))

    def nn_index(self, query: np.ndarray, num_neighbors: int = 1, **_: object) -> tuple[np.ndarray, np.ndarray]:
        q = np.atleast_2d(np.asarray(query, dtype=np.float64))
        d2 = ((q[:, None, :] - self.points[None]) ** 2).sum(axis=2)
        idx = np.argsort(d2, axis=1, kind="stable")[:, :num_neighbors]
        dist = np.take_along_axis(d2, idx, axis=1)
        return (idx[:, 0], dist[:, 0]) if num_neighbors == 1 else (idx, dist)


def load_nlc(repo: Path) -> tuple[types.ModuleType, types.ModuleType]:
    """NeuraL-Coverage's ``coverage`` and ``tool`` modules from a checkout."""
    import torch  # noqa: F401  (before the stand-ins: torch looks some of these names up)

    stand_ins = []
    for name, attrs in (
        ("pyflann", {"FLANN": ExactFLANN}),  # CC's (and DSC's) approximate neighbours
        ("torchvision", {}),  # tool.py imports it; unused here
        ("tqdm", {"tqdm": lambda it, **_: it}),  # progress bars
    ):
        try:
            importlib.import_module(name)
        except ImportError:
            module = types.ModuleType(name)
            module.__dict__.update(attrs)
            sys.modules[name] = module
            stand_ins.append(name)
    sys.path.insert(0, str(repo))
    try:
        return importlib.import_module("coverage"), importlib.import_module("tool")
    finally:
        sys.path.remove(str(repo))
        for name in stand_ins:  # the imported modules keep their references
            del sys.modules[name]


def build_model(seed: int):  # noqa: ANN201
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(64, 32),
        nn.ReLU(),
        nn.Linear(32, 10),
    )


def digits(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]  # (n, 1, 8, 8)
    return tuple(train_test_split(x, d.target.astype(np.int64), test_size=0.25, random_state=seed, stratify=d.target))  # type: ignore[return-value]


def train(model, x: np.ndarray, y: np.ndarray, epochs: int = 8) -> None:  # noqa: ANN001
    import torch

    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    model.train()
    for _ in range(epochs):
        for i in range(0, len(x), 64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xt[i : i + 64]), yt[i : i + 64]).backward()
            opt.step()
    model.eval()


def timed(fn, reps: int):  # noqa: ANN001, ANN201
    """``(value, seconds)``: the value of ``fn()`` and the minimum time of ``reps`` calls."""
    best, value = float("inf"), None
    for _ in range(reps):
        t0 = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - t0)
    return value, best


def quiet(fn):  # noqa: ANN001, ANN201
    """``fn`` with NeuraL-Coverage's prints and progress bars silenced."""
    import contextlib
    import io

    def run(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return fn(*args, **kwargs)

    return run


class Peers:
    """TKNC, TKNP, NLC and CC by NeuraL-Coverage's classes and by pytest-sadl's criteria
    on the same model, layers and test inputs."""

    def __init__(self, nlc, model, sizes, tm, x_test: np.ndarray, reps: int) -> None:  # noqa: ANN001
        import torch

        self.nlc, self.model, self.sizes, self.tm, self.reps = nlc, model, sizes, tm, reps
        self.x_test = x_test
        self.xt_test = torch.from_numpy(x_test)
        self.layers = tm.traces(x_test).coverage
        self.widths = [a.shape[1] for a in self.layers]

        class RunnableTKNP(nlc.TKNP):  # type: ignore[misc, name-defined]
            def init_variable(self, hyper):  # noqa: ANN001, ANN202
                self.layer_pattern, self.network_pattern = {}, set()  # the stores it fills but never creates
                super().init_variable(hyper)

        class RunnableCC(nlc.CC):  # type: ignore[misc, name-defined]
            def init_variable(self, hyper):  # noqa: ANN001, ANN202
                self.current = 0  # what update() adds to, never set
                super().init_variable(hyper)

        self.tknp_cls, self.cc_cls = RunnableTKNP, RunnableCC

    def loader(self, order: np.ndarray | None = None, batch: int = 256):  # noqa: ANN201
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        x = self.xt_test if order is None else self.xt_test[torch.from_numpy(order)]
        return DataLoader(TensorDataset(x, torch.zeros(len(x))), batch_size=batch)

    def theirs(self, cls, hyper, order: np.ndarray | None = None, batch: int = 256):  # noqa: ANN001, ANN201
        """A NeuraL-Coverage criterion after assessing the test inputs."""
        cov = cls(self.model, self.sizes, hyper=hyper)
        quiet(cov.assess)(self.loader(order, batch))
        return cov

    def as_committed(self, cls, hyper) -> str:  # noqa: ANN001
        try:
            self.theirs(cls, hyper)
        except Exception as e:  # noqa: BLE001  (what a user of the committed code meets)
            return f"{type(e).__name__}: {e}"
        return "runs"

    def mine(self, make, order: np.ndarray | None = None, batch: int | None = None, traced: bool = False):  # noqa: ANN001, ANN201
        """A pytest-sadl criterion updated with the test inputs (``traced``: tracing them
        first, as the time comparison does)."""
        from pytest_sadl.criteria.shape import Batch

        layers = self.tm.traces(self.x_test).coverage if traced else self.layers
        if order is not None:
            layers = [a[order] for a in layers]
        cov = make(self.widths)
        n = len(layers[0])
        step = batch or n
        for s in range(0, n, step):
            cov.update(Batch({}, [a[s : s + step] for a in layers], [None] * len(layers)))
        return cov

    def race(self, theirs, mine) -> tuple[float, float, float, float]:  # noqa: ANN001
        """(pytest-sadl's value, NeuraL-Coverage's, their times), side by side."""
        (a, ta), (b, tb) = timed(mine, self.reps), timed(theirs, self.reps)
        return a, b, ta, tb

    def tknc(self, k: int) -> tuple[float, float, float, float]:
        from pytest_sadl.criteria.metrics.tknc import TopKCoverage

        return self.race(
            lambda: 100 * float(self.theirs(self.nlc.TKNC, k).current),
            lambda: 100 * self.mine(lambda w: TopKCoverage(w, k), traced=True).value,
        )

    def tknp(self, k: int) -> dict[str, float]:
        from pytest_sadl.criteria.metrics.tknp import TopKPatterns

        n = len(self.x_test)
        mine, theirs_all, t_mine, t_theirs = self.race(
            lambda: self.theirs(self.tknp_cls, k, batch=n).current,
            lambda: self.mine(lambda w: TopKPatterns(w, k), traced=True).value,
        )
        ordered = {  # each layer's top k as a list by value, as NeuraL-Coverage's patterns
            tuple(row)
            for row in np.concatenate([np.argsort(-a, axis=1, kind="stable")[:, :k] for a in self.layers], axis=1)
        }
        return {
            "mine": mine,
            "theirs_one_batch": theirs_all,
            "theirs_256": self.theirs(self.tknp_cls, k).current,
            "ordered": len(ordered),
            "t_mine": t_mine,
            "t_theirs": t_theirs,
        }

    def cc(self, threshold: float) -> tuple[float, float, float, float]:
        from pytest_sadl.criteria.metrics.cc import ClusterCoverage

        return self.race(
            lambda: float(self.theirs(self.cc_cls, threshold**2).current),
            lambda: self.mine(lambda w: ClusterCoverage(w, threshold), traced=True).value,
        )

    def nlc_orders(self, seed: int) -> list[tuple[str, float, float, float]]:
        """Per order and batching: NeuraL-Coverage's ``current`` (which starts at 1), its
        sum of the layers' norms, and pytest-sadl's NLC."""
        from pytest_sadl.criteria.metrics.nlc import NeuralCoverage

        n = len(self.x_test)
        forward, backward = np.arange(n), np.arange(n)[::-1].copy()
        shuffled = np.random.default_rng(seed).permutation(n)
        rows = []
        for label, order, batch in (
            (f"test order, one batch of {n}", forward, n),
            ("test order, batches of 256", forward, 256),
            ("test order, batches of 32", forward, 32),
            ("reversed, batches of 32", backward, 32),
            (f"shuffled (seed {seed}), batches of 32", shuffled, 32),
            ("test order, batches of 1", forward, 1),
        ):
            cov = self.theirs(self.nlc.NLC, None, order, batch)
            norms = float(cov.coverage(cov.estimator_dict))
            rows.append((label, float(cov.current), norms, self.mine(NeuralCoverage, order, batch).value))
        return rows

    def passes(self, tool) -> tuple[float, float]:  # noqa: ANN001
        """The test pass alone, each tool's way: pytest-sadl's traces, NeuraL-Coverage's
        ``tool.get_layer_output`` per batch of 256 (what its criteria call first)."""
        _, t_mine = timed(lambda: self.tm.traces(self.x_test), self.reps)
        _, t_theirs = timed(lambda: [tool.get_layer_output(self.model, x) for x, _ in self.loader()], self.reps)
        return t_mine, t_theirs

    def nlc_time(self) -> tuple[float, float]:
        from pytest_sadl.criteria.metrics.nlc import NeuralCoverage

        _, t_mine = timed(lambda: self.mine(NeuralCoverage, traced=True).value, self.reps)
        _, t_theirs = timed(lambda: self.theirs(self.nlc.NLC, None).current, self.reps)
        return t_mine, t_theirs


def report_peers(peers: Peers, tool: types.ModuleType, args: argparse.Namespace) -> None:
    print(
        f"\npeers' criteria (issue 17), coverage layers of {peers.widths} neurons; time: min of {args.reps}, test pass + metric"
    )
    t_mine, t_theirs = peers.passes(tool)
    print(
        f"the test pass alone: pytest-sadl {t_mine:.3f}s, NeuraL-Coverage {t_theirs:.3f}s, ratio {t_theirs / t_mine:.2f}"
    )
    print(f"{'metric':26} {'pytest-sadl':>12} {'NeuraL-Cov':>12} {'sadl s':>8} {'NLC s':>8} {'ratio':>6}")

    def row(name: str, a: float, b: float, ta: float, tb: float) -> None:
        print(f"{name:26} {a:12.4f} {b:12.4f} {ta:8.3f} {tb:8.3f} {tb / ta:6.2f}")

    for k in args.topk:
        row(f"TKNC % (k = {k})", *peers.tknc(k))
    print(f"TKNP as committed: {peers.as_committed(peers.nlc.TKNP, args.topk[0])}")
    print(f"CC as committed: {peers.as_committed(peers.nlc.CC, args.cc_threshold[0] ** 2)}")
    for k in args.topk:
        t = peers.tknp(k)
        row(f"TKNP (k = {k}, one batch)", t["mine"], t["theirs_one_batch"], t["t_mine"], t["t_theirs"])
        print(
            f"  TKNP k = {k}: NeuraL-Coverage in batches of 256 {t['theirs_256']:.0f} (the last batch's patterns); "
            f"distinct top-k lists ordered by value {t['ordered']}"
        )
    for threshold in args.cc_threshold:
        a, b, ta, tb = peers.cc(threshold)
        row(f"CC (threshold {threshold:g})", a, b, ta, tb)
        print(
            f"  CC: pytest-sadl - {len(peers.widths)} layers = {a - len(peers.widths):.0f} (NeuraL-Coverage does not count a layer's first centre)"
        )
    t_mine, t_theirs = peers.nlc_time()
    rows = peers.nlc_orders(args.seed)
    print(
        f"NLC time, batches of 256: pytest-sadl {t_mine:.3f}s, NeuraL-Coverage {t_theirs:.3f}s, ratio {t_theirs / t_mine:.2f}"
    )
    print("NLC: NeuraL-Coverage's `current` starts at 1; `norms` is its sum of the layers' norms, the NLC")
    print(f"{'NLC: inputs fed':36} {'their current':>14} {'their norms':>12} {'pytest-sadl':>12}")
    for label, current, norms, mine in rows:
        print(f"{label:36} {current:14.6f} {norms:12.6f} {mine:12.6f}")


#: NeuraL-Coverage's ``min_var`` in every one of its scripts (``eval_*.py``, ``fuzz.py``)
MIN_VAR = 1e-5
#: the default LSC, DSC and MDSC bucket widths (NeuraL-Coverage's ``hyper``)
SC_WIDTHS = {"lsc": 10.0, "dsc": 0.05, "mdsc": 0.5}
#: the bucket width their per-input values are read through (one input at a time)
FINE = 1e-9


def alternate(reps: int, first, second) -> tuple[tuple, tuple]:  # noqa: ANN001
    """``first()`` and ``second()``, each ``(value, set-up s, scoring s)``, run in turns
    ``reps`` times: each one's value and its minimum set-up and scoring times."""
    best = [[None, float("inf"), float("inf")], [None, float("inf"), float("inf")]]
    for _ in range(reps):
        for slot, fn in zip(best, (first, second), strict=True):
            value, t_setup, t_score = fn()
            slot[0], slot[1], slot[2] = value, min(slot[1], t_setup), min(slot[2], t_score)
    return tuple(best[0]), tuple(best[1])


def set_up_and_score(setup, score) -> tuple[object, float, float]:  # noqa: ANN001
    t0 = time.perf_counter()
    obj = setup()
    t1 = time.perf_counter()
    value = score(obj)
    return value, t1 - t0, time.perf_counter() - t1


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    ok = np.isfinite(a) & np.isfinite(b)
    return float(spearmanr(a[ok], b[ok]).statistic)


def max_rel(a: np.ndarray, b: np.ndarray) -> float:
    ok = np.isfinite(a) & np.isfinite(b)
    return float(np.max(np.abs(a[ok] - b[ok]) / np.maximum(np.abs(b[ok]), 1e-300)))


class Surprise:
    """LSC, DSC and MDSC by NeuraL-Coverage's ``LSC``, ``DSC`` and ``MDSC`` classes and by
    pytest-sadl's ``LSA``, ``DSA`` and ``MDSA`` with its ``SurpriseCoverage``, on the same
    features: NeuraL-Coverage's own, every ``Linear``/``Conv2d`` module's output (a conv's
    channel means) concatenated, which pytest-sadl traces as its SA layers. Both tools get
    the same classes, the model's predicted ones, for the training and the test inputs
    (NeuraL-Coverage takes the classes from its loaders: its scripts give the true labels)."""

    def __init__(self, nlc, model, sizes, modules, data, reps: int) -> None:  # noqa: ANN001
        from pytest_sadl.capture import trace_model

        self.nlc, self.model, self.sizes, self.reps = nlc, model, sizes, reps
        self.x_train, self.x_test, self.y_train, self.y_test = data
        self.tm = trace_model(model, sa_layers=modules, coverage_layers=modules[-1:])
        self.tr, self.te = self.tm.traces(self.x_train), self.tm.traces(self.x_test)
        self.classes = int(self.tr.pred.max()) + 1

        class RunnableLSC(nlc.LSC):  # type: ignore[misc, name-defined]
            def calculate(self, data_batch, label_batch):  # noqa: ANN001, ANN202
                with asscalar():  # np.asscalar, removed in NumPy 1.23, as the item of a size-1 array
                    return super().calculate(data_batch, label_batch)

        self.cls = {"lsc": RunnableLSC, "dsc": nlc.DSC, "mdsc": nlc.MDSC}

    def loader(self, x: np.ndarray, labels: np.ndarray, batch: int = 256):  # noqa: ANN201
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        return DataLoader(
            TensorDataset(torch.from_numpy(x), torch.from_numpy(labels.astype(np.int64))), batch_size=batch
        )

    def their_build(self, name: str, width: float, labels: np.ndarray | None = None):  # noqa: ANN201
        cov = self.cls[name](self.model, self.sizes, hyper=width, min_var=MIN_VAR, num_class=self.classes)
        quiet(cov.build)(self.loader(self.x_train, self.tr.pred if labels is None else labels))
        return cov

    def their_assess(self, cov, labels: np.ndarray | None = None) -> int:  # noqa: ANN001
        cov.coverage_set, cov.current = set(), 0
        quiet(cov.assess)(self.loader(self.x_test, self.te.pred if labels is None else labels))
        return int(cov.current)

    def their_values(self, cov) -> np.ndarray:  # noqa: ANN001
        """Each test input's SA by NeuraL-Coverage's own ``calculate``, one input at a time
        with a bucket width of :data:`FINE` (its bucket is ``int(SA / width)``); NaN where
        it adds no bucket (a NaN or infinite SA)."""
        import torch

        width, cov.threshold = cov.threshold, FINE
        out = np.full(len(self.x_test), np.nan)
        x, p = torch.from_numpy(self.x_test), torch.from_numpy(self.te.pred.astype(np.int64))
        for i in range(len(out)):
            cov.coverage_set = set()
            got = cov.calculate(x[i : i + 1], p[i : i + 1])
            if got:
                out[i] = next(iter(got)) * FINE
        cov.threshold, cov.coverage_set = width, set()
        return out

    def our_scorer(self, name: str, tr):  # noqa: ANN001, ANN201
        from pytest_sadl.criteria.mahalanobis import MDSA
        from pytest_sadl.criteria.surprise import DSA, LSA

        return {"lsc": LSA, "dsc": DSA, "mdsc": MDSA}[name](tr.sa, tr.pred)

    def our_setup(self, name: str):  # noqa: ANN201
        return self.our_scorer(name, self.tm.traces(self.x_train))

    def our_coverage(self, scorer, bounds: tuple[float, float, int]):  # noqa: ANN001, ANN201
        from pytest_sadl.criteria.surprise import SurpriseCoverage

        te = self.tm.traces(self.x_test)
        sc = SurpriseCoverage(*bounds)
        sc.update(scorer(te.sa, te.pred))
        return sc

    def compare(self, name: str, width: float) -> dict[str, object]:
        """Values (untimed), then both tools' set-up and scoring in turns."""
        theirs = self.their_values(self.their_build(name, width))
        ours = self.our_scorer(name, self.tr)(self.te.sa, self.te.pred)
        both = np.concatenate([theirs, ours])
        both = both[np.isfinite(both)]
        lower = width * np.floor(min(0.0, both.min()) / width)
        buckets = max(1, int(np.ceil((both.max() - lower) / width)))
        bounds = (float(lower), float(lower + buckets * width), buckets)
        (sc, t_ours, s_ours), (current, t_theirs, s_theirs) = alternate(
            self.reps,
            lambda: set_up_and_score(lambda: self.our_setup(name), lambda s: self.our_coverage(s, bounds)),
            lambda: set_up_and_score(lambda: self.their_build(name, width), self.their_assess),
        )
        true = self.their_assess(self.their_build(name, width, self.y_train), self.y_test)
        return {
            "ours": ours, "theirs": theirs, "bounds": bounds, "sc": sc, "current": current, "true": true,
            "times": (t_ours, t_theirs, s_ours, s_theirs),
        }  # fmt: skip


def asscalar():  # noqa: ANN201
    """``np.asscalar`` (removed in NumPy 1.23) while NeuraL-Coverage's LSC calls it."""
    import contextlib

    @contextlib.contextmanager
    def patched():  # noqa: ANN202
        missing = "asscalar" not in np.__dict__
        if missing:
            np.asscalar = lambda a: np.asarray(a).item()  # type: ignore[attr-defined]
        try:
            yield
        finally:
            if missing:
                del np.asscalar  # type: ignore[attr-defined]

    return patched()


def dsa_from_input(tr, te) -> np.ndarray:  # noqa: ANN001
    """DSA as NeuraL-Coverage's DSC computes it, by NumPy: ``dist_b`` from the input itself
    to the nearest training trace of another class (the paper's is from ``x_a``)."""
    a, b = te.sa.astype(np.float64), tr.sa.astype(np.float64)
    d = np.sqrt(np.maximum((a * a).sum(1)[:, None] + (b * b).sum(1)[None] - 2 * a @ b.T, 0))
    same = te.pred[:, None] == tr.pred[None]
    return np.where(same, d, np.inf).min(axis=1) / np.where(same, np.inf, d).min(axis=1)


REASONS = {
    "lsc": "their KDE (num_class > 1) is sklearn's KernelDensity, bandwidth 0.2 in every direction; "
    "the paper's (ours) gaussian_kde, Scott's factor x the class's covariance",
    "dsc": "their dist_b is from the input x to the nearest trace of another class; the paper's (ours) from x_a",
    "mdsc": "their covariance divides by n (ours n - 1): theirs = ours x sqrt(n_c / (n_c - 1))",
}


def report_surprise(s: Surprise, widths: dict[str, float]) -> None:
    import warnings

    with warnings.catch_warnings():  # ours warns of the singular covariances: said in the rows' notes
        warnings.simplefilter("ignore")
        surprise_rows(s, widths)


def surprise_rows(s: Surprise, widths: dict[str, float]) -> None:
    kept = sum(int(m.numel()) for m in s.their_build("mdsc", widths["mdsc"]).mask_index_dict.values())
    print(
        f"\nsurprise coverage: NeuraL-Coverage's LSC, DSC, MDSC (min_var {MIN_VAR:g}, {s.classes} classes) beside "
        f"pytest-sadl's LSA, DSA, MDSA on the same {s.tr.sa.shape[1]} features (every module's output, conv channel "
        f"means; theirs keeps {kept}), both given the predicted classes; time: min of {s.reps} alternating"
    )
    print(f"LSC as committed: {as_committed_lsc(s, widths['lsc'])}  (run with np.asscalar restored)")
    head = f"{'metric':5} {'width':>6} {'B':>5} {'ours':>11} {'theirs':>11} {'true lbl':>8} {'rho':>7} {'max rel':>8}"
    print(f"{head} {'set-up s ours/theirs':>21} {'x':>6} {'scoring s ours/theirs':>22} {'x':>6}")
    targets = []
    for name in ("lsc", "dsc", "mdsc"):
        r = s.compare(name, widths[name])
        sc, b, (t_o, t_t, s_o, s_t) = r["sc"], r["bounds"], r["times"]
        covered = int(np.count_nonzero(sc.covered))
        print(
            f"{name:5} {widths[name]:6g} {b[2]:5d} {covered:4d} {100 * sc.value:5.1f}% {r['current']:4d} "
            f"{100 * r['current'] / b[2]:5.1f}% {r['true']:8d} {spearman(r['ours'], r['theirs']):7.4f} "
            f"{max_rel(r['ours'], r['theirs']):8.2g} {t_o:10.3f}/{t_t:<10.3f} {t_t / t_o:6.2f} {s_o:11.3f}/{s_t:<10.3f} {s_t / s_o:6.2f}"
        )
        print(f"  {name}: bounds ({b[0]:g}, {b[1]:g}]; {explain(s, name, r)}")
        targets += [
            (f"{name.upper()} set-up: ours at least as fast as NeuraL-Coverage's", t_o <= t_t, f"{t_t / t_o:.2f}x")
        ]
        targets += [
            (f"{name.upper()} scoring: ours at least as fast as NeuraL-Coverage's", s_o <= s_t, f"{s_t / s_o:.2f}x")
        ]
    print("ours/theirs: covered buckets of B (their count over the same B); true lbl: their count fed the true labels")
    for what, met, measured in targets:
        print(f"{'met   ' if met else 'MISSED'} {what:<62} {measured}")


def explain(s: Surprise, name: str, r: dict) -> str:  # noqa: ANN001
    """Why the per-input values differ, with a NumPy reference of their definition where one is short."""
    ours, theirs = r["ours"], r["theirs"]
    line = REASONS[name]
    if name == "dsc":
        line += f"; their definition by NumPy: max rel {max_rel(dsa_from_input(s.tr, s.te), theirs):.2g}"
    if name == "lsc":
        from pytest_sadl.criteria.surprise import LSA

        line += f"; ours keeps {LSA(s.tr.sa, s.tr.pred).kept.size} of {s.tr.sa.shape[1]} neurons (linearly dependent ones dropped)"
    if name == "mdsc":
        n_c = np.bincount(s.tr.pred, minlength=s.classes)[s.te.pred]
        ranks = [
            int(np.linalg.matrix_rank(np.cov(s.tr.sa[s.tr.pred == c].T.astype(np.float64)))) for c in range(s.classes)
        ]
        line += (
            f"; ours x sqrt(n_c / (n_c - 1)): max rel {max_rel(ours * np.sqrt(n_c / (n_c - 1)), theirs):.2g}; "
            f"the class covariances are singular (rank {min(ranks)}-{max(ranks)} of {s.tr.sa.shape[1]}): theirs inverts "
            f"them by torch.linalg.inv in float32 ({int(np.isnan(theirs).sum())} NaN: square roots of negatives), ours by "
            "the pseudo-inverse in float64"
        )
    return line


def as_committed_lsc(s: Surprise, width: float) -> str:
    cov = s.nlc.LSC(s.model, s.sizes, hyper=width, min_var=MIN_VAR, num_class=s.classes)
    try:
        quiet(cov.build)(s.loader(s.x_train, s.tr.pred))
        quiet(cov.assess)(s.loader(s.x_test[:4], s.te.pred[:4]))
    except Exception as e:  # noqa: BLE001  (what a user of the committed code meets)
        return f"{type(e).__name__}: {e}"
    return "runs"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, required=True, help="a checkout of NeuraL-Coverage")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--k", type=int, default=100, help="KMNC sections")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch's threads (1: steadier times on a shared machine)")
    ap.add_argument(
        "--topk", type=lambda v: [int(k) for k in v.split(",")], default=[2, 10], help="TKNC/TKNP k values, e.g. 2,10"
    )
    ap.add_argument(
        "--cc-threshold",
        type=lambda v: [float(t) for t in v.split(",")],
        default=[3.0, 10.0],
        help="CC's Euclidean distance thresholds, e.g. 3,10 (10: pytest-sadl's default)",
    )
    ap.add_argument(
        "--sc-width",
        type=lambda v: {**SC_WIDTHS, **{k: float(w) for k, w in (p.split(":") for p in v.split(","))}},
        default=SC_WIDTHS,
        help="LSC/DSC/MDSC bucket widths (NeuraL-Coverage's hyper), e.g. lsc:10,dsc:0.05,mdsc:0.5",
    )
    args = ap.parse_args()

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from pytest_sadl.capture import trace_model
    from pytest_sadl.criteria.neurons import fit_ranges, kmnc, nbc, nc, snac

    torch.set_num_threads(args.threads)
    nlc, tool = load_nlc(args.repo)
    x_train, x_test, y_train, y_test = digits(args.seed)
    model = build_model(args.seed)
    train(model, x_train, y_train)
    xt_train, xt_test = torch.from_numpy(x_train), torch.from_numpy(x_test)

    # NeuraL-Coverage: its own layer choice (Linear/Conv modules), sizes from a probe
    sizes = tool.get_layer_output_sizes(model, xt_train[:2])
    names = list(tool.get_model_layers(model))
    modules = [p for p, m in model.named_modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
    train_loader = DataLoader(TensorDataset(xt_train, torch.from_numpy(y_train)), batch_size=256)
    test_loader = DataLoader(TensorDataset(xt_test, torch.zeros(len(xt_test))), batch_size=256)

    def run_nlc() -> dict[str, float]:
        out = {}
        for name, cls, hyper in (
            ("nc", nlc.NC, 0.5),
            ("kmnc", nlc.KMNC, args.k),
            ("nbc", nlc.NBC, None),
            ("snac", nlc.SNAC, None),
        ):
            cov = cls(model, sizes, hyper=hyper)
            cov.build(train_loader)
            cov.assess(test_loader)
            out[name] = 100 * float(cov.current)
        return out

    def run_sadl() -> dict[str, float]:
        tm = trace_model(model, sa_layers=[modules[-2]], coverage_layers=modules, extrema=True)
        tr, te = tm.traces(x_train), tm.traces(x_test)
        ranges = fit_ranges(tr.coverage)
        return {
            "nc": 100 * nc(te, 0.5),
            "kmnc": 100 * kmnc(te.coverage, ranges, k=args.k),
            "nbc": 100 * nbc(te.coverage, ranges),
            "snac": 100 * snac(te.coverage, ranges),
        }

    (mine, t_mine), (theirs, t_theirs) = timed(run_sadl, args.reps), quiet(timed)(run_nlc, args.reps)

    # the ranges and the neurons constant over the training set, which the definitions count differently
    tm = trace_model(model, sa_layers=[modules[-2]], coverage_layers=modules)
    ranges = fit_ranges(tm.traces(x_train).coverage)
    constant = sum(int((h <= lo).sum()) for lo, h in zip(ranges.low, ranges.high, strict=True))
    print(
        f"model: {len(x_train)} training, {len(x_test)} test digits; layers {modules} "
        f"(NeuraL-Coverage names {names}); {sum(ranges.sizes)} neurons, {constant} constant in training"
    )
    print(f"{'metric':8} {'pytest-sadl':>12} {'NeuraL-Cov':>12}")
    for name in ("nc", "kmnc", "nbc", "snac"):
        print(f"{name:8} {mine[name]:12.4f} {theirs[name]:12.4f}")
    print(
        f"time (min of {args.reps}, ranges + test pass + 4 metrics): pytest-sadl {t_mine:.3f}s, "
        f"NeuraL-Coverage {t_theirs:.3f}s, ratio NeuraL-Coverage / pytest-sadl {t_theirs / t_mine:.2f}"
    )
    report_peers(Peers(nlc, model, sizes, tm, x_test, args.reps), tool, args)
    report_surprise(Surprise(nlc, model, sizes, modules, (x_train, x_test, y_train, y_test), args.reps), args.sc_width)


if __name__ == "__main__":
    main()
