"""The session's work outside the hooks: pytest-xdist transport, the results, the reports.

:mod:`pytest_sadl.plugin` keeps the hooks and the per-session state (``SadlState``); the
hooks call these functions.

pytest-xdist transport (versioned, no pickles). A worker attaches each test's record to
that test's *teardown report* (``report.sadl_record``, :func:`pack`); pytest serialises
a report's attributes (``pytest_report_to_serializable``) and pytest-xdist sends the
report to the controller as soon as the test ends, so a worker that crashes loses only
the inputs of the test it was running. A test that may record says so in its *setup*
report (``report.sadl_marked``); the controller (:class:`Arrivals`) can then name every
test whose inputs never arrived, and why (pytest-xdist reports the test a worker
crashed in with ``when="???"``). What a worker holds at its end (records made outside a
test, warnings, the profile it built for a project fixture's model) still goes through
``workeroutput``, as pytest-cov sends its data.

The end (:func:`finish`): the results are computed once; each report is written on its
own, and one that cannot be written is a one-line error naming its path, never the loss
of the others or of the terminal table; the exit status then says so
(:data:`REPORT_ERROR_EXIT`).
"""

from __future__ import annotations

import base64
import contextlib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .config import Report
    from .plugin import SadlState
    from .recorder import Recorder, TestRecord

TRANSPORT = "pytest-sadl/records"
TRANSPORT_VERSION = 2  # 2: a record says whether it is stale (the model changed before it)
#: The exit status of a run whose tests and thresholds passed (or failed) but one of whose
#: reports could not be written: pytest's usage error, as for any other path the command
#: line gives that cannot be used. Interrupted, internal-error and no-tests runs keep theirs.
REPORT_ERROR_EXIT = pytest.ExitCode.USAGE_ERROR
MISSING_SHOWN = 5  # test ids named in the warning line; the results list all of them


# ----------------------------------------------------------------------------- transport


def pack(recorder: Recorder, records: list[TestRecord]) -> dict[str, Any]:
    """``records`` as a JSON-able, versioned payload (an ``.npz`` of arrays, base64)."""
    data = base64.b64encode(recorder.to_bytes(records)).decode("ascii")
    return {"format": TRANSPORT, "version": TRANSPORT_VERSION, "npz": data}


def unpack(payload: Any) -> list[TestRecord]:
    """The records of a :func:`pack` payload; ``ValueError`` for another format or version
    (a worker running another pytest-sadl)."""
    if not isinstance(payload, dict) or payload.get("format") != TRANSPORT or payload.get("version") != TRANSPORT_VERSION:
        seen = payload.get("version") if isinstance(payload, dict) else type(payload).__name__
        raise ValueError(
            f"a worker sent records in an unknown format ({seen!r}; this controller reads "
            f"{TRANSPORT} version {TRANSPORT_VERSION}): run one pytest-sadl version everywhere"
        )
    from .recorder import Recorder

    return Recorder.records_from_bytes(base64.b64decode(payload["npz"]))


@dataclass
class Arrivals:
    """What the controller heard of the workers' recording tests."""

    started: dict[str, str] = field(default_factory=dict)  # nodeid -> worker id
    received: set[str] = field(default_factory=set)
    crashed_in: dict[str, str] = field(default_factory=dict)  # nodeid -> worker id
    workers_down: dict[str, str] = field(default_factory=dict)  # worker id -> why

    def missing(self) -> list[dict[str, str]]:
        """The tests that may have recorded but whose records never arrived, with why."""
        out = []
        for nodeid, worker in self.started.items():
            if nodeid in self.received:
                continue
            if nodeid in self.crashed_in:
                reason = f"worker {self.crashed_in[nodeid]} crashed while running it"
            elif worker in self.workers_down:
                reason = f"worker {worker} went down ({self.workers_down[worker]}) before sending them"
            else:
                reason = f"worker {worker} never sent them"
            out.append({"nodeid": nodeid, "reason": reason})
        return out


def worker_id(report: Any) -> str:
    """The pytest-xdist worker a (controller-side) report came from."""
    node = getattr(report, "node", None)
    return str(getattr(getattr(node, "gateway", None), "id", None) or getattr(report, "worker_id", None) or "a worker")


def arrived(state: SadlState, report: Any) -> None:
    """Controller: take what a worker's test report carries (``pytest_runtest_logreport``)."""
    arrivals: Arrivals = state.arrivals
    if getattr(report, "sadl_marked", False):
        arrivals.started[report.nodeid] = worker_id(report)
    if report.when == "???":  # pytest-xdist: the worker crashed while running this test
        arrivals.crashed_in[report.nodeid] = worker_id(report)
    payload = getattr(report, "sadl_record", None)
    if payload is None:
        return
    try:
        state.recorder.merge(unpack(payload))  # none for a test skipped before it recorded
    except ValueError as exc:
        state.warnings.append(f"pytest-sadl: {exc}")
        return
    arrivals.received.add(report.nodeid)


def node_down(state: SadlState, node: Any, error: Any) -> None:
    """Controller: a worker ended (``pytest_testnodedown``); take what it sent at its end."""
    name = str(getattr(getattr(node, "gateway", None), "id", None) or "a worker")
    output = getattr(node, "workeroutput", None) or {}
    if error or "sadl" not in output:
        state.arrivals.workers_down[name] = str(error or "no output")
        return
    try:
        records = unpack(output["sadl"])
    except ValueError as exc:
        state.warnings.append(f"pytest-sadl: {exc}")
        records = []
    state.recorder.merge(records)
    state.arrivals.received.update(r.nodeid for r in records)
    if output.get("sadl_profile"):
        state.worker_profiles.append(output["sadl_profile"])
    state.model_from_fixture |= bool(output.get("sadl_model_from_fixture"))
    state.warnings.extend(w for w in output.get("sadl_warnings", []) if w not in state.warnings)


def missing_warning(missing: list[dict[str, str]], workers_down: dict[str, str]) -> str | None:
    """One line for the tests whose inputs are missing (or a worker that went down)."""
    if missing:
        names = ", ".join(m["nodeid"] for m in missing[:MISSING_SHOWN])
        more = f" and {len(missing) - MISSING_SHOWN} more" if len(missing) > MISSING_SHOWN else ""
        reasons = "; ".join(dict.fromkeys(m["reason"] for m in missing))
        return (
            f"pytest-sadl: the inputs of {len(missing)} test(s) are missing ({reasons}), so these results "
            f"are incomplete: {names}{more}"
        )
    if workers_down:
        downs = "; ".join(f"worker {w}: {why}" for w, why in workers_down.items())
        return (
            f"pytest-sadl: a worker went down ({downs}); every recording test's inputs arrived, "
            "but its warnings did not"
        )
    return None


# ----------------------------------------------------------------------------- the end


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror + (f": {exc.filename}" if exc.filename else "")
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


def write_report(report: Report, data: dict[str, Any], comparison: Any) -> Path:
    """Write one report; return the file a user opens. Every kind goes through the one
    atomic writer of :mod:`pytest_sadl.report._load` (via its module)."""
    assert report.path is not None
    if report.kind == "json":
        from .results import write_json

        return write_json(data, report.path)
    if report.kind == "html":
        from .report.html import write_html

        return write_html(data, report.path, comparison=comparison)
    if report.kind == "markdown":
        from .report.markdown import write_markdown

        return write_markdown(data, report.path, comparison=comparison)
    if report.kind == "badge":
        from .report.badge import write_badge

        return write_badge(data, report.path)
    raise ValueError(f"unknown report kind {report.kind!r}")  # config.py refuses it first


def write_reports(state: SadlState) -> None:
    """Every file report, each on its own: ``state.written`` and ``state.report_errors``."""
    for report in state.options.reports:
        if report.path is None:
            continue
        try:
            target = write_report(report, state.data, state.comparison)  # type: ignore[arg-type]
        except Exception as exc:  # a full disk, a bad path, a renderer's bug: this report only
            state.report_errors.append(
                f"pytest-sadl: could not write the {report.kind} report to {report.path}: {_one_line(exc)}"
            )
        else:
            state.written.append(f"sadl: {report.kind} report written to {target}")


def interrupted_message(state: SadlState) -> str:
    """The one line for a Ctrl-C while the results were computed or the reports written.
    Each report file is whole or absent (the atomic writer removes its temporary file on
    any exception, an interrupt too), so the line says which are which."""
    files = [r for r in state.options.reports if r.path is not None]
    done = len(state.written) + len(state.report_errors) if state.data is not None else 0
    left = ", ".join(f"{r.kind}:{r.path}" for r in files[done:])
    while_ = "writing the reports" if state.data is not None else "computing the results"
    parts = [f"pytest-sadl: interrupted (Ctrl-C) while {while_}"]
    if state.written:
        parts.append("written: " + ", ".join(line.rpartition(" written to ")[2] for line in state.written))
    if left:
        parts.append(f"not written: {left}")
    return "; ".join(parts)


def model_info(state: SadlState, profile: Any) -> dict[str, Any]:
    """What the results say about the model, from the profile the metrics used."""
    from_fixture = state.model_from_fixture or state.model_seen not in (None, state._model)
    return {
        "name": profile.model_name,
        "source": "fixture" if from_fixture else state.options.model,
        "fingerprint": profile.model_fingerprint,
        "profile_fingerprint": profile.fingerprint,
        "classifier": profile.classifier,
        "n_classes": profile.n_classes,
        "input_shape": list(profile.input_shape),
        "n_train": profile.n_train,
        "sa_layers": list(profile.sa_layers),
        "coverage_layers": list(profile.coverage_layers),
    }


def compare_with_baseline(state: SadlState) -> None:
    """The comparison with ``--sadl-compare`` (checked when the run started). A baseline
    that became unreadable since is a one-line warning and, with ``--sadl-compare-fail``,
    a failure: a gate that cannot be checked does not pass."""
    from .report.compare import compare, compare_failures
    from .results import ResultsFileError, load_results

    try:
        state.comparison = compare(state.data, load_results(state.options.compare))  # type: ignore[arg-type]
    except Exception as exc:  # never lose the reports for it
        reason = str(exc) if isinstance(exc, ResultsFileError) else _one_line(exc)
        message = f"pytest-sadl: cannot compare with the baseline: {reason}"
        state.warnings_after.append(message)
        if state.options.compare_fail:
            state.comparison_failures.append(f"--sadl-compare-fail cannot be checked: {message}")
        return
    state.comparison_failures = compare_failures(state.comparison, state.options.compare_fail)


def finish(state: SadlState) -> None:
    """Controller or serial run: the results, the comparison, the reports."""
    from ._checks import SadlWarning
    from .engine import ProfileView, compute

    records = list(state.recorder.records.values())
    for rec in records:
        rec.index = state.order.get(rec.nodeid, rec.index)
    missing = state.arrivals.missing()
    first = missing_warning(missing, state.arrivals.workers_down)
    profile = state.resolve_profile()
    messages = list(dict.fromkeys(([first] if first else []) + state.warnings + state.recorder.messages))
    with warnings.catch_warnings(record=True) as caught:  # e.g. kept DSA distances that cannot be used
        warnings.simplefilter("always")
        view = ProfileView.of(profile)
    for w in caught:  # the engine's own warnings become lines of the report; others pass on
        if issubclass(w.category, SadlWarning):
            messages.append(str(w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    state.results = compute(view, records, state.options, model_info(state, profile), messages)
    keep_dsa_distances(profile)
    state.results.missing = missing
    state.data = state.results.to_dict()
    if state.options.compare is not None:
        compare_with_baseline(state)
        if state.warnings_after:
            state.data["outcome"]["warnings"].extend(state.warnings_after)
    write_reports(state)


def keep_dsa_distances(profile: Any) -> None:
    """Store the DSA distances this session computed in the profile, for the next one.
    A cache that cannot be written (read-only in CI) changes nothing but the next run's
    time, so it is not an error."""
    with contextlib.suppress(OSError):
        profile.keep_dsa_distances()


def exit_status(state: SadlState, current: int) -> int:
    """The session's exit status after measuring: a missed threshold, a broken comparison
    gate or a failure to compute fails a passing run; a report that could not be written
    makes a passing or failing run :data:`REPORT_ERROR_EXIT`."""
    failed = state.error or (state.results is not None and not state.results.passed) or state.comparison_failures
    status = current
    if failed and status == pytest.ExitCode.OK:
        status = pytest.ExitCode.TESTS_FAILED
    if state.report_errors and status in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        status = REPORT_ERROR_EXIT
    return status
