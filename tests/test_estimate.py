"""The labelling plans and accuracy estimators (criteria/estimate.py) on synthetic pools
whose accuracy is known: unbiased over many seeds (within what the spread of the
estimates allows), intervals that cover the truth about as often as they say, CES as its
paper describes it; and ``sadl estimate`` on a real model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pytest_sadl.criteria import estimate as est

SEEDS = 400


def _pool(n=3000, seed=0):
    """A pool whose mistakes grow with a surprise-like score, as the example's do."""
    rng = np.random.default_rng(seed)
    score = rng.gamma(2.0, size=n)
    p_wrong = 1 / (1 + np.exp(-(score - 4.5) * 1.5))
    correct = rng.random(n) > p_wrong
    features = np.c_[score + rng.normal(0, 0.3, n), rng.normal(size=(n, 5))]
    return score, features, correct


def _runs(method, budget, score, features, correct):
    out = []
    for seed in range(SEEDS):
        plan = est.choose(method, budget, n=len(correct), seed=seed, scores=score, features=features)
        out.append(est.estimate(plan, correct[plan.indices]))
    return out


@pytest.mark.parametrize("method", ["random", "stratified"])
def test_the_probability_designs_are_unbiased_and_their_intervals_cover(method):
    score, features, correct = _pool()
    truth = correct.mean()
    runs = _runs(method, 100, score, features, correct)
    values = np.array([r.accuracy for r in runs])
    # unbiased: the mean of 400 estimates within 3.5 standard errors of the mean of the truth
    assert abs(values.mean() - truth) < 3.5 * values.std(ddof=1) / np.sqrt(SEEDS)
    # the reported standard error is the spread of the estimates (within 15%)
    assert np.mean([r.std_error for r in runs]) == pytest.approx(values.std(ddof=1), rel=0.15)
    covered = np.mean([r.low <= truth <= r.high for r in runs])
    assert 0.91 <= covered <= 0.99, covered
    assert all(0 <= r.low <= r.accuracy <= r.high <= 1 for r in runs)


def test_stratifying_by_a_score_that_predicts_mistakes_is_more_precise():
    score, features, correct = _pool(seed=1)
    truth = correct.mean()
    random = np.array([r.accuracy for r in _runs("random", 100, score, features, correct)])
    strat = np.array([r.accuracy for r in _runs("stratified", 100, score, features, correct)])
    assert np.abs(strat - truth).mean() < 0.8 * np.abs(random - truth).mean()


def test_stratified_plan_allocates_in_proportion_and_exactly_the_budget():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=1003)
    plan = est.choose_stratified(scores, 101, seed=3, strata=10)
    assert plan.indices.size == 101 and np.unique(plan.indices).size == 101
    assert plan.stratum_sizes is not None and plan.stratum_sizes.sum() == 1003
    assert set(np.bincount(plan.strata)) <= {10, 11}  # 101 over ten strata of ~100
    label = est.strata_of(scores, 10)
    assert np.array_equal(label[plan.indices], plan.strata)
    # each stratum is a band of the score: every input of stratum h scores below those of h + 1
    assert all(scores[label == h].max() <= scores[label == h + 1].min() for h in range(9))
    small = est.choose_stratified(scores, 7, seed=0)  # at least two per stratum: three strata
    assert small.stratum_sizes is not None and len(small.stratum_sizes) == 3 and small.indices.size == 7


def test_the_whole_pool_labelled_is_the_truth_with_no_interval():
    _, _, correct = _pool(n=200)
    for plan in (est.choose_random(200, 200), est.choose_stratified(np.arange(200.0), 200)):
        got = est.estimate(plan, correct[plan.indices])
        assert got.accuracy == pytest.approx(correct.mean()) and got.low == got.high == got.accuracy


def test_an_all_correct_sample_still_has_an_interval():
    plan = est.choose_random(1000, 50, seed=0)
    got = est.estimate(plan, np.ones(50, bool))
    assert got.accuracy == 1.0 and got.high == 1.0 and 0.9 < got.low < 0.99


def naive_ces_cross_entropy(pool_features, sample, sections=20, empty=1e-6):
    """Li et al.'s objective from its definition: per neuron, the pool's range in equal
    sections, -sum_k P_pool(k) log P_sample(k), averaged over the neurons."""
    total = 0.0
    for j in range(pool_features.shape[1]):
        col = pool_features[:, j]
        low, high = col.min(), col.max()
        width = (high - low) / sections if high > low else 1.0

        def section(v, low=low, width=width):
            return min(sections - 1, max(0, int((v - low) / width)))

        pool_counts = [0] * sections
        for v in col:
            pool_counts[section(v)] += 1
        sample_counts = [0] * sections
        for i in sample:
            sample_counts[section(col[i])] += 1
        for k in range(sections):
            p = pool_counts[k] / len(col)
            q = max(sample_counts[k] / len(sample), empty)
            total -= p * np.log(q)
    return total / pool_features.shape[1]


def test_ces_grows_the_sample_by_the_group_of_least_cross_entropy():
    _, features, correct = _pool(n=600, seed=2)
    plan = est.choose_ces(features, 60, seed=0)
    assert plan.indices.size == 60 and np.unique(plan.indices).size == 60
    ces_ce = naive_ces_cross_entropy(features, plan.indices)
    random_ce = np.mean(
        [naive_ces_cross_entropy(features, est.choose_random(600, 60, seed=s).indices) for s in range(20)]
    )
    assert ces_ce < random_ce, "CES's sample is closer to the pool's neuron distributions than a random one"
    # the first 30 are random (the paper's p0), each later group of five the best of 300
    prefix = plan.indices[:35]
    rng = np.random.default_rng(0)
    assert np.array_equal(plan.indices[:30], rng.choice(600, size=30, replace=False))
    assert naive_ces_cross_entropy(features, prefix) <= naive_ces_cross_entropy(features, plan.indices[:30]) + 1e-9


def test_plans_round_trip_and_refuse_what_is_not_one():
    plan = est.choose_stratified(np.arange(50.0), 10, seed=1)
    again = est.Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert np.array_equal(again.indices, plan.indices) and np.array_equal(again.strata, plan.strata)
    with pytest.raises(ValueError, match="not a labelling plan"):
        est.Plan.from_dict({"method": "guess", "n_pool": 3, "indices": [0]})
    with pytest.raises(ValueError, match="distinct pool rows"):
        est.Plan.from_dict({"method": "random", "n_pool": 3, "indices": [0, 0]})
    with pytest.raises(ValueError, match="a budget of 11 labels for a pool of 10"):
        est.choose_random(10, 11)
    with pytest.raises(ValueError, match="2 answers for the plan's 10 inputs"):
        est.estimate(plan, [True, False])


def test_sadl_estimate_chooses_and_estimates_on_a_real_model(conv_model_path, conv_model, digits, tmp_path, capsys):
    import shutil

    from pytest_sadl.cli.main import main

    shutil.copy(conv_model_path, tmp_path / "m.keras")
    np.savez(tmp_path / "train.npz", x=digits.x_train)
    np.savez(tmp_path / "pool.npz", x=digits.x_test)
    base = ["--model", str(tmp_path / "m.keras"), "--train", str(tmp_path / "train.npz")]
    base += ["--rootdir", str(tmp_path), "--cache-dir", str(tmp_path / "cache")]
    out = tmp_path / "plan"
    assert main(["estimate", "choose", str(tmp_path / "pool.npz"), *base, "--budget", "60", "--out", str(out)]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert plan["method"] == "stratified" and plan["by"] == "lsa" and len(plan["indices"]) == 60
    with np.load(out / "to-label.npz") as chosen:
        assert np.array_equal(chosen["index"], plan["indices"])
        assert np.array_equal(chosen["x"], digits.x_test[plan["indices"]])
    pred = conv_model.predict(digits.x_test[plan["indices"]], verbose=0).argmax(axis=1)
    assert plan["pred"] == pred.tolist()
    capsys.readouterr()
    np.save(tmp_path / "y.npy", digits.y_test)  # the whole pool's labels: the plan takes its own
    assert main(["estimate", "accuracy", str(out / "plan.json"), str(tmp_path / "y.npy")]) == 0
    said = capsys.readouterr().out
    idx = np.asarray(plan["indices"])
    want = est.estimate(est.Plan.from_dict(plan), pred == digits.y_test[idx])
    assert f"estimated accuracy on the pool of {len(digits.y_test)}: {want.accuracy:.1%}" in said
    assert f"95% interval {want.low:.1%} to {want.high:.1%}; 60 labels, stratified sampling" in said
    np.save(tmp_path / "short.npy", digits.y_test[:7])
    assert main(["estimate", "accuracy", str(out / "plan.json"), str(tmp_path / "short.npy")]) != 0
    err = capsys.readouterr().err
    assert "short.npy: 7 labels, but the plan has 60 inputs in a pool of 450" in err and err.count("\n") == 1


@pytest.mark.parametrize("args", [["estimate", "--help"], ["estimate", "choose", "--help"]])
def test_estimate_help_imports_nothing_heavy(args):
    """`sadl estimate --help` starts at once, as `sadl select --help` does (tests/test_cli.py)."""
    import subprocess
    import sys

    heavy = ("numpy", "scipy", "pytest", "keras", "tensorflow", "jax")
    code = (
        "import contextlib, io, sys\n"
        "from pytest_sadl.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n        main(sys.argv[1:])\n    except SystemExit:\n        pass\n"
        f"print([m for m in {heavy!r} if m in sys.modules], 'stratified' in out.getvalue() or 'choose' in out.getvalue())\n"
    )
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[] True", done.stdout + done.stderr
