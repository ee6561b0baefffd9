"""The OOD scores (criteria/ood.py) against naive references written here from each
paper's definition (loops, scipy.spatial.distance), and the detection metrics
(criteria/detection.py) against scikit-learn's, ties included."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy.spatial import distance
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

from pytest_sadl.criteria import detection, ood

# ---------------------------------------------------------------- naive references


def naive_knn(train, tests, k):
    """Sun et al.: normalise every feature to unit length, distance to the k-th nearest."""

    def unit(v):
        n = math.sqrt(sum(float(a) * float(a) for a in v))
        return [float(a) / n if n > 0 else 0.0 for a in v]

    t = [unit(r) for r in train]
    out = []
    for x in tests:
        u = unit(x)
        dists = sorted(distance.euclidean(u, r) for r in t)
        out.append(dists[k - 1])
    return np.array(out)


def naive_energy(logits, T=1.0):
    return np.array([-T * math.log(sum(math.exp(v / T) for v in row)) for row in logits])


def naive_msp(logits):
    out = []
    for row in logits:
        e = [math.exp(v) for v in row]
        out.append(1.0 - max(e) / sum(e))
    return np.array(out)


def naive_mahalanobis(train, pred, tests):
    """Lee et al.: class means, one covariance pooled within classes (1/N), min over classes."""
    classes = sorted(set(pred.tolist()))
    d = train.shape[1]
    means = {c: np.mean([train[i] for i in range(len(train)) if pred[i] == c], axis=0) for c in classes}
    cov = np.zeros((d, d))
    for i in range(len(train)):
        diff = train[i] - means[pred[i]]
        cov += np.outer(diff, diff)
    cov /= len(train)
    vi = np.linalg.pinv(cov, hermitian=True)
    return np.array([min(distance.mahalanobis(x, means[c], vi) ** 2 for c in classes) for x in tests])


# ---------------------------------------------------------------- scores


@pytest.mark.parametrize("k", [1, 3, 50])
def test_knn_is_the_kth_nearest_normalised_training_feature(k):
    rng = np.random.default_rng(k)
    train = np.abs(rng.normal(size=(120, 7)))
    train[5] = 0.0  # a dead feature vector stays zero
    tests = np.abs(rng.normal(size=(30, 7))) * rng.uniform(0.1, 10, size=(30, 1))
    tests[0] = train[3] * 4.0  # same direction as a training row: distance 0 for k=1
    got = ood.KNN(train, k=k, chunk_bytes=2000)(tests)  # several blocks
    assert got == pytest.approx(naive_knn(train, tests, k), abs=1e-9)
    if k == 1:
        assert got[0] == pytest.approx(0.0, abs=1e-7)


def test_knn_on_a_memory_mapped_training_set_is_the_same(tmp_path):
    rng = np.random.default_rng(5)
    train = rng.normal(size=(300, 6)).astype(np.float32)
    np.save(tmp_path / "t.npy", train)
    mapped = np.load(tmp_path / "t.npy", mmap_mode="r")
    tests = rng.normal(size=(20, 6))
    knn = ood.KNN(mapped, k=7, chunk_bytes=1000)  # many chunks of training traces and of inputs
    assert isinstance(knn.train, np.memmap), "the training traces are not copied"
    assert knn(tests) == pytest.approx(naive_knn(train.astype(np.float64), tests, 7), abs=1e-9)


def test_knn_scale_invariance_and_refusals():
    rng = np.random.default_rng(0)
    train = rng.normal(size=(40, 5))
    knn = ood.KNN(train, k=4)
    x = rng.normal(size=(9, 5))
    assert knn(x * 7.5) == pytest.approx(knn(x), abs=1e-12)
    assert knn(np.zeros((0, 5))).shape == (0,)
    with pytest.raises(ValueError, match="k=41 is more than the 40 training traces"):
        ood.KNN(train, k=41)
    with pytest.raises(ValueError, match="has 4 neurons per input but the training traces have 5"):
        knn(rng.normal(size=(3, 4)))


@given(
    hnp.arrays(np.float64, (6, 4), elements=st.floats(-30, 30)),
    st.floats(0.1, 10),
    st.floats(-1e3, 1e3),
)
@settings(max_examples=60, deadline=None)
def test_energy_is_the_definition_and_shifts_with_the_logits(logits, T, shift):
    assert ood.energy(logits, T) == pytest.approx(naive_energy(logits, T), rel=1e-12, abs=1e-12)
    # logsumexp(z + c) = logsumexp(z) + c: computed stably even where exp overflows
    assert ood.energy(logits + shift, T) == pytest.approx(ood.energy(logits, T) - shift, rel=1e-9, abs=1e-9)
    # MaxLogit and MSP: MSP is shift invariant, MaxLogit shifts
    assert ood.msp(logits + shift) == pytest.approx(ood.msp(logits), abs=1e-12)
    assert ood.max_logit(logits + shift) == pytest.approx(ood.max_logit(logits) - shift, rel=1e-9, abs=1e-9)


def test_logit_scores_against_the_definitions_and_at_huge_logits():
    rng = np.random.default_rng(1)
    z = rng.normal(scale=4, size=(50, 10))
    assert ood.msp(z) == pytest.approx(naive_msp(z), abs=1e-14)
    assert ood.max_logit(z) == pytest.approx(-np.array([max(r) for r in z]))
    assert ood.energy(z, 2.0) == pytest.approx(naive_energy(z, 2.0), rel=1e-12)
    huge = np.array([[1000.0, 999.0, -5.0], [-1000.0, -1000.0, -1000.0]])
    assert np.all(np.isfinite(ood.energy(huge)))
    assert ood.energy(huge)[1] == pytest.approx(1000.0 - math.log(3))
    assert ood.msp(huge)[1] == pytest.approx(2 / 3)
    # MSP's 1 - p is kept exact where p is within 1e-12 of one (no cancellation)
    sure = np.array([[40.0, 0.0]])
    assert ood.msp(sure)[0] == pytest.approx(math.exp(-40.0) / (1 + math.exp(-40.0)), rel=1e-9)
    with pytest.raises(ValueError, match="at least two classes"):
        ood.energy(np.zeros((3, 1)))
    with pytest.raises(ValueError, match="temperature"):
        ood.energy(z, 0.0)


def test_logit_scores_through_the_output_layer():
    rng = np.random.default_rng(2)
    h = rng.normal(size=(20, 6))
    w, b = rng.normal(size=(6, 4)), rng.normal(size=4)
    z = h @ w + b
    for key, fn in ood.LOGIT_SCORES.items():
        assert ood.LogitScores(w, b, key)(h) == pytest.approx(fn(z))
    with pytest.raises(ValueError, match="do not make logits"):
        ood.LogitScores(w, np.zeros(3), "energy")


@pytest.mark.parametrize("classes", [1, 3])
def test_tied_mahalanobis_is_lee_et_al(classes):
    rng = np.random.default_rng(classes)
    train = rng.normal(size=(90, 5)) @ rng.normal(size=(5, 5))
    pred = rng.integers(0, classes, 90)
    train += pred[:, None] * 2.0
    tests = rng.normal(size=(25, 5)) * 3
    got = ood.TiedMahalanobis(train, pred if classes > 1 else None, chunk_bytes=200)(tests)
    assert got == pytest.approx(naive_mahalanobis(train, pred if classes > 1 else np.zeros(90, int), tests), rel=1e-8)


def test_tied_mahalanobis_with_a_dead_neuron_uses_the_pseudo_inverse():
    rng = np.random.default_rng(4)
    train = rng.normal(size=(60, 4))
    train[:, 2] = 0.0  # a dead ReLU: the covariance is singular
    pred = rng.integers(0, 2, 60)
    tests = rng.normal(size=(10, 4))
    got = ood.TiedMahalanobis(train, pred)(tests)
    assert got == pytest.approx(naive_mahalanobis(train, pred, tests), rel=1e-8)
    with pytest.raises(ValueError, match="do not vary within their classes"):
        ood.TiedMahalanobis(np.ones((10, 3)), None)


# ---------------------------------------------------------------- detection metrics


def _sklearn(i, o):
    y_out = np.r_[np.zeros(i.size), np.ones(o.size)]
    s = np.r_[i, o]
    fpr, tpr, _ = roc_curve(1 - y_out, -s, drop_intermediate=False)  # in-distribution positive
    return (
        roc_auc_score(y_out, s),
        average_precision_score(1 - y_out, -s),
        average_precision_score(y_out, s),
        fpr[np.argmax(tpr >= 0.95)],
    )


@pytest.mark.parametrize("seed", range(12))
def test_detection_metrics_match_scikit_learn_ties_included(seed):
    rng = np.random.default_rng(seed)
    n_in, n_out = rng.integers(1, 80, size=2)
    rounding = [0, 1, 3][seed % 3]  # 0 decimals: many ties within and across the groups
    i = np.round(rng.normal(size=n_in), rounding)
    o = np.round(rng.normal(loc=rng.uniform(-1, 2), size=n_out), rounding)
    want = _sklearn(i, o)
    got = (detection.auroc(i, o), detection.aupr_in(i, o), detection.aupr_out(i, o), detection.fpr_at_tpr(i, o))
    assert got == pytest.approx(want, abs=1e-12)


@given(
    hnp.arrays(np.float64, st.integers(1, 40), elements=st.integers(-4, 4).map(float)),
    hnp.arrays(np.float64, st.integers(1, 40), elements=st.integers(-4, 4).map(float)),
)
@settings(max_examples=80, deadline=None)
def test_detection_metrics_match_scikit_learn_on_any_ties(i, o):
    got = (detection.auroc(i, o), detection.aupr_in(i, o), detection.aupr_out(i, o), detection.fpr_at_tpr(i, o))
    assert got == pytest.approx(_sklearn(i, o), abs=1e-12)


def test_ood_table_rows_per_group_and_score():
    rng = np.random.default_rng(0)
    scores = {
        "train": {"energy": rng.normal(size=200), "knn": rng.normal(size=200)},
        "near": {"energy": rng.normal(0.5, size=100), "knn": rng.normal(0.2, size=100)},
        "far": {"energy": rng.normal(4, size=50)},
    }
    rows = detection.ood_table(scores, "train")
    assert [(r.group, r.score) for r in rows] == [("near", "energy"), ("near", "knn"), ("far", "energy")]
    far = rows[-1]
    assert far.n == 50 and far.auroc > 0.99 and far.fpr95 < 0.05
    assert far.auroc == pytest.approx(_sklearn(scores["train"]["energy"], scores["far"]["energy"])[0])
    ref = detection.ood_table({"far": scores["far"]}, scores["train"], keys=["knn", "energy"])
    assert [(r.group, r.score) for r in ref] == [("far", "energy")]


# ---------------------------------------------------------------- through a real profile


OOD_METRICS = ("knnc", "mahac", "energyc", "maxlogitc", "mspc")


def _logits_of(model, x):
    """The output layer's logits, from a second Keras model that ends before its softmax."""
    import keras

    out = model.get_layer("probs")
    pre = keras.Model(model.inputs, out.input)
    kernel, bias = out.get_weights()
    return pre.predict(x, verbose=0).astype(np.float64) @ kernel + bias


def test_ood_criteria_on_a_stored_profile_of_a_real_classifier(conv_model, digits, tmp_path):
    from pytest_sadl.criteria import registry
    from pytest_sadl.engine import ProfileView
    from pytest_sadl.profile.build import ProfileOptions
    from pytest_sadl.profile.lookup import load_or_build

    built = load_or_build(conv_model, digits.x_train, ProfileOptions(batch_size=100), tmp_path)
    again = load_or_build(conv_model, digits.x_train, ProfileOptions(batch_size=100), tmp_path)
    assert built.built and not again.built, "the second one is read from the store"
    kernel, bias = again.logit_head()  # stored with the profile, read back
    assert kernel.shape == (32, 10) and bias.shape == (10,)
    view = ProfileView.of(again, metrics=OOD_METRICS)
    x = digits.x_test[:40]
    traces = again.trace_model(conv_model).traces(x)
    scores = view.score(traces.sa, traces.pred)
    assert set(scores) == {"knn", "maha", "energy", "maxlogit", "msp"} and not view.unavailable
    z = _logits_of(conv_model, x)
    assert scores["energy"] == pytest.approx(naive_energy(z), rel=1e-5, abs=1e-5)
    assert scores["maxlogit"] == pytest.approx(-z.max(axis=1), rel=1e-5, abs=1e-5)
    assert scores["msp"] == pytest.approx(1 - conv_model.predict(x, verbose=0).max(axis=1), abs=1e-5)
    train = np.asarray(again.sa_traces, dtype=np.float64)
    assert scores["knn"][:8] == pytest.approx(naive_knn(train, traces.sa[:8], 50), abs=1e-7)
    want = naive_mahalanobis(train, np.asarray(again.sa_pred), traces.sa[:8].astype(np.float64))
    assert scores["maha"][:8] == pytest.approx(want, rel=1e-6)
    # the criteria bucket them as every surprise coverage does
    assert all(registry.BY_NAME[m].sa in scores for m in OOD_METRICS)


def test_logit_scores_refused_in_one_line_for_a_regression_model(regression_model, digits, tmp_path):
    from pytest_sadl.engine import ProfileView
    from pytest_sadl.profile.lookup import load_or_build

    profile = load_or_build(regression_model, digits.x_train, None, tmp_path)
    view = ProfileView.of(profile, metrics=OOD_METRICS)
    for key in ("energy", "maxlogit", "msp"):
        assert view.scorer(key) is None
        reason = view.unavailable[key]
        assert "regression model has no softmax output" in reason and "\n" not in reason
    assert view.scorer("knn") is not None and view.scorer("maha") is not None
    with pytest.raises(ValueError, match="regression model: it has no softmax output"):
        profile.logit_head()


def test_logit_head_refuses_sa_layers_that_are_not_the_output_layers_input(dense_model):
    from pytest_sadl.capture import trace_model
    from pytest_sadl.capture.logits import logit_head
    from pytest_sadl.errors import SadlLayerError

    kernel, bias = logit_head(trace_model(dense_model))
    assert kernel.shape == (16, 10)
    with pytest.raises(
        SadlLayerError, match=r"the logits are 'probs' of 'hidden2', not of the SA layers \['hidden1'\]"
    ):
        logit_head(trace_model(dense_model, sa_layers=["hidden1"]))
