"""MDSA against a naive loop from its definition and against SciPy's ``mahalanobis``."""

from __future__ import annotations

import naive
import numpy as np
import pytest
from scipy.spatial.distance import mahalanobis

from pytest_sadl.criteria.surprise import LSA, MDSA
from pytest_sadl.errors import SadlWarning


def clustered(rng, n, d, classes, scale=3.0):
    pred = rng.integers(0, classes, size=n)
    centres = rng.normal(0, scale, size=(classes, d))
    mix = rng.normal(size=(d, d)) / np.sqrt(d)  # correlated neurons, so the covariance is not diagonal
    return centres[pred] + rng.normal(size=(n, d)) @ mix + 0.1 * rng.normal(size=(n, d)), pred


@pytest.mark.parametrize("d", [1, 3, 12])
def test_mdsa_matches_naive_definition_and_scipy(d):
    rng = np.random.default_rng(d)
    train, train_pred = clustered(rng, 400, d, 3)
    tests, pred = clustered(rng, 40, d, 3)
    got = MDSA(train, train_pred)(tests, pred)
    np.testing.assert_allclose(got, naive.mdsa(train, train_pred, tests, pred), rtol=1e-9)
    for x, c, value in zip(tests, pred, got, strict=True):
        members = train[train_pred == c]
        vi = np.linalg.inv(np.atleast_2d(np.cov(members, rowvar=False)))
        assert value == pytest.approx(mahalanobis(x, members.mean(axis=0), vi), rel=1e-9)


def test_mdsa_without_classes_is_one_distribution_over_all_traces():
    rng = np.random.default_rng(1)
    train, _ = clustered(rng, 300, 4, 2)
    tests, _ = clustered(rng, 20, 4, 2)
    got = MDSA(train)(tests)
    vi = np.linalg.inv(np.cov(train, rowvar=False))
    np.testing.assert_allclose(got, [mahalanobis(x, train.mean(axis=0), vi) for x in tests], rtol=1e-9)
    with pytest.raises(ValueError, match="without classes"):
        MDSA(train)(tests, np.zeros(len(tests), int))
    with pytest.raises(ValueError, match="pass the predicted classes"):
        MDSA(train, np.zeros(len(train), int))(tests)


def test_mdsa_training_mean_scores_zero_and_distance_grows_along_a_line():
    rng = np.random.default_rng(2)
    train, pred = clustered(rng, 500, 5, 2)
    m = MDSA(train, pred)
    mu = train[pred == 1].mean(axis=0)
    direction = rng.normal(size=5)
    scores = m(np.stack([mu + t * direction for t in (0.0, 1.0, 2.0, 4.0)]), np.ones(4, int))
    assert scores[0] == pytest.approx(0.0, abs=1e-9)
    np.testing.assert_allclose(scores[1:] / scores[1], [1.0, 2.0, 4.0], rtol=1e-9)  # a norm scales linearly


def test_mdsa_singular_covariance_uses_the_pseudo_inverse_with_a_warning():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(300, 4))
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)  # rows sum to one: rank 3
    pred = probs.argmax(axis=1)
    tests = np.exp(rng.normal(size=(30, 4)))
    tests /= tests.sum(axis=1, keepdims=True)
    tpred = tests.argmax(axis=1)
    with pytest.warns(SadlWarning, match="singular; using its pseudo-inverse"):
        m = MDSA(probs, pred)
    assert set(m.ranks.tolist()) == {3}
    got = m(tests, tpred)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, naive.mdsa(probs, pred, tests, tpred), rtol=1e-7)
    for x, c, value in zip(tests, tpred, got, strict=True):
        members = probs[pred == c]
        vi = np.linalg.pinv(np.cov(members, rowvar=False), rcond=1e-10, hermitian=True)
        assert value == pytest.approx(mahalanobis(x, members.mean(axis=0), vi), rel=1e-7)


def test_mdsa_class_with_one_trace_and_absent_class_score_nan_with_warning():
    rng = np.random.default_rng(4)
    train, pred = clustered(rng, 200, 3, 2)
    train = np.vstack([train, rng.normal(size=(1, 3))])
    pred = np.append(pred, 7)
    with pytest.warns(SadlWarning, match="class 7 has 1 training trace"):
        m = MDSA(train, pred)
    assert m.classes == [0, 1]
    with pytest.warns(SadlWarning, match=r"class\(es\) \[5, 7\]"):
        got = m(train[:4], np.array([0, 7, 5, 1]))
    assert np.isnan(got[[1, 2]]).all() and np.isfinite(got[[0, 3]]).all()


def test_mdsa_variance_filter_drops_a_constant_neuron():
    rng = np.random.default_rng(5)
    train, pred = clustered(rng, 300, 4, 2)
    train[:, 2] = 1.0
    m = MDSA(train, pred)
    assert m.kept.tolist() == [0, 1, 3]
    tests, tpred = clustered(rng, 10, 4, 2)
    np.testing.assert_allclose(m(tests, tpred), naive.mdsa(train, pred, tests, tpred), rtol=1e-9)


def test_mdsa_round_trips_through_arrays_without_training_traces():
    rng = np.random.default_rng(6)
    train, pred = clustered(rng, 300, 6, 3)
    tests, tpred = clustered(rng, 25, 6, 3)
    m = MDSA(train, pred)
    arrays = m.to_arrays()
    assert all(a.size < train.size for a in arrays.values())
    np.testing.assert_array_equal(MDSA.from_arrays(arrays)(tests, tpred), m(tests, tpred))
    arrays["means"] = arrays["means"][:, :2]
    with pytest.raises(ValueError, match="inconsistent shapes"):
        MDSA.from_arrays(arrays)


@pytest.mark.parametrize(
    "args, match",
    [
        ((np.zeros((0, 3)),), "empty"),
        ((np.ones((5, 3)), np.zeros(4, int)), "one class per input"),
        ((np.ones((5, 3)),), "variance below"),
        ((np.ones((1, 3)), np.zeros(1, int)), "two or more"),
    ],
)
def test_mdsa_bad_training_input(args, match):
    with pytest.raises(ValueError, match=match):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            MDSA(*args)


def test_mdsa_bad_scoring_input_and_empty_batch():
    rng = np.random.default_rng(7)
    train, pred = clustered(rng, 100, 3, 2)
    m = MDSA(train, pred)
    with pytest.raises(ValueError, match="training traces have 3"):
        m(np.ones((2, 4)), np.zeros(2, int))
    assert m(np.zeros((0, 3)), np.zeros(0, int)).shape == (0,)


def test_mdsa_on_a_memmap_equals_in_memory_without_a_whole_copy(tmp_path):
    """The per-class means and covariances are accumulated a chunk at a time: an
    out-of-core training set (``np.load(..., mmap_mode="r")``) gives the same MDSA and is
    never copied whole (a float64 copy alone would be twice the float32 file)."""
    import tracemalloc

    rng = np.random.default_rng(51)
    train, tp = clustered(rng, 10000, 64, 4)
    train = train.astype(np.float32)
    np.save(tmp_path / "train.npy", train)
    mm = np.load(tmp_path / "train.npy", mmap_mode="r")
    tests, pred = clustered(rng, 50, 64, 4)
    chunk = 2**17
    expected = MDSA(train, tp, chunk_bytes=chunk)(tests, pred)
    np.testing.assert_allclose(expected, naive.mdsa(train.astype(np.float64), tp, tests, pred), rtol=1e-7)
    tracemalloc.start()
    engine = MDSA(mm, tp, chunk_bytes=chunk)
    got = engine(tests, pred)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    np.testing.assert_array_equal(got, expected)
    assert peak < train.nbytes / 2, f"MDSA allocated {peak} bytes for a {train.nbytes}-byte memmap"


def test_mdsa_variance_filter_ignores_a_one_trace_class_as_the_reference_does():
    """A one-trace class has variance 0 in every neuron; counting it would drop them all.
    The filter, in the engine and in the naive reference, uses classes with >= 2 traces."""
    rng = np.random.default_rng(6)
    train, pred = clustered(rng, 300, 4, 2)
    train = np.vstack([train, rng.normal(size=(1, 4))])
    pred = np.append(pred, 7)
    tests, tpred = clustered(rng, 20, 4, 2)
    with pytest.warns(SadlWarning, match="class 7 has 1 training trace"):
        got = MDSA(train, pred)(tests, tpred)
    np.testing.assert_allclose(got, naive.mdsa(train, pred, tests, tpred), rtol=1e-9)


# ----------------------------------------------------------------------------- many wide classes


def test_mdsa_many_classes_one_scatter_at_a_time_equals_the_definition(tmp_path, monkeypatch):
    """With more classes' scatter matrices than it keeps (the limit set to 0 here), MDSA of a
    memmap sums each class's again when it factors it: the same values as in memory and
    the per-input definition; too-small classes give one summarised warning, not one each."""
    import pytest_sadl.criteria.mahalanobis as mahalanobis

    rng = np.random.default_rng(90)
    train, tp = clustered(rng, 1200, 5, 12)
    lone = np.arange(12, 20)  # eight classes of one trace each
    train = np.vstack([train, rng.normal(size=(8, 5))]).astype(np.float32)
    tp = np.concatenate([tp, lone])
    np.save(tmp_path / "t.npy", train)
    mm = np.load(tmp_path / "t.npy", mmap_mode="r")
    tests, pred = clustered(rng, 60, 5, 12)
    with pytest.warns(SadlWarning, match="8 classes have 1 training trace each"):
        expected = MDSA(train, tp)(tests, pred)
    monkeypatch.setattr(mahalanobis, "_KEEP_MATRICES", 0)
    with pytest.warns(SadlWarning) as caught:
        streamed = MDSA(mm, tp, chunk_bytes=40 * 5 * 8)
    lines = [str(w.message) for w in caught if "training trace" in str(w.message)]
    assert lines == [
        "MDSA: 8 classes have 1 training trace each (e.g. 12, 13, 14, 15, 16, ...); they have no covariance and their inputs score NaN"
    ]
    got = streamed(tests, pred)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    np.testing.assert_allclose(got, naive.mdsa(train.astype(np.float64), tp, tests, pred), rtol=1e-9)
    with pytest.warns(SadlWarning, match=r"predicted class\(es\) \[12, 13, 14, 15, 16, \.\.\.\] \(8 classes\)"):
        assert np.isnan(streamed(tests[:8], lone)).all()


def test_lsa_refuses_in_one_line_what_does_not_fit_and_says_what_would():
    rng = np.random.default_rng(91)
    train, tp = clustered(rng, 4000, 40, 10)
    need = (10 + 4) * 40 * 40 * 8
    with pytest.raises(ValueError) as caught:
        LSA(train, tp, max_bytes=need // 2)
    message = str(caught.value)
    assert "\n" not in message and "more than the 0.0 GiB allowed (max_bytes)" in message
    assert "at most 3 classes fit at 40 neurons, or all 10 at up to 28 neurons" in message
    LSA(train[:, :28], tp, max_bytes=need // 2)  # what it says fits, fits
    LSA(train, tp, max_bytes=need)


def test_mdsa_whose_factors_do_not_fit_streams_them_one_class_at_a_time(tmp_path):
    """When every class's factor would not fit (``max_bytes``), MDSA keeps only the means
    and makes a class's factor from the (memory-mapped) training traces when inputs of the
    class are scored, one class at a time: the same values as the MDSA that keeps them and
    as the definition, singular classes warned at scoring; it refuses in one line only
    when not even one class's matrices fit; it has no arrays to store."""
    rng = np.random.default_rng(91)
    train, tp = clustered(rng, 4000, 40, 10)
    np.save(tmp_path / "t.npy", train)
    mm = np.load(tmp_path / "t.npy", mmap_mode="r")
    tests, pred = rng.normal(size=(300, 40)), rng.integers(0, 10, 300)
    kept = MDSA(train, tp)
    need = (10 + 4) * 40 * 40 * 8
    streamed = MDSA(mm, tp, max_bytes=need // 2)
    assert streamed.streamed and streamed.factors is None and not kept.streamed
    np.testing.assert_allclose(streamed(tests, pred), kept(tests, pred), rtol=1e-12)
    np.testing.assert_allclose(streamed(tests, pred), naive.mdsa(train, tp, tests, pred), rtol=1e-9)
    assert set(streamed.ranks.tolist()) == {40}
    with pytest.raises(ValueError, match="streamed MDSA .* has no arrays to store"):
        streamed.to_arrays()
    with pytest.raises(ValueError) as caught:
        MDSA(train, tp, max_bytes=4 * 40 * 40 * 8)
    message = str(caught.value)
    assert "\n" not in message and "one class's inverse covariance over 40 neurons" in message
    # a singular class (5 traces over 40 neurons: rank 4) is warned when it is scored
    few = np.concatenate([tp[tp != 3], np.full(5, 3)])
    rows = np.concatenate([train[tp != 3], train[tp == 3][:5]])
    streamed = MDSA(rows, few, max_bytes=need // 2)
    with pytest.warns(SadlWarning, match=r"class\(es\) 3 \(rank 4, 5 traces\)"):
        got = streamed(tests, pred)
    with pytest.warns(SadlWarning, match=r"class\(es\) 3 \(rank 4, 5 traces\)"):  # at set-up, when kept
        kept = MDSA(rows, few)
    np.testing.assert_allclose(got, kept(tests, pred), rtol=1e-9)


def test_mdsa_classes_with_fewer_traces_than_neurons_equal_the_pseudo_inverse_in_narrow_factors():
    """Classes of 8 traces over 20 neurons (rank 7 each) are factored from their traces'
    thin SVD, in factors 7 columns wide instead of 20: the values of pinv(cov), the
    definition, and the same after a round trip through arrays."""
    rng = np.random.default_rng(93)
    tp = np.repeat(np.arange(30), 8)
    train = rng.normal(size=(30, 20))[tp] + rng.normal(size=(240, 20))
    tests, pred = rng.normal(size=(60, 20)), rng.integers(0, 30, 60)
    with pytest.warns(SadlWarning, match=r"class\(es\) 30 classes, e\.g\. 0 \(rank 7, 8 traces\)"):
        m = MDSA(train, tp)
    assert m.factors.shape == (30, 20, 7) and set(m.ranks.tolist()) == {7}
    got = m(tests, pred)
    np.testing.assert_allclose(got, naive.mdsa(train, tp, tests, pred), rtol=1e-9)
    np.testing.assert_array_equal(MDSA.from_arrays(m.to_arrays())(tests, pred), got)


def test_by_default_per_class_matrices_may_take_half_the_available_memory(tmp_path, monkeypatch):
    """Without ``max_bytes`` the budget is half of ``MemAvailable``: the other half stays for
    the rest of the run (a memory-mapped training set's pages count as available). MDSA's
    factors that need more than half stream; LSA refuses in one line naming the budget."""
    from pytest_sadl.criteria import checks

    rng = np.random.default_rng(92)
    train, tp = clustered(rng, 4000, 40, 10)
    need = (10 + 4) * 40 * 40 * 8  # LSA's: ten 40 x 40 matrices kept, four being fitted
    meminfo = tmp_path / "meminfo"
    monkeypatch.setattr(checks, "_MEMINFO", str(meminfo))
    meminfo.write_text(f"MemTotal: 99999999 kB\nMemAvailable: {(2 * need - 1024) // 1024} kB\n")
    with pytest.raises(ValueError, match=r"more than the 0\.0 GiB that half the available memory allows"):
        LSA(train, tp)
    assert MDSA(train, tp).streamed
    meminfo.write_text(f"MemAvailable: {(2 * need + 1024) // 1024} kB\n")
    LSA(train, tp)
    assert not MDSA(train, tp).streamed
