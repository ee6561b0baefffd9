#!/usr/bin/env bash
# The declared floors, tested: install the package in a new virtual environment with each of
# its runtime dependencies, Keras + JAX (the `jax` extra: far smaller than TensorFlow) and
# hypothesis pinned to the LOWEST version pyproject.toml allows (`>=X` read as `==X`; the
# other dependencies those pull in are the newest they accept, as `uv pip install
# --resolution lowest-direct` would do), then run the criteria, engine, capture and tracing
# tests, the terminal and HTML reports and the results file's schema checks (Jinja2's and
# jsonschema's floors), and two of the plugin's end-to-end runs (tests/test_subjects.py:
# pytest --sadl-coverage on a small project, a ConvNet from a .keras file and a subclassed
# model from a fixture), on Keras' JAX backend. CI runs it after the suite (scripts/ci.sh).
# A floor that fails here is a false promise: raise it in pyproject.toml.
# Takes ~2-3 minutes on 2 cores (~1 of them installing; more when pip downloads).
# Usage: bash scripts/lowest.sh [pytest args]   (PYTHON=python3.10 ... for another interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$PYTHON" -m venv "$work/venv"
python="$work/venv/bin/python"
pip=("$python" -m pip install --quiet --disable-pip-version-check)
# Python 3.10 reads TOML with tomli
"$python" -c 'import tomllib' 2>/dev/null || "${pip[@]}" tomli

# pyproject.toml's floors as pins: the runtime dependencies, the jax extra, and the test
# extra's hypothesis (the tests below use it)
pins=$("$python" - <<'EOF'
import re
import sys

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
extras = project["optional-dependencies"]
wanted = project["dependencies"] + extras["jax"] + [r for r in extras["test"] if r.startswith("hypothesis")]
for requirement in wanted:
    match = re.fullmatch(r"([A-Za-z0-9_.\-]+(?:\[[a-z,]+\])?)\s*>=\s*([0-9][^,;\s]*)\s*(?:,\s*<[^;]*)?", requirement)
    if match is None:
        sys.exit(f"lowest: cannot read a floor from {requirement!r} (write it as NAME>=X,<Y)")
    print(f"{match[1]}=={match[2]}")
EOF
)
echo "lowest: installing" $pins >&2
"${pip[@]}" --no-deps -e .
# shellcheck disable=SC2086  # one argument per pin
"${pip[@]}" $pins
"$python" -m pip list --disable-pip-version-check 2>/dev/null \
    | grep -iE '^(pytest|numpy|scipy|threadpoolctl|jinja2|jsonschema|scikit-learn|keras|jax|jaxlib|hypothesis) ' >&2

export KERAS_BACKEND=jax TF_CPP_MIN_LOG_LEVEL=3 SADL_TEST_MODELS="$work/models"
"$python" -m pytest -q -p no:cacheprovider \
    tests/test_surprise.py tests/test_neurons.py tests/test_engine.py tests/test_capture.py tests/test_traces.py \
    tests/test_report_terminal.py tests/test_report_html.py tests/test_report_results_file.py \
    "tests/test_subjects.py::test_the_papers_subjects_end_to_end[mnist-True]" \
    tests/test_subjects.py::test_subclassed_model_from_a_fixture "$@"
