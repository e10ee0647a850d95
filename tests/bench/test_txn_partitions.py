"""``bench.txn_partitions``: each timed transaction commits one record to each partition."""

from __future__ import annotations

import uuid
from collections import Counter

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bench.txn_partitions import transaction_times_ms


def test_each_transaction_commits_one_record_per_partition(kafka_bootstrap: str) -> None:
    topic = f"test-txn-partitions-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(topic, 4, 1)]).values():
        future.result()
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": topic})
    producer.init_transactions(30)
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": topic,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        flush_ms, total_ms = transaction_times_ms(producer, topic, 3, 5)
        assert len(flush_ms) == len(total_ms) == 5
        assert all(0 <= f <= t for f, t in zip(flush_ms, total_ms, strict=True))
        consumer.assign([TopicPartition(topic, p, 0) for p in range(4)])
        counts: Counter[int] = Counter()
        for poll in range(100):
            for message in consumer.consume(100, 0.2):
                if message.error() is None:
                    counts[message.partition() or 0] += 1
            if sum(counts.values()) >= 15 and poll >= 2:  # then a little longer: no extras
                break
        assert counts == Counter({0: 5, 1: 5, 2: 5})
    finally:
        consumer.close()
        for future in admin.delete_topics([topic], operation_timeout=30).values():
            future.result()
