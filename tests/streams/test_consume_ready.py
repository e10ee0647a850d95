"""consume_ready: a consume that returns as soon as a record is there (scripted, then real)."""

from __future__ import annotations

import time
from typing import Any, cast

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from streams.kafka.consumer import consume_ready
from streams.settings import KafkaSettings
from tests.streams.processor_testkit import create_topics


class ScriptedConsumer:
    """Answers ``consume`` and ``poll`` from a queue, recording every call."""

    def __init__(
        self, queued: list[str], arrives: str | None = None, behind: list[str] | None = None
    ) -> None:
        self.queued = queued
        self.arrives = arrives  # what a blocking poll gets (None: it times out)
        self.behind = behind or []  # queued once that poll returned
        self.calls: list[tuple[Any, ...]] = []

    def consume(self, num_messages: int, timeout: float) -> list[str]:
        self.calls.append(("consume", num_messages, timeout))
        taken, self.queued = self.queued[:num_messages], self.queued[num_messages:]
        return taken

    def poll(self, timeout: float) -> str | None:
        self.calls.append(("poll", timeout))
        first, self.arrives = self.arrives, None
        self.queued += self.behind
        return first


def ready(consumer: ScriptedConsumer, batch: int, timeout_s: float) -> list[str]:
    return cast(list[str], consume_ready(cast(Consumer, consumer), batch, timeout_s))


def test_queued_records_are_returned_without_waiting() -> None:
    consumer = ScriptedConsumer(["a", "b", "c"])
    assert ready(consumer, 2, 5.0) == ["a", "b"]
    assert consumer.calls == [("consume", 2, 0)]


def test_a_quiet_consumer_waits_for_the_first_record_then_takes_what_queued_behind() -> None:
    consumer = ScriptedConsumer([], arrives="first", behind=["second", "third"])
    assert ready(consumer, 10, 5.0) == ["first", "second", "third"]
    assert consumer.calls == [("consume", 10, 0), ("poll", 5.0), ("consume", 9, 0)]


def test_nothing_within_the_timeout_is_an_empty_batch() -> None:
    consumer = ScriptedConsumer([])
    assert ready(consumer, 10, 0.5) == []
    assert consumer.calls == [("consume", 10, 0), ("poll", 0.5)]


def test_no_timeout_never_blocks_and_a_batch_of_one_takes_only_the_first() -> None:
    consumer = ScriptedConsumer([])
    assert ready(consumer, 10, 0.0) == []
    assert consumer.calls == [("consume", 10, 0)]
    single = ScriptedConsumer([], arrives="only")
    assert ready(single, 1, 5.0) == ["only"]
    assert single.calls == [("consume", 1, 0), ("poll", 5.0)]


@pytest.mark.kafka
def test_a_record_is_returned_long_before_the_timeout_on_the_real_broker(
    kafka_settings: KafkaSettings,
) -> None:
    """librdkafka's consume(1000, 20 s) would hold three records for the whole 20 s."""
    topic = kafka_settings.namespace + "ready"
    create_topics(kafka_settings, [topic])
    producer = Producer(kafka_settings.client_config())
    for i in range(3):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {**kafka_settings.client_config(), "group.id": topic, "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        got: list[bytes] = []
        began = time.monotonic()
        while len(got) < 3 and time.monotonic() - began < 10:
            got.extend(m.value() or b"" for m in consume_ready(consumer, 1000, 20.0))
        assert got == [b"v0", b"v1", b"v2"]
        assert time.monotonic() - began < 10  # not the 20 s a full-batch consume waits
    finally:
        consumer.close()
