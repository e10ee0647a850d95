"""Per-job timer state in the ``jobs`` store, and the one invariant tying it to the wheel.

A job's state holds its last accepted Job record (as received, Avro bytes), its pending
wheel entries, its last settled tick, the executions in flight and the one queued.

*Fast entries.* An on-time one-off with nothing in flight fires from its wheel entry alone
(see ``drain.py``), without reading or writing this state, which halves the per-fire work.
Such an entry is marked ``fast`` here. When the state is next loaded and its fast entry is
below the wheel's fired-through watermark or gone (``wheel.py``), the entry fired:
:func:`load_state` applies that fire (tick settled, execution in flight) before anyone
looks. Every other way an entry is settled writes the state in the same transaction, so
the rule is exact.

*Cheap results.* Two results per execution reach the timer. The stored form keeps the JSON
fields ahead of the Job bytes, and remembers whether the job is a one-off and its run time
(:meth:`TimerState.one_off_run_at_ms`), so that a STARTED the timer already knows of is
answered from the JSON alone (:func:`started_is_known`) and a SUCCEEDED needs no Job decode.
The SUCCEEDED of a one-off fired from its fast entry (a herd's) rewrites the fields after the
status in the stored bytes (:func:`complete_fired_one_off`): no decode, no state object.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import orjson

from services.timer import keys
from services.timer.due_bytes import fire_at_ms
from services.timer.scope import PRIORITY_INDEX, Scope
from services.timer.wheel import is_fired, place_ms

_FORMAT = 1
_FORMAT_BYTE = bytes([_FORMAT])
_FAST = b"F"
_SLOW = b"S"
_RUN_AT = 13  # index of the optional one-off run time in the stored JSON list
_PACK_HEADER = struct.Struct(">BI").pack
_UNPACK_SIZE = struct.Struct(">I").unpack_from
_FAST_HEADERS = {name: _FAST + bytes([index]) for name, index in PRIORITY_INDEX.items()}
# The JSON after the status of a one-off waiting on its fast entry: sched_tick_ms,
# sched_fire_ms, fast, last_tick_ms, running, queued, manual, manual_done_ms, completed,
# tombstone_fire_ms, run_at_ms (see complete_fired_one_off).
_FAST_ONE_OFF_TAIL = re.compile(
    rb",(-?\d+),(-?\d+),true,(?:null|-?\d+),\[\],null,\[\],null,false,null,(-?\d+)\]"
)


@dataclass(slots=True)
class TimerState:
    """What the timer keeps per job (see the module docstring)."""

    job_id: str
    version: int
    job_bytes: bytes
    status: str
    sched_tick_ms: int | None = None  # the pending scheduled tick, if any
    sched_fire_ms: int | None = None  # the time its wheel key carries (wheel.place_ms)
    fast: bool = False  # the pending scheduled entry may fire without this state
    last_tick_ms: int | None = None  # newest scheduled tick that got its outcome
    running: list[int] = field(default_factory=list)  # ticks of executions in flight
    queued: tuple[int, str] | None = None  # (tick, trigger) waiting for the running one
    manual: list[tuple[int, int]] = field(default_factory=list)  # pending (key ms, tick)
    manual_done_ms: int | None = None  # newest manual_fire_at_ms accepted
    completed: bool = False  # a one-off whose execution has its final outcome
    tombstone_fire_ms: int | None = None  # when the finished one-off is deleted
    decoded: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    # (the job_bytes it was derived from, run_at_ms of a one-off or None): stored with the
    # state so that a finished execution needs no Job decode; rederived when job_bytes change.
    run_at: tuple[bytes, int | None] | None = field(default=None, repr=False, compare=False)

    def job(self, scope: Scope) -> dict[str, Any]:
        """The Job record as a dict, decoded once per load."""
        if self.decoded is None:
            self.decoded = scope.env.decode_job(self.job_bytes)
        return self.decoded

    def one_off_run_at_ms(self, scope: Scope) -> int | None:
        """The run time of a one-off job, None for any other (cron, dependent) job."""
        run_at = self.run_at
        if run_at is None or run_at[0] is not self.job_bytes:
            job = self.job(scope)
            run_at = self.run_at = (
                self.job_bytes,
                job["run_at_ms"] if job["cron"] is None else None,
            )
        return run_at[1]

    @property
    def key(self) -> bytes:
        return self.job_id.encode()


def encode_state(state: TimerState) -> bytes:
    """The stored form: format byte, 4-byte length, JSON of the fields, the Job bytes.

    The one-off run time goes last, and only when derived from these very Job bytes; a state
    without it (also one written before it existed) derives it from the Job when asked.
    """
    # orjson writes the same compact JSON as json.dumps (UTF-8 instead of \u escapes, which
    # json.loads reads too) ~10x faster, tuples as arrays: one call, no per-field copies.
    fields: tuple[Any, ...] = (
        state.job_id,
        state.version,
        state.status,
        state.sched_tick_ms,
        state.sched_fire_ms,
        state.fast,
        state.last_tick_ms,
        state.running,
        state.queued,
        state.manual,
        state.manual_done_ms,
        state.completed,
        state.tombstone_fire_ms,
    )
    run_at = state.run_at
    if run_at is not None and run_at[0] is state.job_bytes:
        fields += (run_at[1],)
    body = orjson.dumps(fields)
    return _PACK_HEADER(_FORMAT, len(body)) + body + state.job_bytes


def decode_state(data: bytes) -> TimerState:
    """The state :func:`encode_state` wrote."""
    if data[:1] != _FORMAT_BYTE:
        raise ValueError(f"unknown timer state format {data[:1]!r}")
    end = 5 + _UNPACK_SIZE(data, 1)[0]
    meta = orjson.loads(data[5:end])
    job_bytes = data[end:]
    # Unpacked at once and passed by position: half the cost of indexing field by field
    # (a finished execution decodes one state).
    run_at: tuple[bytes, int | None] | None = None
    if len(meta) > _RUN_AT:
        run_at = (job_bytes, meta[_RUN_AT])
        meta = meta[:_RUN_AT]
    (job_id, version, status, sched_tick_ms, sched_fire_ms, fast, last_tick_ms, running,
     queued, manual, manual_done_ms, completed, tombstone_fire_ms) = meta  # fmt: skip
    return TimerState(
        job_id,
        version,
        job_bytes,
        status,
        sched_tick_ms,
        sched_fire_ms,
        fast,
        last_tick_ms,
        running,
        (queued[0], queued[1]) if queued is not None else None,
        [(entry[0], entry[1]) for entry in manual] if manual else [],
        manual_done_ms,
        completed,
        tombstone_fire_ms,
        None,
        run_at,
    )


def started_is_known(scope: Scope, job_id: bytes, tick_ms: int) -> bool:
    """True when a STARTED of ``tick_ms`` changes nothing: the job is unknown, or
    :func:`load_state` would find the execution in flight already.

    Reads the stored JSON only (no state object): the timer marks what it emits as in
    flight, so this answers the STARTED of nearly every execution. False: load the state.
    """
    data = scope.jobs.get(job_id)
    if data is None:
        return True
    if data[0] != _FORMAT:
        return False  # load_state names the problem
    meta = orjson.loads(data[5 : 5 + int.from_bytes(data[1:5], "big")])
    running: list[int] = meta[7]
    fast_tick_ms, fast_fire_ms = (meta[3], meta[4]) if meta[5] else (None, None)
    if fast_tick_ms is None or fast_fire_ms is None:
        return tick_ms in running
    if not _fast_entry_fired(scope, keys.schedule_key(fast_fire_ms, job_id)):
        return tick_ms in running
    # load_state applies the fire of the fast entry: its tick joins the list as mark_running
    # adds it, the oldest dropping out of a full list.
    if fast_tick_ms not in running:
        running = [*running, fast_tick_ms]
        overflow = len(running) - scope.env.max_running_per_job
        if overflow > 0:
            running = running[overflow:]
    return tick_ms in running


def complete_fired_one_off(
    scope: Scope, job_id: bytes, tick_ms: int, retain: Callable[[Scope, bytes], int]
) -> bool:
    """Apply the final result of ``tick_ms`` to a one-off whose fast entry fired that tick,
    by rewriting the stored JSON in place; False (nothing done) for any other state.

    The case of nearly every finished execution of a herd: the state still says "pending,
    fast", nothing else in flight or queued, the run time is ``tick_ms``. Loading it would
    apply the fire (tick settled, in flight) and the result would end it and complete the
    job: the fields after the status become exactly what :func:`save_state` then writes,
    with ``retain(scope, job_id)`` as the tombstone time, and the bytes before them stay.
    """
    data = scope.jobs.get(job_id)
    if data is None or data[0] != _FORMAT:
        return False
    end = 5 + _UNPACK_SIZE(data, 1)[0]
    # The status ends with the last quote: the tail matched holds none, so the 11 values
    # after it are the last 11 of the 14 stored fields (a 13-field state never matches).
    status_end = data.rfind(b'",', 5, end) + 1
    if not status_end:
        return False
    pending = _pending_fast_one_off(data[status_end:end])
    if pending is None or pending[0] != tick_ms:
        return False
    if not _fast_entry_fired(scope, keys.schedule_key(pending[1], job_id)):
        return False
    tail = _completed_one_off_tail(tick_ms, retain(scope, job_id))
    header = _PACK_HEADER(_FORMAT, status_end - 5 + len(tail))
    scope.jobs.set(job_id, b"".join((header, data[5:status_end], tail, data[end:])))
    return True


@lru_cache(maxsize=4096)
def _pending_fast_one_off(tail: bytes) -> tuple[int, int] | None:
    """(run time, wheel key time) of a one-off waiting on its fast entry for its run time, from
    the stored JSON after its status; None for any other tail.

    Remembered: a herd's one-offs share one tail.
    """
    match = _FAST_ONE_OFF_TAIL.fullmatch(tail)
    if match is None:
        return None
    sched_tick, sched_fire, run_at = match.group(1, 2, 3)
    # Equal bytes in orjson's form only, as a comparison with b"%d" % tick would find.
    if sched_tick != run_at or b"%d" % int(run_at) != run_at:
        return None
    return int(run_at), int(sched_fire)


@lru_cache(maxsize=64)
def _completed_one_off_tail(tick_ms: int, tombstone_fire_ms: int) -> bytes:
    """The JSON after the status of a one-off completed at ``tick_ms``, as save_state writes
    it: no pending entry, ``tick_ms`` settled, nothing in flight, the tombstone time, the run
    time."""
    return b",null,null,false,%d,[],null,[],null,true,%d,%d]" % (
        tick_ms,  # last_tick_ms
        tombstone_fire_ms,
        tick_ms,  # the one-off's run time
    )


def load_state(scope: Scope, job_id: bytes) -> TimerState | None:
    """The job's state with a fire of its fast entry applied, or None for an unknown job."""
    data = scope.jobs.get(job_id)
    if data is None:
        return None
    state = decode_state(data)
    if state.fast and state.sched_fire_ms is not None and state.sched_tick_ms is not None:
        if not _fast_entry_fired(scope, keys.schedule_key(state.sched_fire_ms, job_id)):
            return state
        tick_ms = state.sched_tick_ms
        state.last_tick_ms = tick_ms
        mark_running(scope, state, tick_ms)
        state.sched_tick_ms = state.sched_fire_ms = None
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
    if state.decoded is not None:
        state.one_off_run_at_ms(scope)  # stored with the state: no Job decode per result
    scope.jobs.set(state.key, encode_state(state))


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
    state.sched_tick_ms, state.sched_fire_ms = tick_ms, key_ms
    state.fast = fast_allowed(scope, state)
    if state.fast:
        prefix = scope.env.due_bytes.first_attempt_prefix(job, tick_ms, fire_ms, "SCHEDULE")
        value = _FAST_HEADERS[job["priority"]] + prefix
    else:
        value = _SLOW
    scope.wheel.set(keys.schedule_key(key_ms, state.key), value)


def clear_schedule_entry(scope: Scope, state: TimerState) -> None:
    """Remove the job's pending scheduled entry, if any."""
    if state.sched_fire_ms is not None:
        scope.wheel.delete(keys.schedule_key(state.sched_fire_ms, state.key))
    state.sched_tick_ms = state.sched_fire_ms = None
    state.fast = False


FAST_VALUE_HEADER = 2
"""Bytes before the DueEvent prefix in a fast entry's value: the marker and the priority."""
FAST_MARKER = _FAST[0]
