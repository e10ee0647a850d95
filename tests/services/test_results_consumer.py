"""services.results_consumer on the real broker: decode, filter, skip bad records, commit."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from services.results_consumer import ReceivedResult, ResultFilter, ResultsConsumer
from streams.codec import Codec, RecordKind
from streams.records import ExecutionStatus
from streams.settings import KafkaSettings
from streams.topics import TopicNames

pytestmark = pytest.mark.kafka

CODEC = Codec.from_directory()


def result(job_id: str, status: str, tick: int) -> bytes:
    return CODEC.encode(
        RecordKind.EXECUTION_RESULT,
        {"execution_id": f"{job_id}@{tick}", "job_id": job_id, "scheduled_for_ms": tick,
         "attempt": 1, "status": status, "recorded_at_ms": tick},
    )  # fmt: skip


def produce(settings: KafkaSettings, records: list[tuple[str, bytes]]) -> None:
    producer = Producer(settings.client_config())
    topic = TopicNames(settings.namespace).job_results
    for key, value in records:
        producer.produce(topic, key=key.encode(), value=value)
    assert producer.flush(30) == 0


def read_until(consumer: ResultsConsumer, wanted: int) -> list[ReceivedResult]:
    got: list[ReceivedResult] = []
    deadline = time.monotonic() + 30
    while len(got) < wanted and time.monotonic() < deadline:
        got.extend(consumer.poll(timeout_s=0.5))
    return got


def test_filters_by_job_and_status_skips_undecodable_and_commits(topics: KafkaSettings) -> None:
    produce(
        topics,
        [("a", result("a", "SUCCEEDED", 1)), ("a", result("a", "FAILED", 2)),
         ("b", result("b", "SUCCEEDED", 3)), ("c", b"\xc3\x01not-avro"),
         ("c", result("c", "DEAD_LETTER", 4))],
    )  # fmt: skip
    only = ResultFilter(
        job_ids=frozenset({"a", "c"}),
        statuses=frozenset({ExecutionStatus.SUCCEEDED, ExecutionStatus.DEAD_LETTER}),
    )
    with ResultsConsumer(topics, "g1", only=only) as consumer:
        consumer.subscribe()
        got = read_until(consumer, 2)
        time.sleep(1.0)
        got.extend(consumer.poll(timeout_s=0.5))
        consumer.commit()
        assert sorted((r.result.job_id, r.result.status) for r in got) == [
            ("a", ExecutionStatus.SUCCEEDED), ("c", ExecutionStatus.DEAD_LETTER)
        ]  # fmt: skip
        assert all(r.timestamp_ms > 0 and r.offset >= 0 for r in got)
        assert (consumer.counts.filtered_out, consumer.counts.undecodable) == (2, 1)
        assert consumer.counts.last_undecodable.startswith(f"{consumer.topic}[")
    produce(topics, [("a", result("a", "SUCCEEDED", 5))])
    with ResultsConsumer(topics, "g1", only=only) as consumer:  # resumes after the commit
        consumer.subscribe()
        again = read_until(consumer, 1)
        assert [r.result.execution_id for r in again] == ["a@5"]


def test_where_sees_the_typed_result(topics: KafkaSettings) -> None:
    produce(topics, [("x", result("x", "SUCCEEDED", 7)), ("y", result("y", "SUCCEEDED", 8))])
    only = ResultFilter(where=lambda r: r.scheduled_for_ms == 8)
    with ResultsConsumer(topics, "g2", only=only) as consumer:
        consumer.replay_all()
        got = read_until(consumer, 1)
        assert [r.result.job_id for r in got] == ["y"]
        assert consumer.caught_up(consumer.end_offsets())
