"""The status view against the real broker: jobs, results and dead letters into RocksDB."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from services.ingest.settings import IngestSettings
from services.ingest.view import StatusView
from services.ingest.view_store import InvalidCursorError, ViewStore
from streams.admin import ensure_topics
from streams.codec import Codec, RecordKind
from streams.exceptions import TopicLayoutError
from streams.identity import execution_id
from streams.records import (
    DeadLetter,
    DeadLetterKind,
    DueEvent,
    ExecutionResult,
    ExecutionStatus,
    Job,
)
from streams.settings import KafkaSettings
from streams.topics import TopicNames

pytestmark = pytest.mark.kafka

CODEC = Codec.from_directory()
T0 = 1_800_000_000_000


class Feeder:
    """Produces kafkron records to a namespace's topics, like the other services would."""

    def __init__(self, settings: IngestSettings, transactional: bool = False) -> None:
        config = settings.kafka.client_config(partitioner="murmur2_random")
        if transactional:
            config["transactional.id"] = f"ingest-view-test-{uuid.uuid4().hex[:8]}"
        self.producer = Producer(config)
        self.names = TopicNames(settings.kafka.namespace)
        self.transactional = transactional
        if transactional:
            self.producer.init_transactions()
            self.producer.begin_transaction()

    def send(self, topic: str, key: str | None, value: bytes | None) -> None:
        self.producer.produce(topic, value, None if key is None else key.encode())

    def job(self, job_id: str, version: int, **fields: Any) -> None:
        record = Job(
            job_id=job_id,
            version=version,
            handler="reports.nightly",
            run_at_ms=T0,
            created_at_ms=T0,
            updated_at_ms=T0,
            **fields,
        )
        self.send(self.names.jobs, job_id, CODEC.encode(RecordKind.JOB, record.to_avro()))

    def result(
        self, job_id: str, tick: int, status: ExecutionStatus, attempt: int = 1, **fields: Any
    ) -> None:
        record = ExecutionResult(
            execution_id=execution_id(job_id, tick),
            job_id=job_id,
            scheduled_for_ms=tick,
            attempt=attempt,
            status=status,
            recorded_at_ms=tick + 5,
            **fields,
        )
        value = CODEC.encode(RecordKind.EXECUTION_RESULT, record.to_avro())
        self.send(self.names.job_results, job_id, value)

    def dead(self, job_id: str, tick: int, dead_at_ms: int) -> None:
        due = DueEvent(
            execution_id=execution_id(job_id, tick),
            job_id=job_id,
            job_version=1,
            scheduled_for_ms=tick,
            fire_at_ms=tick,
            attempt=3,
            handler="reports.nightly",
            timeout_ms=1000,
            emitted_at_ms=tick,
        )
        record = DeadLetter(
            kind=DeadLetterKind.EXECUTION,
            reason="retries exhausted",
            execution=due,
            last_error="boom",
            dead_at_ms=dead_at_ms,
        )
        self.send(self.names.dlq, job_id, CODEC.encode(RecordKind.DEAD_LETTER, record.to_avro()))

    def flush(self) -> None:
        if self.transactional:
            self.producer.commit_transaction()
            self.producer.begin_transaction()
        assert self.producer.flush(10) == 0


@pytest.fixture
def feeder(ingest_settings: IngestSettings) -> Feeder:
    return Feeder(ingest_settings)


@pytest.fixture
def view(ingest_settings: IngestSettings) -> Iterator[StatusView]:
    with StatusView(ingest_settings) as view:
        yield view


def caught_up(view: StatusView) -> None:
    assert view.wait_until_caught_up(20.0)


def eventually(check: Any, timeout_s: float = 20.0) -> None:
    """Wait for ``check()`` to hold.

    A transaction's commit markers are written after ``commit_transaction`` returns, so its
    records become readable (the last stable offset moves) a moment later.
    """
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_job_state_latest_version_wins_and_tombstone_deletes(
    view: StatusView, feeder: Feeder
) -> None:
    feeder.job("a", version=2, status="PAUSED")
    feeder.job("a", version=1)  # stale: written late by a lagging instance
    feeder.job("b", version=1)
    feeder.job("c", version=1)
    feeder.send(feeder.names.jobs, "c", None)
    feeder.flush()
    caught_up(view)
    job = view.job("a")
    assert job is not None
    assert (job["version"], job["status"]) == (2, "PAUSED")
    assert view.job("b") is not None
    assert view.job("c") is None
    assert view.job("unknown") is None


def test_recent_executions_running_state_and_transactions(
    ingest_settings: IngestSettings, view: StatusView
) -> None:
    feeder = Feeder(ingest_settings, transactional=True)
    feeder.job("j", version=1)
    feeder.result("j", T0, ExecutionStatus.STARTED, worker_id="w1", started_at_ms=T0 + 1)
    feeder.flush()
    eventually(lambda: view.running("j") == {execution_id("j", T0): 1})
    feeder.result("j", T0, ExecutionStatus.FAILED, error="boom", finished_at_ms=T0 + 2)
    feeder.result("j", T0, ExecutionStatus.STARTED, attempt=2, started_at_ms=T0 + 10)
    feeder.flush()
    eventually(lambda: view.running("j") == {execution_id("j", T0): 2})
    feeder.result("j", T0, ExecutionStatus.SUCCEEDED, attempt=2, finished_at_ms=T0 + 20)
    feeder.result("j", T0 + 60_000, ExecutionStatus.SKIPPED, attempt=0, reason="overlap")
    feeder.flush()
    eventually(lambda: len(view.executions("j")) == 2)
    assert view.running("j") == {}
    newest, older = view.executions("j")
    assert (newest["scheduled_for_ms"], newest["status"], newest["reason"]) == (
        T0 + 60_000,
        "SKIPPED",
        "overlap",
    )
    assert (older["status"], older["attempt"]) == ("SUCCEEDED", 2)
    assert (older["started_at_ms"], older["finished_at_ms"]) == (T0 + 10, T0 + 20)


def test_recent_executions_are_bounded_newest_first(
    ingest_settings: IngestSettings, feeder: Feeder
) -> None:
    settings = ingest_settings.model_copy(update={"recent_executions_per_job": 3})
    for i in [3, 0, 4, 1, 2]:
        feeder.result("j", T0 + i * 1000, ExecutionStatus.SUCCEEDED)
    feeder.flush()
    with StatusView(settings) as view:
        caught_up(view)
        ticks = [e["scheduled_for_ms"] for e in view.executions("j")]
    assert ticks == [T0 + 4000, T0 + 3000, T0 + 2000]


def test_dead_letters_newest_first_with_cursor_pages(view: StatusView, feeder: Feeder) -> None:
    for i in range(5):
        feeder.dead(f"job-{i}", T0 + i, dead_at_ms=T0 + 1000 * i)
    feeder.flush()
    caught_up(view)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        items, cursor = view.dead_letters(cursor, 2)
        pages += 1
        seen += [i["job_id"] for i in items]
        if cursor is None:
            break
    assert seen == [f"job-{i}" for i in (4, 3, 2, 1, 0)]
    assert pages == 3
    first = view.dead_letters(None, 1)[0][0]
    assert first["attempts"] == 3
    assert first["last_error"] == "boom"
    assert first["execution_id"] == execution_id("job-4", T0 + 4)
    with pytest.raises(InvalidCursorError):
        view.dead_letters("garbage!", 2)


def test_undecodable_records_are_counted_and_skipped(view: StatusView, feeder: Feeder) -> None:
    feeder.send(feeder.names.job_results, "j", b"not avro at all")
    feeder.send(feeder.names.jobs, "x", b"\xc3\x01" + b"\0" * 20)  # unknown fingerprint
    feeder.send(feeder.names.dlq, None, None)
    feeder.result("j", T0, ExecutionStatus.SUCCEEDED)
    feeder.job("x", version=1)
    feeder.flush()
    caught_up(view)
    assert view.undecodable_count() == 3
    assert view.executions("j")[0]["status"] == "SUCCEEDED"
    assert view.job("x") is not None
    assert view.alive and view.last_error is None


def test_restart_resumes_from_the_stored_offsets(
    ingest_settings: IngestSettings, feeder: Feeder
) -> None:
    feeder.send(feeder.names.job_results, "j", b"garbage")
    feeder.job("a", version=1)
    feeder.flush()
    with StatusView(ingest_settings) as view:
        caught_up(view)
        assert view.undecodable_count() == 1
        stored = view.store.offsets()
    assert sum(stored.values()) == 2  # next offsets of the two records' partitions
    feeder.job("b", version=1)
    feeder.flush()
    store = ViewStore(ingest_settings.view_path, CODEC, recent_executions=20)
    try:
        assert store.offsets() == stored  # the restart resumes from here
    finally:
        store.close()
    with StatusView(ingest_settings) as view:
        caught_up(view)
        assert view.job("a") is not None and view.job("b") is not None
        assert view.undecodable_count() == 1  # the garbage was not read a second time


def test_wait_until_caught_up_times_out_instead_of_hanging(
    view: StatusView, feeder: Feeder
) -> None:
    started = time.monotonic()
    assert view.wait_until_caught_up(5.0)
    assert view.ready
    assert not view.wait_for_offsets({(feeder.names.jobs, 0): 10**9}, 0.2)
    assert time.monotonic() - started < 5.0


def test_start_without_topics_fails_clearly_and_leaves_nothing_open(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    settings = IngestSettings(kafka=kafka_settings, view_dir=tmp_path / "view")
    with pytest.raises(TopicLayoutError, match="does not exist"):
        StatusView(settings).start()
    ensure_topics(kafka_settings)
    with StatusView(settings) as view:  # the RocksDB lock was released
        assert view.wait_until_caught_up(20.0)
