"""Catch-up before keyed creates, against the real broker: end offsets and coalesced rounds.

A keyed create must see every write of its key acknowledged before it arrived, from any
process. These tests prove the pieces that give that guarantee: the C-level ListOffsets
answers what the public admin call answers, and a caught-up wait started after a foreign
write was acknowledged always ends with the view past that write, also while other rounds
(up to two) are in flight.
"""

from __future__ import annotations

import asyncio
import random

import pytest
from confluent_kafka import IsolationLevel, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from services.ingest.catch_up import AsyncCatchUp
from services.ingest.end_offsets import end_offsets
from services.ingest.settings import IngestSettings
from services.ingest.view import StatusView
from streams.topics import TopicNames

pytestmark = pytest.mark.kafka


def _produce(settings: IngestSettings, topic: str, count: int) -> dict[int, int]:
    """``count`` records spread over the partitions; the last offset acknowledged in each."""
    producer = Producer(settings.kafka.client_config(acks="all"))
    last: dict[int, int] = {}

    def delivered(error: object, message: object) -> None:
        assert error is None, error
        partition, offset = message.partition(), message.offset()  # type: ignore[attr-defined]
        last[partition] = max(offset, last.get(partition, -1))

    for i in range(count):
        producer.produce(topic, b"not a job", f"key-{i}".encode(), on_delivery=delivered)
    assert producer.flush(20) == 0
    return last


def test_end_offsets_equal_the_public_list_offsets(
    ingest_settings: IngestSettings,
) -> None:
    jobs = TopicNames(ingest_settings.kafka.namespace).jobs
    last = _produce(ingest_settings, jobs, 50)
    partitions = [(jobs, p) for p in range(ingest_settings.kafka.partitions)]
    with StatusView(ingest_settings) as view:
        public = view.latest_offsets(partitions)
        admin = AdminClient(ingest_settings.kafka.client_config())
        fast = asyncio.run(end_offsets(admin, partitions, 10.0, IsolationLevel.READ_COMMITTED))
    assert fast == public
    for partition, offset in last.items():
        assert fast[(jobs, partition)] == offset + 1


def test_end_offsets_raise_for_a_missing_partition(
    ingest_settings: IngestSettings,
) -> None:
    jobs = TopicNames(ingest_settings.kafka.namespace).jobs
    admin = AdminClient(ingest_settings.kafka.client_config())
    with pytest.raises(KafkaException):
        asyncio.run(end_offsets(admin, [(jobs, 999)], 5.0, IsolationLevel.READ_UNCOMMITTED))


def test_a_wait_started_after_a_foreign_write_ends_past_it(
    ingest_settings: IngestSettings,
) -> None:
    """Writes another process acknowledged, each followed at once by a caught-up wait,
    while a stream of other waits keeps rounds in flight: every wait that says True has
    the view past that write."""
    jobs = TopicNames(ingest_settings.kafka.namespace).jobs
    count = ingest_settings.kafka.partitions
    producer = Producer(ingest_settings.kafka.client_config(acks="all"))

    async def scenario(view: StatusView) -> list[tuple[int, int, int]]:
        catch_up = AsyncCatchUp(view)
        stop = asyncio.Event()

        async def background() -> None:  # keeps rounds starting and in flight
            while not stop.is_set():
                await catch_up.caught_up([(jobs, random.randrange(count))], 10.0)

        others = [asyncio.create_task(background()) for _ in range(8)]
        seen: list[tuple[int, int, int]] = []
        try:
            for i in range(30):
                partition = i % count
                acked: list[int | None] = []

                def on_delivery(
                    error: KafkaError | None, message: Message, acked: list[int | None] = acked
                ) -> None:
                    acked.append(message.offset())

                producer.produce(
                    jobs, b"foreign", b"k", partition=partition, on_delivery=on_delivery
                )
                await asyncio.to_thread(producer.flush, 10)
                assert len(acked) == 1 and acked[0] is not None  # delivered: it has its offset
                assert await catch_up.caught_up([(jobs, partition)], 10.0)
                seen.append((partition, acked[0], view.position((jobs, partition))))
        finally:
            stop.set()
            await asyncio.gather(*others)
        return seen

    with StatusView(ingest_settings) as view:
        seen = asyncio.run(scenario(view))
    for partition, offset, position in seen:
        assert position > offset, (partition, offset, position)
