"""The traces a pytester project's run recorded, kept for the test to compare with.

A score computed by the plugin and a reference computed by the test agree bit for bit only
if both start from the same float32 traces. A test that traces the inputs again in its own
process (``TraceModel.traces(x)``) may get other last bits than the run's recorded
``predict``: TensorFlow guarantees no batch invariance, and on CPUs where oneDNN is off
(AMD, older Intel) its Eigen kernels block a matrix product by its shape (the batch) and the
CPU's caches, so a batch of 60 and Keras' 32 + 28 can round differently; an ill-conditioned
score (a mixture's density, a narrow KDE) turns one ulp of a trace into 1e-6 of the score.
So the reference scores the very traces the run recorded, which ``KEEP_RECORDED`` (a
conftest for the project) writes at the session's end, in the recorder's own transport
format (``Recorder.to_bytes``), and :func:`recorded` reads back in the engine's order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

KEEP_RECORDED = """
import pytest

from pytest_sadl.plugin.hooks import SESSION
from pytest_sadl.records import to_bytes


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    recorder = session.config.stash[SESSION].recorder
    with open("recorded.npz", "wb") as f:
        f.write(to_bytes(recorder.records.values()))
"""


def recorded(project: Path) -> tuple[np.ndarray, np.ndarray]:
    """The SA traces and predictions the run at ``project`` recorded, its tests in node-id
    order (the engine's, with one attempt a test), each test's batches in call order."""
    from pytest_sadl.records import from_bytes

    records = sorted(from_bytes((project / "recorded.npz").read_bytes()), key=lambda r: r.nodeid)
    batches = [b for r in records for b in r.batches]
    return np.concatenate([b.sa for b in batches]), np.concatenate([b.pred for b in batches])
