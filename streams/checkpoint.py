"""What a processor did since its last commit, and the one place that commits it.

Inputs read, outputs produced, store writes and their changelog records all belong to one
Kafka transaction; :meth:`Checkpoint.commit` spells out the order that keeps them exactly once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection

from confluent_kafka import Consumer, KafkaException, TopicPartition

from streams.exceptions import KafkronError
from streams.kafka.errors import KafkaOperationError
from streams.kafka.producer import TransactionalProducer
from streams.runtime_stats import RuntimeStats
from streams.state.store import Store
from streams.state.transaction import StoreTransaction

log = logging.getLogger(__name__)


def _positions_text(offsets: dict[tuple[str, int], int], plus: int) -> str:
    """``topic[partition]@offset`` for each entry, for logs (``plus`` shifts every offset)."""
    return ", ".join(f"{t}[{p}]@{o + plus}" for (t, p), o in sorted(offsets.items()))


class CheckpointAbortedError(KafkronError):
    """The Kafka transaction was aborted: store writes were dropped and the input rewound.

    Nothing is lost: the records since the last commit are read and processed again.
    """

    retryable = True


class Checkpoint:
    """Input positions, store transactions and the open Kafka transaction since the last commit."""

    def __init__(
        self,
        producer: TransactionalProducer,
        consumer: Consumer,
        commit_interval_ms: int,
        stats: RuntimeStats | None = None,
    ) -> None:
        self._commit_seconds = (stats if stats is not None else RuntimeStats()).commit_seconds
        self._producer = producer
        self._consumer = consumer
        self._interval_s = commit_interval_ms / 1000
        self._started_at = time.monotonic()
        self._commit_deadline: float | None = None  # monotonic time a commit was asked for
        self._first_offsets: dict[tuple[str, int], int] = {}
        self._last_offsets: dict[tuple[str, int], int] = {}
        # The next offset to read of each input partition as last committed (or the first
        # consumed since): re-sent with every commit, so that a commit of outputs alone (a
        # punctuation's) also carries the group's member epoch and a zombie's is refused.
        self._positions: dict[tuple[str, int], int] = {}
        self._transactions: dict[tuple[str, int], StoreTransaction] = {}

    @property
    def empty(self) -> bool:
        """True when nothing was read, written or produced since the last commit."""
        return not (self._last_offsets or self._transactions or self._producer.in_transaction)

    def store_transaction(self, store: Store, partition: int) -> StoreTransaction:
        """The open transaction of one store partition (begun on first use)."""
        key = (store.name, partition)
        transaction = self._transactions.get(key)
        if transaction is None:
            transaction = store.partition(partition).begin()
            self._transactions[key] = transaction
        return transaction

    def note_consumed(self, first_offsets: dict[tuple[str, int], int]) -> None:
        """Remember the first offset consumed per (topic, partition): the rewind point on abort.

        Called for every batch of an owned, restored partition before processing it, so
        records fetched but not yet processed when the transaction aborts are read again too.
        """
        for key, offset in first_offsets.items():
            self._first_offsets.setdefault(key, offset)
            self._positions.setdefault(key, offset)

    def release(self, partitions: Collection[TopicPartition]) -> None:
        """Stop tracking the rewind points of partitions this member gives away or lost.

        Their next owner starts from the committed offset; a stale rewind point kept here
        would move the consumer if the partition came back to this member before the next
        commit or abort.
        """
        for tp in partitions:
            self._first_offsets.pop((tp.topic, tp.partition), None)
            self._positions.pop((tp.topic, tp.partition), None)

    def record_offset(self, topic: str, partition: int, offset: int) -> None:
        """Mark one input record as processed."""
        self._last_offsets[(topic, partition)] = offset

    def request_commit(self, within_ms: int = 0) -> None:
        """Ask for a commit within ``within_ms`` (0: at the end of the current batch).

        The earliest request since the last commit wins, so repeated requests with a delay
        bound how long the first of them waits (e.g. fires emitted while draining a backlog
        commit together in fewer, larger transactions, each at most ``within_ms`` late).
        """
        deadline = time.monotonic() + within_ms / 1000
        if self._commit_deadline is None or deadline < self._commit_deadline:
            self._commit_deadline = deadline

    def due(self) -> bool:
        """True when a requested commit or the commit interval is due, and not empty."""
        if self.empty:
            return False
        now = time.monotonic()
        if self._commit_deadline is not None and now >= self._commit_deadline:
            return True
        return now - self._started_at >= self._interval_s

    def commit(self) -> None:
        """Commit everything since the last checkpoint, in this order:

        1. prepare every store transaction: its dirty keys go to the store's changelog
           partition inside the Kafka transaction;
        2. outputs: the hooks already produced them inside the same transaction;
        3. add the input positions to the transaction with the consumer's group metadata,
           so a member that lost its partitions cannot commit them;
        4. commit the transaction (flushes first; a delivery error, fencing or stale member
           epoch aborts it, drops the store writes and rewinds the input instead);
        5. write each store transaction to RocksDB with the changelog offset delivered for
           its partition, in one WriteBatch per partition.

        A crash before step 4 completes leaves nothing committed; a crash between 4 and 5
        leaves a store behind its changelog, and the restore replays the difference.
        """
        began = None if self.empty else time.monotonic()  # an empty commit is not timed
        try:
            for transaction in self._transactions.values():  # 1
                transaction.prepare(self._producer)
            # 2: nothing to do here.
            # 3: every input position, not only those that moved: a transaction of outputs
            # alone (fires a punctuation emitted) is then fenced like any other when this
            # member lost its partitions (a timer frozen past its session and continued
            # committed fires its successor had committed already).
            positions = dict(self._positions)
            positions.update({key: offset + 1 for key, offset in self._last_offsets.items()})
            if positions and began is not None:  # an empty commit begins no transaction
                metadata = self._consumer.consumer_group_metadata()
                self._producer.send_offsets(
                    [TopicPartition(t, p, offset) for (t, p), offset in positions.items()],
                    metadata,
                )
            self._producer.commit()  # 4
            log.debug("committed %s", _positions_text(positions, 0))
        except KafkaOperationError as exc:
            self.abort()
            if exc.denied:  # a missing ACL: every retry would be refused the same way
                raise exc.access_error() from exc
            raise CheckpointAbortedError(f"checkpoint aborted: {exc}") from exc
        except BaseException:
            self.abort()
            raise
        for key in self._positions:  # partitions still owned: a released one was dropped
            self._positions[key] = positions[key]
        for transaction in self._transactions.values():  # 5
            store = transaction.store
            transaction.flush(
                self._producer.delivered_offset(store.changelog_topic, store.partition)
            )
        if began is not None:
            self._commit_seconds.observe(time.monotonic() - began)
        self._reset()

    def abort(self) -> None:
        """Abort the Kafka transaction, drop the store writes and rewind the input."""
        if not self.empty:
            rewind = _positions_text(self._first_offsets, 0) or "nothing (partitions released)"
            log.info("aborting the transaction; rewinding %s", rewind)
        try:
            self._producer.abort()
        finally:
            try:
                for transaction in self._transactions.values():
                    transaction.discard()
                self._rewind()
            finally:
                self._reset()

    def _rewind(self) -> None:
        """Seek every partition read since the last commit back to its first record.

        Partitions given away are released before the abort, so each one left here is still
        owned: if it cannot be rewound, going on would commit offsets past the aborted records
        and skip them, so the processor stops instead (a restart resumes from the commit).
        """
        for (topic, partition), offset in self._first_offsets.items():
            try:
                self._consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException as exc:
                assigned = {(tp.topic, tp.partition) for tp in self._consumer.assignment()}
                if (topic, partition) in assigned:
                    raise KafkronError(
                        f"could not rewind {topic}[{partition}] to offset {offset} after an "
                        f"aborted transaction ({exc}); stopping so that no record is skipped. "
                        "Restart the processor: it resumes from the last commit."
                    ) from exc
                log.debug("not rewinding %s[%d], no longer assigned: %s", topic, partition, exc)

    def _reset(self) -> None:
        self._started_at = time.monotonic()
        self._commit_deadline = None
        self._first_offsets.clear()
        self._last_offsets.clear()
        self._transactions.clear()
