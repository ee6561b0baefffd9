#!/usr/bin/env bash
# The timm and torchvision tests of tests/test_library_models.py, in a virtual environment of
# their own: PyPI's torchvision is built against PyPI's (CUDA) build of torch and fails to
# import beside the CPU build the main environment has ("operator torchvision::nms does not
# exist"), so this environment takes torch and torchvision as one pair (a CUDA build, which
# runs on the CPU; ~5.4 GB) and timm, over the main environment's packages
# (--system-site-packages: pytest-sadl itself, pytest, numpy, transformers, ... as locked).
# The environment is kept (SADL_LIBRARIES_VENV, default ~/.cache/pytest-sadl/venv-libraries)
# and reused while it holds the pinned versions: a machine that ran this before adds only the
# tests' time; a new one adds the install (measured 150 s for the pair's 5.4 GB).
# Usage: bash scripts/test_libraries.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# torch and torchvision as one pair (torchvision's release notes name its torch); timm at the
# version these tests last passed on. Change them together, in this file only.
pins=(torch==2.14.1 torchvision==0.29.1 timm==1.0.31 datasets==5.2.0)
venv=${SADL_LIBRARIES_VENV:-$HOME/.cache/pytest-sadl/venv-libraries}
py="$venv/bin/python"

have_pins() {
    "$py" - "${pins[@]}" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    if version(name).split("+")[0] != want:
        sys.exit(1)
EOF
}

if [ ! -x "$py" ] || ! have_pins; then
    echo "test_libraries: installing ${pins[*]} into $venv" >&2
    start=$SECONDS
    "$PYTHON" -m venv --system-site-packages "$venv"
    # the main environment's lock, less its torch (this environment's pair replaces it)
    version=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    lock="constraints/py$version.txt"
    constraints=()
    if [ -f "$lock" ]; then
        grep -Eiv '^(torch|torchvision|timm|datasets)==' "$lock" > "$venv/constraints.txt"
        constraints=(-c "$venv/constraints.txt")
    fi
    "$py" -m pip install --quiet --disable-pip-version-check "${constraints[@]}" "${pins[@]}"
    echo "test_libraries: installed in $((SECONDS - start)) s, $(du -sm "$venv" | cut -f1) MB" >&2
fi
"$py" -c 'import pytest_sadl, torch, torchvision, timm; print("test_libraries: torch", torch.__version__, "torchvision", torchvision.__version__, "timm", timm.__version__, "pytest_sadl from", pytest_sadl.__file__)'
# only the tests that need torchvision (the rest of the file runs in the main suite)
"$py" -m pytest -n 2 --durations=10 -p no:randomly tests/test_library_models.py -k "timm or torchvision or datasets" "$@"
