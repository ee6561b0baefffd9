"""Choosing inputs to test next: each strategy on plain arrays, coverage against a naive greedy."""

from __future__ import annotations

import naive
import numpy as np
import pytest

from pytest_sadl.criteria.selection import covered_from_results, greedy_coverage, select


@pytest.mark.parametrize("seed", range(5))
def test_coverage_strategy_matches_naive_greedy(seed):
    rng = np.random.default_rng(seed)
    n = 60
    scores = {"lsa": rng.gamma(2.0, 2.0, n), "dsa": rng.random(n) * 1.3, "mdsa": np.round(rng.gamma(3.0, 1.0, n), 1)}
    scores["lsa"][3] = np.nan
    bounds = {"lsc": (0.0, 10.0, 12), "dsc": (0.0, 1.0, 7), "mdsc": (0.5, 6.0, 9)}
    covered = {"lsc": np.zeros(12, bool), "dsc": np.zeros(7, bool), "mdsc": np.zeros(9, bool)}
    covered["lsc"][[0, 1, 2]] = True
    covered["dsc"][4] = True
    key = {"lsc": "lsa", "dsc": "dsa", "mdsc": "mdsa"}
    buckets_of = []
    for i in range(n):
        mine = set()
        for m, (lo, up, k) in bounds.items():
            b = naive.bucket_of(scores[key[m]][i], lo, up, k)
            if b is not None:
                mine.add((m, b))
        buckets_of.append(mine)
    prior = {(m, int(b)) for m, c in covered.items() for b in np.flatnonzero(c)}
    budget = 40  # past the point where no input adds a bucket: the fallback order is checked too
    expected = naive.greedy_bucket_cover(buckets_of, budget, scores["lsa"], prior)
    sel = select("coverage", budget, scores=scores, bounds=bounds, covered=covered)
    assert sel.indices.tolist() == expected
    reached = set(prior)
    for i, gain in zip(expected, sel.new_buckets, strict=True):
        assert gain == len(buckets_of[i] - reached)
        reached |= buckets_of[i]
    assert sel.notes and "opened new buckets" in sel.notes[0]


def test_coverage_strategy_starts_from_the_tests_buckets():
    pool = {"lsa": np.array([0.5, 1.5, 2.5, 0.6])}
    bounds = {"lsc": (0.0, 4.0, 4)}
    picks, gains = greedy_coverage({"lsc": pool["lsa"]}, bounds, 2, {"lsc": np.array([True, False, False, False])})
    assert picks.tolist() == [1, 2] and gains == [1, 1]
    with pytest.raises(ValueError, match="expected \\(4,\\)"):
        greedy_coverage({"lsc": pool["lsa"]}, bounds, 2, {"lsc": np.zeros(3, bool)})


def test_covered_from_results_buckets_the_tests_inputs_with_their_bounds():
    results = {
        "config": {
            "lsc": {"lower": 0.0, "upper": 4.0, "buckets": 4},
            "dsc": {"lower": None, "upper": None, "buckets": 10},
        },
        "inputs": {"lsa": [0.5, 3.9, None, 7.0, 0.0], "dsa": [None] * 5},
    }
    bounds, covered = covered_from_results(results)
    assert bounds == {"lsc": (0.0, 4.0, 4)}
    assert covered["lsc"].tolist() == [True, False, False, True]


def test_surprise_strategy_takes_the_highest_nan_last():
    s = np.array([1.0, np.nan, 5.0, 3.0, 5.0])
    assert select("surprise", 4, scores={"dsa": s}, by="dsa").indices.tolist() == [2, 4, 3, 0]
    assert select("surprise", 10, scores={"dsa": s}, by="dsa").indices.tolist() == [2, 4, 3, 0, 1]
    with pytest.raises(ValueError, match="no 'mdsa' scores"):
        select("surprise", 2, scores={"dsa": s}, by="mdsa")


@pytest.mark.parametrize("upto", [0.25, 0.5, 0.75, 1.0])
def test_ranges_strategy_samples_uniformly_inside_the_widening_range(upto):
    rng = np.random.default_rng(0)
    s = rng.random(2000) * 12.0
    bounds = {"dsc": (0.0, 10.0, 100)}
    sel = select("ranges", 100, scores={"dsa": s}, by="dsa", bounds=bounds, upto=upto, seed=3)
    inside = np.flatnonzero(s <= 10.0 * upto)
    assert len(sel.indices) == 100 and len(set(sel.indices.tolist())) == 100
    assert set(sel.indices.tolist()) <= set(inside.tolist())
    assert sel.eligible == inside.size and sel.range == (0.0, 10.0 * upto)
    again = select("ranges", 100, scores={"dsa": s}, by="dsa", bounds=bounds, upto=upto, seed=3)
    assert again.indices.tolist() == sel.indices.tolist()
    # uniform: the sample's mean is near the range's middle
    assert abs(s[sel.indices].mean() - 5.0 * upto) < 1.5 * upto


def test_ranges_strategy_with_too_few_inputs_takes_them_all_and_says_so():
    s = np.array([0.1, 0.2, 9.0, 9.5])
    sel = select("ranges", 3, scores={"lsa": s}, by="lsa", bounds={"lsc": (0.0, 10.0, 10)}, upto=0.25)
    assert sorted(sel.indices.tolist()) == [0, 1] and "only 2 input(s)" in sel.notes[0]
    with pytest.raises(ValueError, match="upto"):
        select("ranges", 3, scores={"lsa": s}, by="lsa", bounds={"lsc": (0.0, 10.0, 10)}, upto=0)
    with pytest.raises(ValueError, match="SC bounds of LSC"):
        select("ranges", 3, scores={"lsa": s}, by="lsa")


def test_deepgini_strategy_takes_the_least_sure():
    p = np.array([[0.9, 0.1], [0.5, 0.5], [0.7, 0.3], [1.0, 0.0]])
    assert select("deepgini", 2, output=p).indices.tolist() == [1, 2]
    with pytest.raises(ValueError, match="outputs"):
        select("deepgini", 2)


def test_bad_strategy_and_budget():
    with pytest.raises(ValueError, match="unknown strategy"):
        select("best", 2, scores={"lsa": np.ones(3)})
    with pytest.raises(ValueError, match="budget"):
        select("surprise", 0, scores={"lsa": np.ones(3)})


def test_coverage_fallback_ranks_by_lsa_whatever_the_order_of_the_metrics():
    """Once every bucket is covered the rest are the most surprising by LSA (as docs/select.md
    says), not by whichever metric happens to come first in the bounds."""
    lsa = np.array([0.5, 0.5, 9.0, 1.0, 5.0])  # inputs 0 and 1 open the only buckets
    dsa = np.array([0.5, 0.5, 1.0, 9.0, 5.0])  # by DSA the fallback would take 3 first
    bounds = {"dsc": (0.0, 1.0, 1), "lsc": (0.0, 1.0, 1)}
    picks, gains = greedy_coverage({"dsc": dsa, "lsc": lsa}, bounds, 4)
    assert list(picks) == [0, 2, 4, 3] and gains == [2, 0, 0, 0]
    picks, _ = greedy_coverage({"dsc": dsa}, {"dsc": (0.0, 1.0, 1)}, 3)  # no LSA: by DSA
    assert list(picks) == [0, 3, 4]


def test_every_project_warning_is_a_sadl_warning():
    """One base, as pytest-cov has: `-W error::...SadlWarning` covers the store and the recorder."""
    from pytest_sadl.errors import SadlCacheWarning, SadlRecordingWarning, SadlWarning

    assert issubclass(SadlCacheWarning, SadlWarning) and issubclass(SadlRecordingWarning, SadlWarning)
