"""Restore partition stores from their changelogs before their partition processes anything.

A restore reads the changelog partition from the stored offset + 1 (from the beginning when
the local database is new) up to the log end offset measured when it starts, with a
``read_committed`` consumer outside any group. The end is the log end including open
transactions, not the last stable offset: the read position only passes an open transaction
(e.g. one a SIGKILLed previous owner left) once the broker resolved it, so a restore never
finishes while earlier changes might still commit.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from streams.kafka.errors import operation_error
from streams.state.partition import PartitionStore
from streams.state.store import Store

log = logging.getLogger(__name__)
_TIMEOUT_S = 30.0
_LOG_EVERY_S = 5.0
_LEADER_ERRORS = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)


@dataclass
class RecoveryProgress:
    """How far the restore of one store partition got."""

    changelog_topic: str
    partition: int
    start_offset: int
    end_offset: int
    position: int
    applied: int = 0
    started_at: float = field(default_factory=time.monotonic)
    finished_at: float | None = None
    reported_at: float = field(default_factory=time.monotonic)

    @property
    def done(self) -> bool:
        return self.position >= self.end_offset

    def rate_per_s(self) -> float:
        """Records applied per second so far."""
        elapsed = (self.finished_at or time.monotonic()) - self.started_at
        return self.applied / elapsed if elapsed > 0 else 0.0


@dataclass
class _Restore:
    store: Store
    partition_store: PartitionStore
    progress: RecoveryProgress


class Recovery:
    """Restores assigned store partitions in bounded steps driven by the processor's loop."""

    def __init__(
        self,
        consumer: Consumer,
        admin: AdminClient,
        *,
        batch_size: int = 10_000,
        on_progress: Callable[[RecoveryProgress], None] | None = None,
    ) -> None:
        self._consumer = consumer
        self._admin = admin
        self._batch_size = batch_size
        self._on_progress = on_progress
        self._active: dict[tuple[str, int], _Restore] = {}
        self.finished: deque[RecoveryProgress] = deque(maxlen=1024)

    def start(self, store: Store, partition: int) -> RecoveryProgress:
        """Begin restoring one store partition (already opened in ``store``)."""
        topic = store.changelog_topic
        partition_store = store.partition(partition)
        stored = partition_store.changelog_offset()
        low, end = self._watermarks(topic, partition)
        if stored is not None and stored >= end:
            log.warning(
                "%s[%d]: local store at changelog offset %d but the log ends at %d (topic "
                "recreated?); rebuilding it from the changelog",
                topic,
                partition,
                stored,
                end,
            )
            partition_store, stored = store.wipe_partition(partition), None
        start = low if stored is None else stored + 1
        progress = RecoveryProgress(topic, partition, start, end, position=start)
        if progress.done:
            self._finish(progress)
            return progress
        self._active[(topic, partition)] = _Restore(store, partition_store, progress)
        self._consumer.incremental_assign([TopicPartition(topic, partition, start)])
        log.info("%s[%d]: restoring offsets %d..%d", topic, partition, start, end)
        return progress

    def pending(self, partition: int) -> bool:
        """True while any store of ``partition`` is still restoring."""
        return any(p == partition for _, p in self._active)

    def cancel(self, partition: int) -> None:
        """Stop restoring ``partition`` (it was revoked); what was applied stays applied."""
        keys = [key for key in self._active if key[1] == partition]
        if keys:
            self._consumer.incremental_unassign([TopicPartition(t, p) for t, p in keys])
        for key in keys:
            del self._active[key]

    def step(self, timeout_s: float) -> set[int]:
        """Apply one bounded batch; returns the partitions whose restores all completed."""
        if not self._active:
            return set()
        messages = self._consumer.consume(num_messages=self._batch_size, timeout=timeout_s)
        self._apply(messages)
        completed: set[int] = set()
        positions = self._consumer.position([TopicPartition(t, p) for t, p in self._active])
        for tp in positions:
            restore = self._active[(tp.topic, tp.partition)]
            if tp.offset >= 0:
                restore.progress.position = max(restore.progress.position, tp.offset)
            self._report(restore.progress)
            if restore.progress.done:
                del self._active[(tp.topic, tp.partition)]
                self._consumer.incremental_unassign([TopicPartition(tp.topic, tp.partition)])
                self._finish(restore.progress)
                if not self.pending(tp.partition):
                    completed.add(tp.partition)
        return completed

    def close(self) -> None:
        """Close the restore consumer."""
        self._active.clear()
        self._consumer.close()

    def _apply(self, messages: list[Message]) -> None:
        # Per changelog partition: the net updates, the last offset and the record count.
        batches: dict[tuple[str, int], tuple[dict[bytes, bytes | None], int, int]] = {}
        for message in messages:
            error = message.error()
            if error is not None:
                raise operation_error("changelog restore", KafkaException(error))
            key = (message.topic() or "", message.partition() or 0)
            record_key = message.key()
            if key not in self._active or record_key is None:
                continue
            updates, _, count = batches.get(key, ({}, -1, 0))
            updates[record_key] = message.value()  # None is a tombstone: delete
            batches[key] = (updates, message.offset() or 0, count + 1)
        for key, (updates, last_offset, count) in batches.items():
            restore = self._active[key]
            restore.partition_store.write(updates, last_offset)
            restore.progress.applied += count
            restore.progress.position = last_offset + 1

    def _report(self, progress: RecoveryProgress) -> None:
        if self._on_progress is not None:
            self._on_progress(progress)
        now = time.monotonic()
        if now - progress.reported_at >= _LOG_EVERY_S:
            progress.reported_at = now
            log.info(
                "%s[%d]: restoring, at offset %d of %d (%.0f records/s)",
                progress.changelog_topic,
                progress.partition,
                progress.position,
                progress.end_offset,
                progress.rate_per_s(),
            )

    def _finish(self, progress: RecoveryProgress) -> None:
        progress.finished_at = time.monotonic()
        self.finished.append(progress)
        log.info(
            "%s[%d]: restored %d records up to offset %d (%.0f records/s)",
            progress.changelog_topic,
            progress.partition,
            progress.applied,
            progress.end_offset,
            progress.rate_per_s(),
        )

    def _watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """(low watermark, log end offset including open transactions).

        A changelog created a moment ago may have no leader yet (NOT_LEADER_FOR_PARTITION,
        LEADER_NOT_AVAILABLE): such retriable errors are retried until ``_TIMEOUT_S``.
        """
        deadline = time.monotonic() + _TIMEOUT_S
        while True:
            try:
                return self._watermarks_once(topic, partition)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                retriable = isinstance(error, KafkaError) and (
                    error.retriable() or error.code() in _LEADER_ERRORS
                )
                if not retriable or time.monotonic() > deadline:
                    raise
                log.info("%s[%d]: %s; retrying", topic, partition, exc)
                time.sleep(0.2)

    def _watermarks_once(self, topic: str, partition: int) -> tuple[int, int]:
        """Both offsets from the admin client: two ListOffsets requests in flight at once.

        Not from the restore consumer: once it has a partition assigned it sits in a long-poll
        fetch, and ``get_watermark_offsets`` waits behind it (~0.5 s a call, so ~12 s for the
        24 store partitions of a timer restart).
        """
        tp = TopicPartition(topic, partition)
        early, late = (
            self._admin.list_offsets(
                {tp: spec},
                isolation_level=IsolationLevel.READ_UNCOMMITTED,
                request_timeout=_TIMEOUT_S,
            )[tp]
            for spec in (OffsetSpec.earliest(), OffsetSpec.latest())  # type: ignore[no-untyped-call]
        )
        return int(early.result().offset), int(late.result().offset)
