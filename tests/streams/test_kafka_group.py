"""The group protocol choice (KIP-848, range) verified on the real broker."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from streams.kafka.consumer import create_group_consumer, group_consumer_config
from streams.kafka.errors import ErrorKind, operation_error
from streams.settings import KafkaSettings
from tests.streams.processor_testkit import create_topics

pytestmark = pytest.mark.kafka


def poll_until(
    consumers: list[Consumer], condition: Callable[[], bool], timeout_s: float = 30
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "group did not settle"
        for consumer in consumers:
            consumer.consume(10, 0.1)


def numbers(consumer: Consumer, topic: str) -> set[int]:
    return {tp.partition for tp in consumer.assignment() if tp.topic == topic}


def test_range_assignor_keeps_co_partitioning_and_revokes_incrementally(
    kafka_settings: KafkaSettings,
) -> None:
    a, b = kafka_settings.namespace + "a", kafka_settings.namespace + "b"
    create_topics(kafka_settings, [a, b])
    group = kafka_settings.namespace + "g"
    revoked: list[TopicPartition] = []
    first = create_group_consumer(kafka_settings, group)
    first.subscribe([a, b], on_revoke=lambda _, tps: revoked.extend(tps))
    second = create_group_consumer(kafka_settings, group)
    try:
        poll_until([first], lambda: len(first.assignment()) == 8)
        second.subscribe([a, b])
        poll_until(
            [first, second], lambda: len(first.assignment()) == len(second.assignment()) == 4
        )
        for consumer in (first, second):
            assert numbers(consumer, a) == numbers(consumer, b)  # same partition numbers
        assert numbers(first, a) | numbers(second, a) == {0, 1, 2, 3}
        assert {tp.partition for tp in revoked} == numbers(second, a)  # only what moved
    finally:
        first.close()
        second.close()


def test_lost_partitions_and_stale_group_metadata_abort_the_transaction(
    kafka_settings: KafkaSettings,
) -> None:
    topic = kafka_settings.namespace + "in"
    create_topics(kafka_settings, [topic])
    group = kafka_settings.namespace + "g"
    config = group_consumer_config(kafka_settings, group)
    config["max.poll.interval.ms"] = 2000  # a stalled member is removed from the group
    consumer = Consumer(config)
    lost: list[TopicPartition] = []
    consumer.subscribe([topic], on_lost=lambda _, tps: lost.extend(tps))
    producer = Producer(kafka_settings.client_config(**{"transactional.id": group}))
    try:
        poll_until([consumer], lambda: len(consumer.assignment()) == 4)
        stale = consumer.consumer_group_metadata()
        time.sleep(3.5)
        poll_until([consumer], lambda: bool(lost))
        assert {tp.partition for tp in lost} == {0, 1, 2, 3}
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, b"out", partition=0)
        with pytest.raises(KafkaException) as raised:
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], stale, 30)
            producer.commit_transaction(30)
        assert operation_error("commit", raised.value).kind is ErrorKind.ABORT_TRANSACTION
        producer.abort_transaction(30)
    finally:
        consumer.close()
        producer.close()
