"""The run's metrics and gates in pytest's JUnit XML (``--junitxml``).

CI systems that read JUnit (GitLab, Jenkins, Azure, test-report actions) then show them:
each metric is a test-suite property (``sadl_lsc`` = ``61.10``, in percent; a count
criterion's number; ``n/a`` when not available), a partial run says so
(``sadl_partial``), and each failed gate (``--sadl-fail-under``,
``--sadl-compare-fail``) is a failing test case ``pytest-sadl::<METRIC>`` whose message is
the gate's line. pytest's own ``record_testsuite_property`` fixture reaches the report
the same way (the ``LogXML`` in ``config.stash``); the session's end runs before
junitxml writes its file.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_sadl.criteria.registry import COUNT, LABELS
from pytest_sadl.results import Results, percent


def _xml(config: pytest.Config) -> Any:
    try:
        from _pytest.junitxml import xml_key
    except ImportError:  # pragma: no cover - another pytest layout: no JUnit additions
        return None
    return config.stash.get(xml_key, None)


def _gates(results: Results, comparison_failures: list[str]) -> list[tuple[str, str]]:
    """(metric label, line) of each failed gate."""
    out = [(LABELS.get(f.metric, f.metric.upper()), f.message) for f in results.failures]
    for line in comparison_failures:
        label = line.split(" ", 1)[0].rstrip(":")
        out.append((label, f"--sadl-compare-fail: {line}"))
    return out


def _shown(name: str, m: Any) -> str:
    """A metric's value as its property holds it: a count as a number, a coverage as a
    percentage, ``n/a`` when it was not measured."""
    if not m.measured:
        return "n/a"
    return f"{m.value:.4g}" if name in COUNT else f"{percent(m.value):.2f}"


def add_to_junit(config: pytest.Config, results: Results | None, comparison_failures: list[str]) -> None:
    """Properties and failing cases into the ``--junitxml`` report, when there is one."""
    xml = _xml(config)
    if xml is None or results is None:
        return
    for name, m in results.metrics.items():
        xml.add_global_property(f"sadl_{name}", _shown(name, m))
    if results.scope is not None and results.scope.partial:
        from pytest_sadl.report.partial import partial_line

        xml.add_global_property("sadl_partial", partial_line(results) or "")
    from _pytest.reports import TestReport

    for label, line in _gates(results, comparison_failures):
        nodeid = f"pytest-sadl::{label}"
        location = ("pytest-sadl", None, label)
        failed = TestReport(nodeid, location, {}, "failed", line, "call")
        done = TestReport(nodeid, location, {}, "passed", None, "teardown")  # junitxml closes the case
        xml.pytest_runtest_logreport(failed)
        xml.pytest_runtest_logreport(done)
