"""The executor's fastavro-free hot path equals fastavro: DueEvent reading, result splicing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import SCHEMA_DIR
from services.executor.dedup import DedupEntry, Progress, entry_after, skip_reason
from services.executor.due_view import DueEventMapping, DueReader, DueView, decode_long
from services.executor.outcomes import attempt_outputs, started_result
from services.executor.result_bytes import AvroClock, ResultEncoder
from services.executor.runner import RunOutcome, RunStatus
from services.executor.runs import succeeded_entry
from streams.avro_binary import avro_long
from streams.codec import Codec, RecordKind
from streams.exceptions import DecodeError, InvalidRecordError
from streams.records import ExecutionStatus, Trigger
from streams.topics import Priority
from tests.streams.codec_testkit import INVALID, checked, codec_without_bounds

from .test_service_kit import due_event

# The shape of records over every Avro value: no bounds (tests at the end check those).
CODEC = codec_without_bounds()
READER = DueReader(CODEC)
CHECKED_CODEC = Codec.from_directory()
CHECKED_READER = DueReader(CHECKED_CODEC)
WORKER = "executor-wörker-1"
ENCODER = ResultEncoder(CODEC, WORKER)

longs = st.integers(-(2**63), 2**63 - 1)
ints = st.integers(-(2**31), 2**31 - 1)
# Lengths under and over 64 bytes (one- and two-byte Avro lengths), any unicode.
texts = st.text(max_size=90)
attempt_outcomes = st.fixed_dictionaries(
    {
        "attempt": ints,
        "status": st.sampled_from([s.value for s in ExecutionStatus]),
        "error": st.none() | texts,
        "worker_id": st.none() | texts,
        "started_at_ms": st.none() | longs,
        "finished_at_ms": st.none() | longs,
    }
)


def due_events(history: st.SearchStrategy[list[dict[str, Any]]]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries(
        {
            "execution_id": texts,
            "job_id": texts,
            "job_version": longs,
            "scheduled_for_ms": longs,
            "fire_at_ms": longs,
            "attempt": ints,
            "handler": texts,
            "payload": st.binary(max_size=200),
            "timeout_ms": longs,
            "priority": st.sampled_from([p.value for p in Priority]),
            "retry": st.fixed_dictionaries(
                {
                    "max_attempts": ints,
                    "initial_backoff_ms": longs,
                    "multiplier": st.floats(),
                    "max_backoff_ms": longs,
                    "jitter_ratio": st.floats(),
                }
            ),
            "trigger": st.sampled_from([t.value for t in Trigger]),
            "tenant": texts,
            "emitted_at_ms": longs,
            "history": history,
        }
    )


def expected_view(value: bytes) -> DueView | None:
    """What fastavro reads, as a view; None when it refuses the bytes."""
    try:
        record = CODEC.decode(RecordKind.DUE_EVENT, value)
    except DecodeError:
        return None
    return READER.from_record(record, value)._replace(record=None)


def read_view(value: bytes) -> DueView | None:
    try:
        return READER.read(value)._replace(record=None)
    except DecodeError:
        return None


def test_the_fast_parser_is_on_for_the_current_schema() -> None:
    assert READER.fast
    assert ENCODER.spliced


@pytest.mark.parametrize("length", [2**63 - 1, 2**62, 10_000])
def test_a_string_length_past_the_record_is_refused_not_a_crash(length: int) -> None:
    """Found by the corrupt-records property: a 10-byte length before a field the parser
    matches by regex made it raise OverflowError (not a DecodeError), which would have
    stopped the executor on one poison record."""
    event = due_event("corrupt-length")
    value = CODEC.encode(RecordKind.DUE_EVENT, event)
    at = 10 + 1 + len(event["execution_id"])  # header, the id's length and bytes: job_id's length
    assert value[at] == len(event["job_id"]) * 2  # one varint byte (zig-zag)
    corrupt = value[:at] + avro_long(length) + value[at + 1 :]
    assert read_view(corrupt) is None
    assert expected_view(corrupt) is None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event=due_events(st.just([])))
def test_fast_reading_equals_fastavro(event: dict[str, Any]) -> None:
    value = CODEC.encode(RecordKind.DUE_EVENT, event)
    view = READER.read(value)
    assert view.record is None  # the fast parser took it
    assert view._replace(record=None) == expected_view(value)
    assert CODEC.encode(RecordKind.DUE_EVENT, READER.record(view)) == value  # NaN != NaN
    assert view.execution_id == event["execution_id"] and view.key == event["job_id"].encode()
    assert (view.scheduled_for_ms, view.attempt, view.timeout_ms, view.fire_at_ms) == (
        event["scheduled_for_ms"], event["attempt"], event["timeout_ms"], event["fire_at_ms"]
    )  # fmt: skip
    assert view.handler.decode() == event["handler"] and view.payload == event["payload"]
    assert view.priority is Priority(event["priority"])
    assert decode_long(view.raw_emitted_at_ms) == event["emitted_at_ms"]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event=due_events(st.lists(attempt_outcomes, min_size=1, max_size=3)))
def test_an_attempt_history_is_read_by_the_codec(event: dict[str, Any]) -> None:
    value = CODEC.encode(RecordKind.DUE_EVENT, event)
    view = READER.read(value)
    assert view.record is not None
    assert CODEC.encode(RecordKind.DUE_EVENT, view.record) == value
    assert view._replace(record=None) == expected_view(value)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event=due_events(st.just([])), data=st.data())
def test_corrupt_records_are_refused_or_read_exactly_as_fastavro_does(
    event: dict[str, Any], data: st.DataObject
) -> None:
    value = bytearray(CODEC.encode(RecordKind.DUE_EVENT, event))
    kind = data.draw(st.sampled_from(["flip", "truncate", "append", "splice", "garbage"]))
    if kind == "flip":
        for _ in range(data.draw(st.integers(1, 3))):
            at = data.draw(st.integers(10, len(value) - 1))
            value[at] = data.draw(st.integers(0, 255))
    elif kind == "truncate":
        del value[data.draw(st.integers(0, len(value) - 1)) :]
    elif kind == "append":
        value += data.draw(st.binary(min_size=1, max_size=12))
    elif kind == "splice":
        at = data.draw(st.integers(10, len(value)))
        value[at:at] = data.draw(st.binary(min_size=1, max_size=12))
    else:
        value[10:] = data.draw(st.binary(max_size=120))
    raw = bytes(value)
    view = read_view(raw)
    assert view == expected_view(raw)
    if view is not None:  # a result spliced from it is what fastavro writes
        record = CODEC.decode(RecordKind.DUE_EVENT, raw)
        assert ENCODER.started(view, avro_long(7)) == encoded(started_result(record, WORKER, 7))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event=due_events(st.just([])), data=st.data())
def test_records_after_a_similar_one_are_read_exactly_as_fastavro_does(
    event: dict[str, Any], data: st.DataObject
) -> None:
    """The reader reuses runs of fields it parsed in the record before (same bytes at the
    same place): a record that shares them, or differs from them anywhere, reads as fastavro."""
    reader = DueReader(CODEC)
    first = CODEC.encode(RecordKind.DUE_EVENT, event)
    assert reader.read(first)._replace(record=None) == expected_view(first)
    other = dict(event)
    for name in data.draw(st.sets(st.sampled_from(sorted(event)), max_size=3)):
        other[name] = data.draw(due_events(st.just([])))[name]
    value = bytearray(CODEC.encode(RecordKind.DUE_EVENT, other))
    kind = data.draw(st.sampled_from(["same", "flip", "truncate", "append"]))
    if kind == "flip":
        at = data.draw(st.integers(10, len(value) - 1))
        value[at] = data.draw(st.integers(0, 255))
    elif kind == "truncate":
        del value[data.draw(st.integers(10, len(value) - 1)) :]
    elif kind == "append":
        value += data.draw(st.binary(min_size=1, max_size=12))
    raw = bytes(value)
    try:
        view: DueView | None = reader.read(raw)._replace(record=None)
    except DecodeError:
        view = None
    assert view == expected_view(raw)


def _small_event(**fields: Any) -> dict[str, Any]:
    record = {
        "execution_id": "j@1", "job_id": "j", "job_version": 3, "scheduled_for_ms": 1,
        "fire_at_ms": 2, "attempt": 2, "handler": "a.b", "timeout_ms": 50,
        "emitted_at_ms": 1_780_000_000_000, **fields,
    }  # fmt: skip
    return CODEC.decode(RecordKind.DUE_EVENT, CODEC.encode(RecordKind.DUE_EVENT, record))


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"\xc3\x01",
        b"\x00" * 40,
        CODEC.encode(RecordKind.EXECUTION_RESULT, started_result(_small_event(), "w", 1)),
    ],
)
def test_non_due_events_raise_the_codecs_decode_error(value: bytes) -> None:
    with pytest.raises(DecodeError):
        READER.read(value)


def encoded(result: dict[str, Any]) -> bytes:
    return CODEC.encode(RecordKind.EXECUTION_RESULT, result)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event=due_events(st.just([])), started_ms=longs, finished_ms=longs)
def test_spliced_results_equal_fastavro(
    event: dict[str, Any], started_ms: int, finished_ms: int
) -> None:
    value = CODEC.encode(RecordKind.DUE_EVENT, event)
    view, record = READER.read(value), CODEC.decode(RecordKind.DUE_EVENT, value)
    started, finished = avro_long(started_ms), avro_long(finished_ms)
    assert ENCODER.started(view, started) == encoded(started_result(record, WORKER, started_ms))
    outcome = RunOutcome(RunStatus.SUCCEEDED, None, False, None, started_ms, finished_ms)
    success = attempt_outputs(record, outcome, WORKER, finished_ms).result
    assert ENCODER.succeeded(view, started, finished) == encoded(success)
    # A view made from a decoded record (another writer schema) splices the same bytes.
    other = READER.from_record(record, value)
    assert ENCODER.started(other, started) == ENCODER.started(view, started)


def test_another_writer_schema_turns_the_fast_parser_off_and_still_reads() -> None:
    v1 = json.loads((SCHEMA_DIR / "due_event.v1.avsc").read_text())
    v2 = {**v1, "fields": [*v1["fields"], {"name": "region", "type": "string", "default": ""}]}
    schemas: dict[RecordKind, dict[int, Any]] = {
        kind: {1: json.loads((SCHEMA_DIR / f"{kind.value}.v1.avsc").read_text())}
        for kind in RecordKind
    }
    schemas[RecordKind.DUE_EVENT] = {1: v1, 2: v2}
    newer = Codec(schemas)
    reader = DueReader(newer)
    assert not reader.fast
    event = _small_event()
    older, current = (CODEC.encode(RecordKind.DUE_EVENT, event),
                      newer.encode(RecordKind.DUE_EVENT, {**event, "region": "eu"}))  # fmt: skip
    for value in (older, current):
        view = reader.read(value)
        assert view.record is not None and view.execution_id == "j@1" and view.attempt == 2
        assert ENCODER.started(view, avro_long(5)) == encoded(started_result(event, WORKER, 5))


@pytest.mark.parametrize("trigger", ["SCHEDULE", "REPLAY", "RETRY"])
@pytest.mark.parametrize(
    "previous",
    [
        None,
        DedupEntry(Progress.RETRY_SCHEDULED, 1, 0),
        DedupEntry(Progress.DEAD_LETTER, 3, 5),
        DedupEntry(Progress.SUCCEEDED, 2, 0),
    ],
)
def test_dedup_rules_read_the_view_as_the_decoded_record(
    trigger: str, previous: DedupEntry | None
) -> None:
    event = _small_event(trigger=trigger)
    mapping = DueEventMapping(READER.read(CODEC.encode(RecordKind.DUE_EVENT, event)), READER)
    assert skip_reason(previous, mapping) == skip_reason(previous, event)
    for progress in Progress:
        assert entry_after(mapping, progress, previous) == entry_after(event, progress, previous)
    assert dict(mapping) == event and len(mapping) == len(event)
    entry = succeeded_entry(READER.read(CODEC.encode(RecordKind.DUE_EVENT, event)), previous)
    assert entry == entry_after(event, Progress.SUCCEEDED, previous)
    assert type(entry) is DedupEntry and entry.progress is Progress.SUCCEEDED


def test_the_clock_encodes_each_millisecond_once() -> None:
    clock = AvroClock()
    raw = clock.now()
    assert raw == avro_long(clock.ms) and decode_long(raw) == clock.ms
    again = clock.now()
    assert again is raw or clock.ms > decode_long(raw)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=st.lists(due_events(st.just([]) | st.lists(attempt_outcomes, max_size=2)), max_size=4)
)
def test_the_reader_refuses_exactly_what_breaks_the_codecs_bounds(
    events: list[dict[str, Any]],
) -> None:
    """Hostile but well-formed DueEvents (every Avro value, often out of bounds): the fast
    reader, with its cached runs of fields, refuses exactly the records the codec refuses."""
    for event in [*events, *events]:
        value = CHECKED_CODEC.encode(RecordKind.DUE_EVENT, event)
        expected = checked(CHECKED_CODEC.decode, RecordKind.DUE_EVENT, value)
        view = checked(CHECKED_READER.read, value)
        assert (view == INVALID) == (expected == INVALID)


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("attempt", -1, "DueEvent.attempt is -1, below its minimum 1"),
        ("attempt", 0, "DueEvent.attempt is 0, below its minimum 1"),
        ("execution_id", "", "DueEvent.execution_id is empty"),
        (
            "execution_id",
            "x" * 70_000,
            "DueEvent.execution_id has 70000 bytes, more than its maximum 1100",
        ),
        ("job_version", -1, "DueEvent.job_version is -1, below its minimum 0"),
        (
            "fire_at_ms",
            2**62,
            "DueEvent.fire_at_ms is 4611686018427387904, above its maximum 253402300799999",
        ),
        ("tenant", "", "DueEvent.tenant is empty"),
        ("emitted_at_ms", -5, "DueEvent.emitted_at_ms is -5, below its minimum 0"),
    ],
)
def test_an_out_of_bounds_due_event_is_refused_with_the_reason(
    field: str, value: Any, reason: str
) -> None:
    reader = DueReader(CHECKED_CODEC)
    good = due_event("bounded")
    assert reader.read(CHECKED_CODEC.encode(RecordKind.DUE_EVENT, good)).job_id == "bounded"
    bad = CHECKED_CODEC.encode(RecordKind.DUE_EVENT, {**good, field: value})
    with pytest.raises(InvalidRecordError) as raised:
        reader.read(bad)
    assert str(raised.value) == reason


def test_a_bad_retry_policy_is_refused_though_its_run_of_fields_differs_only_there() -> None:
    reader = DueReader(CHECKED_CODEC)
    good = due_event("policy")
    assert reader.read(CHECKED_CODEC.encode(RecordKind.DUE_EVENT, good))
    nan = {**good, "retry": {**good["retry"], "multiplier": float("nan")}}
    with pytest.raises(InvalidRecordError, match=r"RetryPolicy.multiplier is NaN"):
        reader.read(CHECKED_CODEC.encode(RecordKind.DUE_EVENT, nan))
