"""Which attempts of which executions already ran to a committed outcome, per partition.

The ``dedup`` store is a RocksDB per due partition number (``due.high``, ``due.normal`` and
``due.low`` are co-partitioned and keyed by job id, so an execution always lands on the same
number), keyed by execution id. An entry says how far the execution got: an attempt that
failed with a retry scheduled, SUCCEEDED or DEAD_LETTER, with the attempt number. It is
written in the same Kafka transaction as the attempt's result and its changelog record, so
whoever owns the partition next restores it before running anything.

Why: offsets commit only up to the lowest unfinished run of a partition, so after a crash
or rebalance, runs that finished *above* that offset are delivered again although their
results were committed. Their execution is found here and skipped (offset committed, no
handler call, no result): an execution's committed result, retry and dead letter happen
once. A REPLAY from the dead-letter queue is let through a DEAD_LETTER entry once per
replay (``replay_mark`` is the replay's ``emitted_at_ms``).

What remains at-least-once: the handler's own effect. A crash (or a fenced transaction,
or a revoke past the grace period) *after* the handler acted but *before* the transaction
carrying its result commits leaves no entry, so the attempt runs again, with the same
``execution_id``. Handlers make their effect idempotent by that id (see
:class:`~services.executor.context.HandlerContext`). Entries are never expired yet: the
store grows by one small entry per execution.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Any, NamedTuple

from streams.kafka.producer import TransactionalProducer
from streams.state.store import Store
from streams.state.transaction import StoreTransaction

STORE_NAME = "dedup"

_ENTRY = struct.Struct(">cIq")  # status, attempt, replay mark


class Progress(Enum):
    """How far an execution got, as recorded; the values are the stored status byte."""

    RETRY_SCHEDULED = b"F"
    SUCCEEDED = b"S"
    DEAD_LETTER = b"D"


class DedupEntry(NamedTuple):
    """An execution's last committed attempt outcome."""

    progress: Progress
    attempt: int
    replay_mark: int  # emitted_at_ms of the REPLAY that began the current attempts, or 0

    def encode(self) -> bytes:
        return _ENTRY.pack(self.progress.value, self.attempt, self.replay_mark)

    @classmethod
    def decode(cls, raw: bytes) -> DedupEntry:
        status, attempt, mark = _ENTRY.unpack(raw)
        return cls(Progress(status), attempt, mark)


def skip_reason(entry: DedupEntry | None, event: Mapping[str, Any]) -> str | None:
    """Why the attempt ``event`` must not run again, or None when it must run."""
    if entry is None:
        return None
    if event["trigger"] == "REPLAY":
        if entry.progress is Progress.DEAD_LETTER and entry.replay_mark != event["emitted_at_ms"]:
            return None
        return f"replay not run: the execution is {entry.progress.name} (attempt {entry.attempt})"
    if entry.progress is not Progress.RETRY_SCHEDULED:
        return f"already {entry.progress.name} at attempt {entry.attempt}"
    if event["attempt"] <= entry.attempt:
        return f"attempt {event['attempt']} already ran (attempt {entry.attempt} failed)"
    return None


def entry_after(
    event: Mapping[str, Any], progress: Progress, previous: DedupEntry | None
) -> DedupEntry:
    """The entry to record once ``event``'s attempt reached ``progress``."""
    if event["trigger"] == "REPLAY":
        mark = int(event["emitted_at_ms"])
    else:
        mark = previous.replay_mark if previous is not None else 0
    return DedupEntry(progress, int(event["attempt"]), mark)


class DedupStore:
    """The dedup partitions this executor owns, and their writes since the last commit."""

    def __init__(self, group_id: str, state_dir: Path, changelog_topic: str) -> None:
        self.store = Store(STORE_NAME, group_id, state_dir, changelog_topic)
        self._transactions: dict[int, StoreTransaction] = {}

    def lookup(self, partition: int, execution_id: str) -> DedupEntry | None:
        """The entry of ``execution_id``, including writes not committed yet."""
        key = execution_id.encode()
        transaction = self._transactions.get(partition)
        raw = (
            transaction.get(key)
            if transaction is not None
            else self.store.partition(partition).get(key)
        )
        return None if raw is None else DedupEntry.decode(raw)

    def record(self, partition: int, execution_id: str, entry: DedupEntry) -> None:
        """Write ``entry`` in the partition's open transaction (begun on first use)."""
        transaction = self._transactions.get(partition)
        if transaction is None:
            transaction = self._transactions[partition] = self.store.partition(partition).begin()
        transaction.set(execution_id.encode(), entry.encode())

    @property
    def dirty(self) -> bool:
        return bool(self._transactions)

    def prepare(self, producer: TransactionalProducer) -> None:
        """Commit step: produce every write to the changelog inside the Kafka transaction."""
        for transaction in self._transactions.values():
            transaction.prepare(producer)

    def flush(self, producer: TransactionalProducer) -> None:
        """After the Kafka commit: write each partition with its delivered changelog offset."""
        try:
            for transaction in self._transactions.values():
                store = transaction.store
                offset = producer.delivered_offset(store.changelog_topic, store.partition)
                transaction.flush(offset)
        finally:
            self._transactions.clear()

    def discard(self) -> None:
        """The Kafka transaction was aborted: drop every uncommitted write."""
        for transaction in self._transactions.values():
            transaction.discard()
        self._transactions.clear()

    def close_partition(self, partition: int) -> None:
        """Close one partition's database (revoked or lost); its open writes must be gone."""
        transaction = self._transactions.pop(partition, None)
        if transaction is not None:
            transaction.discard()
        self.store.close_partition(partition)

    def close(self) -> None:
        self.discard()
        self.store.close()
