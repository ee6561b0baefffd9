"""The session's work outside the hooks: the results, the comparison, the reports, the exit status.

:mod:`pytest_sadl.plugin.hooks` keeps the hooks and the per-session state (``SadlState``); the
hooks call these functions. What travels from pytest-xdist workers to the controller, and
how, is :mod:`pytest_sadl.plugin.transport`.

The end (:func:`finish`): the results are computed once; each report is written on its
own, and one that cannot be written is a one-line error naming its path, never the loss
of the others or of the terminal table; the exit status then says so
(:data:`REPORT_ERROR_EXIT`).
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_sadl.plugin import transport

if TYPE_CHECKING:
    from pytest_sadl.plugin.hooks import SadlState
    from pytest_sadl.plugin.options import Report

#: The exit status of a run whose tests and thresholds passed (or failed) but one of whose
#: reports could not be written: pytest's usage error, as for any other path the command
#: line gives that cannot be used. Interrupted, internal-error and no-tests runs keep theirs.
REPORT_ERROR_EXIT = pytest.ExitCode.USAGE_ERROR


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
        from pytest_sadl.results import write_json

        return write_json(data, report.path)
    if report.kind == "html":
        from pytest_sadl.report.html import write_html

        return write_html(data, report.path, comparison=comparison)
    if report.kind == "markdown":
        from pytest_sadl.report.markdown import write_markdown

        return write_markdown(data, report.path, comparison=comparison)
    if report.kind == "badge":
        from pytest_sadl.report.badge import write_badges

        return write_badges(data, report.path)
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
    from pytest_sadl.errors import ResultsFileError
    from pytest_sadl.report.compare import compare, compare_failures
    from pytest_sadl.resultsfile import load_results

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
    from pytest_sadl.engine import ProfileView, compute
    from pytest_sadl.errors import SadlWarning

    records = list(state.recorder.records.values())
    for rec in records:
        rec.index = state.order.get(rec.nodeid, rec.index)
    missing = state.arrivals.missing()
    first = transport.missing_warning(missing, state.arrivals.workers_down)
    profile = state.resolve_profile()
    messages = list(dict.fromkeys(([first] if first else []) + state.warnings + state.recorder.messages))
    with warnings.catch_warnings(record=True) as caught:  # e.g. kept DSA distances that cannot be used
        warnings.simplefilter("always")
        view = ProfileView.of(profile, state.options.metrics, state.options)
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
