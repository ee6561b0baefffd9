"""The pytest-xdist transport of the recordings, and what the controller heard.

Versioned, no pickles, and never MBs on a test report. The controller names a spool
folder in each worker's ``workerinput`` (``pytest_configure_node``, with its host name).
A worker on the same machine (*collocated*, as pytest-cov says) writes each test's
records to a file of its own there as the test ends (atomically), and the test's
*teardown report* carries only a small reference to it (``report.sadl_record``,
:func:`reference`: a few hundred bytes, so ``--report-log``, junitxml and the terminal's
kept reports stay small); the controller reads the file when the report arrives and
removes it, so a worker that crashes loses only the inputs of the test it was running.
A worker elsewhere (``--tx ssh=...``) keeps its records and sends them once, at its end,
in ``workeroutput`` (:func:`worker_end`), as pytest-cov sends its data; its reports say
how many records are to come. The end payload also carries the records made outside a
test, the warnings and the profile a worker built for a project fixture's model.

A test that may record says so in its *setup* report (``report.sadl_marked``); the
controller (:class:`Arrivals`) can then name every test whose inputs never arrived, and
why (pytest-xdist reports the test a worker crashed in with ``when="???"``).
"""

from __future__ import annotations

import base64
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_sadl.records import TestRecord, from_bytes, to_bytes

TRANSPORT = "pytest-sadl/records"
#: 2: a record says whether it is stale (the model changed before it);
#: 3: reports carry a reference (a spool file, or records to come at the worker's end),
#: the records themselves go through a file or once at the worker's end.
TRANSPORT_VERSION = 3
MISSING_SHOWN = 5  # test ids named in the warning line; the results list all of them
SPOOL_KEY, HOST_KEY = "sadl_spool", "sadl_host"  # what the controller puts in workerinput


def _is_ours(payload: Any) -> bool:
    """A payload of this transport's format and version."""
    return (
        isinstance(payload, dict) and payload.get("format") == TRANSPORT and payload.get("version") == TRANSPORT_VERSION
    )


def _check(payload: Any) -> dict[str, Any]:
    if not _is_ours(payload):
        seen = payload.get("version") if isinstance(payload, dict) else type(payload).__name__
        raise ValueError(
            f"a worker sent records in an unknown format ({seen!r}; this controller reads "
            f"{TRANSPORT} version {TRANSPORT_VERSION}): run one pytest-sadl version everywhere"
        )
    checked: dict[str, Any] = payload
    return checked


def pack(records: list[TestRecord]) -> dict[str, Any]:
    """``records`` as a JSON-able, versioned payload (an ``.npz`` of arrays, base64)."""
    data = base64.b64encode(to_bytes(records)).decode("ascii")
    return {"format": TRANSPORT, "version": TRANSPORT_VERSION, "npz": data}


def unpack(payload: Any) -> list[TestRecord]:
    """The records of a :func:`pack` payload; ``ValueError`` for another format or version
    (a worker running another pytest-sadl)."""
    return from_bytes(base64.b64decode(_check(payload)["npz"]))


def spool_for(workerinput: dict[str, Any], worker: str) -> Path | None:
    """A worker: its spool folder when it runs on the controller's machine, else None."""
    spool, host = workerinput.get(SPOOL_KEY), workerinput.get(HOST_KEY)
    if not spool or host != socket.gethostname() or not os.path.isdir(spool):
        return None
    return Path(spool) / worker


def reference(records: list[TestRecord], spool: Path | None, seq: int) -> dict[str, Any]:
    """A worker, at a test's end: the small payload its teardown report carries. With a
    spool, the records are written to a file of their own first (atomically)."""
    ref: dict[str, Any] = {"format": TRANSPORT, "version": TRANSPORT_VERSION, "records": len(records)}
    if records and spool is not None:
        from pytest_sadl.atomic import atomic_write_bytes

        name = f"{seq:06d}.npz"
        atomic_write_bytes(spool / name, to_bytes(records))
        ref["file"] = f"{spool.name}/{name}"
    elif records:
        ref["at_end"] = True
    return ref


def read_reference(payload: Any, spool: Path | None) -> list[TestRecord] | None:
    """Controller: the records a teardown report's reference points to (the file is removed);
    None when they come at the worker's end. ``ValueError`` for another format or version,
    ``OSError`` for a file that cannot be read."""
    ref = _check(payload)
    if "file" not in ref:
        return None if ref.get("at_end") else []
    if spool is None or "/" not in ref["file"] or ".." in ref["file"]:
        raise ValueError(f"a worker referred to records in {ref['file']!r}, outside this controller's spool")
    path = spool / ref["file"]
    records = from_bytes(path.read_bytes())
    path.unlink()
    return records


def worker_end(
    records: list[TestRecord], warnings: list[str], profile: str | None, from_fixture: bool
) -> dict[str, Any]:
    """A worker, at its end: everything it sends in ``workeroutput["sadl"]``, one versioned structure."""
    return {
        **pack(records),
        "warnings": list(warnings),
        "profile": profile,
        "model_from_fixture": from_fixture,
    }


@dataclass
class Arrivals:
    """What the controller heard of the workers' recording tests."""

    started: dict[str, str] = field(default_factory=dict)  # nodeid -> worker id
    received: set[str] = field(default_factory=set)
    crashed_in: dict[str, str] = field(default_factory=dict)  # nodeid -> worker id
    workers_down: dict[str, str] = field(default_factory=dict)  # worker id -> why

    def missing(self) -> list[dict[str, str]]:
        """The tests that may have recorded but whose records never arrived, with why."""
        out = []
        for nodeid, worker in self.started.items():
            if nodeid in self.received:
                continue
            if nodeid in self.crashed_in:
                reason = f"worker {self.crashed_in[nodeid]} crashed while running it"
            elif worker in self.workers_down:
                reason = f"worker {worker} went down ({self.workers_down[worker]}) before sending them"
            else:
                reason = f"worker {worker} never sent them"
            out.append({"nodeid": nodeid, "reason": reason})
        return out


def worker_id(report: Any) -> str:
    """The pytest-xdist worker a (controller-side) report came from."""
    node = getattr(report, "node", None)
    return str(getattr(getattr(node, "gateway", None), "id", None) or getattr(report, "worker_id", None) or "a worker")


@dataclass
class WorkerEnd:
    """What a worker sent at its end (``workeroutput``)."""

    records: Any  # a :func:`pack` payload
    warnings: list[str]
    profile: str | None  # the profile file it built for a project fixture's model
    model_from_fixture: bool


def note(arrivals: Arrivals, report: Any) -> Any:
    """Controller (``pytest_runtest_logreport``): note what a worker's test report says, and
    return the records payload it carries (None when it carries none)."""
    if getattr(report, "sadl_marked", False):
        arrivals.started[report.nodeid] = worker_id(report)
    if report.when == "???":  # pytest-xdist: the worker crashed while running this test
        arrivals.crashed_in[report.nodeid] = worker_id(report)
    return getattr(report, "sadl_record", None)


def node_down(arrivals: Arrivals, node: Any, error: Any) -> WorkerEnd | None:
    """Controller (``pytest_testnodedown``): a worker ended; what it sent at its end, or None
    when it went down without sending it (noted in ``arrivals``). ``ValueError`` for an end
    payload of another format or version."""
    name = str(getattr(getattr(node, "gateway", None), "id", None) or "a worker")
    output = getattr(node, "workeroutput", None) or {}
    if error or "sadl" not in output:
        arrivals.workers_down[name] = str(error or "no output")
        return None
    return _worker_end(_check(output["sadl"]))


def _worker_end(end: dict[str, Any]) -> WorkerEnd:
    """What a worker's checked end payload says."""
    return WorkerEnd(
        records=end,
        warnings=[str(w) for w in end.get("warnings", [])],
        profile=end.get("profile") or None,
        model_from_fixture=bool(end.get("model_from_fixture")),
    )


def missing_warning(missing: list[dict[str, str]], workers_down: dict[str, str]) -> str | None:
    """One line for the tests whose inputs are missing (or a worker that went down)."""
    if missing:
        names = ", ".join(m["nodeid"] for m in missing[:MISSING_SHOWN])
        more = f" and {len(missing) - MISSING_SHOWN} more" if len(missing) > MISSING_SHOWN else ""
        reasons = "; ".join(dict.fromkeys(m["reason"] for m in missing))
        return (
            f"pytest-sadl: the inputs of {len(missing)} test(s) are missing ({reasons}), so these results "
            f"are incomplete: {names}{more}"
        )
    if workers_down:
        downs = "; ".join(f"worker {w}: {why}" for w, why in workers_down.items())
        return (
            f"pytest-sadl: a worker went down ({downs}); every recording test's inputs arrived, "
            "but its warnings did not"
        )
    return None
