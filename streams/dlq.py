"""Operator tools for the dead-letter queue: list dead letters, replay a dead execution.

``dlq`` holds every dead execution (and every undecodable record) with its reason and
attempt history. A replay produces the execution's DueEvent again, attempt 1 with a fresh
attempt budget and trigger REPLAY, to the due topic of its priority; the executor's dedup
store lets a REPLAY through a DEAD_LETTER entry once per replay.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from streams.codec import Codec, RecordKind
from streams.exceptions import DecodeError, KafkaDeliveryError, KafkronError
from streams.settings import KafkaSettings
from streams.topics import Priority, TopicNames

_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class DeadLetterRow:
    """One record of ``dlq`` and where it is; ``record`` is None when it does not decode."""

    partition: int
    offset: int
    record: dict[str, Any] | None
    error: str | None = None


def read_dead_letters(
    kafka: KafkaSettings, codec: Codec, *, timeout_s: float = _TIMEOUT_S
) -> Iterator[DeadLetterRow]:
    """Every committed record of ``dlq`` up to its end when called, partition by partition."""
    topic = TopicNames(kafka.namespace).dlq
    consumer = Consumer(
        kafka.client_config(
            **{
                "group.id": f"kafkron-dlq-reader-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if metadata is None or metadata.error is not None:
            raise KafkronError(f"topic {topic} does not exist; run 'kafkron topics create'")
        ends: dict[int, int] = {}
        for partition in sorted(metadata.partitions):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout_s
            )
            if high > low:
                ends[partition] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        yield from _read_until(consumer, codec, topic, ends, time.monotonic() + timeout_s)
    finally:
        consumer.close()


def _read_until(
    consumer: Consumer, codec: Codec, topic: str, ends: dict[int, int], deadline: float
) -> Iterator[DeadLetterRow]:
    pending = dict(ends)
    while pending:
        if time.monotonic() > deadline:
            raise KafkronError(
                f"dlq partitions {sorted(pending)} not read to their end in time; an open "
                "transaction may hold them: retry in a few seconds"
            )
        for message in consumer.consume(1000, 0.5):
            partition, offset = message.partition() or 0, message.offset() or 0
            if message.error() is not None:
                continue  # partition EOF (or a transient error librdkafka retries)
            if offset >= pending.get(partition, 0):
                continue
            try:
                record = codec.decode(RecordKind.DEAD_LETTER, message.value() or b"")
                yield DeadLetterRow(partition, offset, record)
            except DecodeError as exc:
                yield DeadLetterRow(partition, offset, None, str(exc))
        for tp in consumer.position([TopicPartition(topic, p) for p in pending]):
            if tp.offset >= pending.get(tp.partition, 0):
                pending.pop(tp.partition, None)


def find_dead_execution(
    kafka: KafkaSettings, codec: Codec, execution_id: str
) -> dict[str, Any] | None:
    """The DueEvent of the most recent EXECUTION dead letter of ``execution_id``, or None."""
    found: tuple[int, dict[str, Any]] | None = None
    for row in read_dead_letters(kafka, codec):
        record = row.record
        if record is None or record["kind"] != "EXECUTION" or record["execution"] is None:
            continue
        if record["execution"]["execution_id"] != execution_id:
            continue
        if found is None or record["dead_at_ms"] >= found[0]:
            found = (record["dead_at_ms"], record["execution"])
    return None if found is None else found[1]


def replay(kafka: KafkaSettings, codec: Codec, execution_id: str) -> dict[str, Any]:
    """Produce the replay of a dead execution to its due topic; returns the DueEvent sent."""
    dead = find_dead_execution(kafka, codec, execution_id)
    if dead is None:
        raise KafkronError(
            f"no dead execution {execution_id!r} on {TopicNames(kafka.namespace).dlq}; list "
            "them with 'kafkron dlq list'"
        )
    event = replay_due_event(dead, time.time_ns() // 1_000_000)
    topic = TopicNames(kafka.namespace).due(Priority(event["priority"]))
    producer = Producer(
        kafka.client_config(
            **{"enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random"}
        )
    )
    errors: list[str] = []

    def _delivered(error: object, message: object) -> None:
        if error is not None:
            errors.append(str(error))

    producer.produce(
        topic,
        codec.encode(RecordKind.DUE_EVENT, event),
        event["job_id"].encode(),
        on_delivery=_delivered,
    )
    if producer.flush(_TIMEOUT_S) or errors:
        raise KafkaDeliveryError(
            f"replay of {execution_id} not delivered to {topic}: {errors or 'timed out'}; "
            "check the broker and retry (a replay twice runs at most once more)"
        )
    return event


def describe(row: DeadLetterRow) -> str:
    """One line per dead letter for ``kafkron dlq list``."""
    where = f"{row.partition}:{row.offset}"
    record = row.record
    if record is None:
        return f"{where} UNREADABLE {row.error}"
    dead_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record["dead_at_ms"] / 1000))
    execution = record["execution"]
    if record["kind"] == "EXECUTION" and execution is not None:
        return (
            f"{where} {dead_at} EXECUTION {execution['execution_id']} handler="
            f"{execution['handler']} attempts={len(execution['history'])} "
            f"error={record['last_error']!r}"
        )
    source = f"{record['source_topic']}[{record['source_partition']}]@{record['source_offset']}"
    return f"{where} {dead_at} {record['kind']} from {source}: {record['reason']}"


def replay_due_event(dead_execution: Mapping[str, Any], now_ms: int) -> dict[str, Any]:
    """The DueEvent that replays a dead execution: attempt 1 again, trigger REPLAY.

    Same execution id (handlers deduplicate by it), a fresh attempt budget under the job's
    retry policy, an empty history (the dead letter keeps the old one).
    """
    return {
        **dead_execution,
        "attempt": 1,
        "trigger": "REPLAY",
        "fire_at_ms": now_ms,
        "emitted_at_ms": now_ms,
        "history": [],
    }
