"""Durable produce of job commands: idempotent, ``acks=all``, Java-compatible partitioning.

A command counts as written only when its delivery report came back without error; the
first delivery error of a send is raised (quix-streams' latch-and-raise pattern). A
background thread serves delivery reports, so many threads can send at once and each waits
only for its own records. ``produce_group`` is the same for an asyncio caller: the delivery
reports of a group of records resolve one future on the caller's loop
(:mod:`services.ingest.async_delivery`), so many requests share one producer and its
batches (``linger.ms``) without a thread each.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from services.ingest.async_delivery import AsyncReports, DeliveryGroup
from streams.exceptions import KafkaDeliveryError
from streams.kafka.errors import denied_message
from streams.kafka.partitioner import PARTITION_UA
from streams.settings import KafkaSettings

# Operators may override these through KafkaSettings.librdkafka.
_DEFAULTS: dict[str, Any] = {
    # Requests wait for their records to be durable: the linger is on every create's
    # latency, and with 64 connections the API's rate is bound by that latency (keyed
    # single creates, measured: 5 ms -> 1 ms took write_async from 12-14 ms to 7-9 ms).
    "linger.ms": 1,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 500_000,
    "queue.buffering.max.kbytes": 512 * 1024,
}
# The bulk producer (send_bulk, a whole load at once) batches for throughput instead.
_BULK_DEFAULTS: dict[str, Any] = {"linger.ms": 5}
# Never overridable: these make a delivered command durable, ordered and routed like Java.
_REQUIRED: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "partitioner": "murmur2_random",
}


def murmur2(data: bytes) -> int:
    """Kafka's Java ``Utils.murmur2`` of ``data`` as a signed 32-bit int."""
    m, length = 0x5BD1E995, len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    tail = length & ~3
    for k in struct.unpack_from(f"<{length >> 2}I", data):  # all 4-byte words at once
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Java's default partitioner (and ``murmur2_random``) picks for ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@dataclass(frozen=True, slots=True)
class Delivered:
    """Where the records of one send landed: the highest offset written per partition."""

    topic: str
    offsets: dict[int, int]

    def next_offsets(self) -> dict[tuple[str, int], int]:
        """Per partition, the offset a reader must reach to have seen these records."""
        return {(self.topic, p): o + 1 for p, o in self.offsets.items()}


class _Deliveries:
    """Counts the delivery reports of one send and latches its first error."""

    __slots__ = ("_lock", "done", "error", "offsets", "pending")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.done = threading.Event()
        self.pending = 0
        self.error: KafkaError | None = None
        self.offsets: dict[int, int] = {}

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        with self._lock:
            if error is not None:
                if self.error is None:
                    self.error = error
            else:
                partition, offset = message.partition(), message.offset()
                if partition is not None and offset is not None:
                    self.offsets[partition] = max(offset, self.offsets.get(partition, -1))
            self.pending -= 1
            if self.pending == 0:
                self.done.set()


class _BulkDeliveries:
    """Delivery reports of one bulk send: errors, and the last offset per partition.

    Kept cheap (no lock, no counting): a partition's reports arrive in offset order and are
    served by ``flush`` in one thread. ``report`` is a plain function (a closure), which
    librdkafka's per-record call reaches faster than an instance's ``__call__``.
    """

    __slots__ = ("errors", "last_offsets", "report")

    def __init__(self) -> None:
        errors: list[KafkaError] = []
        last_offsets: dict[int, int] = {}
        self.errors, self.last_offsets = errors, last_offsets

        def report(error: KafkaError | None, message: Message) -> None:
            if error is None:
                last_offsets[message.partition()] = message.offset()  # type: ignore[index,assignment]
            else:
                errors.append(error)

        self.report = report


class CommandProducer:
    """Produces job commands and returns once they are durable (or raises the first error)."""

    def __init__(self, kafka: KafkaSettings, *, delivery_timeout_s: float = 30.0) -> None:
        config = {
            **_DEFAULTS,
            "delivery.timeout.ms": int(delivery_timeout_s * 1000),
            **kafka.client_config(),
            **_REQUIRED,
        }
        self._config = config
        self._bulk_config = {**config, **_BULK_DEFAULTS, **kafka.client_config(), **_REQUIRED}
        self._producer = Producer(config)
        self._bulk: Producer | None = None
        self._bulk_lock = threading.Lock()
        self._timeout_s = delivery_timeout_s
        self._stop = threading.Event()
        self._fatal: KafkaError | None = None
        self._async_reports = AsyncReports(self._delivery_error)
        self._poller = threading.Thread(target=self._serve, name="ingest-producer", daemon=True)
        self._poller.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.1)
            self._async_reports.hand_over()

    @property
    def healthy(self) -> bool:
        """False after a fatal producer error: restart the process."""
        return self._fatal is None and self._poller.is_alive()

    def send(self, topic: str, key: bytes, value: bytes) -> Delivered:
        """Produce one record and wait until it is durable."""
        return self.send_many(topic, ((key, value),))

    def produce_group(self, topic: str, records: Iterable[tuple[bytes, bytes]]) -> DeliveryGroup:
        """Produce (key, value) records from an event loop, as one group to await with
        :meth:`wait_group`. Never blocks the loop: a record the full local queue refuses
        gets a retryable error at once. Keys must differ within a group."""
        group = self._async_reports.group(topic)
        produce, on_delivery = self._producer.produce, group.queue
        count = 0
        for key, value in records:
            try:
                produce(topic, value, key, on_delivery=on_delivery)
            except BufferError:
                group.errors[key] = KafkaDeliveryError(
                    "the producer's local queue is full (the broker is slow or unreachable); "
                    "retry shortly",
                    retryable=True,
                    retry_after_s=1.0,
                )
                continue
            except KafkaException as exc:  # refused locally, e.g. over message.max.bytes
                error = exc.args[0] if exc.args else None
                group.errors[key] = (
                    self._delivery_error(error)
                    if isinstance(error, KafkaError)
                    else KafkaDeliveryError(f"a command was not written: {exc}", retryable=False)
                )
                continue
            count += 1
        group.seal(count)
        return group

    async def wait_group(self, group: DeliveryGroup) -> Delivered:
        """Wait until every record of ``group`` was reported, at most the delivery timeout
        (plus a margin); after that, its records without a report count as failed."""
        # One timer handle per group (cheaper than wait_for + shield, measured ~10 us).
        timer = asyncio.get_running_loop().call_later(self._timeout_s + 5.0, self._expire, group)
        try:
            await group.done
        finally:
            timer.cancel()
        return Delivered(group.topic, dict(group.offsets))

    def _expire(self, group: DeliveryGroup) -> None:
        group.expire(
            KafkaDeliveryError(
                f"a command was not acknowledged within {self._timeout_s:g}s; is the broker "
                "reachable? It may still be written: repeat with the same job id or "
                "idempotency key",
                retryable=True,
            )
        )

    def send_many(self, topic: str, records: Iterable[tuple[bytes, bytes]]) -> Delivered:
        """Produce every (key, value), then wait once for all; raise the first failure.

        For small batches from many threads. Records of one key keep their order
        (idempotent producer). On an error some records may be written and others not;
        sending the same commands again is safe.
        """
        deliveries = _Deliveries()
        produce, poll = self._producer.produce, self._producer.poll
        count = 0
        for key, value in records:
            while True:
                try:
                    produce(topic, value, key, on_delivery=deliveries)
                    break
                except BufferError:  # local queue full: let deliveries drain it
                    poll(0.01)
            count += 1
        with deliveries._lock:
            deliveries.pending += count
            if deliveries.pending == 0:
                deliveries.done.set()
        self._wait(deliveries, count)
        return Delivered(topic, deliveries.offsets)

    def send_bulk(self, topic: str, records: Iterable[tuple[bytes, bytes]]) -> Delivered:
        """Like ``send_many`` for bulk loads: one produce pass, one flush.

        Uses a second producer whose delivery reports are served only by ``flush`` in the
        calling thread: with the report thread of ``send`` serving 100K callbacks while
        this thread produces, the two fight over the GIL and throughput halves.
        """
        producer = self._bulk_producer()
        deliveries = _BulkDeliveries()
        produce, report = producer.produce, deliveries.report
        # Positional (partition -1: the partitioner picks): produce() parses keyword
        # arguments slower, ~0.3 us of its ~1 us per record.
        for key, value in records:
            try:
                produce(topic, value, key, PARTITION_UA, report)
            except BufferError:  # local queue full: serve reports until it takes the record
                while True:
                    producer.poll(0.05)
                    try:
                        produce(topic, value, key, PARTITION_UA, report)
                        break
                    except BufferError:
                        continue
        remaining = producer.flush(self._timeout_s + 5.0)
        if deliveries.errors:
            self._raise(deliveries.errors[0])
        if remaining:
            raise KafkaDeliveryError(
                f"{remaining} commands were not acknowledged within {self._timeout_s:g}s; is the"
                " broker reachable? They may still be written: repeat with the same job ids",
                retryable=True,
            )
        return Delivered(topic, deliveries.last_offsets)

    def _bulk_producer(self) -> Producer:
        with self._bulk_lock:
            if self._bulk is None:
                self._bulk = Producer(self._bulk_config)
            return self._bulk

    def _wait(self, deliveries: _Deliveries, count: int) -> None:
        deadline = time.monotonic() + self._timeout_s + 5.0
        while not deliveries.done.wait(0.05):
            if time.monotonic() > deadline:
                raise KafkaDeliveryError(
                    f"{deliveries.pending} of {count} commands were not acknowledged within "
                    f"{self._timeout_s:g}s; is the broker reachable? They may still be written:"
                    " repeat with the same job ids or idempotency keys",
                    retryable=True,
                )
        if deliveries.error is not None:
            self._raise(deliveries.error)

    def _raise(self, error: KafkaError) -> None:
        raise self._delivery_error(error)

    def _delivery_error(self, error: KafkaError) -> KafkaDeliveryError:
        if error.fatal():
            self._fatal = error
        denied = denied_message("writing a command", error)
        if denied is not None:  # a missing ACL (Write on jobs): say which, do not retry
            return KafkaDeliveryError(denied, retryable=False)
        return KafkaDeliveryError(
            f"a command was not written: {error.str()} ({error.name()}); "
            + ("retry it" if error.retriable() else "check the broker and topic settings"),
            retryable=error.retriable(),
        )

    def close(self, timeout_s: float = 10.0) -> None:
        """Deliver what is queued, stop the report thread, then close the producers.

        What is still undelivered after ``timeout_s`` is dropped (its senders were told
        it may or may not be written), so closing never waits out ``delivery.timeout.ms``.
        A second call does nothing.
        """
        if self._stop.is_set():
            return
        try:
            self._producer.flush(timeout_s)
            if self._bulk is not None:
                self._bulk.flush(timeout_s)
        finally:
            self._stop.set()
            self._poller.join(timeout=5)
            if not self._poller.is_alive():  # never close a client another thread polls
                self._async_reports.hand_over()  # reports served by the flush above
                self._close_clients()

    def _close_clients(self) -> None:
        errors: list[KafkaException] = []
        for producer in (self._producer, self._bulk):
            if producer is None:
                continue
            try:
                producer.purge()
                producer.close()
            except KafkaException as exc:  # a fatal client reports its fatal error again
                errors.append(exc)
        if errors and self._fatal is None:
            raise errors[0]
