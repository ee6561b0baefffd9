"""Results that exercise every odd corner of the JSON form, for tests/test_results_codec.py.

Built only through the dataclasses' constructors (keywords), so the same object is made by
the code that froze ``tests/golden/results-edge.json`` (the hand-written ``to_dict`` of
before the codec) and by today's: NaN and inf values, NumPy scalars, ``None`` in every
optional place, stale and missing tests, failures, a combined run's scope, a metric that is
not available, a text input and a thumbnail without channels.
"""

from __future__ import annotations

import numpy as np

from pytest_sadl.results import (
    Analysis,
    Failure,
    Fifth,
    GroupRow,
    LayerRow,
    Metric,
    MissingTest,
    Mistakes,
    ModelInfo,
    Results,
    RunConfig,
    ScBounds,
    Scope,
    StaleTest,
    TestRow,
    Thumbnail,
    TopInput,
)


def _metrics() -> dict[str, Metric]:
    return {
        "lsc": Metric(value=0.25, covered=250, total=1000, below=np.int64(3), above=0, count=1200, nan=0),
        "dsc": Metric(value=None, covered=0, total=0, applicable=False),
        "mdsc": Metric(value=float("nan"), covered=0, total=1000, applicable=False, reason="cannot be set up"),
        "nc": Metric(value=np.float64(0.5), covered=np.int64(16), total=32),
        "tknp": Metric(value=7.0, covered=7, total=0),
    }


def _config() -> RunConfig:
    return RunConfig(
        sa_layers=["dense"],
        coverage_layers=["conv", "dense"],
        nc_threshold=0.5,
        kmnc_k=1000,
        lsa_near_singular="keep",
        var_rule="paper",
        sa_components=3,
        params={"tknp_k": 2, "cc_threshold": np.float64(10.0), "future": [1, 2]},
        bounds={
            "lsc": ScBounds(lower=0.0, upper=np.float64(12.5), buckets=1000, rule="configured"),
            "dsc": ScBounds(lower=None, upper=None, buckets=None),
        },
    )


def _top() -> list[TopInput]:
    return [
        TopInput(
            by="lsa",
            rank=1,
            input=4,
            test=0,
            tests=[0, 2],
            copies=2,
            pred=3,
            scores={"lsa": 9.5, "dsa": float("inf")},
            image=Thumbnail(height=2, width=2, channels=None, pixels=[0, 255, 3, 4]),
        ),
        TopInput(by="dsa", rank=2, input=None, test=None, pred=None, scores={}, text="a sentence"),
        TopInput(by="lsa", rank=3, image=Thumbnail(height=1, width=1, channels=3, pixels=[1, 2, 3])),
    ]


def _mistakes() -> Mistakes:
    overall = Analysis(
        kind="classifier",
        labelled=10,
        errors=2,
        error_rate=0.2,
        auc={"lsa": 0.75, "dsa": float("nan")},
        spearman={"lsa": -0.5},
        fifths={"lsa": [Fifth(lowest=0.0, highest=1.5, inputs=2, accuracy=1.0), Fifth(None, None, 0)]},
        scored={"lsa": 10},
        sentences=["LSA separates them."],
    )
    group = Analysis(kind="regression", labelled=None, mean_abs_error=0.5, name="adv")
    return Mistakes(overall=overall, groups=[group], labels={"lsa": "LSA"}, baselines=["msp"])


def edge_results() -> Results:
    """One results object with every optional part set, some to odd values."""
    return Results(
        created="2026-12-01T18:00:00+00:00",
        version="0.1.0",
        model=ModelInfo(name="m", source="fixture", classifier=True, n_classes=10, input_shape=[None, 8], n_train=5),
        config=_config(),
        thresholds={"lsc": 30.0, "nc": np.float64(50.0)},
        metrics=_metrics(),
        layers=[LayerRow(name="conv", neurons=16, coverage={"nc": 0.5, "kmnc": float("nan")})],
        groups=[GroupRow(name="g", tests=2, inputs=np.int64(7), metrics={"lsc": 0.25}, cumulative={"lsc": None})],
        tests=[
            TestRow(
                nodeid="t.py::a",
                group="g",
                outcome="passed",
                inputs=3,
                mean={"lsa": 1.5, "dsa": np.float32(0.5)},
                max={"lsa": 2.0, "mdsa": float("-inf")},
                new={"nc": 3},
            ),
            TestRow(nodeid="t.py::b", group="g", outcome="failed", inputs=0),
        ],
        inputs={
            "test": [0, 0, 1],
            "pred": [1, None, 2],
            "lsa": [1.0, float("nan"), np.float64(2.0)],
            "label": ["a", 1, None],
        },
        top_inputs=_top(),
        failures=[Failure(metric="lsc", value=25.0, threshold=30.0, message="LSC 25.00% < 30%")],
        warnings=["one warning"],
        missing=[MissingTest(nodeid="t.py::gone", reason="worker crashed"), MissingTest(nodeid="t.py::lost")],
        mistakes=_mistakes(),
        stale=[
            StaleTest(nodeid="t.py::s", inputs=4, group="g", outcome="passed"),
            StaleTest(nodeid="t.py::u", inputs=0),
        ],
        scope=Scope(
            collected=5, selected=4, run=4, recorded=3, reasons=["-x stop"], gated=False, ungated=["lsc"], runs=2
        ),
        covered={"format": "pytest-sadl/covered", "version": 1, "groups": ["g"], "metrics": {}, "tests": {}},
    )


def small_results() -> Results:
    """The smallest results: every optional section absent."""
    return Results(
        created=None,
        version=None,
        model=ModelInfo(),
        config=RunConfig(),
        thresholds={},
        metrics={"lsc": Metric(value=None, covered=0, total=0)},
        layers=[],
        groups=[],
        tests=[],
        inputs={},
        top_inputs=[],
    )


def ood_results() -> Results:
    """:func:`edge_results` with an OOD section (a row with ``None`` metrics, an
    unavailable score, a reference group)."""
    from pytest_sadl.results import Ood, OodRow

    rows = [
        OodRow(
            group="adv", score="lsa", inputs=10, reference_inputs=20, auroc=0.9, aupr_in=0.8, aupr_out=0.7, fpr95=0.1
        ),
        OodRow(
            group="adv", score="dsa", inputs=10, reference_inputs=0, auroc=None, aupr_in=None, aupr_out=None, fpr95=None
        ),
    ]
    ood = Ood(reference="test", rows=rows, labels={"lsa": "LSA"}, unavailable={"mdsa": "not set up"}, sentences=["x"])
    results = edge_results()
    results.ood = ood
    return results
