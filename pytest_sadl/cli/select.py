"""``sadl select``: choose the inputs of a pool to label or to test next.

::

    sadl select POOL.npz [--model M] [--train T] --budget 100 --strategy coverage
                [--results sadl-report.json] [--by lsa] [--upto 0.5] [--seed 0]
                [--criterion METRIC] [--out DIR] [--sa-layers L ...] [--coverage-layers L ...] [--output NAME]
                [--var-threshold V] [--lsa-near-singular drop|keep] [--batch-size N]
                [--cache-dir D] [--rootdir R]

Traces the pool through the model (TensorFlow is imported here, as in ``profile build``),
scores it with the cached training profile's LSA, DSA and MDSA, and applies one of the
strategies of :mod:`pytest_sadl.criteria.selection`. Writes to ``--out`` (default ``sadl-select``):
``selection.json`` (the chosen pool indices in pick order, their scores, the strategy and
its parameters), ``selected.npz`` (the chosen inputs as ``x``, their ``y`` when the pool
has labels, and their pool ``index``) and, for image and text inputs, ``index.html``, a gallery
of their thumbnails or the start of each text. :func:`select_from_pool` is the same as a Python function.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sadl.cli.args import (
    add_location,
    add_metrics,
    add_model_options,
    add_profile_options,
    add_sa_components,
    cache_dir_for,
    check_out_dir,
    model_and_train,
    project_options,
)
from pytest_sadl.criteria.registry import DEFAULT_METRICS, METRICS, SCORES

if TYPE_CHECKING:  # NumPy and the selection are imported when a selection runs, not for --help
    import numpy as np

    from pytest_sadl.criteria.selection import Selection

#: The strategies of :data:`pytest_sadl.criteria.selection.STRATEGIES`, named here so that
#: ``sadl select --help`` imports no NumPy (``tests/test_cli.py`` checks they are the same).
STRATEGIES = ("surprise", "coverage", "ranges", "deepgini", "ctm", "cam")

__all__ = ["register", "select_from_pool", "write_selection"]


def select_from_pool(
    profile: Any,
    model: Any,
    x: Any,
    strategy: str,
    budget: int,
    *,
    by: str = "lsa",
    results: dict[str, Any] | None = None,
    options: Any = None,
    upto: float = 1.0,
    seed: int = 0,
    batch_size: int = 256,
    criterion: str | None = None,
    y: np.ndarray | None = None,
    cluster: Any = None,
) -> tuple[Selection, dict[str, np.ndarray]]:
    """Score the pool ``x`` with ``profile`` (a :class:`~pytest_sadl.profile.TrainingProfile`
    of ``model``) and choose ``budget`` inputs; returns the selection and the pool's scores.

    ``x``: one array, or a dict of arrays by input name for a model with several inputs.
    ``results``: a results document of the current tests; its SC bounds and covered buckets
    are what the ``coverage`` strategy starts from (and the ``ranges`` strategy's ``U``).
    Without it the bounds are those of ``options`` (a :class:`~pytest_sadl.config.SadlOptions`,
    the project's ``sadl_sc_bounds``) where set, else the profile's defaults, as a run
    uses; nothing counts as covered yet. ``criterion``: the coverage criterion the ``ctm`` and
    ``cam`` strategies order by (any in the registry), over the same bounds and ranges.
    ``y``: the pool's labels (classes or one-hot rows); with them the APFD of the strategy's
    order of the whole pool is computed (its faults: the inputs the model misclassifies).
    ``cluster``: ``(scorer, model_spec, base_dir)``, a :class:`~pytest_sadl.profile.cluster.ClusterScorer`
    entered: the pool is traced and LSA and DSA scored on its workers (``sadl select
    --dask``), the same values as locally.
    """
    import numpy as np

    from pytest_sadl.criteria.prioritise import faults_of
    from pytest_sadl.criteria.selection import covered_from_results, select
    from pytest_sadl.criteria.shape import Setup
    from pytest_sadl.engine import ProfileView, default_sc_bounds

    traces = _pool_traces(profile, model, x, batch_size, cluster)
    view = ProfileView.of(profile, _pool_metrics(options, by, criterion), options)
    if cluster is not None:  # a view's given scorers: these two on the cluster
        _score_on_cluster(view, cluster[0], profile.classifier)
    scores = view.score(np.asarray(traces.sa, dtype=np.float64), np.asarray(traces.pred))
    with contextlib.suppress(OSError):  # a read-only cache: computed again next time
        profile.keep_dsa_distances()
    bounds, covered = covered_from_results(results) if results is not None else (default_sc_bounds(view, options), {})
    batch = _pool_batch(traces, scores)
    faults = faults_of(np.asarray(traces.pred), y) if y is not None and profile.classifier else None
    chosen = select(
        strategy,
        budget,
        scores=scores,
        by=by,
        output=np.asarray(traces.output) if profile.classifier else None,
        bounds=bounds,
        covered=covered,
        upto=upto,
        seed=seed,
        criterion=criterion,
        setup=Setup(profile.ranges, options, bounds=dict(bounds)),
        batch=batch,
        faults=faults,
    )
    return chosen, _with_deepgini(scores, traces) if strategy == "deepgini" else scores


def _with_deepgini(scores: dict[str, np.ndarray], traces: Any) -> dict[str, np.ndarray]:
    """The pool's scores and its DeepGini (what a deepgini selection is by)."""
    import numpy as np

    from pytest_sadl.criteria.mistakes import confidence_scores

    return {**scores, "deepgini": confidence_scores(np.asarray(traces.output))["deepgini"]}


def _score_on_cluster(view: Any, scorer: Any, classifier: bool) -> None:
    """The view's LSA (and a classifier's DSA) scored on the cluster's workers."""
    from pytest_sadl.profile.cluster import use_cluster_scores

    use_cluster_scores(view, scorer.lsa, scorer.dsa if classifier else None)


def _pool_traces(profile: Any, model: Any, x: Any, batch_size: int, cluster: Any) -> Any:
    """The pool's traces: on the cluster's workers (``sadl select --dask``), else here."""
    if cluster is not None:
        return cluster[0].traces(cluster[1], cluster[2], profile.trace_model(model), x, batch_size, extrema=True)
    return profile.trace_model(model).traces(x, batch_size=batch_size, what="the pool")


def _pool_batch(traces: Any, scores: dict[str, np.ndarray]) -> Any:
    """The criteria's batch of the whole pool: its scores, coverage layers and their extrema."""
    import numpy as np

    from pytest_sadl.criteria.shape import Batch

    layers = [np.asarray(a) for a in traces.coverage]
    extrema = traces.coverage_extrema
    return Batch(scores, layers, list(extrema) if extrema is not None else [None] * len(layers))


def _pool_metrics(options: Any, by: str, criterion: str | None) -> list[str]:
    """The run's metrics (``--sadl-metrics``), the score chosen ``by`` and the ``criterion``
    ctm and cam order by always among them, in report order."""
    wanted = {*(getattr(options, "metrics", None) or DEFAULT_METRICS), *_needed(by, criterion)}
    return [m for m in METRICS if m in wanted]


def _needed(by: str, criterion: str | None) -> list[str]:
    """The metrics a selection computes whatever the run's: the score chosen ``by`` and
    the ``criterion`` ctm and cam order by."""
    score = SCORES[by].name if by in SCORES else None
    return [name for name in (score, criterion) if name is not None]


def _score_label(name: str) -> str:
    return "DeepGini" if name == "deepgini" else name.upper()


def _previews(x: Any, indices: np.ndarray, *, channels_first: bool) -> list[dict[str, str]] | None:
    """Each chosen input as the page shows it: a PNG thumbnail of an image (``src``) or the
    start of a text input (``text``); ``None`` for anything else."""
    from pytest_sadl.records import snippets, thumbnails
    from pytest_sadl.report.images import png_data_url

    chosen = x[indices]
    thumbs = thumbnails(chosen, channels_first=channels_first)
    if thumbs is not None:
        return [{"src": png_data_url(t.shape[1], t.shape[0], t.shape[2], t.reshape(-1).tolist()) or ""} for t in thumbs]
    texts = snippets(chosen)
    return None if texts is None else [{"text": str(t)} for t in texts]


def _gallery_cell(
    rank: int, i: int, preview: dict[str, str], scores: dict[str, np.ndarray], y: np.ndarray | None
) -> dict[str, Any]:
    """The gallery's cell of the pool's input ``i``, picked ``rank``-th: its preview, label and scores."""
    return {
        "rank": rank,
        "index": i,
        **preview,
        "label": None if y is None else str(y[i].tolist()),
        "scores": " · ".join(f"{_score_label(k)} {v[i]:.3g}" for k, v in scores.items()),
    }


def _gallery(
    chosen: Selection, x: Any, scores: dict[str, np.ndarray], y: np.ndarray | None, *, channels_first: bool = False
) -> str | None:
    """A self-contained HTML page of the chosen inputs: thumbnails of images, the start of
    each text input; ``None`` for other inputs (and for a model with several inputs)."""
    import numpy as np

    from pytest_sadl.report.html import render_template

    if not isinstance(x, np.ndarray) or not len(chosen.indices):
        return None
    previews = _previews(x, chosen.indices, channels_first=channels_first)
    if previews is None:
        return None
    cells = [
        _gallery_cell(rank, i, preview, scores, y)
        for rank, (i, preview) in enumerate(zip(chosen.indices.tolist(), previews, strict=True), 1)
    ]
    title = f"sadl select: {len(chosen.indices)} of {chosen.pool} inputs by {chosen.strategy}"
    return render_template("select.html.j2", title=title, notes=" ".join(chosen.notes), cells=cells)


def _finite_at(values: np.ndarray, indices: np.ndarray) -> list[float | None]:
    """``values`` at ``indices`` as JSON numbers (``None`` for NaN and infinities)."""
    import numpy as np

    return [None if not np.isfinite(values[i]) else float(values[i]) for i in indices]


def _selected_arrays(x: Any, y: np.ndarray | None, idx: np.ndarray) -> dict[str, Any]:
    """``selected.npz``'s arrays: the chosen inputs (``x``, or one per input name), their pool
    ``index`` and, when known, their labels ``y``."""
    import numpy as np

    arrays = {k: np.asarray(v)[idx] for k, v in x.items()} if isinstance(x, dict) else {"x": x[idx]}
    arrays["index"] = idx
    if y is not None:
        arrays["y"] = y[idx]
    return arrays


def write_selection(
    out: str | os.PathLike[str],
    chosen: Selection,
    x: Any,
    scores: dict[str, np.ndarray],
    y: np.ndarray | None,
    *,
    channels_first: bool = False,
) -> list[Path]:
    """Write ``selection.json``, ``selected.npz`` and (images, text) ``index.html`` into ``out``
    (``channels_first``: image inputs are PyTorch's ``(n, c, h, w)``).

    ``selected.npz`` holds the chosen inputs as ``x`` (or, for a model with several inputs,
    one array per input name, as a pool is given), their ``y`` when known and pool ``index``."""
    import numpy as np

    from pytest_sadl.atomic import (  # the project's one durable writer
        atomic_open,
        atomic_write_text,
    )

    folder = check_out_dir(out, "the selection")
    idx = chosen.indices
    doc = {**chosen.to_dict(), "scores": {k: _finite_at(v, idx) for k, v in scores.items()}}
    written = [atomic_write_text(folder / "selection.json", json.dumps(doc, indent=1) + "\n")]
    with atomic_open(folder / "selected.npz") as fh:
        np.savez(fh, **_selected_arrays(x, y, idx))
    written.append(folder / "selected.npz")
    page = _gallery(chosen, x, scores, y, channels_first=channels_first)
    if page is not None:
        written.append(atomic_write_text(folder / "index.html", page))
    return written


def _check_layers(key: str, want: list[Any] | None, have: list[Any]) -> None:
    """The results' layers of ``key`` (when they say) must be the profile's."""
    from pytest_sadl.errors import SadlConfigError

    if want is not None and [str(v) for v in want] != [str(v) for v in have]:
        raise SadlConfigError(
            f"--results was measured with {key} {want} but the profile has {have}; "
            "give the same layers (or the results of this configuration)"
        )


def _check_results_config(results: dict[str, Any], profile: Any, options: Any) -> None:
    """The profile must be the one the results were measured with: same layers and
    variance threshold; a one-line error naming both otherwise."""
    import numpy as np

    from pytest_sadl.errors import SadlConfigError

    config = results.get("config") or {}
    for key, have in (("sa_layers", list(profile.sa_layers)), ("coverage_layers", list(profile.coverage_layers))):
        _check_layers(key, config.get(key), have)
    want_v = config.get("var_threshold")
    if want_v is not None and not np.isclose(float(want_v), float(options.var_threshold), rtol=1e-12, atol=0):
        raise SadlConfigError(
            f"--results was measured with var_threshold {want_v:g} but the profile uses {options.var_threshold:g}; "
            "give --var-threshold to match"
        )


def _print_selection(chosen: Selection) -> None:
    """What ``sadl select`` chose, in a few lines."""
    print(_selection_head(chosen))
    if chosen.faults is not None:
        value = "undefined" if chosen.apfd is None else f"{chosen.apfd:.4f}"
        print(
            f"APFD of the {chosen.strategy} order of the pool: {value} ({chosen.faults} misclassified of {chosen.pool})"
        )
    for note in chosen.notes:
        print(f"  {note}")
    print(
        "first picks: "
        + ", ".join(str(i) for i in chosen.indices[:10].tolist())
        + (" …" if len(chosen.indices) > 10 else "")
    )


def _selection_head(chosen: Selection) -> str:
    """The first line: how many inputs were chosen by what, and what they add."""
    head = f"selected {len(chosen.indices)} of {chosen.pool} inputs by {chosen.strategy}"
    if chosen.strategy in ("surprise", "ranges"):
        head += _score_range(chosen)
    if chosen.new_buckets is not None:
        head += f": {sum(chosen.new_buckets)} new SC buckets"
    if chosen.criterion is not None:
        head += f" by {chosen.criterion.upper()}"
    if chosen.new_targets is not None:
        head += f": {sum(chosen.new_targets)} targets" + (" newly covered" if chosen.strategy == "cam" else " in all")
    return head


def _score_range(chosen: Selection) -> str:
    """`` (LSA, range [a, b], n eligible)``: the score a surprise or ranges selection used."""
    out = f" ({chosen.by.upper() if chosen.by else ''}"
    if chosen.range:
        return out + f", range [{chosen.range[0]:.4g}, {chosen.range[1]:.4g}], {chosen.eligible} eligible)"
    return out + ")"


def cmd_select(args: argparse.Namespace) -> int:
    """``sadl select``: the handler."""

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from pytest_sadl.capture.data import load_training_data
    from pytest_sadl.capture.model import load_model
    from pytest_sadl.errors import SadlConfigError
    from pytest_sadl.profile.build import ProfileOptions
    from pytest_sadl.profile.lookup import load_or_build

    _check_select_args(args)
    results = _results_of(args)
    check_out_dir(args.out, "the selection")  # before the model is loaded and the pool traced
    sadl = project_options(args)
    model_spec, train, base_dir = model_and_train(args, sadl)  # flags are relative to the current directory
    pool = load_training_data(args.pool, base_dir=base_dir, what="the pool")
    if pool.x is None:
        raise SadlConfigError(
            f"{args.pool}: the pool must be a .npz (key 'x' or one array per input name, optional 'y') or .npy file"
        )
    model = load_model(model_spec, base_dir=base_dir)
    options = ProfileOptions.from_sadl(sadl)
    profile = load_or_build(
        model, train, options, cache_dir_for(args, sadl), base_dir=base_dir, lock_timeout=sadl.lock_timeout
    )
    if results is not None:
        _check_results_config(results, profile, sadl)
    tm = profile.trace_model(model)
    pool = pool.bind(list(tm.input_names))  # one array, or one per input name as the profile binds
    x = pool.x
    y = _pool_labels(pool.y)
    try:
        with _cluster(args, sadl, profile, model_spec, base_dir) as cluster:
            chosen, scores = select_from_pool(
                profile,
                model,
                x,
                args.strategy,
                args.budget,
                by=args.by,
                results=results,
                options=sadl,
                upto=args.upto,
                seed=args.seed,
                batch_size=sadl.batch_size,
                criterion=args.criterion,
                y=y,
                cluster=cluster,
            )
    except ValueError as exc:
        raise SadlConfigError(str(exc)) from None
    written = _write(args.out, chosen, x, scores, y, tm.channels_first)
    _print_selection(chosen)
    for path in written:
        print(f"wrote {path}")
    return 0


def _pool_labels(y: Any) -> np.ndarray | None:
    """The pool's labels as one array (none for labels per output name, or none given)."""
    import numpy as np

    return None if y is None or isinstance(y, dict) else np.asarray(y)


def _check_select_args(args: argparse.Namespace) -> None:
    """The flags that cannot go together, each a one-line error before anything is loaded."""
    from pytest_sadl.errors import SadlConfigError

    if args.budget < 1:
        raise SadlConfigError(f"--budget={args.budget}: choose at least 1 input")
    if args.strategy in ("ctm", "cam") and args.criterion is None:
        raise SadlConfigError(
            f"--strategy {args.strategy} orders by a coverage criterion: add --criterion, e.g. --criterion nbc"
        )
    if args.strategy == "ranges" and not 0 < args.upto <= 1:
        raise SadlConfigError(f"--upto={args.upto}: give a fraction of U in (0, 1], e.g. 0.25 for [0, U/4]")


def _results_of(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--results``: the results document, whose layers and variance threshold stand in
    for the flags not given (the results' configuration, not the ini's)."""
    from pytest_sadl.errors import SadlConfigError

    if not args.results:
        return None
    from pytest_sadl.resultsfile import load_results

    try:
        results = load_results(args.results)
    except ValueError as exc:
        raise SadlConfigError(f"--results: {exc}") from None
    _fill_from(args, results.get("config") or {})
    return results


def _fill_from(args: argparse.Namespace, config: dict[str, Any]) -> None:
    """The layers and variance threshold not given as flags, from the results' configuration
    (a list of layers as the one comma-separated flag value it stands for)."""
    for key in ("sa_layers", "coverage_layers", "var_threshold"):
        value = config.get(key)
        if getattr(args, key) is None and value is not None:
            setattr(args, key, [",".join(str(v) for v in value)] if isinstance(value, list) else value)


def _write(out: Any, chosen: Selection, x: Any, scores: Any, y: Any, channels_first: bool) -> list[Any]:
    """The selection's files (:func:`write_selection`); a folder that cannot be written is one line."""
    from pytest_sadl.errors import SadlConfigError

    try:
        written: list[Any] = write_selection(out, chosen, x, scores, y, channels_first=channels_first)
    except OSError as exc:
        raise SadlConfigError(
            f"--out {out}: cannot write the selection ({exc.strerror or exc}); free space or give another directory"
        ) from None
    return written


def _cluster(args: argparse.Namespace, sadl: Any, profile: Any, spec: Any, base_dir: Any) -> Any:
    """The Dask cluster to trace and score on (``--dask``; ``sadl_dask`` for a training set
    large enough: :func:`pytest_sadl.profile.cluster.use_cluster`), else a null context."""
    address = getattr(args, "dask", None) or getattr(sadl, "dask", None)
    if not address:
        return contextlib.nullcontext()
    from pytest_sadl.profile.cluster import ClusterScorer, use_cluster

    if not use_cluster(address, profile.n_train, explicit=bool(getattr(args, "dask", None))):
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def entered() -> Any:
        import sys

        def say(message: str) -> None:  # a long cluster job says how far it is, on stderr
            print(f"sadl: {message}", file=sys.stderr, flush=True)

        with ClusterScorer(address, profile, status=say) as scorer:
            yield (scorer, str(spec), None if base_dir is None else str(base_dir))

    return entered()


def register(sub: Any) -> None:
    """Add ``select`` to the ``sadl`` subcommands."""
    p = sub.add_parser(
        "select",
        help="choose inputs of a pool to label or test next (by surprise, SC coverage, Table VII ranges, DeepGini, CTM or CAM)",
        description="Score a pool of inputs with the training profile's LSA, DSA and MDSA and choose a budget of them: "
        "'surprise' takes the most surprising; 'coverage' greedily covers the most surprise-coverage buckets the "
        "current tests leave uncovered (give --results); 'ranges' samples at random from [0, upto * U] of one SA as the "
        "paper's Table VII does; 'deepgini' is the confidence baseline; 'ctm' and 'cam' order the pool by a coverage "
        "criterion (--criterion): the most targets covered, or the most newly covered targets first. With labels in the "
        "pool ('y') the APFD of the order is printed and kept in selection.json. The profile's options and the SC bounds come "
        "from the project's pytest configuration (sadl_layers, sadl_sc_bounds, ...) unless given here; with --results, "
        "the layers and thresholds are the results' own.",
        epilog="example: sadl select data/pool.npz --model models/digits.keras --train data/train.npz "
        "--strategy coverage --results sadl-report.json --budget 100",
    )
    p.add_argument(
        "pool", help="the pool: a .npz (inputs 'x' or one array per model input name, optional labels 'y') or .npy file"
    )
    add_model_options(p, "training inputs, as for 'sadl profile build' (default: sadl_train of the project's ini)")
    p.add_argument("--budget", type=int, default=100, metavar="N", help="inputs to choose (default %(default)s)")
    p.add_argument("--strategy", choices=STRATEGIES, default="surprise", help="how to choose (default %(default)s)")
    p.add_argument(
        "--by",
        choices=tuple(SCORES),
        default="lsa",
        help="the SA of 'surprise' and 'ranges' (default %(default)s)",
    )
    p.add_argument(
        "--criterion",
        choices=METRICS,
        metavar="METRIC",
        help="'ctm' and 'cam': the coverage criterion to order by, any of " + ", ".join(METRICS),
    )
    p.add_argument(
        "--results", metavar="JSON", help="results JSON of the current tests: SC bounds, covered buckets, layers"
    )
    p.add_argument(
        "--upto",
        type=float,
        default=1.0,
        metavar="F",
        help="'ranges': sample from [lower, lower + F (U - lower)] (default 1)",
    )
    p.add_argument("--seed", type=int, default=0, help="'ranges': random seed (default 0)")
    p.add_argument("--out", default="sadl-select", metavar="DIR", help="output directory (default %(default)s)")
    p.add_argument(
        "--dask",
        "--sadl-dask",
        dest="dask",
        metavar="ADDRESS",
        help="trace the pool and score LSA and DSA on the workers of the Dask scheduler at ADDRESS "
        "(the same scores; default: sadl_dask of the ini when the training set has 20,000 traces or more)",
    )
    add_profile_options(p)
    add_metrics(p)
    add_sa_components(p)
    add_location(p)
    p.set_defaults(func=cmd_select)
