"""The pytest plugin: options, marker, fixtures, recording, the end-of-session report.

Thin by design: the work is in :mod:`pytest_sadl.plugin.recorder` (who fed which inputs),
:mod:`pytest_sadl.profile` (the cached training profile), :mod:`pytest_sadl.engine`
(the criteria over the recorded traces) and :mod:`pytest_sadl.report` (the outputs).

Without ``--sadl-coverage`` nothing is recorded and nothing imports TensorFlow; the
``sadl_model``/``sadl_train`` fixtures still load what the configuration names, so a
project's tests run the same with the plugin on or off.

With pytest-xdist, each worker sends a test's recordings with the test's teardown
report, as the test ends (:mod:`pytest_sadl.plugin.session`), and the controller computes the
metrics once over everything, in collection order: ``-n 2`` gives the numbers of a
serial run, and a crashed worker loses only the test it was running. Which training
profile the metrics use is decided in one place, :meth:`SadlState.resolve_profile`.
The end of the session (results, comparison, reports, exit status) is
:mod:`pytest_sadl.plugin.session`'s.
"""

from __future__ import annotations

import contextlib
import traceback
import warnings
from pathlib import Path
from typing import Any

import pytest

from pytest_sadl.plugin import session as sadl_session
from pytest_sadl.plugin import transport
from pytest_sadl.plugin.options import (
    SadlOptions,
    add_options,
    check_paths,
    read_options,
)

STATE = pytest.StashKey["SadlState"]()
_RECORD = pytest.StashKey[tuple[Any, Any]]()  # (the TestRecord, the model)
_ATTEMPT = pytest.StashKey[int]()  # how many times this item's setup has begun (reruns)
MARKER_HELP = (
    "sadl(group='name'): record every input this test feeds the model (predict, predict_on_batch, "
    "__call__) for surprise adequacy and neuron coverage, attributed to the group"
)
DEFAULT_GROUP = "default"


class SadlState:
    """Everything the plugin keeps for one session (in ``config.stash``)."""

    def __init__(self, config: pytest.Config, options: SadlOptions) -> None:
        self.config = config
        self.options = options
        self.is_worker = hasattr(config, "workerinput")
        self._model: Any = None
        self._train: Any = None
        self._profiles: dict[tuple[int, int], Any] = {}
        self.recorder: Any = None
        self.model_seen: Any = None  # the model object the marked tests used (this process)
        self.train_seen: Any = None  # a project's own sadl_train fixture value, if any
        self.worker_profiles: list[str] = []  # profile files that workers built and used
        self.model_from_fixture = False  # a worker's tests used a project's sadl_model fixture
        self.order: dict[str, int] = {}
        self.warnings: list[str] = []
        self.results: Any = None
        self.data: dict[str, Any] | None = None
        self.comparison: Any = None
        self.comparison_failures: list[str] = []
        self.warnings_after: list[str] = []  # warnings that arose after the results were made
        self.arrivals = transport.Arrivals()  # xdist controller: what the workers' reports carried
        self.written: list[str] = []  # "sadl: json report written to PATH" lines
        self.report_errors: list[str] = []  # one line per report that could not be written
        self.error: str | None = None
        self.error_detail: str | None = None
        self.fatal = False  # a usage error ended the run (a project fixture's model or data)

    # -- what the configuration names -----------------------------------------

    def model(self) -> Any:
        if self._model is None:
            if self.options.model is None:
                raise pytest.UsageError(
                    "pytest-sadl: no model configured; set sadl_model in [tool.pytest.ini_options] "
                    "or pass --sadl-model=PATH, or define a sadl_model fixture in conftest.py"
                )
            from pytest_sadl.capture.model import load_model
            from pytest_sadl.errors import SadlConfigError

            try:
                self._model = load_model(self.options.model, what="--sadl-model")
            except SadlConfigError as exc:
                raise pytest.UsageError(f"pytest-sadl: {exc}") from None
            if self.recorder is not None:  # the weights of the file the profile is made from
                self.recorder.bind(self._model)
        return self._model

    def train(self) -> Any:
        if self._train is None:
            if self.options.train is None:
                raise pytest.UsageError(
                    "pytest-sadl: no training data configured; set sadl_train in [tool.pytest.ini_options] "
                    "or pass --sadl-train=PATH, or define a sadl_train fixture in conftest.py"
                )
            from pytest_sadl.capture.data import load_training_data
            from pytest_sadl.errors import SadlConfigError

            try:
                self._train = load_training_data(self.options.train, what="--sadl-train")
            except SadlConfigError as exc:
                raise pytest.UsageError(f"pytest-sadl: {exc}") from None
        return self._train

    def cache_dir(self) -> Path:
        """``--sadl-cache-dir`` (``~`` expanded), else ``<pytest cache_dir>/d/sadl``: the
        folder ``config.cache.mkdir("sadl")`` would make, not made here (the store makes
        it, and an unwritable one is a warning, not an INTERNALERROR)."""
        from pytest_sadl.store.location import default_cache_dir, expand_path

        if self.options.cache_dir is not None:
            return expand_path(self.options.cache_dir, self.config.rootpath)
        try:
            pytest_cache = self.config.getini("cache_dir")  # unknown with -p no:cacheprovider
        except ValueError:
            pytest_cache = None
        return default_cache_dir(self.config.rootpath, pytest_cache or None)

    # -- the training profile -------------------------------------------------

    def load_profile(self, model: Any, train: Any) -> Any:
        """The profile of ``model`` on ``train``: loaded or built, once per pair and process."""
        key = (id(model), id(train))
        if key not in self._profiles:
            from pytest_sadl.errors import SadlConfigError
            from pytest_sadl.profile.build import ProfileOptions
            from pytest_sadl.profile.lookup import load_or_build

            tr = self.config.pluginmanager.get_plugin("terminalreporter")
            root = self.config.rootpath
            status = (
                None if tr is None or self.is_worker else (lambda msg: tr.write_line(f"sadl: {short_path(msg, root)}"))
            )
            options = ProfileOptions.from_sadl(self.options)
            from pytest_sadl.errors import SadlCacheWarning

            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", SadlCacheWarning)
                    self._profiles[key] = load_or_build(
                        model, train, options, self.cache_dir(), status=status, lock_timeout=self.options.lock_timeout
                    )
            except SadlConfigError as exc:
                raise pytest.UsageError(f"pytest-sadl: {exc}") from None
            finally:
                for w in caught:  # one line each, now and in the summary; others pass on
                    if issubclass(w.category, SadlCacheWarning):
                        self.warnings.append(str(w.message))
                        if tr is not None and not self.is_worker:
                            tr.write_line(f"sadl: warning: {w.message}", yellow=True)
                    else:
                        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return self._profiles[key]

    def train_for_profile(self) -> Any:
        return self.train_seen if self.train_seen is not None else self.train()

    def configured_profile_covers(self, model: Any) -> bool:
        """Whether the profile built from the configured paths is the one for ``model``
        (the tests used the configured model and training data, not project fixtures)."""
        return model is self._model and self.train_seen is self._train and self._model is not None

    def resolve_profile(self) -> Any:
        """The profile the results use (controller or serial run).

        1. a profile a worker built for the model its tests used (project fixtures, xdist);
        2. the profile of the model the marked tests used in this process;
        3. the profile of the configured model and data (built at session start).
        """
        if self.worker_profiles:
            from pytest_sadl.profile.files import load_profile

            if len(set(self.worker_profiles)) > 1:
                self.warnings.append(
                    "pytest-sadl: workers used different models or training data; using the first profile"
                )
            return load_profile(self.worker_profiles[0])
        if self.model_seen is not None:
            return self.load_profile(self.model_seen, self.train_for_profile())
        if self.options.model is None:
            raise pytest.UsageError(
                "pytest-sadl: no marked test ran and no model is configured (sadl_model), so there "
                "is nothing to report on; mark the tests that feed the model with @pytest.mark.sadl"
            )
        return self.load_profile(self.model(), self.train())

    def make_recorder(self) -> Any:
        from pytest_sadl.plugin.recorder import Recorder

        def factory(model: Any) -> Any:
            from pytest_sadl.capture import TraceModel
            from pytest_sadl.errors import SadlConfigError

            try:  # the same layer resolution as the profile's; no XLA: outputs equal predict's;
                # extrema: each conv map's min/max per input, for NC's scaling
                return TraceModel(
                    model,
                    self.options.sa_layers,
                    self.options.coverage_layers,
                    output=self.options.output,
                    jit=False,
                    extrema=True,
                )
            except SadlConfigError as exc:
                raise pytest.UsageError(f"pytest-sadl: {exc}") from None

        def digest(model: Any) -> str:
            from pytest_sadl.capture.weights import model_digest

            return model_digest(model)

        self.recorder = Recorder(factory, digest)
        return self.recorder


@contextlib.contextmanager
def _backend_errors() -> Any:
    """Keras, TensorFlow or JAX missing or broken, wherever the plugin first needs them:
    a usage error in one line saying what to install (``capture.backend.backend_error``)."""
    try:
        yield
    except pytest.UsageError:
        raise
    except Exception as exc:
        from pytest_sadl.capture.backend import backend_error

        err = backend_error(exc)
        if err is None:
            raise
        raise pytest.UsageError(f"pytest-sadl: {err}") from None


# ----------------------------------------------------------------------------- hooks


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


class _XdistController:
    """Registered on a pytest-xdist controller only: the workers' test reports carry their
    recordings (see :mod:`pytest_sadl.plugin.session`)."""

    def __init__(self, state: SadlState) -> None:
        self.state = state

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        transport.arrived(self.state, report)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    options = read_options(config)
    state = SadlState(config, options)
    if options.enabled:
        check_paths(options)
        state.make_recorder()
        if (
            not state.is_worker
            and config.pluginmanager.hasplugin("xdist")
            and getattr(config.option, "numprocesses", None)
        ):
            config.pluginmanager.register(_XdistController(state), "sadl-xdist-controller")
    config.stash[STATE] = state


def _state(config: pytest.Config) -> SadlState | None:
    return config.stash.get(STATE, None)


def _enabled(config: pytest.Config) -> SadlState | None:
    state = _state(config)
    return state if state is not None and state.options.enabled else None


#: The width the plugin's own lines keep to (the header, status lines), as the summary does.
LINE_WIDTH = 80


def short_path(text: str, rootdir: Path) -> str:
    """``text`` with the rootdir's absolute prefix dropped from every path in it."""
    prefix = str(rootdir).rstrip("/\\") + "/"
    return text.replace(prefix, "")


def header_lines(parts: list[str], width: int = LINE_WIDTH) -> list[str]:
    """``sadl: a; b; ...`` in as few lines of at most ``width`` columns as the parts allow."""
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + 2 + len(part) <= width:
            lines[-1] += "; " + part
        else:
            lines.append("sadl: " + part)
    return lines


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    state = _enabled(config)
    if state is None:
        return None
    o = state.options
    reports = ", ".join(r.kind + (f":{r.path}" if r.path else "") for r in o.reports)
    parts = [
        f"model={o.model or 'fixture sadl_model'}",
        f"train={o.train or 'fixture sadl_train'}",
        f"SA layers={','.join(map(str, o.sa_layers)) if o.sa_layers else 'last hidden'}",
        f"reports={reports}",
    ]
    if o.fail_under:
        parts.append("fail-under=" + ",".join(f"{k}:{v:g}" for k, v in o.fail_under.items()))
    return header_lines([short_path(p, config.rootpath) for p in parts])


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Validate the model, its layers and the training data before any test runs, and warm
    the profile cache (pytest-xdist workers then load it instead of building it)."""
    state = _enabled(session.config)
    if state is None or state.is_worker or session.config.option.collectonly or state.options.model is None:
        return  # a model from a project fixture is checked when first used
    with _backend_errors():
        model = state.model()
        if state.options.train is None:
            state.recorder.trace_model(model)  # resolves (and checks) the layers
            return
        state.load_profile(model, state.train())


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    state = _enabled(config)
    if state is not None:
        state.order = {item.nodeid: i for i, item in enumerate(items)}


def _marker(item: pytest.Item) -> pytest.Mark | None:
    return item.get_closest_marker("sadl")


def _group(mark: pytest.Mark | None) -> str:
    if mark is None:
        return DEFAULT_GROUP
    return str(mark.kwargs.get("group", mark.args[0] if mark.args else DEFAULT_GROUP))


def _check_fixture_model(state: SadlState, model: Any) -> None:
    """A model (or data) from a project's fixture that cannot be traced ends the run as a
    usage error (exit code 4, one line) before any marked test runs against it, as a
    configured one does at the session's start: the layers resolve, and the profile is
    built (or loaded) now when the training data is known."""
    try:
        with _backend_errors():
            state.recorder.trace_model(model)
            state.recorder.bind(model)  # before its profile is made from it
            if state.train_seen is not None:
                state.load_profile(model, state.train_seen)
    except pytest.UsageError as exc:
        state.fatal = True
        pytest.exit(str(exc), returncode=pytest.ExitCode.USAGE_ERROR)


def _entry(state: SadlState, request: pytest.FixtureRequest) -> tuple[Any, Any]:
    """(record, model) of the current test, made on first need."""
    item: pytest.Item = request.node
    entry = item.stash.get(_RECORD, None)
    if entry is None:
        try:
            model = request.getfixturevalue("sadl_model")
        except pytest.UsageError as exc:  # no model configured, or it cannot be loaded
            if state.is_worker:  # pytest.exit in a pytest-xdist worker is the controller's INTERNALERROR
                raise
            state.fatal = True
            pytest.exit(str(exc), returncode=pytest.ExitCode.USAGE_ERROR)
        state.model_seen = model
        if state.train_seen is None:  # the configured data, or a project's own sadl_train
            with contextlib.suppress(pytest.UsageError):  # neither: reported when needed
                state.train_seen = request.getfixturevalue("sadl_train")
        if model is not state._model:
            _check_fixture_model(state, model)
        index = state.order.get(item.nodeid, len(state.order))
        attempt = item.stash.get(_ATTEMPT, 1)
        entry = item.stash[_RECORD] = (
            state.recorder.record_for(item.nodeid, index, _group(_marker(item)), attempt),
            model,
        )
    return entry


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test run again (pytest-rerunfailures) starts a new record: only the last attempt's
    inputs and outcome count, serially and under pytest-xdist alike (the controller keeps
    the record of the highest attempt, see ``Recorder.merge``)."""
    state = _enabled(item.config)
    if state is None:
        return
    attempt = item.stash.get(_ATTEMPT, 0) + 1
    item.stash[_ATTEMPT] = attempt
    if attempt > 1 and _RECORD in item.stash:
        del item.stash[_RECORD]  # made again, as attempt `attempt`, on first need


@pytest.fixture(autouse=True)
def _sadl_autouse(request: pytest.FixtureRequest) -> None:
    """For a marked test, get the model (the project's own ``sadl_model`` fixture if any)."""
    state = _enabled(request.config)
    if state is not None and isinstance(request.node, pytest.Function) and _marker(request.node) is not None:
        _entry(state, request)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    state = _enabled(item.config)
    entry = item.stash.get(_RECORD, None) if state is not None else None
    if entry is None:
        yield
        return
    rec, model = entry
    with state.recorder.recording(rec, model):  # type: ignore[union-attr]
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Any:
    outcome = yield
    state = _enabled(item.config)
    if state is None:
        return
    report = outcome.get_result()
    rec = state.recorder.records.get(item.nodeid)
    entry = item.stash.get(_RECORD, None)
    if call.when == "call" and entry is not None and entry[0] is rec:
        state.recorder.check_model(entry[1], rec)  # the model changed (fit, set_weights)?
    if rec is not None:
        if report.failed:
            rec.outcome = "failed" if report.when == "call" else "error"
        elif report.skipped and rec.outcome == "passed" and report.when != "teardown":
            rec.outcome = "skipped"
    if not state.is_worker:
        return
    # pytest-xdist: the controller learns that a test may record as it starts, and gets its
    # records as it ends (see session); a test skipped before recording sends none.
    may_record = _marker(item) is not None or "sadl_record" in getattr(item, "fixturenames", ())
    if call.when == "setup" and may_record:
        report.sadl_marked = True
    elif call.when == "teardown" and (may_record or rec is not None):
        records = [state.recorder.records.pop(item.nodeid)] if rec is not None else []
        report.sadl_record = transport.pack(state.recorder, records)


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def sadl_model(pytestconfig: pytest.Config) -> Any:
    """The Keras model named by ``sadl_model``/``--sadl-model`` (loaded once per session).

    Define a fixture of the same name in ``conftest.py`` to provide the model yourself."""
    state = _state(pytestconfig)
    assert state is not None
    return state.model()


@pytest.fixture(scope="session")
def sadl_train(pytestconfig: pytest.Config) -> Any:
    """The training data named by ``sadl_train``/``--sadl-train``, as
    :class:`pytest_sadl.capture.data.TrainingData` (``.x``, ``.y``). Override it in ``conftest.py``
    to return an array, an ``(x, y)`` tuple, a dict of arrays by input name or a list in
    ``model.inputs`` order (a model with several inputs), or a ``tf.data.Dataset``."""
    state = _state(pytestconfig)
    assert state is not None
    return state.train()


@pytest.fixture(scope="session")
def sadl_profile(request: pytest.FixtureRequest) -> Any:
    """The cached training profile of ``sadl_model`` on ``sadl_train``
    (:class:`pytest_sadl.profile.TrainingProfile`)."""
    state = _state(request.config)
    assert state is not None
    return state.load_profile(request.getfixturevalue("sadl_model"), request.getfixturevalue("sadl_train"))


@pytest.fixture
def sadl_record(request: pytest.FixtureRequest) -> Any:
    """``sadl_record(x)`` records inputs for this test explicitly (traced now, in one pass)."""
    state = _enabled(request.config)

    def record(x: Any) -> None:
        if state is None:
            return
        rec, model = _entry(state, request)
        state.recorder.record_inputs(model, x, batch_size=state.options.batch_size, record=rec)

    return record


@pytest.fixture
def sadl_labels(request: pytest.FixtureRequest) -> Any:
    """``sadl_labels(x, y)`` gives the true labels ``y`` (class ids, or targets for a regression
    model) of the inputs ``x`` this test feeds the model, for the "does surprise predict this
    model's mistakes" figures. A recorded input takes the label of the labelled row with the
    same values (matched by a digest of the values, see ``recorder.input_digests``), whichever
    test fed it; inputs without a label are unlabelled. A no-op when measuring is off."""
    state = _enabled(request.config)

    def labels(x: Any, y: Any) -> None:
        if state is None:
            return
        rec, _ = _entry(state, request)
        state.recorder.add_labels(x, y, record=rec)

    return labels


# ----------------------------------------------------------------------------- the end


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist controller: a worker ended; take what it sent at its end."""
    state = _enabled(node.config)
    if state is not None:
        transport.node_down(state, node, error)


def _worker_finish(state: SadlState) -> None:
    out = state.config.workeroutput  # type: ignore[attr-defined]
    out["sadl_warnings"] = list(state.recorder.messages)
    out["sadl_model_from_fixture"] = state.model_seen is not None and state.model_seen is not state._model
    try:
        # Only the workers have a project fixture's model (or data): they build the profile
        # (once, under the cache's lock) and say where it is.
        if state.model_seen is not None and not state.configured_profile_covers(state.model_seen):
            profile = state.load_profile(state.model_seen, state.train_for_profile())
            if profile.path is not None:
                out["sadl_profile"] = str(profile.path)
    finally:  # what no test report carried (inputs recorded outside a test)
        out["sadl"] = transport.pack(state.recorder, list(state.recorder.records.values()))


def _measure(session: pytest.Session, exitstatus: int) -> bool:
    """Whether this session's end computes results (not for --collect-only or Ctrl-C)."""
    state = _state(session.config)
    return (
        not session.config.option.collectonly
        and exitstatus != pytest.ExitCode.INTERRUPTED
        and not (state is not None and state.fatal)
    )


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = _enabled(session.config)
    if state is None or not _measure(session, exitstatus):
        return
    if state.is_worker:
        _worker_finish(state)
        return
    try:
        with _backend_errors():
            sadl_session.finish(state)
    except KeyboardInterrupt:  # Ctrl-C at the end: as pytest ends an interrupt, no traceback
        state.error = sadl_session.interrupted_message(state)
        session.exitstatus = pytest.ExitCode.INTERRUPTED
        return
    except pytest.UsageError as exc:
        state.error = str(exc)
    except Exception as exc:  # never take pytest (and the plugins after this hook) down
        state.error = f"pytest-sadl: could not compute the results: {type(exc).__name__}: {exc}"
        state.error_detail = traceback.format_exc()
    session.exitstatus = sadl_session.exit_status(state, session.exitstatus)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = _enabled(config)
    if state is None or state.is_worker:
        return
    tr = terminalreporter
    if state.error:
        tr.section("pytest-sadl", sep="-", red=True)
        if state.error_detail and config.option.verbose > 0:
            tr.write(state.error_detail)
        tr.write_line(state.error, red=True)
        return
    if state.results is None or state.data is None:
        return
    kinds = {r.kind for r in state.options.reports}
    if kinds & {"term", "term-verbose"}:
        from pytest_sadl.report.terminal import write_terminal

        write_terminal(
            state.data, tr.write_line, tr.section, verbose="term-verbose" in kinds, comparison=state.comparison
        )
    elif state.results.missing:  # no table asked for, but an incomplete run is never silent
        tr.write_line(state.results.warnings[0], yellow=True)
    for line in state.written:
        tr.write_line(line)
    for line in state.report_errors:
        tr.write_line(line, red=True, bold=True)
    for failure in state.results.failures:
        tr.write_line(f"FAIL {failure.message}", red=True, bold=True)
    for line in state.comparison_failures:
        tr.write_line(f"FAIL {line}", red=True, bold=True)
