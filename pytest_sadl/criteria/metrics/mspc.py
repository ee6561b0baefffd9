"""MSPC — a surprise coverage over the MSP OOD score (Hendrycks and Gimpel, ICLR 2017).

The per-input score is ``1 - max_k softmax(z)_k``, one minus the top class probability, where the logits ``z`` are the output layer's
before its softmax: ``z = h @ W + b`` of the SA layer's traces ``h`` through the output
``Dense`` layer's kernel and bias, exact when the SA layer is that layer's input (the
default SA layer of a ``Dense(k, softmax)`` classifier: :mod:`pytest_sadl.capture.logits`).
Higher means more out of distribution. Not available, with the one-line reason, for a
regression model, an output that is not a softmax over a dense layer, or other SA layers.
MSPC is the fraction of the ``buckets`` equal segments of ``[lower, upper]`` that some
input's MSP falls into, as LSC. Opt-in: ``--sadl-metrics=mspc``.
"""

from __future__ import annotations

from pytest_sadl.criteria.metrics import surprise_make
from pytest_sadl.criteria.metrics.energyc import logit_fit
from pytest_sadl.criteria.shape import SURPRISE_KIND, Colour, Criterion

CRITERION = Criterion(
    name="mspc",
    label="MSPC",
    title="Maximum-softmax-probability coverage",
    kind=SURPRISE_KIND,
    needs=("msp", "logits", "sc bounds"),
    make=surprise_make("mspc", "msp"),
    sa="msp",
    sa_label="MSP",
    default=False,
    fit=logit_fit("msp"),
    colour=Colour("#854d0e", "#fde047", dashed=True),
)
