"""The results' one source: the dataclasses make the JSON form, the reading back and the schema.

The golden files were written by the hand-written ``to_dict`` of before the codec
(``tests/golden/results-*.json``, frozen before it): today's JSON form must be the same
text, key order included. The generated schema must be the hand-kept one it replaced
(``tests/golden/results.schema.before-codec.json``, the OOD section's entry included), so it accepts and rejects the same
documents. The reader keeps its leniency: an older or smaller file reads as empty.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_sadl.codec import Record, decode, encode, schema, spec
from pytest_sadl.criteria.schema import generated_keys, with_registry
from pytest_sadl.errors import ResultsFileError
from pytest_sadl.results import (
    SCHEMA,
    VERSION,
    Analysis,
    Metric,
    Mistakes,
    Results,
    RunConfig,
    ScBounds,
    Scope,
    TestRow,
    TopInput,
    json_schema,
)
from pytest_sadl.resultsfile import JSON_SCHEMA, validate_results

try:
    from tests._results_edge import edge_results, ood_results, small_results
except ImportError:  # pragma: no cover - tests/ itself on sys.path
    from _results_edge import edge_results, ood_results, small_results  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
DATA = ROOT / "tests" / "data"
FILES = {
    "example": GOLDEN / "results-example.json",  # the example project's run (old writer), cut
    "classifier": DATA / "results-classifier.json",
    "regression": DATA / "results-regression.json",
    "baseline": DATA / "results-baseline.json",
}
BUILT = {"edge": edge_results, "small": small_results, "ood": ood_results}


def _text(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, allow_nan=False) + "\n"


@pytest.mark.parametrize("name", sorted(FILES))
def test_a_file_read_back_is_written_as_the_old_code_wrote_it(name: str) -> None:
    doc = json.loads(FILES[name].read_text(encoding="utf-8"))
    assert _text(Results.from_dict(doc).to_dict()) == (GOLDEN / f"results-{name}.json").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(BUILT))
def test_built_results_are_written_as_the_old_code_wrote_them(name: str) -> None:
    results = BUILT[name]()
    text = _text(results.to_dict())
    assert text == (GOLDEN / f"results-{name}.json").read_text(encoding="utf-8")
    # and read back, the same again (NaN became null, NumPy scalars Python numbers)
    assert _text(Results.from_dict(json.loads(text)).to_dict()) == text


@pytest.mark.parametrize("name", sorted(FILES))
def test_the_generated_schema_validates_every_golden_file(name: str) -> None:
    doc = json.loads((GOLDEN / f"results-{name}.json").read_text(encoding="utf-8"))
    assert validate_results(doc) is doc


def test_nulls_the_writer_can_write_but_the_schema_refuses_are_kept_as_they_were() -> None:
    """Known, and unchanged: a built object with ``None`` where a run always has a value
    (a top input's ``test``, ``pytest_sadl_version``) is written as ``null``, which the
    schema (before and after the codec) refuses; the engine never leaves them unset."""
    with pytest.raises(ResultsFileError, match=r"top_inputs\[2\]\.test must be an integer, got null"):
        validate_results(edge_results().to_dict())
    with pytest.raises(ResultsFileError, match="pytest_sadl_version must be a string, got null"):
        validate_results(small_results().to_dict())


def test_the_generated_schema_is_the_hand_kept_one() -> None:
    """Equal as JSON to the schema it replaced (so it rejects what that one rejected); the
    registry's entries made anew on both (a criterion or parameter added since changes both)."""
    made = with_registry(json_schema(), generated_keys())
    before = json.loads((GOLDEN / "results.schema.before-codec.json").read_text(encoding="utf-8"))
    assert made == with_registry(before, generated_keys())
    shipped = json.loads((ROOT / "pytest_sadl" / "results.schema.json").read_text(encoding="utf-8"))
    assert shipped == made
    assert with_registry(made) == JSON_SCHEMA


def test_the_schema_keeps_its_descriptions() -> None:
    props = json_schema()["properties"]
    assert "raw-string models" in props["top_inputs"]["items"]["properties"]["text"]["description"]
    assert "pytest-xdist worker" in props["outcome"]["properties"]["missing"]["description"]
    assert props["scope"]["properties"]["runs"]["description"].startswith("sadl combine")
    assert "99th percentile" in schema(ScBounds)["properties"]["rule"]["description"]


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        (("metrics", "lsc", "value"), 1.5, "metrics.lsc.value must be a fraction in [0, 1]"),
        (("metrics", "lsc", "covered"), -1, "metrics.lsc.covered must be a count"),
        (("model", "classifier"), None, "model.classifier must be true or false, got null"),
        (("top_inputs", 0, "pred"), 2.5, "top_inputs[0].pred must be an integer or null"),
        (("top_inputs", 0, "image", "channels"), 2, "must be one of 1, 3, 4"),
        (("config", "var_rule"), "both", "config.var_rule must be one of class, paper"),
        (("outcome", "stale"), [{"nodeid": "a"}], "outcome.stale[0] has no 'inputs' (required)"),
        (("scope", "runs"), 0, "scope.runs must be a count (an integer >= 1), got 0"),
        (("covered", "format"), "other", "covered.format is 'other', expected 'pytest-sadl/covered'"),
    ],
)
def test_the_generated_schema_rejects_what_the_old_one_rejected(
    where: tuple[Any, ...], value: Any, message: str
) -> None:
    doc = json.loads((GOLDEN / "results-example.json").read_text(encoding="utf-8"))
    node = doc
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    with pytest.raises(ResultsFileError, match=re.escape(message)):
        validate_results(doc)


# ------------------------------------------------------------------------ the reader's leniency


def test_absent_sections_read_as_empty_and_unknown_keys_are_ignored() -> None:
    results = Results.from_dict({"schema": SCHEMA, "version": VERSION, "metrics": {"lsc": {"value": 0.5}}, "new": 1})
    assert results.metrics == {"lsc": Metric(0.5, 0, 0)}  # covered/total absent: 0
    assert (results.created, results.tests, results.inputs, results.failures, results.scope) == (None, [], {}, [], None)
    assert results.config == RunConfig() and results.mistakes is None and results.passed


def test_values_of_another_type_read_as_the_default() -> None:
    metric = Metric.from_dict({"value": "x", "covered": True, "total": None, "applicable": "no", "below": 1.5})
    assert metric == Metric(None, 0, 0, applicable=True, below=None)
    row = TestRow.from_dict({"nodeid": 3, "inputs": "2", "lsa_mean": "x", "lsa_max": float("nan"), "new": {"nc": "a"}})
    assert (row.nodeid, row.inputs, row.mean, row.max, row.new) == ("?", 0, {}, {"lsa": None}, {})
    scope = Scope.from_dict({"gated": "yes", "reasons": ["a", 1, None], "collected": np.int64(4)})
    assert (scope.gated, scope.reasons, scope.collected, scope.partial) == (True, ["a"], 4, True)


def test_items_of_another_type_are_dropped_or_none() -> None:
    analysis = Analysis.from_dict({"kind": "classifier", "auc": {"lsa": "x"}, "scored": {"lsa": 1, "dsa": None}})
    assert analysis.auc == {"lsa": None}  # the values may be None: kept as None
    assert analysis.scored == {"lsa": 1}  # they may not: dropped
    assert analysis.fifths == {} and analysis.labelled is None


def test_mistakes_without_an_overall_analysis_read_as_absent() -> None:
    assert Results.from_dict({"metrics": {}, "mistakes": {"groups": []}}).mistakes is None
    with pytest.raises(ValueError, match="not a Mistakes"):
        Mistakes.from_dict({})


def test_config_keeps_parameters_and_bounds_apart() -> None:
    config = RunConfig.from_dict(
        {"sa_layers": ["d"], "lsc": {"lower": 0, "upper": 2.5, "buckets": 10}, "tknp_k": 2, "x": {"lower": 1}}
    )
    assert config.bounds == {"lsc": ScBounds(0, 2.5, 10)}
    assert config.params == {"tknp_k": 2, "x": {"lower": 1}}
    assert config.to_dict() == {
        "sa_layers": ["d"],
        "coverage_layers": [],
        "tknp_k": 2,
        "x": {"lower": 1},
        "lsc": {"lower": 0, "upper": 2.5, "buckets": 10},
    }


def test_non_finite_numbers_and_numpy_scalars_are_written_as_json() -> None:
    top = TopInput(by="lsa", rank=np.int32(1), pred=np.float64(2.0), scores={"lsa": float("inf")})
    assert top.to_dict() == {
        "by": "lsa",
        "rank": 1,
        "input": None,
        "test": None,
        "pred": 2.0,
        "lsa": None,
        "image": None,
    }
    assert type(top.to_dict()["rank"]) is int
    assert encode([1.0, float("nan"), np.float32(0.5)]) == [1.0, None, 0.5]
    big = [float(i) for i in range(1000)]
    assert encode(big) == big and encode(big) is not big


# ------------------------------------------------------------------------ a new section


@dataclass(frozen=True)
class _Auroc(Record):
    """A section another change adds: one row per group."""

    group: str
    auroc: float | None = spec(minimum=0, maximum=1, doc="area under the ROC curve")
    fpr95: float | None = spec(default=None, omit_none=True, minimum=0, maximum=1)


@dataclass
class _MoreResults(Results):
    detect: list[_Auroc] | None = spec(default=None, omit_none=True, doc="out-of-distribution detection, per group")
    unique: dict[str, int] = field(default_factory=dict)


def test_a_new_section_is_a_dataclass_and_a_field() -> None:
    base = small_results()
    more = _MoreResults(**{f.name: getattr(base, f.name) for f in fields(base)}, detect=[_Auroc("g", 0.75)])
    doc = more.to_dict()
    assert doc["detect"] == [{"group": "g", "auroc": 0.75}]
    assert doc["unique"] == {}
    assert list(doc)[-3:] == ["detect", "unique", "outcome"]  # after the fields before it, before `outcome`
    assert decode(_MoreResults, doc) == more
    assert _MoreResults.from_dict({"metrics": {}}).detect is None  # an older file: absent


def test_a_new_section_is_in_the_schema() -> None:
    entry = schema(_MoreResults)["properties"]["detect"]
    assert entry["description"] == "out-of-distribution detection, per group"
    assert entry["items"]["properties"]["auroc"] == {
        "description": "area under the ROC curve",
        "type": ["number", "null"],
        "minimum": 0,
        "maximum": 1,
    }
    assert entry["items"]["properties"]["fpr95"]["type"] == "number"  # omitted when None: never null
    assert entry["type"] == "array"
    assert math.isclose(
        json_schema()["properties"]["metrics"]["additionalProperties"]["properties"]["value"]["maximum"], 1
    )
