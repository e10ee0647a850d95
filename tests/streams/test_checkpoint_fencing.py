"""A zombie's commit of outputs alone is refused: every commit carries the input positions.

A timer frozen past its session and then continued emitted fires from its punctuation and
committed them although another member owned its partitions by then (found by
``bench.chaos``): a transaction without consumer positions carries no member epoch, so the
group coordinator had nothing to refuse. The checkpoint now re-sends the positions it last
committed with every commit. On the real broker: a member commits a consumed record, gives
its partition away (its group metadata kept, as a frozen process keeps it), and its next
commit, of an output alone, must abort and leave nothing visible to ``read_committed``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from streams.checkpoint import Checkpoint, CheckpointAbortedError
from streams.kafka.consumer import group_consumer_config
from streams.kafka.producer import TransactionalProducer
from streams.settings import KafkaSettings
from tests.streams.processor_testkit import create_topics, produce_keyed, read_committed


class FrozenMember:
    """A consumer as a frozen process holds it: the group metadata of before the freeze."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.metadata = consumer.consumer_group_metadata()

    def consumer_group_metadata(self) -> Any:
        return self.metadata

    def seek(self, position: TopicPartition) -> None:  # an abort rewinds nothing here
        raise AssertionError(f"unexpected rewind to {position}")


def consume_one(consumer: Consumer, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            return message
    raise AssertionError("nothing consumed")


@pytest.mark.kafka
def test_a_commit_of_outputs_alone_is_fenced_once_the_member_lost_its_partitions(
    kafka_settings: KafkaSettings,
) -> None:
    settings = kafka_settings.model_copy(update={"partitions": 1})
    source, sink = f"{settings.namespace}in", f"{settings.namespace}out"
    create_topics(settings, [source, sink])
    produce_keyed(settings, source, [(b"k", b"input-1"), (b"k", b"input-2")])
    group = f"{settings.namespace}fence-{uuid.uuid4().hex[:6]}"

    first = Consumer(group_consumer_config(settings, group))
    first.subscribe([source])
    record = consume_one(first)
    producer = TransactionalProducer(settings, f"{group}-tx")
    producer.init()
    frozen = FrozenMember(first)
    checkpoint = Checkpoint(producer, frozen, commit_interval_ms=1_000)  # type: ignore[arg-type]
    checkpoint.note_consumed({(source, 0): record.offset()})
    checkpoint.record_offset(source, 0, record.offset())
    producer.produce(sink, b"k", b"from-the-owner")
    checkpoint.commit()  # the owner's commit: output and position

    first.close()  # the partition goes to the next member; the frozen one keeps its metadata
    second = Consumer(group_consumer_config(settings, group))
    try:
        second.subscribe([source])
        assert consume_one(second).value() == b"input-2"  # it owns the partition now

        producer.produce(sink, b"k", b"from-the-zombie")  # a punctuation's output, no input
        with pytest.raises(CheckpointAbortedError):
            checkpoint.commit()
    finally:
        second.close()
        producer.close()
    values = [r.value for r in read_committed(settings, sink)]
    assert values == [b"from-the-owner"]
