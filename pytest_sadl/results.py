"""A run's results as plain data and their JSON form.

Every report renders these; none recomputes a metric. Coverage values are fractions in
[0, 1]; thresholds are percentages, as on the command line.

The file format (``docs/results-schema.md``) is described by a JSON Schema (draft
2020-12) shipped in the package as ``pytest_sadl/results.schema.json``; reading and
validating files from outside is :mod:`pytest_sadl.resultsfile`.

Versioning: ``version`` is the major version of the format. A reader refuses a newer
major version; new *optional* fields (another metric, a new section) do not change it,
and the schema allows properties it does not name, so that older readers still read
newer minor additions.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

SCHEMA = "pytest-sadl/results"
VERSION = 1

#: A JSON value as :func:`json.loads` gives it (and as a results file holds it).
JSON: TypeAlias = "None | bool | int | float | str | list[JSON] | dict[str, JSON]"
#: A JSON object.
JSONObject: TypeAlias = "dict[str, JSON]"
#: Per-metric (or per-score) numbers of a row, in the order the run reported them.
Numbers: TypeAlias = "dict[str, float | None]"


def percent(value: float | None) -> float | None:
    """The percentage a value is reported and judged as: two decimals, everywhere."""
    return None if value is None else round(value * 100.0, 2)


# ------------------------------------------------------------------ reading JSON values
# A validated document has the types the schema says; these read one value with that
# type or give the default (a field a file does not have, or an older file's), so that
# the typed results never hold a value of another type.


def _py(value: object) -> object:
    """A NumPy scalar as the Python value it holds (the engine's rows may have them)."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes, list, dict)):
        return value.item()
    return value


def _obj(value: object) -> JSONObject:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[JSON]:
    return value if isinstance(value, list) else []


def _str(value: object) -> str | None:
    value = _py(value)
    return str(value) if isinstance(value, str) else None


def _int(value: object) -> int | None:
    value = _py(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: object) -> float | None:
    """A number (an ``int`` kept as it is, as the document has it; NaN and inf as
    ``None``, as the JSON form writes them)."""
    value = _py(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if isinstance(value, int) or math.isfinite(value) else None


def _bool(value: object) -> bool | None:
    value = _py(value)
    return value if isinstance(value, bool) else None


def _numbers(value: object) -> Numbers:
    return {str(k): _float(v) for k, v in _obj(value).items()}


def _bool_or_none(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _ints(value: object) -> dict[str, int]:
    return {str(k): n for k, v in _obj(value).items() if (n := _int(v)) is not None}


def _strs(value: object) -> list[str]:
    return [v for v in _list(value) if isinstance(v, str)]


def _is_number(value: object) -> bool:
    value = _py(value)
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


# ------------------------------------------------------------------------ the sections


@dataclass
class Metric:
    value: float | None
    covered: int
    total: int
    applicable: bool = True
    below: int | None = None  # surprise coverage only: scores at or below the lower bound
    above: int | None = None  # ... above the upper bound
    count: int | None = None  # ... scores in all
    nan: int | None = None  # ... scores that are NaN (a class with no training traces)
    #: why the metric is not available (its score cannot be set up on the chosen layer);
    #: ``None`` when it is computed, or merely not applicable (DSC of a regression model)
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None or k == "value"}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Metric:
        """A ``metrics`` entry; ``covered``/``total`` a file does not have read as 0."""
        applicable = data.get("applicable")
        return cls(
            _float(data.get("value")),
            _int(data.get("covered")) or 0,
            _int(data.get("total")) or 0,
            applicable=applicable if isinstance(applicable, bool) else True,
            below=_int(data.get("below")),
            above=_int(data.get("above")),
            count=_int(data.get("count")),
            nan=_int(data.get("nan")),
            reason=_str(data.get("reason")),
        )

    @property
    def measured(self) -> bool:
        """Applicable and with a value: what a report can show as a number."""
        return self.applicable and self.value is not None


@dataclass
class Failure:
    metric: str
    value: float | None
    threshold: float
    message: str

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Failure:
        return cls(
            _str(data.get("metric")) or "",
            _float(data.get("value")),
            _float(data.get("threshold")) or 0.0,
            _str(data.get("message")) or "",
        )


@dataclass(frozen=True)
class ModelInfo:
    """What the results say about the model (``model``)."""

    name: str | None = None
    source: str | None = None
    fingerprint: str | None = None
    profile_fingerprint: str | None = None
    classifier: bool | None = None
    n_classes: int | None = None
    input_shape: list[int | None] | None = None
    n_train: int | None = None

    def to_dict(self) -> JSONObject:
        shape: JSON = None if self.input_shape is None else list(self.input_shape)
        return {
            "name": self.name,
            "source": self.source,
            "fingerprint": self.fingerprint,
            "profile_fingerprint": self.profile_fingerprint,
            "classifier": self.classifier,
            "n_classes": self.n_classes,
            "input_shape": shape,
            "n_train": self.n_train,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ModelInfo:
        shape = data.get("input_shape")
        return cls(
            name=_str(data.get("name")),
            source=_str(data.get("source")),
            fingerprint=_str(data.get("fingerprint")),
            profile_fingerprint=_str(data.get("profile_fingerprint")),
            classifier=_bool(data.get("classifier")),
            n_classes=_int(data.get("n_classes")),
            input_shape=[_int(v) for v in shape] if isinstance(shape, (list, tuple)) else None,
            n_train=_int(data.get("n_train")),
        )


@dataclass(frozen=True)
class ScBounds:
    """One surprise coverage's bounds in the configuration: ``(lower, upper]`` in
    ``buckets`` buckets, and the rule they came from (``None`` bounds: not available)."""

    lower: float | None
    upper: float | None
    buckets: int | None
    rule: str | None = None

    def to_dict(self) -> JSONObject:
        out: JSONObject = {"lower": self.lower, "upper": self.upper, "buckets": self.buckets}
        if self.rule is not None:
            out["rule"] = self.rule
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ScBounds:
        return cls(
            _float(data.get("lower")), _float(data.get("upper")), _int(data.get("buckets")), _str(data.get("rule"))
        )


_CONFIG_KEYS = ("nc_threshold", "kmnc_k", "var_threshold", "lsa_near_singular", "var_rule", "sa_components")


@dataclass(frozen=True)
class RunConfig:
    """The configuration the numbers came from (``config``): layers, thresholds, an
    opt-in criterion's parameters (``params``, e.g. ``tknp_k``) and each surprise
    coverage's bounds (``bounds``, by metric)."""

    sa_layers: list[str] = field(default_factory=list)
    coverage_layers: list[str] = field(default_factory=list)
    nc_threshold: float | None = None
    kmnc_k: int | None = None
    var_threshold: float | None = None
    lsa_near_singular: str | None = None
    var_rule: str | None = None
    #: ``--sadl-sa-components``: LSA/MDSA/MLSA/MMDSA on this many principal axes (absent: off)
    sa_components: int | None = None
    #: every other plain value, in order: the opt-in criteria's parameters (and a newer
    #: file's settings this version does not name)
    params: JSONObject = field(default_factory=dict)
    bounds: dict[str, ScBounds] = field(default_factory=dict)

    def to_dict(self) -> JSONObject:
        out: JSONObject = {"sa_layers": list(self.sa_layers), "coverage_layers": list(self.coverage_layers)}
        for key in _CONFIG_KEYS:
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        out.update(self.params)
        out.update({k: b.to_dict() for k, b in self.bounds.items()})
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> RunConfig:
        known = {"sa_layers", "coverage_layers", *_CONFIG_KEYS}
        params: JSONObject = {}
        bounds: dict[str, ScBounds] = {}
        for key, value in data.items():
            if key in known:
                continue
            if isinstance(value, Mapping) and {"lower", "upper"} <= set(value):  # a surprise coverage's bounds
                bounds[key] = ScBounds.from_dict(value)
            else:
                params[key] = _clean(value)
        return cls(
            sa_layers=_strs(data.get("sa_layers")),
            coverage_layers=_strs(data.get("coverage_layers")),
            nc_threshold=_float(data.get("nc_threshold")),
            kmnc_k=_int(data.get("kmnc_k")),
            var_threshold=_float(data.get("var_threshold")),
            lsa_near_singular=_str(data.get("lsa_near_singular")),
            var_rule=_str(data.get("var_rule")),
            sa_components=_int(data.get("sa_components")),
            params=params,
            bounds=bounds,
        )


@dataclass(frozen=True)
class LayerRow:
    """One coverage layer: its neurons and each neuron coverage on it (``coverage``)."""

    name: str
    neurons: int
    coverage: Numbers = field(default_factory=dict)

    def to_dict(self) -> JSONObject:
        return {"name": self.name, "neurons": self.neurons, **self.coverage}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> LayerRow:
        coverage = {k: _float(v) for k, v in data.items() if k not in ("name", "neurons") and _is_number(v)}
        return cls(str(data.get("name", "?")), _int(data.get("neurons")) or 0, coverage)


@dataclass(frozen=True)
class GroupRow:
    """One group: alone (``metrics``) and cumulatively in the run's order (Table VI)."""

    name: str
    tests: int
    inputs: int
    metrics: Numbers = field(default_factory=dict)
    cumulative: Numbers = field(default_factory=dict)

    def to_dict(self) -> JSONObject:
        return {
            "name": self.name,
            "tests": self.tests,
            "inputs": self.inputs,
            "metrics": dict(self.metrics),
            "cumulative": dict(self.cumulative),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> GroupRow:
        return cls(
            str(data.get("name", "?")),
            _int(data.get("tests")) or 0,
            _int(data.get("inputs")) or 0,
            _numbers(data.get("metrics")),
            _numbers(data.get("cumulative")),
        )


@dataclass(frozen=True)
class TestRow:
    """One marked test: its inputs, each score's mean and max over them, and the targets
    of each criterion it covered first (``new``)."""

    __test__ = False  # not a pytest test class

    nodeid: str
    group: str
    outcome: str
    inputs: int
    mean: Numbers = field(default_factory=dict)
    max: Numbers = field(default_factory=dict)
    new: dict[str, int] = field(default_factory=dict)
    #: per metric with covered sets, the targets no other test of the run covers
    #: (``covered.with_unique``); ``None``: the results carry no covered sets
    unique: dict[str, int] | None = None
    #: it covers nothing of those metrics the other tests do not
    redundant: bool | None = None

    def to_dict(self) -> JSONObject:
        out: JSONObject = {"nodeid": self.nodeid, "group": self.group, "outcome": self.outcome, "inputs": self.inputs}
        for key in dict.fromkeys([*self.mean, *self.max]):
            out[f"{key}_mean"] = self.mean.get(key)
            out[f"{key}_max"] = self.max.get(key)
        out["new"] = dict(self.new)
        if self.unique is not None:
            out["unique"] = dict(self.unique)
            out["redundant"] = bool(self.redundant)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> TestRow:
        mean: Numbers = {}
        high: Numbers = {}
        for key, value in data.items():
            if key.endswith("_mean") and _is_number(value):
                mean[key[: -len("_mean")]] = _float(value)
            elif key.endswith("_max") and _is_number(value):
                high[key[: -len("_max")]] = _float(value)
        return cls(
            str(data.get("nodeid", "?")),
            str(data.get("group", "")),
            str(data.get("outcome", "")),
            _int(data.get("inputs")) or 0,
            mean,
            high,
            _ints(data.get("new")),
            _ints(data["unique"]) if isinstance(data.get("unique"), Mapping) else None,
            _bool_or_none(data.get("redundant")),
        )


@dataclass(frozen=True)
class Thumbnail:
    """A top input's picture: ``height`` x ``width`` x ``channels`` pixels (0-255), row-major."""

    height: int
    width: int
    channels: int | None
    pixels: list[int]

    def to_dict(self) -> JSONObject:
        out: JSONObject = {"height": self.height, "width": self.width}
        if self.channels is not None:
            out["channels"] = self.channels
        out["pixels"] = list[JSON](self.pixels)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Thumbnail:
        pixels = [v for v in _list(data.get("pixels")) if isinstance(v, int) and not isinstance(v, bool)]
        return cls(_int(data.get("height")) or 0, _int(data.get("width")) or 0, _int(data.get("channels")), pixels)


_TOP_KEYS = ("by", "rank", "input", "test", "tests", "copies", "pred", "image", "text")


@dataclass(frozen=True)
class TopInput:
    """One of the most surprising inputs by the score ``by``: each distinct input once,
    with every test that fed it (``tests``), its scores, and a thumbnail (images) or
    its text (raw-text models)."""

    by: str
    rank: int
    input: int | None = None
    test: int | None = None
    tests: list[int] | None = None
    copies: int | None = None
    pred: float | None = None
    scores: Numbers = field(default_factory=dict)
    image: Thumbnail | None = None
    text: str | None = None

    def to_dict(self) -> JSONObject:
        out: JSONObject = {"by": self.by, "rank": self.rank, "input": self.input, "test": self.test}
        if self.tests is not None:
            out["tests"] = list[JSON](self.tests)
        if self.copies is not None:
            out["copies"] = self.copies
        out["pred"] = self.pred
        out.update(self.scores)
        out["image"] = None if self.image is None else self.image.to_dict()
        if self.text is not None:
            out["text"] = self.text
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> TopInput:
        image = data.get("image")
        tests = data.get("tests")
        return cls(
            by=str(data.get("by", "")),
            rank=_int(data.get("rank")) or 0,
            input=_int(data.get("input")),
            test=_int(data.get("test")),
            tests=[t for t in tests if isinstance(t, int)] if isinstance(tests, list) else None,
            copies=_int(data.get("copies")),
            pred=_float(data.get("pred")),
            scores={k: _float(v) for k, v in data.items() if k not in _TOP_KEYS and _is_number(v)},
            image=Thumbnail.from_dict(image) if isinstance(image, Mapping) else None,
            text=_str(data.get("text")),
        )


@dataclass(frozen=True)
class Fifth:
    """One fifth of the labelled inputs ordered by a score (``mistakes``)."""

    lowest: float | None
    highest: float | None
    inputs: int
    accuracy: float | None = None
    mean_abs_error: float | None = None

    def to_dict(self) -> JSONObject:
        return {
            "lowest": self.lowest,
            "highest": self.highest,
            "inputs": self.inputs,
            "accuracy": self.accuracy,
            "mean_abs_error": self.mean_abs_error,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Fifth:
        return cls(
            _float(data.get("lowest")),
            _float(data.get("highest")),
            _int(data.get("inputs")) or 0,
            _float(data.get("accuracy")),
            _float(data.get("mean_abs_error")),
        )


@dataclass(frozen=True)
class Analysis:
    """Does surprise predict the mistakes of one set of labelled inputs (all of them, or
    one group): the figures of :class:`pytest_sadl.criteria.mistakes.Analysis`."""

    kind: str
    labelled: int | None
    errors: int | None = None
    error_rate: float | None = None
    mean_abs_error: float | None = None
    auc: Numbers = field(default_factory=dict)
    spearman: Numbers = field(default_factory=dict)
    fifths: dict[str, list[Fifth]] = field(default_factory=dict)
    scored: dict[str, int] = field(default_factory=dict)
    sentences: list[str] = field(default_factory=list)
    name: str | None = None

    @property
    def classifier(self) -> bool:
        return self.kind == "classifier"

    def to_dict(self) -> JSONObject:
        return {
            "kind": self.kind,
            "labelled": self.labelled,
            "errors": self.errors,
            "error_rate": self.error_rate,
            "mean_abs_error": self.mean_abs_error,
            "auc": dict[str, JSON](self.auc),
            "spearman": dict[str, JSON](self.spearman),
            "fifths": {k: [f.to_dict() for f in v] for k, v in self.fifths.items()},
            "scored": dict[str, JSON](self.scored),
            "sentences": list[JSON](self.sentences),
            "name": self.name,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Analysis:
        fifths = {
            str(k): [Fifth.from_dict(f) for f in _list(v) if isinstance(f, dict)]
            for k, v in _obj(data.get("fifths")).items()
        }
        return cls(
            kind=str(data.get("kind", "")),
            labelled=_int(data.get("labelled")),
            errors=_int(data.get("errors")),
            error_rate=_float(data.get("error_rate")),
            mean_abs_error=_float(data.get("mean_abs_error")),
            auc=_numbers(data.get("auc")),
            spearman=_numbers(data.get("spearman")),
            fifths=fifths,
            scored=_ints(data.get("scored")),
            sentences=_strs(data.get("sentences")),
            name=_str(data.get("name")),
        )


@dataclass(frozen=True)
class Mistakes:
    """ "Does surprise predict this model's mistakes" (when tests gave labels): overall,
    per group, the scores' display names and which scores are confidence baselines."""

    overall: Analysis
    groups: list[Analysis] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    baselines: list[str] = field(default_factory=list)

    def to_dict(self) -> JSONObject:
        return {
            "overall": self.overall.to_dict(),
            "groups": [g.to_dict() for g in self.groups],
            "labels": dict[str, JSON](self.labels),
            "baselines": list[JSON](self.baselines),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Mistakes | None:
        """``None`` without an ``overall`` analysis."""
        overall = data.get("overall")
        if not isinstance(overall, Mapping):
            return None
        return cls(
            Analysis.from_dict(overall),
            [Analysis.from_dict(g) for g in _list(data.get("groups")) if isinstance(g, dict)],
            {str(k): v for k, v in _obj(data.get("labels")).items() if isinstance(v, str)},
            _strs(data.get("baselines")),
        )


@dataclass(frozen=True)
class OodRow:
    """How well one score separates one group from the reference (``ood``): AUROC,
    AUPR-In, AUPR-Out and FPR at 95% TPR (:mod:`pytest_sadl.criteria.detection`), over
    ``inputs`` of the group's and ``reference_inputs`` of the reference's finite scores."""

    group: str
    score: str
    inputs: int
    reference_inputs: int
    auroc: float | None
    aupr_in: float | None
    aupr_out: float | None
    fpr95: float | None

    def to_dict(self) -> JSONObject:
        return {
            "group": self.group,
            "score": self.score,
            "inputs": self.inputs,
            "reference_inputs": self.reference_inputs,
            "auroc": self.auroc,
            "aupr_in": self.aupr_in,
            "aupr_out": self.aupr_out,
            "fpr95": self.fpr95,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> OodRow:
        return cls(
            str(data.get("group", "")),
            str(data.get("score", "")),
            _int(data.get("inputs")) or 0,
            _int(data.get("reference_inputs")) or 0,
            _float(data.get("auroc")),
            _float(data.get("aupr_in")),
            _float(data.get("aupr_out")),
            _float(data.get("fpr95")),
        )


@dataclass(frozen=True)
class Ood:
    """ "How well does each score tell each group from in-distribution inputs": every
    per-input score's detection metrics per group against ``reference``, the group named
    as in-distribution (``--sadl-ood-reference``), or ``None``: the held-out training
    traces the profile keeps. ``unavailable``: score key -> why it has no rows;
    ``reason``: why there are no rows at all (a reference group the run does not have)."""

    reference: str | None
    rows: list[OodRow] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    sentences: list[str] = field(default_factory=list)
    reason: str | None = None

    def to_dict(self) -> JSONObject:
        return {
            "reference": self.reference,
            "rows": [r.to_dict() for r in self.rows],
            "labels": dict[str, JSON](self.labels),
            "unavailable": dict[str, JSON](self.unavailable),
            "sentences": list[JSON](self.sentences),
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Ood:
        return cls(
            _str(data.get("reference")),
            [OodRow.from_dict(r) for r in _list(data.get("rows")) if isinstance(r, dict)],
            {str(k): v for k, v in _obj(data.get("labels")).items() if isinstance(v, str)},
            {str(k): v for k, v in _obj(data.get("unavailable")).items() if isinstance(v, str)},
            _strs(data.get("sentences")),
            _str(data.get("reason")),
        )


@dataclass(frozen=True)
class StaleTest:
    """A test whose inputs were measured on a changed model: left out of every metric."""

    nodeid: str
    inputs: int
    group: str | None = None
    outcome: str | None = None

    def to_dict(self) -> JSONObject:
        out: JSONObject = {"nodeid": self.nodeid}
        if self.group is not None:
            out["group"] = self.group
        if self.outcome is not None:
            out["outcome"] = self.outcome
        out["inputs"] = self.inputs
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> StaleTest:
        return cls(
            str(data.get("nodeid", "?")),
            _int(data.get("inputs")) or 0,
            _str(data.get("group")),
            _str(data.get("outcome")),
        )


@dataclass(frozen=True)
class MissingTest:
    """A test whose inputs never reached the results (an xdist worker crashed)."""

    nodeid: str
    reason: str | None = None

    def to_dict(self) -> JSONObject:
        return {"nodeid": self.nodeid, **({"reason": self.reason} if self.reason is not None else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> MissingTest:
        return cls(str(data.get("nodeid", "?")), _str(data.get("reason")))


@dataclass(frozen=True)
class Scope:
    """What part of the suite a run measured (``scope``): marked tests (marked, or using
    ``sadl_record``) collected before any deselection, selected, run (their setup began)
    and recorded (they fed the model), and why some were not (``reasons``: a ``-x`` or
    ``--maxfail`` stop, deselection by ``-k``/``-m``/``--lf``/``--sw``/``--deselect``,
    collection errors, xdist workers lost). A run with a reason is *partial*: its
    ``--sadl-fail-under`` and ``--sadl-compare-fail`` gates are not applied unless
    ``--sadl-gate-partial`` (``gated``); the gates it did not apply are ``ungated``.

    An older file has no ``scope``: :attr:`Results.scope` is then ``None`` (not known)."""

    collected: int | None = None
    selected: int | None = None
    run: int | None = None
    recorded: int | None = None
    reasons: list[str] = field(default_factory=list)
    gated: bool = True
    ungated: list[str] = field(default_factory=list)
    #: the combined runs' count, for a file ``sadl combine`` made (``None``: one run)
    runs: int | None = None

    @property
    def partial(self) -> bool:
        return bool(self.reasons)

    def to_dict(self) -> JSONObject:
        out: JSONObject = {
            "partial": self.partial,
            "collected": self.collected,
            "selected": self.selected,
            "run": self.run,
            "recorded": self.recorded,
            "reasons": list[JSON](self.reasons),
            "gated": self.gated,
            "ungated": list[JSON](self.ungated),
        }
        if self.runs is not None:
            out["runs"] = self.runs
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Scope:
        gated = _bool(data.get("gated"))
        return cls(
            collected=_int(data.get("collected")),
            selected=_int(data.get("selected")),
            run=_int(data.get("run")),
            recorded=_int(data.get("recorded")),
            reasons=_strs(data.get("reasons")),
            gated=True if gated is None else gated,
            ungated=_strs(data.get("ungated")),
            runs=_int(data.get("runs")),
        )


@dataclass
class Results:
    """A run's results: what every report renders (:meth:`from_dict` reads a results
    document back into the same types, :meth:`to_dict` is its JSON form)."""

    created: str | None
    version: str | None
    model: ModelInfo
    config: RunConfig
    thresholds: dict[str, float]
    metrics: dict[str, Metric]
    layers: list[LayerRow]
    groups: list[GroupRow]
    tests: list[TestRow]
    #: per input, in the run's order: ``test`` (its test's index), ``pred``, each score, ``label``
    inputs: dict[str, list[JSON]]
    top_inputs: list[TopInput]
    failures: list[Failure] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: tests whose inputs never reached the results (xdist crash)
    missing: list[MissingTest] = field(default_factory=list)
    # "does surprise predict this model's mistakes" (pytest_sadl.criteria.mistakes), when tests gave labels
    mistakes: Mistakes | None = None
    #: how well each score tells each group from in-distribution inputs (AUROC, AUPR,
    #: FPR@95; :mod:`pytest_sadl.criteria.detection`); ``None``: no per-input score or no group
    ood: Ood | None = None
    #: tests whose inputs were measured on a changed model (fit, set_weights during the
    #: session), left out of every metric
    stale: list[StaleTest] = field(default_factory=list)
    #: what part of the suite the run measured (``None``: an older file does not say)
    scope: Scope | None = None
    #: each test's covered targets per metric (``sadl combine``, ``sadl minimize``, a
    #: partial run's comparison): see :mod:`pytest_sadl.covered`; ``None``: not recorded
    covered: JSONObject | None = None

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def n_inputs(self) -> int:
        return len(self.inputs.get("test", []))

    def metric(self, name: str) -> Metric | None:
        """The ``metrics`` entry of ``name``, or ``None`` when the run has none."""
        return self.metrics.get(name)

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = _clean(
            {
                "schema": SCHEMA,
                "version": VERSION,
                "created": self.created,
                "pytest_sadl_version": self.version,
                "model": self.model.to_dict(),
                "config": self.config.to_dict(),
                "thresholds": self.thresholds,
                "metrics": {k: m.to_dict() for k, m in self.metrics.items()},
                "layers": [r.to_dict() for r in self.layers],
                "groups": [r.to_dict() for r in self.groups],
                "tests": [r.to_dict() for r in self.tests],
                "inputs": self.inputs,
                "top_inputs": [r.to_dict() for r in self.top_inputs],
                **({"mistakes": self.mistakes.to_dict()} if self.mistakes is not None else {}),
                **({"ood": self.ood.to_dict()} if self.ood is not None else {}),
                **({"scope": self.scope.to_dict()} if self.scope is not None else {}),
                **({"covered": self.covered} if self.covered is not None else {}),
                "outcome": {
                    "passed": self.passed,
                    "failures": [asdict(f) for f in self.failures],
                    "warnings": list(self.warnings),
                    "missing": [m.to_dict() for m in self.missing],
                    "stale": [m.to_dict() for m in self.stale],
                },
            }
        )
        return doc

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Results:
        """The results of a results document (what
        :func:`pytest_sadl.resultsfile.load_results` returns, already validated).

        Every section but ``metrics`` may be absent (an older or a smaller file): it reads
        as empty. Fields this version does not know are ignored; the metrics a file does
        not have are simply not in :attr:`metrics`."""
        outcome = _obj(data.get("outcome"))
        mistakes = data.get("mistakes")
        ood = data.get("ood")
        scope = data.get("scope")
        covered = data.get("covered")
        thresholds = {str(k): f for k, v in _obj(data.get("thresholds")).items() if (f := _float(v)) is not None}
        return cls(
            created=_str(data.get("created")),
            version=_str(data.get("pytest_sadl_version")),
            model=ModelInfo.from_dict(_obj(data.get("model"))),
            config=RunConfig.from_dict(_obj(data.get("config"))),
            thresholds=thresholds,
            metrics={str(k): Metric.from_dict(v) for k, v in _obj(data.get("metrics")).items() if isinstance(v, dict)},
            layers=[LayerRow.from_dict(r) for r in _rows(data.get("layers"))],
            groups=[GroupRow.from_dict(r) for r in _rows(data.get("groups"))],
            tests=[TestRow.from_dict(r) for r in _rows(data.get("tests"))],
            inputs={str(k): [_clean(x) for x in v] for k, v in _obj(data.get("inputs")).items() if isinstance(v, list)},
            top_inputs=[TopInput.from_dict(r) for r in _rows(data.get("top_inputs"))],
            failures=[Failure.from_dict(f) for f in _rows(outcome.get("failures"))],
            warnings=_strs(outcome.get("warnings")),
            missing=[MissingTest.from_dict(m) for m in _rows(outcome.get("missing"))],
            mistakes=Mistakes.from_dict(mistakes) if isinstance(mistakes, Mapping) else None,
            ood=Ood.from_dict(ood) if isinstance(ood, Mapping) else None,
            stale=[StaleTest.from_dict(m) for m in _rows(outcome.get("stale"))],
            scope=Scope.from_dict(scope) if isinstance(scope, Mapping) else None,
            covered=dict(covered) if isinstance(covered, Mapping) else None,
        )


def _rows(value: object) -> list[Mapping[str, object]]:
    """The objects of a list of rows (anything else in it skipped)."""
    if not isinstance(value, (list, tuple)):
        return []
    return [r for r in value if isinstance(r, Mapping)]


def _clean(obj: Any) -> Any:
    """JSON-safe: NaN and inf become null; NumPy scalars become Python numbers."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write ``data`` as JSON atomically and durably (:mod:`pytest_sadl.atomic`)."""
    from pytest_sadl.atomic import atomic_write_text

    return atomic_write_text(path, json.dumps(data, indent=1, allow_nan=False) + "\n")
