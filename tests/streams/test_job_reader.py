"""The fast Job reader decodes exactly what the codec decodes, or leaves the record to it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.codec import HEADER_LEN, Codec, RecordKind
from streams.exceptions import DecodeError
from streams.job_reader import JobReader
from streams.records import Job
from tests.streams.codec_testkit import (
    FRAME_MANGLES,
    assert_refused_as_the_codec_refuses,
    checked,
    codec_resolving,
    codec_without_bounds,
)

CODEC = Codec.from_directory()
READER = JobReader(CODEC)
# The shape of records over every Avro value: no bounds.
SHAPE_CODEC = codec_without_bounds()
SHAPE_READER = JobReader(SHAPE_CODEC)
longs = st.integers(-(2**63), 2**63 - 1)
ints = st.integers(-(2**31), 2**31 - 1)
texts = st.text(max_size=12)

crons = st.fixed_dictionaries(
    {
        "expression": texts,
        "timezone": texts,
        "start_ms": st.none() | longs,
        "end_ms": st.none() | longs,
        "fold_policy": st.sampled_from(["AUTO", "FIRST", "EVERY"]),
    }
)
jobs = st.fixed_dictionaries(
    {
        "job_id": texts,
        "version": longs,
        "status": st.sampled_from(["SCHEDULED", "PAUSED", "CANCELLED", "COMPLETED"]),
        "handler": texts,
        "payload": st.binary(max_size=20),
        "run_at_ms": st.none() | longs,
        "cron": st.none() | crons,
        "depends_on": st.lists(texts, max_size=3),
        "priority": st.sampled_from(["HIGH", "NORMAL", "LOW"]),
        "timeout_ms": longs,
        "retry": st.fixed_dictionaries(
            {
                "max_attempts": ints,
                "initial_backoff_ms": longs,
                "multiplier": st.floats(allow_nan=False),
                "max_backoff_ms": longs,
                "jitter_ratio": st.floats(allow_nan=False),
            }
        ),
        "overlap": st.sampled_from(["SKIP", "QUEUE_ONE", "ALLOW", "REPLACE"]),
        "catchup": st.sampled_from(["ALL", "LATEST", "NONE"]),
        "catchup_window_ms": longs,
        "jitter_ms": longs,
        "dag_wait_ms": longs,
        "tenant": texts,
        "labels": st.dictionaries(texts, texts, max_size=3),
        "manual_fire_at_ms": st.none() | longs,
        "backfill": st.none()
        | st.fixed_dictionaries(
            {"from_ms": longs, "to_ms": longs, "per_s": ints, "requested_at_ms": longs}
        ),
        "idempotency_key": st.none() | texts,
        # Often a text ending in a non-ASCII character: the byte before the timestamps then
        # looks like a varint continuation byte (the reader's cache must not be fooled).
        "request_hash": st.none() | texts | texts.map(lambda t: t + "é"),
        "created_at_ms": longs,
        "updated_at_ms": longs,
    }
)


def test_the_reader_is_proven_and_enabled_for_the_shipped_schema() -> None:
    assert READER.enabled


@settings(max_examples=300, deadline=None)
@given(job=jobs, others=st.lists(jobs, max_size=3))
def test_decodes_exactly_what_the_codec_decodes(
    job: dict[str, Any], others: list[dict[str, Any]]
) -> None:
    for record in [job, *others, job]:  # the repeat is read with the shared fields cached
        data = CODEC.encode(RecordKind.JOB, record)
        # Checked first: an unchecked read would cache a body the check never saw.
        assert checked(READER.decode, data) == checked(CODEC.decode, RecordKind.JOB, data)
        assert SHAPE_READER.decode(data) == SHAPE_CODEC.decode(RecordKind.JOB, data) == record


@settings(max_examples=100, deadline=None)
@given(
    job=jobs,
    ids=st.lists(st.tuples(texts, longs, st.none() | longs, longs, longs), min_size=2, max_size=5),
)
def test_jobs_differing_in_id_version_run_time_and_stamps_share_one_cache_entry(
    job: dict[str, Any], ids: list[tuple[str, int, int | None, int, int]]
) -> None:
    reader = JobReader(SHAPE_CODEC)
    for job_id, version, run_at_ms, created_ms, updated_ms in ids:
        record = {
            **job,
            "job_id": job_id,
            "version": version,
            "run_at_ms": run_at_ms,
            "created_at_ms": created_ms,
            "updated_at_ms": updated_ms,
        }
        data = CODEC.encode(RecordKind.JOB, record)
        assert reader.decode(data) == record
    assert reader._decoder is not None
    kept = {memo.memo.first: len(memo.entries) for memo in reader._decoder.memos}
    assert set(kept) == {"status", "cron", "created_at_ms"} and max(kept.values()) <= 1
    if reader.fast_path.fallbacks == 0:  # none had a 10-byte varint
        assert kept == {"status": 1, "cron": 1, "created_at_ms": 1}


def _outcome(read: Any, *args: Any) -> Any:
    """The record read, INVALID when a bound refuses it, or the DecodeError's message."""
    try:
        return checked(read, *args)
    except DecodeError as exc:
        return f"DecodeError: {exc}"


# One-off jobs within the bounds (schemas/bounds.json), as the timer sees them.
epoch_ms = st.integers(0, 2**45)
names = st.text(min_size=1, max_size=12)
durations_ms = st.integers(0, 31_622_400_000)
valid_jobs = st.fixed_dictionaries(
    {
        "job_id": names,
        "version": st.integers(0, 2**60),
        "status": st.sampled_from(["SCHEDULED", "PAUSED", "CANCELLED", "COMPLETED"]),
        "handler": names,
        "payload": st.binary(max_size=20),
        "run_at_ms": epoch_ms,
        "cron": st.none(),
        "depends_on": st.just([]),
        "priority": st.sampled_from(["HIGH", "NORMAL", "LOW"]),
        "timeout_ms": st.integers(1, 31_622_400_000),
        "retry": st.fixed_dictionaries(
            {
                "max_attempts": st.integers(1, 1000),
                "initial_backoff_ms": durations_ms,
                "multiplier": st.floats(1, 100),
                "max_backoff_ms": durations_ms,
                "jitter_ratio": st.floats(0, 1),
            }
        ),
        "overlap": st.sampled_from(["SKIP", "QUEUE_ONE", "ALLOW", "REPLACE"]),
        "catchup": st.sampled_from(["ALL", "LATEST", "NONE"]),
        "catchup_window_ms": durations_ms,
        "jitter_ms": st.integers(0, 86_400_000),
        "dag_wait_ms": st.integers(1, 31_622_400_000),
        "tenant": names,
        "labels": st.dictionaries(texts, texts, max_size=3),
        "manual_fire_at_ms": st.none() | epoch_ms,
        "backfill": st.none()
        | st.fixed_dictionaries(
            {
                "from_ms": epoch_ms,
                "to_ms": epoch_ms,
                "per_s": st.integers(1, 10_000),
                "requested_at_ms": epoch_ms,
            }
        ),
        "idempotency_key": st.none() | texts,
        "request_hash": st.none() | texts,
        "created_at_ms": epoch_ms,
        "updated_at_ms": epoch_ms,
    }
)


@settings(max_examples=300, deadline=None)
@given(
    tagged=st.tuples(st.just(True), valid_jobs) | st.tuples(st.just(False), jobs),
    run_ats=st.lists(epoch_ms, min_size=1, max_size=3),
    flips=st.lists(st.tuples(st.integers(0, 400), st.integers(1, 255)), min_size=1, max_size=2),
)
def test_damaged_jobs_decode_as_the_codec_decodes_them_or_raise_its_error(
    tagged: tuple[bool, dict[str, Any]], run_ats: list[int], flips: list[tuple[int, int]]
) -> None:
    """Jobs sharing their runs of bytes, then damaged: the same record as the codec, or
    both refuse it by a bound, or the same DecodeError."""
    valid, job = tagged
    reader = JobReader(CODEC)
    for run_at_ms in run_ats:
        data = CODEC.encode(RecordKind.JOB, {**job, "run_at_ms": run_at_ms})
        fallbacks = reader.fast_path.fallbacks
        assert _outcome(reader.decode, data) == _outcome(CODEC.decode, RecordKind.JOB, data)
        if valid:  # within the bounds and no 10-byte varint: served by the fast path
            assert reader.fast_path.fallbacks == fallbacks
        for at, byte in flips:
            at = HEADER_LEN + at % (len(data) - HEADER_LEN)
            data = data[:at] + bytes([data[at] ^ byte]) + data[at + 1 :]
        for _ in range(2):
            assert _outcome(reader.decode, data) == _outcome(CODEC.decode, RecordKind.JOB, data)


def test_decoded_records_share_no_containers() -> None:
    cron = {
        "expression": "* * * * *",
        "timezone": "UTC",
        "start_ms": None,
        "end_ms": None,
        "fold_policy": "AUTO",
    }
    record = {**_one_off(), "labels": {"team": "a"}, "run_at_ms": None, "cron": cron}
    data = CODEC.encode(RecordKind.JOB, record)
    first, second = READER.decode(data), READER.decode(data)
    first["retry"]["max_attempts"] = 99
    first["labels"]["team"] = "changed"
    first["depends_on"].append("x")
    first["cron"]["timezone"] = "Europe/Berlin"
    assert second == record == READER.decode(data)


@pytest.mark.parametrize(
    "mangle",
    [
        *FRAME_MANGLES,
        lambda data: data[:-2],  # half a stamp
        lambda data: data[:-12],  # no stamps at all
    ],
)
def test_garbage_raises_the_codec_decode_error(mangle: Any) -> None:
    data = mangle(CODEC.encode(RecordKind.JOB, _one_off()))
    assert_refused_as_the_codec_refuses(CODEC, RecordKind.JOB, READER.decode, data)


@pytest.mark.parametrize(
    "varint",
    [
        b"\xff" * 9 + b"\x7f",  # bits past 64: the codec drops them
        b"\xff" * 9 + b"\x03",
        b"\xff" * 9 + b"\x01",  # -(2**63), canonical
        b"\x82" + b"\x80" * 9 + b"\x00",  # 1 in eleven bytes
    ],
)
def test_versions_in_ten_or_more_varint_bytes_decode_as_the_codec_decodes_them(
    varint: bytes,
) -> None:
    data = CODEC.encode(RecordKind.JOB, _one_off())
    version_at = HEADER_LEN + 1 + len("job-1")
    assert data[version_at] == 2  # version 1, one byte
    data = data[:version_at] + varint + data[version_at + 1 :]
    assert checked(lambda: READER.decode(data)) == checked(
        lambda: CODEC.decode(RecordKind.JOB, data)
    )


def test_a_record_of_another_kind_is_refused_like_the_codec_does() -> None:
    result = {
        "execution_id": "a@1",
        "job_id": "a",
        "scheduled_for_ms": 1,
        "status": "SUCCEEDED",
        "recorded_at_ms": 2,
    }
    data = CODEC.encode(RecordKind.EXECUTION_RESULT, result)
    with pytest.raises(DecodeError, match="expected a job record"):
        READER.decode(data)


def test_a_codec_that_resolves_job_records_disables_the_reader() -> None:
    """Records of an older writer schema need resolution: the reader leaves them alone."""
    old_writer = codec_resolving(RecordKind.JOB)
    reader = JobReader(old_writer)
    assert not reader.enabled
    data = old_writer.encode(RecordKind.JOB, _one_off())
    assert reader.decode(data) == {**_one_off(), "note": ""}


def _one_off() -> dict[str, Any]:
    job = Job(
        job_id="job-1",
        version=1,
        handler="bench.noop",
        run_at_ms=1_790_000_000_000,
        created_at_ms=1_780_000_000_000,
        updated_at_ms=1_780_000_000_000,
    )
    return job.to_avro()
