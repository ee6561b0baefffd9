"""ENERGYC — a surprise coverage over the Energy OOD score (Liu et al., NeurIPS 2020).

The per-input score is the energy ``-T * logsumexp(z / T)`` of the logits ``z`` (``T = 1``, the paper's), where the logits ``z`` are the output layer's
before its softmax: ``z = h @ W + b`` of the SA layer's traces ``h`` through the output
``Dense`` layer's kernel and bias, exact when the SA layer is that layer's input (the
default SA layer of a ``Dense(k, softmax)`` classifier: :mod:`pytest_sadl.capture.logits`).
Higher means more out of distribution. Not available, with the one-line reason, for a
regression model, an output that is not a softmax over a dense layer, or other SA layers.
ENERGYC is the fraction of the ``buckets`` equal segments of ``[lower, upper]`` that some
input's Energy falls into, as LSC. Opt-in: ``--sadl-metrics=energyc``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytest_sadl.criteria.metrics import surprise_make
from pytest_sadl.criteria.shape import SURPRISE_KIND, Colour, Criterion


def logit_fit(score: str) -> Callable[[Any], Any]:
    """``fit`` of one logit score (``"energy"``, ``"maxlogit"``, ``"msp"``): the output
    layer over the SA traces, from the profile
    (:meth:`~pytest_sadl.profile.build.TrainingProfile.logit_head`); ``ValueError`` with the
    one-line reason where there is none (a regression model has no softmax output)."""

    def fit(training: Any) -> Any:
        from pytest_sadl.criteria.ood import LogitScores

        if training.pred is None:
            raise ValueError("a regression model has no softmax output, so there are no logits to score")
        head = training.logit_head  # the held-out set-up carries the head itself
        if head is None and training.profile is not None:
            head = training.profile.logit_head()
        if head is None:
            raise ValueError("the output layer's logits come with the whole profile only; configure the bounds")
        return LogitScores(head[0], head[1], score)

    return fit


CRITERION = Criterion(
    name="energyc",
    label="ENERGYC",
    title="Energy-score coverage",
    kind=SURPRISE_KIND,
    needs=("energy", "logits", "sc bounds"),
    make=surprise_make("energyc", "energy"),
    sa="energy",
    sa_label="Energy",
    default=False,
    fit=logit_fit("energy"),
    colour=Colour("#475569", "#cbd5e1"),
)
