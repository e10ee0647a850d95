"""Delivery reports for an event loop: one future per group of records, not one per record.

librdkafka reports each delivery on the producer's report thread. A future per record
(created, resolved through ``call_soon``, awaited) costs ~15 us each here, more than the
create it waits for; so records produced together form a :class:`DeliveryGroup` with one
future. The report thread only queues ``(group, error, message)``; after each poll it hands
the queue to each loop in one ``call_soon_threadsafe``, and the loop counts the reports
into their groups (all group state lives on the loop's thread).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable

from confluent_kafka import KafkaError, Message

_Report = tuple["DeliveryGroup", KafkaError | None, Message]


class DeliveryGroup:
    """The records one caller produced together: per key its error, per partition its
    last offset, and ``done``, resolved once every record was reported."""

    __slots__ = ("_expected", "_reported", "_sink", "done", "errors", "offsets", "timed_out",
                 "topic", "written")  # fmt: skip

    def __init__(self, loop: asyncio.AbstractEventLoop, topic: str, sink: deque[_Report]) -> None:
        self.topic = topic
        self.done: asyncio.Future[None] = loop.create_future()
        self.errors: dict[bytes, BaseException] = {}
        self.offsets: dict[int, int] = {}
        self.written: list[tuple[bytes, int, int]] = []  # (key, partition, offset)
        self.timed_out: BaseException | None = None
        self._expected: int | None = None
        self._reported = 0
        self._sink = sink

    def queue(self, error: KafkaError | None, message: Message) -> None:
        """The ``on_delivery`` callback (report thread): queue the report, nothing else."""
        self._sink.append((self, error, message))

    def report(self, error: BaseException | None, message: Message) -> None:
        """Count one report (loop thread)."""
        if error is None:
            partition, offset = message.partition(), message.offset()
            if (
                partition is not None
                and offset is not None
                and offset > self.offsets.get(partition, -1)
            ):
                self.offsets[partition] = offset
            if partition is not None and offset is not None:
                self.written.append((message.key() or b"", partition, offset))
        else:
            self.errors[message.key() or b""] = error
        self._reported += 1
        self._check()

    def seal(self, count: int) -> None:
        """All records are produced: ``count`` reports are to come (loop thread)."""
        self._expected = count
        self._check()

    def _check(self) -> None:
        expected = self._expected
        if expected is not None and self._reported >= expected and not self.done.done():
            self.done.set_result(None)

    def expire(self, error: BaseException) -> None:
        """No more waiting: from now on every record of the group without an error of its
        own answers ``error`` (a retryable "may be written"), reported or not."""
        if not self.done.done():
            self.timed_out = error
            self.done.set_result(None)

    def error_for(self, key: bytes) -> BaseException | None:
        """Why the record with ``key`` is not known to be written, or None when it is."""
        return self.errors.get(key, self.timed_out)


class AsyncReports:
    """The queue between the report thread and the loops waiting for delivery groups."""

    def __init__(self, to_error: Callable[[KafkaError], BaseException]) -> None:
        self._queue: deque[_Report] = deque()
        self._to_error = to_error

    def group(self, topic: str) -> DeliveryGroup:
        """A new group on the running loop."""
        return DeliveryGroup(asyncio.get_running_loop(), topic, self._queue)

    def hand_over(self) -> None:
        """Report thread, after a poll: pass the queued reports on, one wake-up per loop."""
        if not self._queue:
            return
        by_loop: dict[asyncio.AbstractEventLoop, list[_Report]] = {}
        queue = self._queue
        while queue:
            report = queue.popleft()
            by_loop.setdefault(report[0].done.get_loop(), []).append(report)
        for loop, reports in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(self._settle, reports)

    def _settle(self, reports: list[_Report]) -> None:
        to_error = self._to_error
        for group, error, message in reports:
            group.report(None if error is None else to_error(error), message)
