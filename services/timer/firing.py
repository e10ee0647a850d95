"""What a due wheel entry emits: each due tick's one outcome, then the job's next entry.

For a scheduled entry the ticks from the entry's tick up to now are settled in order: the
catch-up plan decides which fire and which are MISSED; a firing tick of a paused job is
SKIPPED ("paused"); otherwise the overlap policy decides between a DueEvent, SKIPPED, a
queued fire, or a replacement (the running execution is CANCELLED). The next tick is always
``next_fire_after(spec, previous tick)``: schedules never drift.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from services.timer.due_bytes import fire_at_ms
from services.timer.policies import (
    CANCELLED_REPLACED,
    MISSED_CATCHUP_NONE,
    MISSED_SUPERSEDED,
    CatchupPlan,
    CatchupPolicy,
    OverlapDecision,
    decide_overlap,
    overlap_skip_reason,
    plan_catchup,
)
from services.timer.scope import Scope
from services.timer.state import (
    TimerState,
    clear_schedule_entry,
    mark_running,
    set_schedule_entry,
)
from services.timer.throttle import emit_limited
from streams.schedule import CronSpec, next_fire_after, parse_cron

SKIPPED_PAUSED = "paused"
CANCELLED_JOB = "job cancelled"
CANCELLED_DELETED = "job deleted"
SCHEDULE = "SCHEDULE"
MANUAL = "MANUAL"
DAG = "DAG"
_SKIPPED_WHILE_PAUSED = (SCHEDULE, DAG)
"""Triggers whose fires a pause skips (an explicit trigger-now still runs)."""


@lru_cache(maxsize=65_536)
def _cron_spec(
    expression: str, timezone: str, start_ms: int | None, end_ms: int | None, fold: str
) -> CronSpec:
    return parse_cron(expression, timezone, start_ms, end_ms, fold)


def cron_spec_of(job: dict[str, Any]) -> CronSpec | None:
    """The parsed cron of a Job dict (cached: parsing costs ~0.3 ms), None for a one-off."""
    cron = job["cron"]
    if cron is None:
        return None
    return _cron_spec(
        cron["expression"],
        cron["timezone"],
        cron["start_ms"],
        cron["end_ms"],
        cron["fold_policy"],
    )


def due_ticks(
    job: dict[str, Any], spec: CronSpec | None, first_tick_ms: int, now_ms: int, limit: int
) -> tuple[list[int], int | None]:
    """Ticks from ``first_tick_ms`` that fire by ``now_ms`` (at most ``limit``) and the next one."""
    ticks = [first_tick_ms]
    if spec is None:
        return ticks, None
    while True:
        tick_ms = next_fire_after(spec, ticks[-1])
        if tick_ms is None or len(ticks) >= limit or fire_at_ms(job, tick_ms) > now_ms:
            return ticks, tick_ms
        ticks.append(tick_ms)


def plan_ticks(
    policy: str,
    ticks_ms: list[int],
    now_ms: int,
    window_ms: int,
    grace_ms: int,
    more_pending: bool,
) -> CatchupPlan:
    """Which due ticks fire and which are MISSED (with reasons).

    Ticks late by at most ``grace_ms`` are on time and fire even under catch-up NONE. When
    later ticks are still pending (``more_pending``), none of these is the latest.
    """
    catchup = CatchupPolicy(policy)
    if catchup is CatchupPolicy.NONE:
        late = [t for t in ticks_ms if now_ms - t > grace_ms]
        on_time = [t for t in ticks_ms if now_ms - t <= grace_ms]
        return CatchupPlan(fire=on_time, missed=[(t, MISSED_CATCHUP_NONE) for t in late])
    plan = plan_catchup(catchup, ticks_ms, now_ms, window_ms)
    if more_pending and catchup is CatchupPolicy.LATEST and plan.fire:
        superseded = [(t, MISSED_SUPERSEDED) for t in plan.fire]
        return CatchupPlan(missed=sorted(plan.missed + superseded))
    return plan


def fire_schedule(scope: Scope, state: TimerState) -> None:
    """Settle the job's due scheduled entry and put its next tick in the wheel."""
    first_tick_ms = state.sched_tick_ms
    clear_schedule_entry(scope, state)
    if first_tick_ms is None or state.status not in ("SCHEDULED", "PAUSED") or state.completed:
        return
    job = state.job(scope)
    spec = cron_spec_of(job)
    now_ms = scope.now_ms
    ticks, next_tick_ms = due_ticks(job, spec, first_tick_ms, now_ms, scope.env.max_catchup_ticks)
    next_fire_ms = fire_at_ms(job, next_tick_ms) if next_tick_ms is not None else None
    more_pending = next_fire_ms is not None and next_fire_ms <= now_ms
    plan = plan_ticks(
        job["catchup"],
        ticks,
        now_ms,
        job["catchup_window_ms"],
        scope.env.misfire_grace_ms,
        more_pending,
    )
    firing = set(plan.fire)
    reasons = dict(plan.missed)
    for tick_ms in ticks:
        if tick_ms in firing:
            settle_fire(scope, state, job, tick_ms, SCHEDULE)
        else:
            scope.emit_outcome(
                state.job_id, tick_ms, "MISSED", reasons[tick_ms], job_version=state.version
            )
    state.last_tick_ms = ticks[-1]
    if next_tick_ms is not None:
        set_schedule_entry(scope, state, next_tick_ms)


def fire_manual(scope: Scope, state: TimerState, tick_ms: int) -> None:
    """Settle a manual fire (trigger MANUAL; pausing does not stop an explicit trigger).

    The caller removed its wheel entry.
    """
    state.manual = [(f, t) for f, t in state.manual if t != tick_ms]
    if state.status in ("CANCELLED", "COMPLETED"):
        scope.emit_outcome(
            state.job_id, tick_ms, "CANCELLED", CANCELLED_JOB, trigger=MANUAL,
            job_version=state.version,
        )  # fmt: skip
        return
    settle_fire(scope, state, state.job(scope), tick_ms, MANUAL)


def settle_fire(
    scope: Scope, state: TimerState, job: dict[str, Any], tick_ms: int, trigger: str
) -> None:
    """Give one firing tick its outcome under the pause and overlap rules."""
    if trigger in _SKIPPED_WHILE_PAUSED and state.status == "PAUSED":
        scope.emit_outcome(
            state.job_id, tick_ms, "SKIPPED", SKIPPED_PAUSED, trigger=trigger,
            job_version=state.version,
        )  # fmt: skip
        return
    decision = decide_overlap(job["overlap"], bool(state.running), state.queued is not None)
    if decision is OverlapDecision.SKIP:
        reason = overlap_skip_reason(job["overlap"])
        scope.emit_outcome(
            state.job_id, tick_ms, "SKIPPED", reason, trigger=trigger, job_version=state.version
        )
    elif decision is OverlapDecision.QUEUE:
        state.queued = (tick_ms, trigger)
    else:
        if decision is OverlapDecision.REPLACE:
            for running_ms in state.running:
                scope.emit_outcome(
                    state.job_id, running_ms, "CANCELLED", CANCELLED_REPLACED,
                    job_version=state.version,
                )  # fmt: skip
            state.running.clear()
        emit_fire(scope, state, job, tick_ms, trigger)


def emit_fire(
    scope: Scope, state: TimerState, job: dict[str, Any], tick_ms: int, trigger: str
) -> None:
    """Emit the DueEvent of ``tick_ms`` and remember the execution as in flight.

    Under a tenant limit the DueEvent waits for the tenant's next slot (``throttle.py``).
    """
    if trigger == SCHEDULE:
        fire_ms = fire_at_ms(job, tick_ms)
    else:  # a manual fire's tick is its fire time; a DAG run fires when released
        fire_ms = scope.now_ms if trigger == DAG else tick_ms
    if scope.env.tenant_limits.active:
        emit_limited(scope, job, tick_ms, fire_ms, trigger)
    else:
        scope.emit_due(job, tick_ms, fire_ms, trigger)
    mark_running(scope, state, tick_ms)


def fire_queued(scope: Scope, state: TimerState) -> None:
    """Fire the queued tick now that nothing runs (it was decided before; pause still applies)."""
    if state.queued is None:
        return
    tick_ms, trigger = state.queued
    state.queued = None
    if state.status in ("CANCELLED", "COMPLETED"):
        scope.emit_outcome(
            state.job_id, tick_ms, "CANCELLED", CANCELLED_JOB, trigger=trigger,
            job_version=state.version,
        )  # fmt: skip
    elif trigger in _SKIPPED_WHILE_PAUSED and state.status == "PAUSED":
        scope.emit_outcome(
            state.job_id, tick_ms, "SKIPPED", SKIPPED_PAUSED, trigger=trigger,
            job_version=state.version,
        )  # fmt: skip
    else:
        emit_fire(scope, state, state.job(scope), tick_ms, trigger)
