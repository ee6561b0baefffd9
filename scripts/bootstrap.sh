#!/usr/bin/env bash
# Everything pytest-sadl needs on a fresh Debian machine with Python 3.10+ and pip:
# the package with its test extra (TensorFlow CPU, JAX CPU, pytest-xdist, Playwright's
# Python driver) and Debian's chromium for the browser tests of the HTML report.
# Idempotent: a second run installs nothing new.
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

"$PYTHON" -m pip install --quiet --disable-pip-version-check -e '.[test]'
