"""A profile's heavy scoring on a Dask cluster: DSA, LSA, the class moments, a pool's traces.

:class:`ClusterScorer` holds a Dask client and the profile's training traces spread over
the workers, and answers what :mod:`pytest_sadl.criteria.sharded` reduces exactly:

* **DSA** (:meth:`~ClusterScorer.dsa`): the training traces are cut into shards (about two
  per worker), each kept on a worker as a :class:`~pytest_sadl.criteria.sharded.DSAShard`;
  every shard searches every query's nearest same-class row and every ``x_a``'s nearest
  other-class row, the driver keeps the smallest (the first in training order on a tie).
  The scores equal a local DSA's bit for bit.
* **LSA** (:meth:`~ClusterScorer.lsa`): sharded by *inputs*, not by training rows: each
  worker sets the profile's LSA up once (its KDEs over every training trace of a class)
  and scores a share of the inputs; the KDE sum over the training rows is LSA's own code,
  so the scores are a local LSA's (to 1e-9). The set-up is not split; scoring many inputs
  over a large training set (``n_inputs x n_train`` kernel terms) is.
* **Class moments** (:meth:`~ClusterScorer.class_moments`, MDSA's set-up): per-shard
  float64 sums, then scatters about the reduced means, reduced into each class's mean and
  covariance (equal to a local pass to 1e-9).
* **A pool's traces** (:meth:`~ClusterScorer.traces`, ``sadl select --dask``): the pool's
  rows cut into shards of whole batches, each worker loading the model as a Dask build's
  workers do (:mod:`pytest_sadl.profile.distributed`); the same batches, so the same traces.

The training traces reach the workers memory-mapped from the profile's stored file when
a worker sees the same file (same path, size and modification time: a shared or network
folder), else each shard is sent once. Dask itself is imported only by
:mod:`pytest_sadl.profile.distributed` (the client, ``as_completed``), and only when an
address is given.

When it pays (:func:`use_cluster`): ``sadl select --dask ADDRESS`` always uses the
cluster; a Dask address from the ini (``sadl_dask``, also ``--sadl-dask``: the plugin's
scores at the end of a session, :func:`scoring_on`, and ``sadl select``) only when the
training set has at least :data:`MIN_TRAIN` traces, below which a local search takes seconds and the cluster's
fixed cost (the model loaded on every worker, the shards sent) does not pay.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from pytest_sadl.profile.distributed import connect, gather_in_order, model_key, shards, worker_trace_model

__all__ = ["MIN_TRAIN", "ClusterScorer", "scoring_on", "use_cluster"]

#: Training traces from which an ini-configured Dask address scores on the cluster.
MIN_TRAIN = 20_000
#: Shards of the training traces per worker (a slow worker holds a search up by half its share).
SHARDS_PER_WORKER = 2
#: Inputs per LSA or DSA query task.
QUERY_ROWS = 2048


def use_cluster(address: str | None, n_train: int, *, explicit: bool) -> bool:
    """Whether to score on the cluster: an address given on the command line, or one from
    the ini with at least :data:`MIN_TRAIN` training traces."""
    return bool(address) and (explicit or n_train >= MIN_TRAIN)


@contextlib.contextmanager
def scoring_on(
    view: Any, profile: Any, address: str | None, *, status: Callable[[str], None] | None = None
) -> Iterator[bool]:
    """While in the block, ``view`` (an :class:`~pytest_sadl.engine.ProfileView`) scores LSA
    and DSA on the cluster at ``address`` when an ini-configured address pays
    (:func:`use_cluster`); yields whether it does. A scheduler out of reach is one status
    line and the scores are computed here, as without the address."""
    from pytest_sadl.errors import SadlConfigError

    if not use_cluster(address, int(profile.n_train), explicit=False):
        yield False
        return
    assert address is not None
    try:
        scorer = ClusterScorer(address, profile, status=status).__enter__()
    except SadlConfigError as exc:
        if status is not None:
            status(f"{exc}; scoring here instead")
        yield False
        return
    try:
        # LSA on principal axes (--sadl-sa-components) is set up here, on the projected traces
        projected = getattr(view, "components", None) is not None
        if status is not None:
            status(_scoring_line(projected, len(scorer._workers), address))
        use_cluster_scores(view, scorer.lsa, scorer.dsa if profile.classifier else None, projected)
        yield True
    finally:
        scorer.__exit__(None, None, None)


def _scoring_line(projected: bool, workers: int, address: str) -> str:
    """The status line of scoring on the cluster (LSA on principal axes is set up here)."""
    what = "DSA" if projected else "LSA and DSA"
    return f"scoring {what} on {workers} Dask worker(s) at {address}"


def use_cluster_scores(view: Any, lsa: Any, dsa: Any, projected: bool = False) -> None:
    """``view`` scores LSA and DSA on the cluster where the cluster's are the run's: not LSA
    on principal axes or on its highest-variance neurons (``--sadl-lsa-max-features``), not
    DSA on a subsample (``--sadl-dsa-subsample``); those are set up here, by their criteria."""
    from pytest_sadl.criteria.metrics import dsc, lsc

    options = getattr(view, "options", None)
    if not projected and lsc.max_features(options) == 0:
        view.use("lsa", lsa)
    if dsc.subsample(options)[0] == 0:
        view.use("dsa", dsa)


def _source(x: np.ndarray) -> tuple[str, str, tuple[int, ...], int, int, int] | None:
    """How a worker may open ``x`` itself: a ``np.memmap`` of a stored file (path, dtype,
    shape, offset, size, modification time); ``None`` for an array in memory."""
    name = getattr(x, "filename", None)
    if not isinstance(x, np.memmap) or not name:
        return None
    try:
        st = os.stat(name)
    except OSError:
        return None
    offset = int(getattr(x, "offset", 0))
    return (str(name), x.dtype.str, tuple(int(v) for v in x.shape), offset, int(st.st_size), int(st.st_mtime_ns))


def _open(source: Any) -> np.ndarray:
    """On a worker: the memory-mapped traces of ``source``; ``FileNotFoundError`` when this
    worker does not see the same file."""
    name, dtype, shape, offset, size, mtime = source
    st = os.stat(name)
    if st.st_size != size or st.st_mtime_ns != mtime:
        raise FileNotFoundError(f"{name} differs on this worker")
    return np.memmap(name, dtype=np.dtype(dtype), mode="r", offset=offset, shape=tuple(shape))


def _dsa_shard(data: Any, lo: int, hi: int, pred: np.ndarray) -> Any:
    from pytest_sadl.criteria.sharded import DSAShard

    x = _open(data)[lo:hi] if isinstance(data, tuple) else data
    return DSAShard(x, pred, lo)


def _nearest_in(shard: Any, q: np.ndarray, cls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    result: tuple[np.ndarray, np.ndarray] = shard.nearest_in(q, cls)
    return result


def _nearest_out(shard: Any, q: np.ndarray, cls: np.ndarray) -> np.ndarray:
    result: np.ndarray = shard.nearest_out(q, cls)
    return result


def _lsa_setup(data: Any, arrays: dict[str, Any]) -> Any:
    from pytest_sadl.criteria.surprise import LSA

    x = _open(data) if isinstance(data, tuple) else data
    return LSA.from_arrays({**arrays, "train_ats": x})


def _lsa_score(lsa: Any, q: np.ndarray, pred: np.ndarray | None) -> np.ndarray:
    result: np.ndarray = lsa(q, pred)
    return result


def _sums(data: Any, lo: int, hi: int, pred: np.ndarray) -> Any:
    from pytest_sadl.criteria.sharded import shard_sums

    return shard_sums(_open(data)[lo:hi] if isinstance(data, tuple) else data, pred)


def _scatters(data: Any, lo: int, hi: int, pred: np.ndarray, means: dict[int, np.ndarray]) -> Any:
    from pytest_sadl.criteria.sharded import shard_scatters

    return shard_scatters(_open(data)[lo:hi] if isinstance(data, tuple) else data, pred, means)


def _trace(key: tuple[Any, ...], x: Any, batch_size: int) -> Any:
    return worker_trace_model(key).traces(x, batch_size=batch_size)


class ClusterScorer:
    """The scoring of one profile's training traces on the Dask scheduler at ``address``.

    ``with ClusterScorer(address, profile) as cluster: cluster.dsa(ats, pred)``; the
    shards are made on first use and dropped with the client at the end of the block."""

    connect_timeout: float = 10.0

    def __init__(self, address: str, profile: Any, *, status: Callable[[str], None] | None = None) -> None:
        self.address = address
        self.profile = profile
        self.status = status
        self.x = profile.sa_traces
        self.pred = None if profile.sa_pred is None else np.asarray(profile.sa_pred, dtype=np.int64)
        self.client: Any = None
        self._workers: list[str] = []
        self._parts: list[tuple[int, int]] = []
        self._data: list[Any] = []  # per shard: the file to open, or the rows sent (a future)
        self._dsa: list[Any] = []
        self._lsa: dict[str, Any] = {}

    def __enter__(self) -> ClusterScorer:
        self.client = connect(self.address, self.connect_timeout)
        self._workers = sorted(self.client.scheduler_info().get("workers", {}))
        n = len(self.x)
        k = max(1, min(n, SHARDS_PER_WORKER * max(1, len(self._workers))))
        bounds = np.linspace(0, n, k + 1).astype(np.int64)
        self._parts = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
        return self

    def __exit__(self, *exc: object) -> None:
        self._dsa, self._lsa, self._data = [], {}, []
        if self.client is not None:
            self.client.close()
            self.client = None

    # -- where the training traces are ----------------------------------------------

    def _shard_data(self) -> list[Any]:
        """Per shard: the stored file (workers open it) or the shard's rows, sent once."""
        if not self._data:
            source = _source(self.x)
            if source is not None and self._workers_see(source):
                self._data = [source] * len(self._parts)
            else:
                self._data = [self.client.scatter(np.asarray(self.x[a:b]), hash=False) for a, b in self._parts]
        return self._data

    def _workers_see(self, source: Any) -> bool:
        """Whether every worker opens the same stored file (shared folder)."""

        def check(src: Any) -> bool:
            try:
                _open(src)
            except (OSError, ValueError):  # not there, another file, or too short for the shape
                return False
            return True

        seen = self.client.run(check, source)
        return bool(seen) and all(seen.values())

    def _submit_each(self, fn: Callable[..., Any], args: list[tuple[Any, ...]]) -> list[Any]:
        return [self.client.submit(fn, *a, pure=False) for a in args]

    # -- DSA ------------------------------------------------------------------------

    def dsa(self, ats: Any, pred: Any) -> np.ndarray:
        """DSA of each input over every training trace, searched shard by shard."""
        from pytest_sadl.criteria.sharded import dsa_scores

        if self.pred is None:
            raise ValueError(
                "DSA needs the predicted classes of the training traces; for a regression model use LSA only"
            )
        q = np.asarray(ats, dtype=np.float64)
        p = np.asarray(pred, dtype=np.int64)
        if not self._dsa:
            data = self._shard_data()
            self._dsa = self._submit_each(
                _dsa_shard, [(d, a, b, self.pred[a:b]) for d, (a, b) in zip(data, self._parts, strict=True)]
            )
        index, dist_a = self._reduce(_nearest_in, q, p, "DSA: nearest same-class traces", pair=True)
        rows = np.unique(index[index >= 0])
        dist_b = np.full(len(q), np.inf)
        if rows.size:
            qa = np.asarray(self.x[rows], dtype=np.float64)
            other = self._reduce(_nearest_out, qa, self.pred[rows], "DSA: nearest other-class traces")
            dist_b[index >= 0] = other[np.searchsorted(rows, index[index >= 0])]
        return dsa_scores(index, dist_a, dist_b, p)

    def _reduce(self, fn: Callable[..., Any], q: np.ndarray, cls: np.ndarray, what: str, *, pair: bool = False) -> Any:
        """``fn`` of each block of queries on every shard, reduced (min, first on a tie)."""
        blocks = _query_blocks(len(q))
        futures, sizes = [], []
        for a, b in blocks:
            qf = self.client.scatter(q[a:b], broadcast=False, hash=False)
            for shard in self._dsa:
                futures.append(self.client.submit(fn, shard, qf, cls[a:b], pure=False))
                sizes.append(b - a)
        results = gather_in_order(self.client, futures, sizes, None, self.status if len(futures) > 8 else None, what)
        per = len(self._dsa)
        per_block = [results[i * per : (i + 1) * per] for i in range(len(blocks))]
        return _nearest_pairs(per_block) if pair else _nearest_distances(per_block)

    # -- LSA ------------------------------------------------------------------------

    def lsa(self, ats: Any, pred: Any) -> np.ndarray:
        """LSA of each input, the inputs shared among the workers (each sets LSA up once)."""
        q = np.asarray(ats, dtype=np.float64)
        p = None if pred is None or self.pred is None else np.asarray(pred, dtype=np.int64)
        if not self._lsa:
            self._lsa = self._lsa_on_each_worker()
        blocks = _query_blocks(len(q))
        futures = [self._submit_lsa(i, q[a:b], None if p is None else p[a:b]) for i, (a, b) in enumerate(blocks)]
        results = gather_in_order(self.client, futures, [b - a for a, b in blocks], None, self.status, "LSA")
        return np.concatenate(results) if results else np.zeros(0)

    def _submit_lsa(self, i: int, q: np.ndarray, p: np.ndarray | None) -> Any:
        """Block ``i`` of the queries to the workers in turn, scored by the LSA set up on it."""
        workers = list(self._lsa)
        w = workers[i % len(workers)]
        return self.client.submit(_lsa_score, self._lsa[w], q, p, workers=[w], allow_other_workers=False, pure=False)

    def _lsa_on_each_worker(self) -> dict[Any, Any]:
        """LSA set up once on each worker (futures by worker), from the training traces the
        workers can read themselves (their file), else scattered to them."""
        arrays = {k: v for k, v in self.profile.lsa_arrays.items() if k != "train_ats"}
        source = _source(self.x)
        data = (
            source
            if source is not None and self._workers_see(source)
            else self.client.scatter(np.asarray(self.x), broadcast=True, hash=False)
        )
        return {
            w: self.client.submit(_lsa_setup, data, arrays, workers=[w], allow_other_workers=False, pure=False)
            for w in self._workers
        }

    # -- class moments (MDSA's set-up) --------------------------------------------

    def class_moments(self) -> tuple[dict[int, int], dict[int, np.ndarray], dict[int, np.ndarray]]:
        """Each class's count, float64 mean and covariance (``ddof=1``), reduced from the shards."""
        from pytest_sadl.criteria.sharded import reduce_moments

        pred = self.pred if self.pred is not None else np.zeros(len(self.x), dtype=np.int64)
        data = self._shard_data()
        args = [(d, a, b, pred[a:b]) for d, (a, b) in zip(data, self._parts, strict=True)]
        sums = self.client.gather(self._submit_each(_sums, args))
        counts, means, _ = reduce_moments(sums)
        scatters = self.client.gather(self._submit_each(_scatters, [(*a, means) for a in args]))
        counts, means, covs = reduce_moments(sums, scatters)
        assert covs is not None
        return counts, means, covs

    # -- a pool's traces --------------------------------------------------------------

    def traces(
        self,
        model_spec: str,
        base_dir: str | None,
        tm: Any,
        x: Any,
        batch_size: int,
        *,
        extrema: bool = False,
        progress: Callable[[int, int | None], None] | None = None,
    ) -> Any:
        """The traces of ``x`` through ``tm``'s layers, traced on the workers in shards of
        whole batches (the batches of a local pass: the same traces)."""
        from pytest_sadl.capture.arrays import Traces
        from pytest_sadl.capture.data import take_rows

        n = len(next(iter(x.values()))) if isinstance(x, dict) else len(x[0]) if isinstance(x, list) else len(x)
        key = model_key(model_spec, base_dir, tm, extrema=extrema)
        parts = shards(n, batch_size)
        futures = [
            self.client.submit(_trace, key, take_rows(x, np.arange(a, b)), batch_size, pure=False) for a, b in parts
        ]
        results = gather_in_order(
            self.client, futures, [b - a for a, b in parts], progress, self.status, "traced the pool"
        )
        return Traces.concatenate(results)


def _query_blocks(n: int) -> list[tuple[int, int]]:
    """The queries' blocks of at most ``QUERY_ROWS`` rows, as ``(start, stop)``."""
    return [(s, min(s + QUERY_ROWS, n)) for s in range(0, n, QUERY_ROWS)]


def _nearest_pairs(per_block: list[list[Any]]) -> tuple[np.ndarray, np.ndarray]:
    """Each block's shards' (index, distance) reduced to the nearest (first on a tie), joined."""
    from pytest_sadl.criteria.sharded import reduce_nearest

    parts = [reduce_nearest(shards) for shards in per_block]
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    return np.concatenate([i for i, _ in parts]), np.concatenate([d for _, d in parts])


def _nearest_distances(per_block: list[list[Any]]) -> np.ndarray:
    """Each block's shards' distances reduced to the smallest, joined."""
    mins = [np.minimum.reduce(shards) for shards in per_block]
    return np.concatenate(mins) if mins else np.zeros(0)
