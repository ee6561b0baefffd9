"""APFD, CTM and CAM (``sadl select --strategy ctm|cam``) against their definitions (tests/naive.py)."""

from __future__ import annotations

from types import SimpleNamespace

import naive
import numpy as np
import pytest

from pytest_sadl.criteria import registry
from pytest_sadl.criteria.neurons import fit_ranges
from pytest_sadl.criteria.prioritise import apfd, cam_order, ctm_order, faults_of, prioritise
from pytest_sadl.criteria.selection import select
from pytest_sadl.criteria.shape import Batch, Setup

OPTIONS = SimpleNamespace(nc_threshold=0.5, kmnc_k=8)


@pytest.mark.parametrize("seed", range(5))
def test_apfd_is_its_definition(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    faults = rng.random(n) < 0.3
    faults[rng.integers(n)] = True
    order = rng.permutation(n)
    assert apfd(order, faults) == pytest.approx(naive.apfd(order, faults), abs=1e-12)


def test_apfd_bounds_and_dnn_tip_examples():
    # dnn-tip's test_apfd examples: the first fault first is best, last is worst
    assert apfd([0, 1, 2], [True, True, True]) == pytest.approx(1 - 6 / 9 + 1 / 6)
    assert apfd([2, 1, 0], [False, False, True]) == pytest.approx(1 - 1 / 3 + 1 / 6)
    assert apfd([0, 1, 2], [False, False, True]) == pytest.approx(1 / 6)
    assert apfd([0, 1], [False, False]) is None  # no fault: undefined
    with pytest.raises(ValueError, match="every one of the 3 pool indices once"):
        apfd([0, 0, 1], [True, False, False])


def test_faults_from_class_labels_and_one_hot():
    pred = np.array([0, 1, 2, 1])
    assert faults_of(pred, np.array([0, 1, 1, 1])).tolist() == [False, False, True, False]
    assert faults_of(pred, np.eye(3)[[0, 2, 2, 1]]).tolist() == [False, True, False, False]


def test_ctm_and_cam_on_deepginis_example():
    # DeepGini's paper example (as dnn-tip's tests): A..D cover these of 8 targets
    profile = [{0, 1, 2, 5, 6, 7}, {0, 1, 2, 6, 7}, {0, 1, 2, 3}, {4, 5, 6, 7}]
    assert naive.ctm(profile) == [0, 1, 2, 3]
    assert ctm_order([len(p) for p in profile]).tolist() == [0, 1, 2, 3]
    assert naive.cam(profile) == [0, 2, 3, 1]  # A, then C and D tie on one new target: C first


def _batch(rng, n):
    layers = [rng.normal(size=(n, 5)) * 1.3, np.abs(rng.normal(size=(n, 3))) * 2.5]
    return layers, {"lsa": rng.gamma(2.0, 3.0, size=n), "mdsa": rng.gamma(2.0, 1.0, size=n)}


@pytest.mark.parametrize("name", ["lsc", "mdsc", "nc", "kmnc", "nbc", "snac"])
def test_ctm_and_cam_by_registry_criteria_equal_the_naive_orders(name):
    rng = np.random.default_rng(3)
    train = [rng.normal(size=(200, 5)), np.abs(rng.normal(size=(200, 3))) * 2.0]
    layers, scores = _batch(rng, 30)
    bounds = {"lsc": (0.0, 30.0, 10), "mdsc": (0.0, 8.0, 6)}
    setup = Setup(fit_ranges(train), OPTIONS, bounds=bounds)
    batch = Batch(scores, layers, [None, None])
    lows, highs = naive.ranges(train)
    if name in bounds:
        key = registry.SURPRISE[name]
        sets = [set() if (b := naive.bucket_of(s, *bounds[name])) is None else {b} for s in scores[key].tolist()]
    else:
        sets = [
            naive.targets_of_input(name, layers, i, lows, highs, OPTIONS.kmnc_k, OPTIONS.nc_threshold)
            for i in range(30)
        ]
    ctm, counts = prioritise("ctm", name, setup, batch)
    assert ctm.tolist() == naive.ctm(sets)
    assert counts == [len(sets[i]) for i in ctm]
    cam, gains = prioritise("cam", name, setup, batch)
    assert cam.tolist() == naive.cam(sets)
    generic, generic_gains = cam_order(lambda: registry.BY_NAME[name].make(setup), batch)  # through update only
    assert generic.tolist() == cam.tolist() and generic_gains == gains
    covered: set = set()
    for i, gain in zip(cam.tolist(), gains, strict=True):
        assert gain == len(sets[i] - covered)
        covered |= sets[i]


def test_cam_equals_the_plain_greedy_on_random_target_sets():
    """The lazy greedy against the plain one on many overlapping sets (ties included)."""

    class Sets:  # a minimal coverage over given target sets: the Coverage shape
        def __init__(self, sets):
            self.sets, self.done = sets, set()

        def update(self, batch):
            new = set().union(*(self.sets[int(i)] for i in batch.scores["id"])) - self.done
            self.done |= new
            return len(new)

    rng = np.random.default_rng(11)
    for _ in range(8):
        sets = [set(rng.choice(25, size=rng.integers(0, 6), replace=False).tolist()) for _ in range(40)]
        batch = Batch({"id": np.arange(40)}, [], [])
        order, _ = cam_order(lambda sets=sets: Sets(sets), batch)
        assert order.tolist() == naive.cam(sets)


def test_select_ctm_cam_with_apfd_and_errors():
    rng = np.random.default_rng(5)
    train = [rng.normal(size=(100, 4))]
    layers = [rng.normal(size=(20, 4)) * 1.5]
    setup = Setup(fit_ranges(train), OPTIONS)
    batch = Batch({}, layers, [None])
    faults = rng.random(20) < 0.4
    chosen = select("cam", 5, criterion="nbc", setup=setup, batch=batch, faults=faults)
    assert len(chosen.indices) == 5 and sorted(chosen.order.tolist()) == list(range(20))
    assert chosen.apfd == pytest.approx(naive.apfd(chosen.order.tolist(), faults))
    assert chosen.to_dict()["apfd"] == chosen.apfd and chosen.to_dict()["faults"] == int(faults.sum())
    by_lsa = select("surprise", 3, scores={"lsa": rng.random(20)}, faults=faults)
    assert by_lsa.apfd == pytest.approx(naive.apfd(by_lsa.order.tolist(), faults))
    with pytest.raises(ValueError, match="unknown criterion 'xyz'"):
        select("ctm", 3, criterion="xyz", setup=setup, batch=batch)
    with pytest.raises(ValueError, match="LSC does not apply"):
        select("ctm", 3, criterion="lsc", setup=setup, batch=batch)


@pytest.mark.parametrize("name", ["nc", "kmnc", "nbc", "snac"])
@pytest.mark.parametrize("block", [1 << 22, 7])  # one block of inputs, and blocks of a few inputs
def test_vectorised_targets_equal_each_inputs_own_update(name, block, monkeypatch):
    """Each input's targets, read for many inputs at once, are what ``update`` of that
    input alone counts (NC with the extrema of the full maps, KMNC with constant neurons)."""
    from pytest_sadl.criteria import targets as target_module
    from pytest_sadl.criteria.prioritise import _one

    monkeypatch.setattr(target_module, "BLOCK", block)  # the block size only bounds memory
    rng = np.random.default_rng(7)
    train = [rng.normal(size=(150, 6)), np.abs(rng.normal(size=(150, 4)))]
    train[0][:, 2] = 0.5  # constant in training: no KMNC sections
    layers = [rng.normal(size=(40, 6)) * 1.6, np.abs(rng.normal(size=(40, 4))) * 1.8]
    layers[0][:5, 2] = 0.5
    layers[1][:4, 0] = train[1][:, 0].min()  # on the training range's edges: KMNC's first and last sections
    layers[1][4:8, 1] = train[1][:, 1].max()
    layers[0][8, 0] = -1e30  # far outside: no section, a lower corner
    extrema = [(a.min(axis=1) - rng.random(40), a.max(axis=1) + rng.random(40)) for a in layers]
    setup = Setup(fit_ranges(train), OPTIONS)
    batch = Batch({}, layers, extrema)
    cov = registry.BY_NAME[name].make(setup)
    targets = target_module.input_targets(cov, batch)
    assert targets is not None and len(targets) == 40
    counts = target_module.target_counts(cov, batch)  # CTM's counts, read without listing the targets
    profile = target_module._neuron_profile(cov, batch)  # CAM's dense (targets, inputs) profile
    assert profile is not None and profile.shape[1] == 40
    for i, t in enumerate(targets):
        alone = registry.BY_NAME[name].make(setup)
        assert t.size == alone.update(_one(batch, i)) == counts[i]
        assert len(np.unique(t)) == t.size
        assert np.flatnonzero(profile[:, i]).tolist() == t.tolist()
    assert sum(t.size for t in targets) > 0


def test_cam_of_targets_is_the_plain_greedy_on_random_sets_and_sparse_ids():
    from pytest_sadl.criteria.prioritise import cam_of_targets

    rng = np.random.default_rng(2)
    for trial in range(30):
        n, m = int(rng.integers(0, 50)), int(rng.integers(1, 30))
        scale = 1 if trial % 2 else 10**7  # dense ids, and ids far apart (ranked)
        sets = [np.sort(rng.choice(m, size=rng.integers(0, min(m, 6) + 1), replace=False)) * scale for _ in range(n)]
        order, gains = cam_of_targets(sets)
        assert order.tolist() == naive.cam([set(s.tolist()) for s in sets])
        covered: set = set()
        for i, g in zip(order.tolist(), gains, strict=True):
            assert g == len(set(sets[i].tolist()) - covered)
            covered |= set(sets[i].tolist())


def test_cam_ties_after_the_greedy_picks_go_in_pool_order_and_decide_apfd():
    """Once no input adds a target the definition (DeepGini's CAM: the rest by CTM) says
    nothing of ties; ours are in pool order, so the APFD of an all-tied rest is the pool's
    own order there (dnn-tip's unstable sort gives another order, hence another APFD)."""
    sets = [{0, 1}, {0}, {1}, {0}, {2}, {1}]  # greedy: 0, then 4; the rest all cover one target
    batch = Batch({"id": np.arange(6)}, [], [])

    class Sets:
        def __init__(self):
            self.done = set()

        def update(self, b):
            new = set().union(*(sets[int(i)] for i in b.scores["id"])) - self.done
            self.done |= new
            return len(new)

    order, gains = cam_order(Sets, batch)
    assert order.tolist() == [0, 4, 1, 2, 3, 5] == naive.cam(sets)
    assert gains == [2, 1, 0, 0, 0, 0]
    faults = np.array([False, False, False, False, False, True])
    assert apfd(order, faults) == pytest.approx(1 - 6 / 6 + 1 / 12)  # the fault last of the ties
    tied_reversed = [0, 4, 5, 3, 2, 1]  # another valid CAM order: the ties reversed
    assert apfd(tied_reversed, faults) == pytest.approx(1 - 3 / 6 + 1 / 12)


def test_generic_cam_copies_the_state_not_the_set_up():
    from pytest_sadl.criteria.prioritise import _fork

    rng = np.random.default_rng(4)
    setup = Setup(fit_ranges([rng.normal(size=(50, 3))]), OPTIONS)
    top = Setup(setup.ranges, SimpleNamespace(tknc_k=1))
    for name, made_for in (("kmnc", setup), ("tknc", top)):  # a neuron coverage, one without copy()
        cov = registry.BY_NAME[name].make(made_for)
        cov.update(Batch({}, [np.array([[3.0, 0.0, 0.0]])], [None]))
        before = cov.metric().covered
        fork = _fork(cov)
        fork.update(Batch({}, [rng.normal(size=(20, 3)) * 3], [None]))
        assert cov.metric().covered == before < fork.metric().covered
    kmnc = registry.BY_NAME["kmnc"].make(setup)
    assert _fork(kmnc).ranges is kmnc.ranges  # read-only: shared


def test_ctm_order_is_the_stable_descending_sort_for_small_and_large_counts():
    rng = np.random.default_rng(9)
    for high in (5, 70_000):  # a 16-bit radix sort, and the general one
        counts = rng.integers(0, high, size=300)
        counts[:50] = counts[50:100]  # ties
        want = sorted(range(300), key=lambda i: (-counts[i], i))
        assert ctm_order(counts).tolist() == want
        assert ctm_order(counts.astype(float)).tolist() == want


@pytest.mark.parametrize("dense", [True, False])
def test_cam_of_a_dense_profile_and_of_the_sparse_pairs_are_the_plain_greedy(dense, monkeypatch):
    """Random sets with many ties, many inputs of one new target (the dense greedy's last
    picks come in one step) and inputs covering nothing: both forms against naive.cam."""
    from pytest_sadl.criteria import targets as target_module
    from pytest_sadl.criteria.prioritise import cam_of_pairs, cam_of_profile

    monkeypatch.setattr(target_module, "DENSE_TARGETS", 1 << 20 if dense else 0)
    rng = np.random.default_rng(21)
    for trial in range(40):
        n, m = int(rng.integers(0, 60)), int(rng.integers(1, 20))
        top = int(rng.integers(1, min(m, 5) + 1)) if trial % 3 else 1  # every third: single targets only
        sets = [np.sort(rng.choice(m, size=rng.integers(0, top + 1), replace=False)) for _ in range(n)]
        rows = np.repeat(np.arange(n), [t.size for t in sets]).astype(np.int64)
        ids = np.concatenate(sets).astype(np.int64) if sets else np.zeros(0, np.int64)
        profile = target_module.dense_profile(n, rows, ids)
        assert (profile is None) == (not dense and ids.size > 0)
        order, gains = cam_of_profile(profile) if dense else cam_of_pairs(n, rows, ids)
        assert order.tolist() == naive.cam([set(t.tolist()) for t in sets])
        covered: set = set()
        for i, g in zip(order.tolist(), gains, strict=True):
            assert g == len(set(sets[i].tolist()) - covered)
            covered |= set(sets[i].tolist())


@pytest.mark.parametrize("layers_used", [2, 1])  # one layer: its one block is the whole dense profile
@pytest.mark.parametrize("name", ["lsc", "mdsc", "nc", "kmnc", "nbc", "snac"])
def test_cam_by_registry_criteria_is_the_same_through_the_sparse_pairs(name, layers_used, monkeypatch):
    """Above the dense profile's size CAM keeps to the sparse pairs: the same order."""
    from pytest_sadl.criteria import targets as target_module

    rng = np.random.default_rng(8)
    train = [rng.normal(size=(200, 5)), np.abs(rng.normal(size=(200, 3))) * 2.0][:layers_used]
    layers, scores = _batch(rng, 50)
    setup = Setup(fit_ranges(train), OPTIONS, bounds={"lsc": (0.0, 30.0, 10), "mdsc": (0.0, 8.0, 6)})
    batch = Batch(scores, layers[:layers_used], [None] * layers_used)
    dense = prioritise("cam", name, setup, batch)
    monkeypatch.setattr(target_module, "DENSE_TARGETS", 0)
    sparse = prioritise("cam", name, setup, batch)
    assert dense[0].tolist() == sparse[0].tolist() and dense[1] == sparse[1]
    generic = cam_order(lambda: registry.BY_NAME[name].make(setup), batch)  # through update only
    assert dense[0].tolist() == generic[0].tolist() and dense[1] == generic[1]


@pytest.mark.parametrize("name", ["tknc", "tknp"])
def test_top_k_criteria_are_read_at_once_and_order_as_through_update(name):
    """TKNC's targets (each layer's top-k neurons of an input) and TKNP's (an input's
    pattern; repeated rows share one) read for every input at once: CTM and CAM equal the
    generic path through each input's ``update``, and TKNC's targets DeepGauge's sets."""
    from pytest_sadl.criteria import targets as target_module
    from pytest_sadl.criteria.prioritise import input_counts

    rng = np.random.default_rng(13)
    layers = [rng.integers(0, 4, size=(45, 6)).astype(float), rng.normal(size=(45, 3))]  # ties in the top-k
    layers[0][30:], layers[1][30:] = layers[0][:15], layers[1][:15]  # repeated patterns
    setup = Setup(fit_ranges([rng.normal(size=(20, 6)), rng.normal(size=(20, 3))]), SimpleNamespace(tknc_k=2, tknp_k=2))
    batch = Batch({}, layers, [None, None])

    def make():
        return registry.BY_NAME[name].make(setup)

    assert target_module.target_pairs(make(), batch) is not None  # read at once, not through update
    ctm, counts = prioritise("ctm", name, setup, batch)
    assert counts == input_counts(make, batch)[ctm].tolist()
    assert ctm.tolist() == ctm_order(input_counts(make, batch)).tolist()
    cam, gains = prioritise("cam", name, setup, batch)
    generic, generic_gains = cam_order(make, batch)
    assert cam.tolist() == generic.tolist() and gains == generic_gains
    if name == "tknc":
        sets = [{(li, j) for li, v in enumerate(layers) for j in naive.top_k_set(list(v[i]), 2)} for i in range(45)]
        assert cam.tolist() == naive.cam(sets)
    else:
        assert sum(gains) == naive.tknp(layers, 2)  # every distinct pattern once


@pytest.mark.parametrize("name", ["mdsc", "nc", "kmnc", "nbc", "snac", "tknc", "tknp"])
def test_an_empty_pool_has_empty_orders(name, monkeypatch):
    from pytest_sadl.criteria import targets as target_module

    rng = np.random.default_rng(1)
    setup = Setup(
        fit_ranges([rng.normal(size=(30, 4))]),
        SimpleNamespace(**vars(OPTIONS), tknc_k=2, tknp_k=2),
        bounds={"mdsc": (0.0, 8.0, 6)},
    )
    batch = Batch({"mdsa": np.zeros(0)}, [np.zeros((0, 4))], [None])
    for dense in (1024, 0):  # the dense profile, and the sparse pairs
        monkeypatch.setattr(target_module, "DENSE_TARGETS", dense)
        for strategy in ("ctm", "cam"):
            order, counts = prioritise(strategy, name, setup, batch)
            assert order.tolist() == [] and counts == []
        targets = target_module.input_targets(registry.BY_NAME[name].make(setup), batch)
        assert targets is not None and len(targets) == 0
