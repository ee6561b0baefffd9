"""KMNC — k-multisection neuron coverage (DeepGauge, Ma et al., ASE 2018).

Each neuron's training range ``[low, high]`` is cut into ``kmnc_k`` equal sections; KMNC
is the fraction of all sections that some input's activation falls into
(:class:`~pytest_sadl.criteria.neurons.KMultisectionCoverage`).
"""

from pytest_sadl.criteria.shape import (
    NEURON_KIND,
    Coverage,
    Criterion,
    NeuronTargets,
    Setup,
)


def make(setup: Setup) -> Coverage:
    from pytest_sadl.criteria.neurons import KMultisectionCoverage

    return NeuronTargets(KMultisectionCoverage(setup.ranges, setup.options.kmnc_k))


CRITERION = Criterion(
    name="kmnc",
    label="KMNC",
    title="k-multisection neuron coverage",
    kind=NEURON_KIND,
    needs=("neuron ranges", "kmnc_k"),
    make=make,
)
