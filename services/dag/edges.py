"""The DAG's edges, learnt from ``jobs`` and kept where each upstream's results arrive.

A dependent's Job record arrives in the dependent's partition. Its ``depends_on`` is kept
there (store ``nodes``, the record's bytes) and every change of it is sent as an EDGE_ADDED
or EDGE_REMOVED signal keyed by the upstream, so that the upstream's partition (where its
results arrive) keeps the list of its dependents (store ``edges``). Signals of one dependent
are produced in order from one partition, so its edges apply in the order they changed.

A job has edges while it exists, has ``depends_on`` and is not CANCELLED; a PAUSED one keeps
them (the timer skips its runs, visibly).

The three input topics are consumed side by side, so an upstream's result can reach its
partition before the EDGE_ADDED of a dependent created just before (or while the processor
catches up after a crash, several runs' results at once). The upstream's partition therefore
keeps the final ends of its executions of recent runs (store ``ends``, runs within
``ends_retention_ms``); a new edge sends on those whose run key is not earlier than the
dependent's creation, so a dependent takes part in every run that started after it was
created, in whatever order the records arrive.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from services.dag import keys
from services.dag.scope import DagScope
from services.timer.scope import StoreTransaction
from streams.codec import RecordKind
from streams.identity import execution_id

_PAGE = 1000
_NO_EDGES = ("CANCELLED",)


def apply_job(
    scope: DagScope, job_id: str, value: bytes | None, job: dict[str, Any] | None
) -> None:
    """Apply one record of ``jobs`` (``job`` decoded from ``value``, None for a tombstone)."""
    key = job_id.encode()
    if job is None:  # a deleted job's ends serve no new edge
        scope.ends.delete_many([k for k, _ in _scan(scope.ends, *keys.ends_range(job_id))])
    stored = scope.nodes.get(key)
    before = _decode(scope, stored)
    if job is not None and before is not None and job["version"] <= before["version"]:
        return  # stale or repeated
    old = set(before["depends_on"]) if before is not None else set()
    new = set(job["depends_on"]) if job is not None and job["status"] not in _NO_EDGES else set()
    version = job["version"] if job is not None else (before["version"] if before else 0)
    for upstream in sorted(old - new):
        _signal_edge(scope, "EDGE_REMOVED", upstream, job_id, version, 0)
    created_ms = job["created_at_ms"] if job is not None else 0
    for upstream in sorted(new - old):
        _signal_edge(scope, "EDGE_ADDED", upstream, job_id, version, created_ms)
    if new and value is not None:
        scope.nodes.set(key, value)
    elif stored is not None:
        scope.nodes.delete(key)


def node_job(scope: DagScope, job_id: str) -> dict[str, Any] | None:
    """The stored Job of dependent ``job_id`` (None when it has no edges now)."""
    return _decode(scope, scope.nodes.get(job_id.encode()))


def apply_edge(scope: DagScope, signal: dict[str, Any]) -> None:
    """Apply an EDGE_ADDED or EDGE_REMOVED signal in the upstream's partition; a new edge
    gets the upstream's kept ends of runs that started after the dependent was created."""
    upstream, dependent = signal["upstream_job_id"], signal["dependent_job_id"]
    key = keys.edge_key(upstream, dependent)
    if signal["kind"] != "EDGE_ADDED":
        scope.edges.delete(key)
        return
    scope.edges.set(key, b"")
    for end_key, status in _scan(scope.ends, *keys.ends_range(upstream)):
        run_key_ms = keys.split_run_key(end_key)[1]
        if run_key_ms >= signal["dependent_created_at_ms"]:
            signal_end(scope, upstream, dependent, run_key_ms, status.decode())


def note_end(scope: DagScope, upstream: str, run_key_ms: int, status: str) -> None:
    """Keep ``upstream``'s final end of this run for dependents added later (a success is
    never overwritten), and forget its ends of runs older than ``ends_retention_ms``."""
    key = keys.end_key(upstream, run_key_ms)
    if scope.ends.get(key) != b"SUCCEEDED":
        scope.ends.set(key, status.encode())
    before = scope.now_ms - scope.env.ends_retention_ms
    stale = [k for k, _ in _scan(scope.ends, *keys.ends_range(upstream, before))]
    if stale:
        scope.ends.delete_many(stale)


def signal_end(
    scope: DagScope, upstream: str, dependent: str, run_key_ms: int, status: str
) -> None:
    """Send the final end of ``upstream``'s execution of a run to ``dependent``."""
    _send(
        scope,
        dependent,
        kind="UPSTREAM_ENDED",
        upstream_job_id=upstream,
        dependent_job_id=dependent,
        run_key_ms=run_key_ms,
        upstream_execution_id=execution_id(upstream, run_key_ms),
        upstream_status=status,
    )


def dependents_of(scope: DagScope, upstream: str) -> list[str]:
    """Every job that depends on ``upstream`` (read in the upstream's partition)."""
    scanned = _scan(scope.edges, *keys.dependents_range(upstream))
    return [keys.dependent_of_edge(key, upstream) for key, _ in scanned]


def _scan(store: StoreTransaction, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Every (key, value) of ``store`` in [start, end), read a page at a time."""
    while True:
        page = store.iter_range(start, end, _PAGE)
        yield from page
        if len(page) < _PAGE:
            return
        start = page[-1][0] + b"\x00"


def _signal_edge(
    scope: DagScope, kind: str, upstream: str, dependent: str, version: int, created_ms: int
) -> None:
    _send(
        scope,
        upstream,
        kind=kind,
        upstream_job_id=upstream,
        dependent_job_id=dependent,
        dependent_version=version,
        dependent_created_at_ms=created_ms,
    )


def _send(scope: DagScope, to_job: str, **fields: Any) -> None:
    """Produce a DagSignal keyed by ``to_job``: it is applied in that job's partition."""
    record = {"job_id": to_job, **fields, "emitted_at_ms": scope.now_ms}
    value = scope.env.codec.encode(RecordKind.DAG_SIGNAL, record)
    scope.emit_keyed(scope.env.signals_topic, to_job.encode(), value)
    scope.emitted += 1


def _decode(scope: DagScope, value: bytes | None) -> dict[str, Any] | None:
    if value is None:
        return None
    return scope.env.codec.decode(RecordKind.JOB, value, check=False)
