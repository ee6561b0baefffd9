"""The session's end: the results, the comparison, the reports.

:mod:`pytest_sadl.plugin.session` keeps the session objects (serial, xdist controller,
xdist worker) and calls :func:`finish` at a controller's or serial run's end. The results
are computed once; each report is written on its own, and one that cannot be written is
a one-line error naming its path (:attr:`Outcome.report_errors`), never the loss of the
others or of the terminal table; :meth:`Outcome.exit_status` then says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sadl.plugin import transport
from pytest_sadl.plugin.outcome import Outcome
from pytest_sadl.plugin.status import Phases

if TYPE_CHECKING:
    from pytest_sadl.config import Report, SadlOptions
    from pytest_sadl.plugin.sources import Sources
    from pytest_sadl.report.compare import Comparison
    from pytest_sadl.results import Results, Scope

#: makes the run's scope from (tests recorded, tests whose inputs were lost)
ScopeMaker = Callable[[int, int], "Scope"]


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror + (f": {exc.filename}" if exc.filename else "")
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


@dataclass
class Ending:
    """What the end made: the results, their document, the comparison with a baseline."""

    results: Results | None = None
    #: the results' JSON form (``results.to_dict()``), once they are computed
    data: dict[str, Any] | None = None
    comparison: Comparison | None = None
    #: the comparison is against the baseline's coverage of this run's own tests
    like_with_like: bool = False


def write_report(report: Report, results: Results, data: dict[str, Any], comparison: Comparison | None) -> Path:
    """Write one report; return the file a user opens. Every kind goes through the one
    atomic writer, :mod:`pytest_sadl.atomic` (each renderer's module calls it); the renderers
    take the engine's typed ``results``, the JSON report is their JSON form ``data``."""
    assert report.path is not None
    if report.kind == "json":
        from pytest_sadl.results import write_json

        return write_json(data, report.path)
    if report.kind == "html":
        from pytest_sadl.report.html import write_html

        return write_html(results, report.path, comparison=comparison)
    if report.kind == "markdown":
        from pytest_sadl.report.markdown import write_markdown

        return write_markdown(results, report.path, comparison=comparison)
    if report.kind == "badge":
        from pytest_sadl.report.badge import write_badges

        return write_badges(results, report.path)
    raise ValueError(f"unknown report kind {report.kind!r}")  # config.py refuses it first


def write_reports(options: SadlOptions, ending: Ending, outcome: Outcome) -> None:
    """Every file report, each on its own: ``outcome.written`` and ``outcome.report_errors``."""
    assert ending.data is not None and ending.results is not None
    for report in options.reports:
        if report.path is None:
            continue
        try:
            target = write_report(report, ending.results, ending.data, ending.comparison)
        except Exception as exc:  # a full disk, a bad path, a renderer's bug: this report only
            outcome.report_errors.append(
                f"pytest-sadl: could not write the {report.kind} report to {report.path}: {_one_line(exc)}"
            )
        else:
            outcome.written.append(f"sadl: {report.kind} report written to {target}")


def interrupted_message(options: SadlOptions, ending: Ending, outcome: Outcome) -> str:
    """The one line for a Ctrl-C while the results were computed or the reports written.
    Each report file is whole or absent (the atomic writer removes its temporary file on
    any exception, an interrupt too), so the line says which are which."""
    left = _not_written(options, ending, outcome)
    while_ = "writing the reports" if ending.data is not None else "computing the results"
    parts = [f"pytest-sadl: interrupted (Ctrl-C) while {while_}"]
    if outcome.written:
        parts.append("written: " + ", ".join(line.rpartition(" written to ")[2] for line in outcome.written))
    if left:
        parts.append(f"not written: {left}")
    return "; ".join(parts)


def _not_written(options: SadlOptions, ending: Ending, outcome: Outcome) -> str:
    """The report files not written (``kind:path, ...``): those after the ones written or
    failed; every one while the results were computed."""
    files = [r for r in options.reports if r.path is not None]
    done = len(outcome.written) + len(outcome.report_errors) if ending.data is not None else 0
    return ", ".join(f"{r.kind}:{r.path}" for r in files[done:])


def model_info(options: SadlOptions, sources: Sources, profile: Any) -> dict[str, Any]:
    """What the results say about the model, from the profile the metrics used."""
    return {
        "name": profile.model_name,
        "source": "fixture" if sources.from_fixture() else options.model,
        "fingerprint": profile.model_fingerprint,
        "profile_fingerprint": profile.fingerprint,
        "classifier": profile.classifier,
        "n_classes": profile.n_classes,
        "input_shape": list(profile.input_shape),
        "n_train": profile.n_train,
        "sa_layers": list(profile.sa_layers),
        "coverage_layers": list(profile.coverage_layers),
    }


def compare_with_baseline(options: SadlOptions, ending: Ending, outcome: Outcome) -> None:
    """The comparison with ``--sadl-compare`` (checked when the run started). A baseline
    that became unreadable since is a one-line warning and, with ``--sadl-compare-fail``,
    a failure: a gate that cannot be checked does not pass."""
    from pytest_sadl.errors import ResultsFileError
    from pytest_sadl.report.compare import compare, compare_failures
    from pytest_sadl.resultsfile import read_results

    assert options.compare is not None and ending.results is not None
    try:
        notes: list[str] = []  # metric names the baseline holds that this version ignores
        scoped: list[str] = []  # what a partial run's comparison is against: every report says it
        baseline = like_with_like(ending, read_results(options.compare, notes), scoped)
        ending.comparison = compare(ending.results, baseline)
        ending.comparison.warnings.extend(notes + scoped)
        outcome.warnings_after.extend(f"sadl: {note}" for note in scoped)
    except Exception as exc:  # never lose the reports for it
        reason = str(exc) if isinstance(exc, ResultsFileError) else _one_line(exc)
        message = f"pytest-sadl: cannot compare with the baseline: {reason}"
        outcome.warnings_after.append(message)
        if options.compare_fail:
            outcome.comparison_failures.append(f"--sadl-compare-fail cannot be checked: {message}")
        return
    outcome.comparison_failures = compare_failures(ending.comparison, options.compare_fail)


def finish(
    options: SadlOptions,
    sources: Sources,
    recorder: Any,
    order: dict[str, int],
    arrivals: transport.Arrivals,
    outcome: Outcome,
    ending: Ending,
    make_scope: ScopeMaker | None = None,
) -> None:
    """Controller or serial run: the results, the comparison, the reports (into ``ending``).
    ``make_scope`` says what part of the suite was measured: a partial run's gates are
    not applied unless ``--sadl-gate-partial`` (:func:`gate_partial`)."""
    from pytest_sadl.engine import compute
    from pytest_sadl.results import MissingTest

    records = _records_in_order(recorder, order)
    missing = arrivals.missing()
    first = transport.missing_warning(missing, arrivals.workers_down)
    profile = sources.resolve_profile()
    messages = list(dict.fromkeys(([first] if first else []) + outcome.warnings + recorder.messages))
    view = _view_saying_warnings(profile, options, messages)
    status = sources.status
    with Phases(_phase_sayer(status)) as phases, _on_cluster(view, profile, options, status):
        ending.results = compute(view, records, options, model_info(options, sources, profile), messages, phases)
    keep_dsa_distances(profile)
    ending.results.missing = [MissingTest.from_dict(m) for m in missing]
    if make_scope is not None:
        ending.results.scope = make_scope(len(ending.results.tests), len(missing))
    ending.data = ending.results.to_dict()
    if options.compare is not None:
        compare_with_baseline(options, ending, outcome)
    gate_partial(options, ending, outcome)
    if options.compare is not None:
        _add_late_warnings(ending, outcome)
    write_reports(options, ending, outcome)


def _records_in_order(recorder: Any, order: dict[str, int]) -> list[Any]:
    """The recorder's test records, each with its index in the session's collection order."""
    records = list(recorder.records.values())
    for rec in records:
        rec.index = order.get(rec.nodeid, rec.index)
    return records


def _phase_sayer(status: Any) -> Callable[[str], None]:
    """How the end's phases are said: on the status line, or not at all without one."""

    def say(what: str) -> None:
        if status is not None:
            status.say(what + " ...", False)

    return say


def _add_late_warnings(ending: Ending, outcome: Outcome) -> None:
    """The comparison's warnings into what every report renders, and its JSON."""
    assert ending.results is not None and ending.data is not None
    ending.results.warnings.extend(outcome.warnings_after)
    ending.data["outcome"]["warnings"].extend(outcome.warnings_after)


def _view_saying_warnings(profile: Any, options: SadlOptions, messages: list[str]) -> Any:
    """The engine's view of ``profile``; the warnings setting it up gives (kept DSA distances
    that cannot be used...) become lines of the report (``messages``), others pass on."""
    from pytest_sadl.engine import ProfileView
    from pytest_sadl.errors import sadl_warnings_into

    with sadl_warnings_into(messages):
        return ProfileView.of(profile, options.metrics, options)


def like_with_like(ending: Ending, baseline: Results, notes: list[str]) -> Results:
    """The baseline a partial run compares with: its coverage of the same tests when it
    carries each test's sets (:mod:`pytest_sadl.covered`), else the whole baseline, said."""
    from pytest_sadl.covered import restricted_metrics
    from pytest_sadl.report.partial import scope_line

    results = ending.results
    assert results is not None
    said = scope_line(results.scope)
    if said is None:
        if scope_line(baseline.scope) is not None:
            notes.append(f"the baseline is a partial run ({scope_line(baseline.scope)}): not like with like")
        return baseline
    nodeids = [t.nodeid for t in results.tests]
    try:
        metrics = restricted_metrics(baseline, nodeids)
    except (ValueError, KeyError, TypeError) as exc:
        notes.append(f"the baseline's covered sets cannot be read ({exc})")
        metrics = None
    if metrics is None:
        notes.append(
            "this run is partial and the baseline has no covered sets of its tests: "
            "the changes compare part of the suite with the whole baseline, and do not gate"
        )
        return baseline
    ending.like_with_like = True
    notes.append(f"compared like with like: with the baseline's coverage of the same {len(nodeids)} tests")
    return replace(baseline, metrics=metrics)  # the others (TKNP, NLC, CC) have no sets: not compared


def gate_partial(options: SadlOptions, ending: Ending, outcome: Outcome) -> None:
    """A partial run's gates: a suite's floor (``--sadl-fail-under``) is not judged on a
    fraction of it, nor a drop against a baseline of the whole suite
    (``--sadl-compare-fail``), unless ``--sadl-gate-partial``; each gate not applied is
    kept in ``scope.ungated`` and said in every report. A comparison made like with like
    (against the baseline's own coverage of the same tests, :mod:`pytest_sadl.covered`)
    gates as a whole run's does."""
    results = ending.results
    assert results is not None and ending.data is not None
    scope = results.scope
    if scope is None or not scope.partial or getattr(options, "gate_partial", False):
        return
    ungated = [f.message for f in results.failures]
    if not ending.like_with_like:
        ungated += outcome.comparison_failures
        outcome.comparison_failures = []
    results.failures = []
    results.scope = replace(scope, gated=False, ungated=ungated)
    ending.data["outcome"]["failures"] = []
    ending.data["outcome"]["passed"] = True
    ending.data["scope"] = results.scope.to_dict()


def _on_cluster(view: Any, profile: Any, options: Any, status: Any) -> Any:
    """LSA and DSA scored on the Dask cluster of ``sadl_dask`` when the training set is
    large enough to pay (:func:`pytest_sadl.profile.cluster.scoring_on`), else here."""
    if not getattr(options, "dask", None):
        return contextlib.nullcontext()
    from pytest_sadl.profile.cluster import scoring_on

    return scoring_on(
        view, profile, options.dask, status=None if status is None else (lambda msg: status.say(msg, False))
    )


def keep_dsa_distances(profile: Any) -> None:
    """Store the DSA distances this session computed in the profile, for the next one.
    A cache that cannot be written (read-only in CI) changes nothing but the next run's
    time, so it is not an error."""
    with contextlib.suppress(OSError):
        profile.keep_dsa_distances()
