#!/usr/bin/env bash
# The package as a user gets it: build the sdist and, from the unpacked sdist, the wheel
# (`python -m build`, in a throwaway virtual environment of its own), check what each
# holds, install the wheel with its `tensorflow-cpu` extra (the example's FGSM and BIM need
# TensorFlow's GradientTape) into a new virtual environment at the lock's versions, and run
# a copy of example_project/ outside the checkout with the plugin on. It checks that
# pytest_sadl is imported from that environment (never from this checkout), that the run
# exits 0, that its HTML report is written and that its JSON results pass the shipped
# schema (`sadl report`, the installed console script): the report templates and
# results.schema.json must be in the wheel. ~2 minutes on 2 cores when pip has TensorFlow's
# wheel at hand (most of it installing); more when it downloads it (~250 MB).
# Usage: bash scripts/wheel.sh   (PYTHON=python3.12 ... for another interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
checkout=$PWD
PYTHON=${PYTHON:-python3}
# nothing of this checkout on the path: what runs below is the installed wheel only
unset PYTHONPATH
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pip=(-m pip install --quiet --disable-pip-version-check)

echo "wheel: building the sdist, then the wheel from it" >&2
"$PYTHON" -m venv "$work/build"
"$work/build/bin/python" "${pip[@]}" "build>=1.2,<2"
"$work/build/bin/python" -m build --outdir "$work/dist" . >"$work/build.log" 2>&1 || {
    cat "$work/build.log" >&2
    exit 1
}
sdist=$(echo "$work"/dist/pytest_sadl-*.tar.gz)
wheel=$(echo "$work"/dist/pytest_sadl-*-py3-none-any.whl)
ls -l "$sdist" "$wheel" >&2
"$work/build/bin/python" - "$sdist" "$wheel" <<'EOF'
import sys
import tarfile
import zipfile

sdist, wheel = sys.argv[1:]
with tarfile.open(sdist) as tar:
    root = tar.getnames()[0].split("/")[0]
    held = {name.removeprefix(root + "/") for name in tar.getnames()}
with zipfile.ZipFile(wheel) as zf:
    shipped = set(zf.namelist())
# the sdist runs the tests (MANIFEST.in); the wheel holds the package and its data only
data = ["pytest_sadl/results.schema.json", "pytest_sadl/py.typed", "pytest_sadl/report/templates/report.html.j2"]
missing = {
    "sdist": {"pyproject.toml", "LICENSE", "tests/conftest.py", "example_project/conftest.py", *data} - held,
    "wheel": {"pytest_sadl/report/templates/report.css", *data} - shipped,
}
stray = sorted(name for name in shipped if not name.startswith(("pytest_sadl/", "pytest_sadl-")))
if any(missing.values()) or stray:
    sys.exit(f"wheel: missing {missing}; in the wheel but not the package: {stray}")
print(f"wheel: the sdist holds {len(held)} files, the wheel {len(shipped)}", file=sys.stderr)
EOF

echo "wheel: installing $(basename "$wheel")[tensorflow-cpu] in a new virtual environment" >&2
version=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
lock="constraints/py$version.txt"
constraints=()
if [ -f "$lock" ]; then
    constraints=(-c "$lock")
else
    echo "wheel: no lock for Python $version ($lock); installing the newest releases the package allows" >&2
fi
"$PYTHON" -m venv "$work/venv"
python="$work/venv/bin/python"
"$python" "${pip[@]}" "${constraints[@]}" "$wheel[tensorflow-cpu]"

# a copy of the example, without what earlier runs left in the checkout's
cp -r example_project "$work/example"
rm -rf "$work/example/.pytest_cache" "$work/example/sadl-report" "$work/example/results.json"
cd "$work/example"
"$python" - "$work/venv" "$checkout" <<'EOF'
import sys
from importlib import resources
from pathlib import Path

import pytest_sadl
import pytest_sadl.report.html

venv, checkout = (Path(p).resolve() for p in sys.argv[1:])
for name, path in [
    ("pytest_sadl", pytest_sadl.__file__),
    ("the report templates", pytest_sadl.report.html._TEMPLATES),
    ("the results schema", str(resources.files("pytest_sadl").joinpath("results.schema.json"))),
]:
    path = Path(path).resolve()
    if not path.exists() or not path.is_relative_to(venv) or path.is_relative_to(checkout):
        sys.exit(f"wheel: {name} imported from {path}, not from the new environment {venv}")
print(f"wheel: pytest_sadl {pytest_sadl.__version__} from {Path(pytest_sadl.__file__).parent}", file=sys.stderr)
EOF

echo "wheel: running the example project with the plugin on" >&2
TF_CPP_MIN_LOG_LEVEL=3 "$python" -m pytest -q --sadl-coverage --sadl-report=term \
    --sadl-report=html:sadl-report --sadl-report=json:results.json
test -s sadl-report/index.html || { echo "wheel: the run wrote no sadl-report/index.html" >&2; exit 1; }
# read back through the installed console script: validated against the shipped schema
"$work/venv/bin/sadl" report results.json --html again
test -s again/index.html || { echo "wheel: sadl report wrote no again/index.html" >&2; exit 1; }
echo "wheel: the example passed; sadl-report/index.html written, results.json valid" >&2
