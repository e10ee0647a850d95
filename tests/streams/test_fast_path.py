"""A fast path that is off says so once; the records it leaves to the codec are counted."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest

from services.executor.due_view import DueReader
from streams.codec import Codec, RecordKind
from streams.fast_path import reads_as_the_codec
from streams.job_reader import JobReader
from streams.records import Job
from tests.services.executor.test_service_kit import due_event
from tests.streams.codec_testkit import codec_resolving

CODEC = Codec.from_directory()


def _job() -> dict[str, object]:
    job = Job(job_id="j", version=1, handler="h", run_at_ms=1, created_at_ms=1, updated_at_ms=1)
    return job.to_avro()


def test_a_reader_switched_off_warns_once_and_counts_every_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    resolving = codec_resolving(RecordKind.JOB)
    with caplog.at_level(logging.INFO, logger="streams.fast_path"):
        reader = JobReader(resolving)
        data = resolving.encode(RecordKind.JOB, _job())
        for _ in range(3):
            assert reader.decode(data)["job_id"] == "j"
    assert not reader.enabled and reader.fast_path.fallbacks == 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage().split(" is off")[0] for r in warnings] == [
        "the fast Job reader (streams/job_reader.py)"
    ]


def test_a_working_reader_counts_what_it_leaves_to_the_codec_and_logs_the_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="streams.fast_path"):
        reader = JobReader(CODEC)
        data = CODEC.encode(RecordKind.JOB, _job())
        reader.decode(data)
        assert reader.fast_path.fallbacks == 0
        version_at = 10 + 1 + 1  # header, the id's length, "j"
        ten_bytes = data[:version_at] + b"\x82" + b"\x80" * 8 + b"\x00" + data[version_at + 1 :]
        reader.decode(ten_bytes)
        reader.decode(ten_bytes)
    assert reader.enabled and reader.fast_path.fallbacks == 2
    assert [r.getMessage() for r in caplog.records] == [
        "the fast Job reader (streams/job_reader.py) left its first record to the generic codec"
    ]


def test_the_due_reader_counts_records_with_a_history() -> None:
    reader = DueReader(CODEC)
    first = due_event("j", 1_790_000_000_000)
    outcome = {"attempt": 1, "status": "FAILED", "error": "boom", "worker_id": None,
               "started_at_ms": None, "finished_at_ms": None}  # fmt: skip
    retried = {**first, "attempt": 2, "history": [outcome]}
    assert reader.read(CODEC.encode(RecordKind.DUE_EVENT, first)).record is None
    assert reader.fast_path.fallbacks == 0
    assert reader.read(CODEC.encode(RecordKind.DUE_EVENT, retried)).record is not None
    assert reader.fast and reader.fast_path.fallbacks == 1


def test_the_shared_proof_reads_each_probe_twice_in_two_rounds_and_any_difference_fails() -> None:
    probes = [{"a": 1}, {"a": 2}, {"a": 3}]
    reads: list[bytes] = []

    def encode(record: Mapping[str, Any]) -> bytes:
        return bytes([record["a"]])

    def read(data: bytes) -> int:
        reads.append(data)
        return data[0]

    assert reads_as_the_codec(probes, encode, lambda data: data[0], read)
    assert reads == [b"\x01", b"\x01", b"\x02", b"\x02", b"\x03", b"\x03"] * 2
    # A reader wrong on the second read of one probe (from its memo), or raising, is refused.
    wrong_when_kept = iter([1, 1, 2, 99])
    assert not reads_as_the_codec(probes, encode, lambda d: d[0], lambda d: next(wrong_when_kept))

    def refuses(data: bytes) -> int:
        raise ValueError("unsure")

    assert not reads_as_the_codec(probes, encode, lambda data: data[0], refuses)
