"""Write pytest_sadl/results.schema.json: the results' JSON Schema, made, never edited.

The sections' schema comes from the dataclasses of ``pytest_sadl/results.py`` (their type
hints and field specs: ``pytest_sadl.results.json_schema``), the per-metric entries from
the registry (a count criterion's ``metrics``/``thresholds``/group entries, the ``config``
entries of each surprise coverage's bounds and every criterion's parameters:
``pytest_sadl.criteria.schema.with_registry``). ``scripts/check.sh`` runs ``--check``.

Usage: python scripts/results_schema.py           # rewrite the schema file
       python scripts/results_schema.py --check   # exit 1 when it is stale
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "pytest_sadl" / "results.schema.json"


def render() -> str:
    """The schema file's text, made from the dataclasses and the registry."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from pytest_sadl.criteria.schema import generated_keys, with_registry
    from pytest_sadl.results import json_schema

    schema = with_registry(json_schema(), generated_keys())
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    text = SCHEMA.read_text(encoding="utf-8") if SCHEMA.is_file() else ""
    new = render()
    if "--check" in argv:
        if new != text:
            print(
                f"{SCHEMA.relative_to(ROOT)} is stale (edit pytest_sadl/results.py, not the file); run python scripts/results_schema.py"
            )
            return 1
        return 0
    if new != text:
        from pytest_sadl.atomic import atomic_write_text

        atomic_write_text(SCHEMA, new)
        print(f"wrote {SCHEMA.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
