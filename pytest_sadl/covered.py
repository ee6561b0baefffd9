"""Each test's covered targets, compact and versioned (the results' ``covered`` section).

Surprise coverage and the neuron coverages are unions of sets: the buckets a test's
scores fall in, the neuron sections its traces reach. With each test's sets in the
results, runs of parts of a suite combine into the results of one run over all of it
(``sadl combine``), a partial run compares with the same tests of a baseline, and the
smallest set of tests keeping the coverage can be found (``sadl minimize``).

The section (format ``pytest-sadl/covered``, version 1)::

    "covered": {
      "format": "pytest-sadl/covered", "version": 1,
      "groups": ["fgsm", ...],                     # the run's sadl_groups (group order)
      "metrics": {"lsc": {"parts": [1000], "totals": [1000], "kind": "buckets"},
                  "nc": {"parts": [32, 64], "totals": [32, 64], "kind": "targets"}, ...},
      "tests": {"tests/test_a.py::test_x": {"lsc": {"sets": ["i:eJz..."], "below": 0,
                "above": 1, "count": 10, "nan": 0}, "nc": {"sets": ["b:eJz...", "..."]}}}
    }

``parts``: the bits of each part (one per coverage layer; one for the buckets);
``totals``: the targets that count in each part (KMNC leaves constant neurons out).
Each part's set is text: ``b:`` and the zlib-compressed ``numpy.packbits`` of its bits,
or ``i:`` and the zlib-compressed little-endian ``uint32`` gaps between its set bits'
indices (the first from -1), whichever is shorter, in base64. Only criteria whose
coverage is such a union (every surprise coverage, NC, KMNC, NBC, SNAC) have sets; the
peers' counts (TKNP, NLC, CC) and TKNC do not combine.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pytest_sadl.results import JSON, JSONObject, Metric, Results, TestRow

FORMAT = "pytest-sadl/covered"
VERSION = 1
_COUNTS = ("below", "above", "count", "nan")


# ------------------------------------------------------------------------- encoding


def encode(bits: np.ndarray) -> str:
    """One part's set as text: packed bits or index gaps, whichever is shorter."""
    bits = np.asarray(bits, dtype=bool).reshape(-1)
    packed = "b:" + base64.b64encode(zlib.compress(np.packbits(bits).tobytes(), 9)).decode("ascii")
    where = np.flatnonzero(bits).astype(np.int64)
    gaps = np.diff(where, prepend=-1).astype("<u4")
    listed = "i:" + base64.b64encode(zlib.compress(gaps.tobytes(), 9)).decode("ascii")
    return packed if len(packed) < len(listed) else listed


def decode(text: str, size: int) -> np.ndarray:
    """The bits of one part (``size`` of them); ValueError for anything else."""
    kind, _, body = text.partition(":")
    raw = zlib.decompress(base64.b64decode(body.encode("ascii"), validate=True))
    decoder = _DECODERS.get(kind)
    if decoder is None:
        raise ValueError(f"a covered set is neither b: nor i: ({kind[:10]!r})")
    return decoder(raw, size)


def _packed_bits(raw: bytes, size: int) -> np.ndarray:
    """``b:``: the bits as ``numpy.packbits`` packed them."""
    bits = np.unpackbits(np.frombuffer(raw, np.uint8), count=size).astype(bool)
    if bits.size != size:
        raise ValueError(f"a covered set holds {bits.size} bits, not {size}")
    return bits


def _listed_bits(raw: bytes, size: int) -> np.ndarray:
    """``i:``: the bits set at the indices the gaps add up to (the first from -1)."""
    where = np.cumsum(np.frombuffer(raw, "<u4").astype(np.int64)) - 1
    if where.size and (where[-1] >= size or where[0] < 0):
        raise ValueError(f"a covered set names target {int(where[-1])} of {size}")
    bits = np.zeros(size, dtype=bool)
    bits[where] = True
    return bits


#: A set's kind (the text before ``:``) and how its decompressed bytes become ``size`` bits.
_DECODERS: dict[str, Callable[[bytes, int], np.ndarray]] = {"b": _packed_bits, "i": _listed_bits}


# ----------------------------------------------------------------- making the section


def _state(coverage: Any) -> JSONObject:
    parts, _, counts = coverage.covered_sets()
    return {"sets": [encode(p) for p in parts], **counts}


def section(
    tests: Iterable[tuple[str, Any]], fresh: Callable[[], Any], groups: Sequence[str] = ()
) -> JSONObject | None:
    """The ``covered`` section: for each (node id, batch of its inputs), the sets a fresh
    set of the run's criteria (``fresh()``: ``made`` by name, ``update(batch)``) covers
    with that test alone. ``None`` when no chosen criterion has sets."""
    metrics: JSONObject = {
        name: _spec_entry(cov) for name, cov in fresh().made.items() if cov is not None and hasattr(cov, "covered_sets")
    }
    if not metrics:
        return None
    per_test: JSONObject = {nodeid: _test_entry(fresh, batch, metrics) for nodeid, batch in tests}
    return {"format": FORMAT, "version": VERSION, "groups": list(groups), "metrics": metrics, "tests": per_test}


def _spec_entry(coverage: Any) -> JSONObject:
    """A criterion's entry of the section's ``metrics``: buckets or targets, each part's
    bits and counted targets."""
    parts, totals, counts = coverage.covered_sets()
    return {
        "kind": "buckets" if counts else "targets",
        "parts": [int(len(p)) for p in parts],
        "totals": [int(t) for t in totals],
    }


def _test_entry(fresh: Callable[[], Any], batch: Any, metrics: Mapping[str, Any]) -> JSONObject:
    """The sets of ``metrics`` a fresh set of the criteria covers with one test's ``batch``."""
    criteria = fresh()
    criteria.update(batch)
    return {name: _state(criteria.made[name]) for name in metrics}


# ------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Spec:
    """One metric's parts: bits and counted targets of each, buckets or neuron targets."""

    kind: str
    parts: tuple[int, ...]
    totals: tuple[int, ...]

    @property
    def total(self) -> int:
        return sum(self.totals)

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> Spec:
        """A metric's entry of the section's ``metrics``."""
        return cls(str(entry["kind"]), tuple(entry["parts"]), tuple(entry["totals"]))


@dataclass
class State:
    """One metric's covered sets (one bool array per part) and, for buckets, its counts."""

    sets: list[np.ndarray]
    counts: dict[str, int] = field(default_factory=dict)

    def covered(self) -> int:
        return sum(int(np.count_nonzero(s)) for s in self.sets)

    def union(self, other: State) -> State:
        counts = {k: self.counts.get(k, 0) + other.counts.get(k, 0) for k in {*self.counts, *other.counts}}
        return State([a | b for a, b in zip(self.sets, other.sets, strict=True)], counts)

    def new_in(self, other: State) -> int:
        """Targets of ``other`` this state does not cover."""
        return sum(int(np.count_nonzero(b & ~a)) for a, b in zip(self.sets, other.sets, strict=True))


@dataclass
class Covered:
    """A results file's ``covered`` section, decoded lazily test by test."""

    specs: dict[str, Spec]
    raw: Mapping[str, Any]
    groups: list[str]
    _cache: dict[str, dict[str, State]] = field(default_factory=dict)

    @classmethod
    def of(cls, results: Results) -> Covered | None:
        """The results' sets, ``None`` when they carry none; ValueError for another
        format or a newer version."""
        data: dict[str, Any] | None = results.covered  # a validated document: the schema's types
        if data is None:
            return None
        if data.get("format") != FORMAT:
            raise ValueError(f"the covered section is not {FORMAT} (format {data.get('format')!r})")
        version = data.get("version")
        if not isinstance(version, int) or version > VERSION:
            raise ValueError(f"the covered section is version {version!r}; this pytest-sadl reads up to {VERSION}")
        return cls.of_section(data)

    @classmethod
    def of_section(cls, data: Mapping[str, Any]) -> Covered:
        """A ``covered`` section already known to be this format (the engine's own)."""
        specs = {str(name): Spec.of(spec) for name, spec in dict(data.get("metrics") or {}).items()}
        groups = [g for g in data.get("groups") or [] if isinstance(g, str)]
        return cls(specs, dict(data.get("tests") or {}), groups)

    @property
    def tests(self) -> list[str]:
        return list(self.raw)

    def state(self, nodeid: str) -> dict[str, State]:
        found = self._cache.get(nodeid)
        if found is None:
            entry = self.raw[nodeid]
            found = {name: _decoded(entry[name], spec) for name, spec in self.specs.items()}
            self._cache[nodeid] = found
        return found

    def empty(self) -> dict[str, State]:
        return {
            name: State(
                [np.zeros(n, dtype=bool) for n in spec.parts],
                dict.fromkeys(_COUNTS, 0) if spec.kind == "buckets" else {},
            )
            for name, spec in self.specs.items()
        }

    def union(self, nodeids: Iterable[str]) -> dict[str, State]:
        out = self.empty()
        for nodeid in nodeids:
            for name, st in self.state(nodeid).items():
                out[name] = out[name].union(st)
        return out

    def value(self, name: str, state: State) -> float:
        """The metric's value of a state, computed as its criterion computes it."""
        spec = self.specs[name]
        if spec.kind == "buckets":
            return float(np.count_nonzero(state.sets[0])) / spec.totals[0]
        total = spec.total
        return state.covered() / total if total else 0.0

    def metric(self, name: str, state: State) -> Metric:
        spec = self.specs[name]
        value = self.value(name, state)
        if spec.kind == "buckets":
            c = state.counts
            return Metric(value, state.covered(), spec.total, True, c["below"], c["above"], c["count"], c["nan"])
        return Metric(value, state.covered(), spec.total)

    def per_layer(self, name: str, state: State) -> list[float]:
        spec = self.specs[name]
        return [int(np.count_nonzero(s)) / t if t else 0.0 for s, t in zip(state.sets, spec.totals, strict=True)]


def _decoded(item: Mapping[str, Any], spec: Spec) -> State:
    """One test's entry of one metric as a :class:`State`: its parts' bits and its counts."""
    sets = [decode(t, n) for t, n in zip(item["sets"], spec.parts, strict=True)]
    return State(sets, {k: int(item[k]) for k in _COUNTS if k in item})


# ----------------------------------------------------------------- who tests what


@dataclass(frozen=True)
class Minimized:
    """Who tests what over ``metrics``: per test (node-id order) the targets no other test
    covers (``unique``), the greedy set cover's node ids (``keep``, in the order taken) and
    the targets the tests cover together (``covered``)."""

    metrics: list[str]
    keep: list[str]
    unique: dict[str, dict[str, int]]
    covered: dict[str, int]

    @property
    def redundant(self) -> list[str]:
        """The tests that cover nothing of ``metrics`` the other tests do not."""
        return [t for t, u in self.unique.items() if not any(u.values())]

    def to_dict(self) -> dict[str, Any]:
        return {
            "metrics": self.metrics,
            "method": "greedy set cover",
            "keep": self.keep,
            "covered": self.covered,
            "tests": [
                {"nodeid": t, "unique": u, "redundant": not any(u.values()), "kept": t in self.keep}
                for t, u in self.unique.items()
            ],
        }


def _bits(covered: Covered, nodeid: str, metrics: Sequence[str]) -> np.ndarray:
    state = covered.state(nodeid)
    return np.concatenate([s for m in metrics for s in state[m].sets])


def _greedy(matrix: np.ndarray, goal: np.ndarray) -> list[int]:
    """Greedy set cover: the row adding the most targets not yet covered (the first of the
    largest: node-id order breaks ties), until ``goal`` is covered."""
    done = np.zeros_like(goal)
    taken: list[int] = []
    while matrix.size and (goal & ~done).any():
        best = int(np.argmax((matrix & ~done).sum(axis=1)))
        taken.append(best)
        done |= matrix[best]
    return taken


def _matrix(covered: Covered, tests: Sequence[str], metrics: Sequence[str]) -> np.ndarray:
    """One row of bits per test: its targets of every metric, side by side."""
    width = sum(sum(covered.specs[m].parts) for m in metrics)
    if not tests or not metrics:
        return np.zeros((len(tests), width), bool)
    return np.stack([_bits(covered, t, metrics) for t in tests])


def _known(covered: Covered, metrics: Sequence[str] | None) -> list[str]:
    """``metrics`` (default: every metric with covered sets); ValueError naming one without sets."""
    chosen = list(covered.specs) if metrics is None else list(metrics)
    unknown = [m for m in chosen if m not in covered.specs]
    if unknown:
        have = ", ".join(covered.specs)
        raise ValueError(f"no covered sets of {', '.join(unknown)} in the results; they have {have}")
    return chosen


def minimize(covered: Covered, metrics: Sequence[str] | None = None) -> Minimized:
    """Each test's unique targets and the greedy cover of ``metrics`` (default: every
    metric with covered sets); ValueError naming a metric without sets."""
    metrics = _known(covered, metrics)
    tests = sorted(covered.tests)
    matrix = _matrix(covered, tests, metrics)
    hits = matrix.sum(axis=0)
    bounds = np.cumsum([0, *(sum(covered.specs[m].parts) for m in metrics)])

    def per_metric(bits: np.ndarray) -> dict[str, int]:
        return {m: int(bits[bounds[k] : bounds[k + 1]].sum()) for k, m in enumerate(metrics)}

    only = matrix & (hits == 1)
    unique = {t: per_metric(only[i]) for i, t in enumerate(tests)}
    goal = hits > 0
    keep = [tests[i] for i in _greedy(matrix, goal)]
    return Minimized(metrics, keep, unique, per_metric(goal))


def with_unique(tests: Sequence[TestRow], covered: Covered | None) -> list[TestRow]:
    """The rows with each test's unique targets and redundancy over every metric with
    covered sets (rows of tests without sets, or no sets at all: unchanged)."""
    if covered is None or not covered.specs:
        return list(tests)
    found = minimize(covered)
    out = []
    for row in tests:
        u = found.unique.get(row.nodeid)
        out.append(row if u is None else replace(row, unique=u, redundant=not any(u.values())))
    return out


def fill_unique(results: Results) -> None:
    """Give a results file's rows their unique counts from its covered sets when it has
    sets but not the counts (a file of a version before them); otherwise unchanged."""
    if results.covered is None or all(t.unique is not None for t in results.tests):
        return
    try:
        covered = Covered.of(results)
    except ValueError:
        return
    results.tests = with_unique(results.tests, covered)


def no_sets_message(name: str) -> str:
    """The one line refusing a results file without covered sets."""
    return (
        f"{name} has no covered sets (it was written with --sadl-omit-covered-sets, or before pytest-sadl had "
        "them): rerun it without --sadl-omit-covered-sets"
    )


def restricted_metrics(results: Results, nodeids: Sequence[str]) -> dict[str, Metric] | None:
    """The metrics ``results`` had over only the tests ``nodeids`` (a like-with-like
    baseline for a partial run); ``None`` when it carries no sets or lacks one of the
    tests."""
    covered = Covered.of(results)
    if covered is None or any(n not in covered.raw for n in nodeids):
        return None
    union = covered.union(nodeids)
    return {name: covered.metric(name, union[name]) for name in covered.specs}


def sizes(results: Results) -> dict[str, JSON]:
    """The section's size in characters, all told and per metric (for the docs' figures)."""
    data: dict[str, Any] = results.covered or {}
    per: dict[str, int] = {}
    for entry in dict(data.get("tests") or {}).values():
        for name, item in entry.items():
            per[name] = per.get(name, 0) + sum(len(s) for s in item["sets"])
    return {"total": sum(per.values()), **per}
