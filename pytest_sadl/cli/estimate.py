"""``sadl estimate``: how accurate is the model on a pool nobody has labelled.

::

    sadl estimate choose POOL.npz [--model M] [--train T] --budget 100
                  [--method stratified|random|ces] [--by lsa] [--seed 0] [--out DIR]
    sadl estimate accuracy DIR/plan.json LABELS.npy [--confidence 0.95]

``choose`` traces the pool through the model, chooses which inputs to label
(:mod:`pytest_sadl.criteria.estimate`: simple random, stratified by a surprise score, or
CES on the SA layer's traces) and writes ``plan.json`` (the plan, and the model's
predicted class of each chosen input) and ``to-label.npz`` (the chosen inputs as ``x`` and
their pool ``index``) to ``--out`` (default ``sadl-estimate``). ``accuracy`` reads the
plan and the labels (one per planned input in plan order, or one per pool input) and
prints the pool's estimated accuracy with its confidence interval.
:func:`plan_pool` is ``choose`` as a Python function.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sadl.cli.args import (
    add_location,
    add_model_options,
    add_profile_options,
    cache_dir_for,
    check_out_dir,
    model_and_train,
    project_options,
)

if TYPE_CHECKING:  # NumPy is imported when a command runs, not for --help
    import numpy as np

    from pytest_sadl.criteria.estimate import Plan

#: :data:`pytest_sadl.criteria.estimate.METHODS`, named here so that --help imports no NumPy
METHODS = ("stratified", "random", "ces")

__all__ = ["plan_pool", "register"]


def plan_pool(
    profile: Any,
    model: Any,
    x: Any,
    method: str,
    budget: int,
    *,
    by: str = "lsa",
    seed: int = 0,
    options: Any = None,
    batch_size: int = 256,
) -> tuple[Plan, np.ndarray]:
    """The labelling plan of the pool ``x`` (``profile``: the model's training profile) and
    the model's output on the pool (predicted classes). ``by``: the surprise score the
    ``stratified`` method cuts the pool by; ``ces`` works on the SA layer's traces."""
    import numpy as np

    from pytest_sadl.criteria.estimate import choose

    if not profile.classifier:
        raise ValueError("sadl estimate estimates a classifier's accuracy; this model is a regression model")
    traces = profile.trace_model(model).traces(x, batch_size=batch_size, what="the pool")
    sa, pred = np.asarray(traces.sa, dtype=np.float64), np.asarray(traces.pred)
    scores = _strata_scores(profile, options, by, sa, pred) if method == "stratified" else None
    return choose(method, budget, n=len(sa), seed=seed, scores=scores, features=sa), pred


def _strata_scores(profile: Any, options: Any, by: str, sa: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """The pool's surprise score ``by`` (what the ``stratified`` method cuts the pool by);
    ValueError when it is not a surprise score or cannot be set up on the profile."""
    from pytest_sadl.criteria.registry import SCORES
    from pytest_sadl.engine import ProfileView

    if by not in SCORES:
        raise ValueError(f"--by {by!r} is not a surprise score; choose from {', '.join(SCORES)}")
    view = ProfileView.of(profile, [SCORES[by].name], options)
    found = view.score(sa, pred)
    if by not in found:
        raise ValueError(view.unavailable.get(by, f"{by} cannot be set up on this profile"))
    scores: np.ndarray = found[by]
    return scores


def cmd_choose(args: argparse.Namespace) -> int:
    """``sadl estimate choose``: the handler."""
    import numpy as np

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from pytest_sadl.atomic import atomic_open, atomic_write_text
    from pytest_sadl.capture.data import load_training_data
    from pytest_sadl.capture.model import load_model
    from pytest_sadl.errors import SadlConfigError
    from pytest_sadl.profile.build import ProfileOptions
    from pytest_sadl.profile.lookup import load_or_build

    folder = check_out_dir(args.out, "the chosen inputs")
    sadl = project_options(args)
    model_spec, train, base_dir = model_and_train(args, sadl)
    pool = load_training_data(args.pool, base_dir=base_dir, what="the pool")
    if pool.x is None:
        raise SadlConfigError(
            f"{args.pool}: the pool must be a .npz (key 'x' or one array per input name) or .npy file"
        )
    model = load_model(model_spec, base_dir=base_dir)
    profile = load_or_build(model, train, ProfileOptions.from_sadl(sadl), cache_dir_for(args, sadl), base_dir=base_dir)
    x = pool.bind(list(profile.trace_model(model).input_names)).x
    try:
        plan, pred = plan_pool(
            profile, model, x, args.method, args.budget, by=args.by, seed=args.seed, options=sadl,
            batch_size=sadl.batch_size,
        )  # fmt: skip
    except ValueError as exc:
        raise SadlConfigError(str(exc)) from None
    idx = plan.indices
    doc = {**plan.to_dict(), "by": args.by if plan.method == "stratified" else None, "pred": pred[idx].tolist()}
    written = [atomic_write_text(folder / "plan.json", json.dumps(doc, indent=1) + "\n")]
    with atomic_open(folder / "to-label.npz") as fh:
        np.savez(fh, index=idx, **_chosen_inputs(x, idx))
    written.append(folder / "to-label.npz")
    print(f"{plan.method}: label these {idx.size} of the pool's {plan.n_pool} inputs (to-label.npz, in order)")
    for path in written:
        print(f"wrote {path}")
    return 0


def _chosen_inputs(x: Any, idx: np.ndarray) -> dict[str, Any]:
    """The inputs to label: ``x`` (or one array per input name) at ``idx``."""
    import numpy as np

    if isinstance(x, dict):
        return {k: np.asarray(v)[idx] for k, v in x.items()}
    return {"x": np.asarray(x)[idx]}


def _read_labels(path: str) -> np.ndarray:
    """The labels of a .npy, or a .npz's ``y``; a one-line error when they cannot be read."""
    import numpy as np

    from pytest_sadl.errors import SadlConfigError

    try:
        with open(path, "rb") as fh:
            loaded = np.load(fh, allow_pickle=False)
            return np.asarray(loaded["y"] if isinstance(loaded, np.lib.npyio.NpzFile) else loaded)
    except (OSError, ValueError, KeyError) as exc:
        raise SadlConfigError(f"{path}: cannot read the labels ({exc}); give a .npy, or a .npz with 'y'") from None


def _labels(path: str, n_planned: int, n_pool: int, indices: np.ndarray) -> np.ndarray:
    """The planned inputs' labels: a .npy, or a .npz's ``y``; one per planned input, or
    one per pool input; one-hot rows become classes."""
    from pytest_sadl.errors import SadlConfigError

    y = _read_labels(path)
    if y.ndim == 2 and y.shape[1] > 1:
        y = y.argmax(axis=1)
    y = y.reshape(-1)
    if len(y) == n_pool and n_pool != n_planned:
        y = y[indices]
    if len(y) != n_planned:
        raise SadlConfigError(
            f"{path}: {len(y)} labels, but the plan has {n_planned} inputs in a pool of {n_pool}; give one per "
            "planned input (in to-label.npz's order) or one per pool input"
        )
    return y


def cmd_accuracy(args: argparse.Namespace) -> int:
    """``sadl estimate accuracy``: the handler."""
    import numpy as np

    from pytest_sadl.criteria.estimate import Plan, estimate
    from pytest_sadl.errors import SadlConfigError

    try:
        doc = json.loads(Path(args.plan).read_text(encoding="utf-8"))
        plan = Plan.from_dict(doc)
        pred = np.asarray(doc["pred"], dtype=np.int64)
        if pred.shape != plan.indices.shape:
            raise ValueError("its 'pred' does not give one class per planned input")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SadlConfigError(f"{args.plan}: not a plan of 'sadl estimate choose' ({exc})") from None
    y = _labels(args.labels, plan.indices.size, plan.n_pool, plan.indices)
    try:
        got = estimate(plan, pred == y, confidence=args.confidence)
    except ValueError as exc:
        raise SadlConfigError(str(exc)) from None
    pct = round(args.confidence * 100, 1)
    print(
        f"estimated accuracy on the pool of {got.n_pool}: {got.accuracy:.1%} "
        f"({pct:g}% interval {got.low:.1%} to {got.high:.1%}; {got.labelled} labels, {got.method} sampling)"
    )
    return 0


def register(sub: Any) -> None:
    """Add ``estimate`` (choose, accuracy) to the ``sadl`` subcommands."""
    p = sub.add_parser(
        "estimate",
        help="estimate the model's accuracy on an unlabelled pool from a few labels",
        description="Choose which inputs of an unlabelled pool to label for a budget ('choose'), then estimate the "
        "model's accuracy on the whole pool from their labels, with a confidence interval ('accuracy').",
    )
    psub = p.add_subparsers(dest="estimate_command", metavar="ACTION", required=True)
    c = psub.add_parser(
        "choose",
        help="choose which pool inputs to label",
        description="'stratified' cuts the pool into ten strata by a surprise score (--by, default LSA) and samples "
        "each in proportion; 'random' is simple random sampling; 'ces' is Li et al.'s cross-entropy-based sampling "
        "on the SA layer's traces.",
        epilog="example: sadl estimate choose data/pool.npz --budget 100 --method stratified --out sadl-estimate",
    )
    c.add_argument("pool", help="the pool: a .npz (inputs 'x' or one array per model input name) or .npy file")
    add_model_options(c, "training inputs, as for 'sadl profile build' (default: sadl_train of the project's ini)")
    c.add_argument("--budget", type=int, default=100, metavar="N", help="inputs to label (default %(default)s)")
    c.add_argument("--method", choices=METHODS, default="stratified", help="how to choose (default %(default)s)")
    c.add_argument("--by", default="lsa", metavar="SCORE", help="'stratified': the surprise score (default lsa)")
    c.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    c.add_argument("--out", default="sadl-estimate", metavar="DIR", help="output directory (default %(default)s)")
    add_profile_options(c)
    add_location(c)
    c.set_defaults(func=cmd_choose)
    a = psub.add_parser(
        "accuracy",
        help="estimate the pool's accuracy from the chosen inputs' labels",
        epilog="example: sadl estimate accuracy sadl-estimate/plan.json labels.npy",
    )
    a.add_argument("plan", help="plan.json written by 'sadl estimate choose'")
    a.add_argument(
        "labels", help="the labels: .npy, or .npz with 'y'; one per planned input (in order) or per pool input"
    )
    a.add_argument("--confidence", type=float, default=0.95, help="the interval's confidence (default %(default)s)")
    a.set_defaults(func=cmd_accuracy)
