"""What LSA's ``near_singular="drop"`` and ``"keep"`` do on a softmax layer, measured.

The example project's digits CNN (``example_project/models/digits_cnn.keras``) is traced
at its softmax output on its 1,437 training images; its 360 held-out images and their
FGSM versions (``example_project/attacks.py``, eps 0.05, 0.1 and 0.2) are scored with
both modes, with ``var_threshold=0`` (this model is so confident that every softmax
neuron varies by less than the default 1e-5 within some class). Printed: the neurons each mode keeps, the largest difference from
``scipy.stats.gaussian_kde`` on all neurons (what the paper's reference code computes),
and the ROC-AUC with which LSA separates FGSM inputs from clean ones (1.0: every
attacked input more surprising than every clean one).

    python benchmarks/bench_lsa_softmax.py      # needs TensorFlow; about 20 s
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import scipy.stats
from sklearn.metrics import roc_auc_score

ROOT = Path(__file__).resolve().parent.parent / "example_project"


def main() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, str(ROOT))
    from attacks import fgsm

    from pytest_sadl.capture.model import load_model
    from pytest_sadl.criteria.surprise import LSA
    from pytest_sadl.errors import SadlWarning

    model = load_model(str(ROOT / "models" / "digits_cnn.keras"))

    def softmax_traces(x: np.ndarray) -> SimpleNamespace:
        """The model's softmax output, as the paper's reference code takes it."""
        out = np.asarray(model.predict(x, verbose=0, batch_size=512), dtype=np.float32)
        return SimpleNamespace(sa=out, pred=out.argmax(axis=1))

    train, test = np.load(ROOT / "data" / "train.npz"), np.load(ROOT / "data" / "test.npz")
    tr = softmax_traces(train["x"])
    clean = softmax_traces(test["x"])
    print(f"digits CNN, softmax output: {len(tr.sa)} training traces, {len(clean.sa)} held-out inputs")
    engines = {}
    for mode in ("drop", "keep"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SadlWarning)
            engines[mode] = LSA(tr.sa, tr.pred, var_threshold=0.0, near_singular=mode)
    for mode, lsa in engines.items():
        sizes = sorted({cols.size for cols in lsa.kept_by_class.values()})
        print(f"{mode}: neurons per class {sizes} of {tr.sa.shape[1]}")
    # against SciPy on the variance-filtered neurons, for the classes SciPy accepts
    keep = engines["keep"]
    for mode, lsa in engines.items():
        worst, nats = 0.0, []
        got = lsa(clean.sa, clean.pred)
        for c, cols in keep.kept_by_class.items():
            if cols.size != keep.kept.size:
                continue
            sel = clean.pred == c
            if not sel.any():
                continue
            try:
                ref = -scipy.stats.gaussian_kde(tr.sa[tr.pred == c][:, cols].T.astype(np.float64)).logpdf(
                    clean.sa[sel][:, cols].T
                )
            except np.linalg.LinAlgError:
                continue
            worst = max(worst, float(np.max(np.abs(got[sel] - ref) / np.abs(ref))))
            nats.extend(got[sel] - ref)
        print(
            f"{mode} vs SciPy on {keep.kept.size} neurons: largest relative diff {worst:.1e}, median {np.median(nats):+.2f} nats"
        )
    for eps in (0.05, 0.1, 0.2):
        adv = softmax_traces(fgsm(model, test["x"], test["y"], eps))
        row = []
        for mode, lsa in engines.items():
            a, b = lsa(clean.sa, clean.pred), lsa(adv.sa, adv.pred)
            ok = np.isfinite(a).all() and np.isfinite(b).all()
            scores = np.concatenate([a, b])
            labels = np.concatenate([np.zeros(len(a)), np.ones(len(b))])
            finite = np.isfinite(scores)
            row.append(
                f"{mode} {roc_auc_score(labels[finite], scores[finite]):.3f}{'' if ok else ' (NaN scores left out)'}"
            )
        print(f"FGSM eps {eps}: ROC-AUC (FGSM vs clean) " + ", ".join(row))


if __name__ == "__main__":
    main()
