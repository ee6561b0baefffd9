"""The session objects: a serial run, a pytest-xdist controller, a pytest-xdist worker.

:func:`pytest_sadl.plugin.hooks.pytest_configure` chooses one, once, and registers it as a
pytest plugin only when ``--sadl-coverage`` is on (as pytest's junitxml and pytest-cov
do): without it none of these hooks exist. Each holds its own state; what they share is
:class:`RecordingSession` (which test fed which inputs):

* :class:`SerialSession`: records, and at its end computes the results, writes the
  reports and decides the exit status (:class:`~pytest_sadl.plugin.outcome.Outcome`);
* :class:`ControllerSession`: a serial session that records nothing itself but hears the
  workers (:mod:`pytest_sadl.plugin.transport`);
* :class:`WorkerSession`: records, and sends what it recorded to the controller.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_sadl.config import SadlOptions
from pytest_sadl.plugin import finish as ending
from pytest_sadl.plugin import transport
from pytest_sadl.plugin.outcome import Outcome
from pytest_sadl.plugin.scope import WORKER_KEY, ScopeTracker, selection_options, stop_reason
from pytest_sadl.plugin.sources import Sources
from pytest_sadl.plugin.status import short_path
from pytest_sadl.text import terminal as safe

_RECORD = pytest.StashKey[tuple[Any, Any]]()  # (the TestRecord, the model)
_ATTEMPT = pytest.StashKey[int]()  # how many times this item's setup has begun (reruns)
DEFAULT_GROUP = "default"
#: The width the plugin's own lines keep to (the header, status lines), as the summary does.
LINE_WIDTH = 80


@contextlib.contextmanager
def backend_errors() -> Iterator[None]:
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


def header_lines(parts: list[str], width: int = LINE_WIDTH) -> list[str]:
    """``sadl: a; b; ...`` in as few lines of at most ``width`` columns as the parts allow."""
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + 2 + len(part) <= width:
            lines[-1] += "; " + part
        else:
            lines.append("sadl: " + part)
    return lines


def marker(item: pytest.Item) -> pytest.Mark | None:
    return item.get_closest_marker("sadl")


def group_of(mark: pytest.Mark | None) -> str:
    if mark is None:
        return DEFAULT_GROUP
    return str(mark.kwargs.get("group", mark.args[0] if mark.args else DEFAULT_GROUP))


def may_record(item: pytest.Item) -> bool:
    """Whether a test may record inputs: marked, or using ``sadl_record``."""
    return marker(item) is not None or "sadl_record" in getattr(item, "fixturenames", ())


class RecordingSession:
    """What every process measuring with ``--sadl-coverage`` does: which test fed which inputs."""

    def __init__(self, config: pytest.Config, options: SadlOptions, sources: Sources, outcome: Outcome) -> None:
        self.config = config
        self.options = options
        self.sources = sources
        self.outcome = outcome
        self.recorder = sources.recorder
        self.order: dict[str, int] = {}
        self.scope = ScopeTracker(may_record)  # which marked tests were collected, run

    def stop(self, exc: pytest.UsageError) -> None:
        """A usage error of a project fixture's model or data ends the run (exit status 4)."""
        self.outcome.stop(exc)

    # -- per test ---------------------------------------------------------------

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.order = {item.nodeid: i for i, item in enumerate(items)}

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.scope.on_deselected(items)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self.scope.on_collect_report(report)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.scope.on_collected(session.items)
        lf = session.config.pluginmanager.get_plugin("lfplugin")
        self.scope.last_failed = bool(session.config.getoption("lf", False) and getattr(lf, "lastfailed", None))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """A test run again (pytest-rerunfailures) starts a new record: only the last attempt's
        inputs and outcome count, serially and under pytest-xdist alike (the controller keeps
        the record of the highest attempt, see ``Recorder.merge``)."""
        attempt = item.stash.get(_ATTEMPT, 0) + 1
        item.stash[_ATTEMPT] = attempt
        if attempt > 1 and _RECORD in item.stash:
            del item.stash[_RECORD]  # made again, as attempt `attempt`, on first need

    def check_fixture_model(self, model: Any) -> None:
        """A model (or data) from a project's fixture that cannot be traced ends the run as a
        usage error (exit code 4, one line) before any marked test runs against it, as a
        configured one does at the session's start: the layers resolve, and the profile is
        built (or loaded) now when the training data is known."""
        try:
            with backend_errors():
                self.recorder.trace_model(model)
                self.recorder.bind(model)  # before its profile is made from it
                if self.sources.train_seen is not None:
                    self.sources.load_profile(model, self.sources.train_seen)
        except pytest.UsageError as exc:
            self.outcome.stop(exc)

    def entry(self, request: pytest.FixtureRequest) -> tuple[Any, Any]:
        """(record, model) of the current test, made on first need."""
        item: pytest.Item = request.node
        found = item.stash.get(_RECORD, None)
        if found is not None:
            return found
        try:
            model = request.getfixturevalue("sadl_model")
        except pytest.UsageError as exc:  # no model configured, or it cannot be loaded
            self.stop(exc)
            raise
        sources = self.sources
        sources.model_seen = model
        if sources.train_seen is None:  # the configured data, or a project's own sadl_train
            with contextlib.suppress(pytest.UsageError):  # neither: reported when needed
                sources.train_seen = request.getfixturevalue("sadl_train")
        if not sources.is_configured(model):
            self.check_fixture_model(model)
        index = self.order.get(item.nodeid, len(self.order))
        attempt = item.stash.get(_ATTEMPT, 1)
        record = self.recorder.record_for(item.nodeid, index, group_of(marker(item)), attempt)
        item.stash[_RECORD] = (record, model)
        return record, model

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        found = item.stash.get(_RECORD, None)
        if found is None:
            yield
            return
        record, model = found
        with self.recorder.recording(record, model):
            yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
        result: Any = yield
        report: pytest.TestReport = result.get_result()
        rec = self.recorder.records.get(item.nodeid)
        found = item.stash.get(_RECORD, None)
        if call.when == "call" and found is not None and found[0] is rec:
            self.recorder.check_model(found[1], rec)  # the model changed (fit, set_weights)?
        if rec is not None:
            rec.outcome = _outcome(rec.outcome, report)
        self.reported(item, report)

    def reported(self, item: pytest.Item, report: pytest.TestReport) -> None:
        """A test's report is made (a worker sends its records with it)."""


def _outcome(outcome: str, report: pytest.TestReport) -> str:
    """A test's outcome once ``report`` (of its set-up, call or teardown) is made: a failure
    in the call fails it, elsewhere it is an error; a skip before its teardown skips it."""
    if report.failed:
        return "failed" if report.when == "call" else "error"
    if report.skipped and outcome == "passed" and report.when != "teardown":
        return "skipped"
    return outcome


def _header_parts(o: SadlOptions) -> list[str]:
    """The header's settings: the model, the data, the SA layers, the reports and the floors."""
    reports = ", ".join(r.kind + (f":{r.path}" if r.path else "") for r in o.reports)
    parts = [
        f"model={o.model or 'fixture sadl_model'}",
        f"train={o.train or 'fixture sadl_train'}",
        f"SA layers={','.join(map(str, o.sa_layers)) if o.sa_layers else 'last hidden'}",
        f"reports={reports}",
    ]
    if o.fail_under:
        parts.append("fail-under=" + ",".join(f"{k}:{v:g}" for k, v in o.fail_under.items()))
    return parts


class SerialSession(RecordingSession):
    """A run in one process (or a pytest-xdist controller): measures, reports, decides."""

    def __init__(self, config: pytest.Config, options: SadlOptions, sources: Sources, outcome: Outcome) -> None:
        super().__init__(config, options, sources, outcome)
        self.arrivals = transport.Arrivals()  # what workers sent (none in a serial run)
        self.ending = ending.Ending()

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        parts = _header_parts(self.options)
        held = [] if self.sources.status is None else self.sources.status.header()
        return header_lines([short_path(p, config.rootpath) for p in parts]) + held

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Validate the model, its layers and the training data before any test runs, and warm
        the profile cache (pytest-xdist workers then load it instead of building it)."""
        if session.config.option.collectonly or self.options.model is None:
            return  # a model from a project fixture is checked when first used
        try:
            with backend_errors():
                model = self.sources.model()
                if self.options.train is None:
                    self.recorder.trace_model(model)  # resolves (and checks) the layers
                    return
                self.sources.load_profile(model, self.sources.train())
        except BaseException:  # the run ends here: what was done so far, before the error
            self._release()
            raise

    def _release(self) -> None:
        if self.sources.status is not None:
            self.sources.status.release()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        """The status lines no header took (``-q``), before the first test."""
        self._release()

    #: a controller's: why pytest-xdist stopped the run (-x, --maxfail), which pytest sees
    #: as an interrupt; ``None`` otherwise
    stopped: str | None = None

    def measures(self, session: pytest.Session, exitstatus: int) -> bool:
        """Whether this session's end computes results (not for --collect-only or Ctrl-C;
        a pytest-xdist stop after failures is not a Ctrl-C)."""
        interrupted = exitstatus == pytest.ExitCode.INTERRUPTED and self.stopped is None
        return not session.config.option.collectonly and not interrupted and not self.outcome.fatal

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self.measures(session, exitstatus):
            return
        outcome = self.outcome
        try:
            with backend_errors():
                ending.finish(
                    self.options,
                    self.sources,
                    self.recorder,
                    self.order,
                    self.arrivals,
                    outcome,
                    self.ending,
                    self.scope_maker(session),
                )
        except KeyboardInterrupt:  # Ctrl-C at the end: as pytest ends an interrupt, no traceback
            outcome.interrupt(ending.interrupted_message(self.options, self.ending, outcome))
        except pytest.UsageError as exc:
            outcome.fail(str(exc))
        except Exception as exc:  # never take pytest (and the plugins after this hook) down
            outcome.fail(
                f"pytest-sadl: could not compute the results: {type(exc).__name__}: {exc}", traceback.format_exc()
            )
        session.exitstatus = outcome.exit_status(session.exitstatus, self.ending.results)
        from pytest_sadl.plugin.junit import add_to_junit

        add_to_junit(session.config, self.ending.results, outcome.comparison_failures)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.scope.on_report(report)

    def scope_maker(self, session: pytest.Session) -> ending.ScopeMaker:
        """What part of the suite this session measured, once the results say how many
        tests recorded (:mod:`pytest_sadl.plugin.scope`)."""
        config = session.config
        stop = stop_reason(
            session.shouldfail or session.shouldstop or self.stopped, config.getoption("maxfail", 0) or 0
        )
        selecting = selection_options(config.option, self.scope.last_failed)
        return lambda recorded, lost: self.scope.scope(recorded=recorded, stop=stop, selecting=selecting, lost=lost)

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        tr, outcome, end = terminalreporter, self.outcome, self.ending
        if outcome.error:
            self._write_error(tr, config)
            return
        if end.results is None or end.data is None:
            return
        table = self._write_table(tr, end)
        self._write_closing_lines(tr, end.results, table=table)

    def _write_table(self, tr: Any, end: ending.Ending) -> bool:
        """The terminal report's table, when asked for (returns whether it was written);
        without it, an incomplete run's first warning: it is never silent."""
        assert end.results is not None
        kinds = {r.kind for r in self.options.reports}
        if not kinds & {"term", "term-verbose"}:
            if end.results.missing:
                tr.write_line(safe(end.results.warnings[0]), yellow=True)
            return False
        from pytest_sadl.report.terminal import write_terminal

        write_terminal(
            end.results, tr.write_line, tr.section, verbose="term-verbose" in kinds, comparison=end.comparison
        )
        return True

    def _write_error(self, tr: Any, config: pytest.Config) -> None:
        """The run's error in the pytest-sadl section (its detail with ``-v``)."""
        outcome = self.outcome
        tr.section("pytest-sadl", sep="-", red=True)
        if outcome.error_detail and config.option.verbose > 0:
            tr.write(outcome.error_detail)
        tr.write_line(safe(outcome.error), red=True)

    def _write_closing_lines(self, tr: Any, results: Any, *, table: bool) -> None:
        """After the table (or without one): a partial run said (the table says it itself),
        the files written, the thresholds not gated, the threshold failures."""
        from pytest_sadl.report.partial import partial_line, ungated_lines

        said = partial_line(results)
        if said is not None and not table:  # the table says it too
            tr.write_line(safe(f"sadl: {said}"), yellow=True)
        for line in self.outcome.written:
            tr.write_line(safe(line))
        for line in ungated_lines(results):
            tr.write_line(safe(line), yellow=True)
        for line in self.outcome.failure_lines(results):
            tr.write_line(safe(line), red=True, bold=True)


class ControllerSession(SerialSession):
    """A pytest-xdist controller: runs no test, hears the workers, measures at the end."""

    def __init__(self, config: pytest.Config, options: SadlOptions, sources: Sources, outcome: Outcome) -> None:
        super().__init__(config, options, sources, outcome)
        self.spool: Path | None = None  # where collocated workers put each test's records

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """pytest-xdist ends a run stopped by -x/--maxfail with its ``Interrupted`` (a
        ``KeyboardInterrupt``): the run is measured as a serial one stopped there is."""
        kind = type(excinfo.value)
        if kind.__name__ == "Interrupted" and kind.__module__.startswith("xdist"):
            self.stopped = str(excinfo.value) or "stopping after failures"

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Tell each worker where to put its records (see :mod:`~pytest_sadl.plugin.transport`)."""
        if self.spool is None:
            self.spool = Path(tempfile.mkdtemp(prefix="pytest-sadl-spool-"))
        node.workerinput[transport.SPOOL_KEY] = str(self.spool)
        node.workerinput[transport.HOST_KEY] = socket.gethostname()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.scope.on_report(report)
        payload = transport.note(self.arrivals, report)
        if payload is None:
            return
        try:
            records = transport.read_reference(payload, self.spool)
        except (ValueError, OSError) as exc:
            self.outcome.warnings.append(f"pytest-sadl: {exc}")
            return
        if records is not None:  # None: they come at the worker's end
            self.recorder.merge(records)  # none for a test skipped before it recorded
            self.arrivals.received.add(report.nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """A worker ended; take what it sent at its end (``workeroutput``)."""
        self.scope.merge_worker(getattr(node, "workeroutput", {}).get(WORKER_KEY))
        try:
            end = transport.node_down(self.arrivals, node, error)
            records = [] if end is None else transport.unpack(end.records)
        except ValueError as exc:
            self.outcome.warnings.append(f"pytest-sadl: {exc}")
            return
        if end is not None:
            self._take_worker_end(end, records)

    def _take_worker_end(self, end: Any, records: list[Any]) -> None:
        """A worker's end: its last records, the profile it built, whether its model came
        from a fixture, its warnings."""
        self.recorder.merge(records)
        self.arrivals.received.update(r.nodeid for r in records)
        if end.profile:
            self.sources.worker_profiles.append(end.profile)
        self.sources.model_from_fixture |= end.model_from_fixture
        for warning in end.warnings:
            self.outcome.warn(warning)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.spool is not None:
            shutil.rmtree(self.spool, ignore_errors=True)


class WorkerSession(RecordingSession):
    """A pytest-xdist worker: records, and sends its records to the controller."""

    def __init__(self, config: pytest.Config, options: SadlOptions, sources: Sources, outcome: Outcome) -> None:
        super().__init__(config, options, sources, outcome)
        workerinput: dict[str, Any] = getattr(config, "workerinput", {})
        self.spool = transport.spool_for(workerinput, str(workerinput.get("workerid", "gw")))
        self.pending: list[Any] = []  # records to send at the end (no spool, or it failed)
        self.sent = 0

    def stop(self, exc: pytest.UsageError) -> None:
        """pytest.exit in a pytest-xdist worker is the controller's INTERNALERROR: the test
        errors with the usage error instead."""

    def reported(self, item: pytest.Item, report: pytest.TestReport) -> None:
        # The controller learns that a test may record as it starts, and gets its records
        # (or where they are) as it ends; a test skipped before recording sends none.
        recording = may_record(item)
        if report.when == "setup" and recording:
            report.sadl_marked = True  # type: ignore[attr-defined]
        elif report.when == "teardown" and (recording or item.nodeid in self.recorder.records):
            rec = self.recorder.records.pop(item.nodeid, None)
            report.sadl_record = self.reference([] if rec is None else [rec])  # type: ignore[attr-defined]

    def reference(self, records: list[Any]) -> dict[str, Any]:
        self.sent += 1
        spool = self.spool
        if spool is not None and records:
            try:
                spool.mkdir(exist_ok=True)
                return transport.reference(records, spool, self.sent)
            except OSError:  # a full or vanished temporary folder: send them at the end
                self.spool = None
        self.pending.extend(records)
        return transport.reference(records, None, self.sent)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if session.config.option.collectonly or exitstatus == pytest.ExitCode.INTERRUPTED or self.outcome.fatal:
            return
        sources = self.sources
        profile = None
        try:
            # Only the workers have a project fixture's model (or data): they build the profile
            # (once, under the cache's lock) and say where it is.
            profile = sources.worker_profile()
        finally:  # the records no test report referred to a file for, and those made outside a test
            seen = sources.model_seen
            self.config.workeroutput[WORKER_KEY] = self.scope.worker_payload()  # type: ignore[attr-defined]
            self.config.workeroutput["sadl"] = transport.worker_end(  # type: ignore[attr-defined]
                self.pending + list(self.recorder.records.values()),
                list(self.recorder.messages),
                profile,
                seen is not None and not sources.is_configured(seen),
            )
