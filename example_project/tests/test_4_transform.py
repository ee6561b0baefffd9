"""Group ``transform``: DeepTest-style image transformations of the held-out split.

Each transformation has a floor on accuracy that a team would accept for 8x8 digits:
photometric changes (noise, contrast) must barely matter; geometric ones (rotation,
shift) do matter at this resolution, where one pixel is an eighth of the image, and the
floors say how much. The measured values on the committed model are in the comments.
"""

from __future__ import annotations

from collections.abc import Callable

import attacks
import numpy as np
import pytest
from attacks import accuracy

pytestmark = pytest.mark.sadl(group="transform")

# (id, transformation, accuracy floor): measured accuracy in the comment
CASES: list[tuple[str, Callable[[np.ndarray], np.ndarray], float]] = [
    ("noise-0.05", lambda x: attacks.gaussian_noise(x, 0.05, seed=1), 0.95),  # 0.975
    ("noise-0.1", lambda x: attacks.gaussian_noise(x, 0.1, seed=2), 0.93),  # 0.975
    ("noise-0.2", lambda x: attacks.gaussian_noise(x, 0.2, seed=3), 0.85),  # 0.93
    ("contrast-0.5", lambda x: attacks.contrast(x, 0.5), 0.93),  # 0.97
    ("contrast-1.5", lambda x: attacks.contrast(x, 1.5), 0.93),  # 0.975
    ("contrast-2.0", lambda x: attacks.contrast(x, 2.0), 0.90),  # 0.96
    ("rotate+10", lambda x: attacks.rotate(x, 10), 0.70),  # 0.82
    ("rotate-10", lambda x: attacks.rotate(x, -10), 0.70),  # 0.81
    ("rotate+20", lambda x: attacks.rotate(x, 20), 0.60),  # 0.72
    ("shift-down-1", lambda x: attacks.shift(x, 1, 0), 0.50),  # 0.61
    ("shift-left-1", lambda x: attacks.shift(x, 0, -1), 0.60),  # 0.73
]


@pytest.mark.parametrize(("transform", "floor"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_accuracy_under_transformation(sadl_model, test_split, transform, floor, sadl_labels):
    x_t = transform(test_split.x)
    sadl_labels(x_t, test_split.y)
    assert x_t.shape == test_split.x.shape
    assert accuracy(sadl_model.predict(x_t, verbose=0), test_split.y) >= floor


@pytest.mark.parametrize("sigma", [0.05, 0.1])
def test_mild_noise_rarely_flips_a_prediction(sadl_model, test_split, clean_probs, sigma):
    """Sensor noise this small changes at most 3 % of the answers."""
    noisy = attacks.gaussian_noise(test_split.x, sigma, seed=7)
    flipped = np.asarray(sadl_model.predict(noisy, verbose=0)).argmax(axis=1) != clean_probs.argmax(axis=1)
    assert flipped.mean() <= 0.03


def test_rotation_hurts_more_as_the_angle_grows(sadl_model, test_split):
    accs = [
        accuracy(sadl_model.predict(attacks.rotate(test_split.x, deg), verbose=0), test_split.y) for deg in (5, 15, 30)
    ]
    assert accs[0] > accs[1] > accs[2], accs
