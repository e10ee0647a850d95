"""Consumed due records waiting to run, one bounded FIFO per priority lane.

:meth:`LaneBuffers.take` picks the lane with :class:`~services.executor.lanes.LaneSelector`
(higher priority first, a starvation bound per lane), one record per pick. A lane holding
``capacity`` records is *full* (:meth:`LaneBuffers.full_lanes`: the executor stops taking
records for it, see :mod:`services.executor.backpressure`) until it is down to half, when
``on_room`` is called. Records consumed before that took effect still go in, so the bound
is soft by at most one consumer batch.

Runs released from a hold (:mod:`services.executor.holds`) go back to the front of their
lane with :meth:`LaneBuffers.requeue`: they were read before everything behind them.

While only one lane holds records, a pick needs no selector: with one lane with work,
:meth:`LaneSelector.pick` takes it and resets every lane's passes, which is what
:meth:`LaneSelector.reset` does, once, at the first such pick.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Mapping

from confluent_kafka import Message

from services.executor.holds import HeldRun
from services.executor.lanes import LANES, LaneSelector
from streams.topics import Priority

Buffered = Message | HeldRun


class LaneBuffers:
    """Per-lane FIFOs of consumed records of the due topics named in ``lane_of_topic``."""

    def __init__(
        self,
        lane_of_topic: Mapping[str, Priority],
        capacity: int,
        max_passes: Mapping[Priority, int] | None = None,
        on_room: Callable[[], None] | None = None,
    ) -> None:
        self._lane_of_topic = dict(lane_of_topic)
        # One due topic per lane (the executor's case): a lane's records differ by partition.
        self._one_topic_per_lane = len(set(self._lane_of_topic.values())) == len(
            self._lane_of_topic
        )
        self._capacity = capacity
        self._resume_at = capacity // 2
        self._selector = LaneSelector(max_passes)
        self._buffers: dict[Priority, deque[Buffered]] = {lane: deque() for lane in LANES}
        self._size = 0
        self._only: Priority | None = None  # the one lane holding records, when only one does
        self._passes_clear = True  # every lane's passes are 0 (as after a one-lane pick)
        self._full: set[Priority] = set()
        self._changed = False
        self._on_room = on_room  # called when a full lane drains to its resume mark

    def __len__(self) -> int:
        return self._size

    def add(self, message: Message) -> None:
        """Queue one consumed record of a due topic."""
        lane = self._lane_of_topic[message.topic() or ""]
        buffer = self._buffers[lane]
        buffer.append(message)
        # _added inline (a call per consumed record costs).
        if not self._size:
            self._only = lane
        elif lane is not self._only:
            self._only = None
        self._size += 1
        if len(buffer) >= self._capacity and lane not in self._full:
            self._full.add(lane)
            self._changed = True

    def add_many(self, topic: str, messages: list[Message]) -> None:
        """Queue consumed records of one due topic, in order: :meth:`add` of each."""
        if not messages:
            return
        lane = self._lane_of_topic[topic]
        buffer = self._buffers[lane]
        buffer.extend(messages)
        self._added(lane, buffer, len(messages))

    def requeue(self, runs: list[HeldRun]) -> None:
        """Put runs whose hold ended at the front of their lanes, in the order given."""
        for run in reversed(runs):
            lane = self._lane_of_topic[run.tp[0]]
            buffer = self._buffers[lane]
            buffer.appendleft(run)
            self._added(lane, buffer)

    def _added(self, lane: Priority, buffer: deque[Buffered], count: int = 1) -> None:
        """Account for ``count`` records just put in ``lane``'s ``buffer``."""
        if not self._size:
            self._only = lane
        elif lane is not self._only:
            self._only = None
        self._size += count
        if len(buffer) >= self._capacity and lane not in self._full:
            self._full.add(lane)
            self._changed = True

    def take(self) -> Buffered | None:
        """The next record to run, by lane priority and starvation bound; None when empty."""
        if not self._size:
            return None
        buffers = self._buffers
        lane = self._only
        if lane is None:
            with_work = [lane for lane in LANES if buffers[lane]]
            lane = self._selector.pick(with_work)
            assert lane is not None
            self._passes_clear = len(with_work) == 1
            if self._passes_clear:
                self._only = lane
        elif not self._passes_clear:
            self._selector.reset()  # what pick([lane]) would do
            self._passes_clear = True
        buffer = buffers[lane]
        message = buffer.popleft()
        self._size -= 1
        if lane in self._full and len(buffer) <= self._resume_at:
            self._full.discard(lane)
            self._changed = True
            if self._on_room is not None:
                self._on_room()
        return message

    def take_run(self, limit: int) -> list[Buffered]:
        """:meth:`take`, then while only one lane holds records, the records after it of the
        same partition, up to ``limit`` in all: what that many :meth:`take` calls would
        return (no lane to pass over, the selector is left as they leave it). A
        :class:`HeldRun` comes alone. Empty when every lane is.
        """
        first = self.take()
        if first is None:
            return []
        run = [first]
        lane = self._only
        if lane is None or limit <= 1 or isinstance(first, HeldRun):
            return run
        buffer = self._buffers[lane]
        partition = first.partition()
        topic = None if self._one_topic_per_lane else first.topic()
        while buffer and len(run) < limit:
            message = buffer[0]
            if (
                isinstance(message, HeldRun)
                or message.partition() != partition
                or (topic is not None and message.topic() != topic)
            ):
                break
            run.append(buffer.popleft())
        if len(run) > 1:
            self._size -= len(run) - 1
            if lane in self._full and len(buffer) <= self._resume_at:
                self._full.discard(lane)
                self._changed = True
                if self._on_room is not None:
                    self._on_room()
        return run

    def put_back(self, records: list[Buffered]) -> None:
        """Return records taken last (:meth:`take_run`) and not started, in their order, to
        the front of their lanes: taken next, as if never taken."""
        for record in reversed(records):
            lane = self._lane_of_topic[record.topic() or ""]
            buffer = self._buffers[lane]
            buffer.appendleft(record)
            self._added(lane, buffer)

    def full_lanes(self) -> frozenset[Priority] | None:
        """The lanes to keep paused, when that changed since the last call; else None."""
        if not self._changed:
            return None
        self._changed = False
        return frozenset(self._full)

    def discard(self, partitions: Collection[tuple[str, int]]) -> int:
        """Drop the records of ``partitions`` (revoked); returns how many were dropped."""
        wanted = set(partitions)
        if not wanted:
            return 0
        dropped = 0
        for lane, buffer in self._buffers.items():
            kept = deque(m for m in buffer if (m.topic(), m.partition()) not in wanted)
            dropped += len(buffer) - len(kept)
            self._buffers[lane] = kept
            if lane in self._full and len(kept) <= self._resume_at:
                self._full.discard(lane)
                self._changed = True
        self._size -= dropped
        with_work = [lane for lane in LANES if self._buffers[lane]]
        self._only = with_work[0] if len(with_work) == 1 else None
        return dropped

    def clear(self) -> None:
        """Drop everything (the transaction was aborted and the input is rewound)."""
        for buffer in self._buffers.values():
            buffer.clear()
        self._size = 0
        self._only = None
        self._changed = self._changed or bool(self._full)
        self._full.clear()
        self._selector.reset()
        self._passes_clear = True
