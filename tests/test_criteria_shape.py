"""The one criterion shape: every metric is a module with its CRITERION, the registry lists
them in report order, and each made coverage updates, merges and reads as the paper's
definition (tests/naive.py) says, whatever the batches."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import tests.naive as naive
from pytest_sadl.criteria import registry
from pytest_sadl.criteria.neurons import fit_ranges
from pytest_sadl.criteria.shape import COUNT_KIND, NEURON_KIND, SURPRISE_KIND, Batch, Setup

METRICS_DIR = Path(registry.__file__).parent / "metrics"
OPTIONS = SimpleNamespace(nc_threshold=0.5, kmnc_k=20, tknc_k=2, tknp_k=2, cc_threshold=1.5)


def test_every_criterion_module_is_registered_once_in_report_order():
    modules = sorted(p.stem for p in METRICS_DIR.glob("*.py") if p.stem != "__init__")
    defined = {m: importlib.import_module(f"pytest_sadl.criteria.metrics.{m}").CRITERION for m in modules}
    assert {c.name for c in defined.values()} == set(registry.METRICS)
    assert all(defined[m].name == m for m in modules), "a criterion module is named after its metric"
    assert registry.METRICS == (
        "lsc",
        "dsc",
        "mdsc",
        "mlsc",
        "mmdsc",
        "nc",
        "kmnc",
        "nbc",
        "snac",
        "tknc",
        "tknp",
        "nlc",
        "cc",
        "knnc",
        "mahac",
        "energyc",
        "maxlogitc",
        "mspc",
    )
    assert len(set(registry.METRICS)) == len(registry.CRITERIA)
    assert registry.SURPRISE == {
        "lsc": "lsa",
        "dsc": "dsa",
        "mdsc": "mdsa",
        "mlsc": "mlsa",
        "mmdsc": "mmdsa",
        "knnc": "knn",
        "mahac": "maha",
        "energyc": "energy",
        "maxlogitc": "maxlogit",
        "mspc": "msp",
    }
    assert registry.NEURON == ("nc", "kmnc", "nbc", "snac", "tknc")
    assert registry.COUNT == ("tknp", "nlc", "cc")
    # a user who names no metrics gets today's seven, in report order; a new criterion is opt-in
    assert registry.DEFAULT_METRICS == ("lsc", "dsc", "mdsc", "nc", "kmnc", "nbc", "snac")
    for c in registry.CRITERIA:
        assert c.kind in (SURPRISE_KIND, NEURON_KIND, COUNT_KIND) and c.label and c.title and c.needs
        assert (c.sa is not None) == (c.kind == SURPRISE_KIND)


def test_importing_the_registry_imports_no_criterion_code():
    import subprocess
    import sys

    code = (
        "import sys; import pytest_sadl.criteria.registry; "
        "print([m for m in ('numpy', 'scipy', 'pytest_sadl.criteria.surprise', 'pytest_sadl.criteria.neurons') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _layers(rng, n):
    return [rng.normal(size=(n, 6)), np.abs(rng.normal(size=(n, 4))) * 2.0]


@pytest.mark.parametrize("name", registry.NEURON)
def test_neuron_criteria_update_merge_and_read_as_the_definitions(name):
    rng = np.random.default_rng(7)
    train = _layers(rng, 300)
    tests = [a * 1.4 for a in _layers(rng, 40)]  # beyond the training range now and then
    ranges = fit_ranges(train)
    setup = Setup(ranges, OPTIONS)
    criterion = registry.BY_NAME[name]
    whole, first, second = (criterion.make(setup) for _ in range(3))
    none = [None, None]
    new_all = whole.update(Batch({}, tests, none))
    new_1 = first.update(Batch({}, [a[:15] for a in tests], none))
    again = first.update(Batch({}, [a[:15] for a in tests], none))
    second.update(Batch({}, [a[15:] for a in tests], none))
    first.merge(second)
    assert again == 0, "a batch seen before covers nothing new"
    assert first.value == pytest.approx(whole.value) and new_1 <= new_all
    metric = whole.metric()
    assert metric.covered == new_all and metric.value == pytest.approx(metric.covered / metric.total)
    lows, highs = naive.ranges(train)
    reference = {
        "nc": lambda: naive.neuron_coverage(tests, OPTIONS.nc_threshold),
        "kmnc": lambda: naive.kmnc(tests, lows, highs, OPTIONS.kmnc_k),
        "nbc": lambda: naive.nbc(tests, lows, highs),
        "snac": lambda: naive.snac(tests, lows, highs),
        "tknc": lambda: naive.tknc(tests, OPTIONS.tknc_k),
    }[name]()
    assert whole.value == pytest.approx(reference, abs=1e-12)
    assert len(whole.per_layer()) == 2


@pytest.mark.parametrize("name", list(registry.SURPRISE))
def test_surprise_criteria_bucket_their_own_score_only(name):
    rng = np.random.default_rng(3)
    criterion = registry.BY_NAME[name]
    assert criterion.make(Setup(None, OPTIONS)) is None, "no bounds: the profile has no such score"
    made = criterion.make(Setup(None, OPTIONS, bounds={name: (0.0, 10.0, 50)}))
    scores = {key: rng.uniform(-1, 12, size=80) for key in registry.SA_LABELS}
    new = made.update(Batch(scores, [], []))
    own = scores[criterion.sa]
    assert made.value == pytest.approx(naive.surprise_coverage(own, 0.0, 10.0, 50))
    metric = made.metric()
    assert metric.covered == new and metric.below == int((own <= 0).sum()) and metric.above == int((own > 10).sum())
    assert made.bounds() == {"lower": 0.0, "upper": 10.0, "buckets": 50}
    assert made.update(Batch({}, [], [])) == 0, "a batch without its score covers nothing"
