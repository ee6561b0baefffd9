"""What a pass gives: :class:`Traces`, the NumPy arrays of ``n`` inputs' traces, the one
type both trace models return (:class:`~pytest_sadl.capture.traces.TraceModel` for Keras,
:class:`~pytest_sadl.capture.torch.TorchTraceModel` for PyTorch) to the profile and the
recorder; and the ``Progress`` callback type of a long pass."""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytest_sadl.errors import SadlLayerError, SadlModelError

__all__ = ["Traces", "Progress", "resolve_output", "is_index"]

Progress = Callable[[int, "int | None"], None]
"""``progress(done, total)``: called after every batch; ``total`` is ``None`` when unknown."""


@dataclass
class Traces:
    """Traces of ``n`` inputs: ``sa`` ``(n, d)`` float32 (the SA layers' traces
    concatenated in order), ``coverage`` (``(n, c)`` float32 per coverage layer), ``pred``
    (``(n,)`` int64 classes of a classifier, ``(n, k)`` float32 of a regression model),
    ``output`` (the measured output ``(n, k)``)."""

    sa: np.ndarray
    coverage: list[np.ndarray]
    pred: np.ndarray
    output: np.ndarray
    sa_layers: list[str] = field(default_factory=list)
    coverage_layers: list[str] = field(default_factory=list)
    # with TraceModel(extrema=True): per coverage layer, the per-input (min, max) of its whole
    # output for layers of rank > 2 (None for the others), what NC's scaling needs
    coverage_extrema: list[Any] | None = None

    def __len__(self) -> int:
        return int(self.output.shape[0])

    def layer(self, name: str) -> np.ndarray:
        """The coverage trace of the named layer."""
        try:
            return self.coverage[self.coverage_layers.index(name)]
        except ValueError:
            raise SadlLayerError(f"{name!r} is not a coverage layer of these traces: {self.coverage_layers}") from None

    @classmethod
    def concatenate(cls, parts: Sequence[Traces]) -> Traces:
        """Join traces of consecutive input batches (same layers) into one."""
        if not parts:
            raise ValueError("Traces.concatenate needs at least one Traces")
        first = parts[0]
        extrema = None if first.coverage_extrema is None else _joined_extrema(parts, first.coverage_extrema)
        return cls(
            sa=np.concatenate([p.sa for p in parts]),
            coverage=_joined_coverage(parts, len(first.coverage)),
            pred=np.concatenate([p.pred for p in parts]),
            output=np.concatenate([p.output for p in parts]),
            sa_layers=list(first.sa_layers),
            coverage_layers=list(first.coverage_layers),
            coverage_extrema=extrema,
        )


def _joined_coverage(parts: Sequence[Traces], layers: int) -> list[np.ndarray]:
    """Each of the ``layers`` coverage layers' traces of consecutive batches joined."""
    return [np.concatenate([p.coverage[i] for p in parts]) for i in range(layers)]


def _joined_extrema(parts: Sequence[Traces], first: list[Any]) -> list[Any]:
    """The ``(min, max)`` per coverage layer of consecutive batches joined (``None`` stays ``None``)."""
    return [
        None if e is None else tuple(np.concatenate([p.coverage_extrema[i][j] for p in parts]) for j in (0, 1))  # type: ignore[index]
        for i, e in enumerate(first)
    ]


def resolve_output(output: str | int | None, names: Sequence[str], model_name: str) -> int:
    """The index of the measured output (``sadl_output``: a name, an index, an index as a
    string, or ``None`` for the first), for the Keras and the PyTorch trace models alike."""
    if output is None:
        return 0
    index = _output_index(output, names)
    if index is not None:
        return index
    raise SadlModelError(
        f"sadl_output={output!r}: model {model_name!r} has outputs "
        f"{', '.join(f'{i}:{n}' for i, n in enumerate(names))}; give one of these names or indices"
    )


def _output_index(output: str | int, names: Sequence[str]) -> int | None:
    """The index ``output`` names (an index in range, digits that are no name, or a
    name), or ``None``: a bool is neither an index nor a name."""
    if is_index(output, names):
        i = int(output)
        return i % len(names) if -len(names) <= i < len(names) else None
    if isinstance(output, str) and output in names:
        return list(names).index(output)
    return None


def is_index(item: Any, names: Container[str]) -> bool:
    """Whether an output or layer item is an index: an int (not a bool), or digits that
    are not one of ``names``."""
    if isinstance(item, (int, np.integer)):
        return not isinstance(item, bool)
    return isinstance(item, str) and item.lstrip("-").isdigit() and item not in names
