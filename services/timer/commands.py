"""Applying a Job record from ``jobs``: create, update, pause, cancel, trigger now, delete.

A record whose version is not newer than the stored one is ignored. Before a newer record
changes anything, the job's overdue entries are settled under the old definition, so every
tick that was due before the change gets its outcome. A create or update then schedules
from the later of the last settled tick and the command's time (never later than now).
"""

from __future__ import annotations

from typing import Any

from services.timer import keys
from services.timer.backfill import accept_backfill
from services.timer.firing import (
    CANCELLED_DELETED,
    CANCELLED_JOB,
    MANUAL,
    cron_spec_of,
    fire_manual,
    fire_schedule,
)
from services.timer.retention import forget_retention
from services.timer.scope import Scope
from services.timer.state import (
    TimerState,
    clear_schedule_entry,
    delete_state,
    load_state,
    save_state,
    set_schedule_entry,
)
from services.timer.wheel import place_ms
from streams.exceptions import ScheduleError
from streams.schedule import next_fire_after

_INACTIVE = ("CANCELLED", "COMPLETED")


def validate_job(job: dict[str, Any]) -> None:
    """Raise ScheduleError when the timer could not schedule ``job`` (ingest checks this too)."""
    cron_spec_of(job)
    if job["catchup_window_ms"] < 0:
        raise ScheduleError(f"catchup_window_ms must be >= 0, got {job['catchup_window_ms']}")
    if job["jitter_ms"] < 0:
        raise ScheduleError(f"jitter_ms must be >= 0, got {job['jitter_ms']}")


def apply_job(scope: Scope, job_id: bytes, value: bytes | None, job: dict[str, Any] | None) -> None:
    """Apply one record of ``jobs``: ``job`` decoded from ``value``, or None for a tombstone."""
    state = load_state(scope, job_id)
    if job is None or value is None:
        if state is not None:
            settle_overdue(scope, state)
            remove_pending(scope, state, CANCELLED_DELETED)
            if state.tombstone_fire_ms is not None:
                forget_retention(scope, job_id, state.tombstone_fire_ms)
            delete_state(scope, state)
        return
    if state is not None and job["version"] <= state.version:
        return  # stale or repeated: a newer command already applied
    validate_job(job)
    still_overdue = False
    if state is None:
        state = TimerState.of_job(value, job)
    else:
        still_overdue = settle_overdue(scope, state)
        state.accept_job(value, job)
    if job["status"] in _INACTIVE:
        remove_pending(scope, state, CANCELLED_JOB)
    else:
        reschedule(scope, state, job, resume_catchup=still_overdue)
        accept_manual(scope, state, job)
        accept_backfill(scope, state, job)
    save_state(scope, state)


def settle_overdue(scope: Scope, state: TimerState) -> bool:
    """Fire the job's entries due by now under its current definition.

    Returns True when scheduled ticks are still overdue (a catch-up longer than one batch).
    """
    now_ms = scope.now_ms
    for key_ms, tick_ms in [entry for entry in state.manual if entry[0] <= now_ms]:
        scope.wheel.delete(keys.manual_key(key_ms, state.key, tick_ms))
        fire_manual(scope, state, tick_ms)
    if state.sched_fire_ms is not None and state.sched_fire_ms <= now_ms:
        fire_schedule(scope, state)
    return state.sched_fire_ms is not None and state.sched_fire_ms <= now_ms


def remove_pending(scope: Scope, state: TimerState, reason: str) -> None:
    """Drop the job's future fires; accepted manual and queued fires end CANCELLED."""
    clear_schedule_entry(scope, state)
    for key_ms, tick_ms in state.manual:
        scope.wheel.delete(keys.manual_key(key_ms, state.key, tick_ms))
        scope.emit_outcome(
            state.job_id, tick_ms, "CANCELLED", reason, trigger=MANUAL, job_version=state.version
        )
    state.manual = []
    if state.queued is not None:
        tick_ms, trigger = state.queued
        state.queued = None
        scope.emit_outcome(
            state.job_id, tick_ms, "CANCELLED", reason, trigger=trigger, job_version=state.version
        )


def reschedule(scope: Scope, state: TimerState, job: dict[str, Any], resume_catchup: bool) -> None:
    """Put the job's next scheduled tick under its new definition in the wheel."""
    clear_schedule_entry(scope, state)
    if job["depends_on"]:
        return  # DAG jobs are fired by the dag processor, through manual triggers
    tick_ms = _first_tick(scope, state, job, resume_catchup)
    if tick_ms is None:
        return
    if state.completed:  # a finished one-off given a new run time runs again
        state.completed = False
        if state.tombstone_fire_ms is not None:
            forget_retention(scope, state.key, state.tombstone_fire_ms)
            state.tombstone_fire_ms = None
    set_schedule_entry(scope, state, tick_ms)


def _first_tick(
    scope: Scope, state: TimerState, job: dict[str, Any], resume_catchup: bool
) -> int | None:
    spec = cron_spec_of(job)
    last_ms = state.last_tick_ms
    if spec is None:
        run_at_ms: int | None = job["run_at_ms"]
        if run_at_ms is None or (last_ms is not None and run_at_ms <= last_ms):
            return None  # no run time, or this run time is settled already
        return run_at_ms
    if resume_catchup and last_ms is not None:
        return next_fire_after(spec, last_ms)
    anchor_ms = min(scope.now_ms, job["updated_at_ms"])
    if last_ms is None:
        anchor_ms = max(anchor_ms, scope.now_ms - job["catchup_window_ms"])
    else:
        anchor_ms = max(anchor_ms, last_ms)
    return next_fire_after(spec, anchor_ms)


def accept_manual(scope: Scope, state: TimerState, job: dict[str, Any]) -> None:
    """Schedule a trigger-now fire when the record carries a newer ``manual_fire_at_ms``."""
    manual_ms: int | None = job["manual_fire_at_ms"]
    done_ms = state.manual_done_ms
    if manual_ms is None or (done_ms is not None and manual_ms <= done_ms):
        return
    state.manual_done_ms = manual_ms
    if all(tick_ms != manual_ms for _, tick_ms in state.manual):
        key_ms = place_ms(scope, manual_ms)
        state.manual.append((key_ms, manual_ms))
        scope.wheel.set(keys.manual_key(key_ms, state.key, manual_ms), b"M")
