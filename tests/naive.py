"""Naive reference implementations written straight from the papers' definitions.

Deliberately slow and obvious: Python loops over inputs, neurons and buckets, explicit
formulas, no shared code with ``pytest_sadl``. The tests compare the fast engine with these.
"""

from __future__ import annotations

import math

import numpy as np


def kde_log_density(train: np.ndarray, x: np.ndarray) -> float:
    """log f(x) of equation 1: a Gaussian KDE with Scott's rule bandwidth matrix H."""
    n, d = train.shape
    factor = n ** (-1.0 / (d + 4))  # Scott's rule
    mean = train.mean(axis=0)
    cov = (train - mean).T @ (train - mean) / (n - 1)
    h = cov * factor**2
    h_inv = np.linalg.inv(h)
    _, logdet = np.linalg.slogdet(2 * math.pi * h)
    terms = []
    for xi in train:
        u = x - xi
        terms.append(-0.5 * u @ h_inv @ u - 0.5 * logdet)
    top = max(terms)
    return top + math.log(sum(math.exp(t - top) for t in terms)) - math.log(n)


def kept_neurons(train: np.ndarray, train_pred: np.ndarray, var_threshold: float) -> list[int]:
    """The variance filter of LSA and MDSA: a neuron is dropped if its variance (ddof=0) is
    below the threshold in any class with two or more training traces."""
    return [
        j
        for j in range(train.shape[1])
        if all(
            np.var(train[train_pred == c, j]) >= var_threshold
            for c in np.unique(train_pred)
            if np.sum(train_pred == c) >= 2
        )
    ]


def lsa(
    train: np.ndarray, train_pred, tests: np.ndarray, pred, var_threshold: float = 1e-5, var_rule: str = "class"
) -> np.ndarray:
    """Equation 2 per class, after the variance filter: ``"paper"``, a neuron dropped if low
    in any class; ``"class"``, each class's KDE over the neurons not low in that class."""
    train_pred = np.zeros(len(train), int) if train_pred is None else np.asarray(train_pred)
    pred = np.zeros(len(tests), int) if pred is None else np.asarray(pred)
    keep = kept_neurons(train, train_pred, var_threshold)
    out = []
    for x, c in zip(tests, pred, strict=True):
        rows = train[train_pred == c]
        if var_rule == "class":
            keep = [j for j in range(train.shape[1]) if np.var(rows[:, j]) >= var_threshold]
        out.append(-kde_log_density(rows[:, keep], x[keep]))
    return np.array(out)


def x_a_rows(train: np.ndarray, train_pred, tests: np.ndarray, pred) -> np.ndarray:
    """Each input's x_a: the row of its nearest training trace of its predicted class
    (the first on a tie, as np.argmin)."""
    train_pred = np.asarray(train_pred)
    out = []
    for x, c in zip(tests, pred, strict=True):
        rows = np.flatnonzero(train_pred == c)
        out.append(rows[np.argmin(np.linalg.norm(train[rows] - x, axis=1))])
    return np.array(out, dtype=np.int64)


def dsa(train: np.ndarray, train_pred, tests: np.ndarray, pred) -> np.ndarray:
    """Equations 3-5, a loop over inputs as in the paper's reference code."""
    train_pred = np.asarray(train_pred)
    out = []
    for x, c, a in zip(tests, pred, x_a_rows(train, train_pred, tests, pred), strict=True):
        x_a = train[a]
        dist_a = np.linalg.norm(x_a - x)
        dist_b = np.linalg.norm(train[train_pred != c] - x_a, axis=1).min()
        out.append(dist_a / dist_b)
    return np.array(out)


def surprise_coverage(scores, lower: float, upper: float, buckets: int) -> float:
    """Equation 6 over (lower, upper]: bucket i is (lower + (U-L)(i-1)/n, lower + (U-L)i/n]."""
    covered = 0
    for i in range(1, buckets + 1):
        lo = lower + (upper - lower) * (i - 1) / buckets
        hi = lower + (upper - lower) * i / buckets
        if any(lo < s <= hi for s in scores):
            covered += 1
    return covered / buckets


def _neuron_values(layer: np.ndarray) -> np.ndarray:
    """(n, neurons): channel mean of a conv output, the output itself for a dense layer."""
    if layer.ndim == 2:
        return layer
    return np.stack([[layer[i, ..., ch].mean() for ch in range(layer.shape[-1])] for i in range(len(layer))])


def neuron_coverage(layers, threshold: float) -> float:
    """DeepXplore: scale each input's layer output to [0, 1], channel mean, covered if > threshold."""
    covered = total = 0
    for layer in layers:
        n_neurons = layer.shape[-1]
        total += n_neurons
        for j in range(n_neurons):
            hit = False
            for i in range(len(layer)):
                out = layer[i]
                span = out.max() - out.min()
                scaled = (out - out.min()) / span if span > 0 else np.zeros_like(out)
                if scaled[..., j].mean() > threshold:
                    hit = True
            covered += hit
    return covered / total


def ranges(train_layers):
    lows, highs = [], []
    for layer in train_layers:
        v = _neuron_values(layer)
        lows.append([v[:, j].min() for j in range(v.shape[1])])
        highs.append([v[:, j].max() for j in range(v.shape[1])])
    return lows, highs


def kmnc(layers, lows, highs, k: int) -> float:
    """DeepGauge: covered sections / (k |N|); the last section includes the maximum.
    Neurons with low == high have no sections and are left out of |N| (the project's documented
    choice, unlike DeepGauge's k |N|: their zero-width sections could never be covered apart)."""
    covered = neurons = 0
    for layer, low, high in zip(layers, lows, highs, strict=True):
        v = _neuron_values(layer)
        for j in range(v.shape[1]):
            if high[j] == low[j]:
                continue
            neurons += 1
            for s in range(k):
                lo = low[j] + (high[j] - low[j]) * s / k
                hi = low[j] + (high[j] - low[j]) * (s + 1) / k
                if any((lo <= x < hi) or (s == k - 1 and x == high[j]) for x in v[:, j]):
                    covered += 1
    return covered / (k * neurons)


def nbc(layers, lows, highs) -> float:
    upper = lower = neurons = 0
    for layer, low, high in zip(layers, lows, highs, strict=True):
        v = _neuron_values(layer)
        for j in range(v.shape[1]):
            neurons += 1
            upper += any(x > high[j] for x in v[:, j])
            lower += any(x < low[j] for x in v[:, j])
    return (upper + lower) / (2 * neurons)


def snac(layers, lows, highs) -> float:
    upper = neurons = 0
    for layer, _low, high in zip(layers, lows, highs, strict=True):
        v = _neuron_values(layer)
        for j in range(v.shape[1]):
            neurons += 1
            upper += any(x > high[j] for x in v[:, j])
    return upper / neurons


def mdsa(train: np.ndarray, train_pred, tests: np.ndarray, pred, var_threshold: float = 1e-5) -> np.ndarray:
    """MDSA (Kim, Ju, Feldt, Yoo 2020): sqrt((x - mu_c)^T inv(Sigma_c) (x - mu_c)), a loop over
    inputs; the variance filter of LSA (ddof=0, over the classes with two or more training
    traces: a one-trace class has no covariance and no variance to filter by);
    ``np.linalg.pinv`` for a singular covariance."""
    train_pred = np.zeros(len(train), int) if train_pred is None else np.asarray(train_pred)
    pred = np.zeros(len(tests), int) if pred is None else np.asarray(pred)
    keep = kept_neurons(train, train_pred, var_threshold)
    out = []
    for x, c in zip(tests, pred, strict=True):
        members = train[train_pred == c][:, keep]
        mu = members.sum(axis=0) / len(members)
        cov = sum(np.outer(t - mu, t - mu) for t in members) / (len(members) - 1)
        u = x[keep] - mu
        out.append(math.sqrt(u @ np.linalg.pinv(cov, rcond=1e-10, hermitian=True) @ u))
    return np.array(out)


def roc_auc(scores, positive) -> float:
    """AUC as the fraction of (positive, negative) pairs ordered right, a tie counting 1/2."""
    pos = [s for s, p in zip(scores, positive, strict=True) if p]
    neg = [s for s, p in zip(scores, positive, strict=True) if not p]
    won = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in pos for b in neg)
    return won / (len(pos) * len(neg))


def bucket_of(score: float, lower: float, upper: float, buckets: int):
    """The bucket i (0-based) with lower + (U-L) i/n < score <= lower + (U-L)(i+1)/n, or None."""
    for i in range(buckets):
        if lower + (upper - lower) * i / buckets < score <= lower + (upper - lower) * (i + 1) / buckets:
            return i
    return None


def greedy_bucket_cover(buckets_of, budget: int, fallback_scores, covered=()) -> list[int]:
    """Pick, ``budget`` times, the first pool input that covers the most still-uncovered buckets
    (``buckets_of[i]``: the set of (metric, bucket) pairs input ``i`` would cover); when no input
    adds a bucket, the not yet chosen input with the highest ``fallback_scores`` (NaN last, ties
    in pool order)."""
    covered = set(covered)
    chosen: list[int] = []
    for _ in range(min(budget, len(buckets_of))):
        best, gain = None, 0
        for i, b in enumerate(buckets_of):
            if i not in chosen and len(set(b) - covered) > gain:
                best, gain = i, len(set(b) - covered)
        if best is None:
            rest = [i for i in range(len(buckets_of)) if i not in chosen]
            finite = [i for i in rest if not math.isnan(fallback_scores[i])]
            best = max(finite, key=lambda i: (fallback_scores[i], -i)) if finite else rest[0]
        chosen.append(best)
        covered |= set(buckets_of[best])
    return chosen


def gaussian_log_density(x: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> float:
    """log N(x; mean, cov), written out: -(d log 2 pi + log det cov + u^T cov^-1 u) / 2."""
    d = len(x)
    u = x - mean
    _, logdet = np.linalg.slogdet(cov)
    return -0.5 * (d * math.log(2 * math.pi) + logdet + u @ np.linalg.inv(cov) @ u)


def mixture_surprise(x: np.ndarray, weights, means, covs) -> float:
    """-log sum_j w_j N(x; mu_j, Sigma_j), the sum taken in a loop (log-sum-exp for range)."""
    logs = [math.log(w) + gaussian_log_density(x, m, c) for w, m, c in zip(weights, means, covs, strict=True)]
    top = max(logs)
    return -(top + math.log(sum(math.exp(v - top) for v in logs)))


def mlsa(train, train_pred, tests, pred, mixtures: dict, var_threshold: float = 1e-5) -> np.ndarray:
    """MLSA: -log of the density of the mixture (weights, means, covariances) of each input's
    predicted class, on the neurons of the variance filter; ``mixtures[c]`` gives the
    class's fitted parameters (the EM fit itself is scikit-learn's)."""
    train_pred = np.zeros(len(train), int) if train_pred is None else np.asarray(train_pred)
    pred = np.zeros(len(tests), int) if pred is None else np.asarray(pred)
    keep = kept_neurons(train, train_pred, var_threshold)
    out = []
    for x, c in zip(tests, pred, strict=True):
        if c not in mixtures:
            out.append(math.nan)
            continue
        weights, means, covs = mixtures[c]
        out.append(mixture_surprise(x[keep], weights, means, covs))
    return np.array(out)


def nearest(centroids: np.ndarray, x: np.ndarray) -> int:
    """The index of the centroid nearest to x (Euclidean; the first on a tie)."""
    best, dist = 0, math.inf
    for j, m in enumerate(centroids):
        d = math.sqrt(sum((a - b) ** 2 for a, b in zip(x, m, strict=True)))
        if d < dist:
            best, dist = j, d
    return best


def mmdsa(train, train_pred, tests, pred, centroids: dict, var_threshold: float = 1e-5) -> np.ndarray:
    """MMDSA: the Mahalanobis distance (pseudo-inverse, ddof=1 covariance) of each input to the
    mode of its class whose centroid is nearest; a mode's traces are the class's training
    traces nearest to its centroid; ``centroids[c]``: the class's k-means centroids."""
    train_pred = np.zeros(len(train), int) if train_pred is None else np.asarray(train_pred)
    pred = np.zeros(len(tests), int) if pred is None else np.asarray(pred)
    keep = kept_neurons(train, train_pred, var_threshold)
    out = []
    for x, c in zip(tests, pred, strict=True):
        if c not in centroids:
            out.append(math.nan)
            continue
        members = train[train_pred == c][:, keep]
        m = nearest(centroids[c], x[keep])
        mode = np.array([t for t in members if nearest(centroids[c], t) == m])
        if len(mode) < 2:
            out.append(math.nan)
            continue
        mu = mode.sum(axis=0) / len(mode)
        cov = sum(np.outer(t - mu, t - mu) for t in mode) / (len(mode) - 1)
        u = x[keep] - mu
        out.append(math.sqrt(u @ np.linalg.pinv(cov, rcond=1e-10, hermitian=True) @ u))
    return np.array(out)


def apfd(order, faults) -> float:
    """APFD = 1 - (TF_1 + ... + TF_k) / (k n) + 1 / (2 n), TF_i the 1-based position of the
    i-th fault in the order."""
    n = len(order)
    positions = [pos for pos, i in enumerate(order, 1) if faults[i]]
    k = len(positions)
    return 1 - sum(positions) / (k * n) + 1 / (2 * n)


def ctm(target_sets) -> list[int]:
    """Coverage-total: inputs by the number of targets each covers, most first, ties by index."""
    return sorted(range(len(target_sets)), key=lambda i: (-len(target_sets[i]), i))


def cam(target_sets) -> list[int]:
    """Coverage-additional: repeatedly the first input adding the most uncovered targets;
    when none adds any, the rest in coverage-total order."""
    covered: set = set()
    chosen: list[int] = []
    while True:
        best, gain = None, 0
        for i, t in enumerate(target_sets):
            if i not in chosen and len(set(t) - covered) > gain:
                best, gain = i, len(set(t) - covered)
        if best is None:
            break
        chosen.append(best)
        covered |= set(target_sets[best])
    return chosen + [i for i in ctm(target_sets) if i not in chosen]


def targets_of_input(kind: str, layers, i: int, lows=None, highs=None, k: int = 0, threshold: float = 0.5) -> set:
    """The coverage targets input ``i`` covers on its own, by the definitions above:
    ``nc`` (layer, neuron) scaled above the threshold; ``kmnc`` (layer, neuron, section);
    ``nbc`` (layer, neuron, "lower" / "upper"); ``snac`` (layer, neuron)."""
    out: set = set()
    for li, layer in enumerate(layers):
        v = _neuron_values(layer)
        for j in range(v.shape[1]):
            x = v[i, j]
            if kind == "nc":
                out_i = layer[i]
                span = out_i.max() - out_i.min()
                scaled = (out_i - out_i.min()) / span if span > 0 else np.zeros_like(out_i)
                if scaled[..., j].mean() > threshold:
                    out.add((li, j))
            elif kind == "kmnc" and highs[li][j] > lows[li][j]:
                for s in range(k):
                    lo = lows[li][j] + (highs[li][j] - lows[li][j]) * s / k
                    hi = lows[li][j] + (highs[li][j] - lows[li][j]) * (s + 1) / k
                    if (lo <= x < hi) or (s == k - 1 and x == highs[li][j]):
                        out.add((li, j, s))
            elif kind in ("nbc", "snac"):
                if x > highs[li][j]:
                    out.add((li, j, "upper"))
                if kind == "nbc" and x < lows[li][j]:
                    out.add((li, j, "lower"))
    return out


def top_k_set(values, k: int) -> frozenset[int]:
    """DeepGauge's top_k(x, i): the indices of the k largest outputs of one input's layer,
    ties to the lower neuron index (sorted by value descending, then index ascending)."""
    order = sorted(range(len(values)), key=lambda j: (-values[j], j))
    return frozenset(order[:k])


def tknc(layers, k: int) -> float:
    """DeepGauge TKNC: |union over inputs and layers of top_k(x, i)| / |N|."""
    covered = total = 0
    for layer in layers:
        v = _neuron_values(layer)
        total += v.shape[1]
        union: set[int] = set()
        for i in range(len(v)):
            union |= top_k_set(list(v[i]), k)
        covered += len(union)
    return covered / total


def tknp(layers, k: int) -> int:
    """DeepGauge TKNP: the number of distinct (top_k(x, 1), ..., top_k(x, l)) over the inputs."""
    values = [_neuron_values(layer) for layer in layers]
    patterns = {tuple(top_k_set(list(v[i]), k) for v in values) for i in range(len(values[0]))}
    return len(patterns)


def nlc(layers) -> float:
    """NeuraL Coverage (Yuan et al. 2023, NeuraL-Coverage's code after its 2024 fix): per layer,
    the covariance of the outputs over all inputs (divided by n), the mean of its absolute
    entries; summed over the layers."""
    total = 0.0
    for layer in layers:
        v = _neuron_values(layer).astype(float)
        n, m = v.shape
        mean = [sum(v[i, a] for i in range(n)) / n for a in range(m)]
        entries = 0.0
        for a in range(m):
            for b in range(m):
                cov = sum((v[i, a] - mean[a]) * (v[i, b] - mean[b]) for i in range(n)) / n
                entries += abs(cov)
        total += entries / (m * m)
    return total


def cc(layers, threshold: float) -> int:
    """TensorFuzz cluster coverage: per layer, inputs in order; one farther than threshold
    (Euclidean) from every centre so far becomes a centre; the centres of all layers."""
    total = 0
    for layer in layers:
        v = _neuron_values(layer).astype(float)
        centres: list[np.ndarray] = []
        for x in v:
            if all(math.dist(x, c) > threshold for c in centres):
                centres.append(x)
        total += len(centres)
    return total


# ---------------------------------------------------------------- dnn-tip's options (issue 36)


def std(values) -> float:
    """The population standard deviation (ddof=0) of a list of numbers, as a sum."""
    values = [float(v) for v in values]
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def nbc_std(layers, lows, highs, stds, scale: float) -> float:
    """dnn-tip's NBC with ``scaler``: the lower corner below ``low - scale * std``, the upper
    above ``high + scale * std`` (strict, as pytest-sadl's NBC), over ``2 |N|`` corners."""
    lows = [[lo - scale * s for lo, s in zip(low, sd, strict=True)] for low, sd in zip(lows, stds, strict=True)]
    highs = [[hi + scale * s for hi, s in zip(high, sd, strict=True)] for high, sd in zip(highs, stds, strict=True)]
    return nbc(layers, lows, highs)


def snac_std(layers, highs, stds, scale: float) -> float:
    """dnn-tip's SNAC with ``scaler``: neurons above ``high + scale * std``."""
    highs = [[hi + scale * s for hi, s in zip(high, sd, strict=True)] for high, sd in zip(highs, stds, strict=True)]
    return snac(layers, highs, highs)


def top_variance_neurons(rows: np.ndarray, candidates, m: int) -> list[int]:
    """dnn-tip's LSA ``max_features``: of ``candidates``, the ``m`` neurons of highest
    variance (ddof=0) over ``rows``; on equal variances the lower index first."""
    ranked = sorted(candidates, key=lambda j: (-float(np.var(rows[:, j])), j))
    return sorted(ranked[:m]) if m else sorted(candidates)


def lsa_max_features(train, train_pred, tests, pred, m: int, var_threshold: float = 1e-5) -> np.ndarray:
    """LSA per class over the class's ``m`` highest-variance neurons among those whose
    variance in the class is at least ``var_threshold`` (``var_rule="class"``)."""
    train_pred = np.zeros(len(train), int) if train_pred is None else np.asarray(train_pred)
    out = []
    for x, c in zip(tests, pred, strict=True):
        rows = train[train_pred == c]
        varying = [j for j in range(train.shape[1]) if np.var(rows[:, j]) >= var_threshold]
        keep = top_variance_neurons(rows, varying, m)
        out.append(-kde_log_density(rows[:, keep], x[keep]))
    return np.array(out)


def dnn_tip_subsample(n: int, size: int, seed: int) -> list[int]:
    """The rows dnn-tip's ``_subsample_arrays(size, ..., seed)`` keeps of ``n``: ``size``
    distinct rows drawn by ``np.random.RandomState(seed).choice`` (all when ``size >= n``)."""
    if size >= n:
        return list(range(n))
    return sorted(int(i) for i in np.random.RandomState(seed).choice(np.arange(n), size, replace=False))


def dsa_subsample(train, train_pred, tests, pred, size: int, seed: int) -> np.ndarray:
    """DSA set up on dnn-tip's subsample of the training traces."""
    rows = dnn_tip_subsample(len(train), size, seed)
    return dsa(train[rows], np.asarray(train_pred)[rows], tests, pred)


def silhouette(x: np.ndarray, labels) -> float:
    """The mean silhouette coefficient (Rousseeuw 1987), Euclidean: for each point, ``a``
    its mean distance to the other points of its cluster, ``b`` the smallest mean distance
    to another cluster's points, ``s = (b - a) / max(a, b)``; 0 for a point alone in its cluster."""
    labels = list(labels)
    total = 0.0
    for i, xi in enumerate(x):
        dist: dict = {}
        for j, xj in enumerate(x):
            if j != i:
                dist.setdefault(labels[j], []).append(float(np.linalg.norm(xi - xj)))
        own = dist.get(labels[i], [])
        if not own:
            continue
        a = sum(own) / len(own)
        b = min(sum(d) / len(d) for lab, d in dist.items() if lab != labels[i])
        total += (b - a) / max(a, b)
    return total / len(x)
