"""The ExecutionResult reader reads exactly what the codec decodes, or leaves the record to it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.executor.result_bytes import ResultEncoder
from streams.avro_binary import avro_long, avro_string
from streams.codec import HEADER_LEN, Codec, RecordKind
from streams.exceptions import DecodeError, InvalidRecordError
from streams.records import ExecutionStatus, Job, Trigger
from streams.result_reader import ResultFields, ResultReader, fields_of
from tests.streams.codec_testkit import (
    FRAME_MANGLES,
    assert_refused_as_the_codec_refuses,
    codec_resolving,
)

CODEC = Codec.from_directory()
READER = ResultReader(CODEC)
longs = st.integers(-(2**63), 2**63 - 1)
ints = st.integers(-(2**31), 2**31 - 1)
# Short texts are the common shape's; long ones (two-byte lengths) take the other path.
texts = st.text(max_size=12) | st.text(min_size=60, max_size=70)
optional_texts = st.none() | texts
statuses = st.sampled_from([s.value for s in ExecutionStatus])
triggers = st.sampled_from([t.value for t in Trigger])

results = st.fixed_dictionaries(
    {
        "execution_id": texts,
        "job_id": texts,
        "scheduled_for_ms": longs,
        "attempt": ints,
        "status": statuses,
        "reason": optional_texts,
        "error": optional_texts,
        "worker_id": optional_texts,
        "started_at_ms": st.none() | longs,
        "finished_at_ms": st.none() | longs,
        "next_attempt_at_ms": st.none() | longs,
        "trigger": triggers,
        "job_version": longs,
        "recorded_at_ms": longs,
    }
)
# What executors write for every run: short ids, no reason or error, epoch-ms stamps.
epoch_ms = st.integers(0, 2**45)
common_results = st.fixed_dictionaries(
    {
        "execution_id": st.text(max_size=30),
        "job_id": st.text(max_size=20),
        "scheduled_for_ms": epoch_ms,
        "attempt": st.integers(0, 1000),
        "status": statuses,
        "reason": st.none(),
        "error": st.none(),
        "worker_id": st.none() | st.text(max_size=20),
        "started_at_ms": st.none() | epoch_ms,
        "finished_at_ms": st.none() | epoch_ms,
        "next_attempt_at_ms": st.none() | epoch_ms,
        "trigger": triggers,
        "job_version": st.integers(0, 2**60),
        "recorded_at_ms": epoch_ms,
    }
)


# The reader checks the bounds of the fields it reads (the timer acts on no other).
_CHECK_READ_FIELDS = CODEC.bounds.checker(
    "kafkron.ExecutionResult", fields=("job_id", "scheduled_for_ms"), attribute=True
)


def _codec_fields(data: bytes) -> ResultFields | str:
    """What the codec makes of ``data``: its fields, or the message of its DecodeError, or
    the reason one of those fields breaks its bound."""
    try:
        fields = fields_of(CODEC.decode(RecordKind.EXECUTION_RESULT, data, check=False))
    except DecodeError as exc:
        return f"DecodeError: {exc}"
    reason = _CHECK_READ_FIELDS(fields)
    return fields if reason is None else f"DecodeError: {reason}"


def _reader_fields(reader: ResultReader, data: bytes) -> ResultFields | str:
    try:
        return reader.read(data)
    except DecodeError as exc:
        return f"DecodeError: {exc}"


def _decode(reader: ResultReader, data: bytes) -> ResultFields:
    """What the reader's generated decoder reads, with no fallback to the codec."""
    assert reader._decoder is not None
    fields: ResultFields = reader._decoder.read(data)
    return fields


def test_the_reader_is_proven_and_enabled_for_the_shipped_schema() -> None:
    assert READER.enabled


@settings(max_examples=400, deadline=None)
@given(record=results, others=st.lists(results, max_size=3))
def test_reads_exactly_what_the_codec_decodes(
    record: dict[str, Any], others: list[dict[str, Any]]
) -> None:
    for item in [record, *others, record]:  # the repeat reads its tick from the cache
        data = CODEC.encode(RecordKind.EXECUTION_RESULT, item)
        expected = ResultFields(item["job_id"], item["scheduled_for_ms"], item["status"])
        assert _reader_fields(READER, data) == _codec_fields(data)
        if _CHECK_READ_FIELDS(expected) is None:
            assert READER.read(data) == expected


@settings(max_examples=300, deadline=None)
@given(record=common_results)
def test_the_common_shape_is_read_by_the_fast_path(record: dict[str, Any]) -> None:
    """What executors write is read by the generated decoder, never left to the codec."""
    data = CODEC.encode(RecordKind.EXECUTION_RESULT, record)
    unchecked = fields_of(CODEC.decode(RecordKind.EXECUTION_RESULT, data, check=False))
    assert _decode(READER, data) == unchecked
    fallbacks = READER.fast_path.fallbacks
    assert _reader_fields(READER, data) == _codec_fields(data)
    assert READER.fast_path.fallbacks == fallbacks


@settings(max_examples=100, deadline=None)
@given(
    scheduled_for_ms=epoch_ms,
    started_at_ms=epoch_ms,
    duration_ms=st.integers(0, 10**6),
    attempt=st.integers(0, 100),
    job_version=st.integers(0, 2**60),
    job_id=st.text(min_size=1, max_size=40),
)
def test_the_executors_spliced_results_are_read_by_the_fast_path(
    scheduled_for_ms: int,
    started_at_ms: int,
    duration_ms: int,
    attempt: int,
    job_version: int,
    job_id: str,
) -> None:
    """STARTED and SUCCEEDED as the executor writes them (result_bytes.ResultEncoder)."""
    encoder = ResultEncoder(CODEC, "executor-7")
    for status, finished_ms in (("STARTED", None), ("SUCCEEDED", started_at_ms + duration_ms)):
        record = {
            "execution_id": f"{job_id}@{scheduled_for_ms}",
            "job_id": job_id,
            "scheduled_for_ms": scheduled_for_ms,
            "attempt": attempt,
            "status": status,
            "reason": None,
            "error": None,
            "worker_id": "executor-7",
            "started_at_ms": started_at_ms,
            "finished_at_ms": finished_ms,
            "next_attempt_at_ms": None,
            "trigger": "SCHEDULE",
            "job_version": job_version,
            "recorded_at_ms": finished_ms or started_at_ms,
        }
        data = encoder.encode(record)
        assert data == CODEC.encode(RecordKind.EXECUTION_RESULT, record)
        fields = ResultFields(job_id, scheduled_for_ms, status)
        fallbacks = READER.fast_path.fallbacks
        assert READER.read(data) == fields
        assert READER.fast_path.fallbacks == fallbacks


mutations = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, 200), st.just(0)),
    st.tuples(st.just("flip"), st.integers(0, 200), st.integers(1, 255)),
    st.tuples(st.just("insert"), st.integers(0, 200), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(0, 200), st.just(0)),
)


def _mutate(data: bytes, mutation: tuple[str, int, int]) -> bytes:
    kind, at, byte = mutation
    if len(data) <= HEADER_LEN:
        return data + bytes([byte])  # no body left to damage: grow one
    at = HEADER_LEN + at % (len(data) - HEADER_LEN)  # in the body: the header is checked
    if kind == "truncate":
        return data[:at]
    if kind == "flip":
        return data[:at] + bytes([data[at] ^ byte]) + data[at + 1 :]
    if kind == "insert":
        return data[:at] + bytes([byte]) + data[at:]
    return data[:at] + data[at + 1 :]


@settings(max_examples=600, deadline=None)
@given(record=results | common_results, mutation_list=st.lists(mutations, min_size=1, max_size=3))
def test_mutated_records_read_as_the_codec_decodes_them_or_raise_its_error(
    record: dict[str, Any], mutation_list: list[tuple[str, int, int]]
) -> None:
    """A damaged record reads like the codec: the same fields, or the same DecodeError."""
    data = CODEC.encode(RecordKind.EXECUTION_RESULT, record)
    for mutation in mutation_list:
        data = _mutate(data, mutation)
    assert _reader_fields(READER, data) == _codec_fields(data)


@pytest.mark.parametrize(
    "mangle",
    [
        *FRAME_MANGLES,
        lambda data: data[:-7],  # no recorded_at_ms
        lambda data: data[:HEADER_LEN] + b"\x01" + data[HEADER_LEN + 1 :],  # negative length
        lambda data: data[:HEADER_LEN] + b"\x04\xff\xfe" + data[HEADER_LEN + 3 :],  # not UTF-8
    ],
)
def test_garbage_raises_the_codec_decode_error(mangle: Any) -> None:
    data = mangle(CODEC.encode(RecordKind.EXECUTION_RESULT, _succeeded()))
    assert_refused_as_the_codec_refuses(CODEC, RecordKind.EXECUTION_RESULT, READER.read, data)


@pytest.mark.parametrize(
    ("field", "raw", "valid"),
    [
        ("status", b"\x14", False),  # index 10: past the last symbol
        ("status", b"\x01", True),  # index -1: fastavro reads the last symbol; so does read()
        ("trigger", b"\x0c", False),  # index 6: past the last symbol
        ("trigger", b"\x80\x00", True),  # index 0 in two bytes: odd, but the codec reads it
        ("reason", b"\x04", False),  # union branch 2 of a two-branch union
        ("attempt", b"\xfe\xff\xff\xff\x0f", True),  # 2**31 - 1, the largest Avro int
    ],
)
def test_odd_fields_read_as_the_codec_reads_them(field: str, raw: bytes, valid: bool) -> None:
    """Bytes the encoder never writes: the reader agrees with the codec on each."""
    data = _with_field_bytes(field, raw)
    assert _reader_fields(READER, data) == _codec_fields(data)
    assert isinstance(_codec_fields(data), ResultFields) is valid


def test_ten_byte_varints_go_to_the_codec_and_read_the_same() -> None:
    record = {**_succeeded(), "scheduled_for_ms": -(2**63), "job_version": 2**63 - 1}
    data = CODEC.encode(RecordKind.EXECUTION_RESULT, record)
    with pytest.raises(ValueError):
        _decode(READER, data)
    with pytest.raises(InvalidRecordError, match="scheduled_for_ms is -9223372036854775808"):
        READER.read(data)  # read by the codec, and out of bounds
    later = {**record, "scheduled_for_ms": 2**62}
    data = CODEC.encode(RecordKind.EXECUTION_RESULT, later)
    with pytest.raises(ValueError):
        _decode(READER, data)  # 2**62: a 10-byte varint
    assert (
        _reader_fields(READER, data)
        == _codec_fields(data)
        == (
            "DecodeError: ExecutionResult.scheduled_for_ms is 4611686018427387904, above its"
            " maximum 253402300799999"
        )
    )
    fine = {**_succeeded(), "job_version": 2**63 - 1}
    data = CODEC.encode(RecordKind.EXECUTION_RESULT, fine)
    with pytest.raises(ValueError):
        _decode(READER, data)  # a 10-byte job_version
    assert READER.read(data) == ResultFields("job-1", 1_790_000_000_000, "SUCCEEDED")


def test_a_record_of_another_kind_is_refused_like_the_codec_does() -> None:
    job = Job(job_id="a", version=1, handler="h", run_at_ms=1, created_at_ms=1, updated_at_ms=1)
    data = CODEC.encode(RecordKind.JOB, job.to_avro())
    with pytest.raises(DecodeError, match="expected a execution_result record"):
        READER.read(data)


def test_a_codec_that_resolves_results_disables_the_reader() -> None:
    """Records of an older writer schema need resolution: the reader leaves them alone."""
    old_writer = codec_resolving(RecordKind.EXECUTION_RESULT)
    reader = ResultReader(old_writer)
    assert not reader.enabled
    data = old_writer.encode(RecordKind.EXECUTION_RESULT, _succeeded())
    assert reader.read(data) == ResultFields("job-1", 1_790_000_000_000, "SUCCEEDED")


def test_the_cache_of_checked_heads_stays_bounded() -> None:
    reader = ResultReader(CODEC)
    for i in range(5000):
        record = {**_succeeded(), "scheduled_for_ms": 1_790_000_000_000 + i}
        data = CODEC.encode(RecordKind.EXECUTION_RESULT, record)
        assert reader.read(data).scheduled_for_ms == 1_790_000_000_000 + i
    assert reader._decoder is not None
    kept = reader._decoder.memos[0]
    assert 0 < len(kept.entries) <= 4096
    for size in range(20):  # executors with worker ids of 20 sizes
        record = {**_succeeded(), "worker_id": "w" * size}
        data = CODEC.encode(RecordKind.EXECUTION_RESULT, record)
        assert reader.read(data) == ResultFields("job-1", 1_790_000_000_000, "SUCCEEDED")
    assert 0 < len(kept.widths) <= 8
    long_worker = {**_succeeded(), "worker_id": "w" * 300}  # read, but not kept
    data = CODEC.encode(RecordKind.EXECUTION_RESULT, long_worker)
    assert _decode(reader, data) == ResultFields("job-1", 1_790_000_000_000, "SUCCEEDED")
    assert all(len(head) <= 128 for head in kept.entries)


@settings(max_examples=300, deadline=None)
@given(
    record=common_results,
    others=st.lists(
        st.fixed_dictionaries(
            {
                "execution_id": st.text(max_size=30),
                "job_id": st.text(max_size=20),
                "started_at_ms": st.none() | epoch_ms,
                "finished_at_ms": st.none() | epoch_ms,
                "next_attempt_at_ms": st.none() | epoch_ms,
                "trigger": triggers,
                "job_version": st.integers(0, 2**60),
                "recorded_at_ms": epoch_ms,
            }
        ),
        max_size=4,
    ),
    mutation_list=st.lists(mutations, max_size=2),
)
def test_results_sharing_a_head_read_as_the_codec_decodes_them(
    record: dict[str, Any],
    others: list[dict[str, Any]],
    mutation_list: list[tuple[str, int, int]],
) -> None:
    """The fields from ``scheduled_for_ms`` to ``worker_id`` are checked once and then known
    by their bytes (an executor's results of one tick and status): other ids, times and job
    versions after the same bytes, damaged or not, read exactly as the codec decodes them."""
    reader = ResultReader(CODEC)
    first = CODEC.encode(RecordKind.EXECUTION_RESULT, record)
    assert _reader_fields(reader, first) == _codec_fields(first)
    head = _field_pieces(record)
    for other in others:
        item = {**record, **other}
        data = CODEC.encode(RecordKind.EXECUTION_RESULT, item)
        pieces = _field_pieces(item)
        shared = ("scheduled_for_ms", "attempt", "status", "reason", "error", "worker_id")
        assert all(pieces[name] == head[name] for name in shared)
        for mutation in mutation_list:
            data = _mutate(data, mutation)
        assert _reader_fields(reader, data) == _codec_fields(data)
        assert _reader_fields(reader, data) == _codec_fields(data)  # read again: a known head


def _with_field_bytes(field: str, raw: bytes) -> bytes:
    """A SUCCEEDED result with the bytes of ``field`` replaced by ``raw``."""
    record = _succeeded()
    data = CODEC.encode(RecordKind.EXECUTION_RESULT, record)
    pieces = _field_pieces(record)
    assert data[HEADER_LEN:] == b"".join(pieces.values())  # the layout is as assumed
    names = list(pieces)
    start = HEADER_LEN + sum(len(pieces[name]) for name in names[: names.index(field)])
    return data[:start] + raw + data[start + len(pieces[field]) :]


def _field_pieces(record: dict[str, Any]) -> dict[str, bytes]:
    """Each field's encoding, in the schema's order."""
    status = {s.value: i for i, s in enumerate(ExecutionStatus)}
    trigger = {t.value: i for i, t in enumerate(Trigger)}

    def optional(value: Any, encode: Any) -> bytes:
        return b"\x00" if value is None else b"\x02" + encode(value)

    return {
        "execution_id": avro_string(record["execution_id"]),
        "job_id": avro_string(record["job_id"]),
        "scheduled_for_ms": avro_long(record["scheduled_for_ms"]),
        "attempt": avro_long(record["attempt"]),
        "status": avro_long(status[record["status"]]),
        "reason": optional(record["reason"], avro_string),
        "error": optional(record["error"], avro_string),
        "worker_id": optional(record["worker_id"], avro_string),
        "started_at_ms": optional(record["started_at_ms"], avro_long),
        "finished_at_ms": optional(record["finished_at_ms"], avro_long),
        "next_attempt_at_ms": optional(record["next_attempt_at_ms"], avro_long),
        "trigger": avro_long(trigger[record["trigger"]]),
        "job_version": avro_long(record["job_version"]),
        "recorded_at_ms": avro_long(record["recorded_at_ms"]),
    }


def _succeeded() -> dict[str, Any]:
    return {
        "execution_id": "job-1@1790000000000",
        "job_id": "job-1",
        "scheduled_for_ms": 1_790_000_000_000,
        "attempt": 0,
        "status": "SUCCEEDED",
        "reason": None,
        "error": None,
        "worker_id": "executor-0",
        "started_at_ms": 1_790_000_000_100,
        "finished_at_ms": 1_790_000_000_200,
        "next_attempt_at_ms": None,
        "trigger": "SCHEDULE",
        "job_version": 1_780_000_000_123_456,
        "recorded_at_ms": 1_790_000_000_200,
    }
