"""DeliveryGroup and AsyncReports: pure logic, with stand-in messages (no broker needed)."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

from confluent_kafka import KafkaError

from services.ingest.async_delivery import AsyncReports
from streams.exceptions import KafkaDeliveryError


@dataclass
class FakeMessage:
    """What a delivery report hands over: key, partition, offset."""

    _key: bytes
    _partition: int
    _offset: int

    def key(self) -> bytes:
        return self._key

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset


def to_error(error: KafkaError) -> KafkaDeliveryError:
    return KafkaDeliveryError(error.str(), retryable=error.retriable())


def test_a_group_resolves_once_every_record_is_reported_from_another_thread() -> None:
    async def scenario() -> None:
        reports = AsyncReports(to_error)
        group = reports.group("jobs")
        messages = [FakeMessage(f"k{i}".encode(), i % 2, 10 + i) for i in range(4)]

        def report_thread() -> None:  # what the producer's report thread does
            for i, message in enumerate(messages):
                error = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if i == 2 else None
                group.queue(error, message)  # type: ignore[arg-type]
            reports.hand_over()

        group.seal(len(messages))
        assert not group.done.done()
        thread = threading.Thread(target=report_thread)
        thread.start()
        await asyncio.wait_for(group.done, 5)
        thread.join()
        assert group.error_for(b"k0") is None and group.error_for(b"k3") is None
        error = group.error_for(b"k2")
        assert isinstance(error, KafkaDeliveryError) and not error.retryable
        assert group.offsets == {0: 10, 1: 13}  # k2 (partition 0, offset 12) failed

    asyncio.run(scenario())


def test_a_group_sealed_after_its_reports_still_resolves() -> None:
    async def scenario() -> None:
        reports = AsyncReports(to_error)
        group = reports.group("jobs")
        group.queue(None, FakeMessage(b"a", 0, 1))  # type: ignore[arg-type]
        reports.hand_over()
        await asyncio.sleep(0)  # the loop settles the report
        assert not group.done.done()
        group.seal(1)
        assert group.done.done() and group.error_for(b"a") is None

    asyncio.run(scenario())


def test_an_expired_group_answers_the_timeout_for_records_without_an_error() -> None:
    async def scenario() -> None:
        reports = AsyncReports(to_error)
        group = reports.group("jobs")
        group.seal(2)
        timeout = KafkaDeliveryError("not acknowledged in time", retryable=True)
        group.expire(timeout)
        assert group.done.done()
        assert group.error_for(b"late") is timeout
        # A report after expiry changes nothing the caller already answered.
        group.queue(None, FakeMessage(b"late", 0, 5))  # type: ignore[arg-type]
        reports.hand_over()
        await asyncio.sleep(0)
        assert group.error_for(b"late") is timeout

    asyncio.run(scenario())


def test_an_empty_group_is_done_when_sealed() -> None:
    async def scenario() -> None:
        group = AsyncReports(to_error).group("jobs")
        group.seal(0)
        assert group.done.done()

    asyncio.run(scenario())
