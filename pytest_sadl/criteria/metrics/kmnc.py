"""KMNC — k-multisection neuron coverage (DeepGauge, Ma et al., ASE 2018).

Each neuron's training range ``[low, high]`` is cut into ``kmnc_k`` equal sections; KMNC
is the fraction of all sections that some input's activation falls into
(:class:`~pytest_sadl.criteria.neurons.KMultisectionCoverage`).
"""

from pytest_sadl.criteria.shape import NEURON_KIND, Colour, Coverage, Criterion, Param, Setup


def make(setup: Setup) -> Coverage:
    from pytest_sadl.criteria.neurons import KMultisectionCoverage

    return KMultisectionCoverage(setup.ranges, setup.options.kmnc_k)


CRITERION = Criterion(
    name="kmnc",
    label="KMNC",
    title="k-multisection neuron coverage",
    kind=NEURON_KIND,
    needs=("neuron ranges", "kmnc_k"),
    make=make,
    parameters=(
        Param(
            "kmnc_k",
            int,
            1000,
            "KMNC's number of sections per neuron (default 1000)",
            at_least=1,
            at_least_why="KMNC needs k >= 1 sections per neuron",
            limit=10_000,
            limit_why="KMNC keeps neurons x k flags, for the total and for every group; the paper uses 1000",
        ),
    ),
    unit="sections",
    explanation=(
        "Each neuron's training range split into k equal sections; a section is covered when an input lands in it."
    ),
    colour=Colour("#7c3aed", "#c4b5fd"),
)
