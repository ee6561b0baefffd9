#!/usr/bin/env bash
# radon's cyclomatic complexity as a gate: fails when a function or method is above 10
# (rank C or worse: `radon cc -n C` lists it) or the average over every block is above 3.5
# (`radon cc -a`), printing the offenders. Paths default to the package; MAX_AVERAGE
# overrides the average's limit (e.g. while a sweep is under way).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
MAX_AVERAGE=${MAX_AVERAGE:-3.5}
if [ "$#" -eq 0 ]; then set -- pytest_sadl; fi
status=0
offenders=$("$PYTHON" -m radon cc -n C -s "$@")
if [ -n "$offenders" ]; then
    echo "complexity: functions above radon's 10 (split them by their sub-jobs):"
    echo "$offenders"
    status=1
fi
summary=$("$PYTHON" -m radon cc -a -s "$@" | tail -1)
average=$(printf '%s\n' "$summary" | sed -nE 's/^Average complexity: [A-F] \(([0-9.]+)\)$/\1/p')
if [ -z "$average" ]; then
    echo "complexity: radon gave no average for $* ($summary)"
    exit 1
fi
if ! "$PYTHON" -c "import sys; sys.exit(float(sys.argv[1]) > float(sys.argv[2]))" "$average" "$MAX_AVERAGE"; then
    echo "complexity: average $average is above $MAX_AVERAGE"
    status=1
fi
[ "$status" -eq 0 ] && echo "complexity: no function above 10, average $average (at most $MAX_AVERAGE)"
exit "$status"
