"""Restore partition stores from their changelogs before their partition processes anything.

A restore reads the changelog partition from the stored offset + 1 (from the beginning when
the local database is new) up to the log end offset measured when it starts, with a
``read_committed`` consumer outside any group. The end is the log end including open
transactions, not the last stable offset: the read position only passes an open transaction
(e.g. one a SIGKILLed previous owner left) once the broker resolved it, so a restore never
finishes while earlier changes might still commit.

Partitions restore a few at a time (``max_restoring_partitions``), in the order they were
started, so that each becomes ready as soon as its own changelogs are read instead of all of
them near the end of one interleaved read: with N partitions the first is ready after about
1/N of the whole restore. Restores with little left to read (a store kept on disk that only
catches up) are started together regardless of that bound. A restore writes without the
RocksDB write-ahead log and flushes when it finishes (see :meth:`PartitionStore.write`).
A store with a changelog expander restores each record as what its expander makes of it
(see :class:`Store`).

Each restore's progress goes to a :class:`~streams.runtime_stats.RuntimeStats` (the
process's restore metrics). The log says what a set of restores did in one line, once none
is left (``restored partitions 0-11 in 2.3 s: jobs 1,234 records, wheel 5,678``), instead
of a line per store partition.
"""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from streams.kafka.errors import operation_error
from streams.kafka.leaders import refresh_leaders, retriable_offsets_error
from streams.runtime_stats import RuntimeStats
from streams.state.partition import PartitionStore
from streams.state.store import Store

log = logging.getLogger(__name__)
_TIMEOUT_S = 30.0
_LOG_EVERY_S = 5.0


@dataclass
class RecoveryProgress:
    """How far the restore of one store partition got.

    ``queued`` while it waits for a restore slot: its offsets are measured (and its store
    opened) only when it starts reading, so until then they are -1 and it is not ``done``.
    """

    changelog_topic: str
    partition: int
    start_offset: int
    end_offset: int
    position: int
    applied: int = 0
    started_at: float = field(default_factory=time.monotonic)
    finished_at: float | None = None
    reported_at: float = field(default_factory=time.monotonic)
    queued: bool = False
    store: str = ""  # the store's name

    @property
    def done(self) -> bool:
        return not self.queued and self.position >= self.end_offset

    @property
    def remaining_offsets(self) -> int:
        """Offsets still to read (0 when done; not yet known while queued)."""
        return max(0, self.end_offset - self.position)

    def rate_per_s(self) -> float:
        """Records applied per second so far."""
        elapsed = (self.finished_at or time.monotonic()) - self.started_at
        return self.applied / elapsed if elapsed > 0 else 0.0


@dataclass
class _Restore:
    store: Store
    partition_store: PartitionStore
    progress: RecoveryProgress


@dataclass
class _Queued:
    store: Store
    progress: RecoveryProgress


class Recovery:
    """Restores assigned store partitions in bounded steps driven by the processor's loop.

    At most ``max_restoring_partitions`` partitions read their changelogs at once (all stores
    of a partition restore together); more start while the ones reading have fewer than
    ``small_restore_offsets`` offsets left in total. The others wait, in start order.
    """

    def __init__(
        self,
        consumer: Consumer,
        admin: AdminClient,
        *,
        batch_size: int = 10_000,
        max_restoring_partitions: int = 1,
        small_restore_offsets: int = 50_000,
        on_progress: Callable[[RecoveryProgress], None] | None = None,
        stats: RuntimeStats | None = None,
    ) -> None:
        self.stats = stats if stats is not None else RuntimeStats()
        self._consumer = consumer
        self._admin = admin
        self._batch_size = batch_size
        self._max_partitions = max(1, max_restoring_partitions)
        self._small_offsets = small_restore_offsets
        self._on_progress = on_progress
        self._active: dict[tuple[str, int], _Restore] = {}
        self._queued: dict[int, list[_Queued]] = {}  # partition -> its waiting stores, FIFO
        self._completed: set[int] = set()  # done since the last step, not yet reported
        self.finished: deque[RecoveryProgress] = deque(maxlen=1024)
        # Restores finished since the last summary line, and when the first of them began.
        self._round: list[RecoveryProgress] = []
        self._round_started: float | None = None

    def start(self, store: Store, partition: int) -> RecoveryProgress:
        """Restore one store partition: now when a slot is free, else once one frees.

        The store partition is opened (``store.open_partition``) when its restore begins;
        ``pending(partition)`` is False on return when there was nothing to restore.
        """
        progress = RecoveryProgress(
            store.changelog_topic, partition, -1, -1, -1, queued=True, store=store.name
        )
        if self._round_started is None:
            self._round_started = time.monotonic()
        self._queued.setdefault(partition, []).append(_Queued(store, progress))
        if self._reading(partition):
            self._begin(partition)  # its other stores are reading: this one joins them
        else:
            self._fill_slots()  # in start order
        if not self.pending(partition):
            self._completed.discard(partition)  # the caller sees it done: not reported again
        self._publish()
        return progress

    def pending(self, partition: int) -> bool:
        """True while any store of ``partition`` is still restoring or waiting to."""
        return partition in self._queued or self._reading(partition)

    def cancel(self, partition: int) -> None:
        """Stop restoring ``partition`` (it was revoked); what was applied stays applied.

        Writes of an unfinished restore skipped the write-ahead log: closing the store
        flushes them (RocksDB flushes such memtables on close), a crash keeps a consistent
        prefix (atomic flush), and either way the next restore resumes from its offset.
        """
        self._queued.pop(partition, None)
        self._completed.discard(partition)
        keys = [key for key in self._active if key[1] == partition]
        if keys:
            self._consumer.incremental_unassign([TopicPartition(t, p) for t, p in keys])
        for key in keys:
            del self._active[key]
        self._publish()
        self.end_round()

    def step(self, timeout_s: float) -> set[int]:
        """Apply one bounded batch; returns the partitions whose restores all completed.

        Each completed partition is returned once: by this call, or by ``start`` leaving it
        not ``pending``; a cancelled one never. Waits at most ``timeout_s``, and only while
        nothing at all has been fetched: the batch is what the consumer already holds, so a
        step never waits to fill it.
        """
        self._fill_slots()
        if self._active:
            self._apply(self._consume(timeout_s))
            self._check_positions()
            # The next partitions start now, so their fetches overlap the caller's work.
            self._fill_slots()
        self._publish()
        self.end_round()
        completed, self._completed = self._completed, set()
        return completed

    def end_round(self) -> None:
        """Once no restore is left: log in one line what the restores since the last such
        line read (partitions, records per store, time); nothing when there were none.

        :meth:`step` calls it; a caller that starts restores calls it after starting a set,
        for the case where every one of them had nothing to read.
        """
        if self._active or self._queued:
            return
        if not self._round:
            self._round_started = None  # restores started since were all cancelled
            return
        done, self._round = self._round, []
        began = self._round_started if self._round_started is not None else time.monotonic()
        self._round_started = None
        log.info(restored_summary(done, time.monotonic() - began))

    def _publish(self) -> None:
        """Hand the restores' progress to the stats (new dicts: a scrape may be reading)."""
        self.stats.restore_remaining = {
            (r.progress.store, r.progress.partition): r.progress.remaining_offsets
            for r in self._active.values()
        }
        queued: dict[str, int] = {}
        for waiting in self._queued.values():
            for item in waiting:
                queued[item.store.name] = queued.get(item.store.name, 0) + 1
        self.stats.restore_queued = queued

    def close(self) -> None:
        """Close the restore consumer."""
        self._active.clear()
        self._consumer.close()

    def _check_positions(self) -> None:
        positions = self._consumer.position([TopicPartition(t, p) for t, p in self._active])
        for tp in positions:
            restore = self._active[(tp.topic, tp.partition)]
            if tp.offset >= 0:
                restore.progress.position = max(restore.progress.position, tp.offset)
            self._report(restore.progress)
            if restore.progress.done:
                del self._active[(tp.topic, tp.partition)]
                self._consumer.incremental_unassign([TopicPartition(tp.topic, tp.partition)])
                restore.partition_store.flush()  # before any write that uses the WAL
                self._finish(restore.progress)
                if not self.pending(tp.partition):
                    self._completed.add(tp.partition)

    def _reading(self, partition: int) -> bool:
        return any(p == partition for _, p in self._active)

    def _slot_free(self) -> bool:
        reading = {p for _, p in self._active}
        if len(reading) < self._max_partitions:
            return True
        left = sum(r.progress.remaining_offsets for r in self._active.values())
        return left < self._small_offsets

    def _fill_slots(self) -> None:
        """Begin waiting partitions, in start order, while slots are free."""
        while self._queued and self._slot_free():
            partition = next(iter(self._queued))
            self._begin(partition)
            if not self.pending(partition):
                self._completed.add(partition)

    def _begin(self, partition: int) -> None:
        """Open, measure and start reading every waiting store of ``partition``."""
        for queued in self._queued.pop(partition, []):
            self._begin_store(queued.store, partition, queued.progress)

    def _begin_store(self, store: Store, partition: int, progress: RecoveryProgress) -> None:
        topic = store.changelog_topic
        partition_store = store.open_partition(partition)
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
        progress.start_offset, progress.end_offset, progress.position = start, end, start
        progress.queued = False
        progress.started_at = progress.reported_at = time.monotonic()
        if progress.done:
            self._finish(progress)
            return
        self._active[(topic, partition)] = _Restore(store, partition_store, progress)
        self._consumer.incremental_assign([TopicPartition(topic, partition, start)])
        log.debug("%s[%d]: restoring offsets %d..%d", topic, partition, start, end)

    def _consume(self, timeout_s: float) -> list[Message]:
        # consume(n, timeout) waits until it has n messages or the timeout passed: at the
        # tail of a changelog that is the whole timeout. Take what is fetched already, and
        # when nothing is, wait for the first record only.
        messages = self._consumer.consume(num_messages=self._batch_size, timeout=0)
        if messages or timeout_s <= 0:
            return messages
        messages = self._consumer.consume(num_messages=1, timeout=timeout_s)
        if messages and self._batch_size > 1:
            messages += self._consumer.consume(num_messages=self._batch_size - 1, timeout=0)
        return messages

    def _apply(self, messages: list[Message]) -> None:
        # Per changelog partition: the net updates, the last offset and the record count.
        batches: dict[tuple[str, int], tuple[dict[bytes, bytes | None], int, int]] = {}
        for message in messages:
            error = message.error()
            if error is not None:
                raise operation_error("changelog restore", KafkaException(error))
            key = (message.topic() or "", message.partition() or 0)
            record_key = message.key()
            restore = self._active.get(key)
            if restore is None or record_key is None:
                continue
            updates, _, count = batches.get(key, ({}, -1, 0))
            value = message.value()  # None is a tombstone: delete
            expand = restore.store.changelog_expander
            expanded = None if expand is None else expand(record_key, value)
            if expanded is None:
                updates[record_key] = value
            else:
                updates.update(expanded)  # in order: a later write of a key wins
            batches[key] = (updates, message.offset() or 0, count + 1)
        restored = self.stats.restored_records
        for key, (updates, last_offset, count) in batches.items():
            restore = self._active[key]
            restore.partition_store.write(updates, last_offset, wal=False)
            restore.progress.applied += count
            restore.progress.position = last_offset + 1
            restored[restore.store.name] += count

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
        self._round.append(progress)
        log.debug(
            "%s[%d]: restored %d records up to offset %d (%.0f records/s)",
            progress.changelog_topic,
            progress.partition,
            progress.applied,
            progress.end_offset,
            progress.rate_per_s(),
        )

    def _watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """(low watermark, log end offset including open transactions).

        A changelog created a moment ago, or of a broker just started again, may have no
        leader yet (:data:`~streams.kafka.leaders.LEADER_MOVED`, e.g. librdkafka's _NOENT "No
        leaders found"): such errors are retried, after asking for the leaders again, until
        ``_TIMEOUT_S``.
        """
        deadline = time.monotonic() + _TIMEOUT_S
        while True:
            try:
                return self._watermarks_once(topic, partition)
            except KafkaException as exc:
                if not retriable_offsets_error(exc) or time.monotonic() > deadline:
                    raise
                log.info("%s[%d]: %s; retrying", topic, partition, exc)
                refresh_leaders(self._admin, [topic])  # else a stale epoch stays for 5 min
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


def restored_summary(done: list[RecoveryProgress], elapsed_s: float) -> str:
    """One line for a set of finished restores: which partitions, how many records per
    store (stores in the order they restored), how long."""
    partitions = sorted({p.partition for p in done})
    per_store: dict[str, int] = {}
    for progress in done:
        name = progress.store or progress.changelog_topic
        per_store[name] = per_store.get(name, 0) + progress.applied
    total = sum(per_store.values())
    noun = "partition" if len(partitions) == 1 else "partitions"
    line = f"restored {noun} {partition_ranges(partitions)} in {elapsed_s:.2f} s: "
    if total == 0:
        return line + f"nothing to read, {', '.join(per_store)} up to date"
    records = ", ".join(f"{name} {n:,} records" for name, n in per_store.items())
    rate = f" ({total / elapsed_s:,.0f} records/s)" if elapsed_s > 0 else ""
    return line + records + rate


def partition_ranges(partitions: list[int]) -> str:
    """Sorted partition numbers as ranges: ``0-3, 7, 9-10``."""
    ranges: list[str] = []
    start = previous = None
    for number in partitions:
        if previous is not None and number == previous + 1:
            previous = number
            continue
        if start is not None:
            ranges.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = number
    if start is not None:
        ranges.append(str(start) if start == previous else f"{start}-{previous}")
    return ", ".join(ranges)


def parse_partition_ranges(text: str) -> list[int]:
    """The partition numbers :func:`partition_ranges` wrote as ``text``, sorted."""
    numbers: set[int] = set()
    for part in text.split(", ") if text else ():
        first, _, last = part.partition("-")
        numbers.update(range(int(first), int(last or first) + 1))
    return sorted(numbers)


RESTORED_LINE = re.compile(r"restored partitions? ([0-9, -]+) in ")
"""Finds the partitions of a :func:`restored_summary` line (group 1, for
:func:`parse_partition_ranges`): how a supervisor tells that a processor's partitions are ready."""
