"""Small helpers for the processor, recovery and Kafka tests (real broker, no mocks)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Consumer, IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin._listoffsets import OffsetSpec
from confluent_kafka.cimpl import NewTopic

from streams.admin import admin_client
from streams.settings import KafkaSettings


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def create_topics(
    settings: KafkaSettings, names: Iterable[str], config: dict[str, str] | None = None
) -> None:
    admin = admin_client(settings)
    new = [NewTopic(n, settings.partitions, 1, config=config or {}) for n in names]
    for future in admin.create_topics(new).values():
        future.result()
    deadline = time.monotonic() + 30
    wanted = {t.topic for t in new}
    while not wanted <= set(admin.list_topics(timeout=10).topics):
        assert time.monotonic() < deadline, "topics did not appear"
        time.sleep(0.05)


def produce_keyed(
    settings: KafkaSettings, topic: str, records: Iterable[tuple[bytes, bytes]]
) -> int:
    producer = Producer(settings.client_config(partitioner="murmur2_random", **{"linger.ms": 20}))
    count = 0
    for key, value in records:
        while True:
            try:
                producer.produce(topic, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.05)
        count += 1
    assert producer.flush(30) == 0
    return count


def end_offsets(settings: KafkaSettings, topic: str) -> dict[int, int]:
    """Log end offsets (including open transactions) per partition."""
    admin = admin_client(settings)
    tps = [TopicPartition(topic, p) for p in range(settings.partitions)]
    latest = {tp: OffsetSpec.latest() for tp in tps}
    futures = admin.list_offsets(latest, isolation_level=IsolationLevel.READ_UNCOMMITTED)
    return {tp.partition: f.result().offset for tp, f in futures.items()}


def read_committed(settings: KafkaSettings, topic: str, timeout_s: float = 60) -> list[Record]:
    """Every committed record of ``topic``, read until each partition's log end is passed."""
    ends = end_offsets(settings, topic)
    consumer = Consumer(
        settings.client_config(
            **{
                "group.id": "reader",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        records: list[Record] = []
        pending = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + timeout_s
        while pending:
            assert time.monotonic() < deadline, f"reading {topic} did not reach {ends}"
            for m in consumer.consume(10_000, 0.2):
                assert m.error() is None, m.error()
                records.append(Record(m.partition() or 0, m.offset() or 0, m.key(), m.value()))
            for tp in consumer.position([TopicPartition(topic, p) for p in pending]):
                if tp.offset >= ends[tp.partition]:
                    pending.discard(tp.partition)
        return records
    finally:
        consumer.close()


def committed_offsets(settings: KafkaSettings, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer(settings.client_config(**{"group.id": group, "enable.auto.commit": False}))
    try:
        tps = [TopicPartition(topic, p) for p in range(settings.partitions)]
        return {tp.partition: max(tp.offset, 0) for tp in consumer.committed(tps, timeout=30)}
    finally:
        consumer.close()


def uncounted_inputs(
    inputs: Iterable[Record], totals: Iterable[Record]
) -> dict[int, list[tuple[int, int]]]:
    """Per partition, the input offset ranges that no committed running total accounts for.

    Replays each input partition in offset order against the totals of the same partition
    (a counter emits ``key -> count`` for each record, in input order): an input whose
    expected total is not the next one emitted was skipped. Used to explain a failed count.
    """
    emitted: dict[int, list[Record]] = {}
    for record in totals:
        emitted.setdefault(record.partition, []).append(record)
    ranges: dict[int, list[tuple[int, int]]] = {}
    for partition, records in _by_partition(inputs).items():
        outputs, counts, i = emitted.get(partition, []), Counter[bytes | None](), 0
        for record in records:
            expected = str(counts[record.key] + 1).encode()
            if i < len(outputs) and (outputs[i].key, outputs[i].value) == (record.key, expected):
                counts[record.key] += 1
                i += 1
                continue
            spans = ranges.setdefault(partition, [])
            if spans and spans[-1][1] == record.offset - 1:
                spans[-1] = (spans[-1][0], record.offset)
            else:
                spans.append((record.offset, record.offset))
    return ranges


def _by_partition(records: Iterable[Record]) -> dict[int, list[Record]]:
    grouped: dict[int, list[Record]] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        grouped.setdefault(record.partition, []).append(record)
    return grouped
