#!/usr/bin/env bash
# The test suite as CI runs it: everything on the TensorFlow backend (and the example's output
# quoted in the docs checked against a run, scripts/example_tables.py), then the capture,
# tracing and plugin end-to-end tests again on Keras' JAX backend, then the capture and
# tracing tests and two end-to-end subjects on Keras' torch backend (same numbers expected;
# torch runs Keras eagerly, slower per test, so its pass is the smaller one).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# The small test models are trained once, in the first pass, and loaded by the others.
models=$(mktemp -d)
trap 'rm -rf "$models"' EXIT
export SADL_TEST_MODELS="${SADL_TEST_MODELS:-$models}"
# --durations: each pass's slowest tests in the log, to see where CI's time goes
KERAS_BACKEND=tensorflow "$PYTHON" -m pytest -n 2 --durations=15 "$@"
# the example's output quoted in the README and docs, against a run of the main job
"$PYTHON" scripts/example_tables.py --check
KERAS_BACKEND=jax "$PYTHON" -m pytest -n 2 --durations=10 tests/test_traces.py tests/test_graph_probe.py tests/test_capture.py \
    tests/test_subjects.py tests/test_recording_loops.py "$@"
KERAS_BACKEND=torch "$PYTHON" -m pytest -n 2 --durations=10 tests/test_traces.py tests/test_graph_probe.py tests/test_capture.py \
    tests/test_subjects.py -k "not test_subjects or mnist or subclassed" "$@"
