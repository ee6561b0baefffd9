"""NBC — neuron boundary coverage (DeepGauge, Ma et al., ASE 2018).

The fraction of the ``2 x neurons`` corner regions (below the training ``low``, above
the training ``high``) that some input reaches
(:class:`~pytest_sadl.criteria.neurons.NeuronBoundaryCoverage`).
"""

from pytest_sadl.criteria.shape import NEURON_KIND, Colour, Coverage, Criterion, Setup


def make(setup: Setup) -> Coverage:
    from pytest_sadl.criteria.neurons import NeuronBoundaryCoverage

    return NeuronBoundaryCoverage(setup.ranges)


CRITERION = Criterion(
    name="nbc",
    label="NBC",
    title="Neuron boundary coverage",
    kind=NEURON_KIND,
    needs=("neuron ranges",),
    make=make,
    unit="corners",
    explanation=(
        "Each neuron has two corners: activations above the highest (upper corner) or below the "
        "lowest (lower corner) value seen on the training set; a corner is covered when an input reaches it."
    ),
    colour=Colour("#0e7490", "#22d3ee"),
)
