"""NC, KMNC, NBC and SNAC against naive references written from DeepXplore and DeepGauge."""

from __future__ import annotations

import naive
import numpy as np
import pytest

from pytest_sadl.criteria.neurons import (
    KMultisectionCoverage,
    NeuronBoundaryCoverage,
    NeuronCoverage,
    NeuronRanges,
    StrongNeuronActivationCoverage,
    fit_ranges,
    kmnc,
    nbc,
    nc,
    reduce_layer,
    snac,
)


def model_like(rng, n, scale=1.0):
    """A conv output (n, 4, 4, 3) after ReLU, a dense output (n, 6), a 1-D conv output (n, 5, 2)."""
    return [
        np.maximum(rng.normal(scale=scale, size=(n, 4, 4, 3)), 0),
        rng.normal(scale=scale, size=(n, 6)),
        rng.normal(scale=scale, size=(n, 5, 2)),
    ]


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    train = model_like(rng, 200)
    tests = model_like(rng, 40, scale=1.6)
    return train, tests, fit_ranges(train, names=["conv", "dense", "conv1d"])


def test_reduce_layer_is_the_spatial_mean_per_channel():
    a = np.arange(2 * 3 * 3 * 2, dtype=float).reshape(2, 3, 3, 2)
    np.testing.assert_allclose(reduce_layer(a), [[a[i, :, :, c].mean() for c in range(2)] for i in range(2)])
    dense = np.ones((4, 7))
    assert reduce_layer(dense) is dense


def test_fit_ranges_matches_min_and_max(data):
    train, _, ranges = data
    lows, highs = naive.ranges(train)
    for got, want in zip(ranges.low, lows, strict=True):
        np.testing.assert_allclose(got, want)
    for got, want in zip(ranges.high, highs, strict=True):
        np.testing.assert_allclose(got, want)
    assert ranges.sizes == (3, 6, 2) and ranges.names == ("conv", "dense", "conv1d")
    again = NeuronRanges.from_arrays(ranges.to_arrays())
    assert again.sizes == ranges.sizes and again.names == ranges.names
    assert all(np.array_equal(a, b) for a, b in zip(again.high, ranges.high, strict=True))


def test_fit_ranges_of_float32_layers_equal_their_float64_copies():
    # fit_ranges reads float32 layers as they are (no float64 copy); a conv layer still gets
    # its spatial mean in float64: the ranges are the float64 copies' ranges, bit for bit
    rng = np.random.default_rng(7)
    layers = [rng.normal(size=(500, 12)).astype(np.float32), rng.normal(size=(500, 4, 4, 3)).astype(np.float32)]
    got = fit_ranges(layers)
    want = fit_ranges([a.astype(np.float64) for a in layers])
    for a, b in zip(got.low + got.high, want.low + want.high, strict=True):
        assert a.dtype == np.float64 and np.array_equal(a, b)
    with pytest.raises(ValueError, match="NaN"):
        fit_ranges([np.array([[0.0], [np.nan]], dtype=np.float32)])


@pytest.mark.parametrize("threshold", [0.0, 0.25, 0.5, 0.75])
def test_nc_matches_deepxplore(data, threshold):
    _, tests, _ = data
    assert nc(tests, threshold) == pytest.approx(naive.neuron_coverage(tests, threshold))


def test_nc_scales_over_the_whole_feature_map_via_extrema(data):
    """Reduced traces plus per-input min/max of the full map give DeepXplore's value."""
    _, tests, _ = data
    reduced = [reduce_layer(a) for a in tests]
    extrema = [(a.reshape(len(a), -1).min(1), a.reshape(len(a), -1).max(1)) for a in tests]
    for threshold in (0.1, 0.3, 0.5):
        want = naive.neuron_coverage(tests, threshold)
        assert nc(reduced, threshold, extrema=extrema) == pytest.approx(want)


def test_nc_constant_output_scales_to_zero():
    layer = np.zeros((3, 4))
    assert nc([layer], 0.0) == 0.0
    assert nc([np.array([[0.0, 1.0, 0.2]])], 0.5) == pytest.approx(1 / 3)


@pytest.mark.parametrize("k", [1, 3, 10, 100])
def test_kmnc_matches_deepgauge(data, k):
    train, tests, ranges = data
    lows, highs = naive.ranges(train)
    assert kmnc(tests, ranges, k) == pytest.approx(naive.kmnc(tests, lows, highs, k))


def test_kmnc_training_maximum_falls_in_the_last_section():
    ranges = fit_ranges([np.array([[0.0], [1.0]])])
    cov = KMultisectionCoverage(ranges, k=4)
    cov.update([np.array([[1.0]])])
    assert cov.covered[0].tolist() == [False, False, False, True]
    cov.update([np.array([[0.25], [0.0], [-0.1], [1.1]])])  # an edge, the minimum, outside on both sides
    assert cov.covered[0].tolist() == [True, True, False, True]


def test_kmnc_edges_follow_their_definition_exactly():
    ranges = fit_ranges([np.array([[0.0], [1.0]])])
    k = 10
    edges = np.arange(k + 1) / k  # 0.3 = 0.30000000000000004 * ... lands where the definition says
    cov = KMultisectionCoverage(ranges, k=k)
    cov.update([edges[:, None]])
    want = naive.kmnc([edges[:, None]], [[0.0]], [[1.0]], k)
    assert cov.value == pytest.approx(want) == 1.0
    cov = KMultisectionCoverage(ranges, k=k)
    cov.update([np.array([[0.3]])])
    assert np.flatnonzero(cov.covered[0]).tolist() == [3]  # [0.3, 0.4)


def test_constant_neuron_is_left_out_of_kmnc_but_counts_for_nbc_and_snac():
    train = [np.array([[0.0, 1.0], [0.0, 2.0]])]  # neuron 0 is constant (a dead ReLU)
    ranges = fit_ranges(train)
    tests = [np.array([[0.5, 1.5]])]
    cov = KMultisectionCoverage(ranges, k=2)
    cov.update(tests)
    assert cov.total == 2 and cov.value == 0.5
    assert kmnc(tests, ranges, 2) == pytest.approx(naive.kmnc(tests, *naive.ranges(train), 2))
    assert snac(tests, ranges) == 0.5  # the dead neuron woke up: above its training maximum
    assert nbc(tests, ranges) == 0.25


def test_nbc_and_snac_match_deepgauge(data):
    train, tests, ranges = data
    lows, highs = naive.ranges(train)
    assert nbc(tests, ranges) == pytest.approx(naive.nbc(tests, lows, highs))
    assert snac(tests, ranges) == pytest.approx(naive.snac(tests, lows, highs))
    assert snac(tests, ranges) > 0 and nbc(tests, ranges) > 0  # the wider test traces go out of range


def test_training_data_itself_has_no_boundary_coverage(data):
    train, _, ranges = data
    assert nbc(train, ranges) == 0.0 and snac(train, ranges) == 0.0
    assert kmnc(train, ranges, 1) == 1.0


CRITERIA = [
    (lambda r: NeuronCoverage(r, 0.3), lambda layers, r: nc(layers, 0.3)),
    (lambda r: KMultisectionCoverage(r, 20), lambda layers, r: kmnc(layers, r, 20)),
    (lambda r: NeuronBoundaryCoverage(r), nbc),
    (lambda r: StrongNeuronActivationCoverage(r), snac),
]


@pytest.mark.parametrize("make, one_shot", CRITERIA)
def test_cumulative_equals_one_shot_merged_or_not(data, make, one_shot):
    _, tests, ranges = data
    want = one_shot(tests, ranges)
    batches = [[a[s] for a in tests] for s in (slice(0, 7), slice(7, 8), slice(8, 25), slice(25, 40))]
    serial = make(ranges)
    new = [serial.update(b) for b in batches]
    assert serial.value == pytest.approx(want)
    assert sum(new) == serial.covered_count  # each target counted once, by the batch that covered it
    workers = [make(ranges), make(ranges)]
    workers[0].update(batches[2])
    workers[1].update(batches[0])
    workers[1].update(batches[3])
    workers[0].update(batches[1])
    workers[0].merge(workers[1])
    assert workers[0].value == pytest.approx(want) and workers[0].count == 40
    np.testing.assert_array_equal(workers[0].covered, serial.covered)
    assert serial.update([a[:0] for a in tests]) == 0  # an empty batch covers nothing
    copy = serial.copy()
    copy.update([a * 10 for a in tests])
    assert serial.value == pytest.approx(want)  # copies are independent


def test_per_layer_values(data):
    _, tests, ranges = data
    cov = StrongNeuronActivationCoverage(ranges)
    cov.update(tests)
    lows, highs = naive.ranges(data[0])
    for i, value in enumerate(cov.per_layer()):
        assert value == pytest.approx(naive.snac([tests[i]], [lows[i]], [highs[i]]))


def test_merge_refuses_different_parameters(data):
    _, _, ranges = data
    with pytest.raises(ValueError, match="cannot merge"):
        KMultisectionCoverage(ranges, 10).merge(KMultisectionCoverage(ranges, 20))
    other = fit_ranges([np.ones((2, 3)), np.zeros((2, 6)), np.zeros((2, 5, 2))])
    with pytest.raises(ValueError, match="cannot merge"):
        NeuronBoundaryCoverage(ranges).merge(NeuronBoundaryCoverage(other))


def test_bad_layers_are_clear_errors(data):
    _, tests, ranges = data
    with pytest.raises(ValueError, match="2 layer\\(s\\) but the neuron ranges were fitted on 3"):
        snac(tests[:2], ranges)
    with pytest.raises(ValueError, match="6 neurons but the ranges were fitted on 3"):
        nbc([tests[1], tests[1], tests[2]], ranges)
    with pytest.raises(ValueError, match="same inputs"):
        nc([tests[0], tests[1][:3]])
    with pytest.raises(ValueError, match="NaN"):
        nc([np.array([[np.nan, 1.0]])])
    with pytest.raises(ValueError, match="non-empty list"):
        nc([])
    with pytest.raises(ValueError, match="no inputs"):
        kmnc([a[:0] for a in tests], ranges)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        kmnc(tests, ranges, 0)
    with pytest.raises(ValueError, match="NeuronRanges"):
        nbc(tests, [np.zeros(3)])
    with pytest.raises(ValueError, match="at least 2-D"):
        fit_ranges([np.zeros(5)])


def test_nc_takes_traces_that_carry_extrema_and_refuses_those_without(data):
    from pytest_sadl.capture import Traces

    _, tests, _ = data
    reduced = [reduce_layer(a) for a in tests]
    extrema = [(a.reshape(len(a), -1).min(1), a.reshape(len(a), -1).max(1)) for a in tests]
    n = len(tests[0])
    carrying = Traces(
        sa=reduced[0], coverage=reduced, pred=np.zeros(n, int), output=np.zeros((n, 2)), coverage_extrema=extrema
    )
    assert nc(carrying, 0.3) == pytest.approx(naive.neuron_coverage(tests, 0.3))
    cov = NeuronCoverage([a.shape[-1] for a in reduced], 0.3)
    cov.update(carrying)
    assert cov.value == pytest.approx(naive.neuron_coverage(tests, 0.3))
    bare = Traces(sa=reduced[0], coverage=reduced, pred=np.zeros(n, int), output=np.zeros((n, 2)))
    with pytest.raises(ValueError, match=r"made without them.*extrema=True.*trace_model"):
        nc(bare, 0.3)
    with pytest.raises(ValueError, match="made without them"):
        cov.update(bare)
    assert nc(bare, 0.3, extrema=extrema) == pytest.approx(naive.neuron_coverage(tests, 0.3))


def test_fit_ranges_streams_a_memmap_and_names_a_late_bad_row(tmp_path):
    """A memory-mapped layer is read a chunk at a time: ranges equal to NumPy's min/max,
    with an allocation far below the layer's size (the finiteness check made an n x d
    boolean array before); a NaN past the first chunks is still found and named."""
    import tracemalloc

    rng = np.random.default_rng(12)
    layer = rng.normal(size=(40000, 50)).astype(np.float32)
    np.save(tmp_path / "layer.npy", layer)
    mm = np.load(tmp_path / "layer.npy", mmap_mode="r")
    tracemalloc.start()
    got = fit_ranges([mm], chunk_bytes=2**18)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    np.testing.assert_array_equal(got.low[0], layer.min(axis=0))
    np.testing.assert_array_equal(got.high[0], layer.max(axis=0))
    assert peak < layer.nbytes / 8, f"fit_ranges allocated {peak} bytes for a {layer.nbytes}-byte memmap"
    layer[31000, 7] = np.nan
    layer[39999, 0] = np.inf
    np.save(tmp_path / "bad.npy", layer)
    with pytest.raises(ValueError, match=r"train_layers\[0\] contains NaN values in 2 row\(s\) \(first: row 31000\)"):
        fit_ranges([np.load(tmp_path / "bad.npy", mmap_mode="r")])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nan_and_inf_refused_in_one_line_by_every_neuron_criterion(bad, dtype):
    """fit_ranges and the criteria read finiteness off passes they make anyway (a column
    or row minimum and maximum): NaN, +inf and -inf (which only a minimum shows, even
    to SNAC, which needs only the maximum) still get as_layers' one-line error, and a
    refused layer leaves a cumulative coverage as it was."""
    rng = np.random.default_rng(3)
    train = rng.normal(size=(300, 40)).astype(dtype)
    kind = "NaN" if np.isnan(bad) else "inf"
    ranges = fit_ranges([train])
    bad_train = train.copy()
    bad_train[[17, 250], [3, 39]] = bad
    with pytest.raises(
        ValueError, match=rf"^train_layers\[0\] contains {kind} values in 2 row\(s\) \(first: row 17\); "
    ):
        fit_ranges([bad_train])
    clean = rng.normal(size=(90, 40)).astype(dtype)
    tests = clean.copy()
    tests[[5, 60], [0, 20]] = bad
    one_line = rf"^layers\[1\] contains {kind} values in 2 row\(s\) \(first: row 5\); traces must be finite"
    two = NeuronRanges(ranges.low * 2, ranges.high * 2, std=ranges.std * 2)
    for score in (
        lambda: nc([clean[:, :7], tests], 0.5),
        lambda: kmnc([clean, tests], two, 10),
        lambda: nbc([clean, tests], two),
        lambda: snac([clean, tests], two),
    ):
        with pytest.raises(ValueError, match=one_line):
            score()
    for cov in (NeuronCoverage([40, 40]), KMultisectionCoverage(two, 5), StrongNeuronActivationCoverage(two)):
        cov.update([train[:10], train[:10]])
        before = (cov.covered.copy(), cov.count)
        with pytest.raises(ValueError, match=one_line):
            cov.update([train[:90], tests])
        assert np.array_equal(cov.covered, before[0]) and cov.count == before[1]


@pytest.mark.parametrize(
    ("n", "d", "dtype"),
    [(1200, 32, np.float64), (1201, 32, np.float32), (5, 3, np.float64), (700, 1, np.float64), (64, 2048, np.float32)],
)
def test_fit_ranges_equal_numpy_bit_for_bit(n, d, dtype):
    """The folded minimum/maximum and the einsum moments give NumPy's own values: the
    ranges equal min/max(axis=0) and the std is the two-pass formula's, to the bit."""
    rng = np.random.default_rng(n + d)
    x = (rng.normal(size=(n, d)) * rng.uniform(0.1, 100, size=d) + rng.normal(size=d) * 50).astype(dtype)
    x[rng.random(size=x.shape) < 0.2] = 0  # ReLU-like zeros
    got = fit_ranges([x])
    mean = x.mean(axis=0, dtype=np.float64)
    dev = np.subtract(x, mean, dtype=np.float64)
    want = np.sqrt(np.square(dev).sum(axis=0) / n)
    assert got.low[0].tobytes() == x.min(axis=0).astype(np.float64).tobytes()
    assert got.high[0].tobytes() == x.max(axis=0).astype(np.float64).tobytes()
    assert got.std[0].tobytes() == want.tobytes()
