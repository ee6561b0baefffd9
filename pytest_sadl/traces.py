"""Activation traces of a Keras 3 model: the public name of :mod:`pytest_sadl.capture`.

The profile, the recorder and the command line import from here; the work is in the
capture package (layers by path, the backend's forward pass with the chosen layers
tapped, batching into :class:`Traces`). See :mod:`pytest_sadl.capture.traces` for the
reduction rule and :class:`TraceModel` for the API.
"""

from pytest_sadl.capture import (
    Progress,
    TraceModel,
    Traces,
    default_coverage_layers,
    default_sa_layers,
    describe_layers,
    is_classifier,
    resolve_layers,
)

__all__ = [
    "Traces",
    "TraceModel",
    "Progress",
    "resolve_layers",
    "describe_layers",
    "default_sa_layers",
    "default_coverage_layers",
    "is_classifier",
]
