"""Tracing the training data of a profile build on a Dask cluster (``sadl profile build --dask``).

The training rows are cut, in the canonical order the local build traces them in
(:func:`pytest_sadl.profile.build._digesting`), into shards of whole batches; each worker
loads the model itself (from its ``.keras`` path or ``module:function`` spec: a model
object need not pickle, so only the spec and the resolved layer names travel) and traces
its shards with the same :class:`~pytest_sadl.capture.TraceModel` code. The shards' traces
are joined in order: the same batches as a local build, so the same traces bit for bit,
the same ranges and the same fingerprint. The profile is then set up and stored as a
local build's.

Each worker starts loading the model as soon as the build connects (before the driver
has fingerprinted the data and resolved the layers), so the workers' TensorFlow import and
model load overlap the driver's own; shards are sent as the cluster can take them and the
progress (``progress(done, total)`` per shard finished, in inputs; in a log, where there is
no progress bar, a status line every ``LOG_EVERY`` seconds) counts shards as they finish.

Dask is imported only here (and in :mod:`pytest_sadl.profile.cluster`), and only when an
address is given.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from pytest_sadl.errors import SadlConfigError

__all__ = ["DaskTracer", "shards"]

#: Batches per shard: enough shards that every worker gets several (a slow worker holds
#: the build up by one shard at most), few enough that each task's overhead is small.
BATCHES_PER_SHARD = 8

#: Seconds between the status lines of a Dask build's progress when there is no bar (a log).
LOG_EVERY = 10.0

_MODELS: dict[tuple[Any, ...], Any] = {}  # per worker process: the TraceModel of each spec
_SPARE: dict[tuple[Any, ...], Any] = {}  # per worker process: a model loaded ahead, not yet traced
_AHEAD: dict[tuple[str, str, str | None], Any] = {}  # in the driver: clients whose workers load ahead


def shards(n: int, batch_size: int, batches_per_shard: int = BATCHES_PER_SHARD) -> list[tuple[int, int]]:
    """``[start, stop)`` of each shard of ``n`` rows: whole batches of ``batch_size`` (the
    last shard may end in a short batch, as a local build's last batch does)."""
    step = batch_size * max(1, batches_per_shard)
    return [(i, min(i + step, n)) for i in range(0, n, step)]


def _load_ahead(spec: str, base_dir: str | None) -> None:
    """On a worker: load the model before its first shard (TensorFlow imported with it)."""
    if (spec, base_dir) not in _SPARE and not any(k[:2] == (spec, base_dir) for k in _MODELS):
        from pytest_sadl.capture.model import load_model

        _SPARE[(spec, base_dir)] = load_model(spec, base_dir=base_dir)


def worker_trace_model(key: tuple[Any, ...]) -> Any:
    """On a worker: the :class:`TraceModel` of ``key`` (spec, base dir, SA layers, coverage
    layers, classifier, output), loaded once per worker process (the model loaded ahead, if
    any, is taken by the first key: a model serves one trace model)."""
    tm = _MODELS.get(key)
    if tm is None:
        from pytest_sadl.capture import trace_model
        from pytest_sadl.capture.model import load_model

        spec, base_dir, sa_layers, coverage_layers, classifier, output, *more = key
        model = _SPARE.pop((spec, base_dir), None)
        tm = trace_model(
            model if model is not None else load_model(spec, base_dir=base_dir),
            list(sa_layers),
            list(coverage_layers),
            classifier=classifier,
            output=output,
            extrema=bool(more and more[0]),
        )
        _MODELS[key] = tm
    return tm


def _trace_shard(key: tuple[Any, ...], x: Any, batch_size: int) -> Any:
    """On a worker: ``(traces, fit)`` of ``x`` (one shard, its rows in canonical order):
    the traces without the coverage layers, whose traces are folded into ``fit`` (a
    :class:`~pytest_sadl.criteria.neurons.RangeFit`) instead, as a local build folds them:
    the driver merges the shards' ranges exactly, and a big model's coverage traces (51,739
    neurons an input on MobileNetV2) never travel to it."""
    from pytest_sadl.capture.data import load_training_data
    from pytest_sadl.criteria.neurons import RangeFit

    tm = worker_trace_model(key)
    data = tm.prepare(load_training_data(x))  # a torch module is probed on its first rows here
    fit = RangeFit(tm.coverage_sizes, tm.coverage_layers)
    return tm.traces_folding(data, fit, batch_size=batch_size), fit


def connect(address: str, timeout: float) -> Any:
    """A ``distributed.Client`` of the scheduler at ``address``, or one line saying why not."""
    try:
        from distributed import Client as _Client
    except ImportError:
        raise SadlConfigError(
            'sadl_dask needs Dask: pip install "pytest-sadl[dask]" (or "dask[distributed]")'
        ) from None
    client: Any = _Client  # untyped in distributed
    try:
        return client(address, timeout=timeout)
    except (OSError, TimeoutError, ValueError) as exc:
        raise SadlConfigError(
            f"cannot reach the Dask scheduler at {address} ({type(exc).__name__}); start it "
            "(dask scheduler, dask worker ADDRESS) or give the right tcp://host:port to --dask/sadl_dask"
        ) from None


def model_key(model_spec: str, base_dir: str | None, tm: Any, *, extrema: bool = False) -> tuple[Any, ...]:
    """What a worker needs to make the driver's trace model ``tm`` again (``extrema``: as
    ``trace_model(..., extrema=True)``, the per-input extrema NC's scaling needs)."""
    return (
        model_spec,
        base_dir,
        tuple(tm.sa_layers),
        tuple(tm.coverage_layers),
        bool(tm.classifier),
        tm.output_name,
        extrema,
    )


def gather_in_order(
    client: Any,
    futures: list[Any],
    sizes: list[int],
    progress: Callable[[int, int | None], None] | None,
    say: Callable[[str], None] | None,
    what: str,
) -> list[Any]:
    """The futures' results in their order; ``progress(done, total)`` (in rows) as each
    finishes, and, without a progress callback (a log), a status line every ``LOG_EVERY``
    seconds and one at the end."""
    from distributed import as_completed as _as_completed

    as_completed: Any = _as_completed  # untyped in distributed
    index = {future.key: i for i, future in enumerate(futures)}
    results: list[Any] = [None] * len(futures)
    total, done = sum(sizes), 0
    start = last = time.monotonic()
    for finished, future in enumerate(as_completed(futures), 1):
        i = index[future.key]
        results[i] = future.result()
        done += sizes[i]
        if progress is not None:
            progress(done, total)
        elif say is not None and (time.monotonic() - last >= LOG_EVERY or finished == len(futures)):
            last = time.monotonic()
            say(f"{what}: {finished}/{len(futures)} shards done ({done}/{total} inputs, {last - start:.1f}s)")
    return results


def load_ahead(address: str, model_spec: Any, base_dir: Any) -> None:
    """Connect to ``address`` now and have every worker load the model in the background,
    for the :class:`DaskTracer` of a build about to start (``sadl profile build`` calls it
    before importing TensorFlow itself, so the workers' start-up overlaps its own). Quiet
    when the scheduler cannot be reached: the build says so."""
    if not isinstance(model_spec, (str, os.PathLike)):
        return
    tracer = DaskTracer(address, model_spec, base_dir)
    tracer.start(strict=False)
    key = (address, tracer.model_spec, tracer.base_dir)
    if tracer._client is not None:
        _AHEAD[key] = (tracer._client, tracer._ahead)
        tracer._finalizer.detach()  # handed over to the build's tracer, open
        tracer._client = None
    else:  # out of reach: the build's tracer says so without waiting for it again
        _AHEAD[key] = tracer._error


class DaskTracer:
    """Traces a build's canonical rows on the Dask scheduler at ``address``.

    Connecting (and each worker loading the model) starts when the tracer is made, so it
    overlaps the driver's own loading and fingerprinting; the client is closed after the
    traces are made (or when the tracer is dropped: a cache hit traces nothing)."""

    #: Seconds to keep trying to reach the scheduler before the build stops with an error.
    connect_timeout: float = 10.0

    def __init__(
        self, address: str, model_spec: Any, base_dir: Any, *, status: Callable[[str], None] | None = None
    ) -> None:
        if not isinstance(model_spec, (str, os.PathLike)):
            raise SadlConfigError(
                f"--dask needs the model as a .keras path or 'package.module:function' the workers can load, "
                f"not a {type(model_spec).__name__} object; give sadl_model (or --model) as a path or spec"
            )
        self.address = address
        self.model_spec = str(model_spec)
        self.base_dir = None if base_dir is None else str(base_dir)
        self.status = status
        self._client: Any = None
        self._error: SadlConfigError | None = None
        self._ahead: list[Any] = []
        self._finalizer: Any = None

    def start(self, *, strict: bool = True) -> None:
        """Connect, and have every worker load the model now (in the background).
        ``strict=False``: a scheduler out of reach is not an error yet (a cache hit needs
        no cluster); the build that needs it then says so."""
        if self._client is not None:
            return
        if self._error is not None:
            raise self._error
        ahead = _AHEAD.pop((self.address, self.model_spec, self.base_dir), None)
        if isinstance(ahead, SadlConfigError):  # load_ahead could not connect
            self._error = ahead
            if strict:
                raise ahead
            return
        if ahead is None:
            self._connect(strict)
            return
        self._client, self._ahead = ahead  # connected before this process imported TensorFlow
        self._finalizer = weakref.finalize(self, self._client.close)

    def _connect(self, strict: bool) -> None:
        """Connect now and have every worker load the model (in the background)."""
        try:
            self._client = connect(self.address, self.connect_timeout)
        except SadlConfigError as exc:
            if strict:
                raise
            self._error = exc  # said by the build that needs the cluster, not waited for twice
            return
        self._finalizer = weakref.finalize(self, self._client.close)
        workers = list(self._client.scheduler_info().get("workers", {}))
        self._ahead = [  # held: a released future's task may be cancelled before it runs
            self._client.submit(_load_ahead, self.model_spec, self.base_dir, workers=[w], pure=False) for w in workers
        ]

    def close(self) -> None:
        if self._client is not None:
            self._ahead = []
            self._client.close()
            self._client = None

    def __call__(self, tm: Any, x: Any, order: np.ndarray, batch_size: int, progress: Any = None) -> Any:
        """``(traces, ranges)`` of ``x``'s rows in ``order``, ``batch_size`` at a time: the
        shards' traces joined in order (no coverage layers) and their coverage layers'
        neuron ranges merged (the same as a local build's, bit for bit)."""
        from pytest_sadl.capture.arrays import Traces
        from pytest_sadl.capture.data import take_rows

        key = model_key(self.model_spec, self.base_dir, tm)
        parts = shards(len(order), batch_size)
        self.start()
        client = self._client
        try:
            workers = len(client.scheduler_info().get("workers", {}))
            if self.status is not None:
                self.status(
                    f"tracing on {workers} Dask worker(s) at {self.address}: {len(parts)} shards of up to "
                    f"{batch_size * BATCHES_PER_SHARD} inputs"
                )
            futures = [
                client.submit(_trace_shard, key, take_rows(x, order[a:b]), batch_size, pure=False) for a, b in parts
            ]
            results = gather_in_order(client, futures, [b - a for a, b in parts], progress, self.status, "traced")
        finally:
            self.close()
        fit = results[0][1]  # the first shard's (rows from 0 on), the others merged into it
        for (a, _), (_, part) in zip(parts[1:], results[1:], strict=True):
            fit.merge(part, a)
        return Traces.concatenate([traces for traces, _ in results]), fit.result()
