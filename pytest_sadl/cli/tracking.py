"""``sadl log-mlflow RUN.json``: a run's metrics, options and HTML report into MLflow.

Metrics in percent (``lsc`` = 61.1; a count criterion's own number; a metric that is not
available is not logged), the configuration as parameters (layers, thresholds, each
surprise coverage's bounds), the model's and profile's fingerprints and whether the run
was partial as tags, and the HTML report and the results JSON as artefacts (``sadl/``).
MLflow is an optional extra (``pip install 'pytest-sadl[mlflow]'``), imported only here,
when the command runs; the tracking store is MLflow's own choice (``MLFLOW_TRACKING_URI``)
unless ``--tracking-uri`` names one (a local ``file:`` store, say).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from pytest_sadl.errors import ResultsFileError
from pytest_sadl.results import Results
from pytest_sadl.text import terminal as safe

EXIT_OK, EXIT_USAGE = 0, 2


def metrics_of(results: Results) -> dict[str, float]:
    from pytest_sadl.criteria.registry import COUNT

    out = {}
    for name, m in results.metrics.items():
        if m.measured and m.value is not None:
            out[name] = float(m.value) if name in COUNT else round(100.0 * m.value, 4)
    return out


def params_of(results: Results) -> dict[str, str]:
    """The configuration, flattened (MLflow's parameters are strings of at most 6000 characters)."""
    out: dict[str, str] = {}
    for key, value in results.config.to_dict().items():
        if isinstance(value, dict):
            for sub, v in value.items():
                out[f"{key}.{sub}"] = str(v)[:6000]
        else:
            out[key] = (",".join(map(str, value)) if isinstance(value, list) else str(value))[:6000]
    for name, threshold in results.thresholds.items():
        out[f"fail_under.{name}"] = f"{threshold:g}"
    out["pytest_sadl_version"] = str(results.version)
    return out


def tags_of(results: Results) -> dict[str, str]:
    from pytest_sadl.report.partial import partial_line

    return {
        "sadl.model": str(results.model.name),
        "sadl.model_fingerprint": str(results.model.fingerprint),
        "sadl.profile_fingerprint": str(results.model.profile_fingerprint),
        "sadl.partial": partial_line(results) or "no",
        "sadl.passed": str(results.passed).lower(),
    }


def log_results(
    results: Results, source: Path, *, experiment: str | None, run_name: str | None, uri: str | None
) -> str:
    """Log one results file as an MLflow run; return the run's id."""
    try:
        import mlflow
    except ImportError:
        raise ValueError("MLflow is not installed: pip install 'pytest-sadl[mlflow]'") from None
    from pytest_sadl.report.html import write_html

    if uri:
        mlflow.set_tracking_uri(uri)
    if experiment:
        mlflow.set_experiment(experiment)
    with mlflow.start_run(run_name=run_name) as run, tempfile.TemporaryDirectory() as tmp:
        mlflow.log_metrics(metrics_of(results))
        mlflow.log_params(params_of(results))
        mlflow.set_tags(tags_of(results))
        html = write_html(results, Path(tmp) / "sadl-report")
        mlflow.log_artifacts(str(Path(html).parent), artifact_path="sadl/report")
        mlflow.log_artifact(str(source), artifact_path="sadl")
        run_id: str = run.info.run_id
    return run_id


def cmd_log_mlflow(args: argparse.Namespace) -> int:
    from pytest_sadl.resultsfile import read_results

    prog = "sadl log-mlflow"
    try:
        results = read_results(args.results)
        run_id = log_results(
            results, Path(args.results), experiment=args.experiment, run_name=args.run_name, uri=args.tracking_uri
        )
    except (ResultsFileError, ValueError, OSError) as exc:
        print(f"{prog}: error: {safe(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    print(f"logged {len(metrics_of(results))} metrics to MLflow run {run_id}")
    return EXIT_OK


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "log-mlflow",
        help="log a run's metrics, options and HTML report to MLflow",
        description="Log a results file's metrics (percent), configuration (parameters), "
        "fingerprints (tags), HTML report and JSON (artefacts) as one MLflow run. Needs pytest-sadl[mlflow].",
    )
    p.add_argument("results", metavar="RUN.json", help="a results file")
    p.add_argument("--experiment", metavar="NAME", help="the MLflow experiment (made when missing)")
    p.add_argument("--run-name", metavar="NAME", help="the MLflow run's name")
    p.add_argument("--tracking-uri", metavar="URI", help="e.g. file:./mlruns (default: MLflow's own)")
    p.set_defaults(func=cmd_log_mlflow)
