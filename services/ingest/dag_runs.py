"""DAG runs as the status view knows them: a dependent's recent runs, and one run's nodes.

Derived from what the view already keeps, nothing more per record: the execution of job X
in run K is ``X@K`` (every execution of a run has ``scheduled_for`` = K), and the view holds
each job's newest ``recent_executions_per_job`` executions by ``scheduled_for``, one entry
per execution id with its latest status. A job's recent run keys are the ticks of its
roots', its direct upstreams' and its own recent executions.

An execution the view has no entry for is WAITING, unless the job's list is full and older
than that run: then the view no longer remembers it and says EXPIRED (rather than WAITING,
which would be a lie about an old run). A dependent's recent runs stop at the oldest run
every list involved still covers, so they never show EXPIRED.

Final statuses are those of ``streams.records.FINAL_STATUSES``: SUCCEEDED lets a run go on,
every other one (DEAD_LETTER, UPSTREAM_FAILED, SKIPPED, MISSED, CANCELLED) fails it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from services.ingest.dag_checks import node_of, walk_upstreams
from services.ingest.presenters import iso
from streams.identity import execution_id
from streams.records import FINAL_STATUSES, ExecutionStatus

RECENT_DAG_RUNS = 20
"""How many runs ``GET /api/jobs/{id}`` shows of a dependent, newest first."""
MAX_RUN_NODES = 1_000
"""How many jobs ``GET /api/dag-runs/...`` lists of one run (``truncated`` says when more)."""
WAITING, EXPIRED = "WAITING", "EXPIRED"
_SUCCEEDED = ExecutionStatus.SUCCEEDED.value
_FAILING = frozenset(s.value for s in FINAL_STATUSES) - {_SUCCEEDED}


@dataclass(frozen=True, slots=True)
class ViewReads:
    """The status view's reads this module needs (``StatusView`` methods, or fakes)."""

    job: Callable[[str], dict[str, Any] | None]
    executions: Callable[[str], list[dict[str, Any]]]
    dependents: Callable[[str, int], list[str]]
    recent_limit: int


class _History:
    """Executions by id of the jobs read so far (each job's list read once)."""

    def __init__(self, reads: ViewReads) -> None:
        self._reads = reads
        self._by_job: dict[str, tuple[dict[str, dict[str, Any]], int | None]] = {}

    def _of(self, job_id: str) -> tuple[dict[str, dict[str, Any]], int | None]:
        known = self._by_job.get(job_id)
        if known is None:
            executions = self._reads.executions(job_id)
            full = len(executions) >= self._reads.recent_limit
            oldest = min((e["scheduled_for_ms"] for e in executions), default=None)
            known = {e["execution_id"]: e for e in executions}, oldest if full else None
            self._by_job[job_id] = known
        return known

    def run_keys(self, job_id: str) -> set[int]:
        return {e["scheduled_for_ms"] for e in self._of(job_id)[0].values()}

    def remembered_since(self, job_id: str) -> int | None:
        """The oldest run the job's list still covers; None when it is not full."""
        return self._of(job_id)[1]

    def of(self, job_id: str, run_key_ms: int) -> dict[str, Any]:
        """``{job_id, execution_id, status}`` (and ``reason`` when failed) of ``job@run``."""
        executions, since = self._of(job_id)
        eid = execution_id(job_id, run_key_ms)
        found = executions.get(eid)
        if found is None:
            status = EXPIRED if since is not None and run_key_ms < since else WAITING
            return {"job_id": job_id, "execution_id": eid, "status": status}
        entry = {"job_id": job_id, "execution_id": eid, "status": found["status"]}
        if found["status"] in _FAILING:
            entry["reason"] = found.get("reason")
        return entry


def recent_runs(
    job: Mapping[str, Any], reads: ViewReads, limit: int = RECENT_DAG_RUNS
) -> list[dict[str, Any]]:
    """A dependent's newest runs (``GET /api/jobs/{id}``'s ``dag_runs``); [] for others."""
    depends_on: Sequence[str] = job.get("depends_on") or ()
    if not depends_on:
        return []
    job_id = job["job_id"]

    def lookup(name: str) -> Any:
        record = reads.job(name)
        return None if record is None else node_of(record)

    roots = walk_upstreams(job_id, depends_on, lookup).roots
    history = _History(reads)
    sources = {job_id, *depends_on, *roots}
    keys: set[int] = set()
    for name in sources:
        keys |= history.run_keys(name)
    floors = [s for s in (history.remembered_since(n) for n in sources) if s is not None]
    floor = max(floors, default=None)
    newest = sorted((k for k in keys if floor is None or k >= floor), reverse=True)[:limit]
    return [_run_of(job_id, depends_on, key, history) for key in newest]


def _run_of(
    job_id: str, depends_on: Iterable[str], run_key_ms: int, history: _History
) -> dict[str, Any]:
    own = history.of(job_id, run_key_ms)
    run: dict[str, Any] = {
        "run_key_ms": run_key_ms,
        "run_key": iso(run_key_ms),
        "execution_id": own["execution_id"],
        "status": own["status"],
        "succeeded": [],
        "awaited": [],
        "failed": [],
    }
    for upstream in depends_on:
        entry = history.of(upstream, run_key_ms)
        run[_group_of(entry["status"])].append(entry)
    return run


def _group_of(status: str) -> str:
    if status == _SUCCEEDED:
        return "succeeded"
    return "failed" if status in _FAILING else "awaited"


def run_nodes(
    root_id: str, run_key_ms: int, reads: ViewReads, limit: int = MAX_RUN_NODES
) -> tuple[list[dict[str, Any]], bool]:
    """Every job of one run (the root and its transitive dependents, upstreams first) with
    its execution's status and its upstreams'; True when more than ``limit`` jobs exist."""
    depends: dict[str, tuple[str, ...]] = {root_id: ()}
    order = [root_id]
    truncated = False
    for current in order:  # breadth first; ``order`` grows while it is read
        for dependent in reads.dependents(current, limit + 1):
            if dependent in depends:
                continue
            if len(order) >= limit:
                truncated = True
                break
            record = reads.job(dependent)
            depends[dependent] = tuple(record["depends_on"]) if record is not None else ()
            order.append(dependent)
    history = _History(reads)
    nodes = []
    for name in _upstreams_first(order, depends):
        node = history.of(name, run_key_ms)
        node["upstreams"] = [history.of(u, run_key_ms) for u in depends[name]]
        nodes.append(node)
    return nodes, truncated


def _upstreams_first(names: list[str], depends: Mapping[str, tuple[str, ...]]) -> list[str]:
    """``names`` ordered so that each comes after its upstreams among them (Kahn), ties
    (and any cycle's members, which the API never lets in) in the order found."""
    inside = set(names)
    waiting = {n: sum(1 for u in set(depends[n]) if u in inside and u != n) for n in names}
    below: dict[str, list[str]] = {}
    for name in names:
        for upstream in set(depends[name]):
            if upstream in inside and upstream != name:
                below.setdefault(upstream, []).append(name)
    ready = [n for n in names if waiting[n] == 0]
    ordered: list[str] = []
    while ready:
        name = ready.pop(0)
        ordered.append(name)
        for child in below.get(name, ()):
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    placed = set(ordered)
    return ordered + [n for n in names if n not in placed]


# Bodies in OpenAPI (services.ingest.openapi) -----------------------------------------------


class RunExecution(BaseModel):
    """One job's execution in a run: its latest status, WAITING (none yet) or EXPIRED (the
    view no longer remembers that old run); ``reason`` when it failed the run."""

    job_id: str
    execution_id: str
    status: str
    reason: str | None = None


class JobDagRun(BaseModel):
    """One run of a dependent: its own execution and where each upstream stands."""

    run_key_ms: int
    run_key: str = Field(description="ISO-8601 UTC of run_key_ms")
    execution_id: str
    status: str = Field(description="the dependent's latest status in the run, or WAITING")
    succeeded: list[RunExecution]
    awaited: list[RunExecution] = Field(description="no final status yet (WAITING, STARTED...)")
    failed: list[RunExecution] = Field(description="a final status other than SUCCEEDED")


class JobDetails(BaseModel):
    """``GET /api/jobs/{id}``: the job's fields (see the README) and, for a dependent, its
    newest DAG runs (at most 20, newest first; empty for other jobs)."""

    model_config = {"extra": "allow"}

    job_id: str
    dag_runs: list[JobDagRun]


class RunNode(RunExecution):
    """A job of the run and its upstreams' executions in the same run."""

    upstreams: list[RunExecution]


class DagRun(BaseModel):
    """``GET /api/dag-runs/{root_job_id}/{run_key_ms}``: every job of one run."""

    root_job_id: str
    run_key_ms: int
    run_key: str
    nodes: list[RunNode] = Field(description="the root first, each job after its upstreams")
    truncated: bool = Field(description=f"more than {MAX_RUN_NODES} jobs; the rest left out")


def dag_run_body(
    root_id: str, run_key_ms: int, nodes: list[dict[str, Any]], truncated: bool
) -> dict[str, Any]:
    """The body of ``GET /api/dag-runs/{root_job_id}/{run_key_ms}``."""
    return {"root_job_id": root_id, "run_key_ms": run_key_ms, "run_key": iso(run_key_ms),
            "nodes": nodes, "truncated": truncated}  # fmt: skip
