"""Applying ``job-results``: track executions in flight, release a queued fire, finish one-offs.

STARTED marks an execution in flight (the timer already does so when it emits it, and then
answers the STARTED from the stored state's tail alone; this covers executions it did not
emit). A
final outcome clears it, and when nothing else runs a queued fire (overlap QUEUE_ONE) goes
out. The final outcome of a one-off's execution marks the job completed and lists it for its
tombstone on ``jobs`` after the retention, in a wheel entry shared with the one-offs
finished in the same scope (``retention.py``); the one-off's run time is stored with its
state, so this needs no Job decode. Attempt failures (FAILED, TIMED_OUT) change nothing: a
retry or a dead letter follows.

Two shortcuts serve nearly every result, each exactly what :func:`apply_to_state` would do:
a STARTED the timer already knows of changes nothing (``started_is_known``), and the final
result of a one-off fired from its fast entry re-encodes the stored tail without building a
state (``complete_fired_one_off``).

While an in-flight limit is configured, a final result first frees its execution's run of
its tenant and lets a parked fire out (``throttle.finish_run``, ``in_flight.py``).
"""

from __future__ import annotations

from services.timer.firing import fire_queued
from services.timer.retention import retain
from services.timer.scope import Scope
from services.timer.state import (
    complete_fired_one_off,
    load_state,
    mark_running,
    save_state,
    started_is_known,
)
from services.timer.throttle import finish_run
from streams.result_reader import ResultFields

_FINAL = frozenset(
    {"SUCCEEDED", "DEAD_LETTER", "SKIPPED", "MISSED", "CANCELLED", "UPSTREAM_FAILED"}
)


def apply_result(scope: Scope, job_id: bytes, result: ResultFields) -> None:
    """Apply one ExecutionResult of ``job_id`` (the fields the timer reads of it)."""
    status = result.status
    tick_ms = result.scheduled_for_ms
    if status in _FINAL and scope.env.tenant_limits.in_flight.active:
        finish_run(scope, job_id, tick_ms)  # a run of its tenant is free (``in_flight.py``)
    if status == "STARTED":
        if started_is_known(scope, job_id, tick_ms):
            return
    elif status not in _FINAL or complete_fired_one_off(scope, job_id, tick_ms, retain):
        return
    apply_to_state(scope, job_id, status, tick_ms)


def apply_to_state(scope: Scope, job_id: bytes, status: str, tick_ms: int) -> None:
    """Apply a STARTED or a final outcome of ``tick_ms`` through the job's loaded state (what
    the shortcuts of :func:`apply_result` stand for)."""
    state = load_state(scope, job_id)
    if state is None:
        return
    if status == "STARTED":
        if tick_ms not in state.running:
            mark_running(scope, state, tick_ms)
            save_state(scope, state)
        return
    changed = False
    if tick_ms in state.running:
        state.running.remove(tick_ms)
        changed = True
        if not state.running:
            fire_queued(scope, state)
    if not state.completed and state.one_off_run_at_ms == tick_ms:
        state.completed = True
        state.tombstone_fire_ms = retain(scope, job_id)
        changed = True
    if changed:
        save_state(scope, state)
