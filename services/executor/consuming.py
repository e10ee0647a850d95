"""The group consumer, used from one thread only: consume, queued calls, group metadata.

librdkafka serves a consumer's group operations on the thread that runs its rebalance
callbacks; while a callback waits for the event loop, a ``pause()``, ``seek()`` or
``consumer_group_metadata()`` made on the loop's thread would wait for the callback: a
deadlock. So the loop never calls the consumer while it is open. It queues calls
(:meth:`Consuming.queue`), which the consume thread makes before its next ``consume()`` and
at the end of every rebalance callback, and it reads the group metadata the consume thread
took last.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from streams.kafka.consumer import consume_ready

log = logging.getLogger(__name__)

ConsumerCall = Callable[[Consumer], object]


class Consuming:
    """One consume call at a time on a dedicated thread, plus the calls queued for it."""

    def __init__(self, consumer: Consumer, batch_size: int, timeout_s: float) -> None:
        self.consumer = consumer
        self._batch_size = batch_size
        self._timeout_s = timeout_s
        self._calls: deque[ConsumerCall] = deque()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="kafkron-consume")
        self.group_metadata: object = consumer.consumer_group_metadata()

    def queue(self, call: ConsumerCall) -> None:
        """Make ``call(consumer)`` on the consume thread, before its next consume."""
        self._calls.append(call)

    def start_batch(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[list[Message]]:
        """Consume one batch on the consume thread (rebalance callbacks fire inside it)."""
        return loop.run_in_executor(self._thread, self._batch)

    def _batch(self) -> list[Message]:
        self.run_queued(self.consumer)
        messages = consume_ready(self.consumer, self._batch_size, self._timeout_s)
        self.refresh_metadata(self.consumer)
        return messages

    def start_probe(
        self, loop: asyncio.AbstractEventLoop, partitions: list[tuple[str, int]]
    ) -> asyncio.Future[bool]:
        """:meth:`others_pending` of ``partitions``, on the consume thread."""
        return loop.run_in_executor(self._thread, self.others_pending, partitions)

    def others_pending(self, partitions: list[tuple[str, int]]) -> bool:
        """Whether any of ``partitions`` has records past what consume() handed over.

        Local state only (no broker request): the high watermark librdkafka cached from its
        last fetch, against the position after the last record returned. Under
        ``read_committed`` the position passes a transaction's commit marker, so a partition
        read to its end is not pending; records of a transaction still open are (harmless:
        the caller pauses a lane it need not have).
        """
        if not partitions:
            return False
        consumer = self.consumer
        try:
            positions = consumer.position([TopicPartition(t, p) for t, p in partitions])
        except KafkaException as exc:  # e.g. released meanwhile: pausing is the safe side
            log.debug("positions unknown (%s): taken as pending", exc)
            return True
        for tp in positions:
            low, high = consumer.get_watermark_offsets(tp, cached=True)
            if high < 0:
                continue  # not fetched yet
            position = tp.offset if tp.offset >= 0 else low
            if high > position:
                return True
        return False

    def run_queued(self, consumer: Consumer) -> None:
        """Make the queued calls, oldest first (on the thread that owns the consumer now)."""
        while self._calls:
            call = self._calls.popleft()
            try:
                call(consumer)
            except KafkaException as exc:  # e.g. seeking a partition released meanwhile
                log.debug("consumer call skipped: %s", exc)

    def refresh_metadata(self, consumer: Consumer) -> None:
        """Take the group metadata the next commit sends (a stale one only fences it)."""
        self.group_metadata = consumer.consumer_group_metadata()

    def close(self) -> None:
        """Leave the group (revoke callbacks fire on the calling thread), stop the thread."""
        try:
            self.run_queued(self.consumer)
            self.consumer.close()
        finally:
            self._thread.shutdown(wait=True)
