"""``sadl select``: choose the inputs of a pool to label or to test next.

::

    sadl select POOL.npz --model M --train T --budget 100 --strategy coverage
                [--results sadl-report.json] [--by lsa] [--upto 0.5] [--seed 0]
                [--out DIR] [--sa-layers L ...] [--cache-dir D] [--rootdir R]

Traces the pool through the model (TensorFlow is imported here, as in ``profile build``),
scores it with the cached training profile's LSA, DSA and MDSA, and applies one of the
strategies of :mod:`pytest_sadl.selection`. Writes to ``--out`` (default ``sadl-select``):
``selection.json`` (the chosen pool indices in pick order, their scores, the strategy and
its parameters), ``selected.npz`` (the chosen inputs as ``x``, their ``y`` when the pool
has labels, and their pool ``index``) and, for image inputs, ``index.html``, a thumbnail
gallery. :func:`select_from_pool` is the same as a Python function.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from .selection import STRATEGIES, Selection, covered_from_results, select

__all__ = ["register", "select_from_pool", "write_selection"]


def select_from_pool(
    profile: Any,
    model: Any,
    x: np.ndarray,
    strategy: str,
    budget: int,
    *,
    by: str = "lsa",
    results: dict[str, Any] | None = None,
    upto: float = 1.0,
    seed: int = 0,
    batch_size: int = 256,
) -> tuple[Selection, dict[str, np.ndarray]]:
    """Score the pool ``x`` with ``profile`` (a :class:`~pytest_sadl.profile.TrainingProfile`
    of ``model``) and choose ``budget`` inputs; returns the selection and the pool's scores.

    ``results``: a results document of the current tests; its SC bounds and covered buckets
    are what the ``coverage`` strategy starts from (and the ``ranges`` strategy's ``U``).
    Without it the bounds are the profile's defaults (as a run without configured bounds
    uses) and nothing counts as covered yet.
    """
    from .engine import ProfileView, default_sc_bounds

    traces = profile.trace_model(model).traces(x, batch_size=batch_size, what="the pool")
    view = ProfileView.of(profile)
    scores = view.score(np.asarray(traces.sa, dtype=np.float64), np.asarray(traces.pred))
    if results is not None:
        bounds, covered = covered_from_results(results)
    else:
        bounds, covered = default_sc_bounds(view), {}
    chosen = select(
        strategy, budget, scores=scores, by=by, output=np.asarray(traces.output) if profile.classifier else None,
        bounds=bounds, covered=covered, upto=upto, seed=seed,
    )
    if strategy == "deepgini":
        from .mistakes import confidence_scores

        scores = {**scores, "deepgini": confidence_scores(np.asarray(traces.output))["deepgini"]}
    return chosen, scores


def _gallery(chosen: Selection, x: np.ndarray, scores: dict[str, np.ndarray], y: np.ndarray | None) -> str | None:
    """A self-contained HTML page of the chosen inputs' thumbnails; ``None`` for non-images."""
    from .recorder import thumbnails
    from .report.html import _png

    thumbs = thumbnails(x[chosen.indices]) if len(chosen.indices) else None
    if thumbs is None:
        return None
    cells = []
    for rank, (i, thumb) in enumerate(zip(chosen.indices.tolist(), thumbs), 1):
        h, w, c = thumb.shape
        src = _png(w, h, c, thumb.reshape(-1).tolist()) or ""
        label = "" if y is None else f" · label {html.escape(str(y[i].tolist()))}"
        values = " · ".join(f"{k.upper() if k != 'deepgini' else 'DeepGini'} {v[i]:.3g}" for k, v in scores.items())
        cells.append(
            f'<figure><img src="{src}" alt="pool input {i}" width="72" height="72">'
            f"<figcaption>#{rank} · input {i}{label}<br>{html.escape(values)}</figcaption></figure>"
        )
    title = f"sadl select: {len(chosen.indices)} of {chosen.pool} inputs by {chosen.strategy}"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; style-src 'unsafe-inline'\">"
        f"<title>{html.escape(title)}</title><style>"
        "body{font:14px system-ui,sans-serif;margin:16px}"
        ".g{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:10px}"
        "figure{margin:0;border:1px solid #ccc;border-radius:8px;padding:8px;font-size:12px}"
        "img{display:block;margin:0 auto 6px;image-rendering:pixelated;background:#000}"
        f"</style></head><body><h1>{html.escape(title)}</h1>"
        f"<p>{html.escape(' '.join(chosen.notes))}</p><div class=\"g\">" + "".join(cells) + "</div></body></html>\n"
    )


def write_selection(
    out: str | os.PathLike[str], chosen: Selection, x: np.ndarray, scores: dict[str, np.ndarray], y: np.ndarray | None
) -> list[Path]:
    """Write ``selection.json``, ``selected.npz`` and (images) ``index.html`` into ``out``."""
    from .atomic import atomic_open, atomic_write_text  # the project's one durable writer

    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file; --out needs a directory")
    folder.mkdir(parents=True, exist_ok=True)
    idx = chosen.indices
    doc = {
        **chosen.to_dict(),
        "scores": {k: [None if not np.isfinite(v[i]) else float(v[i]) for i in idx] for k, v in scores.items()},
    }
    written = [atomic_write_text(folder / "selection.json", json.dumps(doc, indent=1) + "\n")]
    arrays = {"x": x[idx], "index": idx}
    if y is not None:
        arrays["y"] = y[idx]
    with atomic_open(folder / "selected.npz") as fh:
        np.savez(fh, **arrays)
    written.append(folder / "selected.npz")
    page = _gallery(chosen, x, scores, y)
    if page is not None:
        written.append(atomic_write_text(folder / "index.html", page))
    return written


def cmd_select(args: argparse.Namespace) -> int:
    """``sadl select``: the handler."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from .cli import _cache_dir, _layers
    from .data import SadlConfigError, load_training_data
    from .modelio import load_model
    from .profile import ProfileOptions, load_or_build

    if args.budget < 1:
        raise SadlConfigError(f"--budget={args.budget}: choose at least 1 input")
    if args.strategy == "ranges" and not 0 < args.upto <= 1:
        raise SadlConfigError(f"--upto={args.upto}: give a fraction of U in (0, 1], e.g. 0.25 for [0, U/4]")
    results = None
    if args.results:
        from .report._load import load_results

        try:
            results = load_results(args.results)
        except ValueError as exc:
            raise SadlConfigError(f"--results: {exc}") from None
    base_dir = Path(args.rootdir) if args.rootdir else None
    pool = load_training_data(args.pool, base_dir=base_dir, what="the pool")
    if pool.x is None:
        raise SadlConfigError(f"{args.pool}: the pool must be a .npz (key 'x', optional 'y') or .npy file")
    x = np.asarray(pool.x)
    y = None if pool.y is None else np.asarray(pool.y)
    model = load_model(args.model, base_dir=base_dir)
    options = ProfileOptions(sa_layers=_layers(args.sa_layers), coverage_layers=_layers(args.coverage_layers),
                             var_threshold=args.var_threshold)
    profile = load_or_build(model, args.train, options, _cache_dir(args), base_dir=base_dir)
    try:
        chosen, scores = select_from_pool(profile, model, x, args.strategy, args.budget, by=args.by, results=results,
                                          upto=args.upto, seed=args.seed)
    except ValueError as exc:
        raise SadlConfigError(str(exc)) from None
    written = write_selection(args.out, chosen, x, scores, y)
    head = f"selected {len(chosen.indices)} of {chosen.pool} inputs by {chosen.strategy}"
    if chosen.strategy in ("surprise", "ranges"):
        head += f" ({chosen.by.upper() if chosen.by else ''}"
        head += f", range [{chosen.range[0]:.4g}, {chosen.range[1]:.4g}], {chosen.eligible} eligible)" if chosen.range else ")"
    if chosen.new_buckets is not None:
        head += f": {sum(chosen.new_buckets)} new SC buckets"
    print(head)
    for note in chosen.notes:
        print(f"  {note}")
    print("first picks: " + ", ".join(str(i) for i in chosen.indices[:10].tolist()) + (" …" if len(chosen.indices) > 10 else ""))
    for path in written:
        print(f"wrote {path}")
    return 0


def register(sub: Any) -> None:
    """Add ``select`` to the ``sadl`` subcommands."""
    from .cli import _add_location

    p = sub.add_parser(
        "select",
        help="choose inputs of a pool to label or test next (by surprise, SC coverage, Table VII ranges or DeepGini)",
        description="Score a pool of inputs with the training profile's LSA, DSA and MDSA and choose a budget of them: "
        "'surprise' takes the most surprising; 'coverage' greedily covers the most surprise-coverage buckets the "
        "current tests leave uncovered (give --results); 'ranges' samples at random from [0, upto * U] of one SA as the "
        "paper's Table VII does; 'deepgini' is the confidence baseline.",
        epilog="example: sadl select data/pool.npz --model models/digits.keras --train data/train.npz "
        "--strategy coverage --results sadl-report.json --budget 100",
    )
    p.add_argument("pool", help="the pool: a .npz (inputs 'x', optional labels 'y') or .npy file")
    p.add_argument("--model", required=True, metavar="M", help="the model: a .keras file or 'package.module:function'")
    p.add_argument("--train", required=True, metavar="T", help="training inputs (as for 'sadl profile build')")
    p.add_argument("--budget", type=int, default=100, metavar="N", help="inputs to choose (default %(default)s)")
    p.add_argument("--strategy", choices=STRATEGIES, default="surprise", help="how to choose (default %(default)s)")
    p.add_argument("--by", choices=("lsa", "dsa", "mdsa"), default="lsa", help="the SA of 'surprise' and 'ranges' (default %(default)s)")
    p.add_argument("--results", metavar="JSON", help="results JSON of the current tests: SC bounds and covered buckets")
    p.add_argument("--upto", type=float, default=1.0, metavar="F", help="'ranges': sample from [lower, lower + F (U - lower)] (default 1)")
    p.add_argument("--seed", type=int, default=0, help="'ranges': random seed (default 0)")
    p.add_argument("--out", default="sadl-select", metavar="DIR", help="output directory (default %(default)s)")
    p.add_argument("--sa-layers", nargs="+", metavar="LAYER", help="layers for LSA/DSA/MDSA (default: the last hidden layer)")
    p.add_argument("--coverage-layers", nargs="+", metavar="LAYER", help="coverage layers of the profile (default: every layer with neurons)")
    p.add_argument("--var-threshold", type=float, default=1e-5, metavar="V", help="LSA/MDSA variance threshold (default %(default)g)")
    _add_location(p)
    p.set_defaults(func=cmd_select)


if __name__ == "__main__":  # pragma: no cover
    from .cli import main

    sys.exit(main(["select", *sys.argv[1:]]))
