"""The one sentence every report gives a partial run (``Results.scope``), and the gates
it did not apply: ``partial: 1 of 5 marked tests measured (stopped after the first
failure)``. Plain text: each renderer escapes it as it escapes any other line."""

from __future__ import annotations

from pytest_sadl.results import Results, Scope


def scope_line(scope: Scope | None) -> str | None:
    """``partial: R of C marked tests measured (why)``, or ``None`` for a whole run (or an
    older file that does not say)."""
    if scope is None or not scope.partial:
        return None
    return f"partial: {_measured(scope)} measured ({'; '.join(scope.reasons)})"


def _measured(scope: Scope) -> str:
    """``R of C marked tests``; ``R marked tests`` under ``--lf`` (the suite's size not known)."""
    run = "?" if scope.run is None else str(scope.run)
    if scope.collected is None:
        return f"{run} marked {_tests(scope.run)}"
    return f"{run} of {scope.collected} marked {_tests(scope.collected)}"


def _tests(n: int | None) -> str:
    return "test" if n == 1 else "tests"


def partial_line(results: Results) -> str | None:
    """:func:`scope_line` of a results document."""
    return scope_line(results.scope)


def ungated_lines(results: Results) -> list[str]:
    """``not gated (partial run): ...`` for each gate a partial run did not apply."""
    scope = results.scope
    if scope is None or scope.gated:
        return []
    return [f"not gated (partial run, --sadl-gate-partial gates it): {line}" for line in scope.ungated]


def partial_notes(results: Results) -> list[str]:
    """What every report says of a partial run before anything else: :func:`partial_line`
    and :func:`ungated_lines` (nothing for a whole run)."""
    said = partial_line(results)
    return ([said] if said is not None else []) + ungated_lines(results)


def badge_label(results: Results, label: str) -> str:
    """A badge's label, ``LSC (partial)`` for a partial run."""
    return f"{label} (partial)" if partial_line(results) is not None else label
