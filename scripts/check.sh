#!/usr/bin/env bash
# The static checks CI runs before the tests, both configured in pyproject.toml and both
# expected to find nothing: ruff's lint rules ([tool.ruff]: pyflakes, pycodestyle, isort,
# bugbear, pyupgrade, simplify, complexity at most 15) and ruff's formatter (check only) on
# the whole project, and mypy in strict mode on the package ([tool.mypy]).
# Usage: bash scripts/check.sh   (PYTHON=... to use another interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
"$PYTHON" -m ruff check .
"$PYTHON" -m ruff format --check .
"$PYTHON" -m mypy
