"""Counting each dependent's upstream completions per DAG run, and the verdict on the run.

A DAG run is named by its run key: the ``scheduled_for`` of the root tick that started it.
Every execution in a run has that ``scheduled_for`` (a dependent's execution is
``<job_id>@<run_key_ms>``), so an upstream's final result names its run by itself.

1. In the upstream's partition, a final result (SUCCEEDED, or any final failure: DEAD_LETTER,
   UPSTREAM_FAILED, SKIPPED, MISSED, CANCELLED) is sent to each dependent as an
   UPSTREAM_ENDED signal keyed by the dependent (:func:`signal_upstream_end`). When this
   process owns the dependent's partition too (restored, holding the dependent), step 2
   runs there at once, in the same transaction as the result's offset (the local
   shortcut): a crash or a lost partition aborts both, a replay counts once (step 2 is
   keyed by the upstream), and one commit fewer lies between the result and the release.
2. In the dependent's partition, the signal is recorded in the run's state keyed by the
   upstream job (its execution of the run is ``<upstream>@<run_key_ms>``), so a repeated
   signal counts once and overlapping runs never mix (:func:`apply_upstream_ended`). When
   every upstream SUCCEEDED the run is RELEASED: a RUN release goes to the timer, which fires
   the dependent (the only writer of DueEvents). When an upstream failed first, an
   UPSTREAM_FAILED release names it; a later success of it (a dead letter replayed) still
   releases the run. A SUCCEEDED is never overwritten by a later failure.
3. A run still OPEN at its deadline (run key + the dependent's ``dag_wait_ms``) gets a MISSED
   release naming the upstreams it waited for (:func:`settle_deadlines`); its state is
   deleted ``run_retention_ms`` after the deadline.
"""

from __future__ import annotations

import logging
from typing import Any

from services.dag import keys
from services.dag.edges import dependents_of, node_job, note_end, signal_end
from services.dag.scope import DagScope
from streams.codec import RecordKind
from streams.identity import execution_id
from streams.result_reader import ResultFields

log = logging.getLogger(__name__)

SUCCEEDED = "SUCCEEDED"
ENDING = frozenset(
    {"SUCCEEDED", "DEAD_LETTER", "UPSTREAM_FAILED", "SKIPPED", "MISSED", "CANCELLED"}
)
"""Final statuses of an upstream's execution that end its part in a run."""
_CLOSED = ("RELEASED", "MISSED")


def signal_upstream_end(scope: DagScope, result: ResultFields) -> None:
    """Send a final result of an upstream's execution to each of its dependents (and keep
    it as the job's latest end, for a dependent whose edge is still on its way)."""
    if result.status not in ENDING:
        return
    note_end(scope, result.job_id, result.scheduled_for_ms, result.status)
    for dependent in dependents_of(scope, result.job_id):
        target = scope.local_scope(dependent) if scope.local_scope is not None else None
        if target is None:
            signal_end(scope, result.job_id, dependent, result.scheduled_for_ms, result.status)
            scope.env.signals["topic"] += 1
            continue
        ended = {
            "dependent_job_id": dependent,
            "upstream_job_id": result.job_id,
            "run_key_ms": result.scheduled_for_ms,
            "upstream_status": result.status,
        }
        apply_upstream_ended(target, ended)
        scope.emitted += target.emitted
        scope.env.signals["local"] += 1


def apply_upstream_ended(scope: DagScope, signal: dict[str, Any]) -> None:
    """Count one upstream's end in one run of the dependent; give the run its verdict."""
    dependent, upstream = signal["dependent_job_id"], signal["upstream_job_id"]
    run_key_ms, status = signal["run_key_ms"], signal["upstream_status"]
    job = node_job(scope, dependent)
    if job is None or upstream not in job["depends_on"] or run_key_ms is None:
        log.debug("%s: no edge from %s any more; signal ignored", dependent, upstream)
        return
    key = keys.run_key(dependent, run_key_ms)
    stored = scope.runs.get(key)
    if stored is None:
        run = _open_run(scope, key, dependent, run_key_ms, job["dag_wait_ms"])
    else:
        run = scope.env.codec.decode(RecordKind.DAG_RUN, stored, check=False)
    seen = run["upstreams"].get(upstream)
    if seen is not None and (seen["status"] == SUCCEEDED or seen["status"] == status):
        return  # counted already (a repeated signal) or a success stays a success
    run["upstreams"][upstream] = {"status": status, "ended_at_ms": scope.now_ms}
    if run["verdict"] not in _CLOSED:
        _decide(scope, run, job)
    scope.runs.set(key, scope.env.codec.encode(RecordKind.DAG_RUN, run))


def settle_deadlines(scope: DagScope) -> int:
    """Give MISSED to open runs past their deadline; forget runs past their retention.

    Returns how many deadline entries were settled (at most the env's batch size)."""
    start, end = keys.deadlines_until(scope.now_ms)
    due = scope.deadlines.iter_range(start, end, scope.env.deadline_batch_size)
    for entry, mark in due:
        scope.deadlines.delete(entry)
        due_ms, key = keys.split_deadline_key(entry)
        stored = scope.runs.get(key)
        if stored is None:
            continue
        if mark == keys.FORGET:
            scope.runs.delete(key)
            continue
        run = scope.env.codec.decode(RecordKind.DAG_RUN, stored, check=False)
        if run["verdict"] == "OPEN":
            job = node_job(scope, run["job_id"])
            awaited = sorted(set(job["depends_on"] if job else ()) - _succeeded(run))
            run["verdict"] = "MISSED"
            _release(scope, run, "MISSED", _missed_reason(run, awaited), _succeeded_ids(run))
            scope.runs.set(key, scope.env.codec.encode(RecordKind.DAG_RUN, run))
        forget_ms = due_ms + scope.env.run_retention_ms
        scope.deadlines.set(keys.deadline_key(forget_ms, key), keys.FORGET)
    return len(due)


def _open_run(
    scope: DagScope, key: bytes, dependent: str, run_key_ms: int, wait_ms: int
) -> dict[str, Any]:
    deadline_ms = run_key_ms + wait_ms
    scope.deadlines.set(keys.deadline_key(deadline_ms, key), keys.MISS)
    return {
        "job_id": dependent,
        "run_key_ms": run_key_ms,
        "verdict": "OPEN",
        "deadline_ms": deadline_ms,
        "upstreams": {},
        "opened_at_ms": scope.now_ms,
    }


def _decide(scope: DagScope, run: dict[str, Any], job: dict[str, Any]) -> None:
    upstreams: dict[str, Any] = run["upstreams"]
    if all(upstreams.get(u, {}).get("status") == SUCCEEDED for u in job["depends_on"]):
        run["verdict"] = "RELEASED"
        _release(scope, run, "RUN", None, _succeeded_ids(run))
        return
    if run["verdict"] == "UPSTREAM_FAILED":
        return  # one UPSTREAM_FAILED per run; a later success may still release it
    failed = sorted(u for u, end in upstreams.items() if end["status"] != SUCCEEDED)
    if failed:
        first = failed[0]
        failed_execution = execution_id(first, run["run_key_ms"])
        reason = f"upstream {failed_execution} ended {upstreams[first]['status']}"
        run["verdict"] = "UPSTREAM_FAILED"
        _release(scope, run, "UPSTREAM_FAILED", reason, [failed_execution])


def _release(
    scope: DagScope, run: dict[str, Any], verdict: str, reason: str | None, executions: list[str]
) -> None:
    record = {
        "job_id": run["job_id"],
        "run_key_ms": run["run_key_ms"],
        "verdict": verdict,
        "reason": reason,
        "upstream_execution_ids": executions,
        "emitted_at_ms": scope.now_ms,
    }
    value = scope.env.codec.encode(RecordKind.DAG_RELEASE, record)
    scope.emit(scope.env.releases_topic, run["job_id"].encode(), value)
    scope.emitted += 1
    scope.env.verdicts[verdict] += 1


def _succeeded(run: dict[str, Any]) -> set[str]:
    return {u for u, end in run["upstreams"].items() if end["status"] == SUCCEEDED}


def _succeeded_ids(run: dict[str, Any]) -> list[str]:
    return [execution_id(u, run["run_key_ms"]) for u in sorted(_succeeded(run))]


def _missed_reason(run: dict[str, Any], awaited: list[str]) -> str:
    waited_s = (run["deadline_ms"] - run["run_key_ms"]) / 1000
    names = ", ".join(execution_id(u, run["run_key_ms"]) for u in awaited)
    return f"upstreams did not all succeed within dag_wait_s={waited_s:g}: awaited {names}"
