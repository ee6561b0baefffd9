"""The pytest-xdist transport of the recordings, and what the controller heard.

pytest-xdist transport (versioned, no pickles). A worker attaches each test's record to
that test's *teardown report* (``report.sadl_record``, :func:`pack`); pytest serialises
a report's attributes (``pytest_report_to_serializable``) and pytest-xdist sends the
report to the controller as soon as the test ends, so a worker that crashes loses only
the inputs of the test it was running. A test that may record says so in its *setup*
report (``report.sadl_marked``); the controller (:class:`Arrivals`) can then name every
test whose inputs never arrived, and why (pytest-xdist reports the test a worker
crashed in with ``when="???"``). What a worker holds at its end (records made outside a
test, warnings, the profile it built for a project fixture's model) still goes through
``workeroutput``, as pytest-cov sends its data.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_sadl.plugin.recorder import Recorder, TestRecord

TRANSPORT = "pytest-sadl/records"
TRANSPORT_VERSION = 2  # 2: a record says whether it is stale (the model changed before it)
MISSING_SHOWN = 5  # test ids named in the warning line; the results list all of them


def pack(recorder: Recorder, records: list[TestRecord]) -> dict[str, Any]:
    """``records`` as a JSON-able, versioned payload (an ``.npz`` of arrays, base64)."""
    data = base64.b64encode(recorder.to_bytes(records)).decode("ascii")
    return {"format": TRANSPORT, "version": TRANSPORT_VERSION, "npz": data}


def unpack(payload: Any) -> list[TestRecord]:
    """The records of a :func:`pack` payload; ``ValueError`` for another format or version
    (a worker running another pytest-sadl)."""
    if (
        not isinstance(payload, dict)
        or payload.get("format") != TRANSPORT
        or payload.get("version") != TRANSPORT_VERSION
    ):
        seen = payload.get("version") if isinstance(payload, dict) else type(payload).__name__
        raise ValueError(
            f"a worker sent records in an unknown format ({seen!r}; this controller reads "
            f"{TRANSPORT} version {TRANSPORT_VERSION}): run one pytest-sadl version everywhere"
        )
    from pytest_sadl.plugin.recorder import Recorder

    return Recorder.records_from_bytes(base64.b64decode(payload["npz"]))


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
    when it went down without sending it (noted in ``arrivals``)."""
    name = str(getattr(getattr(node, "gateway", None), "id", None) or "a worker")
    output = getattr(node, "workeroutput", None) or {}
    if error or "sadl" not in output:
        arrivals.workers_down[name] = str(error or "no output")
        return None
    return WorkerEnd(
        records=output["sadl"],
        warnings=list(output.get("sadl_warnings", [])),
        profile=output.get("sadl_profile") or None,
        model_from_fixture=bool(output.get("sadl_model_from_fixture")),
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
