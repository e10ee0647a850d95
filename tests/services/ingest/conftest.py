"""Fixtures of the ingest tests: settings on the session broker and helpers to read topics."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from services.ingest.settings import IngestSettings
from streams.settings import KafkaSettings


@pytest.fixture
def ingest_settings(topics: KafkaSettings, tmp_path: Path) -> IngestSettings:
    """Ingest settings on a fresh namespace whose topics exist, the view under tmp_path."""
    return IngestSettings(kafka=topics, view_dir=tmp_path / "view", view_catch_up_timeout_s=20.0)


def read_topic(settings: KafkaSettings, topic: str, timeout_s: float = 20.0) -> list[Message]:
    """Every record of ``topic`` (all partitions, read_committed), up to its end now."""
    consumer = Consumer(
        settings.client_config(
            **{
                "group.id": "ingest-test-reader",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
            }
        )
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = list(metadata.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        at_end: set[int] = set()
        records: list[Message] = []
        for message in _poll_until(consumer, timeout_s):
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                at_end.add(message.partition() or 0)
                if at_end == set(partitions):
                    return records
            elif error is None:
                records.append(message)
        raise AssertionError(f"{topic} not read to its end within {timeout_s}s")
    finally:
        consumer.close()


def _poll_until(consumer: Consumer, timeout_s: float) -> Iterator[Message]:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None:
            yield message
