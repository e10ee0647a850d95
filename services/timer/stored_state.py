"""The record the timer keeps per job (:class:`TimerState`) and its bytes in the ``jobs`` store.

The record is ``schemas/timer_state.v2.avsc``; :class:`TimerState` has one attribute per
field, named as the schema names it (nested records as tuples), plus what is not stored.
v1 states (no ``sched_rank``) still load, with NO_RANK: their pending wheel entry has the
legacy key without a rank (``keys.py``). The rank is stored before ``job_bytes``, in the
head, read by :meth:`StoredStates.rank_and_tail_at`: it differs per job, and the tail a
herd's states share must stay shared.
:class:`StoredStates` writes it in the codec's single-object encoding, so the fingerprint
tells schema versions apart and a later version adds fields, with code generated from the
schema (``record_bytes.py``): exact or unused.

*The tail.* The schema puts every field a ``job-results`` record reads or changes after
``job_bytes``: :meth:`StoredStates.tail_at` finds where they start without decoding the
job's id or Job bytes (it steps over the fields before, as their types in the schema say),
and :meth:`~StoredStates.tail_fields` and :meth:`~StoredStates.encode_tail` read and write
them alone (``state.py``'s shortcuts). A decoded state's tail is kept by its bytes: the
states of a herd's one-offs share theirs.

*Format 1.* Before the schema, a state was the byte 1, a 4-byte big-endian length, a JSON
list of the fields by position, then the Job bytes (the one-off run time, 14th in the list,
came later; a state without it derives it from the Job). Such states, in RocksDB and in the
changelogs a rolling upgrade restores, still load; every save writes the record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from services.timer.keys import NO_RANK
from services.timer.record_bytes import RecordBytes
from streams.avro_binary import read_long
from streams.codec import HEADER_LEN, Codec, RecordKind
from streams.exceptions import DecodeError
from streams.fast_path import FastPath

if TYPE_CHECKING:
    from services.timer.scope import Scope

TAIL_AFTER = "job_bytes"
"""The schema's fields after this one are those a job-results record reads or changes."""
RANK_FIELD = "sched_rank"
"""Stored before the tail: ranks differ per job, tails are shared (a herd's)."""
_FORMAT_1 = b"\x01"


@dataclass(slots=True)
class TimerState:
    """What the timer keeps per job: the fields of ``schemas/timer_state.v2.avsc`` in its
    order but for ``sched_rank`` (last here, so that states are built as before it came:
    :func:`state_of_fields` builds one from the schema's order), their meaning in the
    schema's docs, then the Job decoded from ``job_bytes``, once per load."""

    job_id: str
    version: int
    status: str
    job_bytes: bytes
    one_off_run_at_ms: int | None  # derived from job_bytes: see one_off_run_at_ms_of
    sched_tick_ms: int | None = None
    sched_fire_ms: int | None = None
    fast: bool = False
    last_tick_ms: int | None = None
    running: list[int] = field(default_factory=list)
    queued: tuple[int, str] | None = None  # (tick, trigger)
    manual: list[tuple[int, int]] = field(default_factory=list)  # (key ms, tick)
    manual_done_ms: int | None = None
    completed: bool = False
    tombstone_fire_ms: int | None = None
    # v2, stored before job_bytes (see state_of_fields); NO_RANK: a legacy wheel key.
    sched_rank: int = NO_RANK
    decoded: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of_job(cls, value: bytes, job: dict[str, Any]) -> TimerState:
        """The state of a job first seen as ``job``, decoded from ``value``."""
        state = cls(job["job_id"], job["version"], job["status"], value, one_off_run_at_ms_of(job))
        state.decoded = job
        return state

    def accept_job(self, value: bytes, job: dict[str, Any]) -> None:
        """Take ``job``, decoded from ``value``, as the job's definition from now on."""
        self.version, self.status, self.job_bytes = job["version"], job["status"], value
        self.one_off_run_at_ms = one_off_run_at_ms_of(job)
        self.decoded = job

    def job(self, scope: Scope) -> dict[str, Any]:
        """The Job record as a dict, decoded once per load."""
        if self.decoded is None:
            self.decoded = scope.env.decode_job(self.job_bytes)
        return self.decoded

    @property
    def key(self) -> bytes:
        return self.job_id.encode()


def state_of_fields(
    job_id: str,
    version: int,
    status: str,
    sched_rank: int,
    job_bytes: bytes,
    one_off_run_at_ms: int | None,
    sched_tick_ms: int | None,
    sched_fire_ms: int | None,
    fast: bool,
    last_tick_ms: int | None,
    running: list[int],
    queued: tuple[int, str] | None,
    manual: list[tuple[int, int]],
    manual_done_ms: int | None,
    completed: bool,
    tombstone_fire_ms: int | None,
) -> TimerState:
    """A :class:`TimerState` of the schema's fields in the schema's order (the generated
    decoder's ``make``)."""
    state = TimerState(
        job_id,
        version,
        status,
        job_bytes,
        one_off_run_at_ms,
        sched_tick_ms,
        sched_fire_ms,
        fast,
        last_tick_ms,
        running,
        queued,
        manual,
        manual_done_ms,
        completed,
        tombstone_fire_ms,
    )
    state.sched_rank = sched_rank
    return state


def one_off_run_at_ms_of(job: dict[str, Any]) -> int | None:
    """The run time of a one-off Job, None for any other (cron, dependent) job."""
    run_at_ms: int | None = job["run_at_ms"] if job["cron"] is None else None
    return run_at_ms


class StoredStates:
    """Reads and writes the stored bytes of :class:`TimerState` for one codec."""

    def __init__(self, codec: Codec) -> None:
        self.record = RecordBytes(
            codec, RecordKind.TIMER_STATE, state_of_fields, memo_after=TAIL_AFTER
        )
        tail_from = self.record.names.index(TAIL_AFTER) + 1
        head = _sized_or_varint(self.record.schema["fields"][:tail_from])
        self._head = head or ()
        self._rank_at = self.record.names.index(RANK_FIELD)
        self._tail_reader, self._tail_writer = self.record.fields(tail_from)
        self._header = self.record.header
        # The tail is read only in bytes the generated code is proven to read.
        self.shortcuts = FastPath(
            "the timer's results shortcuts (services/timer/state.py)",
            self.record.fast and head is not None,
            "the generated state code is off, or a field before the tail is not a long, "
            "enum, string or bytes",
        )

    def encode(self, state: TimerState) -> bytes:
        """The stored form of ``state``."""
        return self.record.encode(state)

    def decode(self, data: bytes, decode_job: Callable[[bytes], dict[str, Any]]) -> TimerState:
        """The state in ``data``, also in format 1 (``decode_job`` derives what it lacks)."""
        if data[:1] == _FORMAT_1:
            try:
                return _decode_format_1(data, decode_job)
            except (ValueError, TypeError, IndexError) as exc:  # orjson's error is a ValueError
                raise DecodeError(
                    f"timer state of {len(data)} bytes in format 1 does not parse ({exc}): corrupt"
                ) from exc
        return self.record.decode(data)

    def tail_at(self, data: bytes) -> int:
        """Where the tail starts in ``data``; -1 when it cannot say (format 1, another schema
        version, damaged bytes): load the state instead."""
        return self.rank_and_tail_at(data)[1]

    def rank_and_tail_at(self, data: bytes) -> tuple[int, int]:
        """The stored ``sched_rank`` (read on the way) and :meth:`tail_at`; (NO_RANK, -1)
        when it cannot say."""
        if not self.shortcuts.enabled or not data.startswith(self._header):
            return NO_RANK, -1
        pos = HEADER_LEN
        rank = NO_RANK
        rank_at = self._rank_at
        try:
            for index, sized in enumerate(self._head):  # a varint, or a length and its bytes
                byte = data[pos]
                if byte < 0x80:
                    value = (byte >> 1) ^ -(byte & 1)
                    pos += 1
                elif data[pos + 1] < 0x80:  # e.g. the Job's length
                    value = (byte & 0x7F) | data[pos + 1] << 7
                    value = (value >> 1) ^ -(value & 1)
                    pos += 2
                else:
                    value, pos = read_long(data, pos)
                if sized:
                    if value < 0:
                        return NO_RANK, -1
                    pos += value
                elif index == rank_at:
                    rank = value
        except (IndexError, ValueError):
            return NO_RANK, -1
        return (rank, pos) if pos <= len(data) else (NO_RANK, -1)

    def tail_fields(self, tail: bytes) -> dict[str, Any] | None:
        """The fields in ``tail`` (the bytes from :meth:`tail_at`) by name; None when the
        generated code does not read them exactly (load the state instead)."""
        try:
            fields: dict[str, Any] = self._tail_reader.read(tail)
        except (IndexError, ValueError):
            return None
        return fields

    def encode_tail(self, fields: dict[str, Any]) -> bytes:
        """The tail of a state whose tail fields are ``fields``."""
        return self._tail_writer.encode(fields)


def _sized_or_varint(fields: list[dict[str, Any]]) -> tuple[bool, ...] | None:
    """For each field, True when its type is a length and that many bytes (string, bytes),
    False when it is one varint (long, int, enum); None when another type is among them."""
    layout = []
    for schema_field in fields:
        avro_type = schema_field["type"]
        kind = avro_type["type"] if isinstance(avro_type, dict) else avro_type
        if kind not in ("string", "bytes", "long", "int", "enum"):
            return None
        layout.append(kind in ("string", "bytes"))
    return tuple(layout)


def _decode_format_1(data: bytes, decode_job: Callable[[bytes], dict[str, Any]]) -> TimerState:
    """A state stored before the schema (format 1: see the module docstring)."""
    end = 5 + int.from_bytes(data[1:5], "big")
    job_bytes = data[end:]
    (job_id, version, status, sched_tick_ms, sched_fire_ms, fast, last_tick_ms, running,
     queued, manual, manual_done_ms, completed, tombstone_fire_ms, *run_at) = orjson.loads(
        data[5:end]
    )  # fmt: skip
    decoded = None
    if run_at:
        one_off_run_at_ms = run_at[0]
    else:  # stored before the run time was
        decoded = decode_job(job_bytes)
        one_off_run_at_ms = one_off_run_at_ms_of(decoded)
    state = state_of_fields(
        job_id,
        version,
        status,
        NO_RANK,  # format 1 predates ranks: its wheel entry has the legacy key
        job_bytes,
        one_off_run_at_ms,
        sched_tick_ms,
        sched_fire_ms,
        fast,
        last_tick_ms,
        running,
        (queued[0], queued[1]) if queued is not None else None,
        [(entry[0], entry[1]) for entry in manual],
        manual_done_ms,
        completed,
        tombstone_fire_ms,
    )
    state.decoded = decoded
    return state
