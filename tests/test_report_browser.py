"""The HTML report in a real browser: Debian's chromium, headless, driven by Playwright.

Never downloads a browser: it uses /usr/bin/chromium (``.ci/run`` installs it) and skips
with the reason when it is absent. Screenshots go to ``$SADL_TEST_ARTIFACTS`` when set
(CI uploads that directory), else to the test's tmp_path; the path is printed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_sadl.report import compare as _compare
from pytest_sadl.report import html as _html
from pytest_sadl.results import Results
from pytest_sadl.resultsfile import load_results


def _typed(doc: Any) -> Results:
    """The renderers take typed results: a test's document (a fixture file, altered) read as a run's."""
    return doc if isinstance(doc, Results) else Results.from_dict(doc)


def compare(current: Any, baseline: Any) -> Any:
    return _compare.compare(_typed(current), _typed(baseline))


def write_html(doc: Any, directory: Any, **kw: Any) -> Path:
    return _html.write_html(_typed(doc), directory, **kw)


CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DATA = Path(__file__).parent / "data"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)"
    ),
]

sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (pip install playwright)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    run = load_results(DATA / "results-classifier.json")
    base = load_results(DATA / "results-baseline.json")
    return write_html(run, tmp_path_factory.mktemp("report"), comparison=compare(run, base))


class Page:
    """A page of the report with everything it logged and requested."""

    def __init__(self, page: Any, url: str) -> None:
        self.page = page
        self.url = url
        self.console: list[str] = []
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("request", lambda r: self.requests.append(r.url))

        def dialog(d: Any) -> None:
            self.dialogs.append(d.message)
            d.dismiss()

        page.on("dialog", dialog)

    def goto(self) -> None:
        self.page.goto(self.url)
        self.page.wait_for_load_state("load")


def _open(browser: Any, report: Path, **context: Any) -> Page:
    ctx = browser.new_context(viewport={"width": 1280, "height": 800}, **context)
    page = Page(ctx.new_page(), report.as_uri())
    page.goto()
    return page


def _artifact_dir(tmp_path: Path) -> Path:
    d = Path(os.environ.get("SADL_TEST_ARTIFACTS") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


def _column(page: Any, key: str) -> list[str]:
    return page.eval_on_selector_all(
        "#tests-table tbody tr:not([hidden])",
        """(rows, key) => {
            const heads = [...document.querySelectorAll('#tests-table thead th')];
            const i = heads.findIndex(h => h.dataset.key === key);
            return rows.map(r => r.cells[i].getAttribute('data-v') ?? r.cells[i].textContent.trim());
        }""",
        key,
    )


def _totals(page: Any) -> dict[str, str]:
    return page.evaluate("""() => {
        const heads = [...document.querySelectorAll('#tests-table thead th')];
        const cells = [...document.querySelector('#tests-table tfoot tr').cells];
        return Object.fromEntries(heads.map((h, i) => [h.dataset.key, cells[i].textContent.trim()]));
    }""")


def test_loads_offline_without_errors_or_requests(browser, report, tmp_path):
    p = _open(browser, report)
    p.page.wait_for_timeout(200)
    assert p.errors == []
    assert [m for m in p.console if m.startswith(("error", "warning"))] == []
    assert all(u == p.url or u.startswith("data:") for u in p.requests), p.requests
    assert p.dialogs == [], "a <script> from a test id or group name ran"
    # the script ran (CSP hash accepted): controls shown, toggle visible
    assert p.page.is_visible("#tests-controls") and p.page.is_visible("#theme-toggle")
    assert p.page.text_content("#tests-count") == "15 of 15 tests shown"
    # the hostile names are on the page as text
    assert "<script>alert('group')</script>" in p.page.inner_text("#groups-table")
    # thumbnails decoded as images
    sizes = p.page.eval_on_selector_all("#inputs img", "imgs => imgs.map(i => i.naturalWidth)")
    assert sizes and set(sizes) == {8}
    shot = _artifact_dir(tmp_path) / "report-light.png"
    p.page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
    assert shot.stat().st_size > 10_000


def test_click_a_header_to_sort(browser, report):
    p = _open(browser, report)
    original = _column(p.page, "nodeid")
    p.page.click("#tests-table th[data-key='lsa_max'] button")
    values = [float(v) for v in _column(p.page, "lsa_max") if v != ""]
    assert values == sorted(values, reverse=True), "numbers sort largest first on the first click"
    assert p.page.get_attribute("#tests-table th[data-key='lsa_max']", "aria-sort") == "descending"
    # the skipped test (no inputs, no LSA) stays last
    assert _column(p.page, "lsa_max")[-1] == ""
    p.page.click("#tests-table th[data-key='lsa_max'] button")
    values = [float(v) for v in _column(p.page, "lsa_max") if v != ""]
    assert values == sorted(values)
    assert _column(p.page, "lsa_max")[-1] == ""
    p.page.click("#tests-table th[data-key='nodeid'] button")
    names = _column(p.page, "nodeid")
    assert names == sorted(original, key=str.lower)
    # the layer table sorts too
    p.page.click("#layers-table th:nth-child(2) button")
    neurons = p.page.eval_on_selector_all("#layers-table tbody tr", "rs => rs.map(r => +r.cells[1].dataset.v)")
    assert neurons == sorted(neurons, reverse=True)


def test_type_in_the_filter_and_the_totals_follow(browser, report):
    run = load_results(DATA / "results-classifier.json")
    p = _open(browser, report)
    assert _totals(p.page)["inputs"] == f"{sum(t['inputs'] for t in run['tests']):,}"
    p.page.fill("#tests-filter", "fgsm")
    mine = [t for t in run["tests"] if "fgsm" in (t["nodeid"] + t["group"]).lower()]
    assert len(_column(p.page, "nodeid")) == len(mine) == 4
    totals = _totals(p.page)
    assert totals["nodeid"] == "Total (4 tests)"
    assert totals["inputs"] == str(sum(t["inputs"] for t in mine))
    assert totals["lsa_max"] == f"{max(t['lsa_max'] for t in mine):.2f}"
    wmean = sum(t["lsa_mean"] * t["inputs"] for t in mine) / sum(t["inputs"] for t in mine)
    assert totals["lsa_mean"] == f"{wmean:.2f}"
    assert totals["new.kmnc"] == f"{sum(t['new']['kmnc'] for t in mine):,}"
    assert p.page.text_content("#tests-count") == "4 of 15 tests shown"
    # two terms must both match; then the outcome select narrows further
    p.page.fill("#tests-filter", "adversarial eps=0.1")
    assert len(_column(p.page, "nodeid")) == 2
    # the filter matches names, groups and outcomes, not the numbers in the row
    p.page.fill("#tests-filter", "30")
    assert _column(p.page, "nodeid") == ["tests/test_transforms.py::test_rotation[30]"]
    p.page.fill("#tests-filter", "<script>")
    assert len(_column(p.page, "nodeid")) == 2
    p.page.fill("#tests-filter", "")
    p.page.select_option("#tests-outcome", "failed")
    assert _column(p.page, "nodeid") == [t["nodeid"] for t in run["tests"] if t["outcome"] == "failed"]
    p.page.select_option("#tests-outcome", "")
    p.page.fill("#tests-filter", "no such test")
    assert _column(p.page, "nodeid") == []
    totals = _totals(p.page)
    assert totals["inputs"] == "0" and totals["lsa_max"] == "–" and totals["nodeid"] == "Total (0 tests)"


def test_theme_follows_the_system_toggles_and_is_remembered(browser, report, tmp_path):
    p = _open(browser, report, color_scheme="dark")
    bg = lambda: p.page.evaluate("getComputedStyle(document.body).backgroundColor")  # noqa: E731
    dark_bg = bg()
    r, g, b = (int(x) for x in re.findall(r"\d+", dark_bg)[:3])
    assert r + g + b < 120, f"dark system theme should give a dark page, got {dark_bg}"
    shot = _artifact_dir(tmp_path) / "report-dark.png"
    p.page.screenshot(path=str(shot), full_page=False)
    print(f"screenshot: {shot}")
    p.page.click("#theme-toggle")
    assert p.page.get_attribute("html", "data-theme") == "light"
    light_bg = bg()
    r, g, b = (int(x) for x in re.findall(r"\d+", light_bg)[:3])
    assert r + g + b > 600, light_bg
    p.page.reload()
    assert p.page.get_attribute("html", "data-theme") == "light", "the choice is remembered"
    p.page.click("#theme-toggle")
    assert p.page.get_attribute("html", "data-theme") == "dark" and bg() == dark_bg
    assert p.errors == []


def test_readable_at_laptop_width_and_printable(browser, report, tmp_path):
    p = _open(browser, report)
    width = p.page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1280, "the page scrolls sideways at a laptop's width"
    p.page.emulate_media(media="print")
    assert p.page.evaluate("getComputedStyle(document.querySelector('nav.toc')).display") == "none"
    assert p.page.evaluate("getComputedStyle(document.getElementById('theme-toggle')).display") == "none"
    pdf = _artifact_dir(tmp_path) / "report.pdf"
    p.page.pdf(path=str(pdf))
    print(f"pdf: {pdf}")
    assert pdf.stat().st_size > 10_000


def test_phone_width_chart_labels_tests_table_and_test_ids(browser, report, tmp_path):
    """At 390 px: the Table VI chart's labels stay readable, the tests table shows more than
    its first two columns, and test ids wrap only between their parts."""
    p = _open(browser, report)
    p.page.set_viewport_size({"width": 390, "height": 844})
    p.page.locator("#groups-chart").screenshot(path=str(_artifact_dir(tmp_path) / "chart-390.png"))
    heights = p.page.eval_on_selector_all(
        "#groups-chart svg text",
        "els => els.filter(e => getComputedStyle(e).display !== 'none').map(e => e.getBoundingClientRect().height)",
    )
    assert heights and min(heights) >= 8.0, f"chart labels {min(heights):.1f} px tall at 390 px"
    rights = p.page.evaluate(
        "() => [...document.querySelector('#tests-table tbody tr').cells].map(c => c.getBoundingClientRect().right)"
    )
    assert sum(r <= 390 for r in rights) >= 3, f"only {sum(r <= 390 for r in rights)} columns fit at 390 px"
    bad = p.page.evaluate("""() => {
        const bad = [];
        for (const code of document.querySelectorAll('code.testid')) {
            const text = code.textContent;
            const range = document.createRange();
            const chars = [];
            const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
            for (let n = walker.nextNode(); n; n = walker.nextNode())
                for (let i = 0; i < n.length; i++) {
                    range.setStart(n, i); range.setEnd(n, i + 1);
                    const r = range.getClientRects()[0];
                    if (r) chars.push([n.data[i], r.top]);
                }
            for (let i = 1; i < chars.length; i++)
                if (chars[i][1] > chars[i - 1][1] + 2) {
                    const before = chars[i - 1][0], after = chars[i][0];
                    if (!('/:_'.includes(before) || after === '[')) bad.push(text + ' broken at ' + i);
                }
        }
        return bad;
    }""")
    assert p.page.eval_on_selector_all("code.testid", "els => els.length") >= 15
    assert bad == []
    assert p.errors == []


def test_histogram_labels_clear_of_the_bound_lines(browser, report):
    p = _open(browser, report)
    overlaps = p.page.evaluate("""() => [...document.querySelectorAll('figure.hist svg')].filter(svg => {
        const label = svg.querySelector('text.above-label').getBoundingClientRect();
        return [...svg.querySelectorAll('line.bound')].some(line => {
            const b = line.getBoundingClientRect();
            return b.left <= label.right && b.right >= label.left && b.top <= label.bottom && b.bottom >= label.top;
        });
    }).length""")
    counted = p.page.eval_on_selector_all("figure.hist svg text.above-label", "els => els.length")
    assert counted > 0 and overlaps == 0


def test_gallery_shows_each_input_once_with_the_tests_that_fed_it(browser, report):
    p = _open(browser, report)
    per_list = p.page.eval_on_selector_all(
        "#inputs .gallery", "gs => gs.map(g => [...g.querySelectorAll('img')].map(i => i.alt))"
    )
    assert len(per_list) == 3 and all(len(items) == len(set(items)) for items in per_list)
    first = p.page.locator("#inputs .gallery").first.locator("figure").first.inner_text()
    assert "fed by 2 tests (3 times)" in first and "test_accuracy" in first
    assert p.page.locator("#mistakes-table tbody tr").count() == 5  # all labelled inputs and 4 groups
    assert "misclassified" in p.page.locator("#mistakes-words").inner_text()


def test_two_hundred_layers_collapsed_searchable_and_shown_on_request(browser, tmp_path):
    try:
        from tests.test_report_html import many_layers
    except ImportError:  # tests/ itself on sys.path
        from test_report_html import many_layers  # type: ignore[no-redef]

    run = many_layers(load_results(DATA / "results-classifier.json"))
    p = _open(browser, write_html(run, tmp_path))
    rows = "#layers-table tbody tr:not([hidden]) td:first-child"

    def names() -> list[str]:
        return [t.strip() for t in p.page.locator(rows).all_text_contents()]

    assert names()[:2] == ["block19_conv9", "block19_conv8"] and len(names()) == 20
    assert p.page.text_content("#layers-count") == "20 of 200 layers shown"
    p.page.click("#layers-all")
    assert len(names()) == 200 and p.page.get_attribute("#layers-all", "aria-expanded") == "true"
    p.page.click("#layers-all")
    assert len(names()) == 20
    p.page.fill("#layers-filter", "block3_")
    assert names() == [f"block3_conv{i}" for i in range(9, -1, -1)]
    assert p.page.text_content("#layers-count") == "10 of 200 layers shown"
    p.page.fill("#layers-filter", "")
    # sorting by name keeps the table collapsed, to the first rows of the new order
    p.page.click("#layers-table thead th:first-child button")
    assert len(names()) == 20 and names()[0] == "block0_conv0"
    assert p.errors == [] and p.requests == [p.url]


def test_card_status_stays_inside_its_card_at_every_width(browser, tmp_path):
    # "NO THRESHOLD" beside a long label (MDSC, KMNC, MMDSC) ran past the card's edge
    run = load_results(DATA / "results-classifier.json")
    run["thresholds"] = {}
    run["outcome"]["failures"] = []
    report = write_html(run, tmp_path)
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    page = Page(ctx.new_page(), report.as_uri())
    page.goto()
    for width in (1280, 1100, 820, 640, 420):
        page.page.set_viewport_size({"width": width, "height": 800})
        out = page.page.eval_on_selector_all(
            "#summary .card",
            """cards => cards.flatMap(c => {
                const r = c.getBoundingClientRect(), s = c.querySelector('.status').getBoundingClientRect();
                return s.right <= r.right - 1 && s.left >= r.left ? [] : [c.querySelector('.name').textContent];
            })""",
        )
        assert out == [], f"at {width}px the status of {out} leaves its card"
    ctx.close()


def test_the_ood_section_loads_offline_with_its_table_and_toc_link(browser, tmp_path):
    """A run with the OOD section (its figures as a run writes them, a hostile group name
    too): no script error, no request, the table's rows and the best row in bold."""
    doc = load_results(DATA / "results-classifier.json")
    doc["ood"] = {
        "reference": None,
        "rows": [
            {
                "group": g,
                "score": k,
                "inputs": 20,
                "reference_inputs": 100,
                "auroc": a,
                "aupr_in": 0.5,
                "aupr_out": 0.6,
                "fpr95": f,
            }
            for g, k, a, f in [
                ("<script>alert('ood')</script>", "lsa", 0.91, 0.4),
                ("<script>alert('ood')</script>", "dsa", 0.85, 0.5),
                ("noisy", "lsa", 0.55, 0.9),
                ("noisy", "dsa", 0.6, 0.8),
            ]
        ],
        "labels": {"lsa": "LSA", "dsa": "DSA"},
        "unavailable": {"mdsa": "MDSA cannot be set up: a test reason"},
        "sentences": ["Separated best from the held-out training traces: ..."],
        "reason": None,
    }
    p = _open(browser, write_html(doc, tmp_path / "html"))
    p.page.wait_for_timeout(200)
    assert p.errors == [] and p.dialogs == []
    assert [m for m in p.console if m.startswith(("error", "warning"))] == []
    assert all(u == p.url or u.startswith("data:") for u in p.requests), p.requests
    assert p.page.is_visible("#ood-table") and p.page.is_visible("nav.toc a[href='#ood']")
    rows = p.page.eval_on_selector_all("#ood-table tbody tr", "rs => rs.map(r => r.className)")
    assert rows == ["best", "", "", "best"]
    weight = p.page.eval_on_selector(
        "#ood-table tbody tr.best td:nth-child(4)", "td => getComputedStyle(td).fontWeight"
    )
    assert int(weight) >= 600
    assert "<script>alert('ood')</script>" in p.page.inner_text("#ood-table")
    assert "MDSA cannot be set up: a test reason" in p.page.inner_text("#ood-words")
