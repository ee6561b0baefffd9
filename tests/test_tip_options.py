"""dnn-tip's options (issue 36), each against a naive reference written from dnn-tip's
definition (tests/naive.py): NBC/SNAC boundaries scaled by the training standard deviation,
LSA on each class's ``max_features`` highest-variance neurons, DSA on a seeded subsample of
the training traces, MMDSA's modes chosen by the silhouette score. On synthetic arrays with
their edge cases, on a real Keras model's traces, through a stored profile, and (one test)
through a pytest run."""

from __future__ import annotations

import warnings
from pathlib import Path

import naive
import numpy as np
import pytest
from sklearn.cluster import KMeans

from pytest_sadl.config import SadlOptions
from pytest_sadl.criteria.modes import MMDSA
from pytest_sadl.criteria.neurons import (
    NeuronBoundaryCoverage,
    NeuronRanges,
    RangeFit,
    StrongNeuronActivationCoverage,
    fit_ranges,
    nbc,
    snac,
)
from pytest_sadl.criteria.surprise import DSA, LSA


@pytest.fixture(autouse=True)
def _one_thread():
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        yield


def _layers(rng, n):
    """Two layers; neuron 2 of the first is constant (zero standard deviation)."""
    a = rng.normal(size=(n, 4))
    a[:, 2] = 0.25
    return [a, np.abs(rng.normal(size=(n, 3))) * 3.0]


# ------------------------------------------------------------------ NBC / SNAC std


def _close(got, want):
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-15)


def test_ranges_keep_each_neurons_training_std_whatever_the_batches(tmp_path):
    rng = np.random.default_rng(0)
    train = _layers(rng, 500)
    want = [[naive.std(a[:, j]) for j in range(a.shape[1])] for a in train]
    whole = fit_ranges(train)
    _close(whole.std, want)
    assert whole.std[0][2] == 0.0  # the constant neuron
    # in uneven batches, and two fits merged (a Dask build's shards)
    first, second = RangeFit([4, 3]), RangeFit([4, 3])
    for i, a in enumerate(train):
        for lo, hi in ((0, 7), (7, 200), (200, 300)):
            first.update(i, a[lo:hi], lo)
        second.update(i, a[300:], 0)
    first.merge(second, 300)
    _close(first.result().std, want)
    # stored and read back (a profile's arrays); ranges stored without std read as None
    back = NeuronRanges.from_arrays(whole.to_arrays())
    np.testing.assert_array_equal(np.concatenate(back.std), np.concatenate(whole.std))
    old = {k: v for k, v in whole.to_arrays().items() if k != "std"}
    assert NeuronRanges.from_arrays(old).std is None


@pytest.mark.parametrize("scale", [0.0, 0.5, 1.0, 2.0])
def test_nbc_and_snac_with_std_scaled_boundaries_are_dnn_tips(scale):
    rng = np.random.default_rng(1)
    train, tests = _layers(rng, 400), _layers(rng, 60)
    tests[0][:5, 2] = [0.25, 0.3, 0.2, 0.25, 0.25]  # the constant neuron: above, below, at
    tests[1] *= 1.3
    ranges = fit_ranges(train)
    lows, highs, stds = naive.ranges(train)[0], naive.ranges(train)[1], ranges.std
    want_nbc = naive.nbc_std(tests, lows, highs, stds, scale)
    want_snac = naive.snac_std(tests, highs, stds, scale)
    assert nbc(tests, ranges, scale) == pytest.approx(want_nbc, abs=0)
    assert snac(tests, ranges, scale) == pytest.approx(want_snac, abs=0)
    # cumulative, in batches, merged
    a, b = NeuronBoundaryCoverage(ranges, scale), NeuronBoundaryCoverage(ranges, scale)
    a.update([t[:20] for t in tests])
    b.update([t[20:] for t in tests])
    a.merge(b)
    assert a.value == want_nbc
    # the zero-std neuron's boundaries are its training value: covered only strictly beyond it
    assert a.covered[2].tolist() == [True, True]
    if scale == 0:
        assert nbc(tests, ranges, 0.0) == nbc(tests, NeuronRanges(ranges.low, ranges.high))


def test_wider_boundaries_cover_fewer_corners_and_do_not_merge_with_others():
    rng = np.random.default_rng(2)
    train, tests = _layers(rng, 300), [2.0 * a for a in _layers(rng, 300)]
    ranges = fit_ranges(train)
    values = [nbc(tests, ranges, s) for s in (0.0, 0.5, 1.0, 3.0)]
    assert values == sorted(values, reverse=True) and values[0] > values[-1]
    with pytest.raises(ValueError, match="criterion, layers or parameters differ"):
        StrongNeuronActivationCoverage(ranges, 1.0).merge(StrongNeuronActivationCoverage(ranges, 0.0))
    with pytest.raises(ValueError, match="std_scale must be a finite number >= 0"):
        NeuronBoundaryCoverage(ranges, -1.0)
    stored_before = NeuronRanges(ranges.low, ranges.high)  # a profile stored before std was kept
    with pytest.raises(ValueError, match=r"stored without; rebuild it \(sadl profile build --rebuild"):
        NeuronBoundaryCoverage(stored_before, 0.5)
    assert NeuronBoundaryCoverage(stored_before, 0.0).total == 14


def test_ranges_fitted_without_std_are_the_same_bounds_and_refuse_a_std_scale():
    rng = np.random.default_rng(3)
    train, tests = _layers(rng, 300), [2.0 * a for a in _layers(rng, 300)]
    full, lean = fit_ranges(train), fit_ranges(train, std=False)
    assert lean.std is None and full.std is not None
    for a, b in zip(full.low + full.high, lean.low + lean.high, strict=True):
        assert a.tobytes() == b.tobytes()
    assert nbc(tests, lean) == nbc(tests, full) and snac(tests, lean) == snac(tests, full)
    with pytest.raises(ValueError, match=r"in code, fit_ranges\(\.\.\., std=True\)"):
        nbc(tests, lean, 0.5)
    bad = [train[0].copy(), train[1]]
    bad[0][7, 1] = np.nan  # the finiteness check does not depend on the moments
    with pytest.raises(ValueError, match=r"train_layers\[0\] contains NaN values in 1 row\(s\) \(first: row 7\)"):
        fit_ranges(bad, std=False)


# ------------------------------------------------------------------ LSA max_features


def _classes(rng, n=150, d=6):
    x = rng.normal(size=(n, d)) * np.array([3.0, 0.5, 2.0, 1.0, 1.0, 0.2])[:d]
    x[:, 4] = x[:, 3]  # neurons 3 and 4: equal variances (the tie goes to the lower index)
    pred = rng.integers(0, 3, n)
    x += pred[:, None] * 0.7
    return x, pred


@pytest.mark.parametrize("m", [1, 2, 4, 5, 6, 50])
def test_lsa_max_features_is_each_classs_m_highest_variance_neurons(m):
    rng = np.random.default_rng(3)
    train, pred = _classes(rng)
    train = np.hstack([train, np.zeros((len(train), 1))])  # a constant neuron the variance filter drops
    tests, tests_pred = rng.normal(size=(12, 7)) * 2, rng.integers(0, 3, 12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # neurons 3 and 4 are dependent: the KDE drops one, said once
        lsa = LSA(train, pred, max_features=m)
        got = lsa(tests, tests_pred)
    for c, cols in lsa.kept_by_class.items():
        rows = train[pred == c]
        varying = [j for j in range(7) if np.var(rows[:, j]) >= 1e-5]
        want = naive.top_variance_neurons(rows, varying, m)
        if 4 in want and 3 in want:  # the dependent pair: LSA's near-singular rule drops one of them
            want.remove(4)
        assert cols.tolist() == want
    if m >= 6:  # more than the neurons: every one the filter keeps, as without the option
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            np.testing.assert_array_equal(got, LSA(train, pred)(tests, tests_pred))
    if m <= 3:  # no dependent pair left to drop: exactly the naive KDE over those neurons
        np.testing.assert_allclose(got, naive.lsa_max_features(train, pred, tests, tests_pred, m), rtol=1e-10)
    with pytest.raises(ValueError, match="max_features must be a whole number >= 0"):
        LSA(train, pred, max_features=-1)


# ------------------------------------------------------------------ DSA subsample


@pytest.mark.parametrize(("size", "seed"), [(40, 0), (40, 7), (149, 3), (150, 0), (1000, 0)])
def test_dsa_on_a_seeded_subsample_is_dnn_tips_draw(size, seed):
    from pytest_sadl.criteria.metrics.dsc import fit
    from pytest_sadl.criteria.shape import Training

    rng = np.random.default_rng(4)
    train, pred = _classes(rng)
    tests, tests_pred = rng.normal(size=(15, 6)) * 2, rng.integers(0, 3, 15)
    options = SadlOptions(extra={"dsa_subsample": size, "dsa_seed": seed})
    got = fit(Training(train, pred, options=options))(tests, tests_pred)
    np.testing.assert_allclose(got, naive.dsa_subsample(train, pred, tests, tests_pred, size, seed), rtol=1e-12)
    if size >= len(train):  # the subsample is the training set: today's DSA
        np.testing.assert_array_equal(got, DSA(train, pred)(tests, tests_pred))


# ------------------------------------------------------------------ MMDSA silhouette


def _naive_silhouette_centroids(train, pred, most, seed=0, keep=None):
    """Per class, dnn-tip's choice: k-means (seeded) for each k in 2..most, the labels with
    the highest mean silhouette (naive), the first on a tie; one mode without a candidate."""
    out = {}
    for c in np.unique(pred):
        xc = train[pred == c] if keep is None else train[pred == c][:, keep]
        best, score = None, -np.inf
        for k in range(2, min(most, len(xc) - 1) + 1):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                km = KMeans(n_clusters=k, n_init=10, max_iter=300, random_state=seed).fit(xc)
            if not 2 <= len(set(km.labels_)) < len(xc):
                continue
            s = naive.silhouette(xc, km.labels_)
            if s > score:
                best, score = km, s
        if best is None:
            best = KMeans(n_clusters=1, n_init=10, max_iter=300, random_state=seed).fit(xc)
        out[int(c)] = best.cluster_centers_
    return out


def _modes(rng):
    x, pred = [], []
    for c, modes in enumerate((2, 3, 1)):  # class 0: two clusters, class 1: three, class 2: one
        for j in range(modes):
            x.append(rng.normal(loc=8.0 * j, scale=1.0, size=(60, 3)))
            pred += [c] * 60
    return np.concatenate(x), np.array(pred)


@pytest.mark.parametrize("most", [2, 3, 5])
def test_mmdsa_modes_by_silhouette_are_dnn_tips_choice(most):
    rng = np.random.default_rng(5)
    train, pred = _modes(rng)
    tests, tests_pred = rng.normal(scale=6.0, size=(20, 3)) + 4, rng.integers(0, 3, 20)
    mmdsa = MMDSA(train, pred, silhouette=most)
    centroids = _naive_silhouette_centroids(train, pred, most)
    assert {c: km.n_clusters for c, (km, _) in mmdsa.kmeans.items()} == {c: len(m) for c, m in centroids.items()}
    if most >= 3:
        assert mmdsa.kmeans[1][0].n_clusters == 3
    np.testing.assert_allclose(
        mmdsa(tests, tests_pred), naive.mmdsa(train, pred, tests, tests_pred, centroids), rtol=1e-8
    )


def test_mmdsa_silhouette_edge_cases():
    rng = np.random.default_rng(6)
    train = np.vstack([rng.normal(size=(40, 2)), [[5.0, 5.0], [6.0, 6.0]], np.full((10, 2), 3.0)])
    pred = np.array([0] * 40 + [1] * 2 + [2] * 10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the one-trace modes' note
        mmdsa = MMDSA(train, pred, silhouette=4, var_threshold=0.0)  # class 2 does not vary
    # class 1: two traces, no k with 2 <= k < n (the silhouette is undefined): one mode;
    # class 2: ten equal traces, k-means finds one cluster whatever k: one mode
    assert mmdsa.kmeans[1][0].n_clusters == 1 and mmdsa.kmeans[2][0].n_clusters == 1
    assert 2 <= mmdsa.kmeans[0][0].n_clusters <= 4
    for bad in (1, -1, True):
        with pytest.raises(ValueError, match=r"silhouette must be 0 \(off"):
            MMDSA(train, pred, silhouette=bad)
    np.testing.assert_array_equal(  # 0: off, the fixed modes
        MMDSA(train[:40], pred[:40], silhouette=0)(train[:5], pred[:5]),
        MMDSA(train[:40], pred[:40])(train[:5], pred[:5]),
    )


# ------------------------------------------------------------------ a real Keras model's traces


@pytest.fixture(scope="module")
def real(dense_model, digits):
    from pytest_sadl.capture import trace_model

    tm = trace_model(dense_model, ["hidden2"], None, extrema=True)
    train, tests = tm.traces(digits.x_train), tm.traces(digits.x_test[:40])
    return train, tests


def test_every_option_on_a_real_models_traces(real):
    train, tests = real
    x, p, t, tp = np.asarray(train.sa, np.float64), np.asarray(train.pred), np.asarray(tests.sa, np.float64), tests.pred
    # NBC and SNAC on every coverage layer of the model
    ranges = fit_ranges(train.coverage)
    lows, highs = naive.ranges(train.coverage)
    stds = [[naive.std(a[:, j]) for j in range(a.shape[1])] for a in train.coverage]
    for got, want in zip(ranges.std, stds, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    for s in (0.5, 1.0):
        assert nbc(tests.coverage, ranges, s) == naive.nbc_std(tests.coverage, lows, highs, stds, s)
        assert snac(tests.coverage, ranges, s) == naive.snac_std(tests.coverage, highs, stds, s)
    # LSA on 4 of the 16 neurons of each class
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = LSA(x, p, max_features=4)(t, tp)
    np.testing.assert_allclose(got, naive.lsa_max_features(x, p, t, tp, 4), rtol=1e-9)
    # DSA on 300 of the training traces
    from pytest_sadl.criteria.metrics.dsc import fit
    from pytest_sadl.criteria.shape import Training

    dsa = fit(Training(x, p, options=SadlOptions(extra={"dsa_subsample": 300, "dsa_seed": 1})))
    np.testing.assert_allclose(dsa(t, tp), naive.dsa_subsample(x, p, t, tp, 300, 1), rtol=1e-10)
    # MMDSA, modes by silhouette among 2..3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mmdsa = MMDSA(x, p, silhouette=3)
        got = mmdsa(t, tp)
    keep = naive.kept_neurons(x, p, 1e-5)
    centroids = _naive_silhouette_centroids(x, p, 3, keep=keep)
    want = naive.mmdsa(x, p, t, tp, centroids)
    np.testing.assert_allclose(got, want, rtol=1e-7)


# ------------------------------------------------------------------ through a stored profile


def test_options_flow_through_a_stored_profile_without_stale_values(dense_model, digits, tmp_path):
    from pytest_sadl.engine import ProfileView, default_sc_bounds
    from pytest_sadl.profile.build import ProfileOptions
    from pytest_sadl.profile.files import load_profile
    from pytest_sadl.profile.lookup import load_or_build

    prof = load_or_build(dense_model, digits.x_train, ProfileOptions(sa_layers=("hidden2",)), tmp_path)
    stored = load_profile(prof.path)
    cov = prof.trace_model(dense_model).traces(digits.x_train).coverage
    # the std is stored with the ranges. The build's pass and this one batch the inputs differently,
    # and on some CPUs' kernels (oneDNN limited to AVX2, as on AMD machines) a float32 trace then
    # differs in its last bits: the std agrees to float32's precision, not to float64's
    for got, a in zip(stored.ranges.std, cov, strict=True):
        np.testing.assert_allclose(got, [naive.std(a[:, j]) for j in range(a.shape[1])], rtol=1e-6, atol=1e-9)
    x, p = np.asarray(stored.sa_traces, np.float64), np.asarray(stored.sa_pred)
    tests = prof.trace_model(dense_model).traces(digits.x_test[:30])
    t, tp = np.asarray(tests.sa, np.float64), tests.pred
    metrics = ["lsc", "dsc", "mmdsc"]
    default = ProfileView.of(stored, metrics, SadlOptions(metrics=tuple(metrics)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = default.score(t, tp)  # caches the profile's LSA and DSA
        default_sc_bounds(default)
        options = SadlOptions(
            metrics=tuple(metrics),
            extra={"lsa_max_features": 3, "dsa_subsample": 200, "dsa_seed": 2, "mmdsa_silhouette": 3},
        )
        view = ProfileView.of(stored, metrics, options)
        after = view.score(t, tp)
        default_sc_bounds(view)
        mmdsa = MMDSA(x, p, silhouette=3)(t, tp)
    np.testing.assert_allclose(after["lsa"], naive.lsa_max_features(x, p, t, tp, 3), rtol=1e-9)
    np.testing.assert_allclose(after["dsa"], naive.dsa_subsample(x, p, t, tp, 200, 2), rtol=1e-10)
    np.testing.assert_array_equal(after["mmdsa"], mmdsa)
    assert not np.allclose(after["lsa"], before["lsa"]) and not np.allclose(after["dsa"], before["dsa"])
    # the held-out scores of the default bounds: the defaults' names as before, the options' their own
    names = sorted(f.name.split(".")[1] for f in Path(stored.path).glob("extra.heldout-*"))
    assert names == [
        "heldout-dsa-1000",
        "heldout-dsa-s200-2-1000",
        "heldout-lsa-1000",
        "heldout-lsa-f3-1000",
        "heldout-mmdsa-m2-1000",
        "heldout-mmdsa-m2-s3-1000",
    ]
    again = ProfileView.of(stored, metrics, SadlOptions(metrics=tuple(metrics))).score(t, tp)
    np.testing.assert_array_equal(again["lsa"], before["lsa"])  # the default is not the option's


def test_a_silhouette_of_one_mode_is_a_usage_error(pytester):
    """``--sadl-mmdsa-silhouette`` takes 0 (off) or the most modes to try, 2 or more: 1 (no
    choice to make) and negatives are refused in one line, as its ini twin is."""
    from pytest_sadl.plugin.options import read_options

    assert (
        read_options(pytester.parseconfig("--sadl-coverage", "--sadl-mmdsa-silhouette=3")).param("mmdsa_silhouette")
        == 3
    )
    assert read_options(pytester.parseconfig("--sadl-coverage")).param("mmdsa_silhouette") == 0
    for bad in ("1", "-2"):
        with pytest.raises(pytest.UsageError, match=r"^--sadl-mmdsa-silhouette=-?\d: MMDSA's silhouette is 0 \(off\)"):
            read_options(pytester.parseconfig("--sadl-coverage", f"--sadl-mmdsa-silhouette={bad}"))
    pytester.makeini("[pytest]\nsadl_mmdsa_silhouette = 1\n")
    with pytest.raises(pytest.UsageError, match="2 or more"):
        read_options(pytester.parseconfig("--sadl-coverage"))
