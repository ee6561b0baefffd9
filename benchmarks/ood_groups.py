"""Which score separates which group from an in-distribution one: AUROC, AUPR and FPR@95
of every per-input score of a results JSON, each group against a reference group
(:func:`pytest_sadl.criteria.detection.ood_table`, what a report's OOD section will show).

Run on a run's JSON report, e.g. the example project's::

    cd example_project && python -m pytest -q --sadl-coverage \\
        --sadl-metrics=lsc,knnc,mahac,energyc,maxlogitc,mspc --sadl-report=json:/tmp/ood.json
    python benchmarks/ood_groups.py /tmp/ood.json --reference test

Not part of the test suite: it prints the table; docs/ood.md records what it showed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]


def main(argv: list[str] | None = None) -> int:
    from pytest_sadl.criteria.detection import ood_table
    from pytest_sadl.criteria.registry import SA_LABELS
    from pytest_sadl.resultsfile import load_results

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="a results JSON (--sadl-report=json:FILE)")
    parser.add_argument("--reference", default="test", help="the in-distribution group (default %(default)s)")
    args = parser.parse_args(argv)
    doc = load_results(args.results)
    inputs, tests = doc["inputs"], doc["tests"]
    group = np.array([tests[t]["group"] or "" for t in inputs["test"]])
    keys = [k for k in SA_LABELS if k in inputs]
    scores = {
        g: {k: np.array([np.nan if v is None else v for v in inputs[k]], float)[group == g] for k in keys}
        for g in dict.fromkeys(group.tolist())
    }
    print(f"each group against {args.reference!r}; higher AUROC/AUPR and lower FPR@95 separate better")
    print(f"{'group':<12} {'score':<9} {'inputs':>6} {'AUROC':>6} {'AUPR-In':>8} {'AUPR-Out':>8} {'FPR@95':>7}")
    for r in ood_table(scores, args.reference, keys):
        print(
            f"{r.group:<12} {SA_LABELS[r.score]:<9} {r.n:>6} {r.auroc:6.3f} {r.aupr_in:8.3f} {r.aupr_out:8.3f} {r.fpr95:7.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
