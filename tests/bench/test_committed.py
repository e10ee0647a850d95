"""``bench.committed``: when every partition's last stable offset passed its last record."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bench.committed import StableOffsets, StableOffsetWatch, first_time_past
from streams.kafka.producer import TransactionalProducer
from streams.settings import KafkaSettings

A, B = ("due.normal", 0), ("due.high", 3)


def test_first_poll_with_every_partition_past_its_last_offset() -> None:
    polls = [
        StableOffsets(100, {A: 5, B: 0}),
        StableOffsets(110, {A: 11, B: 7}),  # A's last record (10) committed, B's (7) not yet
        StableOffsets(120, {A: 11, B: 9}),  # both past: this one
        StableOffsets(130, {A: 12, B: 9}),
    ]
    assert first_time_past(polls, {A: 10, B: 7}) == 120


def test_lso_equal_to_the_last_offset_is_not_past() -> None:
    # The LSO is the first offset not yet committed: equal means the record is still open.
    assert first_time_past([StableOffsets(100, {A: 10})], {A: 10}) is None


def test_polls_out_of_order_and_missing_partitions() -> None:
    polls = [
        StableOffsets(300, {A: 20, B: 20}),
        StableOffsets(200, {A: 20}),  # B's answer failed: not past
        StableOffsets(250, {A: 3, B: 20}),
    ]
    assert first_time_past(polls, {A: 10, B: 7}) == 300


def test_never_past_and_nothing_to_wait_for() -> None:
    assert first_time_past([StableOffsets(100, {A: 1})], {A: 10}) is None
    assert first_time_past([], {A: 10}) is None
    assert first_time_past([StableOffsets(100, {})], {}) == 100


@pytest.mark.kafka
def test_watch_sees_a_transaction_commit_after_it_happens(
    kafka_bootstrap: str, namespace: str
) -> None:
    """On the real broker: the LSO passes the records only once their transaction committed."""
    bootstrap = kafka_bootstrap
    topic = f"{namespace}lso"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result()
    settings = KafkaSettings(bootstrap_servers=bootstrap, namespace=namespace, partitions=2)
    producer = TransactionalProducer(settings, f"lso-{uuid.uuid4().hex[:8]}")
    watch = StableOffsetWatch(bootstrap, [(topic, 0), (topic, 1)], interval_ms=10)
    try:
        producer.init()
        producer.produce_many([(topic, b"k", b"v")] * 5, partition=0)
        producer.produce_many([(topic, b"k", b"v")] * 3, partition=1)
        producer.poll()
        watch.start()
        time.sleep(0.5)
        committed_from_ms = time.time_ns() // 1_000_000
        producer.commit()
        committed_by_ms = time.time_ns() // 1_000_000
        time.sleep(0.3)
        watch.stop()
        assert watch.failures == 0
        assert len(watch.polls) > 10
        last_records = {(topic, 0): 4, (topic, 1): 2}  # a fresh topic: 5 and 3 records
        seen_ms = first_time_past(watch.polls, last_records)
        assert seen_ms is not None
        assert committed_from_ms <= seen_ms <= committed_by_ms + 100
        assert all(p.offsets[(topic, 0)] == 0 for p in watch.polls if p.at_ms < committed_from_ms)
        assert 0 < watch.cpu_s < 1.0
    finally:
        watch.stop()
        producer.close()
        admin.delete_topics([topic])[topic].result()
