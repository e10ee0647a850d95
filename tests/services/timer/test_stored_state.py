"""The stored form of the timer's per-job state: the record of ``timer_state.v1.avsc``.

Every field round-trips and the bytes are the codec's (so the codec, and any later version
of the schema, reads them); states stored in format 1 (the JSON list before the schema)
still load; the tail the results shortcuts read is the fields after the Job bytes; and the
generated code is exact or unused.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import re
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import SCHEMA_DIR
from services.timer import record_bytes
from services.timer.keys import NO_RANK
from services.timer.record_bytes import RecordBytes
from services.timer.stored_state import StoredStates, TimerState
from streams.avro_writer import GeneratedWriter, generate_writer
from streams.codec import Codec, RecordKind
from streams.exceptions import DecodeError
from streams.records import Job

CODEC = Codec.from_directory()
STATES = StoredStates(CODEC)
T0 = 1_790_000_000_000

ANY_LONGS = st.integers(-(2**63), 2**63 - 1) | st.integers(T0 - 10**6, T0 + 10**6)
READABLE_LONGS = st.integers(-(2**62), 2**62 - 1) | st.integers(T0 - 10**6, T0 + 10**6)
"""Longs the generated decoder reads itself (varints of up to 9 bytes)."""


def states_with(longs: st.SearchStrategy[int]) -> st.SearchStrategy[TimerState]:
    """Any TimerState whose longs are drawn from ``longs``."""
    optional_longs = st.none() | longs
    texts = st.text(max_size=12)
    return st.builds(
        TimerState,
        job_id=texts,
        version=longs,
        status=texts,
        job_bytes=st.binary(max_size=40),
        one_off_run_at_ms=optional_longs,
        sched_tick_ms=optional_longs,
        sched_fire_ms=optional_longs,
        fast=st.booleans(),
        last_tick_ms=optional_longs,
        running=st.lists(longs, max_size=3),
        queued=st.none() | st.tuples(longs, texts),
        manual=st.lists(st.tuples(longs, longs), max_size=3),
        manual_done_ms=optional_longs,
        completed=st.booleans(),
        tombstone_fire_ms=optional_longs,
        sched_rank=longs,
    )


timer_states = states_with(ANY_LONGS)


def record_of(state: TimerState) -> dict[str, Any]:
    """The state as the codec reads and writes a TimerState record (written out by hand)."""
    queued = state.queued
    return {
        "job_id": state.job_id,
        "version": state.version,
        "status": state.status,
        "job_bytes": state.job_bytes,
        "one_off_run_at_ms": state.one_off_run_at_ms,
        "sched_tick_ms": state.sched_tick_ms,
        "sched_fire_ms": state.sched_fire_ms,
        "fast": state.fast,
        "last_tick_ms": state.last_tick_ms,
        "running": state.running,
        "queued": None if queued is None else {"tick_ms": queued[0], "trigger": queued[1]},
        "manual": [{"key_ms": key_ms, "tick_ms": tick_ms} for key_ms, tick_ms in state.manual],
        "manual_done_ms": state.manual_done_ms,
        "completed": state.completed,
        "tombstone_fire_ms": state.tombstone_fire_ms,
        "sched_rank": state.sched_rank,
    }


def format_1_bytes(state: TimerState, *, with_run_at: bool = True) -> bytes:
    """``state`` as the timer stored it before ``timer_state.v1.avsc`` (format 1): the byte 1,
    a 4-byte length, the JSON list of the fields by position, the Job bytes; the one-off run
    time came last, and only in states written after it was added."""
    fields: tuple[Any, ...] = (
        state.job_id, state.version, state.status, state.sched_tick_ms, state.sched_fire_ms,
        state.fast, state.last_tick_ms, state.running, state.queued, state.manual,
        state.manual_done_ms, state.completed, state.tombstone_fire_ms,
    )  # fmt: skip
    if with_run_at:
        fields += (state.one_off_run_at_ms,)
    body = orjson.dumps(fields)
    return b"\x01" + len(body).to_bytes(4, "big") + body + state.job_bytes


def refuse_job_decoding(data: bytes) -> dict[str, Any]:
    raise AssertionError("the Job was decoded")


@settings(max_examples=400, deadline=None)
@given(state=timer_states)
def test_every_field_round_trips_in_the_codecs_encoding(state: TimerState) -> None:
    data = STATES.encode(state)
    assert data == CODEC.encode(RecordKind.TIMER_STATE, record_of(state))
    assert CODEC.decode(RecordKind.TIMER_STATE, data) == record_of(state)
    assert STATES.decode(data, refuse_job_decoding) == state


def test_the_state_has_an_attribute_for_each_field_of_the_schema_and_no_other() -> None:
    schema = json.loads((SCHEMA_DIR / "timer_state.v2.avsc").read_text())
    stored = [name for name in TimerState.__dataclass_fields__ if name != "decoded"]
    assert sorted(stored) == sorted(f["name"] for f in schema["fields"])
    assert STATES.record.fast  # the generated code serves


def test_a_long_the_generated_code_leaves_to_the_codec_still_reads() -> None:
    """A 10-byte varint (a value past 2**62): the decoder refuses it, the codec reads it."""
    states = StoredStates(CODEC)
    state = TimerState("big", 2**63 - 1, "SCHEDULED", b"job", -(2**63), running=[2**62])
    assert states.decode(states.encode(state), refuse_job_decoding) == state
    assert states.record.fast_path.fallbacks == 1


# --- format 1: states stored before the schema still load ------------------------------

JOB = Job(
    job_id="old-1",
    version=2,
    handler="examples.noop",
    run_at_ms=T0 + 1_000,
    created_at_ms=T0,
    updated_at_ms=T0,
)
JOB_BYTES = CODEC.encode(RecordKind.JOB, JOB.to_avro())
# Written by the timer of commit 18188bf (services/timer/state.py, encode_state): a pending
# fast one-off before the run time was stored (13 fields), and a state with every field set.
OLD_13 = b'["old-1",2,"SCHEDULED",1790000001000,1790000001000,true,null,[],null,[],null,false,null]'
OLD_14 = (
    b'["old-1",2,"SCHEDULED",1790000001000,1790000001000,false,1789999999995,[1789999999995],'
    b'[1790000000007,"MANUAL"],[[1790000000008,1790000000009]],1790000000009,false,null,'
    b"1790000001000]"
)


def _format_1(body: bytes) -> bytes:
    return b"\x01" + len(body).to_bytes(4, "big") + body + JOB_BYTES


def test_a_format_1_state_loads_with_every_field() -> None:
    state = STATES.decode(_format_1(OLD_14), refuse_job_decoding)
    assert state == TimerState(
        job_id="old-1",
        version=2,
        status="SCHEDULED",
        job_bytes=JOB_BYTES,
        one_off_run_at_ms=T0 + 1_000,
        sched_tick_ms=T0 + 1_000,
        sched_fire_ms=T0 + 1_000,
        fast=False,
        last_tick_ms=T0 - 5,
        running=[T0 - 5],
        queued=(T0 + 7, "MANUAL"),
        manual=[(T0 + 8, T0 + 9)],
        manual_done_ms=T0 + 9,
    )
    # Saved again, it is the record.
    assert STATES.decode(STATES.encode(state), refuse_job_decoding) == state
    assert STATES.encode(state)[:2] == b"\xc3\x01"


def test_a_format_1_state_without_the_run_time_derives_it_from_its_job_once() -> None:
    decoded: list[bytes] = []

    def decode_job(data: bytes) -> dict[str, Any]:
        decoded.append(data)
        return CODEC.decode(RecordKind.JOB, data)

    state = STATES.decode(_format_1(OLD_13), decode_job)
    assert decoded == [JOB_BYTES]
    assert state.one_off_run_at_ms == T0 + 1_000 and state.fast and state.running == []
    assert state.decoded == CODEC.decode(RecordKind.JOB, JOB_BYTES)  # not decoded again


@settings(max_examples=200, deadline=None)
@given(state=timer_states)
def test_format_1_as_written_then_loads_as_the_same_state(state: TimerState) -> None:
    # Format 1 has no rank: its pending entry has the legacy key (services/timer/keys.py).
    legacy = dataclasses.replace(state, sched_rank=NO_RANK)
    assert STATES.decode(format_1_bytes(state), refuse_job_decoding) == legacy


# --- the tail: the fields after the Job bytes, read and written alone --------------------


@settings(max_examples=300, deadline=None)
@given(state=states_with(READABLE_LONGS))
def test_the_tail_is_the_fields_after_the_job_bytes(state: TimerState) -> None:
    data = STATES.encode(state)
    tail_at = STATES.tail_at(data)
    head = CODEC.encode(RecordKind.TIMER_STATE, record_of(state))
    assert data[:tail_at].endswith(state.job_bytes) and tail_at < len(data) == len(head)
    fields = STATES.tail_fields(data[tail_at:])
    assert fields is not None
    names = list(STATES.record.names)
    assert list(fields) == names[names.index("job_bytes") + 1 :]
    assert fields == {name: getattr(state, name) for name in fields}
    assert STATES.encode_tail(fields) == data[tail_at:]


def test_the_tail_is_not_read_in_format_1_garbage_or_another_fingerprint() -> None:
    state = TimerState("t", 1, "SCHEDULED", b"job", None)
    data = STATES.encode(state)
    assert STATES.tail_at(format_1_bytes(state)) == -1
    assert STATES.tail_at(data[:12]) == -1  # cut inside the job id
    other = bytearray(data)
    other[2] ^= 1
    assert STATES.tail_at(bytes(other)) == -1
    assert STATES.tail_fields(data[STATES.tail_at(data) :] + b"\x00") is None  # bytes left
    big = STATES.encode(TimerState("t", 1, "SCHEDULED", b"job", None, last_tick_ms=2**62))
    assert STATES.tail_fields(big[STATES.tail_at(big) :]) is None  # a 10-byte varint


# --- versions, garbage, and the generated code off ---------------------------------------


def _shipped() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMA_DIR / "timer_state.v2.avsc").read_text())
    return schema


def _codec_with(timer_state_versions: dict[int, dict[str, Any]], **pins: Any) -> Codec:
    schemas: dict[RecordKind, dict[int, Any]] = {
        kind: {1: json.loads((SCHEMA_DIR / f"{kind.value}.v1.avsc").read_text())}
        for kind in RecordKind
    }
    schemas[RecordKind.TIMER_STATE] = timer_state_versions
    return Codec(schemas, **pins)


def test_a_state_written_under_an_older_schema_version_reads_through_the_codec() -> None:
    """A later version adds a field with a default: states stored before it still load."""
    newer = copy.deepcopy(_shipped())
    newer["fields"].append({"name": "note", "type": "string", "default": "none"})
    names = [f["name"] for f in newer["fields"]]

    def make(*values: Any) -> SimpleNamespace:
        return SimpleNamespace(**dict(zip(names, values, strict=True)))

    codec = _codec_with({2: _shipped(), 3: newer})
    upgraded = RecordBytes(codec, RecordKind.TIMER_STATE, make)
    assert upgraded.fast
    state = TimerState("v", 1, "PAUSED", b"job", None, running=[T0], queued=(T0, "MANUAL"))
    read = upgraded.decode(STATES.encode(state))
    assert read == SimpleNamespace(**{**record_of(state), "queued": (T0, "MANUAL")}, note="none")
    assert upgraded.fast_path.fallbacks == 1  # read by the codec, which resolves versions
    written = upgraded.encode(read)
    assert written[2:10] != STATES.encode(state)[2:10]  # another fingerprint
    assert upgraded.decode(written) == read and upgraded.fast_path.fallbacks == 1
    with pytest.raises(DecodeError, match="unknown writer schema fingerprint"):
        STATES.decode(written, refuse_job_decoding)  # deploy readers first, as for any record


def test_a_reader_pinned_to_another_version_than_the_writer_is_refused() -> None:
    newer = copy.deepcopy(_shipped())
    newer["fields"].append({"name": "note", "type": "string", "default": ""})
    codec = _codec_with({2: _shipped(), 3: newer}, writer_versions={RecordKind.TIMER_STATE: 2})
    with pytest.raises(Exception, match="pin both to one version"):
        StoredStates(codec)


@settings(max_examples=300, deadline=None)
@given(state=timer_states, cut=st.integers(0, 400), flip=st.integers(0, 400))
def test_damaged_bytes_are_refused_as_the_codec_refuses_them(
    state: TimerState, cut: int, flip: int
) -> None:
    data = bytearray(STATES.encode(state))
    if flip < len(data):
        data[flip] ^= 0x41
    damaged = bytes(data[: max(cut, 1)])

    def decode(raw: bytes) -> TimerState:
        return STATES.decode(raw, refuse_job_decoding)

    try:
        expected = CODEC.decode(RecordKind.TIMER_STATE, damaged)
    except DecodeError as refused:
        with pytest.raises(DecodeError) as raised:
            decode(damaged)
        if damaged[:1] != b"\x01":  # format 1 is read by its own reader
            # The same message, but for the address of the codec's buffer in an EOFError's.
            assert _no_address(str(raised.value)) == _no_address(str(refused))
        return
    assert record_of(decode(damaged)) == expected


def _no_address(message: str) -> str:
    return re.sub(r" at 0x[0-9a-f]+", "", message)


def test_generated_code_that_disagrees_with_the_codec_is_not_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def one_byte_more(schema: Any, **options: Any) -> GeneratedWriter:
        writer = real(schema, **options)
        return GeneratedWriter(
            lambda record: writer.encode(record) + b"\x00", writer.to_record, writer.source
        )

    real = generate_writer  # what record_bytes calls
    monkeypatch.setattr(record_bytes, "generate_writer", one_byte_more)
    with caplog.at_level(logging.WARNING, logger="streams.fast_path"):
        states = StoredStates(CODEC)
    assert not states.record.fast
    assert "the generated timer_state code (services/timer/record_bytes.py) is off" in caplog.text
    state = TimerState("off", 1, "SCHEDULED", b"job", T0, running=[T0], manual=[(T0, T0)])
    assert states.encode(state) == STATES.encode(state)  # the codec's bytes
    assert states.decode(STATES.encode(state), refuse_job_decoding) == state
    assert states.tail_at(STATES.encode(state)) == -1  # no shortcuts either
