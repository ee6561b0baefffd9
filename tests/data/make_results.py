"""Generate the fixture results files ``tests/data/results-*.json``, deterministically.

Run ``python tests/data/make_results.py`` from the repository root; the output is
committed, so the report tests never depend on TensorFlow or on the plugin. The files
follow ``docs/results-schema.md`` (schema ``pytest-sadl/results``, version 1):

- ``results-classifier.json``: a 10-class digits ConvNet, 4 groups, 15 tests, one test id
  and one group name containing ``<script>``, an LSC threshold that is missed (the run
  failed), 8x8 grayscale thumbnails of the most surprising inputs (real scikit-learn
  digits, bundled with scikit-learn, no download).
- ``results-baseline.json``: an earlier run of the same model and configuration, with
  some metrics higher and some lower, for the comparison tests.
- ``results-regression.json``: a regression model, where DSA and DSC do not apply
  (``"applicable": false``, ``null`` values), and inputs that are not image-like.

The surprise coverage values are computed from the generated LSA/DSA values with the
same bucket rule as the engine (buckets dividing ``(lower, upper]``), so the numbers in
the files are consistent with each other. Neuron coverage values are made up but
cumulative ones never decrease.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.datasets import load_digits

HERE = Path(__file__).resolve().parent
METRICS = ("lsc", "dsc", "nc", "kmnc", "nbc", "snac")
SCRIPT_GROUP = "<script>alert('group')</script>"
SCRIPT_TEST = "tests/test_xss.py::test_name[<script>alert('id')</script>]"


def _buckets(values: np.ndarray, lower: float, upper: float, n: int) -> np.ndarray:
    """Bucket index of each value in ``(lower, upper]``, -1 outside."""
    width = (upper - lower) / n
    idx = np.ceil((values - lower) / width).astype(int) - 1
    idx[(values <= lower) | (values > upper)] = -1
    return idx


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(float(x), nd)


def _image(pixels: np.ndarray) -> dict[str, Any]:
    lo, hi = float(pixels.min()), float(pixels.max())
    scaled = np.zeros_like(pixels) if hi == lo else (pixels - lo) / (hi - lo) * 255.0
    return {
        "height": 8,
        "width": 8,
        "channels": 1,
        "pixels": [int(v) for v in np.rint(scaled).astype(np.uint8).ravel()],
    }


def _sc_configs(regression: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The LSC and DSC bucket configurations of a document."""
    lsc_cfg = {"lower": 0.0, "upper": 120.0, "buckets": 1000, "rule": "configured"}
    dsc_cfg = {
        "lower": 0.0,
        "upper": 2.0,
        "buckets": 1000,
        "rule": "default: max DSA of the training traces (leave-one-out)",
    }
    if regression:
        lsc_cfg = {"lower": 0.0, "upper": 80.0, "buckets": 500, "rule": "default: max LSA of the training traces"}
    return lsc_cfg, dsc_cfg


def make(
    *,
    seed: int,
    regression: bool = False,
    created: str,
    shift: float = 1.0,
    fingerprint: str,
    neuron_scale: float = 1.0,
) -> dict[str, Any]:
    """Build one results document."""
    rng = np.random.default_rng(seed)
    digits = load_digits()
    groups: list[tuple[str, list[str], float, float]] = [
        # name, test ids, LSA scale, DSA scale
        (
            "test",
            [
                "tests/test_model.py::test_accuracy",
                "tests/test_model.py::test_per_class_recall",
                "tests/test_model.py::test_confusion_matrix",
                "tests/test_model.py::test_calibration",
            ],
            18.0,
            0.35,
        ),
        (
            "fgsm",
            [
                "tests/test_adversarial.py::test_fgsm[eps=0.05]",
                "tests/test_adversarial.py::test_fgsm[eps=0.1]",
                "tests/test_adversarial.py::test_fgsm[eps=0.2]",
                "tests/test_adversarial.py::test_bim[eps=0.1]",
            ],
            32.0 * shift,
            0.6 * shift,
        ),
        (
            "deeptest",
            [
                "tests/test_transforms.py::test_rotation[15]",
                "tests/test_transforms.py::test_rotation[30]",
                "tests/test_transforms.py::test_shift",
                "tests/test_transforms.py::test_noise",
                "tests/test_transforms.py::test_contrast",
            ],
            26.0,
            0.5,
        ),
        (SCRIPT_GROUP, [SCRIPT_TEST, "tests/test_xss.py::test_plain"], 45.0, 0.9),
    ]
    lsc_cfg, dsc_cfg = _sc_configs(regression)

    tests: list[dict[str, Any]] = []
    in_test: list[int] = []
    in_pred: list[int | None] = []
    in_lsa: list[float] = []
    in_dsa: list[float | None] = []
    in_img: list[int] = []
    outcomes = ["passed"] * 15
    outcomes[6] = "failed"  # fgsm eps=0.2
    outcomes[11] = "skipped"  # test_noise
    seen_lsc: set[int] = set()
    seen_dsc: set[int] = set()
    group_rows: list[dict[str, Any]] = []
    nc_total, kmnc_total, nbc_total, snac_total = 320, 320000, 640, 320
    # Neuron coverage per group alone, and the cumulative union, made up but monotone.
    neuron_alone = {
        "test": (0.38, 0.52, 0.012, 0.019),
        "fgsm": (0.41, 0.47, 0.05, 0.075),
        "deeptest": (0.36, 0.44, 0.031, 0.05),
        SCRIPT_GROUP: (0.22, 0.18, 0.02, 0.03),
    }
    cum_neuron = [0.0, 0.0, 0.0, 0.0]
    ti = 0
    for gname, ids, lscale, dscale in groups:
        g_lsa: list[float] = []
        g_dsa: list[float] = []
        for nodeid in ids:
            outcome = outcomes[ti]
            n = 0 if outcome == "skipped" else int(rng.integers(12, 40))
            lsa = rng.gamma(2.0, lscale / 2.0, size=n)
            dsa = rng.gamma(3.0, dscale / 3.0, size=n)
            if gname == SCRIPT_GROUP and n:
                lsa[0] = 131.5  # above the upper bound: counts for no bucket
            pred = rng.integers(0, 10, size=n)
            imgs = rng.integers(0, len(digits.images), size=n)
            lb = _buckets(lsa, lsc_cfg["lower"], lsc_cfg["upper"], lsc_cfg["buckets"])
            new_lsc = {int(b) for b in lb if b >= 0} - seen_lsc
            seen_lsc |= new_lsc
            if regression:
                new_dsc_n: int | None = None
            else:
                db = _buckets(dsa, dsc_cfg["lower"], dsc_cfg["upper"], dsc_cfg["buckets"])
                new_dsc = {int(b) for b in db if b >= 0} - seen_dsc
                seen_dsc |= new_dsc
                new_dsc_n = len(new_dsc)
            share = n / 40.0
            tests.append(
                {
                    "nodeid": nodeid,
                    "group": gname,
                    "outcome": outcome,
                    "inputs": n,
                    "lsa_mean": _r(lsa.mean()) if n else None,
                    "lsa_max": _r(lsa.max()) if n else None,
                    "dsa_mean": None if regression or not n else _r(dsa.mean()),
                    "dsa_max": None if regression or not n else _r(dsa.max()),
                    "new": {
                        "lsc": len(new_lsc),
                        "dsc": new_dsc_n,
                        "nc": int(round(rng.uniform(0, 30) * share)) if ti % 5 != 3 else 0,
                        "kmnc": int(round(rng.uniform(0, 40000) * share)),
                        "nbc": int(round(rng.uniform(0, 12) * share)) if ti % 4 else 0,
                        "snac": int(round(rng.uniform(0, 8) * share)) if ti % 4 else 0,
                    },
                }
            )
            for k in range(n):
                in_test.append(ti)
                in_pred.append(None if regression else int(pred[k]))
                in_lsa.append(_r(lsa[k]))
                in_dsa.append(None if regression else _r(dsa[k]))
                in_img.append(int(imgs[k]))
            g_lsa.extend(lsa.tolist())
            g_dsa.extend(dsa.tolist())
            ti += 1
        ga = np.asarray(g_lsa)
        gd = np.asarray(g_dsa)
        alone_lsc = (
            len({int(b) for b in _buckets(ga, lsc_cfg["lower"], lsc_cfg["upper"], lsc_cfg["buckets"]) if b >= 0})
            / lsc_cfg["buckets"]
        )
        alone_dsc = (
            None
            if regression
            else len({int(b) for b in _buckets(gd, dsc_cfg["lower"], dsc_cfg["upper"], dsc_cfg["buckets"]) if b >= 0})
            / dsc_cfg["buckets"]
        )
        alone_n = tuple(v * neuron_scale for v in neuron_alone[gname])
        cum_neuron = [min(1.0, max(c, a) + a * 0.25) for c, a in zip(cum_neuron, alone_n, strict=True)]
        group_rows.append(
            {
                "name": gname,
                "tests": len(ids),
                "inputs": int(len(ga)),
                "metrics": {
                    "lsc": _r(alone_lsc),
                    "dsc": _r(alone_dsc),
                    "nc": _r(alone_n[0]),
                    "kmnc": _r(alone_n[1]),
                    "nbc": _r(alone_n[2]),
                    "snac": _r(alone_n[3]),
                },
                "cumulative": {
                    "lsc": _r(len(seen_lsc) / lsc_cfg["buckets"]),
                    "dsc": None if regression else _r(len(seen_dsc) / dsc_cfg["buckets"]),
                    "nc": _r(cum_neuron[0]),
                    "kmnc": _r(cum_neuron[1]),
                    "nbc": _r(cum_neuron[2]),
                    "snac": _r(cum_neuron[3]),
                },
            }
        )

    lsa_all = np.asarray(in_lsa)
    lsc_cov = len(seen_lsc)
    metrics: dict[str, dict[str, Any]] = {
        "lsc": {
            "value": _r(lsc_cov / lsc_cfg["buckets"]),
            "covered": lsc_cov,
            "total": lsc_cfg["buckets"],
            "applicable": True,
            "below": int((lsa_all <= lsc_cfg["lower"]).sum()),
            "above": int((lsa_all > lsc_cfg["upper"]).sum()),
            "count": int(lsa_all.size),
        },
    }
    if regression:
        metrics["dsc"] = {
            "value": None,
            "covered": None,
            "total": None,
            "applicable": False,
            "below": None,
            "above": None,
            "count": None,
        }
    else:
        dsa_all = np.asarray(in_dsa, dtype=float)
        metrics["dsc"] = {
            "value": _r(len(seen_dsc) / dsc_cfg["buckets"]),
            "covered": len(seen_dsc),
            "total": dsc_cfg["buckets"],
            "applicable": True,
            "below": int((dsa_all <= dsc_cfg["lower"]).sum()),
            "above": int((dsa_all > dsc_cfg["upper"]).sum()),
            "count": int(dsa_all.size),
        }
    for name, total, value in zip(
        ("nc", "kmnc", "nbc", "snac"), (nc_total, kmnc_total, nbc_total, snac_total), cum_neuron, strict=True
    ):
        covered = int(round(value * total))
        metrics[name] = {"value": _r(covered / total), "covered": covered, "total": total, "applicable": True}
        group_rows[-1]["cumulative"][name] = metrics[name]["value"]

    layer_specs = [("conv2d", 16), ("conv2d_1", 32), ("dense", 256), ("dense_1", 16)]
    layers = []
    for (lname, neurons), f in zip(layer_specs, (0.9, 1.25, 0.8, 1.1), strict=True):
        layers.append(
            {
                "name": lname,
                "neurons": neurons,
                "nc": _r(min(1.0, cum_neuron[0] * f)),
                "kmnc": _r(min(1.0, cum_neuron[1] * f)),
                "nbc": _r(min(1.0, cum_neuron[2] * f)),
                "snac": _r(min(1.0, cum_neuron[3] * f)),
            }
        )

    top: list[dict[str, Any]] = []
    order_lsa = np.argsort(-lsa_all, kind="stable")[:12]
    by: list[tuple[str, np.ndarray]] = [("lsa", order_lsa)]
    if not regression:
        order_dsa = np.argsort(-np.asarray(in_dsa, dtype=float), kind="stable")[:12]
        by.append(("dsa", order_dsa))
    for key, order in by:
        for rank, i in enumerate(order, start=1):
            i = int(i)
            top.append(
                {
                    "by": key,
                    "rank": rank,
                    "input": i,
                    "test": in_test[i],
                    "pred": in_pred[i],
                    "lsa": in_lsa[i],
                    "dsa": in_dsa[i],
                    "image": None if regression else _image(digits.images[in_img[i]]),
                }
            )

    thresholds: dict[str, float] = {"lsc": 30.0, "nc": 40.0} if not regression else {"lsc": 20.0}
    failures = []
    for metric, thr in thresholds.items():
        value = metrics[metric]["value"]
        if value is not None and round(value * 100, 2) < thr:
            failures.append(
                {
                    "metric": metric,
                    "value": round(value * 100, 2),
                    "threshold": thr,
                    "message": (
                        f"{metric.upper()} {value * 100:.2f}% is below --sadl-fail-under={metric}:{thr:g} ({thr:.2f}%)"
                    ),
                }
            )
    warnings = []
    if regression:
        warnings.append("DSA and DSC do not apply to a regression model; they are not reported")
    return {
        "schema": "pytest-sadl/results",
        "version": 1,
        "created": created,
        "pytest_sadl_version": "0.1.0",
        "model": {
            "name": "digits_regressor" if regression else "digits_cnn",
            "source": "fixture" if regression else "models/digits.keras",
            "fingerprint": fingerprint,
            "profile_fingerprint": "9b1c" + fingerprint[4:][::-1],
            "classifier": not regression,
            "n_classes": None if regression else 10,
            "input_shape": [64] if regression else [8, 8, 1],
            "n_train": 1437,
        },
        "config": {
            "sa_layers": ["dense"],
            "coverage_layers": [name for name, _ in layer_specs],
            "nc_threshold": 0.5,
            "kmnc_k": 1000,
            "var_threshold": 1e-05,
            "lsc": lsc_cfg,
            "dsc": None if regression else dsc_cfg,
        },
        "thresholds": thresholds,
        "metrics": metrics,
        "layers": layers,
        "groups": group_rows,
        "tests": tests,
        "inputs": {"test": in_test, "pred": in_pred, "lsa": in_lsa, "dsa": in_dsa},
        "top_inputs": top,
        "outcome": {"passed": not failures, "failures": failures, "warnings": warnings},
    }


def add_guidance(doc: dict[str, Any], seed: int) -> dict[str, Any]:
    """Add what issue 10 brought: MDSA per input and test, MDSC (bucketed like the others),
    true labels of most inputs and the "does surprise predict mistakes" figures computed by
    :func:`pytest_sadl.criteria.mistakes.analyse` from them, and a most-surprising input that two
    tests fed (the gallery shows it once, with both tests)."""
    from pytest_sadl.criteria.mistakes import BASELINES, SCORE_LABELS, analyse

    rng = np.random.default_rng(seed + 100)
    inputs, tests = doc["inputs"], doc["tests"]
    regression = not doc["model"]["classifier"]
    lsa = np.asarray(inputs["lsa"], dtype=float)
    n = lsa.size
    mdsa = np.round(np.sqrt(lsa.clip(0)) * 1.4 + rng.gamma(2.0, 0.6, size=n), 4)
    inputs["mdsa"] = [float(v) for v in mdsa]
    cfg = {"lower": 0.0, "upper": 24.0, "buckets": 400, "rule": "configured"}
    doc["config"]["mdsc"] = cfg
    owner = np.asarray(inputs["test"])
    seen: set[int] = set()
    for t, test in enumerate(tests):
        rows = np.flatnonzero(owner == t)
        b = {int(x) for x in _buckets(mdsa[rows], cfg["lower"], cfg["upper"], cfg["buckets"]) if x >= 0}
        test["mdsa_mean"] = _r(mdsa[rows].mean()) if rows.size else None
        test["mdsa_max"] = _r(mdsa[rows].max()) if rows.size else None
        test["new"]["mdsc"] = len(b - seen)
        seen |= b
    group_of = [t["group"] for t in tests]
    cum: set[int] = set()
    for g in doc["groups"]:
        rows = np.flatnonzero(np.isin(owner, [i for i, name in enumerate(group_of) if name == g["name"]]))
        b = {int(x) for x in _buckets(mdsa[rows], cfg["lower"], cfg["upper"], cfg["buckets"]) if x >= 0}
        cum |= b
        g["metrics"]["mdsc"] = _r(len(b) / cfg["buckets"])
        g["cumulative"]["mdsc"] = _r(len(cum) / cfg["buckets"])
    metrics = {}
    for k, v in doc["metrics"].items():
        metrics[k] = v
        if k == "dsc":
            metrics["mdsc"] = {
                "value": _r(len(seen) / cfg["buckets"]),
                "covered": len(seen),
                "total": cfg["buckets"],
                "applicable": True,
                "below": int((mdsa <= cfg["lower"]).sum()),
                "above": int((mdsa > cfg["upper"]).sum()),
                "count": int(n),
            }
    doc["metrics"] = metrics
    # Labels: every input but a few; mistakes likelier the more surprising the input.
    labelled = rng.random(n) > 0.1
    risk = (lsa - lsa.min()) / (np.ptp(lsa) or 1.0)
    if regression:
        truth = rng.normal(size=n)
        out = truth + rng.normal(size=n) * (0.2 + risk)
        inputs["label"] = [_r(v) if ok else None for v, ok in zip(truth, labelled, strict=True)]
        found = analyse(
            {"lsa": lsa, "mdsa": mdsa},
            inputs["label"],
            classifier=False,
            output=out,
            groups=[group_of[t] for t in owner],
        )
    else:
        pred = np.asarray(inputs["pred"])
        wrong = rng.random(n) < 0.05 + 0.6 * risk
        truth = np.where(wrong, (pred + 1 + rng.integers(0, 9, n)) % 10, pred)
        probs = rng.dirichlet(np.ones(10) * 0.3, n)
        probs[np.arange(n), pred] += 1.5 - wrong
        probs /= probs.sum(axis=1, keepdims=True)
        inputs["label"] = [int(v) if ok else None for v, ok in zip(truth, labelled, strict=True)]
        dsa = np.asarray(inputs["dsa"], dtype=float)
        found = analyse(
            {"lsa": lsa, "dsa": dsa, "mdsa": mdsa},
            inputs["label"],
            classifier=True,
            pred=pred,
            output=probs,
            groups=[group_of[t] for t in owner],
        )
    overall, per_group = found  # type: ignore[misc]
    doc["mistakes"] = json.loads(
        json.dumps(
            {
                "overall": overall.to_dict(),
                "groups": [g.to_dict() for g in per_group],
                "labels": dict(SCORE_LABELS),
                "baselines": list(BASELINES),
            },
            default=float,
        ),
        parse_float=lambda v: round(float(v), 4),
    )
    order = np.argsort(-mdsa, kind="stable")[:12]
    for rank, i in enumerate(order, start=1):
        i = int(i)
        first = next(t for t in doc["top_inputs"] if t["by"] == "lsa")
        doc["top_inputs"].append(
            {
                **{k: v for k, v in first.items() if k == "image"},
                "by": "mdsa",
                "rank": rank,
                "input": i,
                "test": inputs["test"][i],
                "pred": inputs["pred"][i],
                "lsa": inputs["lsa"][i],
                "dsa": inputs["dsa"][i],
                "mdsa": inputs["mdsa"][i],
            }
        )
    for item in doc["top_inputs"]:
        item["mdsa"] = inputs["mdsa"][item["input"]]
        item["tests"] = [item["test"]]
        item["copies"] = 1
    top = doc["top_inputs"][0]  # the most surprising input by LSA: fed by a second test too
    top["tests"] = sorted({top["test"], 0})
    top["copies"] = 3
    return doc


def main() -> None:
    """Write the fixture files next to this script."""
    fp = "3f2a" + "".join(f"{(i * 37 + 11) % 256:02x}" for i in range(30))
    docs = {
        "results-classifier.json": add_guidance(make(seed=5, created="2026-12-01T18:00:00+00:00", fingerprint=fp), 5),
        "results-baseline.json": make(
            seed=4, created="2026-11-24T09:30:00+00:00", shift=1.3, fingerprint=fp, neuron_scale=0.93
        ),
        "results-regression.json": add_guidance(
            make(seed=6, regression=True, created="2026-12-01T18:05:00+00:00", fingerprint="77e0" + fp[4:]), 6
        ),
    }
    for name, doc in docs.items():
        for value in doc["inputs"]["lsa"]:
            assert value is None or math.isfinite(value)
        text = json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
        (HERE / name).write_text(text, encoding="utf-8")
        print(f"wrote {HERE / name}: {len(text)} bytes")


if __name__ == "__main__":
    main()
