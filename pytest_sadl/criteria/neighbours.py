"""Exact nearest-neighbour search by class, the work behind DSA.

:class:`ClassNeighbours` answers two questions over the rows of a training array ``x``
(float32 or float64, a ``np.memmap`` included) whose rows carry a class:

* :meth:`~ClassNeighbours.nearest_in` — for each query, the nearest row of a given class
  (its index and exact distance): DSA's ``x_a`` and ``dist_a``;
* :meth:`~ClassNeighbours.nearest_out_each` — for each query, the distance to the nearest
  row of any class *other than the query's own*: DSA's ``dist_b`` when the query is
  ``x_a``. One blocked scan over every row answers queries of every class at once (each
  query's own class masked out of the products), so its cost does not grow with the
  number of classes; with up to ``TREE_MAX_CLASSES`` classes and a k-d tree DSA,
  :meth:`~ClassNeighbours.nearest_out` searches the other classes' trees instead.

Both are exact: the row returned is the one a per-query ``np.linalg.norm`` loop over the
class's rows in their original order finds (the first, on an exact tie), and every
distance is computed in float64 from the two vectors' difference. Repeated rows (the same
vector in the same class, from an augmented or oversampled training set) are searched
once: the first occurrence stands for all copies.

Two exact methods, chosen by dimension and storage (``method="auto"``), measured in
``benchmarks/bench_engine.py``:

* ``"tree"`` — SciPy's ``cKDTree`` over float64 rows, one tree per class, for up to
  ``TREE_MAX_DIM`` dimensions of an in-memory array: a tree query costs about ``log n``
  distances where a scan costs ``n``. A query whose two nearest rows lie within ``1e-9``
  relative of each other is settled among every row in that radius, exactly. For
  ``dist_b`` the other classes are searched nearest class first, each later one only
  within the best distance found so far: one search per other class, so with more than
  ``TREE_MAX_CLASSES`` classes ``dist_b`` is found by the masked scan below instead
  (every ``dist_b`` of 60,000 traces, measured: 10 classes of near-one-hot softmax rows,
  trees 3.2 s, scan 60 s; 10-d clusters, 32 s against 60 s; 100 classes at 16-d, 146 s
  against 54 s; 1,000 classes at 8-d, 222 s against 65 s).
* ``"blas"`` — blocked matrix products ``|x|^2 - 2 q.x`` in the training array's own
  precision (float32 traces: float32 products, twice the speed of float64), streamed
  over chunks of at most ``chunk_bytes``, so a memory-mapped array is never read whole
  into memory and no ``n_queries x n_rows`` matrix exists. The rows are gathered in class
  order, so the rows a query must skip (its own class, for ``dist_b``) are one column
  range of each block, set to ``+inf``. Every row whose product lies
  within a proven rounding bound of the running minimum is re-measured exactly in
  float64 (vectorised over all such pairs), so the precision of the products never
  decides the answer.

Every search is exact (an approximate one through faiss HNSW graphs was measured 95x
slower than the blocked scan and withdrawn; see :class:`~pytest_sadl.criteria.surprise.DSA`).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["ClassNeighbours", "TREE_MAX_DIM", "cores", "exact_distance"]

#: Above this many dimensions a k-d tree prunes little and the blocked scan wins.
TREE_MAX_DIM = 16
#: With more classes than this, ``dist_b`` by the k-d trees (one search per other class)
#: loses to the one masked scan over every row, whose cost does not grow with the classes.
TREE_MAX_CLASSES = 32
_TIE = 1e-9  # relative gap under which two tree distances count as a possible tie
_GROUPS = 8  # query groups (by the best distance so far) for bounded searches of further classes
_ROW_BLOCK = 512  # queries per matrix product in the blocked scan
_COL_BLOCK = 8192  # training rows per matrix product: a block of products stays in cache
#: a layer at least this wide has the blocked scan gather up to _GATHER_ROWS training rows at
#: a time (raw and shifted copies), up to four times chunk_bytes: at 640k x 2,048 float32
#: traces 16 MiB (1,024 rows) scored 1,000 inputs in 60 s, 4,096 rows (64 MiB) in 23-38 s, side
#: by side (the same values: the products only choose whom to measure exactly). Narrower
#: layers, and the set-up's passes, keep to chunk_bytes.
_WIDE = 1024
#: float64 differences the exact re-measurement of candidate pairs holds at a time
_PAIR_BYTES = 8 * 2**20
_GATHER_ROWS = 4096


def _gather_rows(chunk_bytes: int, d: int, itemsize: int) -> int:
    """The training rows the blocked scan gathers at a time (see ``_WIDE``)."""
    rows = max(1, chunk_bytes // (2 * d * itemsize))
    if d >= _WIDE and rows < _GATHER_ROWS:
        rows = min(_GATHER_ROWS, 4 * rows)
    return rows


def cores() -> int:
    """The cores this process may run on (its CPU affinity, not the machine's count): the
    number of threads a search uses."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def exact_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise Euclidean distance in float64 from the difference of the two vectors."""
    diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    dist: np.ndarray = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    return dist


def _first_min(rows: np.ndarray, cand: np.ndarray, dist: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per query row among candidate pairs ``(rows, cand)``: the smallest distance, the
    smallest index on a tie. Returns (rows that had a candidate, their index, distance)."""
    order = np.lexsort((cand, dist, rows))
    rows, cand, dist = rows[order], cand[order], dist[order]
    first = np.ones(len(rows), dtype=bool)
    first[1:] = rows[1:] != rows[:-1]
    return rows[first], cand[first], dist[first]


def duplicate_of(x: np.ndarray, pred: np.ndarray, chunk_bytes: int) -> np.ndarray:
    """For each row, the index of the first row with the same class and the same vector.

    Rows are hashed chunk by chunk (their bit patterns, ``-0.0`` made ``+0.0``); rows with
    equal hashes are compared exactly, so a hash collision costs a missed merge, never a
    wrong one."""
    n, d = x.shape
    word = np.uint32 if x.dtype == np.float32 else np.uint64
    mult = np.random.default_rng(0x5AD1).integers(1, 2**63, size=d, dtype=np.uint64) | np.uint64(1)
    h = np.empty(n, dtype=np.uint64)
    step = max(1, chunk_bytes // (d * 8))
    with np.errstate(over="ignore"):
        for s in range(0, n, step):
            block = np.asarray(x[s : s + step]) + x.dtype.type(0)  # -0.0 -> +0.0
            h[s : s + step] = (block.view(word).astype(np.uint64) * mult).sum(axis=1)
        h ^= pred.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    order = np.lexsort((np.arange(n), h))
    hs = h[order]
    same = np.zeros(n, dtype=bool)
    pairs = np.flatnonzero(hs[1:] == hs[:-1]) + 1
    for s in range(0, len(pairs), step):
        p = pairs[s : s + step]
        a, b = order[p], order[p - 1]
        same[p] = (pred[a] == pred[b]) & (np.asarray(x[a]) == np.asarray(x[b])).all(axis=1)
    segment = np.cumsum(~same) - 1
    starts = order[~same]
    rep = np.empty(n, dtype=np.int64)
    rep[order] = starts[segment]
    return rep


class ClassNeighbours:
    """Exact nearest rows of a class, or of the other classes, for batches of queries."""

    def __init__(self, x: np.ndarray, pred: np.ndarray, *, method: str = "auto", chunk_bytes: int = 16 * 2**20) -> None:
        if method not in ("auto", "tree", "blas"):
            raise ValueError(f"search must be 'auto', 'tree' or 'blas', got {method!r}")
        self.x = x
        self.chunk_bytes = int(chunk_bytes)
        n, d = x.shape
        self.rep = duplicate_of(x, pred, self.chunk_bytes)
        unique = np.flatnonzero(self.rep == np.arange(n))
        self.rows = unique[np.argsort(pred[unique], kind="stable")]  # unique rows by class, in order
        classes, starts = np.unique(pred[self.rows], return_index=True)
        ends = list(starts[1:]) + [len(self.rows)]
        self.span = {int(c): (int(s), int(e)) for c, s, e in zip(classes, starts, ends, strict=True)}
        if method == "auto":
            method = "tree" if d <= TREE_MAX_DIM and not isinstance(x, np.memmap) else "blas"
        self.method = method
        #: dist_b by the per-class k-d trees (else by one masked scan of every row)
        self.trees_out = method == "tree" and len(self.span) <= TREE_MAX_CLASSES
        self._trees: dict[tuple[str, int], Any] = {}  # k-d trees, built lazily
        if method == "blas":
            self._prepare_scan()

    # -- public ---------------------------------------------------------------

    def nearest_in(self, q: np.ndarray, c: int) -> tuple[np.ndarray, np.ndarray]:
        """Index into ``x`` and exact distance of each query's nearest row of class ``c``."""
        s, e = self.span[c]
        if self.method == "tree":
            return self._tree_nearest(q, c)
        return self._scan(q, [(s, e)])

    def nearest_out_each(self, q: np.ndarray, cls: np.ndarray) -> np.ndarray:
        """Exact distance of each query to its nearest row of a class other than its own,
        ``cls[i]``, by one blocked scan over every row with each query's own class masked
        out: the cost does not grow with the number of classes (a scan per class repeats
        the whole set once per class). Any order of queries and classes."""
        self._prepare_scan()
        cls = np.asarray(cls, dtype=np.int64)
        order = np.argsort(cls, kind="stable")
        out = np.empty(len(q))
        out[order] = self._scan(q[order], [(0, len(self.rows))], exclude=cls[order])[1]
        return out

    def nearest_out(self, q: np.ndarray, c: int, *, workers: int = 0) -> np.ndarray:
        """Exact distance of each query to its nearest row of a class other than ``c``.
        ``workers``: threads for the k-d tree searches (0: :func:`cores`; 1 from a thread
        that is itself one of several)."""
        s, e = self.span[c]
        if e - s == len(self.rows):
            return np.full(len(q), np.inf)
        if self.method == "tree":
            return self._tree_nearest_out(q, c, workers or cores())
        return self.nearest_out_each(q, np.full(len(q), c))

    # -- k-d tree -------------------------------------------------------------

    def build_trees(self) -> None:
        """Build every class's k-d tree now (searches from several threads then only read)."""
        for c in self.span:
            self._tree(c)

    def _tree(self, c: int) -> Any:
        """Class ``c``'s k-d tree over its (unique) rows, built on first use."""
        from scipy.spatial import cKDTree

        tree = self._trees.get(("in", c))
        if tree is None:  # unbalanced: on clustered traces (softmax) balanced trees query far slower
            s, e = self.span[c]
            tree = self._trees[("in", c)] = cKDTree(
                np.asarray(self.x[self.rows[s:e]], dtype=np.float64), balanced_tree=False, compact_nodes=False
            )
        return tree

    def _tree_nearest(self, q: np.ndarray, c: int) -> tuple[np.ndarray, np.ndarray]:
        """Nearest row of class ``c`` by its k-d tree; near-ties settled for the first row in
        training order among every row within the tie radius, by exact distances."""
        s, e = self.span[c]
        rows = self.rows[s:e]
        tree = self._tree(c)
        if len(rows) == 1:
            j = np.zeros(len(q), dtype=np.int64)
        else:
            dist, nn = tree.query(q, k=2, workers=cores())
            j = nn[:, 0].astype(np.int64)
            tie = np.flatnonzero(dist[:, 1] <= dist[:, 0] * (1 + _TIE) + 1e-300)
            if tie.size:  # settle among every row within the tie radius, exactly
                found = tree.query_ball_point(q[tie], dist[tie, 0] * (1 + 2 * _TIE) + 1e-300, workers=cores())
                counts = np.fromiter((len(f) for f in found), dtype=np.int64, count=len(found))
                cand = np.concatenate([np.asarray(f, dtype=np.int64) for f in found])
                owner = np.repeat(tie, counts)
                cand = rows[cand]
                got_rows, got_idx, _ = _first_min(owner, cand, exact_distance(q[owner], self.x[cand]))
                j[got_rows] = _position(rows, got_idx)
        idx = rows[j]
        return idx, exact_distance(q, self.x[idx])

    def _tree_nearest_out(self, q: np.ndarray, c: int, workers: int) -> np.ndarray:
        """Nearest row of the other classes by their own trees, nearest class (by mean) first;
        each later class is searched only within the best distance found so far (queries
        grouped by it), which prunes a far class almost at once. Measured 1.2-1.4x faster
        than one tree over all other classes, and no such tree (9x the data) is built."""
        others = [o for o in self.span if o != c]
        means = {o: self._tree(o).data.mean(axis=0) for o in [c, *others]}
        others.sort(key=lambda o: float(np.sum((means[o] - means[c]) ** 2)))
        best = np.full(len(q), np.inf)
        best_i = np.zeros(len(q), dtype=np.int64)
        for o in others:
            tree, (s, _) = self._tree(o), self.span[o]
            first = np.isinf(best).all()
            n_groups = 1 if first else min(_GROUPS, 1 + len(q) // 1024)
            for g in np.array_split(np.argsort(best), n_groups):
                bound = float(best[g].max()) * (1 + _TIE) + 1e-300
                # one thread for the bounded searches: they are short, a thread pool per call is not
                dist, nn = tree.query(q[g], k=1, workers=workers if first else 1, distance_upper_bound=bound)
                closer = dist < best[g]
                best[g[closer]] = dist[closer]
                best_i[g[closer]] = self.rows[s + nn[closer]]
        return exact_distance(q, self.x[best_i])

    # -- blocked scan ---------------------------------------------------------

    def _prepare_scan(self) -> None:
        """The shift (mean row, in the scan's precision) that keeps products small, every
        row's squared shifted norm (float64, kept: each scan reads it instead of recomputing
        it) and the largest of them."""
        if hasattr(self, "shift"):
            return
        x = self.x
        n, d = x.shape
        self.dtype = np.float32 if x.dtype == np.float32 else np.float64
        step = max(1, self.chunk_bytes // (d * 8))
        total = np.zeros(d)
        for s in range(0, n, step):
            total += np.asarray(x[s : s + step], dtype=np.float64).sum(axis=0)
        # the shift as the scan subtracts it from the rows (in their precision) and from the
        # queries (in float64): the same number, so it cancels from every difference exactly
        self._shift_dt = (total / n).astype(self.dtype)
        self.shift = self._shift_dt.astype(np.float64)
        self._sq = np.empty(n)
        for s in range(0, n, step):
            block = np.asarray(x[s : s + step], dtype=np.float64) - self.shift
            self._sq[s : s + step] = np.einsum("ij,ij->i", block, block)
        self.max_sq = float(self._sq.max())

    def _scan(
        self, q: np.ndarray, spans: list[tuple[int, int]], exclude: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Nearest row among ``self.rows[s:e]`` for the spans, by blocked products.

        Rows of ``x`` are gathered a chunk at a time (large, for few reads of a memmap),
        then scored against the queries in cache-sized blocks of one product each,
        ``[-2 q, 1] . [x, |x|^2]`` (all shifted by the mean row).

        ``exclude`` (one class per query, the queries sorted by it): each query skips the
        rows of its own class. ``self.rows`` is sorted by class, so a class's rows are one
        column range of each block: it is set to ``+inf`` in the product, a slice per
        class, and one scan over every row answers queries of every class at once."""
        m, d = q.shape
        q_aug, tol = self._query_terms(q)
        approx = np.full(m, np.inf)
        best = np.full(m, np.inf)
        best_i = np.zeros(m, dtype=np.int64)
        groups = None if exclude is None else self._exclusion_groups(exclude)
        chunk = _gather_rows(self.chunk_bytes, d, np.dtype(self.dtype).itemsize)
        for s, e in spans:
            for c0 in range(s, e, chunk):
                idx = self.rows[c0 : min(e, c0 + chunk)]
                raw = np.asarray(self.x[idx])
                x_aug = np.empty((len(idx), d + 1), dtype=self.dtype)
                np.subtract(raw, self._shift_dt, out=x_aug[:, :d], casting="unsafe")
                x_aug[:, d] = self._sq[idx]
                for b0 in range(0, len(idx), _COL_BLOCK):
                    block = x_aug[b0 : b0 + _COL_BLOCK]
                    g0, g1 = c0 + b0, c0 + b0 + len(block)  # its positions in self.rows
                    for r0 in range(0, m, _ROW_BLOCK):
                        r1 = min(m, r0 + _ROW_BLOCK)
                        v = q_aug[r0:r1] @ block.T
                        if groups is not None:
                            _mask_own_class(v, groups[r0 // _ROW_BLOCK], g0, g1)
                        r, jj = _candidates(v, approx[r0:r1], tol[r0:r1], groups is not None)
                        if r.size:
                            _keep_nearer(q, r + r0, raw, idx, jj + b0, best, best_i)
        return best_i, best

    def _query_terms(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The queries as the scan's left factor ``[-2 q, 1]`` (shifted by the mean row, in
        the scan's precision) and each query's rounding tolerance of a product."""
        m, d = q.shape
        eps = float(np.finfo(self.dtype).eps)
        qs = q - self.shift
        q_sq = np.einsum("ij,ij->i", qs, qs)
        # |fl(|x|^2 - 2 q.x) - (|x|^2 - 2 q.x)| <= (d + 2) eps (|x|^2 + 2 |q||x|): twice that
        # bound (the candidate's error and the minimum's) decides who is measured exactly.
        tol = 2 * (d + 2) * eps * (2 * self.max_sq + q_sq) + 1e-300
        q_aug = np.empty((m, d + 1), dtype=self.dtype)
        np.multiply(qs, -2.0, out=q_aug[:, :d], casting="unsafe")
        q_aug[:, d] = 1.0
        return q_aug, tol

    def _exclusion_groups(self, exclude: np.ndarray) -> list[tuple[np.ndarray, ...]]:
        """Per query row block: its classes' query ranges (``lo``, ``hi``) and their rows'
        spans in ``self.rows`` (``ss``, ``se``)."""
        groups: list[tuple[np.ndarray, ...]] = []
        for r0 in range(0, len(exclude), _ROW_BLOCK):
            cls = exclude[r0 : r0 + _ROW_BLOCK]
            cut = np.flatnonzero(cls[1:] != cls[:-1]) + 1
            lo = np.concatenate([[0], cut])
            hi = np.concatenate([cut, [len(cls)]])
            span = np.array([self.span[int(c)] for c in cls[lo]], dtype=np.int64).reshape(-1, 2)
            groups.append((lo, hi, span[:, 0], span[:, 1]))
        return groups


def _mask_own_class(v: np.ndarray, group: tuple[np.ndarray, ...], g0: int, g1: int) -> None:
    """Sets to ``+inf`` the products of each query with the rows of its own class among the
    block's rows ``g0:g1`` of ``self.rows`` (a slice per class)."""
    lo, hi, ss, se = group
    for k in np.flatnonzero((ss < g1) & (se > g0)):
        v[lo[k] : hi[k], max(ss[k], g0) - g0 : min(se[k], g1) - g0] = np.inf


def _candidates(v: np.ndarray, approx: np.ndarray, tol: np.ndarray, masked: bool) -> tuple[np.ndarray, np.ndarray]:
    """The (query, column) pairs of the products ``v`` within each query's tolerance of its
    smallest product so far; ``approx`` (that smallest, per query) is updated in place.
    ``v`` is overwritten."""
    at = np.arange(len(v))
    j = v.argmin(axis=1)
    vj = v[at, j]
    low = np.minimum(approx, vj)
    approx[:] = low
    thr = low + tol
    active = np.flatnonzero(vj <= thr)
    if masked:  # a row masked in the whole block has vj = thr = inf
        active = active[np.isfinite(vj[active])]
    if active.size == 0:
        return active, active
    # candidates: every product within thr. A row's minimum is one; the
    # others (near ties, rare) exist only where the second smallest
    # product is within thr too: two reading passes over v, where
    # comparing all of it and listing the hits cost four.
    v[at, j] = np.inf
    second = (v if active.size == len(at) else v[active]).min(axis=1)
    ties = active[second <= thr[active]]
    r, jj = active, j[active]
    if ties.size:
        tr, tj = np.nonzero(v[ties] <= thr[ties, None])
        r, jj = np.concatenate([r, ties[tr]]), np.concatenate([jj, tj])
    return r, jj


def _keep_nearer(
    q: np.ndarray,
    r: np.ndarray,
    raw: np.ndarray,
    idx: np.ndarray,
    jj: np.ndarray,
    best: np.ndarray,
    best_i: np.ndarray,
) -> None:
    """Measures the candidates (queries ``r``, chunk rows ``jj``) exactly and keeps, per
    query, the nearer of them and its best so far (ties to the lower row). The pairs go in
    blocks of at most ``_PAIR_BYTES`` of float64 differences: where traces barely differ
    (a briefly trained network's pooled features) nearly every pair is a candidate, and
    measuring them at once held pairs x neurons floats (gigabytes at 1,280 neurons). The
    smallest (distance, row) is the same whichever blocks the pairs come in."""
    step = max(1, _PAIR_BYTES // (8 * q.shape[1]))
    for s in range(0, len(r), step):
        rs, js = r[s : s + step], jj[s : s + step]
        dist = exact_distance(q[rs], raw[js])
        rr, nearest, dist = _first_min(rs, idx[js], dist)
        take = (dist < best[rr]) | ((dist == best[rr]) & (nearest < best_i[rr]))
        best[rr[take]] = dist[take]
        best_i[rr[take]] = nearest[take]


def _position(rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Positions of ``values`` in the (unsorted, distinct) array ``rows``."""
    order = np.argsort(rows)
    return order[np.searchsorted(rows, values, sorter=order)]
