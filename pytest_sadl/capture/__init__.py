"""Capture: from a Keras model and its inputs to activation traces (NumPy).

The one room that knows a backend. :mod:`~pytest_sadl.capture.layers` resolves layers
(walking nested models and custom blocks, naming them by path);
:mod:`~pytest_sadl.capture.forward` runs the model's own forward pass with the chosen
layers' ``call`` tapped, compiled for TensorFlow (``tf.function``/XLA) or JAX
(``jax.jit``); :mod:`~pytest_sadl.capture.traces` batches inputs through it and gives
one :class:`Traces` type to the profile and the recorder alike.
:mod:`~pytest_sadl.capture.torch` does the same for native PyTorch models (forward hooks;
:func:`trace_model` picks the trace model a model needs, both a :class:`Tracer`). Importing this package
imports no backend; using it does.
"""

from pytest_sadl.capture.arrays import Progress, Traces
from pytest_sadl.capture.layers import describe_layers, resolve_layers, walk
from pytest_sadl.capture.traces import (
    TraceModel,
    Tracer,
    default_coverage_layers,
    default_sa_layers,
    is_classifier,
    trace_model,
)

__all__ = [
    "Traces",
    "TraceModel",
    "Tracer",
    "trace_model",
    "Progress",
    "resolve_layers",
    "describe_layers",
    "walk",
    "default_sa_layers",
    "default_coverage_layers",
    "is_classifier",
]
