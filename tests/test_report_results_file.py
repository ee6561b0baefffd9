"""Results files from outside (a baseline, ``sadl report``'s input): hostile, broken or
type-confused files are one :class:`ResultsFileError` line naming the file and the field.

Example-based cases from the issue (a 400-digit number, nesting 200,000 deep, 1e308, -5
or 1e6 as a fraction, a number as a fingerprint), a sweep that puts a wrong type at every
field of a real file and renders it with every report, and Hypothesis properties: no
document of any shape makes the loader raise anything but ResultsFileError, and every
document the loader accepts renders.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pytest_sadl.errors import ResultsFileError
from pytest_sadl.report import badge as _badge
from pytest_sadl.report import compare as _compare
from pytest_sadl.report import html as _html
from pytest_sadl.report import markdown as _markdown
from pytest_sadl.results import SCHEMA, VERSION, Results
from pytest_sadl.resultsfile import (
    JSON_SCHEMA,
    MAX_FLOAT,
    MAX_INT,
    load_results,
    parse_json,
    validate_results,
)


def _typed(doc: Any) -> Results:
    """The renderers take typed results: a test's document (a fixture file, altered) read as a run's."""
    return doc if isinstance(doc, Results) else Results.from_dict(doc)


def compare(current: Any, baseline: Any) -> Any:
    return _compare.compare(_typed(current), _typed(baseline))


def render_html(doc: Any, **kw: Any) -> str:
    return _html.render_html(_typed(doc), **kw)


def render_markdown(doc: Any, **kw: Any) -> str:
    return _markdown.render_markdown(_typed(doc), **kw)


def render_badges(doc: Any) -> Any:
    return _badge.render_badges(_typed(doc))


DATA = Path(__file__).parent / "data"
RUN = DATA / "results-classifier.json"


def _doc() -> dict[str, Any]:
    return json.loads(RUN.read_text(encoding="utf-8"))


def _put(doc: dict[str, Any], path: tuple, value: Any) -> dict[str, Any]:
    """``doc`` with ``value`` at ``path`` (keys and list indices)."""
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


def _accepted_docs_render(doc: dict[str, Any]) -> bool:
    """Validate ``doc``; if it passes, render every report. False when it was refused."""
    try:
        validate_results(doc)
    except ResultsFileError as exc:
        assert "\n" not in str(exc)
        return False
    _render_all(doc)
    return True


def _refused(tmp_path: Path, text: str) -> str:
    path = tmp_path / "run.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ResultsFileError) as info:
        load_results(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message and len(message) < 400, message
    return message


def test_the_shipped_schema_is_valid_and_agrees_with_the_code():
    """The schema file in the package is a draft 2020-12 schema for this format's name
    and major version, with the numeric ranges the parser enforces, and the recorded
    results files validate against it with the plain validator as with ours."""
    import jsonschema

    assert JSON_SCHEMA["properties"]["schema"] == {"const": SCHEMA}
    assert JSON_SCHEMA["properties"]["version"]["minimum"] <= VERSION
    text = json.dumps(JSON_SCHEMA)
    assert f'"maximum": {MAX_INT}' in text and f'"maximum": {MAX_FLOAT!r}' in text

    jsonschema.Draft202012Validator.check_schema(JSON_SCHEMA)
    for name in ("results-classifier.json", "results-regression.json", "results-baseline.json"):
        jsonschema.validate(json.loads((DATA / name).read_text()), JSON_SCHEMA)  # the plain validator agrees
        load_results(DATA / name)


VALUE = '"value": 0.26'


@pytest.mark.parametrize(
    "replacement, message",
    [
        ('"value": ' + "9" * 400, "metrics.lsc.value must be a fraction in [0, 1], got 9999"),
        ('"value": 1e308', "metrics.lsc.value must be a fraction in [0, 1], got 1e+308"),
        ('"value": 1e999', "metrics.lsc.value must be a fraction in [0, 1], got inf"),
        ('"value": -5', "metrics.lsc.value must be a fraction in [0, 1], got -5"),
        ('"value": 1e6', "metrics.lsc.value must be a fraction in [0, 1], got 1000000.0"),
        ('"value": NaN', "NaN is not allowed"),
        ('"value": -Infinity', "-Infinity is not allowed"),
        ('"value": ' + "9" * 5000, "Exceeds the limit (4300 digits)"),
        ('"value": "26%"', "metrics.lsc.value must be a number or null, got a string '26%'"),
    ],
)
def test_hostile_numbers_name_the_field(tmp_path, replacement, message):
    text = RUN.read_text(encoding="utf-8")
    assert VALUE in text
    assert message in _refused(tmp_path, text.replace(VALUE, replacement, 1))


def test_deep_nesting_is_refused_before_parsing(tmp_path):
    deep = '{"schema": "pytest-sadl/results", "version": 1, "metrics": {}, "x": ' + "[" * 200_000 + "]" * 200_000 + "}"
    assert "nested more than 32 levels deep" in _refused(tmp_path, deep)
    # brackets inside strings (escaped quotes too) do not count
    doc = _doc()
    doc["tests"][0]["nodeid"] = 'test_x["' + "[" * 100 + '\\"' + "{" * 100 + '"]'
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert load_results(path)["tests"][0]["nodeid"] == doc["tests"][0]["nodeid"]


@pytest.mark.parametrize(
    "where, value, message",
    [
        (("model", "fingerprint"), 12345, "model.fingerprint must be a string or null, got an integer 12345"),
        (("groups", 0, "name"), {"a": 1}, "groups[0].name must be a string, got an object {'a': 1}"),
        (("layers", 0, "nc"), "x", "layers[0].nc must be a number or null, got a string 'x'"),
        (("config", "sa_layers"), 3, "config.sa_layers must be a list, got an integer 3"),
        (("inputs", "lsa", 7), [1], "inputs.lsa[7] must be a number or null, got a list [1]"),
        (("thresholds", "lsc"), 300, "thresholds.lsc must be in [0, 100], got 300"),
        (("top_inputs", 0, "image", "pixels", 3), 256, "top_inputs[0].image.pixels[3] must be in [0, 255], got 256"),
        (("tests", 2, "inputs"), -1, "tests[2].inputs must be a count (an integer >= 0), got -1"),
    ],
)
def test_type_confused_fields_are_named(tmp_path, where, value, message):
    assert message in _refused(tmp_path, json.dumps(_put(_doc(), where, value)))


def test_a_fifo_or_a_directory_is_refused_without_reading(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    with pytest.raises(ResultsFileError, match="not a regular file"):
        load_results(fifo)  # would block forever if opened
    with pytest.raises(ResultsFileError, match="is a directory"):
        load_results(tmp_path)


def _leaves(node: Any, path: tuple = ()) -> Iterator[tuple]:
    """Every field of a document, a list's items by its last one (the renderers read them
    alike; the last is the one a first-item shortcut would miss)."""
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(node, list) and node:
        yield from _leaves(node[-1], (*path, len(node) - 1))


def _render_all(doc: dict[str, Any]) -> None:
    render_html(doc, comparison=compare(doc, _doc()))
    render_markdown(doc, comparison=compare(_doc(), doc))
    render_badges(doc)


def test_every_field_with_a_wrong_type_is_refused_or_renders():
    """What the loader accepts, every report renders: no TypeError deep in a template."""
    original = _doc()
    # _leaves visits a list through its last item: the inputs shown with their thumbnails
    # (2,900 of the document's 6,200 values) are cut to the last two, which keeps every
    # field and halves the cost of the ~1,100 documents validated and rendered below
    original["top_inputs"] = original["top_inputs"][-2:]
    refused = rendered = 0
    wrongs = ("x", {"a": 1}, -5, None)
    # each field gets two of the four kinds of wrong value, taken in turn, so that every kind
    # meets every part of the document (half the ~1,100 documents of all four per field)
    for i, path in enumerate(list(_leaves(original))[1:]):
        for wrong in (wrongs[i % 4], wrongs[(i + 2) % 4]):
            if _accepted_docs_render(_put(copy.deepcopy(original), path, wrong)):
                rendered += 1
            else:
                refused += 1
    assert refused > 75 and rendered > 15  # both branches were exercised


# ------------------------------------------------------------------ properties

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=False),
    st.text(max_size=8),
)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=20,
)
_fields = st.sampled_from(
    [
        ("metrics", "lsc", "value"),
        ("metrics", "nc"),
        ("model",),
        ("model", "fingerprint"),
        ("groups",),
        ("groups", 0),
        ("groups", 0, "name"),
        ("groups", 0, "cumulative"),
        ("tests", 0, "new"),
        ("tests", 0, "lsa_max"),
        ("config", "lsc"),
        ("config", "lsc", "upper"),
        ("inputs", "lsa"),
        ("inputs", "test", 0),
        ("top_inputs", 0, "image"),
        ("layers", 1),
        ("thresholds",),
        ("outcome", "warnings"),
        ("outcome", "missing"),
        ("version",),
    ]
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=_fields, value=_json)
@example(field=("groups", 0, "cumulative"), value={"\n": False})  # a key with a newline, named in one line
def test_property_any_value_anywhere_is_refused_or_renders(field, value):
    _accepted_docs_render(_put(_doc(), field, value))


@settings(max_examples=200, deadline=None)
@given(
    text=st.one_of(st.text(max_size=200), _json.map(json.dumps), st.integers(1, 3000).map(lambda n: "[" * n + "]" * n))
)
def test_property_parse_json_raises_only_results_file_error(text):
    try:
        parse_json(text)
    except ResultsFileError as exc:
        assert "\n" not in str(exc)


@pytest.mark.parametrize("command", ["report", "compare"])
def test_sadl_report_and_compare_on_a_hostile_file_exit_2_with_one_line(tmp_path, capsys, command):
    from pytest_sadl.cli.main import main

    bad = tmp_path / "bad.json"
    bad.write_text(RUN.read_text(encoding="utf-8").replace(VALUE, '"value": ' + "9" * 400, 1), encoding="utf-8")
    argv = (
        ["report", str(bad), "--html", str(tmp_path / "out")]
        if command == "report"
        else ["compare", str(RUN), str(bad)]
    )
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{bad}: metrics.lsc.value must be a fraction in [0, 1]" in err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ size cap, unknown metrics


def test_the_size_cap_is_64_mib_and_the_environment_raises_it(tmp_path, monkeypatch):
    from pytest_sadl.resultsfile import MAX_MB_ENV, max_bytes

    monkeypatch.delenv(MAX_MB_ENV, raising=False)
    assert max_bytes() == 64 << 20
    big = tmp_path / "big.json"  # a valid file padded past 1 MiB with the whitespace JSON allows
    big.write_text(RUN.read_text(encoding="utf-8") + " " * (3 << 19), encoding="utf-8")
    monkeypatch.setenv(MAX_MB_ENV, "1")
    with pytest.raises(ResultsFileError) as err:
        load_results(big)
    assert str(err.value) == (
        f"{big}: larger than 1 MiB, the most a results file read may be; "
        f"raise the cap with {MAX_MB_ENV}=<MiB> if the file is one you trust"
    )
    monkeypatch.setenv(MAX_MB_ENV, "2")
    assert load_results(big)["schema"] == SCHEMA
    monkeypatch.setenv(MAX_MB_ENV, "lots")
    with pytest.raises(ResultsFileError, match=f"^{MAX_MB_ENV}='lots': expected a number of MiB"):
        load_results(big)


def test_a_baseline_over_the_cap_is_one_line_in_sadl_compare(tmp_path, capsys, monkeypatch):
    from pytest_sadl.cli.main import main

    big = tmp_path / "big.json"
    big.write_text(RUN.read_text(encoding="utf-8") + " " * (3 << 19), encoding="utf-8")
    monkeypatch.setenv("SADL_MAX_RESULTS_MB", "1")
    assert main(["compare", str(RUN), str(big)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"sadl compare: error: {big}: larger than 1 MiB"), err


def _with_unknown_metric(tmp_path: Path) -> Path:
    doc = json.loads(RUN.read_text(encoding="utf-8"))
    doc["metrics"]["../../../pwned\x1b[2J"] = copy.deepcopy(doc["metrics"]["lsc"])
    doc["groups"][0]["cumulative"]["zz"] = 0.5
    path = tmp_path / "unknown.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_unknown_metric_names_are_one_warning_line_and_ignored(tmp_path, capsys):
    from pytest_sadl.cli.main import main

    path = _with_unknown_metric(tmp_path)
    notes: list[str] = []
    assert load_results(path, notes)["schema"] == SCHEMA
    assert notes == [
        f"{path}: unknown metric name(s) '../../../pwned\\x1b[2J', 'zz', ignored; this pytest-sadl knows "
        + ", ".join(__import__("pytest_sadl.criteria.registry", fromlist=["METRICS"]).METRICS)
        + " (a newer pytest-sadl's file? upgrade to read them)"
    ]
    assert load_results(RUN, notes) and len(notes) == 1  # a file of known metrics adds nothing
    assert main(["compare", str(RUN), str(path)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [f"sadl compare: warning: {notes[0]}"]
    assert main(["report", str(path), "--markdown", str(tmp_path / "s.md")]) == 0
    assert capsys.readouterr().err.splitlines() == [f"sadl report: warning: {notes[0]}"]
