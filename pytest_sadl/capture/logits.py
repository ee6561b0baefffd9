"""The output layer's logits as a map of the SA layer's traces, for the logit scores
(energy, MaxLogit, MSP: :mod:`pytest_sadl.criteria.ood`).

The traces measure each layer after its activation, so a ``Dense(10, activation="softmax")``
output gives probabilities, never the logits before the softmax. But when the SA layer is
the output layer's input (the default SA layer of a ``... -> Dense(h, relu) -> Dense(k,
softmax)`` classifier is, through any ``Dropout``), the logits are exactly
``sa_traces @ kernel + bias`` of that output layer: :func:`logit_head` returns that kernel
and bias, so no capture pass changes. Where there is no such map it raises one line saying
why: a regression model (no softmax output), an output that is not a softmax over a dense
layer, or SA layers that are not the output layer's input.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pytest_sadl.capture.layers import is_activated, is_activation_only, is_pass_through
from pytest_sadl.errors import SadlLayerError, SadlModelError

__all__ = ["logit_head"]


def _softmax(layer: Any) -> bool:
    act = getattr(layer, "activation", None)
    name = act if isinstance(act, str) else getattr(act, "__name__", "")
    return "softmax" in str(name).lower() or type(layer).__name__ == "Softmax"


def _dense(layer: Any) -> bool:
    return type(layer).__name__ == "Dense" and getattr(layer, "kernel", None) is not None


def _back(tm: Any, path: str) -> str | None:
    """The path of the layer whose output ``path`` was called on, or ``None``."""
    j = tm._seen[path].after
    return None if j < 0 else tm._nodes[j].path


def _logits_layer(tm: Any, by_path: dict[str, Any], owner: str) -> str | None:
    """The dense layer whose output goes into the output's softmax: the output layer
    itself (``Dense(k, activation="softmax")``), or the linear ``Dense`` a bare
    ``Softmax``/``Activation("softmax")`` output is called on."""
    layer = by_path[owner]
    if _dense(layer) and _softmax(layer):
        return owner
    if is_activation_only(layer) and _softmax(layer):
        back = _back(tm, owner)
        if back is not None and _linear_dense(by_path[back]):
            return back
    return None


def _linear_dense(layer: Any) -> bool:
    """A dense layer without an activation of its own (it gives logits)."""
    return _dense(layer) and not is_activated(layer)


def _logits_of_output(tm: Any, by_path: dict[str, Any]) -> str:
    """The dense layer whose logits the measured output is a softmax of; raises for another output."""
    owner = next((p for p, layer in by_path.items() if layer is tm._output_layer), None)
    dense = None if owner is None else _logits_layer(tm, by_path, owner)
    if owner is None or dense is None:
        raise SadlModelError(
            f"model {tm.name!r}: its output {owner!r} is not a softmax over a Dense layer's logits, "
            "so energy, MaxLogit and MSP do not apply; use the other scores"
        )
    return dense


def _head_paths(tm: Any) -> tuple[str, str]:
    """(the dense layer that makes the logits, the layer its input comes from)."""
    by_path = {n.path: n.layer for n in tm._nodes}
    dense = _logits_of_output(tm, by_path)
    source = _back(tm, dense)
    # back through layers that hand a (batch, d) input on unchanged (a Dropout, a Flatten of it)
    while source is not None and is_pass_through(by_path[source]):
        before = _unchanged_from(tm, source)
        if before is None:
            break
        source = before
    return dense, source or ""


def _unchanged_from(tm: Any, path: str) -> str | None:
    """The layer whose ``(batch, d)`` output the layer at ``path`` hands on unchanged in shape, or ``None``."""
    before = _back(tm, path)
    shape = tm._seen[path].shape or ()
    if before is None or len(shape) != 2 or (tm._seen[before].shape or ()) != shape:
        return None
    return before


def _check_head_model(tm: Any) -> None:
    """Raise unless ``tm`` traces a Keras classifier (whose output layer can be read)."""
    if not getattr(tm, "classifier", False):
        raise SadlModelError(
            f"model {tm.name!r} is a regression model: it has no softmax output, so energy, MaxLogit and MSP do not apply"
        )
    if not hasattr(tm, "_nodes"):
        raise SadlModelError(f"model {tm.name!r}: energy, MaxLogit and MSP read a Keras model's output layer only")


def logit_head(tm: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(kernel (d, k), bias (k,))`` of the output layer, so that the logits of the SA
    traces ``sa`` of trace model ``tm`` are ``sa @ kernel + bias``. Raises
    :class:`SadlModelError` (a regression model, an output that is not a softmax over a
    dense layer) or :class:`SadlLayerError` (SA layers that are not its input), one line."""
    _check_head_model(tm)
    dense, source = _head_paths(tm)
    if list(tm.sa_layers) != [source]:
        raise SadlLayerError(
            f"model {tm.name!r}: the logits are {dense!r} of {source or 'its input'!r}, not of the SA layers "
            f"{list(tm.sa_layers)}; measure SA on {source!r} for energy, MaxLogit and MSP"
        )
    kernel, bias = _dense_weights({n.path: n.layer for n in tm._nodes}[dense])
    if kernel.ndim != 2 or kernel.shape[0] != sum(tm.sa_sizes):
        raise SadlLayerError(f"model {tm.name!r}: the output layer {dense!r} does not take the SA traces as its input")
    return kernel, bias


def _dense_weights(layer: Any) -> tuple[np.ndarray, np.ndarray]:
    """A dense layer's kernel and bias (zeros without one), as float64."""
    weights = [np.asarray(w, dtype=np.float64) for w in layer.get_weights()]
    kernel = weights[0]
    return kernel, (weights[1] if len(weights) > 1 else np.zeros(kernel.shape[1]))
