"""Shared set-up of the example project's tests.

* Before any test runs (and before pytest-sadl checks that the configured model file
  exists), :func:`pytest_configure` retrains the model when ``models/digits_cnn.keras``
  or the data splits are missing, so a clean checkout still works.
* The model itself comes from pytest-sadl's ``sadl_model`` fixture (session scope),
  which loads ``sadl_model`` from ``pyproject.toml``.
* The fixtures below give the held-out split and the clean predictions that the
  robustness tests compare against.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import train_model

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Retrain and save the model and the splits when any of them is missing."""
    missing = train_model.artifacts_missing(HERE)
    if not missing:
        return
    names = ", ".join(str(p.relative_to(HERE)) for p in missing)
    _say(config, f"example_project: {names} missing; retraining (about 20 s)")
    model, acc = train_model.train()
    train_model.save_artifacts(model, HERE)
    _say(config, f"example_project: retrained, held-out accuracy {acc:.4f}")


def _say(config: pytest.Config, line: str) -> None:
    """Print a line past pytest's output capturing (which is on during configure)."""
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is None:
        print(line, flush=True)
        return
    with capman.global_and_fixture_disabled():
        print(line, flush=True)


@dataclass(frozen=True)
class Split:
    """Images ``x`` (n, 8, 8, 1) in [0, 1] and their labels ``y`` (n,)."""

    x: np.ndarray
    y: np.ndarray

    def of_class(self, digit: int) -> Split:
        """The images of one digit."""
        keep = self.y == digit
        return Split(self.x[keep], self.y[keep])


def _load(path: Path) -> Split:
    with np.load(path) as data:
        return Split(data["x"].astype(np.float32), data["y"].astype(np.int64))


@pytest.fixture(scope="session")
def test_split() -> Split:
    """The held-out 20 % of the digits (never seen in training)."""
    return _load(train_model.TEST_PATH)


@pytest.fixture(scope="session")
def train_split() -> Split:
    """The 80 % of the digits the model was trained on."""
    return _load(train_model.TRAIN_PATH)


@pytest.fixture(scope="session")
def clean_probs(sadl_model, test_split: Split) -> np.ndarray:
    """The model's class probabilities on the clean held-out split (computed once).

    A session fixture: when pytest-sadl records only what tests feed the model, these
    clean inputs are counted through the ``test`` group, which feeds them explicitly.
    """
    return np.asarray(sadl_model.predict(test_split.x, verbose=0))
