"""A fire under its tenant's executions/s limit: emitted for its slot now, or held until then.

The tick is settled when it is due, as without a limit (catch-up, misfire grace, overlap,
pause: ``firing.py``), and the execution is in flight from then on; the limit only moves its
DueEvent. ``limits.py`` gives the slot. A slot within the fire-ahead horizon is emitted now
with ``fire_at_ms`` = the slot (the executor holds it until then, as any fire-ahead); a later
one is written, in the same transaction, as a ``HELD`` wheel entry at the slot carrying the
encoded DueEvent, and emitted when that entry comes due: it waits durably, moves with its
partition, is read once, and no drain scans it before then. The delay is on the DueEvent
(``fire_at_ms - scheduled_for_ms``) and so on the outcome (``started_at_ms -
scheduled_for_ms``); the execution id derives from job and tick, so a held fire is the
execution it would have been. Retries (the executor's next attempts) are not counted.

A held fire of a job cancelled or deleted meanwhile ends CANCELLED, as a retry does; one an
overlap REPLACE cancelled (no longer in flight) is dropped: its CANCELLED is recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.timer import keys
from services.timer.due_bytes import due_event_record
from services.timer.scope import PRIORITY_INDEX, Scope
from services.timer.state import load_state
from services.timer.wheel import place_ms
from streams.codec import RecordKind
from streams.identity import execution_id

CANCELLED_WHILE_HELD_DELETED = "job deleted"
CANCELLED_WHILE_HELD = "job cancelled"


def emit_limited(
    scope: Scope, job: Mapping[str, Any], tick_ms: int, fire_ms: int, trigger: str
) -> None:
    """Emit the DueEvent of ``tick_ms`` (due at ``fire_ms``) at its tenant's next slot."""
    limits = scope.env.tenant_limits
    tenant: str = job["tenant"]
    if limits.interval_us(tenant) is None:
        scope.emit_due(job, tick_ms, fire_ms, trigger)
        return
    slot_ms = limits.reserve(scope.jobs, scope.partition, tenant, fire_ms)
    if slot_ms <= scope.horizon_ms:
        scope.emit_due(job, tick_ms, slot_ms, trigger)
        return
    exec_id = execution_id(job["job_id"], tick_ms)
    record = due_event_record(job, tick_ms, slot_ms, trigger, scope.now_ms, exec_id)
    value = bytes([PRIORITY_INDEX[job["priority"]]]) + scope.env.codec.encode(
        RecordKind.DUE_EVENT, record
    )
    key_ms = place_ms(scope, slot_ms)  # the slot: always after the running scan's bound
    scope.wheel.set(keys.held_key(key_ms, job["job_id"].encode(), tick_ms), value)
    limits.held[tenant] += 1


def fire_held(scope: Scope, key: bytes, value: bytes) -> None:
    """Emit a held DueEvent (its ``emitted_at_ms`` now), or its CANCELLED outcome."""
    parsed = keys.parse_key(key)
    scope.wheel.delete(key)
    due = scope.env.codec.decode(RecordKind.DUE_EVENT, value[1:])
    state = load_state(scope, parsed.job_id)
    if state is not None and state.status not in ("CANCELLED", "COMPLETED"):
        in_flight = parsed.tick_ms in state.running
        if not in_flight and len(state.running) < scope.env.max_running_per_job:
            return  # an overlap REPLACE cancelled it (its CANCELLED is recorded)
        due["emitted_at_ms"] = scope.now_ms
        data = scope.env.codec.encode(RecordKind.DUE_EVENT, due)
        scope.emit_raw(scope.env.due_topics[value[0]], parsed.job_id, data)
        scope.env.fire_stats.add(due["trigger"], scope.now_ms - due["fire_at_ms"])
        return
    scope.emit_outcome(
        due["job_id"],
        due["scheduled_for_ms"],
        "CANCELLED",
        CANCELLED_WHILE_HELD_DELETED if state is None else CANCELLED_WHILE_HELD,
        trigger=due["trigger"],
        job_version=due["job_version"],
    )
