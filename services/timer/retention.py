"""Retention of finished one-offs: one wheel entry per batch of them, not one per job.

A one-off whose execution has its final outcome is deleted from ``jobs`` (a tombstone) after
``one_off_retention_ms``. The one-offs finished in one scope (one run of ``job-results``
records, one clock reading) share one fire time, so they share one ``TOMBSTONE`` wheel entry
whose value lists their ids: a finished one-off costs no wheel write or changelog record of
its own. The ids are appended in memory and the entry's value is written to the store
transaction once, when the scope's run of records ends (:func:`write_retention`), or before
anything reads the entry: one copy per run instead of one per job (the value grows to ~7 KiB).
An entry holds at most :data:`MAX_JOBS_PER_ENTRY` ids; the next job opens a new one.

The entry is keyed ``tombstone_key(fire_ms, first job id)``; its value is :data:`LISTED`
followed by every listed id as a 2-byte length and its bytes. An entry of one job written
before batching has the value :data:`SINGLE` and stands for its key's job alone.

A listed job is tombstoned only if its state still says completed with this entry's fire
time (``TimerState.tombstone_fire_ms``): a job deleted, re-created or given a new run time
meanwhile is skipped, so commands never need to edit a shared entry (:func:`forget_retention`
removes an entry only when it holds that one job).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from services.timer import keys
from services.timer.scope import Scope
from services.timer.state import load_state, save_state
from services.timer.wheel import place_ms

SINGLE = b"T"
"""Value of an entry for its key's job alone (every entry before batching)."""
LISTED = b"L"
"""First byte of an entry's value listing the ids of its jobs."""
MAX_JOBS_PER_ENTRY = 512
"""Bounds the bytes rewritten per finished job (~7 KiB of ids) and the tombstones one
entry emits in one drain."""

_ID_LENGTH = struct.Struct(">H")


@dataclass(slots=True)
class RetentionBatch:
    """The retention entry the current scope appends finished one-offs to."""

    fire_ms: int
    key: bytes
    # What ``place_ms`` read when it placed the entry: while both are unchanged (a scope of
    # results runs no drain), every job of the scope gets the same fire time.
    placed_under: tuple[bytes | None, int]
    value: bytearray = field(default_factory=lambda: bytearray(LISTED))
    count: int = 0
    unwritten: bool = False  # ids appended since the value was last written to the wheel


def retain(scope: Scope, job_id: bytes) -> int:
    """List the finished one-off ``job_id`` for deletion after the retention; its fire time."""
    batch = scope.retention
    if (
        batch is None
        or batch.count >= MAX_JOBS_PER_ENTRY
        or batch.placed_under[0] is not scope.fired_through
        or batch.placed_under[1] != scope.placement_floor_ms
    ):
        write_retention(scope)
        fire_ms = place_ms(scope, scope.now_ms + scope.env.one_off_retention_ms)
        batch = scope.retention = _open_batch(scope, fire_ms, job_id)
    value = batch.value
    value += _ID_LENGTH.pack(len(job_id))
    value += job_id
    batch.count += 1
    batch.unwritten = True
    return batch.fire_ms


def write_retention(scope: Scope) -> None:
    """Write the ids the scope's open entry gained to the wheel (the end of a run of records,
    or before the entry may be read)."""
    batch = scope.retention
    if batch is not None and batch.unwritten:
        scope.wheel.set(batch.key, bytes(batch.value))
        batch.unwritten = False


def _open_batch(scope: Scope, fire_ms: int, job_id: bytes) -> RetentionBatch:
    key = keys.tombstone_key(fire_ms, job_id)
    batch = RetentionBatch(fire_ms, key, (scope.fired_through, scope.placement_floor_ms))
    # An entry under this key already (the job finished twice within one ms, a re-create
    # between): keep its jobs listed, or they would never be deleted.
    stored = scope.wheel.get(key)
    if stored is not None:
        listed = listed_jobs(key, stored)
        batch.value = bytearray(encode_listed(listed))
        batch.count = len(listed)
    return batch


def encode_listed(job_ids: list[bytes]) -> bytes:
    """The value of an entry listing ``job_ids``."""
    return LISTED + b"".join(_ID_LENGTH.pack(len(job_id)) + job_id for job_id in job_ids)


def listed_jobs(key: bytes, value: bytes) -> list[bytes]:
    """The ids of the jobs a retention entry stands for.

    Any value but a list stands for the key's job alone, as every value did before batching.
    """
    if value[:1] != LISTED:
        return [keys.parse_key(key).job_id]
    job_ids, pos, end = [], 1, len(value)
    while pos + 2 <= end:
        (size,) = _ID_LENGTH.unpack_from(value, pos)
        pos += 2
        job_ids.append(value[pos : pos + size])
        pos += size
    return job_ids


def fire_retention(scope: Scope, key: bytes, value: bytes) -> None:
    """Tombstone every listed job still finished with this entry's fire time; drop the entry.

    ``value`` is the stored one: the caller wrote the scope's pending ids first (a drain).
    """
    fire_ms = keys.parse_key(key).fire_ms
    scope.wheel.delete(key)
    if scope.retention is not None and scope.retention.key == key:
        scope.retention = None
    for job_id in listed_jobs(key, value):
        state = load_state(scope, job_id)
        if state is None or not state.completed or state.tombstone_fire_ms != fire_ms:
            continue  # deleted, re-created or rescheduled since it finished
        # The tombstone comes back on ``jobs`` as input, and that deletes the state.
        state.tombstone_fire_ms = None
        scope.emit_raw(scope.env.jobs_topic, job_id, None)
        save_state(scope, state)


def forget_retention(scope: Scope, job_id: bytes, fire_ms: int) -> None:
    """The job no longer waits for its deletion at ``fire_ms``: drop the entry if it is the
    job's alone (an entry shared with others stays; its fire skips this job)."""
    write_retention(scope)
    key = keys.tombstone_key(fire_ms, job_id)
    value = scope.wheel.get(key)
    if value is None:
        return
    if value == SINGLE or listed_jobs(key, value) == [job_id]:
        scope.wheel.delete(key)
        if scope.retention is not None and scope.retention.key == key:
            scope.retention = None
