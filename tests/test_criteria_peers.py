"""The peers' neuron-level criteria (issue 17): TKNC and TKNP (DeepGauge), NLC (NeuraL
Coverage) and CC (TensorFuzz), each against a naive reference written from its paper's
definition (tests/naive.py), whatever the batches, merges and ties."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import tests.naive as naive
from pytest_sadl.criteria import registry
from pytest_sadl.criteria.metrics.cc import ClusterCoverage
from pytest_sadl.criteria.metrics.nlc import NeuralCoverage
from pytest_sadl.criteria.metrics.tknc import TopKCoverage, top_k
from pytest_sadl.criteria.metrics.tknp import TopKPatterns
from pytest_sadl.criteria.neurons import fit_ranges
from pytest_sadl.criteria.shape import COUNT_KIND, NEURON_KIND, Batch, Setup


def _layers(rng, n, *, ties=False):
    """Two coverage layers; with ``ties``, values on a coarse grid so equal outputs are common."""
    layers = [rng.normal(size=(n, 7)), np.abs(rng.normal(size=(n, 5))) * 2.0]
    return [np.round(a) for a in layers] if ties else layers


def _batch(layers, rows=slice(None)):
    return Batch({}, [a[rows] for a in layers], [None] * len(layers))


def _in_parts(make, layers, cuts):
    """One coverage fed ``layers`` in batches split at ``cuts``."""
    cov = make()
    edges = [0, *cuts, len(layers[0])]
    for a, b in zip(edges, edges[1:], strict=False):
        cov.update(_batch(layers, slice(a, b)))
    return cov


def test_top_k_breaks_ties_to_the_lower_neuron_index():
    values = np.array([[1.0, 3.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0, 2.0], [5.0, 4.0, 3.0, 2.0, 1.0]])
    assert top_k(values, 2).tolist() == [
        [False, True, True, False, False],
        [True, True, False, False, False],
        [True, True, False, False, False],
    ]
    assert top_k(values, 9).all() and top_k(values[:0], 2).shape == (0, 5)
    rng = np.random.default_rng(1)
    grid = np.round(rng.normal(size=(200, 9)))
    for k in (1, 2, 4):
        mask = top_k(grid, k)
        assert (mask.sum(axis=1) == k).all()
        for row, hits in zip(grid, mask, strict=True):
            assert set(np.flatnonzero(hits)) == naive.top_k_set(list(row), k)


@pytest.mark.parametrize("k", [1, 2, 3, 7])
@pytest.mark.parametrize("ties", [False, True])
def test_tknc_is_deepgauges_definition_in_any_batches(k, ties):
    rng = np.random.default_rng(k)
    tests = _layers(rng, 60, ties=ties)
    sizes = [a.shape[1] for a in tests]
    whole = TopKCoverage(sizes, k)
    new = whole.update(_batch(tests))
    assert whole.value == pytest.approx(naive.tknc(tests, k), abs=1e-15)
    assert new == whole.covered_count and whole.metric().total == sum(sizes)
    parts = _in_parts(lambda: TopKCoverage(sizes, k), tests, [7, 8, 31])
    assert parts.value == whole.value
    first, second = TopKCoverage(sizes, k), TopKCoverage(sizes, k)
    first.update(_batch(tests, slice(0, 25)))
    second.update(_batch(tests, slice(25, None)))
    first.merge(second)
    assert first.value == whole.value and first.per_layer() == whole.per_layer()
    assert whole.update(_batch(tests)) == 0, "inputs seen before cover nothing new"


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("ties", [False, True])
def test_tknp_counts_deepgauges_distinct_patterns_and_merges_by_union(k, ties):
    rng = np.random.default_rng(10 + k)
    tests = _layers(rng, 80, ties=ties)
    tests = [np.concatenate([a, a[:20]]) for a in tests]  # repeated inputs repeat their pattern
    sizes = [a.shape[1] for a in tests]
    whole = TopKPatterns(sizes, k)
    new = whole.update(_batch(tests))
    expected = naive.tknp(tests, k)
    assert whole.value == expected == new and expected <= 80
    assert whole.metric().covered == expected and whole.metric().total == 100
    first, second = TopKPatterns(sizes, k), TopKPatterns(sizes, k)
    first.update(_batch(tests, slice(0, 50)))
    second.update(_batch(tests, slice(40, None)))  # overlapping: the union counts each once
    first.merge(second)
    assert first.value == expected
    assert all(len(p) == 16 for p in whole.patterns), "patterns are stored as 16-byte digests"
    # a pattern is the tuple over the layers: the same sets in other layers differ
    swapped = TopKPatterns(sizes, k)
    swapped.update(_batch([tests[0], np.roll(tests[1], 1, axis=0)]))
    assert swapped.value == naive.tknp([tests[0], np.roll(tests[1], 1, axis=0)], k)


def test_tknp_patterns_are_sets_not_rankings():
    """DeepGauge's pattern is each layer's top-k *set*: the same neurons on top in another
    order of their values are one pattern (NeuraL-Coverage's ``topk(sorted=True)`` lists
    count two; docs/metrics.md, "Beside NeuraL-Coverage")."""
    layer = np.array([[3.0, 2.0, 0.0], [2.0, 3.0, 0.0], [0.0, 2.0, 3.0]])
    cov = TopKPatterns([3], 2)
    assert cov.update(_batch([layer])) == 2 and cov.value == 2 == naive.tknp([layer], 2)


def test_nlc_is_the_summed_mean_absolute_covariance_and_merges_exactly():
    rng = np.random.default_rng(5)
    tests = _layers(rng, 90)
    sizes = [a.shape[1] for a in tests]
    whole = NeuralCoverage(sizes)
    assert whole.value == 0.0 and whole.update(_batch(tests)) == 0, "NLC has no targets"
    assert whole.value == pytest.approx(naive.nlc(tests), rel=1e-12)
    expected = sum(np.abs(np.cov(a, rowvar=False, bias=True)).mean() for a in tests)
    assert whole.value == pytest.approx(expected, rel=1e-12)
    parts = _in_parts(lambda: NeuralCoverage(sizes), tests, [1, 2, 40, 41])
    assert parts.value == pytest.approx(whole.value, rel=1e-12)
    first, second = NeuralCoverage(sizes), NeuralCoverage(sizes)
    first.update(_batch(tests, slice(0, 30)))
    second.update(_batch(tests, slice(30, None)))
    second.merge(first)  # merging is order-free: the covariance of the union
    assert second.value == pytest.approx(whole.value, rel=1e-12) and second.count == 90
    backwards = _in_parts(lambda: NeuralCoverage(sizes), [a[::-1] for a in tests], [10, 50])
    assert backwards.value == pytest.approx(whole.value, rel=1e-12), "the order of the inputs does not matter"


def test_nlc_is_not_monotone_inputs_at_the_mean_lower_it():
    """The known property of NLC as defined (the 2026 critical review): more inputs, at the
    layer's mean, shrink the covariance; NeuraL-Coverage's code hides it by keeping only the
    batches that raise a layer's norm, which makes it depend on the order instead."""
    spread = [np.array([[0.0, 0.0], [2.0, 2.0]])]
    nlc = NeuralCoverage([2])
    nlc.update(_batch(spread))
    assert nlc.value == pytest.approx(1.0)  # covariance [[1, 1], [1, 1]]
    nlc.update(_batch([np.array([[1.0, 1.0]] * 2)]))
    assert nlc.value == pytest.approx(0.5)


@pytest.mark.parametrize("threshold", [0.0, 1.0, 2.5, 50.0])
def test_cc_is_tensorfuzz_clusters_in_input_order(threshold):
    rng = np.random.default_rng(3)
    tests = _layers(rng, 70, ties=True)  # repeated points: at distance 0 from a centre
    sizes = [a.shape[1] for a in tests]
    whole = ClusterCoverage(sizes, threshold)
    new = whole.update(_batch(tests))
    expected = naive.cc(tests, threshold)
    assert whole.value == expected == new == sum(whole.per_layer())
    parts = _in_parts(lambda: ClusterCoverage(sizes, threshold), tests, [1, 9, 10, 33])
    assert parts.value == expected, "batches do not change the order of the inputs"
    assert whole.update(_batch(tests)) == 0, "every input seen is within the threshold of a centre"
    first, second = ClusterCoverage(sizes, threshold), ClusterCoverage(sizes, threshold)
    first.update(_batch(tests, slice(0, 35)))
    second.update(_batch(tests, slice(35, None)))
    first.merge(second)
    centres = [np.concatenate([a[:35], b.centres]) for a, b in zip(tests, second.layers, strict=True)]
    assert first.value == naive.cc(centres, threshold), "merge: the other's centres after one's own inputs"


def test_cc_depends_on_the_order_and_the_threshold_is_strict():
    points = np.array([[0.0], [1.0], [1.5]])
    forward = ClusterCoverage([1], 1.0)
    forward.update(_batch([points]))
    assert forward.value == 2 == naive.cc([points], 1.0), "1.0 is not farther than 1.0 from 0.0; 1.5 is"
    other = ClusterCoverage([1], 1.0)
    other.update(_batch([points[[1, 0, 2]]]))
    assert other.value == 1 == naive.cc([points[[1, 0, 2]]], 1.0), "from 1.0 both others are within 1.0"
    with pytest.raises(ValueError, match="threshold must be a finite number >= 0"):
        ClusterCoverage([1], -1.0)


def test_the_registry_makes_them_from_the_options_and_reports_none_by_default():
    rng = np.random.default_rng(2)
    train, tests = _layers(rng, 100), _layers(rng, 30)
    options = SimpleNamespace(tknc_k=1, tknp_k=3, cc_threshold=2.0)
    setup = Setup(fit_ranges(train), options)
    made = {name: registry.BY_NAME[name].make(setup) for name in ("tknc", "tknp", "nlc", "cc")}
    for cov in made.values():
        cov.update(_batch(tests))
    assert made["tknc"].value == pytest.approx(naive.tknc(tests, 1))
    assert made["tknp"].metric().covered == naive.tknp(tests, 3)
    assert made["nlc"].metric().value == pytest.approx(naive.nlc(tests), rel=1e-12)
    assert made["cc"].metric().covered == naive.cc(tests, 2.0)
    assert {registry.KINDS[n] for n in ("tknp", "nlc", "cc")} == {COUNT_KIND}
    assert registry.KINDS["tknc"] == NEURON_KIND
    assert not set(made) & set(registry.DEFAULT_METRICS), "opt-in: default reports do not change"
    with pytest.raises(ValueError, match="TKNC's k must be an integer >= 1"):
        TopKCoverage([3], 0)
