"""LSA, DSA and surprise coverage against naive references written from the paper."""

from __future__ import annotations

import warnings

import naive
import numpy as np
import pytest
import scipy.stats

from pytest_sadl.criteria.surprise import DSA, LSA, SurpriseCoverage, surprise_coverage
from pytest_sadl.errors import SadlWarning


def clustered(rng, n, d, classes, spread=1.0, scale=3.0):
    """Traces clustered by class, as a classifier's hidden layer gives them."""
    centres = rng.normal(scale=scale, size=(classes, d))
    pred = rng.integers(0, classes, n)
    return centres[pred] + rng.normal(scale=spread, size=(n, d)), pred


def rel_err(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return np.max(np.abs(a - b) / np.maximum(np.abs(b), 1.0))


# ----------------------------------------------------------------------------- LSA


@pytest.mark.parametrize("d", [1, 3, 12])
def test_lsa_matches_naive_kde_and_scipy(d):
    rng = np.random.default_rng(d)
    train, tp = clustered(rng, 400, d, 3)
    tests, pred = clustered(rng, 60, d, 3, spread=2.0)
    lsa = LSA(train, tp)
    got = lsa(tests, pred)
    assert got.dtype == np.float64 and got.shape == (60,)
    assert rel_err(got, naive.lsa(train, tp, tests, pred)) < 1e-6
    for c in range(3):
        kde = scipy.stats.gaussian_kde(train[tp == c][:, lsa.kept].T)
        m = pred == c
        assert rel_err(got[m], -kde.logpdf(tests[m][:, lsa.kept].T)) < 1e-6


@pytest.mark.parametrize(("n", "d"), [(7, 3), (130, 29), (1000, 64)])
def test_lsa_covariance_and_whitening_are_scipys_bit_for_bit(n, d):
    """The set-up calls LAPACK directly and forms the covariance by one product: the
    numbers must stay those of ``np.cov`` (as ``gaussian_kde`` calls it) and of
    ``scipy.linalg``'s Cholesky factor and triangular solve, bit for bit; a class's mean
    and variance those of ``np.mean`` and ``np.var``."""
    from scipy import linalg

    from pytest_sadl.criteria.surprise import _cov, _whitening

    rng = np.random.default_rng(n)
    xc = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + rng.normal(size=d)
    ref = np.cov(xc.T, rowvar=True, bias=False, aweights=np.full(n, 1.0 / n))
    assert np.array_equal(_cov(xc), ref)
    factor = n ** (-1.0 / (d + 4))
    chol = linalg.cholesky(ref, lower=True) * factor
    whiten, log_det = _whitening(ref, factor, strict=False)
    assert np.array_equal(whiten, linalg.solve_triangular(chol, np.eye(d), lower=True).T)
    assert log_det == 2.0 * np.log(np.diag(chol) * np.sqrt(2 * np.pi)).sum()
    assert _whitening(np.diag([1.0, -1.0]), 1.0, strict=False) is None  # not positive definite
    assert _whitening(np.diag([1.0, 1e-12]), 1.0, strict=True) is None  # near singular
    rows = np.arange(0, n, 2)
    mean, _, var = LSA(xc, np.zeros(n, dtype=np.int64))._moments(rows)
    assert np.array_equal(mean, xc[rows].mean(axis=0)) and np.array_equal(var, xc[rows].var(axis=0))


def test_lsa_without_classes_is_one_kde_over_all_traces():
    rng = np.random.default_rng(1)
    train, _ = clustered(rng, 300, 4, 2)
    tests = rng.normal(size=(40, 4))
    got = LSA(train)(tests)
    ref = -scipy.stats.gaussian_kde(train.T).logpdf(tests.T)
    assert rel_err(got, ref) < 1e-6
    with pytest.raises(ValueError, match="without classes"):
        LSA(train)(tests, np.zeros(40, int))
    with pytest.raises(ValueError, match="pass the predicted classes"):
        LSA(train, np.zeros(300, int))(tests)


def test_lsa_paper_variance_rule_drops_neurons_low_in_any_class():
    rng = np.random.default_rng(2)
    train, tp = clustered(rng, 300, 5, 2)
    train[tp == 1, 2] = 0.7  # constant in class 1 only: dropped for every class
    train[:, 4] *= 1e-4  # variance ~1e-8 everywhere
    lsa = LSA(train, tp, var_threshold=1e-5, var_rule="paper")
    assert lsa.kept.tolist() == [0, 1, 3]
    assert {c: v.tolist() for c, v in lsa.kept_by_class.items()} == {0: [0, 1, 3], 1: [0, 1, 3]}
    tests, pred = clustered(rng, 20, 5, 2)
    want = naive.lsa(train, tp, tests, pred, var_rule="paper")
    assert rel_err(lsa(tests, pred), want) < 1e-6
    assert LSA.from_arrays(lsa.to_arrays()).var_rule == "paper"


def test_lsa_default_variance_rule_drops_neurons_per_class():
    """A neuron constant in one class (a ReLU that never fires for it) is dropped from
    that class's KDE only; the others keep it; the values are the naive per-class KDEs."""
    rng = np.random.default_rng(2)
    train, tp = clustered(rng, 300, 5, 2)
    train[tp == 1, 2] = 0.7  # constant in class 1 only
    train[:, 4] *= 1e-4  # variance ~1e-8 everywhere: dropped from both
    lsa = LSA(train, tp, var_threshold=1e-5)
    assert lsa.var_rule == "class"
    assert {c: v.tolist() for c, v in lsa.kept_by_class.items()} == {0: [0, 1, 2, 3], 1: [0, 1, 3]}
    assert lsa.kept.tolist() == [0, 1, 2, 3]
    tests, pred = clustered(rng, 20, 5, 2)
    got = lsa(tests, pred)
    assert rel_err(got, naive.lsa(train, tp, tests, pred)) < 1e-6
    for c, cols in lsa.kept_by_class.items():  # exactly SciPy's KDE of the class on its neurons
        ref = -scipy.stats.gaussian_kde(train[tp == c][:, cols].T).logpdf(tests[pred == c][:, cols].T)
        assert rel_err(got[pred == c], ref) < 1e-6
    assert not np.allclose(got, naive.lsa(train, tp, tests, pred, var_rule="paper"))
    again = LSA.from_arrays(lsa.to_arrays())
    assert again.var_rule == "class" and np.array_equal(again(tests, pred), got)
    with pytest.raises(ValueError, match="var_rule must be 'class' or 'paper'"):
        LSA(train, tp, var_rule="any")


def test_lsa_every_neuron_constant_in_some_class_is_defined_per_class():
    """The failure mode of briefly trained wide layers: every neuron is constant in some
    class, so the paper's rule keeps none; per class every class still has a KDE."""
    rng = np.random.default_rng(4)
    tp = np.repeat([0, 1], 150)
    train = np.abs(rng.normal(size=(300, 2))) + 0.1
    train[tp == 0, 0] = 0.0  # dead for class 0
    train[tp == 1, 1] = 0.0  # dead for class 1
    with pytest.raises(ValueError, match="every one of the 2 neurons has a training variance below.*in some class"):
        LSA(train, tp, var_rule="paper")
    lsa = LSA(train, tp)
    assert {c: v.tolist() for c, v in lsa.kept_by_class.items()} == {0: [1], 1: [0]}
    tests = np.abs(rng.normal(size=(10, 2)))
    pred = np.repeat([0, 1], 5)
    assert rel_err(lsa(tests, pred), naive.lsa(train, tp, tests, pred)) < 1e-6
    train[:, 1] = 0.0  # now class 0 varies in nothing: no KDE for it, with a warning
    with pytest.warns(SadlWarning, match=r"no neuron has a training variance .* in class\(es\) \[0\]"):
        lsa = LSA(train, tp)
    assert lsa.classes == [1]


def test_lsa_every_neuron_filtered_is_a_clear_error():
    train = np.ones((50, 3)) + np.random.default_rng(0).normal(scale=1e-6, size=(50, 3))
    with pytest.raises(ValueError, match="every one of the 3 neurons.*lower var_threshold"):
        LSA(train, np.zeros(50, int))


def test_lsa_far_inputs_do_not_underflow():
    rng = np.random.default_rng(3)
    train = rng.normal(size=(200, 3))
    far = np.array([[60.0, -60.0, 60.0], [200.0, 0.0, 0.0]])
    got = LSA(train)(far)
    ref = -scipy.stats.gaussian_kde(train.T).logpdf(far.T)
    assert np.all(np.isfinite(got)) and rel_err(got, ref) < 1e-6


def test_lsa_singular_covariance_drops_dependent_neurons_with_warning():
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(500, 4))
    softmax = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)  # rows sum to one
    with pytest.warns(SadlWarning, match="subspace.*dropping"):
        lsa = LSA(softmax, None)
    assert lsa.kept.size == 3
    tests = softmax[:10] + 0.01
    got = lsa(tests)
    ref = -scipy.stats.gaussian_kde(softmax[:, lsa.kept].T).logpdf(tests[:, lsa.kept].T)
    assert rel_err(got, ref) < 1e-6


def test_lsa_shared_dependency_drops_one_neuron_for_all_classes():
    rng = np.random.default_rng(8)
    logits, tp = clustered(rng, 3000, 6, 5, scale=1.0)
    probs = np.exp(logits / 3) / np.exp(logits / 3).sum(axis=1, keepdims=True)
    with pytest.warns(SadlWarning, match="dropping the linearly dependent neuron"):
        lsa = LSA(probs, tp, var_threshold=0.0)
    assert lsa.kept.size == 5 and lsa.classes == [0, 1, 2, 3, 4]
    tests, pred = probs[:50], tp[:50]
    got = lsa(tests, pred)
    for c in lsa.classes:
        kde = scipy.stats.gaussian_kde(probs[tp == c][:, lsa.kept].T)
        assert rel_err(got[pred == c], -kde.logpdf(tests[pred == c][:, lsa.kept].T)) < 1e-6


def test_lsa_class_with_too_few_traces_scores_nan_with_warning():
    rng = np.random.default_rng(5)
    train, tp = clustered(rng, 200, 4, 2)
    train = np.vstack([train, rng.normal(size=(3, 4))])
    tp = np.concatenate([tp, [7, 7, 7]])  # 3 traces for 4 neurons: no KDE
    with pytest.warns(SadlWarning, match="class 7 has 3 training traces"):
        lsa = LSA(train, tp)
    assert lsa.classes == [0, 1]
    with pytest.warns(SadlWarning, match=r"predicted class\(es\) \[7, 9\]"):
        got = lsa(rng.normal(size=(4, 4)), [0, 7, 9, 1])
    assert np.isnan(got[[1, 2]]).all() and np.isfinite(got[[0, 3]]).all()


@pytest.mark.parametrize(
    "args, match",
    [
        ((np.zeros((0, 3)), None), "empty"),
        ((np.zeros(5), None), "2-D"),
        ((np.zeros((5, 2, 2)), None), "2-D"),
        ((np.array([[0.0, np.nan]] * 5), None), "NaN"),
        ((np.array([[0.0, np.inf]] * 5), None), "inf"),
        ((np.random.default_rng(0).normal(size=(5, 2)), np.zeros(4, int)), r"expected shape \(5,\)"),
        ((np.random.default_rng(0).normal(size=(5, 2)), np.zeros((5, 3))), "argmax"),
        ((np.random.default_rng(0).normal(size=(5, 2)), np.array([0.5] * 5)), "integer class labels"),
    ],
)
def test_lsa_bad_training_input(args, match):
    with pytest.raises(ValueError, match=match):
        LSA(*args)


def test_lsa_bad_scoring_input():
    rng = np.random.default_rng(6)
    lsa = LSA(rng.normal(size=(100, 3)), rng.integers(0, 2, 100))
    with pytest.raises(ValueError, match="3 neurons|training traces have 3"):
        lsa(rng.normal(size=(4, 5)), np.zeros(4, int))
    with pytest.raises(ValueError, match="NaN"):
        lsa(np.full((2, 3), np.nan), [0, 1])
    assert lsa(np.zeros((0, 3)), np.zeros(0, int)).shape == (0,)
    with pytest.raises(ValueError, match="var_threshold"):
        LSA(rng.normal(size=(10, 2)), var_threshold=-1)


def test_lsa_round_trips_through_arrays():
    rng = np.random.default_rng(7)
    train, tp = clustered(rng, 120, 3, 2)
    lsa = LSA(train, tp, var_threshold=1e-3)
    again = LSA.from_arrays(lsa.to_arrays())
    x, p = clustered(rng, 10, 3, 2)
    np.testing.assert_array_equal(lsa(x, p), again(x, p))


# ----------------------------------------------------------------------------- DSA


@pytest.mark.parametrize("d", [1, 4, 30])
def test_dsa_matches_equations_3_to_5(d):
    rng = np.random.default_rng(10 + d)
    train, tp = clustered(rng, 500, d, 4)
    tests, pred = clustered(rng, 80, d, 4, spread=2.0)
    got = DSA(train, tp, chunk_bytes=4096)(tests, pred)  # small chunks: many chunk boundaries
    assert rel_err(got, naive.dsa(train, tp, tests, pred)) < 1e-9


def test_dsa_dist_b_is_measured_from_x_a_not_from_x():
    # x lies near class 1's trace, its own class 0 trace x_a lies far from class 1.
    train = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 5.0]])
    tp = np.array([0, 1, 1])
    x = np.array([[8.0, 0.0]])
    got = DSA(train, tp)(x, [0])
    # dist_a = |x - (0,0)| = 8; x_b is (0,5) nearest to x_a, dist_b = 5 (not 2, the distance from x).
    assert got == pytest.approx([8.0 / 5.0])


def test_dsa_precompute_and_arrays_round_trip():
    rng = np.random.default_rng(11)
    train, tp = clustered(rng, 300, 5, 3)
    tests, pred = clustered(rng, 50, 5, 3)
    lazy = DSA(train, tp)
    expected = lazy(tests, pred)
    saved = DSA(train, tp).to_arrays()
    assert not np.isnan(saved["other_dist"]).any()
    ref_other = [
        np.linalg.norm(saved["train_ats"][saved["train_pred"] != c] - t, axis=1).min()
        for t, c in zip(saved["train_ats"], saved["train_pred"], strict=True)
    ]
    np.testing.assert_allclose(saved["other_dist"], ref_other, rtol=1e-12)
    np.testing.assert_allclose(DSA.from_arrays(saved)(tests, pred), expected, rtol=1e-12)


def test_dsa_ties_pick_the_neighbour_a_loop_picks():
    # Two same-class traces equidistant from x; their other-class distances differ.
    train = np.array([[1.0, 0.0], [-1.0, 0.0], [1.0, 3.0], [-1.0, -7.0]])
    tp = np.array([0, 0, 1, 1])
    got = DSA(train, tp)(np.array([[0.0, 0.0]]), [0])
    assert got == pytest.approx(naive.dsa(train, tp, np.array([[0.0, 0.0]]), [0]))


def test_dsa_edge_cases():
    rng = np.random.default_rng(12)
    with pytest.raises(ValueError, match="at least two predicted classes"):
        DSA(rng.normal(size=(10, 2)), np.zeros(10, int))
    with pytest.raises(ValueError, match="regression"):
        DSA(rng.normal(size=(10, 2)), None)
    dsa = DSA(rng.normal(size=(20, 2)), np.arange(20) % 2)
    with pytest.warns(SadlWarning, match=r"class\(es\) \[5\]"):
        got = dsa(rng.normal(size=(3, 2)), [0, 5, 1])
    assert np.isnan(got[1]) and np.isfinite(got[[0, 2]]).all()
    with pytest.raises(ValueError, match="predicted class"):
        dsa(rng.normal(size=(3, 2)), None)
    with pytest.raises(ValueError, match="training traces have 2"):
        dsa(rng.normal(size=(3, 4)), [0, 0, 0])
    dup = DSA(np.array([[0.0, 0.0], [0.0, 0.0], [3.0, 3.0]]), [0, 1, 1])
    assert np.isinf(dup(np.array([[1.0, 1.0]]), [0])[0])  # dist_b = 0: a duplicate in another class


# ----------------------------------------------------------------------------- SC


@pytest.mark.parametrize("lower, upper, buckets", [(0.0, 1.0, 10), (0.0, 2.0, 1000), (-3.0, 7.5, 37)])
def test_surprise_coverage_matches_equation_6(lower, upper, buckets):
    rng = np.random.default_rng(buckets)
    scores = rng.uniform(lower - 1, upper + 1, 300)
    # exact bucket edges and the bounds themselves
    edges = lower + (upper - lower) * np.arange(buckets + 1) / buckets
    scores = np.concatenate([scores, edges[::3], [lower, upper]])
    assert surprise_coverage(scores, lower=lower, upper=upper, buckets=buckets) == pytest.approx(
        naive.surprise_coverage(scores, lower, upper, buckets)
    )


def test_surprise_coverage_counts_values_outside_the_bounds():
    sc = SurpriseCoverage(0.0, 1.0, 10)
    assert sc.update([0.0, -1.0, 0.05, 0.3, 1.0, 1.5, np.nan]) == 3
    assert (sc.below, sc.above, sc.nan, sc.count) == (2, 1, 1, 7)
    # 0.3 lies in (0.2, 0.3], 1.0 in (0.9, 1.0]
    assert np.flatnonzero(sc.covered).tolist() == [0, 2, 9]


def test_cumulative_surprise_coverage_equals_one_shot_merged_or_not():
    rng = np.random.default_rng(20)
    scores = rng.gamma(2.0, 1.0, 500)
    one_shot = surprise_coverage(scores, lower=0.0, upper=8.0, buckets=200)
    a, b = SurpriseCoverage(0.0, 8.0, 200), SurpriseCoverage(0.0, 8.0, 200)
    new_total = sum(a.update(chunk) for chunk in np.array_split(scores[:300], 7))
    b.update(scores[300:])
    a.merge(b)
    assert a.value == one_shot and new_total <= a.covered.sum()
    assert a.count == 500 and a.above == int((scores > 8.0).sum())
    with pytest.raises(ValueError, match="cannot merge"):
        a.merge(SurpriseCoverage(0.0, 9.0, 200))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(lower=1.0, upper=1.0), "must be below"),
        (dict(lower=2.0, upper=1.0), "must be below"),
        (dict(lower=0.0, upper=np.inf), "finite"),
        (dict(lower=0.0, upper=1.0, buckets=0), "buckets"),
        (dict(lower=0.0, upper=1.0, buckets=2.5), "buckets"),
    ],
)
def test_surprise_coverage_bad_bounds(kwargs, match):
    with pytest.raises(ValueError, match=match):
        surprise_coverage([0.5], **kwargs)


def test_surprise_coverage_of_no_scores_is_zero():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert surprise_coverage([], lower=0, upper=1) == 0.0


# ----------------------------------------------------------------------------- near-singular LSA


def softmax_traces(rng, n, d, classes, scale=4.0):
    """float32 softmax outputs of clustered logits: rows sum to one up to float32 rounding,
    so each class's covariance is nearly singular (condition ~1e8 to ~1e15)."""
    centres = rng.normal(scale=scale, size=(classes, d))
    pred = rng.integers(0, classes, n)
    logits = centres[pred] + rng.normal(size=(n, d))
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32), pred


def test_lsa_keep_equals_scipy_where_the_covariance_is_positive_definite():
    rng = np.random.default_rng(3)
    probs, tp = softmax_traces(rng, 4000, 6, 4)
    tests, pred = probs[:200].astype(np.float64), tp[:200]
    with pytest.warns(SadlWarning, match="dropping"):
        drop = LSA(probs, tp, var_threshold=0.0)
    keep = LSA(probs, tp, var_threshold=0.0, near_singular="keep")
    assert drop.kept.size < 6 and keep.kept.size == 6
    got = keep(tests, pred)
    for c in range(4):
        assert keep.kept_by_class[c].tolist() == list(range(6))  # SciPy accepts every class
        train = probs[tp == c].astype(np.float64)
        m = pred == c
        ref = -scipy.stats.gaussian_kde(train.T).logpdf(tests[m].T)
        # SciPy's own answer moves when the training rows are merely reordered (the
        # covariance's condition number reaches 1e15 here): match it at least that well. Two
        # correct float64 factorisations of a covariance of condition k differ by ~k * 1e-16
        # along its smallest axes, which the log density weighs by the data's spread there:
        # SciPy 1.10 (the floor) factors the bandwidth-scaled covariance itself, another
        # rounding path, and differs from this one by 2.5e-6 on these traces: bound 1e-5.
        shuffled = -scipy.stats.gaussian_kde(train[rng.permutation(len(train))].T).logpdf(tests[m].T)
        assert rel_err(got[m], ref) < max(1e-5, 10 * rel_err(shuffled, ref))
        if np.linalg.cond(np.cov(train.T)) < 1e12:
            assert rel_err(got[m], ref) < 1e-6
    assert not np.allclose(got, drop(tests, pred), rtol=1e-3)  # the two modes really differ


def _scipy_refuses(data: np.ndarray) -> bool:
    try:
        scipy.stats.gaussian_kde(data.T)
    except np.linalg.LinAlgError:
        return True
    return False


def _lsa_refuses(data: np.ndarray) -> bool:
    """LSA with ``near_singular="keep"`` falls back on ``data`` as one class (its warning)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        LSA(data, np.zeros(len(data), dtype=int), near_singular="keep")
    return any("from these classes only" in str(w.message) for w in seen)


def test_lsa_keep_falls_back_only_for_classes_scipy_refuses():
    # A copied neuron in class 2 only makes its covariance singular in exact arithmetic;
    # whether a Cholesky factorisation sees a pivot of 0 or one of +1e-17 is rounding (it
    # differs between CPUs' BLAS kernels and between SciPy's versions, which compute the
    # covariance and its factor in other orders), so the data is one that SciPy and LSA's
    # own factorisation (class 2 alone) both refuse on this machine and SciPy version.
    for seed in range(4, 80):
        rng = np.random.default_rng(seed)
        train, tp = clustered(rng, 900, 4, 3)
        singular = tp == 2
        train[singular, 3] = train[singular, 0]
        if (
            _scipy_refuses(train[singular])
            and _lsa_refuses(train[singular])
            and not any(_scipy_refuses(train[tp == c]) for c in (0, 1))
        ):
            break
    else:
        pytest.fail("no seed gave a class SciPy refuses")
    with pytest.warns(SadlWarning, match=r"class\(es\) \[2\].*from these classes only"):
        lsa = LSA(train, tp, near_singular="keep")
    assert lsa.kept_by_class[0].tolist() == lsa.kept_by_class[1].tolist() == [0, 1, 2, 3]
    assert lsa.kept_by_class[2].size == 3
    tests, pred = clustered(rng, 60, 4, 3)
    got = lsa(tests, pred)
    for c in range(3):
        cols = lsa.kept_by_class[c]
        kde = scipy.stats.gaussian_kde(train[tp == c][:, cols].T)
        assert rel_err(got[pred == c], -kde.logpdf(tests[pred == c][:, cols].T)) < 1e-6
    with pytest.raises(ValueError, match="near_singular must be 'drop' or 'keep'"):
        LSA(train, tp, near_singular="ignore")
    with pytest.warns(SadlWarning, match="from these classes only"):
        again = LSA.from_arrays(lsa.to_arrays())
    assert again.near_singular == "keep"
    np.testing.assert_array_equal(again(tests, pred), got)


# ----------------------------------------------------------------------------- repeated traces, search methods


@pytest.mark.parametrize("search", ["tree", "blas"])
@pytest.mark.parametrize("d", [3, 24])
def test_dsa_repeated_traces_equal_the_naive_loop(search, d):
    rng = np.random.default_rng(30 + d)
    base, bp = clustered(rng, 300, d, 3)
    train = np.vstack([base] * 5 + [base[:50] + 0.5])  # every trace five times, some near-copies
    tp = np.concatenate([bp] * 5 + [bp[:50]])
    tests, pred = clustered(rng, 80, d, 3, spread=2.0)
    tests[:10], pred[:10] = (
        base[:10].astype(np.float32),
        bp[:10],
    )  # inputs equal to (repeated) training traces: dist_a = 0
    dsa = DSA(train.astype(np.float32), tp, search=search)
    assert dsa.search == search
    ref = naive.dsa(train.astype(np.float32).astype(np.float64), tp, tests, pred)
    got = dsa(tests, pred)
    np.testing.assert_array_equal(got[:10], 0.0)
    assert rel_err(got, ref) < 1e-9
    saved = dsa.to_arrays()["other_dist"]
    assert np.array_equal(saved[:300], saved[300:600])  # copies share their dist_b


@pytest.mark.parametrize("search", ["tree", "blas"])
def test_dsa_exact_ties_between_distinct_traces_pick_the_first(search):
    # x_a candidates at equal distance in every direction; their dist_b all differ.
    ring = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
    train = np.vstack([ring, [[1.0, 9.0], [5.0, -5.0], [-4.0, 4.0]]])
    tp = np.array([0, 0, 0, 0, 1, 1, 1])
    x = np.zeros((3, 2))
    got = DSA(train, tp, search=search)(x, [0, 0, 0])
    assert got.tolist() == naive.dsa(train, tp, x, [0, 0, 0]).tolist()


@pytest.mark.parametrize("search", ["tree", "blas"])
def test_dsa_on_a_grid_full_of_ties_across_many_blocks_equals_the_loop(search):
    """Integer traces: exact ties for x_a everywhere, within and across the blocked scan's
    chunks (64-row chunks here: most rows of a later chunk are not candidates while some
    tie with the running minimum), and repeated rows. Values and the first-in-training-
    order rule must equal the per-input loop's."""
    rng = np.random.default_rng(44)
    d = 20
    train = rng.integers(0, 3, size=(3000, d)).astype(np.float32)
    train[2500:] = train[:500]  # repeated rows too
    tp = rng.integers(0, 3, size=3000)
    tp[2500:] = tp[:500]
    tests = rng.integers(0, 3, size=(300, d)).astype(np.float64)
    pred = rng.integers(0, 3, size=300)
    dsa = DSA(train, tp, search=search, chunk_bytes=64 * d * 24)
    got = dsa(tests, pred)
    ref = naive.dsa(train.astype(np.float64), tp, tests, pred)
    np.testing.assert_array_equal(got, ref)
    # and the x_a themselves: the first nearest in training order
    a = naive.x_a_rows(train.astype(np.float64), tp, tests, pred)
    kept = ~np.isnan(dsa.to_arrays(complete=False)["other_dist"])
    # computed: exactly the x_a and their copies (same vector, same class), nothing else
    key = [row.tobytes() + bytes([c]) for row, c in zip(train, tp, strict=True)]
    wanted = {key[i] for i in a}
    np.testing.assert_array_equal(kept, [k in wanted for k in key])


def test_dsa_precompute_with_the_classes_in_threads_equals_the_definition(monkeypatch):
    """Enough rows for the k-d tree searches of the classes to run in threads (four, even
    on a one-core runner): every dist_b equals the blocked scan's (no threads) and, on a
    sample, the definition."""
    import pytest_sadl.criteria.surprise as surprise

    pools = []

    class Pool(surprise.ThreadPoolExecutor):
        def __init__(self, n):
            pools.append(n)
            super().__init__(n)

    monkeypatch.setattr(surprise, "cores", lambda: 4)
    monkeypatch.setattr(surprise, "ThreadPoolExecutor", Pool)
    rng = np.random.default_rng(45)
    train, tp = clustered(rng, 6000, 5, 4)
    threaded = DSA(train, tp).precompute()
    assert threaded.search == "tree" and pools == [4]
    got = threaded.to_arrays()["other_dist"]
    np.testing.assert_array_equal(got, DSA(train, tp, search="blas").precompute().to_arrays()["other_dist"])
    for i in rng.choice(len(train), 40, replace=False):
        assert got[i] == pytest.approx(np.linalg.norm(train[tp != tp[i]] - train[i], axis=1).min(), rel=1e-12)


def _other_class_distances(train, tp):
    """dist_b of every training trace by the definition (equation 4): a loop over rows."""
    x = train.astype(np.float64)
    return np.array([np.linalg.norm(x[tp != tp[i]] - x[i], axis=1).min() for i in range(len(x))])


@pytest.mark.parametrize("layout", ["many classes", "softmax near ties"])
def test_dsa_dist_b_by_one_masked_scan_equals_the_definition_and_the_per_class_trees(layout, monkeypatch):
    """dist_b by one scan over every training trace with the query's class masked out
    (chunks of 96 rows here: each class's rows cross chunk and block edges), on 60
    classes with repeated rows, and on near-one-hot float32 softmax rows full of near and
    exact ties: equal to the per-row loop of equation 4 and to the per-class k-d tree
    search it replaces, for the k-d tree's DSA (many classes: the scan) and the blocked one."""
    import pytest_sadl.criteria.neighbours as neighbours

    rng = np.random.default_rng(47)
    if layout == "many classes":
        train, tp = clustered(rng, 1500, 6, 60, spread=0.8, scale=1.5)
        train = train.astype(np.float32)
    else:
        train, tp = softmax_traces(rng, 1500, 10, 10, scale=9.0)
        train[:40] = np.eye(10, dtype=np.float32)[tp[:40] % 10]  # exact one-hot rows: exact ties
        tp[:40] = tp[:40] % 10
    train[-300:], tp[-300:] = train[:300], tp[:300]  # repeated rows
    ref = _other_class_distances(train, tp)
    trees = None
    if layout == "softmax near ties":
        trees = DSA(train, tp).precompute().to_arrays()["other_dist"]  # 10 classes: per-class trees
    monkeypatch.setattr(neighbours, "TREE_MAX_CLASSES", 0)
    for search in ("tree", "blas"):
        dsa = DSA(train, tp, search=search, chunk_bytes=96 * 10 * 8)
        got = dsa.precompute().to_arrays()["other_dist"]
        assert search == "blas" or not dsa._nn.trees_out
        assert rel_err(got, ref) < 1e-12
        if trees is not None:
            assert rel_err(got, trees) < 1e-12
    # and DSA itself, lazily, against the per-input loop
    tests = train[rng.choice(len(train), 120)].astype(np.float64) + rng.normal(scale=1e-3, size=(120, train.shape[1]))
    pred = tp[rng.choice(len(train), 120)]
    expected = naive.dsa(train.astype(np.float64), tp, tests, pred)
    assert rel_err(DSA(train, tp, search="blas")(tests, pred), expected) < 1e-9


def test_dsa_dist_b_of_a_class_alone_in_a_block_is_the_next_class():
    """One class's rows fill whole scan blocks (masked to +inf everywhere there): a query
    masked out of an entire block must take no candidate from it."""
    rng = np.random.default_rng(48)
    big = rng.normal(size=(900, 3)).astype(np.float32)
    small = (rng.normal(size=(5, 3)) + 6).astype(np.float32)
    train, tp = np.vstack([big, small]), np.array([0] * 900 + [1] * 5)
    got = DSA(train, tp, search="blas", chunk_bytes=64 * 3 * 8).precompute().to_arrays()["other_dist"]
    np.testing.assert_allclose(got, _other_class_distances(train, tp), rtol=1e-12)


# ----------------------------------------------------------------------------- lazy dist_b


def test_dsa_lazy_dist_b_equals_the_full_set_and_is_kept():
    rng = np.random.default_rng(40)
    train, tp = clustered(rng, 2000, 6, 4)
    tests, pred = clustered(rng, 100, 6, 4, spread=1.5)
    lazy = DSA(train, tp)
    assert lazy.known == 0
    got = lazy(tests, pred)
    partial = lazy.to_arrays(complete=False)["other_dist"]
    assert 0 < lazy.known <= 100 and np.count_nonzero(~np.isnan(partial)) == lazy.known
    full = DSA(train, tp).precompute()
    np.testing.assert_array_equal(got, full(tests, pred))
    known = ~np.isnan(partial)
    np.testing.assert_array_equal(partial[known], full.to_arrays()["other_dist"][known])
    resumed = DSA.from_arrays({"train_ats": train, "train_pred": tp, "other_dist": partial})
    assert resumed.known == lazy.known
    np.testing.assert_array_equal(resumed(tests, pred), got)
    assert resumed.known == lazy.known  # nothing recomputed for the same inputs
    with pytest.raises(ValueError, match="one distance per training trace"):
        DSA(train, tp, dist_b=np.zeros(5))


# ----------------------------------------------------------------------------- memmaps


def test_lsa_and_dsa_on_a_memmap_equal_in_memory_without_a_whole_copy(tmp_path):
    import tracemalloc

    rng = np.random.default_rng(50)
    train, tp = clustered(rng, 10000, 64, 4)
    train = train.astype(np.float32)
    np.save(tmp_path / "train.npy", train)
    mm = np.load(tmp_path / "train.npy", mmap_mode="r")
    tests, pred = clustered(rng, 50, 64, 4, spread=1.5)
    expected_lsa = LSA(train, tp)(tests, pred)
    expected_dsa = DSA(train, tp)(tests, pred)
    chunk = 2**17
    for make in (lambda: LSA(mm, tp, chunk_bytes=chunk), lambda: DSA(mm, tp, chunk_bytes=chunk)):
        tracemalloc.start()
        engine = make()
        got = engine(tests, pred)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        arrays = engine.to_arrays(complete=False) if isinstance(engine, DSA) else engine.to_arrays()
        assert isinstance(arrays["train_ats"], np.memmap)
        expected = expected_lsa if isinstance(engine, LSA) else expected_dsa
        assert rel_err(got, expected) < 1e-9
        assert peak < train.nbytes / 2, (
            f"{type(engine).__name__} allocated {peak} bytes for a {train.nbytes}-byte memmap"
        )


def test_dsa_approximate_faiss_search_is_withdrawn_in_one_line_naming_the_exact_one():
    """The approximate search lost to the exact one by 95x and was withdrawn: asking for it
    is one line naming the exact search to use; an unknown search names the three."""
    rng = np.random.default_rng(60)
    train, tp = clustered(rng, 200, 20, 4)
    with pytest.raises(ValueError, match=r"^DSA\(search='faiss'\) was withdrawn: .* use search='auto' \(exact\)$"):
        DSA(train, tp, search="faiss")
    with pytest.raises(ValueError, match="search must be 'auto', 'tree' or 'blas', got 'annoy'"):
        DSA(train, tp, search="annoy")


def test_memmapped_training_traces_with_nan_name_the_row(tmp_path):
    train = np.random.default_rng(70).normal(size=(500, 3)).astype(np.float32)
    train[321, 1] = np.nan
    np.save(tmp_path / "bad.npy", train)
    mm = np.load(tmp_path / "bad.npy", mmap_mode="r")
    for make in (
        lambda: LSA(mm, np.arange(500) % 2, chunk_bytes=1024),
        lambda: DSA(mm, np.arange(500) % 2, chunk_bytes=1024),
    ):
        with pytest.raises(ValueError, match=r"train_ats contains NaN values in 1 row\(s\) \(first: row 321\)"):
            make()


def test_training_trace_checks_keep_float_arrays_and_refuse_the_rest_with_valueerror():
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    from pytest_sadl.criteria.checks import as_train_traces

    arrays = hnp.arrays(
        dtype=st.sampled_from([np.float32, np.float64, np.int32, np.float16]),
        shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5),
    )

    @settings(max_examples=60, deadline=None)
    @given(arrays)
    def check(a):
        try:
            out = as_train_traces("train_ats", a, chunk_bytes=16)
        except ValueError as exc:
            assert "train_ats" in str(exc)
            return
        assert out.ndim == 2 and out.shape == a.shape and len(out) and out.shape[1]
        assert np.isfinite(out).all()
        if a.dtype in (np.float32, np.float64):
            assert out is a  # never copied
        else:
            assert out.dtype == np.float64

    check()


# ----------------------------------------------------------------------------- many wide classes


def test_lsa_many_classes_one_scatter_at_a_time_and_one_summarised_warning(tmp_path, monkeypatch):
    """A memmap with more classes' scatter matrices than LSA keeps (the limit 0 here) sums
    each class's when it fits the class: the values of the in-memory LSA (SciPy's) and of
    the definition; classes too small for a KDE are one warning with a count and the first
    few, however many there are."""
    import pytest_sadl.criteria.surprise as surprise

    rng = np.random.default_rng(92)
    train, tp = clustered(rng, 1500, 4, 6, spread=0.8)
    small = rng.normal(size=(21, 4)) + 9
    train = np.vstack([train, small]).astype(np.float32)
    tp = np.concatenate([tp, np.repeat(np.arange(6, 13), 3)])  # 7 classes of 3 traces: fewer than 5
    np.save(tmp_path / "t.npy", train)
    mm = np.load(tmp_path / "t.npy", mmap_mode="r")
    tests, pred = clustered(rng, 50, 4, 6, spread=1.2)
    with pytest.warns(SadlWarning) as caught:
        expected = LSA(train, tp)(tests, pred)
    lines = [str(w.message) for w in caught if "KDE over" in str(w.message)]
    assert lines == [
        "LSA: 7 classes have fewer training traces than the 5 a KDE over 4 neurons needs (e.g. 6, 7, 8, 9, 10, ..., "
        "with 3, 3, 3, 3, 3, ... traces); their inputs score NaN (more training data, or a narrower layer, fixes this)"
    ]
    monkeypatch.setattr(surprise, "_KEEP_MATRICES", 0)
    monkeypatch.setattr(surprise, "_KEEP_WHITENED", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SadlWarning)
        streamed = LSA(mm, tp, chunk_bytes=50 * 4 * 8)
        in_memory = LSA(train, tp)  # whitened traces not kept: made per block when scoring
    assert not streamed._keep_scatter and not in_memory._keep_aug
    assert rel_err(streamed(tests, pred), expected) < 1e-10
    assert rel_err(in_memory(tests, pred), expected) < 1e-10
    assert rel_err(expected, naive.lsa(train.astype(np.float64)[tp < 6], tp[tp < 6], tests, pred)) < 1e-9


def test_dsa_measures_its_candidates_in_bounded_blocks():
    """One far outlier among the training traces makes the products' rounding bound wider
    than every distance, so every training row is a candidate measured exactly; those
    pairs go in blocks, not all at once (before: pairs x neurons float64 at once, 17-24 GB
    on timm's efficientnet_b0, whose briefly trained pooled features barely vary)."""
    import tracemalloc

    rng = np.random.default_rng(7)
    d = 1280
    train = rng.normal(size=(3000, d)).astype(np.float32)
    train[0] *= 1e4  # |x|^2 ~ 1e11: the bound covers every product
    tp = np.arange(3000) % 3
    tests = rng.normal(size=(200, d)).astype(np.float32)
    pred = np.arange(200) % 3
    dsa = DSA(train, tp, search="blas")
    tracemalloc.start()
    got = dsa(tests, pred)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    t64, q64 = train.astype(np.float64), tests.astype(np.float64)
    want = []
    for x, c in zip(q64, pred, strict=True):
        same, other = t64[tp == c], t64[tp != c]
        d_same = np.linalg.norm(same - x, axis=1)
        x_a = same[np.argmin(d_same)]
        want.append(d_same.min() / np.linalg.norm(other - x_a, axis=1).min())
    assert rel_err(got, np.array(want)) < 1e-9
    assert peak < 256 * 2**20, f"DSA allocated {peak / 2**20:.0f} MiB over 3,000 x 1,280 traces"
