"""Applying ``job-results``: track executions in flight, release a queued fire, finish one-offs.

STARTED marks an execution in flight (the timer already does so when it emits it, and then
answers the STARTED from the stored JSON alone; this covers executions it did not emit). A
final outcome clears it, and when nothing else runs a queued fire (overlap QUEUE_ONE) goes
out. The final outcome of a one-off's execution marks the job completed and lists it for its
tombstone on ``jobs`` after the retention, in a wheel entry shared with the one-offs
finished in the same scope (``retention.py``); the one-off's run time is stored with its
state, so this needs no Job decode. Attempt failures (FAILED, TIMED_OUT) change nothing: a
retry or a dead letter follows.
"""

from __future__ import annotations

from services.timer.firing import fire_queued
from services.timer.retention import retain
from services.timer.scope import Scope
from services.timer.state import load_state, mark_running, save_state, started_is_known
from streams.result_reader import ResultFields

_FINAL = frozenset(
    {"SUCCEEDED", "DEAD_LETTER", "SKIPPED", "MISSED", "CANCELLED", "UPSTREAM_FAILED"}
)


def apply_result(scope: Scope, job_id: bytes, result: ResultFields) -> None:
    """Apply one ExecutionResult of ``job_id`` (the fields the timer reads of it)."""
    status = result.status
    if status != "STARTED" and status not in _FINAL:
        return
    tick_ms = result.scheduled_for_ms
    if status == "STARTED" and started_is_known(scope, job_id, tick_ms):
        return
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
    if not state.completed and state.one_off_run_at_ms(scope) == tick_ms:
        state.completed = True
        state.tombstone_fire_ms = retain(scope, job_id)
        changed = True
    if changed:
        save_state(scope, state)
