"""Group ``bim``: the Basic Iterative Method (iterated FGSM, projected onto the eps-ball)."""

from __future__ import annotations

import numpy as np
import pytest
from attacks import accuracy, bim, fgsm

pytestmark = pytest.mark.sadl(group="bim")

EPSILONS = (0.1, 0.2)


@pytest.fixture(scope="module")
def bim_inputs(sadl_model, test_split) -> dict[float, np.ndarray]:
    """BIM versions of the held-out split: 10 steps of eps/4, one per eps."""
    return {eps: bim(sadl_model, test_split.x, test_split.y, eps, steps=10) for eps in EPSILONS}


@pytest.fixture(scope="module")
def fgsm_same_eps(sadl_model, test_split) -> dict[float, np.ndarray]:
    """FGSM at the same eps values, the baseline BIM is compared with."""
    return {eps: fgsm(sadl_model, test_split.x, test_split.y, eps) for eps in EPSILONS}


@pytest.mark.parametrize("eps", EPSILONS)
def test_projection_keeps_inputs_in_eps_ball(bim_inputs, test_split, eps):
    """Ten steps of eps/4 would move a pixel 2.5 eps; the projection keeps it within eps."""
    x_adv = bim_inputs[eps]
    assert np.abs(x_adv - test_split.x).max() <= eps + 1e-6
    assert x_adv.min() >= 0.0 and x_adv.max() <= 1.0


@pytest.mark.parametrize("eps", EPSILONS)
def test_bim_at_least_as_strong_as_fgsm(sadl_model, bim_inputs, fgsm_same_eps, test_split, eps, sadl_labels):
    """Iterating never helps the model much: BIM accuracy <= FGSM accuracy (+2 points slack)."""
    sadl_labels(bim_inputs[eps], test_split.y)
    fgsm_acc = accuracy(sadl_model.predict(fgsm_same_eps[eps], verbose=0), test_split.y)
    bim_acc = accuracy(sadl_model.predict(bim_inputs[eps], verbose=0), test_split.y)
    assert bim_acc <= fgsm_acc + 0.02


def test_bim_at_eps_0_2_defeats_the_undefended_model(sadl_model, bim_inputs, test_split):
    """A known weakness, written down: the model is not adversarially trained.

    Measured 0.8 % accuracy. If this starts failing, the model became more robust,
    which is good news: raise the bound.
    """
    assert accuracy(sadl_model.predict(bim_inputs[0.2], verbose=0), test_split.y) <= 0.10


def test_bim_changes_predictions_of_correct_images(sadl_model, bim_inputs, test_split, clean_probs):
    """Most images the model got right are flipped to a wrong class at eps=0.1."""
    right = clean_probs.argmax(axis=1) == test_split.y
    adv_pred = np.asarray(sadl_model.predict(bim_inputs[0.1][right], verbose=0)).argmax(axis=1)
    assert np.mean(adv_pred != test_split.y[right]) >= 0.3
