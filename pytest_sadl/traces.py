"""Activation traces of a Keras 3 model: the public name of :mod:`pytest_sadl.capture`.

The profile, the recorder and the command line import from here; the work is in the
capture package (layers by path, the backend's forward pass with the chosen layers
tapped, batching into :class:`Traces`). See :mod:`pytest_sadl.capture.traces` for the
reduction rule and :class:`TraceModel` for the API.
"""

from pytest_sadl import capture as _capture
from pytest_sadl.capture import *  # noqa: F401,F403 - the same names, under this module

__all__ = list(_capture.__all__)
