"""A run's results as plain data and their JSON form.

Every report renders these; none recomputes a metric. Coverage values are fractions in
[0, 1]; thresholds are percentages, as on the command line.

The dataclasses below are the one source of the file format (``docs/results-schema.md``):
their type hints and field specs (:func:`pytest_sadl.codec.spec`) make the JSON form
(``to_dict``), the lenient reading back (``from_dict``) and the JSON Schema (draft
2020-12, :func:`json_schema`), which ``scripts/results_schema.py`` writes to
``pytest_sadl/results.schema.json`` with the registry's per-metric entries; reading and
validating files from outside is :mod:`pytest_sadl.resultsfile`. A new section is a
dataclass (a ``Record``) and a field of :class:`Results` (or of a section), nothing else.

Versioning: ``version`` is the major version of the format. A reader refuses a newer
major version; new *optional* fields (another metric, a new section) do not change it,
and the schema allows properties it does not name, so that older readers still read
newer minor additions.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias

from pytest_sadl.codec import DOUBLE, INTEGER, Extra, Json, Record, Spec, spec
from pytest_sadl.codec import schema as _schema

SCHEMA = "pytest-sadl/results"
VERSION = 1

if TYPE_CHECKING:
    #: A JSON value as :func:`json.loads` gives it (and as a results file holds it).
    JSON: TypeAlias = "None | bool | int | float | str | list[JSON] | dict[str, JSON]"
    #: A JSON object.
    JSONObject: TypeAlias = "dict[str, JSON]"
else:  # what the codec reads as "any JSON value, kept as it is"
    JSON = Json
    JSONObject = dict[str, Json]
#: Per-metric (or per-score) numbers of a row, in the order the run reported them.
Numbers: TypeAlias = dict[str, float | None]


def percent(value: float | None) -> float | None:
    """The percentage a value is reported and judged as: two decimals, everywhere."""
    return None if value is None else round(value * 100.0, 2)


#: The scores every older file has in ``tests``, ``top_inputs`` and ``inputs`` (the schema
#: names them; a newer score's values are allowed, unnamed).
_CLASSIC = ("lsa", "dsa", "mdsa")
_SHARE = {"minimum": 0, "maximum": 1}  # a fraction in [0, 1]
_BOUNDS_RULE = (
    "how the bounds were chosen: 'configured', or the default rule with its version ('default v2: ...': "
    "the 99th percentile of held-out training SA; 'default: ...' before v2: their maximum)"
)


def _is_bounds(value: object) -> bool:
    """A ``config`` value that is a surprise coverage's bounds (not a parameter)."""
    return isinstance(value, Mapping) and {"lower", "upper"} <= set(value)


# ------------------------------------------------------------------------ the sections


@dataclass
class Metric(Record):
    value: float | None = spec(required=True, **_SHARE)
    covered: int = spec(null=True)  # a file without it reads as 0
    total: int = spec(null=True)
    applicable: bool = True
    #: surprise coverage only: scores at or below the lower bound
    below: int | None = spec(default=None, omit_none=True, null=True)
    above: int | None = spec(default=None, omit_none=True, null=True)  # ... above the upper bound
    count: int | None = spec(default=None, omit_none=True, null=True)  # ... scores in all
    #: ... scores that are NaN (a class with no training traces)
    nan: int | None = spec(default=None, omit_none=True, null=True)
    #: why the metric is not available (its score cannot be set up on the chosen layer);
    #: ``None`` when it is computed, or merely not applicable (DSC of a regression model)
    reason: str | None = spec(
        default=None,
        omit_none=True,
        null=True,
        doc="why the metric is not available: its score cannot be set up on the chosen layer "
        "(the other metrics are computed)",
    )

    @property
    def measured(self) -> bool:
        """Applicable and with a value: what a report can show as a number."""
        return self.applicable and self.value is not None


@dataclass
class Failure(Record):
    metric: str
    value: float | None
    threshold: float
    message: str


@dataclass(frozen=True)
class ModelInfo(Record):
    """What the results say about the model (``model``)."""

    name: str | None = None
    source: str | None = None
    fingerprint: str | None = None
    profile_fingerprint: str | None = None
    classifier: bool | None = spec(default=None, null=False)
    n_classes: int | None = None
    input_shape: list[int | None] | None = spec(default=None, null=False)
    n_train: int | None = spec(default=None, null=False)


@dataclass(frozen=True)
class ScBounds(Record):
    """One surprise coverage's bounds in the configuration: ``(lower, upper]`` in
    ``buckets`` buckets, and the rule they came from (``None`` bounds: not available)."""

    lower: float | None
    upper: float | None
    buckets: int | None = spec(null=False)
    rule: str | None = spec(default=None, omit_none=True, doc=_BOUNDS_RULE)


@dataclass(frozen=True)
class RunConfig(Record):
    """The configuration the numbers came from (``config``): layers, thresholds, an
    opt-in criterion's parameters (``params``, e.g. ``tknp_k``) and each surprise
    coverage's bounds (``bounds``, by metric). The schema's entries of the registry's
    parameters (``nc_threshold``, ``kmnc_k``, ...) and bounds are made from the registry
    (:mod:`pytest_sadl.criteria.schema`)."""

    sa_layers: list[str] = field(default_factory=list)
    coverage_layers: list[str] = field(default_factory=list)
    nc_threshold: float | None = spec(default=None, omit_none=True, **_SHARE)
    kmnc_k: int | None = spec(default=None, omit_none=True, minimum=1)
    var_threshold: float | None = spec(default=None, omit_none=True, minimum=0)
    lsa_near_singular: str | None = spec(default=None, omit_none=True, in_schema=False)
    var_rule: str | None = spec(
        default=None,
        omit_none=True,
        enum=("class", "paper"),
        doc="which neurons LSA and MDSA drop for too little training variance: 'class' (per class) "
        "or 'paper' (below var_threshold in any class: dropped from all)",
    )
    #: ``--sadl-sa-components``: LSA/MDSA/MLSA/MMDSA on this many principal axes (absent: off)
    sa_components: int | None = spec(
        default=None,
        omit_none=True,
        minimum=1,
        doc="--sadl-sa-components: LSA, MDSA, MLSA and MMDSA measured on this many principal axes "
        "of the SA layers' training traces; absent when every neuron is measured",
    )
    #: every other plain value, in order: the opt-in criteria's parameters (and a newer
    #: file's settings this version does not name)
    params: JSONObject = spec(default_factory=dict, flat="")
    bounds: dict[str, ScBounds] = spec(default_factory=dict, flat="", when=_is_bounds)


@dataclass(frozen=True)
class LayerRow(Record):
    """One coverage layer: its neurons and each neuron coverage on it (``coverage``)."""

    name: str = spec(missing="?")
    neurons: int = spec()
    coverage: Numbers = spec(default_factory=dict, flat="", additional=True, **_SHARE)


@dataclass(frozen=True)
class GroupRow(Record):
    """One group: alone (``metrics``) and cumulatively in the run's order (Table VI)."""

    name: str = spec(missing="?")
    tests: int = spec()
    inputs: int = spec()
    metrics: Numbers = spec(default_factory=dict, **_SHARE)
    cumulative: Numbers = spec(default_factory=dict, **_SHARE)


@dataclass(frozen=True)
class TestRow(Record):
    """One marked test: its inputs, each score's mean and max over them (``lsa_mean``,
    ``lsa_max``, ...), and the targets of each criterion it covered first (``new``)."""

    __test__ = False  # not a pytest test class

    nodeid: str = spec(missing="?")
    group: str = spec()
    outcome: str = spec()
    inputs: int = spec()
    mean: Numbers = spec(default_factory=dict, flat="_mean", group="scores", names=_CLASSIC)
    max: Numbers = spec(default_factory=dict, flat="_max", group="scores", names=_CLASSIC)
    new: dict[str, int] = spec(default_factory=dict, item_null=True)
    unique: dict[str, int] | None = spec(
        default=None,
        omit_none=True,
        minimum=0,
        doc="who tests what: per metric with covered sets, the targets (buckets, neurons, sections) this test "
        "covers and no other test of the run does",
    )
    redundant: bool | None = spec(
        default=None,
        omit_none=True,
        doc="the test covers nothing of the metrics with covered sets that the other tests do not",
    )


@dataclass(frozen=True)
class Thumbnail(Record):
    """A top input's picture: ``height`` x ``width`` x ``channels`` pixels (0-255), row-major."""

    height: int = spec(required=True, minimum=1, maximum=4096)
    width: int = spec(required=True, minimum=1, maximum=4096)
    channels: int | None = spec(omit_none=True, enum=(1, 3, 4))
    pixels: list[int] = spec(required=True, maximum=255)


@dataclass(frozen=True)
class TopInput(Record):
    """One of the most surprising inputs by the score ``by``: each distinct input once,
    with every test that fed it (``tests``), its scores, and a thumbnail (images) or
    its text (raw-text models)."""

    by: str
    rank: int
    input: int | None = spec(default=None, null=False)
    test: int | None = spec(default=None, null=False)
    tests: list[int] | None = spec(default=None, omit_none=True)
    copies: int | None = spec(default=None, omit_none=True)
    pred: float | None = spec(default=None, schema={"type": ["integer", "null"], "minimum": 0, "maximum": INTEGER})
    scores: Numbers = spec(default_factory=dict, flat="", names=_CLASSIC)
    image: Thumbnail | None = None
    text: str | None = spec(
        default=None,
        omit_none=True,
        max_length=1000,
        doc="a text input's first characters (raw-string models), shown in place of a thumbnail",
    )


@dataclass(frozen=True)
class Fifth(Record):
    """One fifth of the labelled inputs ordered by a score (``mistakes``)."""

    lowest: float | None
    highest: float | None
    inputs: int
    accuracy: float | None = spec(default=None, **_SHARE)
    mean_abs_error: float | None = None


@dataclass(frozen=True)
class Analysis(Record):
    """Does surprise predict the mistakes of one set of labelled inputs (all of them, or
    one group): the figures of :class:`pytest_sadl.criteria.mistakes.Analysis`."""

    kind: str
    labelled: int | None
    errors: int | None = None
    error_rate: float | None = spec(default=None, **_SHARE)
    mean_abs_error: float | None = None
    auc: Numbers = spec(default_factory=dict, **_SHARE)
    spearman: Numbers = spec(default_factory=dict, minimum=-1, maximum=1)
    fifths: dict[str, list[Fifth]] = field(default_factory=dict)
    scored: dict[str, int] = field(default_factory=dict)
    sentences: list[str] = field(default_factory=list)
    name: str | None = None

    @property
    def classifier(self) -> bool:
        return self.kind == "classifier"


@dataclass(frozen=True)
class Mistakes(Record):
    """ "Does surprise predict this model's mistakes" (when tests gave labels): overall,
    per group, the scores' display names and which scores are confidence baselines.
    Without an ``overall`` analysis a file's ``mistakes`` reads as ``None``."""

    overall: Analysis = spec(needed=True)
    groups: list[Analysis] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    baselines: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class OodRow(Record):
    """How well one score separates one group from the reference (``ood``): AUROC,
    AUPR-In, AUPR-Out and FPR at 95% TPR (:mod:`pytest_sadl.criteria.detection`), over
    ``inputs`` of the group's and ``reference_inputs`` of the reference's finite scores."""

    group: str
    score: str
    inputs: int
    reference_inputs: int
    auroc: float | None = spec(**_SHARE)
    aupr_in: float | None = spec(**_SHARE)
    aupr_out: float | None = spec(**_SHARE)
    fpr95: float | None = spec(**_SHARE)


@dataclass(frozen=True)
class Ood(Record):
    """ "How well does each score tell each group from in-distribution inputs": every
    per-input score's detection metrics per group against ``reference``, the group named
    as in-distribution (``--sadl-ood-reference``), or ``None``: the held-out training
    traces the profile keeps. ``unavailable``: score key -> why it has no rows;
    ``reason``: why there are no rows at all (a reference group the run does not have)."""

    reference: str | None = spec(
        doc="the group named as in-distribution (--sadl-ood-reference); null: the held-out training traces"
    )
    rows: list[OodRow] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    unavailable: dict[str, str] = spec(default_factory=dict, doc="score key -> why it has no rows")
    sentences: list[str] = field(default_factory=list)
    reason: str | None = spec(default=None, doc="why there are no rows (a reference group the run does not have)")


@dataclass(frozen=True)
class StaleTest(Record):
    """A test whose inputs were measured on a changed model: left out of every metric."""

    nodeid: str = spec(required=True, missing="?")
    group: str | None = spec(default=None, omit_none=True)
    outcome: str | None = spec(default=None, omit_none=True)
    inputs: int = spec(required=True, kw_only=True)


@dataclass(frozen=True)
class MissingTest(Record):
    """A test whose inputs never reached the results (an xdist worker crashed)."""

    nodeid: str = spec(required=True, missing="?")
    reason: str | None = spec(default=None, omit_none=True)


@dataclass(frozen=True)
class Scope(Record):
    """What part of the suite a run measured (``scope``): marked tests (marked, or using
    ``sadl_record``) collected before any deselection, selected, run (their setup began)
    and recorded (they fed the model), and why some were not (``reasons``: a ``-x`` or
    ``--maxfail`` stop, deselection by ``-k``/``-m``/``--lf``/``--sw``/``--deselect``,
    collection errors, xdist workers lost). A run with a reason is *partial*: its
    ``--sadl-fail-under`` and ``--sadl-compare-fail`` gates are not applied unless
    ``--sadl-gate-partial`` (``gated``); the gates it did not apply are ``ungated``.

    An older file has no ``scope``: :attr:`Results.scope` is then ``None`` (not known)."""

    JSON_EXTRA: ClassVar[tuple[Extra, ...]] = (Extra("partial", attr="partial"),)

    collected: int | None = None
    selected: int | None = None
    run: int | None = None
    recorded: int | None = None
    reasons: list[str] = spec(default_factory=list, doc="why some marked tests were not measured, one sentence each")
    gated: bool = spec(default=True, doc="whether the thresholds and the comparison gate were applied")
    ungated: list[str] = spec(default_factory=list, doc="the gate lines a partial run did not apply")
    #: the combined runs' count, for a file ``sadl combine`` made (``None``: one run)
    runs: int | None = spec(default=None, omit_none=True, minimum=1, doc="sadl combine: how many runs were combined")

    @property
    def partial(self) -> bool:
        return bool(self.reasons)


def _scores(suffix: str, entry: dict[str, Any]) -> dict[str, Any]:
    return {f"{name}{suffix}": dict(entry) for name in _CLASSIC}


_NUMBER_OR_NULL = {"type": ["number", "null"], "minimum": -DOUBLE, "maximum": DOUBLE}
_COUNT = {"type": "integer", "minimum": 0, "maximum": INTEGER}
_INPUTS_SCHEMA: dict[str, Any] = {
    "additionalProperties": None,
    "properties": {
        "test": {"type": "array", "items": _COUNT},
        "pred": {"type": "array", "items": {**_COUNT, "type": ["integer", "null"]}},
        **{name: {"type": "array", "items": _NUMBER_OR_NULL} for name in _CLASSIC},
        "label": {"type": "array", "description": "the label a test gave each input (sadl_labels), or null"},
        "digest": {
            "type": "array",
            "description": "each input's digest (records.input_digests), 16 hex digits: copies of one input share "
            "it (sadl combine's top inputs and labels)",
            "items": {"type": ["string", "null"], "pattern": "^[0-9a-f]{16}$"},
        },
        "output": {
            "type": "array",
            "description": "a regression model's output of each input (the mistakes section's errors; sadl combine)",
        },
        **{
            f"baseline_{name}": {
                "type": "array",
                "description": f"a classifier's {what} of each input's output (the mistakes section's baselines; "
                "sadl combine)",
                "items": _NUMBER_OR_NULL,
            }
            for name, what in (
                ("deepgini", "DeepGini"),
                ("entropy", "softmax entropy"),
                ("margin", "1 - the margin of the top two probabilities"),
                ("msp", "1 - its top probability (MSP)"),
            )
        },
    },
}
_STRINGS = {"type": "array", "items": {"type": "string", "maxLength": 100000}}
_COUNTS = {"type": "array", "items": _COUNT}
#: the ``covered`` section's format (:mod:`pytest_sadl.covered`, ``pytest-sadl/covered`` v1)
_COVERED_SCHEMA: dict[str, Any] = {
    "additionalProperties": None,
    "required": ["format", "version"],
    "properties": {
        "format": {"const": "pytest-sadl/covered"},
        "version": {"type": "integer", "minimum": 1, "maximum": 1000},
        "groups": _STRINGS,
        "metrics": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["kind", "parts", "totals"],
                "properties": {"kind": {"enum": ["buckets", "targets"]}, "parts": _COUNTS, "totals": _COUNTS},
            },
        },
        "tests": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "required": ["sets"],
                    "properties": {
                        "sets": {
                            "type": "array",
                            "items": {"type": "string", "maxLength": 100000000, "pattern": "^[bi]:[A-Za-z0-9+/=]*$"},
                        },
                        **{key: _COUNT for key in ("below", "above", "count", "nan")},
                    },
                },
            },
        },
    },
}
_VERSION_SCHEMA = {
    "description": 'the major version (an integer), or "MAJOR.MINOR"; readers refuse a newer major',
    "type": ["integer", "string"],
    "minimum": 1,
    "pattern": "^[0-9]{1,9}([.][0-9]{1,9})?$",
}


@dataclass
class Results(Record):
    """A run's results: what every report renders (:meth:`from_dict` reads a results
    document back into the same types, :meth:`to_dict` is its JSON form).

    :meth:`from_dict` takes a validated document (what
    :func:`pytest_sadl.resultsfile.load_results` returns): every section but ``metrics``
    may be absent (an older or a smaller file) and reads as empty; fields this version
    does not know are ignored; the metrics a file does not have are simply not in
    :attr:`metrics`."""

    JSON_EXTRA: ClassVar[tuple[Extra, ...]] = (
        Extra("schema", SCHEMA, spec=Spec(required=True, schema={"const": SCHEMA})),
        Extra("version", VERSION, spec=Spec(required=True, schema=_VERSION_SCHEMA)),
        Extra("passed", attr="passed", spec=Spec(at="outcome")),
    )

    created: str | None = spec(null=False)
    version: str | None = spec(key="pytest_sadl_version", null=False)
    model: ModelInfo = spec()
    config: RunConfig = spec()
    thresholds: dict[str, float] = spec(minimum=0, maximum=100)  # percent
    metrics: dict[str, Metric] = spec(required=True)
    layers: list[LayerRow] = spec()
    groups: list[GroupRow] = spec()
    tests: list[TestRow] = spec()
    #: per input, in the run's order: ``test`` (its test's index), ``pred``, each score, ``label``
    inputs: dict[str, list[JSON]] = spec(schema=_INPUTS_SCHEMA)
    top_inputs: list[TopInput] = spec()
    failures: list[Failure] = spec(default_factory=list, at="outcome")
    warnings: list[str] = spec(default_factory=list, at="outcome")
    #: tests whose inputs never reached the results (xdist crash)
    missing: list[MissingTest] = spec(
        default_factory=list,
        at="outcome",
        doc="tests whose recorded inputs never reached the results (a pytest-xdist worker crashed while running them)",
    )
    # "does surprise predict this model's mistakes" (pytest_sadl.criteria.mistakes), when tests gave labels
    mistakes: Mistakes | None = spec(
        default=None,
        omit_none=True,
        null=True,
        doc="does surprise predict the model's mistakes (only when tests gave labels)",
    )
    #: how well each score tells each group from in-distribution inputs (AUROC, AUPR,
    #: FPR@95; :mod:`pytest_sadl.criteria.detection`); ``None``: no per-input score or no group
    ood: Ood | None = spec(
        default=None,
        omit_none=True,
        null=True,
        doc="how well each per-input score tells each group from in-distribution inputs: AUROC, AUPR-In, "
        "AUPR-Out and FPR at 95% TPR (absent: no per-input score or no group)",
    )
    #: tests whose inputs were measured on a changed model (fit, set_weights during the
    #: session), left out of every metric
    stale: list[StaleTest] = spec(
        default_factory=list,
        at="outcome",
        doc="tests that ended on a model changed since the profile's was bound (fit, set_weights, "
        "load_weights, a new layer during the session): their inputs count in no metric, group or test row",
    )
    #: what part of the suite the run measured (``None``: an older file does not say)
    scope: Scope | None = spec(
        default=None,
        omit_none=True,
        doc="what part of the suite the run measured: marked tests collected (before deselection), "
        "selected, run and recorded, and why some were not; a run with reasons is partial, and its "
        "gates are not applied unless --sadl-gate-partial (absent in files of versions before it: not known)",
    )
    #: each test's covered targets per metric (``sadl combine``, ``sadl minimize``, a
    #: partial run's comparison): see :mod:`pytest_sadl.covered`; ``None``: not recorded
    covered: JSONObject | None = spec(
        default=None,
        omit_none=True,
        schema=_COVERED_SCHEMA,
        doc="each test's covered targets (pytest_sadl/covered.py): what sadl combine, sadl minimize "
        "and a partial run's like-with-like comparison read; absent in files before it",
    )

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def n_inputs(self) -> int:
        return len(self.inputs.get("test", []))

    def metric(self, name: str) -> Metric | None:
        """The ``metrics`` entry of ``name``, or ``None`` when the run has none."""
        return self.metrics.get(name)


#: ``$defs/count_metric``: a count criterion's ``metrics`` entry (the registry's count
#: criteria refer to it: :mod:`pytest_sadl.criteria.schema`)
_COUNT_VALUE = {
    "description": "a count criterion's number (TKNP's distinct patterns, CC's clusters, NLC), not a fraction",
    "type": ["number", "null"],
    "minimum": 0,
    "maximum": DOUBLE,
}


def json_schema() -> dict[str, Any]:
    """The results file's JSON Schema (draft 2020-12), made from the dataclasses, without
    the registry's per-metric entries (:func:`pytest_sadl.criteria.schema.with_registry`)."""
    count_metric = _schema(Metric)
    count_metric["properties"]["value"] = dict(_COUNT_VALUE)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://github.com/pytest-sadl/pytest-sadl/pytest_sadl/results.schema.json",
        "title": "pytest-sadl results",
        "description": "A run's surprise adequacy and neuron coverage (pytest --sadl-report=json). Coverage "
        "values are fractions in [0, 1]; thresholds are percentages.",
        **_schema(Results),
        "$defs": {"count_metric": count_metric},
    }


def write_json(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write ``data`` as JSON atomically and durably (:mod:`pytest_sadl.atomic`)."""
    from pytest_sadl.atomic import atomic_write_text

    return atomic_write_text(path, json.dumps(data, indent=1, allow_nan=False) + "\n")
