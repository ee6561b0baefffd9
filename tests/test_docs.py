"""The documentation: the options table follows the option registry, the README keeps the
commands CI runs, and every page the README and the site name exists.

The site's strict build itself (`mkdocs build --strict`) is in scripts/check.sh."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_options_table_is_the_registry() -> None:
    """The committed table is what scripts/options_table.py writes from OPTIONS."""
    script = _script("options_table")
    page = script.PAGE.read_text(encoding="utf-8")
    assert script.render(page) == page, "docs/options.md is stale: run python scripts/options_table.py"


def test_results_schema_per_metric_entries_are_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped schema is what scripts/results_schema.py makes from the dataclasses and
    the registry; and the check can fail: a count criterion more is an entry more."""
    from dataclasses import replace

    script = _script("results_schema")
    text = script.SCHEMA.read_text(encoding="utf-8")
    assert script.render() == text, "results.schema.json is stale: run python scripts/results_schema.py"
    # the modules the script uses (an in-process pytester run may have left stale attributes)
    registry = importlib.import_module("pytest_sadl.criteria.registry")
    schema = importlib.import_module("pytest_sadl.criteria.schema")
    extra = replace(registry.BY_NAME["tknp"], name="tknq")
    monkeypatch.setattr(schema, "CRITERIA", (*registry.CRITERIA, extra))
    changed = script.render()
    assert changed != text and '"tknq": {\n          "$ref": "#/$defs/count_metric"' in changed


def test_every_option_has_a_row() -> None:
    from pytest_sadl.plugin.options import _NEGATED, OPTIONS

    page = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `(--[a-z-]+)", page, flags=re.M))
    flags = {o.flag for o in OPTIONS} | {"--no-" + o.flag[2:] for o in OPTIONS if o.ini in _NEGATED}
    assert rows == flags


def test_a_changed_help_makes_the_table_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: a help text changed in the registry is a different table."""
    from dataclasses import replace

    from pytest_sadl.plugin import options

    script = _script("options_table")
    page = script.PAGE.read_text(encoding="utf-8")
    changed = (replace(options.OPTIONS[0], help="something else entirely"), *options.OPTIONS[1:])
    monkeypatch.setattr(options, "OPTIONS", changed)
    assert script.render(page) != page
    assert "something else entirely" in script.render(page)


def test_readme_gives_the_commands_ci_runs() -> None:
    """The README's two commands: the example project, and exactly what .ci/run runs:
    scripts/ci.sh, the set-up, the checks and the suite, the library models, then the floors
    and the wheel."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    test_command = "bash scripts/ci.sh"
    assert f"\n{test_command}\n" in readme
    assert f"\n{test_command}\n" in ci
    assert "python3 -m pytest example_project --sadl-coverage" in readme
    steps = re.findall(r"^step .* bash (scripts/\S+\.sh)$", (ROOT / "scripts" / "ci.sh").read_text(), re.MULTILINE)
    assert steps == [
        f"scripts/{name}.sh" for name in ("bootstrap", "check", "test", "test_libraries", "lowest", "wheel")
    ]


def test_linked_pages_exist() -> None:
    """Every relative link of the README and the pages' links to other pages resolve."""
    for source in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = source.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", text):
            assert (source.parent / target).exists(), f"{source.relative_to(ROOT)} links to missing {target}"


def test_every_page_is_in_the_site() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in (ROOT / "docs").glob("*.md"):
        assert f" {page.name}" in nav, f"docs/{page.name} is not in mkdocs.yml's nav"


def test_quoted_example_output_is_marked_and_compared_within_the_kernels_tolerance() -> None:
    """scripts/example_tables.py (run by scripts/test.sh with --check) finds the README's
    Table VI and the example's other quoted blocks by their markers; on other kernels than
    the quoted block's, a number may move by 5% plus 5 units of its last digit, the text not."""
    tables = _script("example_tables")
    marked = {
        name: [m for line in (ROOT / name).read_text().splitlines() if (m := tables.MARKER.match(line))]
        for name in tables.FILES
    }
    assert all(marked.values()), marked
    assert "cumulative coverage by group" in marked["README.md"][0]["sections"]
    quoted = "+ transform     14    5760  82.40  72.10  54.35  81.88\nLSC  (-61.21, 909.4]  368"
    assert tables.close(quoted, quoted)
    assert tables.close(quoted, quoted.replace("54.35", "54.71").replace("81.88", "82.61").replace("368", "371"))
    assert not tables.close(quoted, quoted.replace("81.88", "91.88"))  # a real change
    assert not tables.close(quoted, quoted.replace("5760", "6760"))  # a group's inputs changed
    assert not tables.close(quoted, quoted.replace("+ transform", "+ rotate"))
    assert not tables.close(quoted, quoted + " 1")
