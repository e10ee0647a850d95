"""Which offset of a partition may be committed while many of its events run at once.

Kafka commits a position: the next offset to read. With runs finishing out of order, that
is the lowest offset still running, or one past the highest started offset when none is.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

PartitionKey = TypeVar("PartitionKey", bound=Hashable)


class PartitionOffsets:
    """In-flight offsets of one partition; every operation is amortised O(1).

    Offsets must be started in increasing order (as a consumer reads them; gaps are fine).
    Finished offsets at the head of the queue are dropped as soon as they finish, so the
    head is always the lowest unfinished offset.
    """

    def __init__(self) -> None:
        self._order: deque[int] = deque()
        self._running: set[int] = set()
        self._highest_started: int | None = None

    def started(self, offset: int) -> None:
        """Record that the event at ``offset`` began; offsets must increase."""
        self.passed(offset)
        self._order.append(offset)
        self._running.add(offset)

    def passed(self, offset: int) -> None:
        """Record the event at ``offset`` as started and finished at once; offsets must increase.

        The cheap path of an event done without waiting (skipped, or run to its end). If it
        must wait after all, :meth:`hold` it before anything else is passed or started.
        """
        highest = self._highest_started
        if highest is not None and offset <= highest:
            raise ValueError(
                f"offset {offset} started after {highest}: offsets of a partition "
                "must be started in increasing order (seek back? call reset() first)"
            )
        self._highest_started = offset

    def hold(self, offset: int) -> None:
        """Turn the offset just passed into a running one, to be :meth:`finished` later."""
        if offset != self._highest_started or offset in self._running:
            raise ValueError(
                f"offset {offset} is not the one passed last ({self._highest_started})"
            )
        self._order.append(offset)
        self._running.add(offset)

    def finished(self, offset: int) -> None:
        """Record that the event at ``offset`` is done and its result durable."""
        try:
            self._running.remove(offset)
        except KeyError:
            raise ValueError(
                f"offset {offset} is not in flight (never started, or finished twice)"
            ) from None
        order, running = self._order, self._running
        while order and order[0] not in running:
            order.popleft()

    def committable(self) -> int | None:
        """The position to commit: lowest unfinished offset, else highest started + 1."""
        if self._order:
            return self._order[0]
        return None if self._highest_started is None else self._highest_started + 1

    def in_flight(self) -> int:
        """How many offsets have started and not finished."""
        return len(self._running)

    def reset(self) -> None:
        """Forget everything, e.g. after seeking the partition."""
        self._order.clear()
        self._running.clear()
        self._highest_started = None


class OffsetTracker(Generic[PartitionKey]):
    """:class:`PartitionOffsets` per partition, and which positions advanced since a commit.

    ``PartitionKey`` is whatever names a partition for the loop, e.g. ``(topic, partition)``.
    """

    def __init__(self) -> None:
        self._partitions: dict[PartitionKey, PartitionOffsets] = {}
        self._committed: dict[PartitionKey, int] = {}

    def partition(self, key: PartitionKey) -> PartitionOffsets:
        """The tracker of one partition, created on first use."""
        offsets = self._partitions.get(key)
        if offsets is None:
            offsets = self._partitions[key] = PartitionOffsets()
        return offsets

    def started(self, key: PartitionKey, offset: int) -> None:
        """Record a started run of ``key`` at ``offset``."""
        self.partition(key).started(offset)

    def finished(self, key: PartitionKey, offset: int) -> bool:
        """Record a finished run; False (and nothing recorded) if the partition was dropped."""
        offsets = self._partitions.get(key)
        if offsets is None:
            return False
        offsets.finished(offset)
        return True

    def to_commit(self) -> dict[PartitionKey, int]:
        """Positions that moved past the last :meth:`mark_committed` one, by partition."""
        positions = {}
        for key, offsets in self._partitions.items():
            position = offsets.committable()
            if position is not None and position > self._committed.get(key, -1):
                positions[key] = position
        return positions

    def mark_committed(self, positions: dict[PartitionKey, int]) -> None:
        """Record that the broker accepted these positions."""
        for key, position in positions.items():
            if position > self._committed.get(key, -1):
                self._committed[key] = position

    def drop(self, key: PartitionKey) -> None:
        """Forget a revoked or lost partition; its in-flight results must not be committed."""
        self._partitions.pop(key, None)
        self._committed.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._partitions
