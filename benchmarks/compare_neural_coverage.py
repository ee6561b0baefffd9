"""pytest-sadl beside NeuraL-Coverage (Yuan et al., ICSE 2023) on one small PyTorch model.

NeuraL-Coverage is not a dependency and is not fetched here: give a checkout of
https://github.com/Yuanyuan-Yuan/NeuraL-Coverage with ``--repo``. Its ``coverage.py``,
``tool.py`` and ``constants.py`` are imported as they are, with stand-ins for the imports
its NC, KMNC, NBC and SNAC do not need when they are not installed (``pyflann``, for its
DSC; ``torchvision``; ``tqdm``'s progress bars).

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


def load_nlc(repo: Path) -> tuple[types.ModuleType, types.ModuleType]:
    """NeuraL-Coverage's ``coverage`` and ``tool`` modules from a checkout."""
    import torch  # noqa: F401  (before the stand-ins: torch looks some of these names up)

    stand_ins = []
    for name, attrs in (
        ("pyflann", {"FLANN": object}),  # DSC's approximate neighbours only
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, required=True, help="a checkout of NeuraL-Coverage")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--k", type=int, default=100, help="KMNC sections")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from pytest_sadl.capture import TraceModel
    from pytest_sadl.criteria.neurons import fit_ranges, kmnc, nbc, nc, snac

    nlc, tool = load_nlc(args.repo)
    x_train, x_test, y_train, _ = digits(args.seed)
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
        tm = TraceModel(model, sa_layers=[modules[-2]], coverage_layers=modules, extrema=True)
        tr, te = tm.traces(x_train), tm.traces(x_test)
        ranges = fit_ranges(tr.coverage)
        return {
            "nc": 100 * nc(te, 0.5),
            "kmnc": 100 * kmnc(te.coverage, ranges, k=args.k),
            "nbc": 100 * nbc(te.coverage, ranges),
            "snac": 100 * snac(te.coverage, ranges),
        }

    def timed(fn):  # noqa: ANN001, ANN202
        best, value = float("inf"), None
        for _ in range(args.reps):
            t0 = time.perf_counter()
            value = fn()
            best = min(best, time.perf_counter() - t0)
        return value, best

    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # tqdm, prints
        (mine, t_mine), (theirs, t_theirs) = timed(run_sadl), timed(run_nlc)

    # the ranges and the neurons constant over the training set, which the definitions count differently
    tm = TraceModel(model, sa_layers=[modules[-2]], coverage_layers=modules)
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


if __name__ == "__main__":
    main()
