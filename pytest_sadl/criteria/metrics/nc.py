"""NC — neuron coverage (DeepXplore, Pei et al., SOSP 2017).

A neuron is covered when some input's activation, scaled to [0, 1] over that layer's
outputs for the input, exceeds ``nc_threshold``
(:class:`~pytest_sadl.criteria.neurons.NeuronCoverage`).
"""

from pytest_sadl.criteria.shape import NEURON_KIND, Colour, Coverage, Criterion, Param, Setup


def make(setup: Setup) -> Coverage:
    from pytest_sadl.criteria.neurons import NeuronCoverage

    return NeuronCoverage(setup.ranges, setup.options.nc_threshold)


CRITERION = Criterion(
    name="nc",
    label="NC",
    title="Neuron coverage",
    kind=NEURON_KIND,
    needs=("coverage layers", "nc_threshold"),
    make=make,
    parameters=(
        Param(
            "nc_threshold",
            float,
            0.5,
            "NC activation threshold on the min-max scaled output (default 0.5)",
            metavar="T",
            at_least=0,
            at_least_why="NC's threshold applies to outputs scaled to [0, 1]; use a value in [0, 1)",
            below=1,
            below_why="NC's threshold applies to outputs scaled to [0, 1], so no neuron could exceed it; "
            "use a value in [0, 1)",
            maximum=1,
        ),
    ),
    colour=Colour("#15803d", "#4ade80"),
)
