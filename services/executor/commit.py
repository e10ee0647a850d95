"""The one place the executor commits: outputs, dedup changelog and positions, exactly once."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from confluent_kafka import TopicPartition

from services.executor.dedup import DedupStore
from services.executor.offsets import OffsetTracker
from streams.exceptions import KafkronError
from streams.kafka.errors import KafkaOperationError
from streams.kafka.producer import TransactionalProducer

TP = tuple[str, int]


class CommitAbortedError(KafkronError):
    """The transaction was aborted: its results, retries, dead letters and dedup writes are
    gone, so the runs since the last commit must be read and run again."""

    retryable = True


class Committer:
    """Commits what the runs since the last commit produced, in one Kafka transaction."""

    def __init__(
        self,
        producer: TransactionalProducer,
        group_metadata: Callable[[], object],
        offsets: OffsetTracker[TP],
        dedup: DedupStore,
    ) -> None:
        self._producer = producer
        self._group_metadata = group_metadata
        self._offsets = offsets
        self._dedup = dedup

    def commit(self, active: Iterable[TP]) -> dict[TP, int] | None:
        """Commit, in this order, and return the committed positions (None: nothing to do).

        1. the dedup writes go to their changelog partitions inside the transaction;
        2. results, retries and dead letters: the runs already produced them inside it;
        3. the position of every ``active`` partition (the lowest unfinished offset), moved
           or not, goes in with the consumer's group metadata (``group_metadata()``): a
           member that lost its partitions is fenced by the broker here, so its results
           never become visible;
        4. the transaction commits (after a flush; a latched delivery error, fencing or a
           stale member epoch aborts it instead and raises CommitAbortedError);
        5. the dedup writes go to RocksDB with their delivered changelog offsets.

        A crash before 4 completes leaves nothing committed; between 4 and 5 the local
        store lags its changelog and the next restore replays the difference.
        """
        positions: dict[TP, int] = {}
        for tp in active:
            position = self._offsets.partition(tp).committable()
            if position is not None:
                positions[tp] = position
        moved = self._offsets.to_commit()
        if not (moved or self._producer.in_transaction or self._dedup.dirty):
            return None
        try:
            self._dedup.prepare(self._producer)  # 1
            if positions:  # 3
                self._producer.send_offsets(
                    [TopicPartition(topic, p, offset) for (topic, p), offset in positions.items()],
                    self._group_metadata(),
                )
            self._producer.commit()  # 4
        except KafkaOperationError as exc:
            self.abort()
            if exc.denied:  # a missing ACL: every retry would be refused the same way
                raise exc.access_error() from exc
            raise CommitAbortedError(f"transaction aborted: {exc}") from exc
        except BaseException:
            self.abort()
            raise
        self._offsets.mark_committed(positions)
        self._dedup.flush(self._producer)  # 5
        return positions

    def abort(self) -> None:
        """Abort the open transaction and drop the dedup writes (a fenced producer is replaced)."""
        try:
            self._producer.abort()
        finally:
            self._dedup.discard()
