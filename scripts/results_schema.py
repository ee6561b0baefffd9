"""Write the per-metric entries of pytest_sadl/results.schema.json from the registry.

The results schema is written by hand except what depends on the criteria: a count
criterion's ``metrics``/``thresholds``/group entries and the ``config`` entries of each
surprise coverage's bounds and every criterion's parameters, made by
``pytest_sadl.criteria.schema.with_registry``. ``scripts/check.sh`` runs ``--check``.

Usage: python scripts/results_schema.py           # rewrite the per-metric entries
       python scripts/results_schema.py --check   # exit 1 when they are stale
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "pytest_sadl" / "results.schema.json"


def render(text: str) -> str:
    """The schema file with its per-metric entries made from the registry."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from pytest_sadl.criteria.schema import generated_keys, with_registry

    schema = with_registry(json.loads(text), generated_keys())
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    text = SCHEMA.read_text(encoding="utf-8")
    new = render(text)
    if "--check" in argv:
        if new != text:
            print(f"{SCHEMA.relative_to(ROOT)}: the per-metric entries are stale; run python scripts/results_schema.py")
            return 1
        return 0
    if new != text:
        SCHEMA.write_text(new, encoding="utf-8")
        print(f"wrote the per-metric entries of {SCHEMA.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
