"""Per-job timer state in the ``jobs`` store, and the one invariant tying it to the wheel.

A job's state (:class:`TimerState`, the record ``schemas/timer_state.v1.avsc``, stored as
``stored_state.py`` says) holds its last accepted Job record (as received, the Job's own
bytes), its pending wheel entries, its last settled tick, the executions in flight and the
one queued.

*Fast entries.* An on-time one-off with nothing in flight fires from its wheel entry alone
(see ``drain.py``), without reading or writing this state, which halves the per-fire work.
Such an entry is marked ``fast`` here. When the state is next loaded and its fast entry is
below the wheel's fired-through watermark or gone (``wheel.py``), the entry fired:
:func:`load_state` applies that fire (tick settled, execution in flight) before anyone
looks. Every other way an entry is settled writes the state in the same transaction, so
the rule is exact.

*Cheap results.* Two results per execution reach the timer. The schema puts the fields a
result reads or changes after the Job bytes (the *tail*) and stores a one-off's run time,
so a STARTED the timer already knows of is answered from the tail alone
(:func:`started_is_known`) and a SUCCEEDED needs no Job decode. The SUCCEEDED of a one-off
fired from its fast entry (a herd's) re-encodes the tail alone
(:func:`complete_fired_one_off`): decoded, changed as loading the state and applying the
result would change it, encoded again; no state object. Both read a tail once per distinct
tail (a herd's one-offs share theirs).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from services.timer import keys
from services.timer.due_bytes import fire_at_ms
from services.timer.scope import PRIORITY_INDEX, Scope
from services.timer.stored_state import StoredStates, TimerState
from services.timer.wheel import is_fired, place_ms

__all__ = ["TimerState"]  # defined with its stored form, used through this module

_FAST = b"F"
_SLOW = b"S"
_FAST_HEADERS = {name: _FAST + bytes([index]) for name, index in PRIORITY_INDEX.items()}


def encode_state(scope: Scope, state: TimerState) -> bytes:
    """The stored form of ``state`` (``stored_state.py``)."""
    return scope.env.states.encode(state)


def decode_state(scope: Scope, data: bytes) -> TimerState:
    """The state :func:`encode_state` wrote, or one stored in format 1."""
    return scope.env.states.decode(data, scope.env.decode_job)


def started_is_known(scope: Scope, job_id: bytes, tick_ms: int) -> bool:
    """True when a STARTED of ``tick_ms`` changes nothing: the job is unknown, or
    :func:`load_state` would find the execution in flight already.

    Reads the stored tail only (no state object): the timer marks what it emits as in
    flight, so this answers the STARTED of nearly every execution. False: load the state.
    """
    data = scope.jobs.get(job_id)
    if data is None:
        return True
    states = scope.env.states
    rank, tail_at = states.rank_and_tail_at(data)
    if tail_at < 0:
        return False
    view = _started_view(states, data[tail_at:])
    if view is None:
        return False
    running, fast_tick_ms, fast_fire_ms = view
    if fast_tick_ms is None or fast_fire_ms is None:
        return tick_ms in running
    if not _fast_entry_fired(scope, keys.schedule_key(fast_fire_ms, job_id, rank)):
        return tick_ms in running
    # load_state applies the fire of the fast entry: its tick joins the list as mark_running
    # adds it, the oldest dropping out of a full list.
    if fast_tick_ms not in running:
        running = (*running, fast_tick_ms)
        overflow = len(running) - scope.env.max_running_per_job
        if overflow > 0:
            running = running[overflow:]
    return tick_ms in running


@lru_cache(maxsize=4096)
def _started_view(
    states: StoredStates, tail: bytes
) -> tuple[tuple[int, ...], int | None, int | None] | None:
    """(ticks in flight, tick and wheel key time of a pending fast entry) in a stored tail;
    None when it does not read. Remembered: a herd's states share their tails (the entry's
    rank is stored before the tail)."""
    fields = states.tail_fields(tail)
    if fields is None:
        return None
    running = tuple(fields["running"])
    if not fields["fast"]:
        return running, None, None
    return running, fields["sched_tick_ms"], fields["sched_fire_ms"]


def complete_fired_one_off(
    scope: Scope, job_id: bytes, tick_ms: int, retain: Callable[[Scope, bytes], int]
) -> bool:
    """Apply the final result of ``tick_ms`` to a one-off whose fast entry fired that tick,
    by re-encoding the stored tail alone; False (nothing done) for any other state.

    The case of nearly every finished execution of a herd: the state still says "pending,
    fast", nothing in flight or queued, the run time is ``tick_ms``. Loading it would apply
    the fire (tick settled, in flight) and the result would end it and complete the job:
    the tail becomes exactly what :func:`save_state` then writes, with
    ``retain(scope, job_id)`` as the tombstone time, and the bytes before it stay.
    """
    data = scope.jobs.get(job_id)
    if data is None:
        return False
    states = scope.env.states
    rank, tail_at = states.rank_and_tail_at(data)
    if tail_at < 0:
        return False
    tail = data[tail_at:]
    pending = _pending_fast_one_off(states, tail)
    if pending is None or pending[0] != tick_ms:
        return False
    if not _fast_entry_fired(scope, keys.schedule_key(pending[1], job_id, rank)):
        return False
    completed = _completed_one_off_tail(states, tail, tick_ms, retain(scope, job_id))
    scope.jobs.set(job_id, data[:tail_at] + completed)
    return True


@lru_cache(maxsize=4096)
def _pending_fast_one_off(states: StoredStates, tail: bytes) -> tuple[int, int] | None:
    """(run time, wheel key time) of a one-off waiting on its fast entry for its run time,
    with nothing in flight, queued or completed, from its stored tail; None for any other.

    Remembered: a herd's one-offs share one tail.
    """
    fields = states.tail_fields(tail)
    if fields is None or not fields["fast"]:
        return None
    run_at_ms, fire_ms = fields["one_off_run_at_ms"], fields["sched_fire_ms"]
    if run_at_ms is None or fields["sched_tick_ms"] != run_at_ms or fire_ms is None:
        return None
    if fields["running"] or fields["queued"] is not None or fields["completed"]:
        return None
    return run_at_ms, fire_ms


@lru_cache(maxsize=64)
def _completed_one_off_tail(
    states: StoredStates, tail: bytes, tick_ms: int, tombstone_fire_ms: int
) -> bytes:
    """The tail of the pending one-off ``tail`` once its execution of ``tick_ms`` ended, as
    save_state writes it: the fire applied as load_state applies it (tick settled, no entry
    pending), then the result as apply_to_state applies it (nothing in flight, completed,
    listed for its tombstone)."""
    fields = states.tail_fields(tail)
    assert fields is not None  # _pending_fast_one_off read it
    fields.update(
        sched_tick_ms=None,
        sched_fire_ms=None,
        fast=False,
        last_tick_ms=tick_ms,
        running=[],
        completed=True,
        tombstone_fire_ms=tombstone_fire_ms,
    )
    return states.encode_tail(fields)


def load_state(scope: Scope, job_id: bytes) -> TimerState | None:
    """The job's state with a fire of its fast entry applied, or None for an unknown job."""
    data = scope.jobs.get(job_id)
    if data is None:
        return None
    state = decode_state(scope, data)
    if state.fast and state.sched_fire_ms is not None and state.sched_tick_ms is not None:
        key = keys.schedule_key(state.sched_fire_ms, job_id, state.sched_rank)
        if not _fast_entry_fired(scope, key):
            return state
        tick_ms = state.sched_tick_ms
        state.last_tick_ms = tick_ms
        mark_running(scope, state, tick_ms)
        state.sched_tick_ms = state.sched_fire_ms = None  # sched_rank: read only with these
        state.fast = False
    return state


def _fast_entry_fired(scope: Scope, key: bytes) -> bool:
    """Did the fast entry ``key`` fire (below the watermark, or already collected)?"""
    mark = scope.fired_through  # is_fired inlined: called once per finished execution
    if mark is None:
        return is_fired(scope, key) or scope.wheel.get(key) is None
    return key < mark or scope.wheel.get(key) is None


def save_state(scope: Scope, state: TimerState) -> None:
    """Store ``state``, first turning its pending entry fast or slow as the state now allows."""
    tick_ms = state.sched_tick_ms
    if tick_ms is not None and fast_allowed(scope, state) != state.fast:
        set_schedule_entry(scope, state, tick_ms)
    scope.jobs.set(state.key, encode_state(scope, state))


def delete_state(scope: Scope, state: TimerState) -> None:
    """Forget the job (its wheel entries must be gone already)."""
    scope.jobs.delete(state.key)


def mark_running(scope: Scope, state: TimerState, tick_ms: int) -> None:
    """Remember the execution for ``tick_ms`` as in flight, keeping the list bounded."""
    if tick_ms not in state.running:
        state.running.append(tick_ms)
        overflow = len(state.running) - scope.env.max_running_per_job
        if overflow > 0:
            del state.running[:overflow]


def fast_allowed(scope: Scope, state: TimerState) -> bool:
    """True when the pending entry can fire blind: an active one-off with nothing in flight."""
    if not scope.env.due_bytes.spliceable or state.status != "SCHEDULED" or state.completed:
        return False
    job = state.job(scope)
    if job["cron"] is not None or job["run_at_ms"] != state.sched_tick_ms:
        return False
    return job["overlap"] == "ALLOW" or (not state.running and state.queued is None)


def set_schedule_entry(scope: Scope, state: TimerState, tick_ms: int) -> None:
    """Put the job's entry for ``tick_ms`` in the wheel, replacing any earlier one."""
    clear_schedule_entry(scope, state)
    job = state.job(scope)
    fire_ms = fire_at_ms(job, tick_ms)
    key_ms = place_ms(scope, fire_ms)
    rank = scope.env.tenant_ranks.rank(scope.partition, key_ms, job["tenant"])
    state.sched_tick_ms, state.sched_fire_ms, state.sched_rank = tick_ms, key_ms, rank
    state.fast = fast_allowed(scope, state)
    if state.fast:
        prefix = scope.env.due_bytes.first_attempt_prefix(job, tick_ms, fire_ms, "SCHEDULE")
        value = _FAST_HEADERS[job["priority"]] + prefix
    else:
        value = _SLOW
    scope.wheel.set(keys.schedule_key(key_ms, state.key, rank), value)


def clear_schedule_entry(scope: Scope, state: TimerState) -> None:
    """Remove the job's pending scheduled entry, if any."""
    if state.sched_fire_ms is not None:
        scope.wheel.delete(keys.schedule_key(state.sched_fire_ms, state.key, state.sched_rank))
    state.sched_tick_ms = state.sched_fire_ms = None  # sched_rank: read only with these
    state.fast = False


FAST_VALUE_HEADER = 2
"""Bytes before the DueEvent prefix in a fast entry's value: the marker and the priority."""
FAST_MARKER = _FAST[0]
