"""SNAC — strong neuron activation coverage (DeepGauge, Ma et al., ASE 2018).

The fraction of neurons that some input drives above their training ``high``
(:class:`~pytest_sadl.criteria.neurons.StrongNeuronActivationCoverage`).
"""

from pytest_sadl.criteria.shape import NEURON_KIND, Colour, Coverage, Criterion, Setup


def make(setup: Setup) -> Coverage:
    from pytest_sadl.criteria.neurons import StrongNeuronActivationCoverage

    return StrongNeuronActivationCoverage(setup.ranges)


CRITERION = Criterion(
    name="snac",
    label="SNAC",
    title="Strong neuron activation coverage",
    kind=NEURON_KIND,
    needs=("neuron ranges",),
    make=make,
    explanation=("Counts the upper corners only: neurons driven above the highest value seen on the training set."),
    colour=Colour("#be185d", "#f472b6"),
)
