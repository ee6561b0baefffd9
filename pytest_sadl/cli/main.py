"""The ``sadl`` command (also ``python -m pytest_sadl``).

Subcommands::

    sadl profile build [--model M] [--train T] [--sa-layers L ...] [--coverage-layers L ...]
                       [--output NAME] [--var-threshold V] [--lsa-near-singular drop|keep]
                       [--batch-size N] [--cache-dir D] [--rootdir R]
                       [--rebuild] [--[no-]dsa-precompute] [--lock-timeout S] [--quiet]
    sadl profile list  [--cache-dir D] [--rootdir R] [--json]
    sadl profile layers [--model M] [--train T] [--output NAME] [--json] [--rootdir R]
    sadl report ...    (pytest_sadl.cli.report)
    sadl compare ...
    sadl select POOL [--model M] [--train T] [--strategy surprise|coverage|ranges|deepgini] ...
                       (pytest_sadl.cli.select: inputs to label or test next)

``--model`` and ``--train`` default to the project's ``sadl_model`` and ``sadl_train`` (its
pytest configuration, found from the current directory upwards as pytest finds it), and
every option also takes the plugin's spelling (``--sadl-layers=A,B``). ``sadl --help``
imports nothing but the standard library: each subcommand's module is imported only when
that subcommand runs (``benchmarks/bench_cli_startup.py`` times it).

Every subcommand stores its handler as ``func`` in the parsed namespace; the handler
returns the exit status. Exit status: 0 on success, 2 for a usage error (one line on
stderr naming the problem and the fix), 1 for other failures reported by a subcommand.
TensorFlow is imported only by ``profile build``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, TextIO

__all__ = ["main", "build_parser", "ProgressBar"]

EXIT_OK = 0
EXIT_USAGE = 2


class ProgressBar:
    """A one-line progress bar on a TTY stream: ``[#####.....] 30000/60000 inputs  50%  4.1s``.

    Off (does nothing) when the stream is not a TTY or ``enabled`` is false; the phase
    messages of :meth:`status` are still printed then unless ``quiet``.
    """

    def __init__(
        self, stream: TextIO | None = None, *, enabled: bool | None = None, quiet: bool = False, width: int = 30
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = (tty if enabled is None else enabled) and not quiet
        self.quiet = quiet
        self.width = width
        self._start = time.monotonic()
        self._last = 0.0
        self._drawn = False

    def status(self, message: str) -> None:
        """Print a phase message on its own line."""
        if self.quiet:
            return
        self._clear()
        print(f"sadl: {message}", file=self.stream, flush=True)
        self._start = time.monotonic()

    def __call__(self, done: int, total: int | None) -> None:
        """Redraw (at most ten times a second, and always at the end)."""
        if not self.enabled:
            return
        now = time.monotonic()
        final = total is not None and done >= total
        if not final and now - self._last < 0.1:
            return
        self._last = now
        from pytest_sadl.plugin.status import bar_line  # the plugin's bar, stdlib only

        line = bar_line(done, total, now - self._start, self.width)
        self.stream.write("\r" + line + "\x1b[K")
        self.stream.flush()
        self._drawn = True
        if final:
            self._clear()

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


def _human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def _human_age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def cmd_profile_build(args: argparse.Namespace) -> int:
    """``sadl profile build``: build (or find) the cached training profile."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from pytest_sadl.cli.args import cache_dir_for, model_and_train, project_options
    from pytest_sadl.profile.build import ProfileOptions
    from pytest_sadl.profile.lookup import load_or_build

    bar = ProgressBar(sys.stderr, quiet=args.quiet)
    sadl = project_options(args)  # the ini's values, the flags overriding them: the plugin's fingerprint
    model, train, base_dir = model_and_train(args, sadl)  # flags are relative to the current directory
    options = ProfileOptions.from_sadl(
        sadl, dsa_precompute=sadl.dsa_precompute if args.dsa_precompute is None else args.dsa_precompute
    )
    cache_dir = cache_dir_for(args, sadl)
    start = time.monotonic()
    dask = args.dask or sadl.dask
    _load_ahead(dask, model, base_dir)
    bar.status("importing TensorFlow")  # (a quiet bar says nothing)
    import keras  # noqa: F401  (imports TensorFlow: timed apart from the work, it is most of a cache hit)

    imported = time.monotonic() - start
    bar.status(f"loading model {model} and training data {train}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profile = load_or_build(
            model,
            train,
            options,
            cache_dir,
            progress=bar if bar.enabled else None,  # None in a log: a Dask build says its shards in lines
            status=bar.status,
            rebuild=args.rebuild,
            base_dir=base_dir,
            lock_timeout=sadl.lock_timeout,
            dask=dask,
        )
    _print_own_warnings(caught)
    print(_built_line(profile, time.monotonic() - start, imported))
    return EXIT_OK


def _load_ahead(dask: str | None, model: Any, base_dir: Any) -> None:
    """With a Dask scheduler, its workers load the model while this process imports TensorFlow."""
    if dask:
        from pytest_sadl.profile.distributed import load_ahead

        load_ahead(dask, model, base_dir)


def _print_own_warnings(caught: list[warnings.WarningMessage]) -> None:
    """pytest-sadl's warnings among ``caught``, one line each on stderr (the profile's own
    warnings say what happened)."""
    for w in caught:
        if w.category.__module__.startswith("pytest_sadl"):
            print(f"sadl: warning: {w.message}", file=sys.stderr, flush=True)


def _folder_size(path: Path | None) -> int:
    """The bytes of the files directly in ``path`` (0 for no folder)."""
    if path is None or not path.is_dir():
        return 0
    return sum(f.stat().st_size for f in path.iterdir())


def _built_line(profile: Any, elapsed: float, imported: float) -> str:
    """What ``sadl profile build`` did, in one line: built or found, the profile, the times, the folder."""
    verb = ("built" if profile.built else "found cached") + (" (not cached)" if profile.path is None else "")
    size = _folder_size(profile.path)
    return (
        f"{verb} profile {profile.fingerprint[:16]} ({profile.n_train} inputs, "
        f"SA layers {', '.join(profile.sa_layers)}; coverage layers "
        f"{', '.join(profile.coverage_layers)}; {_human_size(size)}) in {elapsed:.1f}s "
        f"(TensorFlow import {imported:.1f}s, {'building' if profile.built else 'loading'} {elapsed - imported:.1f}s): {profile.path}"
    )


def cmd_profile_layers(args: argparse.Namespace) -> int:
    """``sadl profile layers``: the model's layers by path, with output shapes and the
    defaults pytest-sadl would measure."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tm, sadl, data = _layers_model(args)
    rows = tm.describe_layers()
    fit = _usable_layers(sadl, tm, data) if sadl is not None and args.usable and data is not None else None
    _mark_usable(rows, fit)
    if args.json:
        print(json.dumps(_layers_json(tm, rows), indent=2))
        return EXIT_OK
    for line in _layers_text(tm, rows, with_usable=fit is not None):
        print(line)
    return EXIT_OK


def _mark_usable(rows: list[dict[str, Any]], fit: dict[str, dict[str, str | None]] | None) -> None:
    """Each layer row's ``usable`` (the SA measures that can be set up on it), where known."""
    for r in rows:
        if fit is not None and r["path"] in fit:
            r["usable"] = fit[r["path"]]


def _layers_text(tm: Any, rows: list[dict[str, Any]], *, with_usable: bool) -> list[str]:
    """``sadl profile layers``' lines: the model, one line per layer, and the usable SA layers' summary."""
    lines = [
        f"model {tm.name!r}: inputs {', '.join(tm.input_names)}; outputs {', '.join(tm.output_names)} "
        f"(measured: {tm.output_name}, {'classifier' if tm.classifier else 'regression'})"
    ]
    width = max(len(r["path"]) for r in rows) if rows else 4
    lines += [_layer_line(r, width) for r in rows]
    if with_usable:
        lines += list(_usable_summary(rows))
    return lines


def _layers_model(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """``sadl profile layers``' trace model, the project's options (when read: no
    ``--model``, or ``--usable``) and the training data (when there is one)."""
    from pytest_sadl.capture import trace_model
    from pytest_sadl.capture.model import load_model
    from pytest_sadl.cli.args import model_and_train, parse_layers, project_options

    sadl: Any = project_options(args) if args.model is None or args.usable else None
    spec, train, output, base_dir = _layers_source(args, sadl)
    if args.usable and train is None:  # the ini's sadl_train, or a one-line error
        _, train, _ = model_and_train(args, sadl)
    model = load_model(spec, base_dir=base_dir, what="--model")
    tm = trace_model(model, parse_layers(args.sa_layers), parse_layers(args.coverage_layers), output=output)
    return tm, sadl, _layers_data(tm, train, base_dir)


def _layers_source(args: argparse.Namespace, sadl: Any) -> tuple[Any, Any, Any, Path | None]:
    """The model, training data, output and base folder ``sadl profile layers`` reads: the
    flags', or (no ``--model``) the project's, as the plugin would measure it."""
    from pytest_sadl.cli.args import model_and_train

    if args.model is not None:
        return args.model, args.train, args.output, Path(args.rootdir) if args.rootdir else None
    spec, train, base_dir = model_and_train(args, sadl, need_train=False)
    return spec, train, sadl.output if args.output is None else args.output, base_dir


def _layers_data(tm: Any, train: Any, base_dir: Path | None) -> Any:
    """The training data prepared for ``tm`` (a PyTorch model's shapes come from a pass on
    its inputs), ``None`` without any."""
    if train is None:
        return None
    from pytest_sadl.capture.data import load_training_data

    return tm.prepare(load_training_data(train, base_dir=base_dir, what="--train"))


def _layers_json(tm: Any, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "model": tm.name,
        "inputs": tm.input_names,
        "outputs": tm.output_names,
        "output": tm.output_name,
        "classifier": tm.classifier,
        "layers": rows,
    }


def _layer_line(r: dict[str, Any], width: int) -> str:
    """One layer of ``sadl profile layers``: path, class, output shape, calls, defaults, usable SA."""
    shape = _shape_text(r["output_shape"])
    marks = ", ".join(m for m, on in (("SA default", r["sa"]), ("coverage default", r["coverage"])) if on)
    calls = f" [runs {r['calls']}x]" if r["calls"] > 1 else ""
    ok = " SA: " + _usable_names(r["usable"]) if "usable" in r else ""
    return f"  {r['path']:<{width}}  {r['class']:<22} {shape:<20}{calls} {marks}{ok}".rstrip()


def _shape_text(shape: Any) -> str:
    """An output shape as ``(n, 28, 28)`` (``n``: the batch), ``-`` when unknown."""
    if shape is None:
        return "-"
    return "(" + ", ".join("n" if d is None else str(d) for d in shape) + ")"


def _usable_names(usable: dict[str, str | None]) -> str:
    """The SA measures a layer can be set up for (``LSA DSA``), or ``none``."""
    return " ".join(k.upper() for k, why in usable.items() if why is None) or "none"


def _usable_layers(sadl: Any, tm: Any, data: Any) -> dict[str, dict[str, str | None]]:
    """Per coverage layer of ``tm``: for LSA, DSA and MDSA, ``None`` when it can be set up on
    the layer's traces of the training ``data`` with the run's options ``sadl`` (variance
    threshold and rule), else why not."""
    from pytest_sadl.criteria.usable import usable

    traces = tm.traces(data, batch_size=sadl.batch_size, what="training data")
    pred = traces.pred if tm.classifier else None
    return {
        name: usable(
            traces.layer(name),
            pred,
            var_threshold=sadl.var_threshold,
            var_rule=sadl.var_rule,
            near_singular=sadl.lsa_near_singular,
        )
        for name in tm.coverage_layers
    }


def _usable_summary(rows: list[dict[str, Any]]) -> list[str]:
    """Per SA measure: how many checked layers can use it and the last of them, and why the
    default SA layer cannot, when it cannot."""
    checked = [r for r in rows if "usable" in r]
    return [line for key in ("lsa", "dsa", "mdsa") for line in _usable_lines(key, checked)]


def _usable_lines(key: str, checked: list[dict[str, Any]]) -> list[str]:
    """How many ``checked`` layers the SA measure ``key`` can use, and why not the default SA layer."""
    ok = [r["path"] for r in checked if r["usable"][key] is None]
    last = f" (the last: {ok[-1]})" if ok else ""
    lines = [f"{key.upper()} can be set up on {len(ok)} of {len(checked)} layers{last}"]
    lines += [
        f"  not on the default SA layer {r['path']}: {r['usable'][key]}"
        for r in checked
        if r["sa"] and r["usable"][key] is not None
    ]
    return lines


def cmd_profile_list(args: argparse.Namespace) -> int:
    """``sadl profile list``: the stored profiles with fingerprints, sizes and ages."""
    from pytest_sadl.cli.args import cache_dir_for, project_options
    from pytest_sadl.profile.lookup import list_profiles

    cache_dir = cache_dir_for(args, None if args.cache_dir else project_options(args))
    infos = list_profiles(cache_dir)
    if args.json:
        rows = [_profile_json(i) for i in infos]
        print(json.dumps({"cache_dir": str(cache_dir), "profiles": rows}, indent=2))
        return EXIT_OK
    if not infos:
        print(f"no training profiles in {cache_dir}")
        return EXIT_OK
    print(f"training profiles in {cache_dir}:")
    header = f"{'fingerprint':16}  {'model':20}  {'inputs':>7}  {'size':>9}  {'age':>5}  layers (SA | coverage)"
    print(header)
    for i in infos:
        print(_profile_line(i) if i.ok else _unusable_line(i))
    return EXIT_OK


def _profile_json(i: Any) -> dict[str, Any]:
    """A stored profile as ``sadl profile list --json`` lists it."""
    return {
        "fingerprint": i.fingerprint,
        "path": str(i.path),
        "size": i.size,
        "age_seconds": round(i.age_seconds, 1),
        "ok": i.ok,
        "problem": i.problem or None,
        "model": i.meta.get("model_name"),
        "model_fingerprint": i.meta.get("model_fingerprint"),
        "n_train": i.meta.get("n_train"),
        "sa_layers": i.meta.get("sa_layers"),
        "coverage_layers": i.meta.get("coverage_layers"),
        "created": i.meta.get("created"),
    }


def _profile_line(i: Any) -> str:
    """A usable stored profile's line: fingerprint, model, inputs, size, age, layers."""
    m = i.meta
    layers = f"{','.join(m.get('sa_layers', []))} | {','.join(m.get('coverage_layers', []))}"
    return (
        f"{i.fingerprint[:16]:16}  {str(m.get('model_name', '?'))[:20]:20}  {m.get('n_train', '?'):>7}  "
        f"{_human_size(i.size):>9}  {_human_age(i.age_seconds):>5}  {layers}"
    )


def _unusable_line(i: Any) -> str:
    """An unusable stored profile's line: what is wrong with it."""
    return (
        f"{i.fingerprint[:16]:16}  {'(unusable)':20}  {'':>7}  {_human_size(i.size):>9}  "
        f"{_human_age(i.age_seconds):>5}  {i.problem}; it will be rebuilt"
    )


#: Every subcommand: the module whose ``register`` adds it in full, and its one-line help.
#: Only the subcommand run is registered in full (``sadl --help`` lists the others by this
#: line), so no subcommand's imports (the option registry, NumPy, pytest) slow the others.
LAZY = {
    "profile": ("pytest_sadl.cli.main", "build or list cached training profiles, list a model's layers"),
    "report": ("pytest_sadl.cli.report", "render a saved results JSON as HTML, Markdown or a badge"),
    "compare": ("pytest_sadl.cli.report", "compare two saved runs' metrics (exit 1 on a drop beyond --fail)"),
    "select": (
        "pytest_sadl.cli.select",
        "choose inputs of a pool to label or test next (by surprise, SC coverage, Table VII ranges or DeepGini)",
    ),
    "combine": ("pytest_sadl.cli.combine", "combine the results of shards into one run's results (exactly)"),
    "estimate": ("pytest_sadl.cli.estimate", "estimate the model's accuracy on an unlabelled pool from a few labels"),
    "log-mlflow": ("pytest_sadl.cli.tracking", "log a run's metrics, options and HTML report to MLflow"),
    "minimize": ("pytest_sadl.cli.minimize", "the fewest tests that keep a run's coverage (greedy set cover)"),
}


def _command(argv: list[str] | None) -> str | None:
    """The subcommand ``argv`` runs (its first word that is not an option)."""
    for word in sys.argv[1:] if argv is None else argv:
        if not word.startswith("-"):
            return word
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The ``sadl`` argument parser with every subcommand registered (the :data:`LAZY` ones
    in full only when ``argv`` runs them; ``build_parser()`` alone registers all)."""
    parser = argparse.ArgumentParser(
        prog="sadl",
        description="pytest-sadl: Surprise Adequacy and neuron coverage of Keras and PyTorch models. "
        "Build the cached training profile ahead of time (e.g. in a CI cache step), "
        "list the cached profiles, and render or compare saved results.",
        epilog="Run 'sadl COMMAND --help' for the options of a command.",
    )
    from pytest_sadl import __version__

    parser.add_argument("--version", action="version", version=f"sadl (pytest-sadl) {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    wanted = _command(argv) if argv is not None else None
    wanted_module = LAZY[wanted][0] if wanted in LAZY else None
    for name, (module, help_text) in LAZY.items():
        if name in sub.choices:  # report.register adds report and compare
            continue
        if argv is not None and module != wanted_module:
            sub.add_parser(name, help=help_text)
        else:
            import importlib

            importlib.import_module(module).register(sub)
    return parser


def register(sub: Any) -> None:
    """Add ``profile`` (build, layers, list) to the ``sadl`` subcommands."""
    from pytest_sadl.cli.args import add_location, add_model_options, add_profile_options, add_shared

    prof = sub.add_parser(
        "profile",
        help="build or list cached training profiles",
        description="The training profile holds the activation traces of the training set "
        "at the SA layers and the per-neuron ranges of the coverage layers (the surprise measures are set up from it by a run). "
        "It is cached under a fingerprint of the model's architecture and weights, the "
        "training data and the options, so a change to any of them builds a new one.",
    )
    psub = prof.add_subparsers(dest="profile_command", metavar="ACTION", required=True)

    build = psub.add_parser(
        "build",
        help="build the training profile now (a no-op when it is cached)",
        description="Trace the training data through the model once and store the profile "
        "where `pytest --sadl-coverage` finds it. A progress bar is drawn on stderr when it "
        "is a terminal.",
        epilog="example: sadl profile build --model models/digits.keras --train data/train.npz "
        "--sa-layers dense_hidden",
    )
    add_model_options(
        build,
        "training inputs: a .npz (key 'x') or .npy file, or 'package.module:function' "
        "returning an array, (x, y) or a tf.data.Dataset (default: sadl_train of the project's ini)",
    )
    add_profile_options(build)
    build.add_argument("--rebuild", action="store_true", help="rebuild even when a matching profile is cached")
    build.add_argument(
        "--dsa-precompute",
        "--sadl-dsa-precompute",
        dest="dsa_precompute",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="compute every training trace's nearest other-class distance (DSA's dist_b) now "
        "(default: sadl_dsa_precompute of the ini, else no: each session computes the ones its "
        "inputs need and keeps them in the profile)",
    )
    add_shared(build, "lock_timeout")
    add_shared(build, "dask")
    build.add_argument("-q", "--quiet", action="store_true", help="no progress bar or phase messages")
    add_location(build)
    build.set_defaults(func=cmd_profile_build)

    lay = psub.add_parser(
        "layers",
        help="list the model's layers by path (nested models: encoder/conv2) and the defaults",
        description="Every layer of the model, nested models and custom blocks included, by the "
        "path --sadl-layers takes, with its output shape and whether it is a default SA or "
        "coverage layer.",
    )
    add_model_options(
        lay,
        "inputs to run the model on first (needed for a PyTorch model: "
        "its shapes come from a pass): a .npz/.npy file or 'package.module:function'",
    )
    add_profile_options(lay)
    lay.add_argument(
        "--usable",
        action="store_true",
        help="trace the training data and say, for every coverage layer (or those of --coverage-layers), "
        "whether LSA, DSA and MDSA can be set up on it, and why not",
    )
    lay.add_argument("--json", action="store_true", help="print the layers as JSON")
    lay.add_argument("--rootdir", metavar="DIR", help="directory relative paths start from (default: the current one)")
    lay.set_defaults(func=cmd_profile_layers)

    lst = psub.add_parser(
        "list",
        help="list cached profiles with fingerprints, sizes and ages",
        description="List the training profiles in the cache directory, newest first.",
    )
    lst.add_argument("--json", action="store_true", help="print the list as JSON")
    add_location(lst)
    lst.set_defaults(func=cmd_profile_list)


def main(argv: list[str] | None = None) -> int:
    """Run ``sadl`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    from pytest_sadl.errors import SadlConfigError

    try:
        return int(args.func(args) or 0)
    except SadlConfigError as exc:
        print(f"sadl: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # Keras, TensorFlow or JAX missing or broken: what to install
        from pytest_sadl.capture.backend import backend_error

        err = backend_error(exc)
        if err is None:
            raise
        print(f"sadl: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("sadl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
