"""The end-of-session computation on plain arrays: per test, per group, Table VI, bounds, thresholds."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from pytest_sadl.config import Bounds, SadlOptions
from pytest_sadl.criteria.neurons import fit_ranges, kmnc, nbc, nc, snac
from pytest_sadl.criteria.surprise import DSA, LSA, surprise_coverage
from pytest_sadl.engine import (
    ProfileView,
    check_thresholds,
    compute,
    default_bounds,
    held_out_scores,
)
from pytest_sadl.plugin.recorder import Recorder
from pytest_sadl.records import Batch, TestRecord, from_bytes, to_bytes
from pytest_sadl.results import Metric


def make_view(rng, classifier=True):
    centres = rng.normal(scale=3.0, size=(4, 5))
    pred = rng.integers(0, 4, 600)
    sa = centres[pred] + rng.normal(size=(600, 5))
    layers = [np.maximum(rng.normal(size=(600, 6)), 0), rng.normal(size=(600, 3))]
    ranges = fit_ranges(layers, names=["a", "b"])
    return ProfileView(
        ranges=ranges,
        sa_traces=sa,
        sa_pred=pred if classifier else None,
        var_threshold=1e-5,
        given={
            "lsa": LSA(sa, pred if classifier else None),
            "dsa": DSA(sa, pred) if classifier else None,
            "mdsa": None,
        },
    ), centres


def make_records(rng, centres, spec):
    """spec: [(nodeid, group, n_inputs, spread)] in collection order (shuffled on purpose)."""
    records = []
    for index, (nodeid, group, n, spread) in enumerate(spec):
        pred = rng.integers(0, 4, n)
        batch = Batch(
            sa=(centres[pred] + rng.normal(scale=spread, size=(n, 5))).astype(np.float32),
            coverage=[
                np.maximum(rng.normal(scale=spread, size=(n, 6)), 0).astype(np.float32),
                rng.normal(scale=spread, size=(n, 3)).astype(np.float32),
            ],
            pred=pred,
        )
        records.append(TestRecord(nodeid, index, group, batches=[batch]))
    return records


SPEC = [
    ("t::a", "test", 40, 1.0),
    ("t::b", "test", 30, 1.0),
    ("t::c", "fgsm", 25, 2.5),
    ("t::d", "test", 10, 1.0),  # a later test of an earlier group
    ("t::e", "bim", 20, 4.0),
]


def options(**kw):
    bounds = {"lsc": Bounds(-20.0, 80.0, 50), "dsc": Bounds(0.0, 3.0, 40)}
    bounds.update({k: kw.pop(k) for k in list(kw) if isinstance(kw[k], Bounds)})
    base = dict(kmnc_k=7, nc_threshold=0.4)
    base.update(kw)
    return SadlOptions(enabled=True, sc_bounds=bounds, **base)


def test_compute_matches_one_shot_criteria_per_group_and_cumulatively():
    rng = np.random.default_rng(0)
    view, centres = make_view(rng)
    records = make_records(rng, centres, SPEC)
    shuffled = [records[i] for i in (3, 0, 4, 2, 1)]  # as xdist workers may deliver them
    res = compute(view, shuffled, options(), {"sa_layers": ["h"], "coverage_layers": ["a", "b"]})
    data = res.to_dict()
    assert [t["nodeid"] for t in data["tests"]] == ["t::a", "t::b", "t::c", "t::d", "t::e"]

    def part(recs):
        sa = np.concatenate([r.batches[0].sa for r in recs]).astype(np.float64)
        pred = np.concatenate([r.batches[0].pred for r in recs])
        layers = [np.concatenate([r.batches[0].coverage[i] for r in recs]) for i in range(2)]
        return sa, pred, layers

    def metrics(recs):
        sa, pred, layers = part(recs)
        return {
            "lsc": surprise_coverage(view.scorer("lsa")(sa, pred), lower=-20.0, upper=80.0, buckets=50),
            "dsc": surprise_coverage(view.scorer("dsa")(sa, pred), lower=0.0, upper=3.0, buckets=40),
            "nc": nc(layers, 0.4),
            "kmnc": kmnc(layers, view.ranges, 7),
            "nbc": nbc(layers, view.ranges),
            "snac": snac(layers, view.ranges),
        }

    by_group = {g: [r for r in records if r.group == g] for g in ("test", "fgsm", "bim")}
    assert [g["name"] for g in data["groups"]] == ["test", "fgsm", "bim"]
    seen = []
    for g in data["groups"]:
        seen += by_group[g["name"]]
        for key, value in metrics(by_group[g["name"]]).items():
            assert g["metrics"][key] == pytest.approx(value), (g["name"], key)
        for key, value in metrics(seen).items():
            assert g["cumulative"][key] == pytest.approx(value), (g["name"], key)
    overall = metrics(records)
    for key, value in overall.items():
        assert data["metrics"][key]["value"] == pytest.approx(value)
    # each target is counted new once, by the first test (in collection order) that covered it
    for key in ("lsc", "dsc", "nc", "kmnc", "nbc", "snac"):
        assert sum(t["new"][key] for t in data["tests"]) == data["metrics"][key]["covered"]
    sa, pred, _ = part(records)
    np.testing.assert_allclose(data["inputs"]["lsa"], view.scorer("lsa")(sa, pred))
    np.testing.assert_allclose(data["inputs"]["dsa"], view.scorer("dsa")(sa, pred))
    first = data["tests"][0]
    scores = view.scorer("lsa")(*part(records[:1])[:2])
    assert first["lsa_mean"] == pytest.approx(scores.mean()) and first["lsa_max"] == pytest.approx(scores.max())
    assert first["new"]["lsc"] == round(surprise_coverage(scores, lower=-20, upper=80, buckets=50) * 50)
    top = [t for t in data["top_inputs"] if t["by"] == "lsa"]
    assert [t["lsa"] for t in top] == sorted(data["inputs"]["lsa"], reverse=True)[: len(top)]


def test_default_bounds_come_from_the_profile_not_the_inputs():
    rng = np.random.default_rng(1)
    view, centres = make_view(rng)
    opts = options(lsc=Bounds(None, None, 100), dsc=Bounds(None, None, 100))
    calm = compute(view, make_records(rng, centres, SPEC[:2]), opts, {}).to_dict()["config"]
    wild = compute(view, make_records(rng, centres, [("x::y", "g", 50, 9.0)]), opts, {}).to_dict()["config"]
    assert calm["lsc"] == wild["lsc"] and calm["dsc"] == wild["dsc"]
    held_lsa, held_dsa = held_out_scores(view)
    assert len(held_lsa) == 60  # a tenth of 600 training traces
    lower, upper = default_bounds(held_lsa)
    q99 = np.quantile(held_lsa, 0.99)
    assert lower == min(0.0, held_lsa.min()) and upper == pytest.approx(lower + 2 * (q99 - lower))
    assert (calm["lsc"]["lower"], calm["lsc"]["upper"]) == (lower, upper)
    assert calm["dsc"]["lower"] == 0.0 and calm["dsc"]["upper"] == pytest.approx(2 * np.quantile(held_dsa, 0.99))
    assert calm["lsc"]["rule"].startswith("default v2:") and "99th percentile" in calm["lsc"]["rule"]


def test_one_or_a_few_atypical_held_out_traces_do_not_move_the_default_upper_bound():
    """Rule version 2 (issue 17): the top 1% of the held-out SA cannot move the upper
    bound; version 1 took the maximum, so one atypical training input decided it."""
    rng = np.random.default_rng(7)
    typical = rng.gamma(4.0, 50.0, size=990)
    lower, upper = default_bounds(typical)
    for k in (1, 5, 9):  # fewer than 1% of 1,000 held-out traces, each LSA ~65,600
        lo, up = default_bounds(np.append(typical, np.full(k, 65_600.0)))
        # at most what version 1 gave on the typical traces alone: the outliers do not set it
        assert lo == lower and up <= lower + 2 * (typical.max() - lower), k
    assert upper < 3 * np.quantile(typical, 0.99) and upper > typical.max() * 0.9
    # a bound the ordinary held-out traces fill about half of: the room above is kept
    assert np.mean(typical <= lower + (upper - lower) / 2) > 0.98


def test_an_outlier_that_sets_the_default_upper_bound_is_noted():
    from pytest_sadl.engine import outlier_bound_note

    rng = np.random.default_rng(3)
    typical = rng.gamma(4.0, 50.0, size=980)  # LSA-like: 99% well below ~600
    tail = np.full(20, 65_600.0)  # 2% of the held-out traces: more than the 99th percentile ignores
    q = np.quantile(np.append(typical, tail), 0.9)
    note = outlier_bound_note("lsc", np.append(typical, tail))
    assert note is not None and "LSC upper bound 1.312e+05" in note
    lower, suggested, buckets = _suggested_bounds(note)
    assert suggested == pytest.approx(2 * q, rel=1e-3)  # the documented rule on the 90th percentile
    assert lower == 0 and buckets is None  # the default lower bound min(0, m); the buckets left as they are
    assert outlier_bound_note("lsc", typical) is None  # no outlier: no note
    assert outlier_bound_note("lsc", np.append(typical, tail[:5])) is None  # 0.5%: the rule ignores them
    assert outlier_bound_note("dsc", np.append(typical, 2 * typical.max())) is None  # a mild tail is no outlier
    assert outlier_bound_note("lsc", np.append(typical[:97], tail[:2])) is None  # 99 scores: too few to tell
    assert outlier_bound_note("lsc", np.append(typical[:98], tail[:2])) is not None
    # the lower bound pinned: kept as configured, the upper one suggested from it
    pinned = outlier_bound_note("lsc", np.append(typical, tail), lower=-500.0)
    assert pinned is not None
    lower, suggested, _ = _suggested_bounds(pinned)
    assert lower == -500.0 and suggested == pytest.approx(-500 + 2 * (q + 500), rel=1e-3)
    # the suggested lower bound is rounded down: no held-out score falls below it
    low = outlier_bound_note("lsc", np.append(typical - 55.4649, tail))
    lower, _, _ = _suggested_bounds(low)
    assert lower is not None and -55.4649 - 0.01 <= lower <= (typical - 55.4649).min()


def _suggested_bounds(note: str | None) -> tuple[float | None, float | None, int | None]:
    """The LSC bounds a note suggests, read by the option's own parser: the hint is a
    value ``--sadl-sc-bounds`` takes as it is."""
    from pytest_sadl.config import parse_sc_bounds

    assert note is not None and "sadl_sc_bounds = " in note and "sadl_lsc_" not in note
    spec = note.split("sadl_sc_bounds = ")[1].split()[0]
    return parse_sc_bounds(spec)["lsc"]


def test_compute_notes_an_outlier_bound_only_when_the_bound_is_not_pinned():
    rng = np.random.default_rng(1)
    view, centres = make_view(rng)
    base, held_dsa = held_out_scores(view)
    typical = np.resize(base, 999)  # a held-out sample of the default size, 1,000
    lower = min(0.0, float(typical.min()))
    spiked = np.append(typical, np.full(20, lower + 1e3 * (typical.max() - lower)))  # 2% far above the rest
    view.given_held_out = lambda keys=None, errors=None: {"lsa": spiked, "dsa": held_dsa}
    records = make_records(rng, centres, SPEC[:2])
    free = compute(view, records, options(lsc=Bounds(None, None, 100)), {})
    assert any("default LSC upper bound" in w for w in free.warnings)
    pinned = compute(view, records, options(lsc=Bounds(None, 500.0, 100)), {})
    assert not any("default LSC upper bound" in w for w in pinned.warnings)


def test_regression_profile_has_no_dsa():
    rng = np.random.default_rng(2)
    view, centres = make_view(rng, classifier=False)
    records = make_records(rng, centres, SPEC[:2])
    for r in records:
        r.batches[0].pred = np.zeros((len(r.batches[0]), 1), np.float32)  # raw regression output
    data = compute(view, records, options(fail_under={"dsc": 10.0, "lsc": 0.0}), {}).to_dict()
    assert data["metrics"]["dsc"] == {"value": None, "covered": 0, "total": 40, "applicable": False}
    assert data["metrics"]["lsc"]["count"] == 70
    assert [f["metric"] for f in data["outcome"]["failures"]] == ["dsc"]


def test_thresholds_round_like_the_message():
    metrics = {"lsc": Metric(0.3, 300, 1000), "dsc": Metric(0.29994, 29994, 100000), "nc": Metric(None, 0, 5, False)}
    assert check_thresholds(metrics, {"lsc": 30.0}, 10) == []  # 30.00% meets 30
    (fail,) = check_thresholds(metrics, {"dsc": 30.0}, 10)
    assert fail.value == 29.99 and fail.message == "DSC 29.99% is below --sadl-fail-under=dsc:30 (30.00%)"
    assert check_thresholds(metrics, {"dsc": 29.99}, 10) == []  # the same two decimals decide
    (na,) = check_thresholds(metrics, {"nc": 10.0}, 10)
    assert "not applicable" in na.message
    (empty,) = check_thresholds(metrics, {"lsc": 1.0}, 0)
    assert "no inputs were recorded" in empty.message and empty.value is None


def test_no_records_gives_zero_coverage_and_says_so():
    rng = np.random.default_rng(3)
    view, _ = make_view(rng)
    data = compute(view, [], options(fail_under={"nc": 5.0}), {}).to_dict()
    assert data["metrics"]["nc"]["value"] == 0.0 and data["inputs"]["test"] == []
    assert data["outcome"]["passed"] is False and "no inputs were recorded" in data["outcome"]["failures"][0]["message"]


def test_records_round_trip_through_worker_bytes():
    rng = np.random.default_rng(4)
    _, centres = make_view(rng)
    recorder = Recorder(lambda model: None)
    for rec in make_records(rng, centres, SPEC):
        recorder.records[rec.nodeid] = rec
    recorder.records["t::a"].batches[0].thumbs = rng.integers(0, 255, (40, 8, 8, 1)).astype(np.uint8)
    recorder.records["t::b"].outcome = "failed"
    recorder.records["t::c"].batches[0].digests = np.arange(25, dtype=np.uint64) * np.uint64(2**40)
    recorder.records["t::c"].batches[0].output = rng.random((25, 4)).astype(np.float32)
    recorder.records["t::c"].labels.append((np.arange(3, dtype=np.uint64), np.array([[1.0], [2.0], [0.0]])))
    again = from_bytes(to_bytes(recorder.records.values()))
    assert [r.nodeid for r in again] == list(recorder.records)
    for mine, theirs in zip(recorder.records.values(), again, strict=True):
        assert (mine.index, mine.group, mine.outcome) == (theirs.index, theirs.group, theirs.outcome)
        for a, b in zip(mine.batches, theirs.batches, strict=True):
            np.testing.assert_array_equal(a.sa, b.sa)
            np.testing.assert_array_equal(a.pred, b.pred)
            for x, y in zip(a.coverage, b.coverage, strict=True):
                np.testing.assert_array_equal(x, y)
            assert (a.thumbs is None) == (b.thumbs is None)
    np.testing.assert_array_equal(again[0].batches[0].thumbs, recorder.records["t::a"].batches[0].thumbs)
    mine, theirs = recorder.records["t::c"], again[2]
    np.testing.assert_array_equal(theirs.batches[0].digests, mine.batches[0].digests)
    np.testing.assert_array_equal(theirs.batches[0].output, mine.batches[0].output)
    assert len(theirs.labels) == 1 and all(
        np.array_equal(a, b) for a, b in zip(theirs.labels[0], mine.labels[0], strict=True)
    )
    assert again[0].labels == [] and again[0].batches[0].digests is None


def test_var_rule_option_parses_and_reaches_the_fingerprint(pytester: pytest.Pytester):
    from pytest_sadl.plugin.options import read_options
    from pytest_sadl.profile.build import ProfileOptions, profile_fingerprint

    pytester.makeini("[pytest]\nsadl_coverage = true\nsadl_var_rule = paper\n")
    assert read_options(pytester.parseconfig()).var_rule == "paper"
    assert read_options(pytester.parseconfig("--sadl-var-rule=class")).var_rule == "class"
    with pytest.raises(pytest.UsageError, match=r"--sadl-var-rule='any': use 'class'.*or 'paper'"):
        read_options(pytester.parseconfig("--sadl-var-rule=any"))
    with pytest.raises(Exception, match="var_rule must be 'class' or 'paper'"):
        ProfileOptions(var_rule="any")
    assert ProfileOptions.from_sadl(read_options(pytester.parseconfig())).var_rule == "paper"
    args = dict(sa_layers=["d"], coverage_layers=["d"], var_threshold=1e-5, classifier=True)
    assert profile_fingerprint("m", "t", **args) != profile_fingerprint("m", "t", **args, var_rule="paper")


def test_lsa_near_singular_option_reaches_the_profile_and_the_held_out_bounds(pytester: pytest.Pytester):
    from pytest_sadl.plugin.options import read_options
    from pytest_sadl.profile.build import ProfileOptions, profile_fingerprint

    pytester.makeini("[pytest]\nsadl_coverage = true\nsadl_lsa_near_singular = keep\n")
    assert read_options(pytester.parseconfig()).lsa_near_singular == "keep"
    assert read_options(pytester.parseconfig("--sadl-lsa-near-singular=drop")).lsa_near_singular == "drop"
    with pytest.raises(pytest.UsageError, match=r"--sadl-lsa-near-singular='ignore': use 'drop'.*or 'keep'"):
        read_options(pytester.parseconfig("--sadl-lsa-near-singular=ignore"))
    with pytest.raises(Exception, match="lsa_near_singular must be 'drop' or 'keep'"):
        ProfileOptions(lsa_near_singular="nope")
    args = dict(sa_layers=["d"], coverage_layers=["d"], var_threshold=1e-5, classifier=True)
    assert profile_fingerprint("m", "t", **args) != profile_fingerprint("m", "t", **args, lsa_near_singular="keep")

    # held-out bounds score with the profile's mode: on softmax outputs the two modes differ
    rng = np.random.default_rng(5)
    centres = rng.normal(scale=4.0, size=(3, 5))
    pred = rng.integers(0, 3, 900)
    logits = centres[pred] + rng.normal(size=(900, 5))
    probs = (np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)).astype(np.float32)
    ranges = fit_ranges([probs])
    views = {}
    for mode in ("drop", "keep"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lsa = LSA(probs, pred, var_threshold=0.0, near_singular=mode)
        views[mode] = ProfileView(
            ranges, probs, pred, 0.0, near_singular=mode, given={"lsa": lsa, "dsa": DSA(probs, pred)}
        )
    held = {mode: held_out_scores(view)[0] for mode, view in views.items()}
    assert views["keep"].scorer("lsa").kept.size == 5 and views["drop"].scorer("lsa").kept.size < 5
    assert not np.allclose(held["drop"], held["keep"])


def test_mdsc_and_labels_matched_by_digest_feed_the_mistakes_analysis():
    from pytest_sadl.criteria.mistakes import analyse
    from pytest_sadl.criteria.surprise import MDSA
    from pytest_sadl.records import input_digests

    rng = np.random.default_rng(7)
    view, centres = make_view(rng)
    view.given["mdsa"] = MDSA(view.sa_traces, view.sa_pred)
    records = make_records(rng, centres, SPEC)
    xs = [rng.random((len(r.batches[0]), 4, 4)) for r in records]  # the "inputs" each test fed
    for r, x in zip(records, xs, strict=True):
        r.batches[0].digests = input_digests(x)
        r.batches[0].output = rng.dirichlet(np.ones(4), len(x)).astype(np.float32)
    truth = [rng.integers(0, 4, len(x)) for x in xs]
    # t::a labels its own inputs, in another order and as float32; t::e labels t::c's inputs
    # (a label belongs to the values, whichever test fed them); t::b's inputs stay unlabelled
    order = rng.permutation(len(xs[0]))
    records[0].labels.append(
        (input_digests(xs[0][order].astype(np.float32)), truth[0][order].reshape(-1, 1).astype(float))
    )
    records[4].labels.append((input_digests(xs[2]), truth[2].reshape(-1, 1).astype(float)))
    records[4].labels.append((input_digests(rng.random((3, 4, 4))), np.zeros((3, 1))))  # never fed
    res = compute(
        view, records, options(mdsc=Bounds(0.0, 20.0, 30)), {"sa_layers": ["h"], "coverage_layers": ["a", "b"]}
    )
    data = res.to_dict()
    sa = np.concatenate([r.batches[0].sa for r in records]).astype(np.float64)
    pred = np.concatenate([r.batches[0].pred for r in records])
    mdsa = view.scorer("mdsa")(sa, pred)
    np.testing.assert_allclose(data["inputs"]["mdsa"], mdsa)
    assert data["metrics"]["mdsc"]["value"] == surprise_coverage(mdsa, lower=0.0, upper=20.0, buckets=30)
    assert data["config"]["mdsc"]["rule"] == "configured"
    labels = [None] * len(pred)
    offsets = np.cumsum([0] + [len(x) for x in xs])
    for t in (0, 2):
        labels[offsets[t] : offsets[t + 1]] = truth[t].tolist()
    assert data["inputs"]["label"] == labels
    overall, groups = analyse(
        {k: np.asarray(data["inputs"][k], float) for k in ("lsa", "dsa", "mdsa")},
        labels,
        classifier=True,
        pred=pred,
        output=np.concatenate([r.batches[0].output for r in records]),
        groups=[records[t].group for t in data["inputs"]["test"]],
    )
    assert data["mistakes"]["overall"] == overall.to_dict()
    assert [g["name"] for g in data["mistakes"]["groups"]] == ["test", "fgsm"]
    # every score a run may analyse is named, the opt-in ones too (they were printed "mlsa")
    assert data["mistakes"]["labels"]["mlsa"] == "MLSA" and data["mistakes"]["labels"]["mmdsa"] == "MMDSA"
    assert any("3 labelled input(s) never reached the model" in w for w in data["outcome"]["warnings"])
    failures = check_thresholds(res.metrics, {"mdsc": 99.0}, len(pred))
    assert failures and failures[0].message.startswith("MDSC ")


def test_top_inputs_show_each_distinct_input_once_with_every_test_that_fed_it():
    from pytest_sadl.records import input_digests

    rng = np.random.default_rng(8)
    view, centres = make_view(rng)
    records = make_records(
        rng, centres, [("t::a", "test", 40, 5.0), ("t::b", "test", 30, 1.0), ("t::c", "fgsm", 25, 1.0)]
    )
    x = rng.random((len(records[0].batches[0]), 3))
    records[0].batches[0].digests = input_digests(x)
    # t::b feeds t::a's inputs again (same values, same traces)
    records[1].batches = [Batch(records[0].batches[0].sa, records[0].batches[0].coverage, records[0].batches[0].pred)]
    records[1].batches[0].digests = input_digests(x)
    records[2].batches[0].digests = input_digests(rng.random((len(records[2].batches[0]), 3)))
    data = compute(view, records, options(), {}).to_dict()
    for by in ("lsa", "dsa"):
        top = [t for t in data["top_inputs"] if t["by"] == by]
        digests = np.concatenate([b.digests for r in records for b in r.batches])
        assert len({int(digests[t["input"]]) for t in top}) == len(top) == 12
        repeated = [t for t in top if t["test"] == 0]
        assert repeated and all(t["tests"] == [0, 1] and t["copies"] == 2 for t in repeated)


def test_regression_labels_give_rank_correlations_not_aucs():
    from pytest_sadl.criteria.surprise import MDSA
    from pytest_sadl.records import input_digests

    rng = np.random.default_rng(9)
    view, centres = make_view(rng, classifier=False)
    view.given["mdsa"] = MDSA(view.sa_traces)
    records = make_records(rng, centres, SPEC[:2])
    for r in records:
        n = len(r.batches[0])
        r.batches[0].pred = rng.normal(size=(n, 1)).astype(np.float32)  # a regression model's outputs
        x = rng.random((n, 2))
        r.batches[0].digests = input_digests(x)
        r.labels.append((input_digests(x), (r.batches[0].pred + rng.normal(size=(n, 1))).astype(float)))
    data = compute(view, records, options(), {}).to_dict()
    found = data["mistakes"]["overall"]
    assert found["kind"] == "regression" and found["labelled"] == 70 and found["auc"] == {}
    assert set(found["spearman"]) == {"lsa", "mdsa"} and data["metrics"]["dsc"]["applicable"] is False
    assert data["metrics"]["mdsc"]["applicable"] is True and len(data["inputs"]["label"]) == 70


def test_held_out_bounds_of_a_large_memmap_stream_its_rows(tmp_path, monkeypatch):
    """The held-out set-ups over a memory-mapped training set past HELD_OUT_COPY_MAX (0
    here) read the remaining rows from a scratch memmap written a chunk at a time instead
    of a copy in memory: the same scores as from the copy, at least 80% of the set's size
    less allocated, and the scratch file gone afterwards."""
    import tempfile
    import tracemalloc

    import pytest_sadl.engine.bounds as engine
    from pytest_sadl.criteria.surprise import MDSA

    rng = np.random.default_rng(21)
    pred = rng.integers(0, 4, 60000)
    sa = (rng.normal(scale=3.0, size=(4, 64))[pred] + rng.normal(size=(60000, 64))).astype(np.float32)
    np.save(tmp_path / "sa.npy", sa)
    mm = np.load(tmp_path / "sa.npy", mmap_mode="r")
    view = ProfileView(
        ranges=fit_ranges([sa[:10]]),
        sa_traces=mm,
        sa_pred=pred,
        var_threshold=1e-5,
        given={"lsa": LSA(mm, pred), "dsa": DSA(mm, pred), "mdsa": MDSA(mm, pred)},
    )

    def held_out():
        tracemalloc.start()
        scores = engine.held_out_sa(view)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return scores, peak

    expected, copied = held_out()  # x[~probe]: a copy in memory
    monkeypatch.setattr(engine, "HELD_OUT_COPY_MAX", 0)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    got, streamed = held_out()
    assert set(got) == {"lsa", "dsa", "mdsa"}
    for key in got:
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-9)
    assert streamed < copied - 0.8 * sa.nbytes, (streamed, copied, sa.nbytes)
    assert list((tmp_path / "scratch").iterdir()) == []


def test_compute_changes_nothing_it_is_given():
    """The view, the records and the options are as they were: the scores are set up on
    the run's copy of the view, so a second run on the same view gives the same results."""
    import copy

    from pytest_sadl.criteria.surprise import MDSA

    rng = np.random.default_rng(11)
    view, centres = make_view(rng)
    view.given["mdsa"] = MDSA(view.sa_traces, view.sa_pred)
    records = make_records(rng, centres, SPEC)
    records[1].stale = True
    opts = options(lsc=Bounds(None, None, 100), groups=("fgsm",), metrics=("lsc", "dsc", "mdsc", "mlsc", "nc"))
    before = (view.metrics, view.options, dict(view.given), dict(view.unavailable), dict(view._fitted), view._pca)
    given_records = list(records)
    record_copies = copy.deepcopy(records)
    opts_copy = copy.deepcopy(opts)
    first = compute(view, records, opts, {"sa_layers": ["h"]}).to_dict()
    after = (view.metrics, view.options, dict(view.given), dict(view.unavailable), dict(view._fitted), view._pca)
    assert after == before and view.metrics is None and view.options is None and not view._fitted
    assert records == given_records and opts == opts_copy
    for mine, theirs in zip(records, record_copies, strict=True):
        assert (mine.nodeid, mine.group, mine.stale, mine.index) == (
            theirs.nodeid,
            theirs.group,
            theirs.stale,
            theirs.index,
        )
        for a, b in zip(mine.batches, theirs.batches, strict=True):
            np.testing.assert_array_equal(a.sa, b.sa)
            np.testing.assert_array_equal(a.pred, b.pred)
    second = compute(view, records, opts, {"sa_layers": ["h"]}).to_dict()
    first.pop("created"), second.pop("created")
    assert first == second and first["outcome"]["stale"] == [
        {"nodeid": "t::b", "group": "test", "outcome": "passed", "inputs": 30}
    ]
    assert first["metrics"]["mlsc"]["applicable"] and "mlsc" not in view._fitted


def test_a_view_sets_every_score_up_through_its_criterion():
    """No score is wired to the view: one not given is its criterion's ``fit`` on the
    traces (LSA, DSA and MDSA as MLSA), the same numbers as the criteria's own."""
    from pytest_sadl.criteria.registry import SCORES
    from pytest_sadl.criteria.shape import Training
    from pytest_sadl.criteria.surprise import MDSA

    rng = np.random.default_rng(12)
    given, _ = make_view(rng)
    view = ProfileView(
        given.ranges, given.sa_traces, given.sa_pred, given.var_threshold, metrics=("lsc", "dsc", "mdsc")
    )
    x, pred = given.sa_traces[:50] + 0.5, given.sa_pred[:50]
    scores = view.score(x, pred)
    assert set(scores) == {"lsa", "dsa", "mdsa"}
    np.testing.assert_allclose(scores["lsa"], LSA(given.sa_traces, given.sa_pred)(x, pred))
    np.testing.assert_allclose(scores["dsa"], DSA(given.sa_traces, given.sa_pred)(x, pred))
    np.testing.assert_allclose(scores["mdsa"], MDSA(given.sa_traces, given.sa_pred)(x, pred))
    fitted = SCORES["mdsa"].fit(Training(given.sa_traces, given.sa_pred))
    np.testing.assert_allclose(scores["mdsa"], fitted(x, pred))
    view.use("lsa", None)  # a scorer set up elsewhere replaces the fit: here none
    assert "lsa" not in view.score(x, pred)
