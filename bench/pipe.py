"""The baseline every benchmark divides by: raw confluent-kafka produce, then consume."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic


@dataclass(frozen=True)
class PipeFigures:
    """Raw pipe rates on this broker, now."""

    records: int
    produce_per_s: float
    consume_per_s: float


def measure_pipe(
    bootstrap: str, records: int, partitions: int = 12, size: int = 100
) -> PipeFigures:
    """Produce ``records`` keyed records of ``size`` bytes to a fresh topic, then consume them."""
    topic = f"bench.pipe.{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[
        topic
    ].result()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1_000_000,
            "partitioner": "murmur2_random",
        }
    )
    value = b"x" * size
    keys = [f"job-{i}".encode() for i in range(10_000)]
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, keys[i % 10_000])
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush()
    produce_s = time.perf_counter() - started

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.max.bytes": 52_428_800,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    started = time.perf_counter()
    while seen < records:
        for message in consumer.consume(num_messages=10_000, timeout=1.0):
            if message.error() is None:
                seen += 1
    consume_s = time.perf_counter() - started
    consumer.close()
    for future in admin.delete_topics([topic], operation_timeout=30).values():
        future.result()  # a benchmark leaves no topic behind
    return PipeFigures(records, records / produce_s, records / consume_s)
