"""Tracing the training data of a profile build on a Dask cluster (``sadl profile build --dask``).

The training rows are cut, in the canonical order the local build traces them in
(:func:`pytest_sadl.profile.build._digesting`), into shards of whole batches; each worker
loads the model itself (from its ``.keras`` path or ``module:function`` spec: a model
object need not pickle, so only the spec and the resolved layer names travel) and traces
its shards with the same :class:`~pytest_sadl.capture.TraceModel` code. The shards' traces
are joined in order: the same batches as a local build, so the same traces bit for bit,
the same ranges and the same fingerprint. The profile is then set up and stored as a
local build's.

Dask is imported only here, and only when an address is given.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from pytest_sadl.errors import SadlConfigError

__all__ = ["DaskTracer", "shards"]

#: Batches per shard: enough shards that every worker gets several (a slow worker holds
#: the build up by one shard at most), few enough that each task's overhead is small.
BATCHES_PER_SHARD = 8

_MODELS: dict[tuple[Any, ...], Any] = {}  # per worker process: the TraceModel of each spec


def shards(n: int, batch_size: int, batches_per_shard: int = BATCHES_PER_SHARD) -> list[tuple[int, int]]:
    """``[start, stop)`` of each shard of ``n`` rows: whole batches of ``batch_size`` (the
    last shard may end in a short batch, as a local build's last batch does)."""
    step = batch_size * max(1, batches_per_shard)
    return [(i, min(i + step, n)) for i in range(0, n, step)]


def _trace_shard(key: tuple[Any, ...], x: Any, batch_size: int) -> Any:
    """On a worker: the traces of ``x`` (one shard, its rows in canonical order)."""
    tm = _MODELS.get(key)
    if tm is None:
        from pytest_sadl.capture import TraceModel
        from pytest_sadl.capture.model import load_model

        spec, base_dir, sa_layers, coverage_layers, classifier, output = key
        tm = TraceModel(
            load_model(spec, base_dir=base_dir),
            list(sa_layers),
            list(coverage_layers),
            classifier=classifier,
            output=output,
        )
        _MODELS[key] = tm
    return tm.traces(x, batch_size=batch_size)


class DaskTracer:
    """Traces a build's canonical rows on the Dask scheduler at ``address``."""

    #: Seconds to keep trying to reach the scheduler before the build stops with an error.
    connect_timeout: float = 10.0

    def __init__(self, address: str, model_spec: Any, base_dir: Any) -> None:
        if not isinstance(model_spec, (str, os.PathLike)):
            raise SadlConfigError(
                f"--dask needs the model as a .keras path or 'package.module:function' the workers can load, "
                f"not a {type(model_spec).__name__} object; give sadl_model (or --model) as a path or spec"
            )
        self.address = address
        self.model_spec = str(model_spec)
        self.base_dir = None if base_dir is None else str(base_dir)

    def _client(self) -> Any:
        try:
            from distributed import Client as _Client
        except ImportError:
            raise SadlConfigError(
                'sadl_dask needs Dask: pip install "pytest-sadl[dask]" (or "dask[distributed]")'
            ) from None
        client: Any = _Client  # untyped in distributed
        try:
            return client(self.address, timeout=self.connect_timeout)
        except (OSError, TimeoutError, ValueError) as exc:
            raise SadlConfigError(
                f"cannot reach the Dask scheduler at {self.address} ({type(exc).__name__}); start it "
                "(dask scheduler, dask worker ADDRESS) or give the right tcp://host:port to --dask/sadl_dask"
            ) from None

    def __call__(self, tm: Any, x: Any, order: np.ndarray, batch_size: int, progress: Any = None) -> Any:
        """The traces of ``x``'s rows in ``order``, ``batch_size`` at a time, joined in order."""
        from pytest_sadl.capture.arrays import Traces
        from pytest_sadl.capture.data import take_rows

        key = (
            self.model_spec,
            self.base_dir,
            tuple(tm.sa_layers),
            tuple(tm.coverage_layers),
            bool(tm.classifier),
            tm.output_name,
        )
        parts = shards(len(order), batch_size)
        with self._client() as client:
            futures = [
                client.submit(_trace_shard, key, take_rows(x, order[a:b]), batch_size, pure=False) for a, b in parts
            ]
            results = []
            done = 0
            for (a, b), future in zip(parts, futures, strict=True):
                results.append(future.result())
                done += b - a
                if progress is not None:
                    progress(done, len(order))
        return Traces.concatenate(results)
