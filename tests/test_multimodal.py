"""MLSA (Gaussian mixture per class) and MMDSA (k-means modes per class) against their
definitions in tests/naive.py."""

from __future__ import annotations

import naive
import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.mixture import GaussianMixture

from pytest_sadl.criteria.mixture import MLSA
from pytest_sadl.criteria.modes import MMDSA
from pytest_sadl.errors import SadlWarning


@pytest.fixture(autouse=True)
def _one_thread():
    """The reference fits on one thread too (waiting OpenMP threads are slow on a busy machine)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        yield


def _two_modes(rng, n=120, d=3):
    """Per class, two well separated clusters; a constant neuron the variance filter drops."""
    x, pred = [], []
    for c in range(3):
        for centre in (-4.0, 4.0):
            x.append(rng.normal(loc=centre + c, scale=1.0, size=(n // 2, d)))
            pred += [c] * (n // 2)
    train = np.concatenate(x)
    train = np.hstack([train, np.full((len(train), 1), 0.5)])
    return train, np.array(pred)


@pytest.mark.parametrize("components", [1, 2, 3])
def test_mlsa_is_minus_log_of_each_class_mixture_as_defined(components):
    rng = np.random.default_rng(0)
    train, pred = _two_modes(rng)
    tests = rng.normal(scale=4.0, size=(25, 4))
    tests_pred = rng.integers(0, 3, 25)
    mlsa = MLSA(train, pred, components=components)
    keep = naive.kept_neurons(train, pred, 1e-5)
    assert mlsa.kept.tolist() == keep == [0, 1, 2]
    params = {}
    for c in range(3):  # the fit is scikit-learn's, seeded, on the class's kept neurons
        gmm = GaussianMixture(n_components=components, random_state=0).fit(train[pred == c][:, keep])
        params[c] = (gmm.weights_, gmm.means_, gmm.covariances_)
    expected = naive.mlsa(train, pred, tests, tests_pred, params)
    np.testing.assert_allclose(mlsa(tests, tests_pred), expected, rtol=1e-9)


def test_mlsa_repeats_and_two_components_fit_two_modes_better_than_one():
    rng = np.random.default_rng(1)
    train, pred = _two_modes(rng)
    probe = np.array([[-4.0, -4.0, -4.0, 0.5], [4.0, 4.0, 4.0, 0.5], [0.0, 0.0, 0.0, 0.5]])
    one, two = MLSA(train, pred, components=1), MLSA(train, pred, components=2)
    np.testing.assert_array_equal(two(probe, [0, 0, 0]), MLSA(train, pred, components=2)(probe, [0, 0, 0]))
    s1, s2 = one(probe, [0, 0, 0]), two(probe, [0, 0, 0])
    assert s2[0] < s1[0] and s2[1] < s1[1], "the modes' centres are likelier under two components"
    assert s2[2] > s2[0] + 5, "the empty middle between the modes is surprising under two components"


def test_mlsa_without_classes_small_classes_and_absent_classes():
    rng = np.random.default_rng(2)
    train, pred = _two_modes(rng)
    whole = MLSA(train, None, components=2)
    gmm = GaussianMixture(n_components=2, random_state=0).fit(train[:, :3])
    np.testing.assert_allclose(whole(train[:5]), -gmm.score_samples(train[:5, :3]), rtol=1e-9)
    pred = pred.copy()
    pred[:3] = 7  # a class of three traces: three components at most
    pred[3] = 9  # one trace: no mixture
    with pytest.warns(SadlWarning, match="class 9 has 1 training trace"):
        mlsa = MLSA(train, pred, components=5)
    assert mlsa.mixtures[7].n_components == 3
    with pytest.warns(SadlWarning, match=r"no mixture for predicted class\(es\) \[4, 9\]"):
        out = mlsa(train[:3], [9, 4, 0])
    assert np.isnan(out[:2]).all() and np.isfinite(out[2])
    with pytest.raises(ValueError, match="components must be a whole number >= 1"):
        MLSA(train, pred, components=0)


@pytest.mark.parametrize("modes", [1, 2, 3])
def test_mmdsa_is_the_mahalanobis_distance_to_the_nearest_mode_as_defined(modes):
    rng = np.random.default_rng(3)
    train, pred = _two_modes(rng)
    tests = rng.normal(scale=4.0, size=(20, 4))
    tests_pred = rng.integers(0, 3, 20)
    mmdsa = MMDSA(train, pred, modes=modes)
    keep = naive.kept_neurons(train, pred, 1e-5)
    centroids = {  # the clustering is scikit-learn's, seeded, as dnn-tip calls it
        c: KMeans(n_clusters=modes, n_init=10, max_iter=300, random_state=0)
        .fit(train[pred == c][:, keep])
        .cluster_centers_
        for c in range(3)
    }
    expected = naive.mmdsa(train, pred, tests, tests_pred, centroids)
    np.testing.assert_allclose(mmdsa(tests, tests_pred), expected, rtol=1e-8)


def test_mmdsa_with_one_mode_is_mdsa_and_two_modes_see_the_gap():
    from pytest_sadl.criteria.mahalanobis import MDSA

    rng = np.random.default_rng(4)
    train, pred = _two_modes(rng)
    probe = np.array([[-4.0, -4.0, -4.0, 0.5], [0.0, 0.0, 0.0, 0.5]])
    np.testing.assert_allclose(MMDSA(train, pred, modes=1)(probe, [0, 0]), MDSA(train, pred)(probe, [0, 0]))
    two = MMDSA(train, pred, modes=2)(probe, [0, 0])
    assert two[0] < 1.5 < 4 < two[1]
    np.testing.assert_array_equal(two, MMDSA(train, pred, modes=2)(probe, [0, 0]))  # seeded: repeats


def test_mmdsa_lone_modes_and_absent_classes_score_nan_with_warnings():
    rng = np.random.default_rng(5)
    train = np.vstack([rng.normal(size=(30, 2)), [[50.0, 50.0]]])
    pred = np.zeros(31, dtype=int)
    with pytest.warns(SadlWarning, match=r"1 k-means mode\(s\) hold one training trace"):
        mmdsa = MMDSA(train, pred, modes=2)
    out = mmdsa(np.array([[49.0, 50.0], [0.0, 0.0]]), [0, 0])
    assert np.isnan(out[0]) and np.isfinite(out[1])
    with pytest.warns(SadlWarning, match=r"no modes for predicted class\(es\) \[3\]"):
        assert np.isnan(mmdsa(np.zeros((1, 2)), [3])).all()
    with pytest.raises(ValueError, match="modes must be a whole number >= 1"):
        MMDSA(train, pred, modes=1.5)
