"""The pytest plugin: options, marker, fixtures, recording, the end-of-session report.

Thin by design: the work is in :mod:`pytest_sadl.recorder` (who fed which inputs),
:mod:`pytest_sadl.profile` (the cached training profile), :mod:`pytest_sadl.engine`
(the criteria over the recorded traces) and :mod:`pytest_sadl.report` (the outputs).

Without ``--sadl-coverage`` nothing is recorded and nothing imports TensorFlow; the
``sadl_model``/``sadl_train`` fixtures still load what the configuration names, so a
project's tests run the same with the plugin on or off.

With pytest-xdist, each worker records its tests and sends them (``workeroutput``) to
the controller, which computes the metrics once over everything, in collection order:
``-n 2`` gives the numbers of a serial run.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from .config import SadlOptions, add_options, check_paths, read_options

STATE = pytest.StashKey["SadlState"]()
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
        self.profile: Any = None
        self.profile_path: str | None = None
        self.recorder: Any = None
        self.model_seen: Any = None  # the model object the marked tests used
        self.train_seen: Any = None
        self.results: Any = None
        self.comparison: Any = None
        self.error: str | None = None
        self.outcomes: dict[str, str] = {}
        self.order: dict[str, int] = {}
        self.warnings: list[str] = []
        self.data: dict[str, Any] | None = None
        self.comparison_failures: list[str] = []

    # -- what the configuration names ---------------------------------------

    def model(self) -> Any:
        if self._model is None:
            if self.options.model is None:
                raise pytest.UsageError(
                    "pytest-sadl: no model configured; set sadl_model in [tool.pytest.ini_options] "
                    "or pass --sadl-model=PATH, or define a sadl_model fixture in conftest.py"
                )
            from .data import SadlConfigError
            from .modelio import load_model

            try:
                self._model = load_model(self.options.model, what="--sadl-model")
            except SadlConfigError as exc:
                raise pytest.UsageError(f"pytest-sadl: {exc}") from None
        return self._model

    def train(self) -> Any:
        if self._train is None:
            if self.options.train is None:
                raise pytest.UsageError(
                    "pytest-sadl: no training data configured; set sadl_train in [tool.pytest.ini_options] "
                    "or pass --sadl-train=PATH, or define a sadl_train fixture in conftest.py"
                )
            from .data import SadlConfigError, load_training_data

            try:
                self._train = load_training_data(self.options.train, what="--sadl-train")
            except SadlConfigError as exc:
                raise pytest.UsageError(f"pytest-sadl: {exc}") from None
        return self._train

    def profile_options(self) -> Any:
        from .profile import ProfileOptions

        return ProfileOptions(
            sa_layers=self.options.sa_layers,
            coverage_layers=self.options.coverage_layers,
            var_threshold=self.options.var_threshold,
            batch_size=self.options.batch_size,
        )

    def cache_dir(self) -> Path:
        if self.options.cache_dir is not None:
            return self.options.cache_dir
        cache = getattr(self.config, "cache", None)  # None with -p no:cacheprovider
        if cache is not None:
            return Path(cache.mkdir("sadl"))
        from .profile import default_cache_dir

        return default_cache_dir(self.config.rootpath)

    def load_profile(self, model: Any, train: Any) -> Any:
        """Load or build the training profile (once per session and process)."""
        if self.profile is None:
            from .data import SadlConfigError
            from .profile import load_or_build

            tr = self.config.get_terminal_reporter() if hasattr(self.config, "get_terminal_reporter") else None
            status = None
            if tr is not None and not self.is_worker:
                status = lambda msg: tr.write_line(f"sadl: {msg}")  # noqa: E731
            try:
                self.profile = load_or_build(model, train, self.profile_options(), self.cache_dir(), status=status)
            except SadlConfigError as exc:
                raise pytest.UsageError(f"pytest-sadl: {exc}") from None
            self.profile_path = str(self.profile.path) if self.profile.path else None
        return self.profile

    def make_recorder(self) -> Any:
        from .recorder import Recorder

        def factory(model: Any) -> Any:
            from .data import SadlConfigError
            from .traces import TraceModel

            try:  # the same layer resolution as the profile's
                return TraceModel(model, self.options.sa_layers, self.options.coverage_layers)
            except SadlConfigError as exc:
                raise pytest.UsageError(f"pytest-sadl: {exc}") from None

        self.recorder = Recorder(factory)
        return self.recorder


# ----------------------------------------------------------------------------- hooks


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    options = read_options(config)
    if not options.enabled:
        config.stash[STATE] = SadlState(config, options)
        return
    check_paths(options)
    state = SadlState(config, options)
    state.make_recorder()
    config.stash[STATE] = state


def _state(config: pytest.Config) -> SadlState | None:
    return config.stash.get(STATE, None)


def _enabled(config: pytest.Config) -> SadlState | None:
    state = _state(config)
    return state if state is not None and state.options.enabled else None


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
    return ["sadl: " + "; ".join(parts)]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Validate the model, its layers and the training data before any test runs, and warm
    the profile cache (pytest-xdist workers then load it instead of building it)."""
    state = _enabled(session.config)
    if state is None or state.is_worker:
        return
    if state.options.model is None:
        return  # the model comes from a fixture: checked when first used
    model = state.model()
    if state.options.train is None:
        from .data import SadlConfigError
        from .traces import TraceModel

        try:
            TraceModel(model, state.options.sa_layers, state.options.coverage_layers)
        except SadlConfigError as exc:
            raise pytest.UsageError(f"pytest-sadl: {exc}") from None
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
    group = mark.kwargs.get("group", mark.args[0] if mark.args else DEFAULT_GROUP)
    return str(group)


_RECORD = pytest.StashKey[Any]()


class _suppress_usage_error:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        return kind is not None and issubclass(kind, pytest.UsageError)


@pytest.fixture(autouse=True)
def _sadl_autouse(request: pytest.FixtureRequest) -> None:
    """For a marked test, get the model (the project's own ``sadl_model`` fixture if any)."""
    state = _enabled(request.config)
    item = request.node
    if state is None or not isinstance(item, pytest.Function) or _marker(item) is None:
        return
    model = request.getfixturevalue("sadl_model")
    state.model_seen = model
    if state.options.train is None and state.train_seen is None:
        with _suppress_usage_error():  # no training data configured: a project fixture, if any
            state.train_seen = request.getfixturevalue("sadl_train")
    rec = state.recorder.record_for(item.nodeid, state.order.get(item.nodeid, len(state.order)), _group(_marker(item)))
    item.stash[_RECORD] = (rec, model)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    state = _enabled(item.config)
    entry = item.stash.get(_RECORD, None) if state is not None else None
    if entry is None:
        return (yield)
    rec, model = entry
    with state.recorder.recording(rec, model):  # type: ignore[union-attr]
        return (yield)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Any:
    outcome = yield
    state = _enabled(item.config)
    if state is None or state.recorder is None:
        return
    rec = state.recorder.records.get(item.nodeid)
    if rec is None:
        return
    report = outcome.get_result()
    if report.failed:
        rec.outcome = "failed" if report.when == "call" else "error"
    elif report.skipped and rec.outcome == "passed" and report.when != "teardown":
        rec.outcome = "skipped"


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
    :class:`pytest_sadl.data.TrainingData` (``.x``, ``.y``). Override it in ``conftest.py``
    to return an array, an ``(x, y)`` tuple or a ``tf.data.Dataset``."""
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
    item = request.node

    def record(x: Any) -> None:
        if state is None:
            return
        entry = item.stash.get(_RECORD, None)
        if entry is None:
            model = request.getfixturevalue("sadl_model")
            rec = state.recorder.record_for(item.nodeid, state.order.get(item.nodeid, len(state.order)), _group(_marker(item)))
            item.stash[_RECORD] = entry = (rec, model)
            state.model_seen = model
        rec, model = entry
        previous = state.recorder.current
        state.recorder.current = rec
        try:
            state.recorder.record_inputs(model, x, batch_size=state.options.batch_size)
        finally:
            state.recorder.current = previous

    return record


# ----------------------------------------------------------------------------- the end


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist controller: take what a worker recorded."""
    state = _enabled(node.config)
    output = getattr(node, "workeroutput", {}) or {}
    if state is None or "sadl" not in output:
        return
    from .recorder import Recorder

    state.recorder.merge(Recorder.records_from_bytes(output["sadl"]))
    if output.get("sadl_profile") and state.profile is None:
        from .profile import load_profile

        state.profile = load_profile(output["sadl_profile"])
    state.warnings.extend(output.get("sadl_warnings", []))


def _worker_finish(state: SadlState) -> None:
    out = state.config.workeroutput  # type: ignore[attr-defined]
    # The controller built the profile when the model is configured by path; when it
    # comes from a project fixture only the workers have it, and they build it (once,
    # under the cache's lock) and say where it is.
    if state.recorder.records and state.options.model is None and state.profile is None and state.model_seen is not None:
        train = state.train_seen if state.train_seen is not None else state.train()
        state.load_profile(state.model_seen, train)
    out["sadl"] = state.recorder.to_bytes()
    if state.profile is not None and state.profile_path:
        out["sadl_profile"] = state.profile_path


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = _enabled(session.config)
    if state is None:
        return
    if state.is_worker:
        _worker_finish(state)
        return
    try:
        _finish(state)
    except pytest.UsageError as exc:
        state.error = str(exc)
    if state.error or (state.results is not None and not state.results.passed) or state.comparison_failures:
        if session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _finish(state: SadlState) -> None:
    from .engine import ProfileView, compute

    records = list(state.recorder.records.values())
    for rec in records:
        rec.index = state.order.get(rec.nodeid, rec.index)
    if state.profile is not None and state.model_seen is not None and state._model is not None and state.model_seen is not state._model:
        state.profile = None  # the tests used a project's own sadl_model fixture, not the configured file
    if state.profile is None:
        model = state.model_seen if state.model_seen is not None else (state.model() if state.options.model else None)
        if model is None:
            state.error = (
                "pytest-sadl: no marked test ran, and no model is configured (sadl_model) to report on; "
                "mark the tests that feed the model with @pytest.mark.sadl"
            )
            return
        train = state.train_seen if state.train_seen is not None else state.train()
        state.load_profile(model, train)
    profile = state.profile
    info = {
        "name": profile.model_name,
        "source": state.options.model or "fixture",
        "fingerprint": profile.model_fingerprint,
        "profile_fingerprint": profile.fingerprint,
        "classifier": profile.classifier,
        "n_classes": profile.n_classes,
        "input_shape": list(profile.input_shape),
        "n_train": profile.n_train,
        "sa_layers": list(profile.sa_layers),
        "coverage_layers": list(profile.coverage_layers),
    }
    state.results = compute(ProfileView.of(profile), records, state.options, info, state.warnings)
    data = state.results.to_dict()
    if state.options.compare is not None:
        from .report._load import load_results
        from .report.compare import compare, compare_failures

        baseline = load_results(state.options.compare)
        state.comparison = compare(data, baseline)
        state.comparison_failures = compare_failures(state.comparison, state.options.compare_fail)
    state.data = data
    for report in state.options.reports:
        if report.kind == "json":
            from .results import write_json

            write_json(data, report.path)  # type: ignore[arg-type]
        elif report.kind == "html":
            from .report.html import write_html

            write_html(data, report.path, comparison=state.comparison)  # type: ignore[arg-type]
        elif report.kind == "markdown":
            from .report.markdown import write_markdown

            write_markdown(data, report.path, comparison=state.comparison)  # type: ignore[arg-type]
        elif report.kind == "badge":
            from .report.badge import write_badge

            write_badge(data, report.path)  # type: ignore[arg-type]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = _enabled(config)
    if state is None or state.is_worker:
        return
    tr = terminalreporter
    if state.error:
        tr.section("pytest-sadl", sep="-", red=True)
        tr.write_line(state.error, red=True)
        return
    if state.results is None:
        return
    data = state.data
    assert data is not None
    kinds = {r.kind for r in state.options.reports}
    if kinds & {"term", "term-verbose"}:
        from .report.terminal import write_terminal

        write_terminal(data, tr.write_line, tr.section, verbose="term-verbose" in kinds, comparison=state.comparison)
    for report in state.options.reports:
        if report.path is not None:
            target = report.path / "index.html" if report.kind == "html" else report.path
            tr.write_line(f"sadl: {report.kind} report written to {target}")
    for failure in state.results.failures:
        tr.write_line(f"FAIL {failure.message}", red=True, bold=True)
    for line in state.comparison_failures:
        tr.write_line(f"FAIL {line}", red=True, bold=True)
