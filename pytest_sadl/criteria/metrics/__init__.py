"""One module per criterion, each defining its :class:`~pytest_sadl.criteria.shape.Criterion`
as ``CRITERION``; :mod:`pytest_sadl.criteria.registry` lists them in report order."""

from __future__ import annotations

from collections.abc import Callable

from pytest_sadl.criteria.shape import Coverage, Setup


def surprise_make(name: str, sa: str) -> Callable[[Setup], Coverage | None]:
    """``make`` of a surprise coverage: a :class:`~pytest_sadl.criteria.surprise.SurpriseCoverage`
    reading the score ``sa`` with the setup's bounds of ``name``, ``None`` without them."""

    def make(setup: Setup) -> Coverage | None:
        spec = setup.bounds.get(name)
        if spec is None:
            return None
        from pytest_sadl.criteria.surprise import SurpriseCoverage

        return SurpriseCoverage(*spec, sa=sa)

    return make
