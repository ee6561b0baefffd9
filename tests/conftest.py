"""Shared fixtures: scikit-learn's digits and tiny real Keras models trained on them.

Fixtures (all session scoped; TensorFlow is imported only by the ones that need it):

``digits``
    :class:`tests._models.Digits` ``(x_train, y_train, x_test, y_test)``: float32
    ``(n, 8, 8, 1)`` images in [0, 1] and int64 labels, a 75/25 stratified split.
``models_dir``
    directory of ``dense.keras``, ``conv.keras``, ``functional.keras`` and
    ``regression.keras``; each is trained once per test session when first asked for
    (once for all pytest-xdist workers: the first trains under a file lock, the others
    wait and load the file).
``dense_model``, ``conv_model``, ``functional_model``, ``regression_model``
    the trained models, loaded from those files. They are SHARED by every test of a
    worker: do not change their weights. A test that needs to modify a model loads
    a private copy with ``tests._models.load_model(conv_model_path)``.
``dense_model_path``, ``conv_model_path``, ``functional_model_path``, ``regression_model_path``
    the ``.keras`` files.
``text``, ``text_model_path``, ``text_model``
    :class:`tests._models.Text` sentences (object arrays of ``str``) and labels; the raw-text
    classifier (``TextVectorization`` first) trained on them, its file and the model (shared).

See ``tests/_models.py`` for the architectures and their layer names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

try:  # no TensorFlow import at module level either way
    from tests import _models  # noqa: E402
except ImportError:  # pragma: no cover - tests/ itself on sys.path (rootdir not)
    import _models  # type: ignore[no-redef]  # noqa: E402

pytest_plugins = ["pytester"]


@pytest.fixture(scope="session")
def digits() -> _models.Digits:
    """scikit-learn's digits as float32 8x8x1 images in [0, 1], split 75/25."""
    return _models.load_digits_split()


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of the trained test models, shared by all xdist workers of the session
    (each model is trained when a test first asks for it). ``SADL_TEST_MODELS`` names a
    directory shared by several sessions instead: ``scripts/test.sh`` trains the models in
    the TensorFlow pass and the JAX pass loads the same ``.keras`` files (a saved model is
    backend-neutral; training them again on JAX cost a minute of CPU)."""
    shared = os.environ.get("SADL_TEST_MODELS")
    if shared:
        directory = Path(shared)
        directory.mkdir(parents=True, exist_ok=True)
        return directory
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # popen-gwN's parent is common to the session's workers
    directory = base / "sadl-test-models"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture(scope="session")
def dense_model_path(models_dir: Path, digits: _models.Digits) -> Path:
    """``.keras`` file of the Dense MLP."""
    return _models.ensure_saved_model(models_dir, "dense", digits)


@pytest.fixture(scope="session")
def conv_model_path(models_dir: Path, digits: _models.Digits) -> Path:
    """``.keras`` file of the ConvNet."""
    return _models.ensure_saved_model(models_dir, "conv", digits)


@pytest.fixture(scope="session")
def functional_model_path(models_dir: Path, digits: _models.Digits) -> Path:
    """``.keras`` file of the functional two-branch model."""
    return _models.ensure_saved_model(models_dir, "functional", digits)


@pytest.fixture(scope="session")
def regression_model_path(models_dir: Path, digits: _models.Digits) -> Path:
    """``.keras`` file of the regression model."""
    return _models.ensure_saved_model(models_dir, "regression", digits)


@pytest.fixture(scope="session")
def dense_model(dense_model_path: Path) -> Any:
    """The trained Dense MLP (shared: do not modify)."""
    return _models.load_model(dense_model_path)


@pytest.fixture(scope="session")
def conv_model(conv_model_path: Path) -> Any:
    """The trained ConvNet (shared: do not modify)."""
    return _models.load_model(conv_model_path)


@pytest.fixture(scope="session")
def functional_model(functional_model_path: Path) -> Any:
    """The trained functional model (shared: do not modify)."""
    return _models.load_model(functional_model_path)


@pytest.fixture(scope="session")
def regression_model(regression_model_path: Path) -> Any:
    """The trained regression model (shared: do not modify)."""
    return _models.load_model(regression_model_path)


@pytest.fixture(scope="session")
def text() -> _models.Text:
    """Synthetic positive/negative sentences as object arrays of ``str``, with labels."""
    return _models.text_data()


@pytest.fixture(scope="session")
def text_model_path(models_dir: Path) -> Path:
    """``.keras`` file of the raw-text classifier (``TextVectorization`` first)."""
    return _models.ensure_saved_text(models_dir)


@pytest.fixture(scope="session")
def text_model(text_model_path: Path) -> Any:
    """The trained raw-text classifier (shared: do not modify)."""
    return _models.load_model(text_model_path)


@pytest.fixture(scope="session")
def kind_model_path(models_dir: Path) -> Any:
    """``kind_model_path(kind)``: the ``.keras`` file of a model of another kind (see
    ``tests/_models.py``: subclassed, nested, two_input, mnist, cifar, dave2, chauffeur),
    trained once per session."""
    return lambda kind: _models.ensure_saved_kind(models_dir, kind)


@pytest.fixture(autouse=True)
def _no_random_order_in_pytester_runs(request: pytest.FixtureRequest) -> None:
    """The suite runs in file order (``-p no:randomly`` in the project's addopts); the
    projects that tests run through ``pytester`` do too, unless a test asks for
    pytest-randomly with ``-p randomly`` (which unblocks it). Pytester clears
    ``PYTEST_ADDOPTS`` when it is created, so this sets it afterwards."""
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")
        request.getfixturevalue("monkeypatch").setenv("PYTEST_ADDOPTS", "-p no:randomly")
