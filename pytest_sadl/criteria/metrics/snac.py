"""SNAC — strong neuron activation coverage (DeepGauge, Ma et al., ASE 2018).

The fraction of neurons that some input drives above their training ``high``
(:class:`~pytest_sadl.criteria.neurons.StrongNeuronActivationCoverage`).
``--sadl-snac-std=S`` moves the boundary ``S`` training standard deviations up
(dnn-tip's ``scaler``).
"""

from pytest_sadl.criteria.metrics.nbc import std_scale
from pytest_sadl.criteria.shape import NEURON_KIND, Colour, Coverage, Criterion, Param, Setup


def make(setup: Setup) -> Coverage:
    from pytest_sadl.criteria.neurons import StrongNeuronActivationCoverage

    return StrongNeuronActivationCoverage(setup.ranges, std_scale(setup.options, "snac_std"))


CRITERION = Criterion(
    name="snac",
    label="SNAC",
    title="Strong neuron activation coverage",
    kind=NEURON_KIND,
    needs=("neuron ranges",),
    make=make,
    parameters=(
        Param(
            "snac_std",
            float,
            0.0,
            "SNAC: the boundary S training standard deviations above each neuron's highest value, "
            "as dnn-tip's scaler (default 0: the highest value itself)",
            metavar="S",
            at_least=0,
            at_least_why="SNAC's std scale is a number of standard deviations >= 0",
            description="SNAC's boundary, in training standard deviations above the range (when the run computed SNAC)",
        ),
    ),
    explanation=("Counts the upper corners only: neurons driven above the highest value seen on the training set."),
    colour=Colour("#be185d", "#f472b6"),
)
