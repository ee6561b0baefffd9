"""NBC — neuron boundary coverage (DeepGauge, Ma et al., ASE 2018).

The fraction of the ``2 x neurons`` corner regions (below the training ``low``, above
the training ``high``) that some input reaches
(:class:`~pytest_sadl.criteria.neurons.NeuronBoundaryCoverage`). ``--sadl-nbc-std=S``
moves the boundaries ``S`` training standard deviations outwards (dnn-tip's ``scaler``).
"""

from typing import Any

from pytest_sadl.criteria.shape import NEURON_KIND, Colour, Coverage, Criterion, Param, Setup


def std_scale(options: Any, name: str) -> float:
    """The run's ``name`` (``nbc_std``, ``snac_std``); 0 for options without parameters
    (a hand-made set-up's plain namespace)."""
    param = getattr(options, "param", None)
    return 0.0 if param is None else float(param(name))


def make(setup: Setup) -> Coverage:
    from pytest_sadl.criteria.neurons import NeuronBoundaryCoverage

    return NeuronBoundaryCoverage(setup.ranges, std_scale(setup.options, "nbc_std"))


CRITERION = Criterion(
    name="nbc",
    label="NBC",
    title="Neuron boundary coverage",
    kind=NEURON_KIND,
    needs=("neuron ranges",),
    make=make,
    parameters=(
        Param(
            "nbc_std",
            float,
            0.0,
            "NBC: boundaries S training standard deviations beyond each neuron's range, "
            "as dnn-tip's scaler (default 0: the range itself)",
            metavar="S",
            at_least=0,
            at_least_why="NBC's std scale is a number of standard deviations >= 0",
            description="NBC's boundaries, in training standard deviations beyond the range (when the run computed NBC)",
        ),
    ),
    unit="corners",
    explanation=(
        "Each neuron has two corners: activations above the highest (upper corner) or below the "
        "lowest (lower corner) value seen on the training set; a corner is covered when an input reaches it."
    ),
    colour=Colour("#0e7490", "#22d3ee"),
)
