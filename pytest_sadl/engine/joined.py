"""Every recorded input of a run's records joined in their defined order: :class:`Joined`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from pytest_sadl.criteria.shape import Batch
from pytest_sadl.records import TestRecord

if TYPE_CHECKING:
    from pytest_sadl.engine.view import ProfileView

_T = TypeVar("_T")


@dataclass
class Joined:
    """Every recorded input of the run's records, joined in their defined order: SA traces,
    predicted classes, coverage-layer traces and extrema, the owning test's index, and
    (where every batch has them) digests, outputs and thumbnails."""

    sa: np.ndarray
    pred: np.ndarray
    layers: list[np.ndarray]
    extrema: list[Any]
    owner: np.ndarray
    digests: np.ndarray | None = None
    outputs: np.ndarray | None = None
    thumbs: list[Any] = field(default_factory=list)
    texts: list[str | None] = field(default_factory=list)  # a snippet of each text input, else None

    @classmethod
    def of(cls, records: Sequence[TestRecord], view: ProfileView) -> Joined:
        batches = [(t, b) for t, rec in enumerate(records) for b in rec.batches]
        sizes = view.ranges.sizes
        if not batches:
            return cls.empty(int(view.sa_traces.shape[1]), sizes)
        only = [b for _, b in batches]
        return cls(
            sa=np.concatenate([b.sa for b in only]).astype(np.float64),
            pred=np.concatenate([b.pred for b in only]),
            layers=_joined_layers(only, len(sizes)),
            extrema=[_joined_extrema(only, i) for i in range(len(sizes))],
            owner=np.concatenate([np.full(len(b), t) for t, b in batches]),
            digests=_joined(only, "digests"),
            outputs=_joined(only, "output"),
            thumbs=_each_row(only, _thumbs),
            texts=_each_row(only, _texts),
        )

    @classmethod
    def empty(cls, sa_width: int, sizes: Sequence[int]) -> Joined:
        """No recorded input: ``sa_width`` SA neurons, coverage layers of ``sizes`` neurons."""
        return cls(
            sa=np.zeros((0, sa_width)),
            pred=np.zeros(0, dtype=np.int64),
            layers=[np.zeros((0, s)) for s in sizes],
            extrema=[None] * len(sizes),
            owner=np.zeros(0, dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.owner)

    def part(self, rows: np.ndarray, scores: dict[str, np.ndarray]) -> Batch:
        """The criteria's batch of the inputs at ``rows``."""
        return Batch(
            {k: v[rows] for k, v in scores.items()},
            [a[rows] for a in self.layers],
            [None if e is None else (e[0][rows], e[1][rows]) for e in self.extrema],
        )

    def same_input(self) -> np.ndarray:
        """For each input, the index of the first input with the same digest (itself without digests)."""
        if self.digests is None:
            return np.arange(len(self))
        _, first, inverse = np.unique(self.digests, return_index=True, return_inverse=True)
        same: np.ndarray = first[inverse.reshape(-1)]
        return same


def _joined_layers(batches: list[Any], n_layers: int) -> list[np.ndarray]:
    """Each coverage layer's outputs of every batch, one array per layer."""
    return [np.concatenate([b.coverage[i] for b in batches]) for i in range(n_layers)]


def _each_row(batches: list[Any], per_batch: Callable[[Any], list[_T]]) -> list[_T]:
    """``per_batch``'s list of every batch, one item per input, in order."""
    return [item for b in batches for item in per_batch(b)]


def _thumbs(batch: Any) -> list[Any]:
    """A batch's thumbnail of each input (``None`` each when it has none)."""
    return [None] * len(batch) if batch.thumbs is None else list(batch.thumbs)


def _texts(batch: Any) -> list[str | None]:
    """A batch's snippet of each text input (``None`` each when it has none)."""
    return [None] * len(batch) if batch.texts is None else [str(t) for t in batch.texts]


def _joined_extrema(batches: list[Any], i: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-input min and max of coverage layer ``i``'s whole output, when every batch has them."""
    parts = [getattr(b, "extrema", None) for b in batches]
    if any(p is None or p[i] is None for p in parts):
        return None
    return np.concatenate([p[i][0] for p in parts]), np.concatenate([p[i][1] for p in parts])  # type: ignore[index]


def _joined(batches: list[Any], attr: str) -> np.ndarray | None:
    """One per-input array of every batch's ``attr``, or ``None`` when any batch lacks it."""
    parts: list[Any] = [getattr(b, attr, None) for b in batches]
    if not parts or any(p is None for p in parts):
        return None
    return np.concatenate(parts)
