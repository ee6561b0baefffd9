"""MAXLOGITC — a surprise coverage over the MaxLogit OOD score (Hendrycks et al., ICML 2022).

The per-input score is ``-max_k z_k``, the negated largest logit, where the logits ``z`` are the output layer's
before its softmax: ``z = h @ W + b`` of the SA layer's traces ``h`` through the output
``Dense`` layer's kernel and bias, exact when the SA layer is that layer's input (the
default SA layer of a ``Dense(k, softmax)`` classifier: :mod:`pytest_sadl.capture.logits`).
Higher means more out of distribution. Not available, with the one-line reason, for a
regression model, an output that is not a softmax over a dense layer, or other SA layers.
MAXLOGITC is the fraction of the ``buckets`` equal segments of ``[lower, upper]`` that some
input's MaxLogit falls into, as LSC. Opt-in: ``--sadl-metrics=maxlogitc``.
"""

from __future__ import annotations

from pytest_sadl.criteria.metrics import surprise_make
from pytest_sadl.criteria.metrics.energyc import logit_fit
from pytest_sadl.criteria.shape import SURPRISE_KIND, Colour, Criterion

CRITERION = Criterion(
    name="maxlogitc",
    label="MAXLOGITC",
    title="MaxLogit-score coverage",
    kind=SURPRISE_KIND,
    needs=("maxlogit", "logits", "sc bounds"),
    make=surprise_make("maxlogitc", "maxlogit"),
    sa="maxlogit",
    sa_label="MaxLogit",
    default=False,
    fit=logit_fit("maxlogit"),
    colour=Colour("#475569", "#cbd5e1", dashed=True),
)
