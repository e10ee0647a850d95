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

A tenant with an in-flight limit (``in_flight.py``) has its DueEvent, at its slot, emitted
only while it has a run free in the partition; else it is parked in the partition's store,
and the final result of one of the tenant's runs lets the oldest parked one out, in that
result's transaction (:func:`finish_run`).

A held or parked fire of a job cancelled or deleted meanwhile ends CANCELLED, as a retry
does; one an overlap REPLACE cancelled (no longer in flight) is dropped: its CANCELLED is
recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum, auto
from typing import Any

from services.timer import keys
from services.timer.due_bytes import due_event_record
from services.timer.in_flight import (
    COUNT_PREFIX,
    PARK_PREFIX,
    RUN_PREFIX,
    park_prefix,
    parked_job_and_tick,
)
from services.timer.in_flight import park_key as in_flight_park_key
from services.timer.scope import PRIORITY_INDEX, Scope
from services.timer.state import load_state
from services.timer.stored_state import TimerState
from services.timer.wheel import place_ms
from streams.codec import RecordKind
from streams.identity import execution_id

# The reasons firing.py records (CANCELLED_JOB, CANCELLED_DELETED), written here because
# firing.py imports this module.
CANCELLED_WHILE_WAITING = "job cancelled"
CANCELLED_WHILE_WAITING_DELETED = "job deleted"


def emit_limited(
    scope: Scope, job: Mapping[str, Any], tick_ms: int, fire_ms: int, trigger: str
) -> None:
    """Emit the DueEvent of ``tick_ms`` (due at ``fire_ms``) at its tenant's next slot."""
    limits = scope.env.tenant_limits
    tenant: str = job["tenant"]
    slot_ms = limits.reserve(scope.jobs, scope.partition, tenant, fire_ms)  # or fire_ms
    if slot_ms <= scope.horizon_ms and limits.in_flight.share(tenant) is None:
        scope.emit_due(job, tick_ms, slot_ms, trigger)
        return
    exec_id = execution_id(job["job_id"], tick_ms)
    record = due_event_record(job, tick_ms, slot_ms, trigger, scope.now_ms, exec_id)
    value = bytes([PRIORITY_INDEX[job["priority"]]]) + scope.env.codec.encode(
        RecordKind.DUE_EVENT, record
    )
    job_id = job["job_id"].encode()
    if slot_ms <= scope.horizon_ms:
        emit_or_park(scope, tenant, job_id, tick_ms, slot_ms, value)
        return
    key_ms = place_ms(scope, slot_ms)  # the slot: always after the running scan's bound
    scope.wheel.set(keys.held_key(key_ms, job_id, tick_ms), value)
    limits.held[tenant] += 1


def emit_or_park(
    scope: Scope, tenant: str, job_id: bytes, tick_ms: int, fire_at_ms: int, value: bytes
) -> None:
    """Emit a DueEvent (``value``: priority index and bytes) when its tenant has a run free
    under its in-flight limit, else park it (``in_flight.py``)."""
    in_flight = scope.env.tenant_limits.in_flight
    if in_flight.admit(scope.jobs, scope.partition, tenant, job_id, tick_ms):
        _emit(scope, job_id, value)
        return
    scope.jobs.set(in_flight_park_key(tenant, fire_at_ms, tick_ms, job_id), value)
    in_flight.parked[tenant] += 1


def finish_run(scope: Scope, job_id: bytes, tick_ms: int) -> None:
    """A final result of ``tick_ms``: free its run and let the tenant's oldest parked
    DueEvent out (one of a job still active; a cancelled or deleted one's ends CANCELLED)."""
    in_flight = scope.env.tenant_limits.in_flight
    tenant = in_flight.finish(scope.jobs, scope.partition, job_id, tick_ms)
    if tenant is None:
        return
    start = park_prefix(tenant)
    while parked := scope.jobs.iter_range(start, start[:-1] + b"\x01", 1):
        if _let_out(scope, tenant, *parked[0]) is not LetOut.DROPPED:
            return  # one went out, or the share shrank meanwhile: it stays parked


SWEEP_BATCH = 10_000
"""Parked fires :func:`release_unheld` lets out per call (one punctuation's transaction)."""


def release_unheld(scope: Scope, batch: int = SWEEP_BATCH) -> bool:
    """Let out the partition's parked fires that the limits in force no longer hold back, and
    stop counting the runs of tenants no longer limited; True when nothing is left to do.

    Limits are read at start, so a restart is when they change. Without this, a fire parked
    under a limit since removed (or raised) waited for results of its tenant's counted runs,
    and once those were gone, forever. Called at each punctuation of a partition until it
    returns True (``service.py``): a seek per prefix when nothing is parked; at most ``batch``
    fires per call, so a large backlog goes out over several transactions."""
    in_flight = scope.env.tenant_limits.in_flight
    jobs = scope.jobs
    start, end = RUN_PREFIX, RUN_PREFIX[:-1] + b"/"
    untracked: set[str] = set()
    while runs := jobs.iter_range(start, end, 1_000):
        for key, tenant_bytes in runs:
            tenant = tenant_bytes.decode()
            if in_flight.share(tenant) is None:
                jobs.delete(key)
                untracked.add(tenant)
        start = runs[-1][0] + b"\x00"
    for tenant in untracked:
        jobs.delete(COUNT_PREFIX + tenant.encode())
    start, end = PARK_PREFIX, PARK_PREFIX[:-1] + b"/"
    while batch > 0:
        first = jobs.iter_range(start, end, 1)
        if not first:
            return True
        key = first[0][0]
        tenant = key[len(PARK_PREFIX) : key.index(b"\x00", len(PARK_PREFIX))].decode()
        prefix = park_prefix(tenant)
        for key, value in jobs.iter_range(prefix, prefix[:-1] + b"\x01", batch):
            if _let_out(scope, tenant, key, value) is LetOut.STAYS:
                break  # the tenant is at its share: its results let the rest out
            batch -= 1
        else:
            continue  # the tenant's batch went out: look again from its next parked fire
        start = prefix[:-1] + b"\x01"  # the next tenant's
    return False


class LetOut(Enum):
    """What :func:`_let_out` did with a parked DueEvent."""

    EMITTED = auto()
    DROPPED = auto()  # its job no longer wants it: its outcome is (or was) recorded
    STAYS = auto()  # wanted, but its tenant has no run free: still parked


def _let_out(scope: Scope, tenant: str, key: bytes, value: bytes) -> LetOut:
    """Take the DueEvent parked at ``key`` out of the park and emit it, if its job still
    wants it and ``tenant`` has a run free (else it stays parked), or drop it if not."""
    in_flight = scope.env.tenant_limits.in_flight
    job_id, tick_ms = parked_job_and_tick(key, tenant)
    still_wanted = _still_wanted(scope, job_id, tick_ms, value)
    if still_wanted and not in_flight.admit(scope.jobs, scope.partition, tenant, job_id, tick_ms):
        return LetOut.STAYS
    scope.jobs.delete(key)
    in_flight.parked[tenant] -= 1
    if not still_wanted:
        return LetOut.DROPPED
    _emit(scope, job_id, value)
    in_flight.released[tenant] += 1
    return LetOut.EMITTED


def _emit(scope: Scope, job_id: bytes, value: bytes) -> None:
    """Emit a DueEvent built ahead (its ``emitted_at_ms`` set to now)."""
    due = scope.env.codec.decode(RecordKind.DUE_EVENT, value[1:])
    due["emitted_at_ms"] = scope.now_ms
    data = scope.env.codec.encode(RecordKind.DUE_EVENT, due)
    scope.emit_raw(scope.env.due_topics[value[0]], job_id, data)
    scope.env.fire_stats.add(due["trigger"], scope.now_ms - due["fire_at_ms"])


def active_state(
    scope: Scope, job_id: bytes, due_bytes: bytes, *, retry: bool = False
) -> TimerState | None:
    """The state of the job of a DueEvent that waited (held, parked, or a retry in the wheel)
    while the job is still active; else None, and the DueEvent (``due_bytes``) ends CANCELLED
    (job cancelled or deleted), so its execution still gets one final outcome. A ``retry``'s
    outcome names its attempt; a first attempt's, never emitted, is attempt 0 as every fire's
    outcome that is not a run."""
    state = load_state(scope, job_id)
    if state is not None and state.status not in ("CANCELLED", "COMPLETED"):
        return state
    due = scope.env.codec.decode(RecordKind.DUE_EVENT, due_bytes)
    scope.emit_outcome(
        due["job_id"],
        due["scheduled_for_ms"],
        "CANCELLED",
        CANCELLED_WHILE_WAITING_DELETED if state is None else CANCELLED_WHILE_WAITING,
        trigger=due["trigger"],
        job_version=due["job_version"],
        attempt=due["attempt"] if retry else 0,
    )
    return None


def _still_wanted(scope: Scope, job_id: bytes, tick_ms: int, value: bytes) -> bool:
    """True when a waiting DueEvent of ``tick_ms`` should go out; else its outcome is
    recorded (CANCELLED: job cancelled or deleted) or was (an overlap REPLACE)."""
    state = active_state(scope, job_id, value[1:])
    if state is None:
        return False
    in_flight = tick_ms in state.running
    return in_flight or len(state.running) >= scope.env.max_running_per_job


def fire_held(scope: Scope, key: bytes, value: bytes) -> None:
    """Emit a held DueEvent (its ``emitted_at_ms`` now; parked when its tenant is at its
    in-flight limit), or record its CANCELLED outcome."""
    parsed = keys.parse_key(key)
    scope.wheel.delete(key)
    assert parsed.tick_ms is not None
    if not _still_wanted(scope, parsed.job_id, parsed.tick_ms, value):
        return
    if not scope.env.tenant_limits.in_flight.active:
        _emit(scope, parsed.job_id, value)
        return
    due = scope.env.codec.decode(RecordKind.DUE_EVENT, value[1:])
    emit_or_park(scope, due["tenant"], parsed.job_id, parsed.tick_ms, due["fire_at_ms"], value)
