"""Principal-component projection of wide layers (criteria/projection.py) before LSA/MDSA."""

from __future__ import annotations

import naive
import numpy as np
import pytest

from pytest_sadl.criteria.projection import Projection
from pytest_sadl.criteria.surprise import LSA, MDSA
from pytest_sadl.errors import SadlWarning


def test_projection_is_the_leading_principal_axes_and_lets_lsa_measure_a_layer_too_wide_for_a_kde(tmp_path):
    """A 40-neuron layer with 30 traces per class: LSA refuses it (a KDE over 40 neurons
    needs 41), LSA over its first 6 principal components (fitted on a memmap, a chunk at
    a time) works and equals the definition on the projected traces; the axes and
    variances are NumPy's SVD of the centred traces; a round trip keeps the projection."""
    rng = np.random.default_rng(5)
    tp = np.repeat(np.arange(4), 30)
    low = rng.normal(scale=3.0, size=(4, 6))[tp] + rng.normal(size=(120, 6))  # the signal: 6 directions
    mix = np.linalg.qr(rng.normal(size=(40, 40)))[0][:6]
    train = (low @ mix + 0.01 * rng.normal(size=(120, 40))).astype(np.float32)
    np.save(tmp_path / "t.npy", train)
    mm = np.load(tmp_path / "t.npy", mmap_mode="r")
    with (
        pytest.raises(ValueError, match="no class has more than 40 training traces"),
        pytest.warns(SadlWarning, match="4 classes have fewer training traces than the 41 a KDE over 40 neurons needs"),
    ):
        LSA(train, tp)
    pca = Projection.fit(mm, 6, chunk_bytes=20 * 40 * 8)
    centred = train.astype(np.float64) - train.astype(np.float64).mean(axis=0)
    _, sv, vt = np.linalg.svd(centred, full_matrices=False)
    np.testing.assert_allclose(pca.variances, sv[:6] ** 2 / 119, rtol=1e-9)
    np.testing.assert_allclose(np.abs(np.sum(pca.axes * vt[:6].T, axis=0)), 1.0, rtol=1e-9)  # same axes up to sign
    tests = (rng.normal(scale=3.0, size=(4, 6))[tp[:20]] @ mix).astype(np.float64)
    pred = tp[:20]
    projected_train, projected_tests = pca(mm), pca(tests)
    got = LSA(projected_train, tp)(projected_tests, pred)
    np.testing.assert_allclose(got, naive.lsa(projected_train, tp, projected_tests, pred), rtol=1e-9)
    np.testing.assert_allclose(
        MDSA(projected_train, tp)(projected_tests, pred),
        naive.mdsa(projected_train, tp, projected_tests, pred),
        rtol=1e-9,
    )
    again = Projection.from_arrays(pca.to_arrays())
    np.testing.assert_array_equal(again(tests), projected_tests)
    with pytest.raises(ValueError, match="components must be an integer from 1 to the 40 neurons"):
        Projection.fit(train, 41)


def test_the_projected_scores_are_the_densities_and_covariances_their_criteria_declare() -> None:
    """``--sadl-sa-components`` projects the scores whose criterion is ``projected`` (issue 37:
    declared in the registry, no list in the engine); DSA, a distance, measures every neuron."""
    from pytest_sadl.criteria.registry import SCORES

    assert {key for key, c in SCORES.items() if c.projected} == {"lsa", "mdsa", "mlsa", "mmdsa"}
