"""Everything that went wrong in a session, and the one place that decides what it makes of it.

A session's problems come in kinds that end a run differently:

* ``warnings`` (before the results are made: the cache, the workers, the transport) and
  ``warnings_after`` (after: a baseline unreadable at the end) become lines of the report;
* ``comparison_failures`` (``--sadl-compare-fail``) fail a passing run, as a missed
  ``--sadl-fail-under`` threshold does (the results say that one);
* ``report_errors`` (a report that could not be written) make the run a usage error
  (:data:`REPORT_ERROR_EXIT`), the others are still written;
* ``error`` (the results could not be computed) fails the run, in one line (its traceback
  with ``-v``);
* ``fatal`` (a usage error ended the run before the end: a project fixture's model or
  data) means nothing is measured at the end;
* ``interrupted`` (Ctrl-C while computing or writing) keeps pytest's exit status 2.

:meth:`Outcome.exit_status` is the only function that turns them into an exit status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

#: The exit status of a run whose tests and thresholds passed (or failed) but one of whose
#: reports could not be written: pytest's usage error, as for any other path the command
#: line gives that cannot be used. Interrupted, internal-error and no-tests runs keep theirs.
REPORT_ERROR_EXIT = pytest.ExitCode.USAGE_ERROR


@dataclass
class Outcome:
    """The problems of one session (controller or serial run; a worker's go to the controller)."""

    warnings: list[str] = field(default_factory=list)
    warnings_after: list[str] = field(default_factory=list)
    comparison_failures: list[str] = field(default_factory=list)
    report_errors: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)  # "sadl: json report written to PATH" lines
    error: str | None = None
    error_detail: str | None = None  # the traceback of ``error``, shown with -v
    fatal: bool = False
    interrupted: bool = False

    def warn(self, message: str) -> None:
        """A warning of the report, once."""
        if message not in self.warnings:
            self.warnings.append(message)

    def fail(self, message: str, detail: str | None = None) -> None:
        """The results could not be computed (or were interrupted: see :meth:`interrupt`)."""
        self.error, self.error_detail = message, detail

    def interrupt(self, message: str) -> None:
        self.error, self.interrupted = message, True

    def stop(self, exc: pytest.UsageError) -> None:
        """A usage error ends the run now (exit status 4, one line); nothing is measured."""
        self.fatal = True
        pytest.exit(str(exc), returncode=pytest.ExitCode.USAGE_ERROR)

    def failed(self, results: Any) -> bool:
        """Whether measuring fails the run: no results, a missed threshold, a comparison gate."""
        missed = results is not None and not results.passed
        return bool(self.error) or missed or bool(self.comparison_failures)

    def exit_status(self, current: int, results: Any) -> int:
        """The session's exit status after measuring: a missed threshold, a broken comparison
        gate or a failure to compute fails a passing run; a report that could not be written
        makes a passing or failing run :data:`REPORT_ERROR_EXIT`; an interrupt is pytest's."""
        if self.interrupted:
            return pytest.ExitCode.INTERRUPTED
        status = current
        if self.failed(results) and status == pytest.ExitCode.OK:
            status = pytest.ExitCode.TESTS_FAILED
        if self.report_errors and status in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            status = REPORT_ERROR_EXIT
        return status

    def failure_lines(self, results: Any) -> list[str]:
        """The red lines that end the summary: reports not written, then what failed."""
        lines = list(self.report_errors)
        if results is not None:
            lines += [f"FAIL {failure.message}" for failure in results.failures]
        return lines + [f"FAIL {line}" for line in self.comparison_failures]
