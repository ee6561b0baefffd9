"""Comparison with a baseline run: drop, rise, missing metric, mismatched fingerprint,
the --sadl-compare-fail parser, and the same rounding in the decision and the message."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_sadl.report import compare as _compare
from pytest_sadl.report.compare import (
    Comparison,
    compare_failures,
    parse_compare_fail,
)
from pytest_sadl.results import Results
from pytest_sadl.resultsfile import load_results


def _typed(doc: Any) -> Results:
    """The renderers take typed results: a test's document (a fixture file, altered) read as a run's."""
    return doc if isinstance(doc, Results) else Results.from_dict(doc)


def compare(current: Any, baseline: Any) -> Comparison:
    return _compare.compare(_typed(current), _typed(baseline))


DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def current() -> dict[str, Any]:
    return load_results(DATA / "results-classifier.json")


@pytest.fixture(scope="module")
def baseline() -> dict[str, Any]:
    return load_results(DATA / "results-baseline.json")


def _with(doc: dict[str, Any], **values: float | None) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for metric, value in values.items():
        out["metrics"][metric]["value"] = value
    return out


def test_drop_and_rise_in_points(current, baseline):
    comp = compare(current, baseline)
    assert isinstance(comp, Comparison)
    by = {m.metric: m for m in comp.metrics}
    assert list(by) == ["lsc", "dsc", "mdsc", "nc", "kmnc", "nbc", "snac"]
    assert by["mdsc"].status == "missing in baseline"  # the baseline predates MDSC
    for m in (m for m in by.values() if m.metric != "mdsc"):
        base = round(baseline["metrics"][m.metric]["value"] * 100, 2)
        cur = round(current["metrics"][m.metric]["value"] * 100, 2)
        assert (m.baseline, m.current, m.status) == (base, cur, "ok")
        assert m.delta == round(cur - base, 2)
    assert by["dsc"].delta == -2.6  # a drop: 27.70% -> 25.10%
    assert by["nc"].delta == 5.0  # a rise: 67.19% -> 72.19%
    assert comp.missing == ["mdsc"] and comp.warnings == []  # no warning about MDSC's bounds either
    assert comp.baseline_created == baseline["created"]
    json.dumps(comp.to_dict())


def test_drop_beyond_the_limit_fails_with_one_line(current, baseline):
    comp = compare(current, baseline)
    failures = compare_failures(comp, parse_compare_fail("lsc:-2,dsc:-2,nc:0"))
    assert failures == [
        "DSC dropped by 2.60 points (27.70% → 25.10%), more than the 2 allowed by --sadl-compare-fail=dsc:-2"
    ]
    assert compare_failures(comp, parse_compare_fail("dsc:-3")) == []
    # a rise never fails, even with a zero limit
    assert compare_failures(comp, {"nc": 0.0, "kmnc": 0.0}) == []


def test_rounding_is_the_same_in_decision_and_message(current):
    base = _with(current, lsc=0.30)
    # -2.004 points rounds to -2.00: not more than 2, so it passes, and says nothing
    assert compare_failures(compare(_with(current, lsc=0.27996), base), {"lsc": -2.0}) == []
    # -2.006 points rounds to -2.01: fails, and the message says 2.01, not 2.00
    failures = compare_failures(compare(_with(current, lsc=0.27994), base), {"lsc": -2.0})
    assert len(failures) == 1 and "dropped by 2.01 points (30.00% → 27.99%)" in failures[0]
    # exactly at the limit passes
    assert compare_failures(compare(_with(current, lsc=0.28), base), {"lsc": -2.0}) == []


def test_missing_metric(current, baseline):
    cur = copy.deepcopy(current)
    del cur["metrics"]["snac"]
    base = copy.deepcopy(baseline)
    del base["metrics"]["nbc"]
    comp = compare(cur, base)
    by = {m.metric: m for m in comp.metrics}
    assert by["snac"].status == "missing in current" and by["snac"].delta is None
    assert by["snac"].baseline == 10.62 and by["snac"].current is None
    assert by["nbc"].status == "missing in baseline"
    assert comp.missing == ["mdsc", "nbc", "snac"]
    failures = compare_failures(comp, parse_compare_fail("snac:-1,nbc:-1,lsc:-5"))
    assert failures == [
        "SNAC: missing in current, so --sadl-compare-fail=snac:-1 cannot be checked",
        "NBC: missing in baseline, so --sadl-compare-fail=nbc:-1 cannot be checked",
    ]


def test_not_applicable_in_both_is_skipped_in_one_fails():
    reg = load_results(DATA / "results-regression.json")
    comp = compare(reg, copy.deepcopy(reg))
    assert comp.get("dsc").status == "not applicable"
    assert compare_failures(comp, parse_compare_fail("all:-1")) == []
    cls = load_results(DATA / "results-classifier.json")
    comp = compare(reg, cls)
    assert comp.get("dsc").status == "not applicable in current"
    assert compare_failures(comp, {"dsc": -1.0}) == [
        "DSC: not applicable in current, so --sadl-compare-fail=dsc:-1 cannot be checked"
    ]


def test_mismatched_fingerprint_warns(current, baseline):
    other = copy.deepcopy(baseline)
    other["model"]["fingerprint"] = "ffff" + "0" * 60
    comp = compare(current, other)
    assert len(comp.warnings) == 1
    assert comp.warnings[0].startswith(
        "the runs are of different models (fingerprint ffff00000000… in the baseline, 3f2a0b30557a… now)"
    )
    # the deltas are still computed
    assert comp.get("dsc").delta == -2.6


def test_other_profile_and_config_warn(current, baseline):
    other = copy.deepcopy(baseline)
    other["model"]["profile_fingerprint"] = "abc"
    other["config"]["lsc"]["upper"] = 100.0
    other["config"]["sa_layers"] = ["dense_1"]
    comp = compare(current, other)
    assert comp.warnings[0].startswith("the runs used different training profiles (profile abc")
    assert comp.warnings[1] == (
        "the configuration differs from the baseline's: sa_layers ['dense_1'] → ['dense']; lsc.upper 100 → 120"
    )


def test_parse_compare_fail():
    assert parse_compare_fail("lsc:-2,dsc:-1") == {"lsc": -2.0, "dsc": -1.0}
    assert parse_compare_fail(" LSC = -2.5 , nc:0 ,") == {"lsc": -2.5, "nc": 0.0}
    assert parse_compare_fail("all:-1,lsc:-3") == {
        "lsc": -3.0,
        "dsc": -1.0,
        "nc": -1.0,
        "kmnc": -1.0,
        "nbc": -1.0,
        "snac": -1.0,
        "mdsc": -1.0,
    }


@pytest.mark.parametrize(
    "spec, message",
    [
        ("lsx:-2", "unknown metric 'lsx'; known metrics are lsc, dsc, mdsc, mlsc, mmdsc, nc, kmnc, nbc, snac"),
        ("lsc:two", "'two' for lsc is not a number of percentage points"),
        ("lsc", "'lsc' is not METRIC:POINTS"),
        ("lsc:2", "lsc:2 is positive; a limit is the largest drop allowed, written negative: lsc:-2"),
        ("lsc:nan", "'nan' for lsc is not a finite number"),
        ("", "--sadl-compare-fail is empty"),
        (",", "--sadl-compare-fail has no limits"),
    ],
)
def test_parse_compare_fail_errors(spec, message):
    with pytest.raises(ValueError) as info:
        parse_compare_fail(spec)
    assert message in str(info.value)


def test_compare_fail_and_fail_under_share_one_parser_naming_the_option():
    from pytest_sadl.config import parse_metric_numbers

    with pytest.raises(ValueError, match=r"^--fail: unknown metric 'lsx'"):
        parse_compare_fail("lsx:-2", option="--fail")
    with pytest.raises(ValueError, match=r"^--fail: 'lsc:two'|^--fail: 'two' for lsc"):
        parse_compare_fail("lsc:two", option="--fail")
    assert parse_metric_numbers("lsc:30,dsc=40", "--sadl-fail-under") == {"lsc": 30.0, "dsc": 40.0}
    with pytest.raises(ValueError, match=r"^--sadl-fail-under: unknown metric 'all'"):
        parse_metric_numbers("all:30", "--sadl-fail-under")  # 'all' is for drops only
