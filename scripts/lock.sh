#!/usr/bin/env bash
# Refresh the lock that CI installs from (constraints/pyX.Y.txt): resolve the package's
# test, docs and bench extras afresh in a new virtual environment and freeze what got installed.
# Run it on purpose, after `bash scripts/bootstrap.sh --latest && bash scripts/test.sh`
# passed on the newest releases, and commit the changed file with the test run's result.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
version=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
lock="constraints/py$version.txt"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
# PyTorch's CPU wheels when their index answers (as scripts/bootstrap.sh installs them)
torch_index=${SADL_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
extra=()
if [ -n "$torch_index" ] && "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/torch/", timeout=5)' "$torch_index" 2>/dev/null; then
    extra=(--extra-index-url "$torch_index")
fi
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "${extra[@]}" '.[test,docs,bench]'
{
    echo "# The versions CI installs (pip install -c $lock -e '.[test,docs]'), resolved on"
    echo "# $(date -u +%Y-%m-%d) for Python $version on $(uname -m) Linux by scripts/lock.sh."
    echo "# Do not edit by hand: run 'bash scripts/lock.sh' to refresh it (see docs/development.md)."
    # torch without its local label (2.13.0, not 2.13.0+cpu): the CPU and the index's build both match
    "$work/venv/bin/python" -m pip freeze --exclude-editable --disable-pip-version-check | grep -iv '^pytest-sadl\b' \
        | sed -E 's/^(torch==[^+]+)\+.*/\1/' | LC_ALL=C sort -f
} > "$work/lock.txt"
mkdir -p constraints
mv "$work/lock.txt" "$lock"
echo "lock: wrote $lock ($(grep -vc '^#' "$lock") packages)" >&2
