#!/usr/bin/env bash
# Everything CI runs (.ci/run, the README's test command), one step after another, each
# under a one-line heading and closed by its wall time; the first step that fails stops the
# run with a line naming it and a non-zero exit status:
#   set up          scripts/bootstrap.sh  the package (editable) with its test and docs extras, chromium
#   static checks   scripts/check.sh      ruff, the formatter, strict mypy, the options table, the docs site
#   test suite      scripts/test.sh       the suite on TensorFlow, then on JAX and torch (~10 minutes)
#   library models  scripts/test_libraries.sh  the timm, torchvision and datasets tests, in a venv with
#                                         torch and torchvision as one pair (kept; a new machine installs it)
#   floors          scripts/lowest.sh     the declared lowest versions, in a new virtual environment (~3 minutes)
#   wheel           scripts/wheel.sh      the sdist and wheel built, the wheel installed, the example run (~2 minutes)
# Day to day, `bash scripts/check.sh && bash scripts/test.sh` is the quick part of it.
# Usage: bash scripts/ci.sh
set -euo pipefail
cd "$(dirname "$0")/.."

step() {
    local name=$1 start=$SECONDS
    shift
    echo "==> ci: $name ($*)"
    if ! "$@"; then
        echo "==> ci: FAILED: $name ($*) after $((SECONDS - start)) s" >&2
        exit 1
    fi
    echo "==> ci: $name passed in $((SECONDS - start)) s"
}

step "set up" bash scripts/bootstrap.sh
step "static checks" bash scripts/check.sh
step "test suite" bash scripts/test.sh
step "library models" bash scripts/test_libraries.sh
step "floors" bash scripts/lowest.sh
step "wheel" bash scripts/wheel.sh
echo "==> ci: all steps passed in $SECONDS s"
