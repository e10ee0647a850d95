"""A namespace's ``jobs`` topic and timer group as the migration reads and writes them.

- :class:`JobsSnapshot`: the latest record of every job up to given end offsets (a tombstone
  deletes), kept in a RocksDB in the migration's work directory: a namespace of 100M jobs
  needs disk for it, not memory, and a resumed migration reads the same snapshot again.
- :class:`JobsWriter`: an idempotent ``acks=all`` producer with the ``murmur2_random``
  partitioner (ingest's, so a job lands on the partition its key picks under the topic's
  partition count, unless a write names its partition), which raises at flush when any
  record was not delivered. The dag store migration writes changelogs with it too.
- :func:`read_range`, :func:`end_offsets`, :func:`committed_offsets`, :func:`group_members`:
  records between offsets (``read_committed``), a topic's ends, a group's committed offsets
  (stable ones only: a transaction in flight does not count) and its members.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from rocksdict import Options, Rdict

from streams.exceptions import KafkaDeliveryError, KafkronError
from streams.kafka.leaders import retriable_offsets_error
from streams.kafka.partitioner import PARTITION_UA
from streams.settings import KafkaSettings

_TIMEOUT_S = 30.0
Record = tuple[int, int, bytes | None, bytes | None]
"""(partition, offset, key, value) of one record; value None is a tombstone."""


def end_offsets(kafka: KafkaSettings, topic: str) -> dict[int, int]:
    """The end offset (high watermark) of every partition of ``topic``; a topic created a
    moment ago, or of a broker just started again, may have no leader yet
    (:data:`~streams.kafka.leaders.LEADER_MOVED`): such errors are retried for ``_TIMEOUT_S``.

    No :func:`~streams.kafka.leaders.refresh_leaders` between tries: that is for an
    AdminClient, whose ListOffsets keeps a stale leader epoch; a consumer's watermark query
    asks for the metadata again by itself when it finds no leader or a leader error answers
    (librdkafka's leader lookup and ListOffsets handler force a refresh).
    """
    consumer = _reader(kafka)
    deadline = time.monotonic() + _TIMEOUT_S
    try:
        metadata = consumer.list_topics(topic, timeout=_TIMEOUT_S).topics.get(topic)
        if metadata is None or metadata.error is not None:
            raise KafkronError(f"topic {topic} does not exist; run 'kafkron topics create'")
        ends: dict[int, int] = {}
        for partition in sorted(metadata.partitions):
            while partition not in ends:
                try:
                    tp = TopicPartition(topic, partition)
                    ends[partition] = consumer.get_watermark_offsets(tp, timeout=_TIMEOUT_S)[1]
                except KafkaException as exc:
                    if not retriable_offsets_error(exc) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        return ends
    finally:
        consumer.close()


def read_range(
    kafka: KafkaSettings,
    topic: str,
    starts: dict[int, int],
    ends: dict[int, int],
    timeout_s: float = 120.0,
) -> Iterator[Record]:
    """Every committed record of ``topic`` from ``starts`` (default 0) up to ``ends``."""
    pending = {p: end for p, end in ends.items() if end > starts.get(p, 0)}
    if not pending:
        return
    consumer = _reader(kafka)
    try:
        consumer.assign([TopicPartition(topic, p, starts.get(p, 0)) for p in pending])
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise KafkronError(
                    f"{topic} partitions {sorted(pending)} not read to their ends {pending} "
                    f"within {timeout_s:.0f} s; a transaction still open holds them back: "
                    "run the command again"
                )
            for message in consumer.consume(10_000, 0.5):
                record = _record(message, pending)
                if record is not None:
                    yield record
            for tp in consumer.position([TopicPartition(topic, p) for p in pending]):
                if tp.offset >= pending.get(tp.partition, 0):
                    pending.pop(tp.partition, None)
    finally:
        consumer.close()


def _record(message: Message, pending: dict[int, int]) -> Record | None:
    if message.error() is not None:
        return None  # partition EOF, or a transient error librdkafka retries
    partition, offset = message.partition() or 0, message.offset() or 0
    if offset >= pending.get(partition, 0):
        return None
    return partition, offset, message.key(), message.value()


def _reader(kafka: KafkaSettings) -> Consumer:
    return Consumer(
        kafka.client_config(
            **{
                "group.id": f"kafkron-migration-reader-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
    )


def committed_offsets(
    kafka: KafkaSettings, group_id: str, topic: str, partitions: list[int]
) -> dict[int, int]:
    """The stable committed offsets of ``group_id`` on those partitions (missing: none yet,
    or a transaction carrying new ones is still open)."""
    admin = AdminClient(kafka.client_config())
    wanted = [TopicPartition(topic, p) for p in partitions]
    request = [ConsumerGroupTopicPartitions(group_id, wanted)]
    try:
        futures = admin.list_consumer_group_offsets(
            request, require_stable=True, request_timeout=10
        )
        answer = futures[group_id].result()
    except KafkaException:
        return {}  # e.g. UNSTABLE_OFFSET_COMMIT while a transaction is open: ask again
    return {tp.partition: tp.offset for tp in answer.topic_partitions if tp.offset >= 0}


def group_members(kafka: KafkaSettings, group_id: str) -> int:
    """How many members ``group_id`` has now (0 when it is unknown or empty)."""
    admin = AdminClient(kafka.client_config())
    try:
        described = admin.describe_consumer_groups([group_id], request_timeout=10)
        return len(described[group_id].result().members)
    except KafkaException:
        return 0


class JobsWriter:
    """Writes records to one topic (a ``jobs`` topic, or a changelog with explicit
    partitions); :meth:`flush` raises unless all arrived."""

    def __init__(self, kafka: KafkaSettings, topic: str) -> None:
        self.topic = topic
        self.written = 0
        self.last_offsets: dict[int, int] = {}  # partition -> highest offset delivered
        self._errors: list[str] = []
        self._producer = Producer(
            kafka.client_config(
                **{
                    "enable.idempotence": True,
                    "acks": "all",
                    "partitioner": "murmur2_random",
                    "linger.ms": 5,
                }
            )
        )

    def write(self, key: bytes, value: bytes | None, partition: int = PARTITION_UA) -> None:
        """Queue one record (``value`` None: a tombstone) to ``partition`` (by default the
        partition of ``key``)."""
        while True:
            try:
                self._producer.produce(
                    self.topic, value, key, partition=partition, on_delivery=self._delivered
                )
                break
            except BufferError:
                self._producer.poll(0.05)
        self.written += 1

    def flush(self, timeout_s: float = 120.0) -> None:
        """Wait for every delivery; raise KafkaDeliveryError naming what failed."""
        left = self._producer.flush(timeout_s)
        if left or self._errors:
            raise KafkaDeliveryError(
                f"{left} records to {self.topic} still undelivered after {timeout_s:.0f} s, "
                f"errors: {self._errors[:3]}; nothing is lost by running the command again "
                "(its writes repeat the same versions)"
            )

    def _delivered(self, error: Any, message: Message) -> None:
        if error is not None:
            self._errors.append(str(error))
            return
        partition, offset = message.partition() or 0, message.offset() or 0
        self.last_offsets[partition] = max(offset, self.last_offsets.get(partition, -1))


class JobsSnapshot:
    """Every job's latest record of a ``jobs`` topic, by job key, in a RocksDB at ``path``."""

    def __init__(self, path: Path) -> None:
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        path.mkdir(parents=True, exist_ok=True)
        self._db: Rdict | None = Rdict(str(path), options=options)

    def fill(self, records: Iterator[Record]) -> tuple[int, int]:
        """Apply ``records`` in log order (a later record of a key replaces it, a tombstone
        deletes it); returns (records read, records without a key)."""
        db, read, keyless = self._open(), 0, 0
        for _, _, key, value in records:
            read += 1
            if key is None:
                keyless += 1
            elif value is None:
                db.delete(key)
            else:
                db[key] = value
        db.flush()
        return read, keyless

    def get(self, key: bytes) -> bytes | None:
        value = self._open().get(key)
        return cast("bytes | None", value)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every job's latest record, in key order."""
        iterator = cast("Iterator[tuple[bytes, bytes]]", self._open().items())
        try:
            yield from iterator
        finally:
            del iterator

    def close(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            db.close()

    def _open(self) -> Rdict:
        if self._db is None:
            raise KafkronError("the jobs snapshot is closed")
        return self._db
