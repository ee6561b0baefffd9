"""NC — neuron coverage (DeepXplore, Pei et al., SOSP 2017).

A neuron is covered when some input's activation, scaled to [0, 1] over that layer's
outputs for the input, exceeds ``nc_threshold``
(:class:`~pytest_sadl.criteria.neurons.NeuronCoverage`).
"""

from pytest_sadl.criteria.shape import (
    NEURON_KIND,
    Coverage,
    Criterion,
    NeuronTargets,
    Setup,
)


def make(setup: Setup) -> Coverage:
    from pytest_sadl.criteria.neurons import NeuronCoverage

    return NeuronTargets(NeuronCoverage(setup.ranges, setup.options.nc_threshold), uses_extrema=True)


CRITERION = Criterion(
    name="nc",
    label="NC",
    title="Neuron coverage",
    kind=NEURON_KIND,
    needs=("coverage layers", "nc_threshold"),
    make=make,
)
