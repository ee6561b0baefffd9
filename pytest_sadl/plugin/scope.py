"""What part of the suite a session measured, and why not all of it (``Results.scope``).

A run that measured only some of the marked tests (``-x``, ``--maxfail``, ``-k``, ``-m``,
``--lf``, ``--sw``, ``--deselect``, collection errors, xdist workers lost) is *partial*:
the reports say so in one line, and its gates (``--sadl-fail-under``,
``--sadl-compare-fail``) are not applied unless ``--sadl-gate-partial``: a suite's floor
cannot be judged on a fraction of it.

:class:`ScopeTracker` hears pytest's collection and reports (serial run, xdist worker or
controller) and makes the :class:`~pytest_sadl.results.Scope` at the end. A marked test is
one that may record (``@pytest.mark.sadl``, or using ``sadl_record``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pytest_sadl.results import JSON, JSONObject, Scope

#: the ``workeroutput`` key a pytest-xdist worker sends its collection's scope under
WORKER_KEY = "sadl_scope"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def stop_reason(shouldstop: object, maxfail: int) -> str | None:
    """Why pytest stopped before the end (``session.shouldstop``), in words."""
    if not shouldstop:
        return None
    if maxfail == 1:
        return "stopped after the first failure"
    text = str(shouldstop)
    if text.startswith("stopping after") and maxfail:
        return f"stopped after {_plural(maxfail, 'failure')}"
    return f"stopped early: {' '.join(text.split())}"


def selection_options(option: Any, lf_active: bool) -> list[str]:
    """The options of this run that deselect tests, as the user wrote them."""
    found = [
        f"-k {option.keyword!r}" if getattr(option, "keyword", "") else "",
        f"-m {option.markexpr!r}" if getattr(option, "markexpr", "") else "",
        "--lf" if lf_active else "",
        "--sw" if _stepwise(option) else "",
        "--deselect" if getattr(option, "deselect", None) else "",
    ]
    return [said for said in found if said]


def _stepwise(option: Any) -> bool:
    """Whether ``--sw`` or ``--sw-skip`` is on."""
    return bool(getattr(option, "stepwise", False) or getattr(option, "stepwise_skip", False))


def _names(value: object) -> list[str]:
    """The test names of a worker's list (anything else: none)."""
    return [n for n in value if isinstance(n, str)] if isinstance(value, list) else []


@dataclass
class ScopeTracker:
    """The marked tests a session collected, deselected, ran; collection errors."""

    is_marked: Callable[[Any], bool]
    selected: set[str] = field(default_factory=set)
    deselected: set[str] = field(default_factory=set)
    started: set[str] = field(default_factory=set)
    collection_errors: int = 0
    #: ``--lf`` with failures known from the last run: only those run (files skipped)
    last_failed: bool = False

    # -- pytest's events ----------------------------------------------------------

    def on_deselected(self, items: Iterable[Any]) -> None:
        self.deselected.update(i.nodeid for i in items if self.is_marked(i))

    def on_collected(self, items: Iterable[Any]) -> None:
        """The items pytest will run (after every deselection)."""
        self.selected = {i.nodeid for i in items if self.is_marked(i)}
        self.deselected -= self.selected

    def on_collect_report(self, report: Any) -> None:
        if report.failed:
            self.collection_errors += 1

    def on_report(self, report: Any) -> None:
        if report.when == "setup":
            self.started.add(report.nodeid)

    # -- pytest-xdist ---------------------------------------------------------------

    def worker_payload(self) -> JSONObject:
        """What a worker tells the controller of its collection (every worker collects all)."""
        return {
            "selected": list[JSON](sorted(self.selected)),
            "deselected": list[JSON](sorted(self.deselected)),
            "collection_errors": self.collection_errors,
            "last_failed": self.last_failed,
        }

    def merge_worker(self, payload: object) -> None:
        if not isinstance(payload, dict):
            return
        self.selected.update(_names(payload.get("selected")))
        self.deselected.update(_names(payload.get("deselected")))
        self.deselected -= self.selected
        errors = payload.get("collection_errors")
        if isinstance(errors, int):
            self.collection_errors = max(self.collection_errors, errors)
        self.last_failed |= payload.get("last_failed") is True

    # -- the end ------------------------------------------------------------------------

    def scope(self, *, recorded: int, stop: str | None, selecting: list[str], lost: int) -> Scope:
        """The run's :class:`Scope` (``gated`` is decided by the caller)."""
        run = len(self.started & self.selected) if self.selected else len(self.started)
        reasons = [stop] if stop is not None else []
        reasons += self._selection_reasons(selecting)
        not_run = len(self.selected) - run
        if not_run > 0 and stop is None:
            reasons.append(f"{_plural(not_run, 'selected marked test')} did not run")
        reasons += self._loss_reasons(lost)
        return Scope(
            collected=self._collected(),
            selected=len(self.selected),
            run=run,
            recorded=recorded,
            reasons=reasons,
        )

    def _selection_reasons(self, selecting: list[str]) -> list[str]:
        """Why only some marked tests were collected: a deselection (by ``selecting``'s
        options or a plugin) or ``--lf``."""
        if self.deselected:
            by = " or ".join(selecting) if selecting else "a plugin"
            return [f"{_plural(len(self.deselected), 'marked test')} deselected by {by}"]
        if self.last_failed:
            return ["only the tests that failed last time were collected (--lf)"]
        return []

    def _loss_reasons(self, lost: int) -> list[str]:
        """Tests lost before they were measured: collection errors, crashed xdist workers."""
        reasons = [_plural(self.collection_errors, "collection error")] if self.collection_errors else []
        if lost:
            reasons.append(f"the inputs of {_plural(lost, 'test')} were lost with crashed xdist workers")
        return reasons

    def _collected(self) -> int | None:
        """How many marked tests the suite has; ``None`` under ``--lf``, which collects only
        the failed tests of a file (and skips the files without)."""
        return None if self.last_failed else len(self.selected | self.deselected)
