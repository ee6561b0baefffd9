"""The HTML report: golden files, escaping, self-containment, and the numbers it shows.

Golden files live in ``tests/golden/``; after an intended change of the page, regenerate
them with ``SADL_REGEN_GOLDEN=1 python -m pytest tests/test_report_html.py`` and review
the diff. The fixture results are ``tests/data/results-*.json`` (made by
``tests/data/make_results.py``).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import re
import struct
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from pytest_sadl.criteria.registry import CRITERIA
from pytest_sadl.report import compare as _compare
from pytest_sadl.report import html as _html
from pytest_sadl.report.html import HISTOGRAM_BINS
from pytest_sadl.results import Results, Thumbnail
from pytest_sadl.resultsfile import load_results


def _typed(doc: Any) -> Results:
    """The renderers take typed results: a test's document (a fixture file, altered) read as a run's."""
    return doc if isinstance(doc, Results) else Results.from_dict(doc)


def compare(current: Any, baseline: Any) -> Any:
    return _compare.compare(_typed(current), _typed(baseline))


def build_context(doc: Any, **kw: Any) -> dict[str, Any]:
    return _html.build_context(_typed(doc), **kw)


def render_html(doc: Any, **kw: Any) -> str:
    return _html.render_html(_typed(doc), **kw)


def write_html(doc: Any, directory: Any, **kw: Any) -> Path:
    return _html.write_html(_typed(doc), directory, **kw)


def render_markdown(doc: Any, **kw: Any) -> str:
    from pytest_sadl.report.markdown import render_markdown

    return render_markdown(_typed(doc), **kw)


def render_terminal(doc: Any, **kw: Any) -> list[str]:
    from pytest_sadl.report.terminal import render_terminal

    return render_terminal(_typed(doc), **kw)


def render_badges(doc: Any) -> Any:
    from pytest_sadl.report.badge import render_badges

    return render_badges(_typed(doc))


DATA = Path(__file__).parent / "data"
GOLDEN = Path(__file__).parent / "golden"
SCRIPT_GROUP = "<script>alert('group')</script>"
SCRIPT_TEST = "tests/test_xss.py::test_name[<script>alert('id')</script>]"


def _load(name: str) -> dict[str, Any]:
    return load_results(DATA / f"results-{name}.json")


@pytest.fixture(scope="module")
def classifier() -> dict[str, Any]:
    return _load("classifier")


@pytest.fixture(scope="module")
def baseline() -> dict[str, Any]:
    return _load("baseline")


@pytest.fixture(scope="module")
def regression() -> dict[str, Any]:
    return _load("regression")


def check_golden(name: str, text: str) -> None:
    """Compare ``text`` with ``tests/golden/<name>``; write it when SADL_REGEN_GOLDEN=1."""
    path = GOLDEN / name
    if os.environ.get("SADL_REGEN_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"{path} is missing; create it with SADL_REGEN_GOLDEN=1"
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        a, b = expected.splitlines(), text.splitlines()
        # strict=False: the texts may differ in length; then the first line past the shorter one
        line = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        pytest.fail(
            f"{name} differs from the golden file at line {line + 1}:\n"
            f"  golden: {a[line] if line < len(a) else '<end>'!r}\n"
            f"  now:    {b[line] if line < len(b) else '<end>'!r}\n"
            "If the change is intended, regenerate with SADL_REGEN_GOLDEN=1 and review the diff."
        )


# ------------------------------------------------------------------ golden files

TEMPLATES = Path(__file__).resolve().parents[1] / "pytest_sadl" / "report" / "templates"


def without_assets(html: str) -> str:
    """The page with its inline stylesheet and script (and the script's CSP hash) cut out.

    They are the template files verbatim (checked below) and are exercised in the
    browser tests; the golden files hold what depends on the results.
    """
    html = re.sub(r"<style>.*?</style>", "<style>/* report.css */</style>", html, count=1, flags=re.S)
    html = re.sub(r"<script>.*?</script>", "<script>/* report.js */</script>", html, count=1, flags=re.S)
    return re.sub(r"'sha256-[A-Za-z0-9+/=]+'", "'sha256-(report.js)'", html, count=1)


def test_golden_classifier_with_baseline(classifier, baseline):
    html = render_html(classifier, comparison=compare(classifier, baseline))
    check_golden("report-classifier.html", without_assets(html))


def test_golden_regression(regression):
    check_golden("report-regression.html", without_assets(render_html(regression)))


def test_page_embeds_the_stylesheet_and_script_verbatim(classifier):
    html = render_html(classifier)
    css = _html._env().get_template("report.css").render(colours=_html.colours())
    js = (TEMPLATES / "report.js").read_text(encoding="utf-8")
    assert f"<style>\n{css}</style>" in html
    for criterion in CRITERIA:  # every criterion's colour, from the registry: its chart line is visible
        assert criterion.colour is not None or criterion.kind == "count", criterion.name
        if criterion.colour is not None:
            assert f"--c-{criterion.name}: {criterion.colour.light};" in css
            assert f".m-{criterion.name} {{ stroke: var(--c-{criterion.name});" in css
    assert f"<script>{js}</script>" in html


def test_rendering_is_deterministic(classifier):
    assert render_html(classifier) == render_html(copy.deepcopy(classifier))


# ------------------------------------------------------------------ escaping


class _Collect(HTMLParser):
    """Every element, attribute and text node of a page, as the browser would parse it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        (self.scripts if self._in_script else self.text).append(data)


def _parse(html: str) -> _Collect:
    p = _Collect()
    p.feed(html)
    p.close()
    return p


def test_script_in_test_id_and_group_is_text_never_markup(classifier):
    html = render_html(classifier)
    page = _parse(html)
    scripts = [t for t, _ in page.tags if t == "script"]
    assert scripts == ["script"], "the page has exactly one script element, its own"
    text = "".join(page.text)
    assert SCRIPT_GROUP in text
    assert SCRIPT_TEST in text
    # Nowhere raw: not in text, not in attributes (title=, data-group=, aria-label=).
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(&#39;group&#39;)&lt;/script&gt;" in html
    for _, attrs in page.tags:
        for value in attrs.values():
            assert value is None or "<script" not in value or value == SCRIPT_GROUP


def test_hostile_names_everywhere_are_escaped(classifier):
    doc = copy.deepcopy(classifier)
    evil = '"><img src=x onerror=alert(1)>'
    doc["model"]["name"] = evil
    doc["model"]["source"] = evil
    doc["config"]["sa_layers"] = [evil]
    doc["layers"][0]["name"] = evil
    doc["outcome"]["warnings"] = [evil]
    doc["tests"][0]["outcome"] = evil
    html = render_html(doc)
    page = _parse(html)
    assert all(tag != "img" or attrs.get("src", "").startswith("data:image/png;base64,") for tag, attrs in page.tags), (
        "an injected <img> became an element"
    )
    assert not any(k.startswith("on") for _, attrs in page.tags for k in attrs)
    assert evil in "".join(page.text)


# ------------------------------------------------------------------ self-contained


def test_page_is_self_contained(classifier, baseline):
    html = render_html(classifier, comparison=compare(classifier, baseline))
    page = _parse(html)
    for tag, attrs in page.tags:
        assert tag not in ("link", "iframe", "object", "embed", "base"), tag
        for key in ("src", "href", "action", "srcset", "poster"):
            value = attrs.get(key)
            if value is not None:
                assert value.startswith(("#", "data:image/png;base64,")), (tag, key, value[:40])
    css = html[html.index("<style>") : html.index("</style>")]
    assert "@import" not in css and "url(" not in css
    assert not re.search(r"\bhttps?://", "".join(page.scripts))
    assert "fetch(" not in html and "XMLHttpRequest" not in html


def test_csp_allows_exactly_the_page_script(classifier):
    html = render_html(classifier)
    page = _parse(html)
    csp = next(a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert "default-src 'none'" in csp and "img-src data:" in csp
    script = "".join(page.scripts)
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp
    assert "unsafe-inline" not in csp.split("script-src", 1)[1].split(";", 1)[0]


# ------------------------------------------------------------------ writing


def test_write_html_writes_index_atomically(tmp_path, classifier):
    out = write_html(classifier, tmp_path / "report" / "nested")
    assert out == tmp_path / "report" / "nested" / "index.html"
    assert out.read_text(encoding="utf-8") == render_html(classifier)
    assert sorted(p.name for p in out.parent.iterdir()) == ["index.html"], "a temporary file was left"
    again = write_html(classifier, out.parent)
    assert again == out and sorted(p.name for p in out.parent.iterdir()) == ["index.html"]


def test_write_html_into_a_file_is_a_clear_error(tmp_path, classifier):
    target = tmp_path / "report.html"
    target.write_text("x")
    with pytest.raises(ValueError, match="is a file; the HTML report needs a directory"):
        write_html(classifier, target)


# ------------------------------------------------------------------ numbers on the page


def test_cards_show_value_threshold_and_status(classifier):
    cards = {c["metric"]: c for c in build_context(classifier)["cards"]}
    assert list(cards) == ["lsc", "dsc", "mdsc", "nc", "kmnc", "nbc", "snac"]
    assert cards["lsc"]["status"] == "fail" and cards["lsc"]["threshold"] == 30.0
    assert cards["nc"]["status"] == "pass" and cards["nc"]["threshold"] == 40.0
    assert cards["dsc"]["status"] == "none"
    html = render_html(classifier)
    lsc = html[html.index('id="card-lsc"') : html.index('id="card-dsc"')]
    assert "26.00%" in lsc and "threshold 30.00%" in lsc and "fail" in lsc
    assert "260 of 1,000 buckets" in lsc
    assert "FAILED · 1 threshold missed" in html


def test_regression_model_shows_dsa_and_dsc_as_not_applicable(regression):
    ctx = build_context(regression)
    cards = {c["metric"]: c for c in ctx["cards"]}
    assert cards["dsc"]["status"] == "n/a" and cards["dsc"]["value"] is None
    assert [s["key"] for s in ctx["surprise"]] == ["lsa", "mdsa"]
    keys = [c["key"] for c in ctx["tests"]["columns"]]
    assert "dsa_mean" not in keys and "new.dsc" not in keys
    assert ctx["top"] and [t["by"] for t in ctx["top"]] == ["lsa", "mdsa"]
    assert all(e["src"] is None for e in ctx["top"][0]["entries"]), "regression inputs are not images"
    html = render_html(regression)
    assert "does not apply to this model (regression)" in html
    assert "PASSED · all thresholds met" in html


def test_histograms_count_every_input_once_and_mark_those_above_upper(classifier):
    surprise = {s["key"]: s for s in build_context(classifier)["surprise"]}
    for key, metric in (("lsa", "lsc"), ("dsa", "dsc")):
        s = surprise[key]
        upper = classifier["config"][metric]["upper"]
        values = classifier["inputs"][key]
        rows = s["rows"]
        assert rows[0]["all"] and [r["name"] for r in rows[1:]] == [g["name"] for g in classifier["groups"]]
        whole = rows[0]["chart"]
        assert len(whole["bars"]) == HISTOGRAM_BINS
        assert sum(b["count"] for b in whole["bars"]) + whole["below"]["count"] + whole["above"]["count"] == len(values)
        assert whole["above"]["count"] == sum(v > upper for v in values) == classifier["metrics"][metric]["above"]
        # per group: the inputs of the tests of that group
        for row in rows[1:]:
            tests = {i for i, t in enumerate(classifier["tests"]) if t["group"] == row["name"]}
            mine = [v for v, t in zip(values, classifier["inputs"]["test"], strict=True) if t in tests]
            chart = row["chart"]
            assert chart["n"] == len(mine)
            assert chart["above"]["count"] == sum(v > upper for v in mine)
            # each bar (lo, hi]: recount naively
            width = upper / HISTOGRAM_BINS
            for i, bar in enumerate(chart["bars"]):
                lo, hi = i * width, (i + 1) * width
                assert bar["count"] == sum(lo < v <= hi for v in mine), (row["name"], i)
    html = render_html(classifier)
    assert "&gt;120: 2" in html and "2 above 120" in html


def test_histogram_bucket_edges_follow_lower_upper_semantics():
    from pytest_sadl.report.html import _histogram

    chart = _histogram([0.0, 0.5, 1.0, 1.0000001, 2.0, 2.5], lower=0.0, upper=2.0, bins=2)
    assert chart["below"]["count"] == 1  # 0.0 is not in (0, 2]
    assert [b["count"] for b in chart["bars"]] == [2, 2]  # (0, 1] = {0.5, 1.0}; (1, 2] = {1.0000001, 2.0}
    assert chart["above"]["count"] == 1


def test_table_vi_rows_are_cumulative_with_gains(classifier):
    ctx = build_context(classifier)
    rows = ctx["group_rows"]
    assert [r["name"] for r in rows] == [g["name"] for g in classifier["groups"]]
    labels = [m["key"] for m in ctx["group_metrics"]]
    for i, (row, group) in enumerate(zip(rows, classifier["groups"], strict=True)):
        for m, cell in zip(labels, row["cells"], strict=True):
            assert cell["value"] == group["cumulative"][m]
            if i:
                assert cell["gain"] == pytest.approx(
                    group["cumulative"][m] - classifier["groups"][i - 1]["cumulative"][m]
                )
    chart = ctx["chart"]
    assert [line["metric"] for line in chart["lines"]] == labels
    for line in chart["lines"]:
        ys = [p["y"] for p in line["points"]]
        assert ys == sorted(ys, reverse=True), "cumulative coverage never falls, so y never rises"


def test_static_totals_match_a_naive_sum(classifier):
    tests = build_context(classifier)["tests"]
    keys = [c["key"] for c in tests["columns"]]
    totals = dict(zip(keys, tests["totals"], strict=True))
    rows = classifier["tests"]
    assert totals["inputs"] == sum(t["inputs"] for t in rows) == len(classifier["inputs"]["lsa"])
    assert totals["lsa_max"] == max(t["lsa_max"] for t in rows if t["lsa_max"] is not None)
    # the inputs-weighted mean of per-test means is the mean over all inputs
    assert totals["lsa_mean"] == pytest.approx(
        sum(classifier["inputs"]["lsa"]) / len(classifier["inputs"]["lsa"]), abs=1e-3
    )
    for m in ("lsc", "dsc", "nc", "kmnc", "nbc", "snac"):
        assert totals[f"new.{m}"] == sum(t["new"][m] for t in rows)
    # new LSC buckets over all tests add up to the buckets covered
    assert totals["new.lsc"] == classifier["metrics"]["lsc"]["covered"]
    html = render_html(classifier)
    assert "Total (15 tests)" in html


def test_layers_least_covered_first(classifier):
    layers = build_context(classifier)["layers"]
    ncs = [lay["nc"] for lay in layers]
    assert ncs == sorted(ncs) and len(layers) == len(classifier["layers"])
    assert layers[0]["name"] == min(classifier["layers"], key=lambda lay: lay["nc"])["name"]


def _decode_png(url: str) -> tuple[int, int, int, bytes]:
    """A naive PNG decoder (filter type 0 only, as the report writes) for the test."""
    data = base64.b64decode(url.split(",", 1)[1])
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert header is not None
    width, height, depth, color = header[:4]
    channels = {0: 1, 4: 2, 2: 3, 6: 4}[color]
    raw = zlib.decompress(idat)
    row = width * channels
    pixels = b""
    for r in range(height):
        line = raw[r * (row + 1) : (r + 1) * (row + 1)]
        assert line[0] == 0
        pixels += line[1:]
    return width, height, channels, pixels


def test_thumbnails_are_the_recorded_pixels(classifier):
    top = build_context(classifier)["top"]
    assert [t["by"] for t in top] == ["lsa", "dsa", "mdsa"]
    by_lsa = top[0]["entries"]
    assert [e["rank"] for e in by_lsa] == list(range(1, 13))
    src = [t for t in classifier["top_inputs"] if t["by"] == "lsa"]
    for entry, item in zip(by_lsa, src, strict=True):
        w, h, c, pixels = _decode_png(entry["src"])
        assert (w, h, c) == (8, 8, 1)
        assert list(pixels) == item["image"]["pixels"]
        assert entry["nodeid"] == classifier["tests"][item["test"]]["nodeid"]
        assert entry["pred"] == item["pred"]


def test_rgb_thumbnail_and_malformed_images():
    from pytest_sadl.report.html import _thumbnail as thumbnail

    def _thumbnail(image: Any) -> str | None:
        return thumbnail(None if image is None else Thumbnail.from_dict(image))

    rgb = list(range(2 * 3 * 3))
    w, h, c, pixels = _decode_png(_thumbnail({"width": 2, "height": 3, "channels": 3, "pixels": rgb}))
    assert (w, h, c) == (2, 3, 3) and list(pixels) == rgb
    assert _thumbnail({"width": 8, "height": 8, "channels": 1, "pixels": [0] * 63}) is None
    assert _thumbnail({"width": 1, "height": 1, "channels": 1, "pixels": [256]}) is None
    assert _thumbnail({"width": 1, "height": 1, "channels": 5, "pixels": [0] * 5}) is None
    assert _thumbnail(None) is None


def test_hints_say_what_would_improve_the_tests(classifier):
    hints = build_context(classifier)["hints"]
    assert hints[0].startswith("Threshold missed: LSC 26.00% is below")
    assert any("2 inputs had LSA above the upper bound 120" in h for h in hints)
    assert any(h.startswith("Layer dense is the least covered") for h in hints)
    # fgsm's gains (Table VI) are the largest after the first group, for LSC and DSC
    gains = {
        g["name"]: g["cumulative"]["lsc"] - p["cumulative"]["lsc"]
        for p, g in zip(classifier["groups"], classifier["groups"][1:], strict=False)
    }  # consecutive pairs: one shorter
    assert max(gains, key=gains.get) == "fgsm"
    assert (
        "Group fgsm added the most LSC (+8.6 points), DSC (+8.3 points) and MDSC (+12.0 points) after the first group"
        in " ".join(hints)
    )


def test_hint_for_tests_and_groups_that_add_nothing(classifier):
    doc = copy.deepcopy(classifier)
    for t in doc["tests"]:
        if t["group"] == "deeptest":
            t["new"] = {k: 0 for k in t["new"]}
    doc["groups"][2]["cumulative"] = dict(doc["groups"][1]["cumulative"])
    hints = build_context(doc)["hints"]
    assert any("4 of 15 tests covered no new bucket or neuron" in h for h in hints), hints
    assert any(h.startswith("Group deeptest adds less than 1 point") for h in hints), hints
    html = render_html(doc)
    assert html.count('class="idle"') == 4


# ------------------------------------------------------------------ tolerance


def test_minimal_document_renders(tmp_path):
    doc = {"schema": "pytest-sadl/results", "version": 1, "metrics": {"lsc": {"value": 0.25, "applicable": True}}}
    html = render_html(doc)
    assert "25.00%" in html and "PASSED" in html
    for section in ('id="surprise"', 'id="groups"', 'id="tests"', 'id="neurons"', 'id="inputs"'):
        assert section not in html
    write_html(doc, tmp_path)


def test_absent_optional_fields_are_tolerated(classifier):
    doc = copy.deepcopy(classifier)
    for key in ("inputs", "top_inputs", "layers", "thresholds", "outcome", "created", "config"):
        doc.pop(key)
    for t in doc["tests"]:
        t.pop("new")
        t.pop("dsa_max")
    for g in doc["groups"]:
        g.pop("metrics")
    doc["metrics"]["nc"] = {"value": None, "applicable": True}
    html = render_html(doc)
    assert "Total (15 tests)" in html and 'id="surprise"' not in html
    json.dumps(build_context(doc)["tests"])  # plain data


def _variants(doc: dict[str, Any]):
    """The document with one field at a time removed, or set to null, at every level the
    reports read: each is still a valid version-1 document for a tolerant reader."""
    for key in list(doc):
        if key in ("schema", "version", "metrics"):
            continue
        for mode in ("drop", "null"):
            d = copy.deepcopy(doc)
            if mode == "drop":
                del d[key]
            else:
                d[key] = None
            yield f"{mode} {key}", d
    sections = {k: v for k, v in doc.items() if isinstance(v, dict) and k != "metrics"}
    sections.update({f"metrics.{m}": e for m, e in doc["metrics"].items()})
    for name, section in sections.items():
        for key in section:
            for mode in ("drop", "null"):
                d = copy.deepcopy(doc)
                target = d
                for part in name.split("."):
                    target = target[part]
                if mode == "drop":
                    del target[key]
                else:
                    target[key] = None
                yield f"{mode} {name}.{key}", d
    for name in ("groups", "tests", "layers", "top_inputs"):
        for key in doc[name][0]:
            for mode in ("drop", "null"):
                d = copy.deepcopy(doc)
                for row in d[name]:
                    if mode == "drop":
                        row.pop(key, None)
                    else:
                        row[key] = None
                yield f"{mode} {name}[].{key}", d


def test_every_optional_field_may_be_absent_or_null(classifier, regression):

    def small(doc: dict[str, Any]) -> dict[str, Any]:
        # the same shape with fewer rows, so that ~400 renders stay fast
        d = copy.deepcopy(doc)
        d["tests"] = d["tests"][:4]
        d["groups"] = d["groups"][:1]
        d["inputs"] = {k: v[:40] for k, v in d["inputs"].items()}
        d["top_inputs"] = [dict(t, test=t["test"] % 4) for t in d["top_inputs"] if t["rank"] <= 2]
        return d

    count, failures = 0, []
    for doc in (small(classifier), small(regression)):
        for label, variant in _variants(doc):
            try:
                render_html(variant, comparison=compare(variant, doc))
                render_markdown(variant, comparison=compare(doc, variant))
                render_badges(variant)
            except Exception as exc:  # the list of failures is the point
                failures.append(f"{label}: {type(exc).__name__}: {exc}")
            count += 1
    assert failures == []
    assert count > 200


def test_mistakes_section_shows_the_figures_of_the_results(classifier, regression):
    ctx = build_context(classifier)
    found = classifier["mistakes"]
    m = ctx["mistakes"]
    assert [c["key"] for c in m["columns"]] == ["lsa", "dsa", "mdsa", "deepgini", "entropy", "margin"]
    assert [c["baseline"] for c in m["columns"]] == [False] * 3 + [True] * 3
    assert m["rows"][0]["values"] == [
        found["overall"]["auc"][k] for k in ("lsa", "dsa", "mdsa", "deepgini", "entropy", "margin")
    ]
    assert [r["name"] for r in m["rows"][1:]] == [g["name"] for g in found["groups"]]
    page = render_html(classifier)
    for text in found["overall"]["sentences"]:
        assert text.replace("'", "&#39;") in page
    assert f"{found['overall']['auc']['dsa']:.2f}" in page
    reg = build_context(regression)["mistakes"]
    assert reg["per"] == "spearman" and [c["key"] for c in reg["columns"]] == ["lsa", "mdsa"]
    assert "Spearman rank correlation" in render_html(regression)
    assert build_context({k: v for k, v in classifier.items() if k != "mistakes"})["mistakes"] is None


def test_nbc_card_says_what_a_corner_is(classifier):
    cards = {c["metric"]: c for c in build_context(classifier)["cards"]}
    assert cards["nbc"]["unit"] == "corners"
    assert "upper corner" in cards["nbc"]["explain"] and "lower corner" in cards["nbc"]["explain"]
    assert cards["nbc"]["explain"] in render_html(classifier)


def test_tests_that_fed_nothing_are_said_the_same_way_in_every_report(classifier):

    fed = sum(1 for t in classifier["tests"] if t["inputs"])
    phrase = (
        f"{fed} of {len(classifier['tests'])} marked tests fed the model ({len(classifier['tests']) - fed} fed nothing)"
    )
    assert fed < len(classifier["tests"])
    assert phrase in render_html(classifier)
    assert phrase in "\n".join(render_terminal(classifier))
    assert phrase in render_markdown(classifier)


def test_test_ids_wrap_between_parts_only():
    from pytest_sadl.report.html import _testid

    assert str(_testid("tests/test_a.py::test_recall_per_digit[1]")) == (
        'tests/<wbr>test_<wbr>a.py::<wbr>test_<wbr>recall_<wbr>per_<wbr>digit<wbr><span class="param">[1]</span>'
    )
    assert str(_testid("t.py::x[<b>]")) == 't.py::<wbr>x<wbr><span class="param">[&lt;b&gt;]</span>'


def test_a_mistakes_section_of_the_wrong_type_is_a_clear_error(classifier):
    from pytest_sadl.errors import ResultsFileError
    from pytest_sadl.resultsfile import validate_results

    bad = copy.deepcopy(classifier)
    bad["mistakes"] = [1, 2]
    with pytest.raises(ResultsFileError, match=r"mistakes must be an object or null, got a list \[1, 2\]"):
        validate_results(bad)


def many_layers(results: dict[str, Any], n: int = 200) -> dict[str, Any]:
    """``results`` with ``n`` coverage layers (as an EfficientNetB0's 206), their coverage
    decreasing with the index, so the least covered are the last ones."""
    out = copy.deepcopy(results)
    out["layers"] = [
        {
            "name": f"block{i // 10}_conv{i % 10}",
            "neurons": 16 + i,
            "nc": round(1 - i / (2 * n), 4),
            "kmnc": round(0.9 - i / (2 * n), 4),
            "nbc": 0.05,
            "snac": 0.1,
        }
        for i in range(n)
    ]
    return out


def test_a_hundred_layers_or_more_collapse_to_the_least_covered_with_search(classifier):
    html = render_html(many_layers(classifier))
    table = html[html.index('<table id="layers-table"') : html.index("</table>", html.index('id="layers-table"'))]
    rows = re.findall(r"<tr( hidden)?><td><code>([^<]+)</code>", table)
    assert len(rows) == 200
    shown = [name for hidden, name in rows if not hidden]
    # least covered first: NC falls with the index, so the last 20 layers lead, in that order
    assert shown == [f"block{i // 10}_conv{i % 10}" for i in range(199, 179, -1)]
    assert 'data-shown="20"' in table
    assert 'id="layers-filter"' in html and "Show all 200 layers" in html
    assert "20 of 200 layers shown" in html
    # below a hundred layers: every row shown, no controls
    few = render_html(many_layers(classifier, 99))
    assert 'id="layers-filter"' not in few and "<tr hidden><td><code>" not in few


def test_every_charted_criterion_has_its_colour_in_every_palette():
    # the cumulative chart draws every criterion that is a share; one without a colour
    # rule got an invisible line and black dots (MLSC, MMDSC and TKNC did)
    from pytest_sadl.criteria.registry import COUNT, METRICS

    css = _html._env().get_template("report.css").render(colours=_html.colours())
    palettes = css.count("--c-lsc:")
    assert palettes == 4  # light, dark by preference, dark by toggle, print
    for m in (m for m in METRICS if m not in COUNT):
        assert css.count(f"--c-{m}:") == palettes, m
        assert re.search(
            rf"^\.m-{m} \{{ stroke: var\(--c-{m}\); fill: var\(--c-{m}\); color: var\(--c-{m}\); \}}", css, re.M
        ), m
    assert 'svg polyline[class^="m-"] { fill: none; }' in css  # a line is never a filled shape


def test_count_cards_say_what_they_count_and_nlc_has_no_targets(classifier):
    try:
        from tests.test_report_terminal import _every_metric
    except ImportError:  # pragma: no cover - tests/ itself on sys.path (rootdir not)
        from test_report_terminal import _every_metric  # type: ignore[no-redef]

    html = render_html(_every_metric(classifier))
    text = " ".join(re.sub(r"<[^>]+>", " ", html).split())
    assert "3,644 of 12,312 inputs: distinct top-k patterns" in text
    assert "over 12,312 inputs (no targets)" in text and "0 of 12,312" not in text
