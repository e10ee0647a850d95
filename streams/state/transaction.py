"""Writes to one partition store, buffered until the Kafka transaction that carries them commits.

Life of a transaction: STARTED (reads and writes) -> ``prepare()`` produces every dirty key
to the changelog -> PREPARED -> after the Kafka commit, ``flush(offset)`` writes the keys and
the changelog offset in one WriteBatch -> COMMITTED. Any error on the way leaves it FAILED,
and a FAILED transaction refuses every further call: its writes are dropped.

Local-only writes (:meth:`StoreTransaction.set_local_many`) are for keys a restore derives
from other changelog records (the store's changelog expander, see
:class:`~streams.state.store.Store`): they go to the WriteBatch and are seen by ``get`` and
``iter_range``, but ``prepare`` does not produce them. The rule per key: the changelog gets
the key's last ``set``/``delete`` of the transaction (none if it only had local writes), the
store gets its last write of any kind. So a ``set``/``delete`` after a local write makes the
key an ordinary changelogged write, and a local write after a ``set``/``delete`` keeps that
changelog record (in its place) while the store takes the local value: the caller's
expanding record, produced later, restores it. A transaction that produced nothing flushes
without moving the stored changelog offset.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from itertools import filterfalse
from typing import Protocol

from streams.state.exceptions import TransactionStateError
from streams.state.partition import PartitionStore

_KEY_TYPES = frozenset({bytes})
_VALUE_TYPES = frozenset({bytes, type(None)})
_MAX_CACHED_READS = 4096
"""Stored values a transaction remembers (then it starts over): ~1 MiB of timer states."""


class TransactionStatus(StrEnum):
    STARTED = "STARTED"
    PREPARED = "PREPARED"
    COMMITTED = "COMMITTED"
    FAILED = "FAILED"


_STARTED = TransactionStatus.STARTED
"""The status every read and write checks: a module global is read ~0.1 us faster than an
enum member through its class (Python 3.11), twice or more per timer result."""


class ChangelogWriter(Protocol):
    """Where ``prepare()`` sends changelog records (the transactional producer).

    A writer that also has ``produce_changelog(topic, partition, items)`` gets all of a
    transaction's records in one call (the producer then tracks one delivery per partition).
    """

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, partition: int | None = None
    ) -> None: ...


class StoreTransaction:
    """Uncommitted reads and writes over one :class:`PartitionStore`; None marks a delete."""

    def __init__(self, store: PartitionStore) -> None:
        self.store = store
        self.status = TransactionStatus.STARTED
        self._updates: dict[bytes, bytes | None] = {}
        # Stored values read (None: absent). The store changes only when a transaction
        # flushes, and one store partition has one open transaction, so they stay true while
        # this one is open: a key read twice (a timer reads a job's state for its STARTED and
        # again for its SUCCEEDED) costs one RocksDB get, not two (~3 us each at 1M keys).
        self._reads: dict[bytes, bytes | None] = {}
        # The written keys in sorted runs (each sorted, no key in two, each more than 4x the
        # size of the next), plus those first written since the last range scan. A scan
        # sorts the new ones into a run, merges it into the last runs while they are at most
        # 4x its size (so a key is merged O(log n) times in all), and bisects every run for
        # its range: a scan costs O(log^2 n + keys in range), not O(every key written), which
        # a timer's drain paid per punctuation while a backlog's collection deletes and
        # tombstone entries piled up in one transaction (bench/txn_range.py).
        self._runs: list[list[bytes]] = []
        self._new_keys: list[bytes] = []
        # The smallest key written: a range scan ending at or below it has no pending
        # writes to merge (a timer's due scan while it takes in far-future jobs).
        self._low_key: bytes | None = None
        # Local-only writes: keys written only locally, and for keys written locally after a
        # set/delete, the changelog value of that set/delete. ``_has_local`` is the one
        # check ``set`` and ``delete`` pay while there are none.
        self._has_local = False
        self._local: set[bytes] = set()
        self._changelog_values: dict[bytes, bytes | None] = {}
        self._produced = False

    @property
    def dirty(self) -> bool:
        """True when the transaction holds writes not yet in the database."""
        return bool(self._updates)

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key`` as this transaction sees it."""
        if self.status is not _STARTED:  # the common case, checked inline
            self._check(TransactionStatus.STARTED, TransactionStatus.PREPARED)
        if key in self._updates:
            return self._updates[key]
        reads = self._reads
        if key in reads:
            return reads[key]
        value = self.store.get(key)
        if len(reads) >= _MAX_CACHED_READS:
            reads.clear()
        reads[key] = value
        return value

    def prefetch(self, keys: list[bytes]) -> None:
        """Read the stored values of ``keys`` in one multi-get, for the :meth:`get` calls that
        follow (a run of input records each reading its job's state)."""
        if self.status is not _STARTED:
            self._check(TransactionStatus.STARTED, TransactionStatus.PREPARED)
        reads, updates = self._reads, self._updates
        missing = [key for key in dict.fromkeys(keys) if key not in updates and key not in reads]
        del missing[_MAX_CACHED_READS:]
        if not missing:
            return
        if len(reads) + len(missing) > _MAX_CACHED_READS:
            reads.clear()
        reads.update(zip(missing, self.store.get_many(missing), strict=True))

    def set(self, key: bytes, value: bytes) -> None:
        """Write ``value`` under ``key``."""
        if self.status is not _STARTED:
            self._check(TransactionStatus.STARTED)
        if not isinstance(key, bytes) or not isinstance(value, bytes):
            self.status = TransactionStatus.FAILED
            raise TypeError(f"keys and values are bytes, got {type(key)} and {type(value)}")
        updates = self._updates
        if key not in updates:
            self._new_keys.append(key)
        elif self._has_local:
            self._local.discard(key)
            self._changelog_values.pop(key, None)
        updates[key] = value
        if self._low_key is None or key < self._low_key:
            self._low_key = key

    def delete(self, key: bytes) -> None:
        """Delete ``key`` (a tombstone on the changelog)."""
        if self.status is not _STARTED:
            self._check(TransactionStatus.STARTED)
        updates = self._updates
        if key not in updates:
            self._new_keys.append(key)
        elif self._has_local:
            self._local.discard(key)
            self._changelog_values.pop(key, None)
        updates[key] = None
        if self._low_key is None or key < self._low_key:
            self._low_key = key

    def delete_many(self, keys: list[bytes]) -> None:
        """Delete each of ``keys``, as :meth:`delete` each in order (a timer's collection of
        fired entries: new keys in C loops instead of a call per key)."""
        if self.status is not _STARTED:
            self._check(TransactionStatus.STARTED)
        if not keys:
            return
        updates = self._updates
        if self._has_local or not updates.keys().isdisjoint(keys):
            for key in keys:
                self.delete(key)
            return
        new: dict[bytes, bytes | None] = dict.fromkeys(keys)
        self._new_keys += new
        updates.update(new)
        low = min(new)
        if self._low_key is None or low < self._low_key:
            self._low_key = low

    def set_local_many(self, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Write (value) or delete (None) each key in the store only: ``prepare`` does not
        produce it, unless a ``set``/``delete`` of the key in this transaction comes before
        (that record is produced) or after it (see the module doc)."""
        self._check(TransactionStatus.STARTED)
        items = list(items)
        if not items:
            return
        keys = [key for key, _ in items]
        # Checked here, not at flush (after the Kafka commit); types only, in C loops.
        if not set(map(type, keys)) <= _KEY_TYPES or not (
            set(map(type, [value for _, value in items])) <= _VALUE_TYPES
        ):
            self.status = TransactionStatus.FAILED
            raise TypeError("keys and values of local writes are bytes (or None: delete)")
        self._has_local = True
        updates, local = self._updates, self._local
        if updates.keys().isdisjoint(keys):  # the common case: all new, in C loops
            new = dict(items)
            self._new_keys += new
            local.update(new)
            updates.update(new)
        else:
            changelog_values = self._changelog_values
            for key, value in items:
                if key not in updates:
                    self._new_keys.append(key)
                    local.add(key)
                elif key not in local and key not in changelog_values:
                    changelog_values[key] = updates[key]  # its set/delete stays produced
                updates[key] = value
        low = min(keys)
        if self._low_key is None or low < self._low_key:
            self._low_key = low

    def iter_range(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` items with ``start <= key < end`` in key order, writes included."""
        if self.status is not _STARTED:
            self._check(TransactionStatus.STARTED, TransactionStatus.PREPARED)
        if self._low_key is None or end <= self._low_key:
            return self.store.scan(start, end, limit)
        pending = self._pending_keys(start, end)
        if not pending:  # a timer's collection of fired entries: nothing to merge
            return self.store.scan(start, end, limit)
        deletes = sum(1 for k in pending if self._updates[k] is None)
        # Each pending delete can hide one stored item, so fetch that many more.
        stored = self.store.scan(start, end, limit + deletes)
        return list(self._merge(stored, pending, limit))

    def prepare(self, changelog: ChangelogWriter) -> None:
        """Produce every dirty key to the changelog partition with this partition's number."""
        with self._step(TransactionStatus.STARTED):
            topic, partition = self.store.changelog_topic, self.store.partition
            if self._has_local:
                updates, changelog_values = self._updates, self._changelog_values
                items = [
                    (key, changelog_values.get(key, updates[key]))
                    for key in filterfalse(self._local.__contains__, updates)
                ]
            else:
                items = list(self._updates.items())
            produce_changelog = getattr(changelog, "produce_changelog", None)
            if produce_changelog is not None:
                produce_changelog(topic, partition, items)
            else:
                for key, value in items:
                    changelog.produce(topic, key, value, partition)
            self._produced = bool(items)
            self.status = TransactionStatus.PREPARED

    def flush(self, changelog_offset: int | None) -> None:
        """Write the keys and ``changelog_offset`` (of the last changelog record) atomically.

        When ``prepare`` produced nothing (only local writes) the offset is not used (the
        producer's may be an earlier transaction's) and the stored one stays.
        """
        with self._step(TransactionStatus.PREPARED):
            if self._updates and not self._produced:
                self.store.write(self._updates, None)
            elif self._updates:
                if changelog_offset is None:
                    raise TransactionStateError(
                        f"{self.store.changelog_topic}[{self.store.partition}]: no delivered "
                        "changelog offset for a transaction with writes; it was not committed"
                    )
                self.store.write(self._updates, changelog_offset)
            self.status = TransactionStatus.COMMITTED

    def discard(self) -> None:
        """Drop every write (the Kafka transaction was aborted); the transaction is FAILED."""
        self._updates.clear()
        self._reads.clear()
        self._runs.clear()
        self._new_keys.clear()
        self._low_key = None
        self._local.clear()
        self._changelog_values.clear()
        self._has_local = False
        self.status = TransactionStatus.FAILED

    def _pending_keys(self, start: bytes, end: bytes) -> list[bytes]:
        """The written keys with ``start <= key < end``, in order."""
        runs = self._runs
        if self._new_keys:
            run = sorted(self._new_keys)
            self._new_keys.clear()
            while runs and len(runs[-1]) <= 4 * len(run):
                run = runs.pop() + run
                run.sort()  # two sorted runs: timsort merges them, galloping where it can
            runs.append(run)
        found: list[bytes] = []
        parts = 0
        for run in runs:
            first = bisect_left(run, start)
            last = bisect_left(run, end, first)
            if first < last:
                found += run[first:last]
                parts += 1
        if parts > 1:
            found.sort()
        return found

    def _merge(
        self, stored: list[tuple[bytes, bytes]], pending: list[bytes], limit: int
    ) -> Iterator[tuple[bytes, bytes]]:
        updates, count, i, j = self._updates, 0, 0, 0
        while count < limit and (i < len(stored) or j < len(pending)):
            if j == len(pending) or (i < len(stored) and stored[i][0] < pending[j]):
                key, value = stored[i]
                i += 1
            else:
                key, new_value = pending[j], updates[pending[j]]
                j += 1
                if i < len(stored) and stored[i][0] == key:
                    i += 1  # the pending write shadows the stored value
                if new_value is None:
                    continue
                value = new_value
            count += 1
            yield key, value

    def _check(self, *allowed: TransactionStatus) -> None:
        if self.status not in allowed:
            raise TransactionStateError(
                f"store transaction on {self.store.changelog_topic}[{self.store.partition}] is "
                f"{self.status}; this call needs {' or '.join(allowed)}"
            )

    @contextmanager
    def _step(self, *allowed: TransactionStatus) -> Iterator[None]:
        """Guard a multi-step call: any error leaves the transaction FAILED."""
        self._check(*allowed)
        try:
            yield
        except BaseException:
            self.status = TransactionStatus.FAILED
            raise
