"""The pytest plugin's entry point (``pytest11``): options, marker, fixtures, the session chosen once.

Thin by design. :func:`pytest_configure` keeps what the configuration names
(:class:`~pytest_sadl.plugin.sources.Sources`: the model, the data, the profiles) in
``config.stash`` and, only with ``--sadl-coverage``, chooses one session object and
registers it as a plugin, as pytest's junitxml and pytest-cov do: a serial run, a
pytest-xdist controller or a pytest-xdist worker (:mod:`pytest_sadl.plugin.session`).
Without ``--sadl-coverage`` no hook of the plugin's runs, nothing is recorded and nothing
imports TensorFlow; the ``sadl_model``/``sadl_train`` fixtures still load what the
configuration names, so a project's tests run the same with the plugin on or off.

The work is elsewhere: :mod:`pytest_sadl.plugin.recorder` (who fed which inputs),
:mod:`pytest_sadl.profile` (the cached training profile), :mod:`pytest_sadl.engine`
(the criteria over the recorded traces), :mod:`pytest_sadl.plugin.finish` and
:mod:`pytest_sadl.report` (the end and its outputs), :mod:`pytest_sadl.plugin.outcome`
(what the problems make of the exit status).
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_sadl.plugin.options import add_options, check_paths, read_options
from pytest_sadl.plugin.outcome import Outcome
from pytest_sadl.plugin.session import (
    ControllerSession,
    RecordingSession,
    SerialSession,
    WorkerSession,
    marker,
)
from pytest_sadl.plugin.sources import Sources, make_recorder
from pytest_sadl.plugin.status import Status

SOURCES = pytest.StashKey[Sources]()
SESSION = pytest.StashKey[RecordingSession]()
SESSION_PLUGIN = "sadl-session"
MARKER_HELP = (
    "sadl(group='name'): record every input this test feeds the model (model(x), predict, "
    "predict_on_batch, evaluate, test_on_batch; a torch module's forward) for surprise adequacy "
    "and neuron coverage, attributed to the group"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def is_controller(config: pytest.Config) -> bool:
    """A pytest-xdist controller (as pytest-xdist itself decides: a ``--dist`` mode and nodes)."""
    return bool(
        config.pluginmanager.hasplugin("xdist")
        and config.getoption("dist", "no") != "no"
        and config.getoption("tx", None)
    )


def session_class(config: pytest.Config) -> type[RecordingSession]:
    if hasattr(config, "workerinput"):
        return WorkerSession
    return ControllerSession if is_controller(config) else SerialSession


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    options = read_options(config)
    worker = hasattr(config, "workerinput")

    outcome = Outcome()
    recorder = make_recorder(options) if options.enabled else None
    status = None if worker else Status(config)  # the profile's status lines, after pytest's header
    sources = config.stash[SOURCES] = Sources(config, options, recorder, outcome, status)
    if options.enabled:
        check_paths(options)
        session = config.stash[SESSION] = session_class(config)(config, options, sources, outcome)
        config.pluginmanager.register(session, SESSION_PLUGIN)


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION, None)
    if session is not None:
        del config.stash[SESSION]
        config.pluginmanager.unregister(session)


def _session(config: pytest.Config) -> RecordingSession | None:
    return config.stash.get(SESSION, None)


@pytest.fixture(autouse=True)
def _sadl_autouse(request: pytest.FixtureRequest) -> None:
    """For a marked test, get the model (the project's own ``sadl_model`` fixture if any)."""
    session = _session(request.config)
    if session is not None and isinstance(request.node, pytest.Function) and marker(request.node) is not None:
        session.entry(request)


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def sadl_model(pytestconfig: pytest.Config) -> Any:
    """The model (Keras or torch) named by ``sadl_model``/``--sadl-model`` (loaded once per session).

    Define a fixture of the same name in ``conftest.py`` to provide the model yourself."""
    return pytestconfig.stash[SOURCES].model()


@pytest.fixture(scope="session")
def sadl_train(pytestconfig: pytest.Config) -> Any:
    """The training data named by ``sadl_train``/``--sadl-train``, as
    :class:`pytest_sadl.capture.data.TrainingData` (``.x``, ``.y``). Override it in ``conftest.py``
    to return an array, an ``(x, y)`` tuple, a dict of arrays by input name or a list in
    ``model.inputs`` order (a model with several inputs), or a ``tf.data.Dataset``."""
    return pytestconfig.stash[SOURCES].train()


@pytest.fixture(scope="session")
def sadl_profile(request: pytest.FixtureRequest) -> Any:
    """The cached training profile of ``sadl_model`` on ``sadl_train``
    (:class:`pytest_sadl.profile.TrainingProfile`)."""
    return request.config.stash[SOURCES].load_profile(
        request.getfixturevalue("sadl_model"), request.getfixturevalue("sadl_train")
    )


@pytest.fixture
def sadl_record(request: pytest.FixtureRequest) -> Any:
    """``sadl_record(x)`` records inputs for this test explicitly (traced now, in one pass)."""
    session = _session(request.config)

    def record(x: Any) -> None:
        if session is None:
            return
        rec, model = session.entry(request)
        session.recorder.record_inputs(model, x, batch_size=session.options.batch_size, record=rec)

    return record


@pytest.fixture
def sadl_labels(request: pytest.FixtureRequest) -> Any:
    """``sadl_labels(x, y)`` gives the true labels ``y`` (class ids, or targets for a regression
    model) of the inputs ``x`` this test feeds the model, for the "does surprise predict this
    model's mistakes" figures. A recorded input takes the label of the labelled row with the
    same values (matched by a digest of the values, see ``records.input_digests``), whichever
    test fed it; inputs without a label are unlabelled. A no-op when measuring is off."""
    session = _session(request.config)

    def labels(x: Any, y: Any) -> None:
        if session is None:
            return
        rec, _ = session.entry(request)
        session.recorder.add_labels(x, y, record=rec)

    return labels
