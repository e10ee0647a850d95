"""Hostile Job records on the real broker: the timer and the status view stay up.

Issue 16's defects 3 and 6: a Job with ``version = -1`` jammed the API's status view forever
(every GET 503); a Job with no schedule kind was dropped without a word, one with both
``run_at`` and ``cron`` ran as cron, and a ``run_at`` of 2^62 was parked without a report. Each
now goes to ``dlq`` from the timer with its position, raw bytes and reason, and the view skips
and counts it; the records after them are served as usual.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.herd import DueReader, job_record, now_ms
from services.ingest.settings import IngestSettings
from services.ingest.view import StatusView
from services.timer.settings import TimerSettings
from streams.codec import Codec, RecordKind
from streams.settings import KafkaSettings
from streams.topics import TopicNames
from tests.services.executor.test_service_kit import TopicReader, due_event, produce

from .test_timer_kafka import _timer_on_thread

pytestmark = pytest.mark.kafka

CODEC = Codec.from_directory()
CRON = {
    "expression": "0 0 1 1 *",
    "timezone": "UTC",
    "start_ms": None,
    "end_ms": None,
    "fold_policy": "AUTO",
}


def _hostile(created_ms: int) -> dict[str, tuple[bytes | None, dict[str, Any], str]]:
    """name -> (key or None for the job id, the Job record, the start of its reason)."""
    run_at = created_ms + 60_000

    def job(job_id: str, **fields: Any) -> dict[str, Any]:
        return job_record(job_id, created_ms, **{"run_at_ms": run_at, **fields})

    return {
        "version": (None, job("h-version", version=-1), "Job.version is -1, below its minimum 0"),
        "no-schedule": (
            None,
            job("h-none", run_at_ms=None),
            "Job must have exactly one of run_at_ms, cron, depends_on (it has none)",
        ),
        "two-schedules": (
            None,
            job("h-two", cron=CRON),
            "Job must have exactly one of run_at_ms, cron, depends_on (it has run_at_ms, cron)",
        ),
        "far-future": (
            None,
            job("h-far", run_at_ms=2**62),
            "Job.run_at_ms is 4611686018427387904, above its maximum 253402300799999",
        ),
        "long-id": (
            None,
            job("h" * 70_000),
            "Job.job_id has 70000 bytes, more than its maximum 1024",
        ),
        "other-key": (
            b"someone-else",
            job("h-key"),
            "record key b'someone-else' is not its job id",
        ),
    }


def _records(
    topics: KafkaSettings, created_ms: int, good: dict[str, Any]
) -> tuple[dict[str, tuple[bytes | None, dict[str, Any], str]], list[Any]]:
    """The hostile cases and the records to produce: each case's, then ``good``'s."""
    jobs = TopicNames(topics.namespace).jobs
    cases = _hostile(created_ms)
    records = [
        (jobs, key or job["job_id"].encode(), CODEC.encode(RecordKind.JOB, job), None)
        for key, job, _ in [*cases.values(), (None, good, "")]
    ]
    return cases, records


@pytest.fixture
def reader(topics: KafkaSettings) -> Iterator[DueReader]:
    due_reader = DueReader(topics)
    yield due_reader
    due_reader.close()


def test_hostile_jobs_are_dead_lettered_by_the_timer_with_their_reason(
    topics: KafkaSettings, reader: DueReader
) -> None:
    created = now_ms()
    good = job_record(f"good-{uuid.uuid4().hex[:6]}", created, run_at_ms=created + 1_000)
    cases, records = _records(topics, created, good)
    dlq = TopicReader(topics, ["dlq"])
    with _timer_on_thread(TimerSettings(kafka=topics, instance_id="timer-hostile")):
        landed = produce(topics, records)
        reader.read_until(1, 60)  # the good one-off fired: the timer went on past them all
        dlq.wait_for(
            lambda r: len(r.decoded("dlq", RecordKind.DEAD_LETTER)) >= len(cases), 30, "dlq"
        )
    dlq.close()
    fired = {CODEC.decode(RecordKind.DUE_EVENT, value)["job_id"] for value, _ in reader.values}
    assert fired == {good["job_id"]}
    letters = {
        (d["source_topic"], d["source_partition"], d["source_offset"]): d
        for d in dlq.decoded("dlq", RecordKind.DEAD_LETTER)
    }
    for (name, (_, _, reason)), where, record in zip(cases.items(), landed, records, strict=False):
        letter = letters[where]
        assert letter["kind"] == "UNDECODABLE", name
        assert letter["reason"].startswith(reason), (name, letter["reason"])
        assert (letter["raw_key"], letter["raw_value"]) == (record[1], record[2]), name


def test_hostile_jobs_never_jam_the_status_view(topics: KafkaSettings, tmp_path: Path) -> None:
    settings = IngestSettings(kafka=topics, view_dir=tmp_path / "view")
    created = now_ms()
    good = job_record("after-the-hostile", created, run_at_ms=created + 60_000)
    cases, records = _records(topics, created, good)
    produce(topics, records)
    with StatusView(settings) as view:
        assert view.wait_until_caught_up(30.0)
        assert view.alive and view.last_error is None
        assert view.undecodable_count() == len(cases)
        assert view.job("after-the-hostile") is not None
        assert view.job("h-version") is None and view.job("h-key") is None


def test_hostile_results_and_retries_are_dead_lettered_by_the_timer(
    topics: KafkaSettings, reader: DueReader
) -> None:
    """The timer's other inputs: a result or a retry request that breaks a bound the timer
    acts on, or keyed by another job, goes to dlq with its reason; the timer goes on."""
    names = TopicNames(topics.namespace)
    created = now_ms()
    results = RecordKind.EXECUTION_RESULT
    result = {
        "execution_id": "r@1", "job_id": "r", "scheduled_for_ms": created, "attempt": 1,
        "status": "SUCCEEDED", "reason": None, "error": None, "worker_id": "w",
        "started_at_ms": created, "finished_at_ms": created, "next_attempt_at_ms": None,
        "trigger": "SCHEDULE", "job_version": 1, "recorded_at_ms": created,
    }  # fmt: skip
    due = due_event("q", created)
    cases = [
        (names.job_results, b"r", {**result, "scheduled_for_ms": 2**62}, results,
         "ExecutionResult.scheduled_for_ms is 4611686018427387904, above its maximum"),
        (names.job_results, b"", {**result, "job_id": ""}, results,
         "ExecutionResult.job_id is empty"),
        (names.job_results, b"other", result, results,
         "record key b'other' is not its job id"),
        (names.retry, b"q", {"due": {**due, "attempt": -1}, "requested_at_ms": created},
         RecordKind.RETRY_REQUEST, "DueEvent.attempt is -1, below its minimum 1"),
        (names.retry, b"q", {"due": due, "requested_at_ms": -3}, RecordKind.RETRY_REQUEST,
         "RetryRequest.requested_at_ms is -3, below its minimum 0"),
    ]  # fmt: skip
    records = [(topic, key, CODEC.encode(kind, value), 0) for topic, key, value, kind, _ in cases]
    good = job_record(f"good-{uuid.uuid4().hex[:6]}", created, run_at_ms=created + 1_000)
    dlq = TopicReader(topics, ["dlq"])
    with _timer_on_thread(TimerSettings(kafka=topics, instance_id="timer-hostile-inputs")):
        landed = produce(topics, records)
        produce(
            topics,
            [(names.jobs, good["job_id"].encode(), CODEC.encode(RecordKind.JOB, good), None)],
        )
        reader.read_until(1, 60)
        dlq.wait_for(lambda r: len(r.decoded("dlq", RecordKind.DEAD_LETTER)) >= len(cases), 30)
    dlq.close()
    letters = {
        (d["source_topic"], d["source_partition"], d["source_offset"]): d
        for d in dlq.decoded("dlq", RecordKind.DEAD_LETTER)
    }
    for (_, key, _, _, reason), where, record in zip(cases, landed, records, strict=True):
        assert letters[where]["reason"].startswith(reason), letters[where]["reason"]
        assert (letters[where]["raw_key"], letters[where]["raw_value"]) == (key, record[2])
