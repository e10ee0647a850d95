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
:class:`~services.executor.context.HandlerContext`).

Expiry (when the store is given a ``retention_ms`` R, the executor's ``dedup_retention_ms``):
an entry last written by the commit at wall time W is kept at least until W + R (by this
executor's clock), then deleted by the first later commit of its partition with sweep
budget left. A time index beside the entries finds them: per commit and partition, one
record ``\x00t`` + W + chunk listing the ids that commit wrote (execution ids never start
with a NUL byte). Each commit sweeps expired index records in W order, visiting at most
``sweep_min_ids`` + 2 x (entries it writes) ids per partition, so removal keeps pace with
writes; an id rewritten later is kept (its newer W is indexed again). The deletes are
changelog tombstones in the commit's Kafka transaction: a restore does not bring them back.

Changelog formats. v2 (``entries_in_index`` False): every entry is its own changelog record
(key = execution id) and the index record ``\x00t`` + W + chunk lists the ids. v3
(``entries_in_index`` True): the index record carries the entries and is the only record of
a commit's entries, so a commit produces one changelog record per partition and 1,000 ids
(plus the tombstones of the index records it swept); the entries are written to RocksDB
locally only (:meth:`StoreTransaction.set_local_many`), keyed by id as in v2, so a lookup
stays one get. A v3 index key has the chunk number's top bit set (no v2 chunk reaches it,
and its key, not a guess at its value, tells the formats apart); its value is ``\x03``, then
per id its 2-byte length, the id and the 13-byte entry; W is the key's. A restore applies
:meth:`DedupStore.expand_changelog_record` to each record: a v3 index record gives itself
and its entries stored with W, in log order (a later record of an id wins), except entries
already expired by the restoring executor's clock (W <= now - R; with no retention, all):
the sweep would delete them; it finds them gone and only tombstones the record. v2 records
restore as they are (an expired one is swept again, with its per-id tombstone).

Sweeps, per index record in W order: a v3 record's ids still stored with its W are deleted
locally (no per-id records exist to tombstone; an id rewritten since is its later record's
to sweep), then the record gets its tombstone. A v2 record's expired ids get per-id
tombstones, as before. No per-id record may outlive its id, and one would when a v3 write
rewrote an id that has one (a v3 sweep deletes it without a tombstone). So when a v2
record's sweep keeps an id rewritten since: a v3 writer gives it a per-id tombstone and
lists it again with its entry in this commit's index record (produced after the tombstone:
kept longer, never shorter), and moves unindexed 13-byte entries into the index the same
way; a v2 writer writes it again (a new per-id record replaces the old) if a v3 commit
rewrote it (its write time has a v3 index record). Both writers restore and sweep both
formats, so a partition may move between them in either direction.

Rollout: an executor without the expander restores a v3 changelog without its entries
(they would run again), so every executor of a group must run code that restores v3 before
any of them writes it (deploy, then turn ``entries_in_index`` on); turning it off again is
safe. Known slack: an entry restored from a v3 record whose tombstone follows it in the
same restore (possible only when the restoring clock is behind the one that swept it) has
no index record left and stays until its id is written again; it is expired, so it only
blocks a re-run that retention already allows. Likewise an unindexed 13-byte entry that a
v3 write rewrites before the move into the index reaches it keeps its per-id record, which
a restore after the rewrite expired brings back as an old, unexpiring entry.

What expiry gives up: a missing entry lets *any* DueEvent of the execution run (a re-read
attempt of a RETRY_SCHEDULED, SUCCEEDED or DEAD_LETTER execution, or a REPLAY). That is safe
while no due record the entry covers can be read again, and a due record is readable at
most its timestamp + its topic's ``segment.ms`` + ``retention.ms`` (+ the broker's 5 min
retention check), whether re-read after a crash, a rebalance, or by a group whose committed
offsets expired (``auto.offset.reset=earliest``). R must cover that plus clock skew:
:func:`required_retention_ms`, checked against the broker by
:func:`check_retention_covers_due_topics`. A DueEvent emitted *again* for an execution more
than R after its last outcome (a second ``dlq replay`` of one dead letter, a re-fired
window) runs again. Entries of the previous format (13 bytes, no time) still read; the
sweep indexes them in key order as written at that commit, then sets a format marker. A
partition sweeps only at commits that follow a write to it since it was opened (so never
while restoring): a quiet partition keeps what it holds until it writes again.
"""

from __future__ import annotations

import operator
import struct
import time
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from itertools import repeat
from pathlib import Path
from typing import Any, NamedTuple

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    ResourceType,
)

from streams import clock
from streams.exceptions import KafkronError
from streams.kafka.errors import denied_error
from streams.kafka.producer import TransactionalProducer
from streams.state.store import Store
from streams.state.transaction import StoreTransaction
from streams.topics import DUE_RETENTION_MS, DUE_SEGMENT_MS

STORE_NAME = "dedup"

_ENTRY = struct.Struct(">cIq")  # status, attempt, replay mark (the whole previous format)
_WRITTEN_AT = struct.Struct(">q")  # appended to _ENTRY: wall ms of the commit that wrote it
_STORED = struct.Struct(">cIqq")  # _ENTRY + _WRITTEN_AT
_ENTRY_SIZE = _STORED.size
_INDEX_PREFIX = b"\x00t"  # + written-at ms + chunk number: ids written by one commit
_INDEX_SUFFIX = struct.Struct(">QI")  # unsigned: keys sort by time
_INDEX_TIME = struct.Struct(">Q")
_FORMAT_KEY = b"\x00format"  # set once every entry of the partition is indexed
_FORMAT_VERSION = b"\x02"
_ENTRIES_START, _ENTRIES_END = b"\x01", b"\xff"  # UTF-8 ids never contain 0xff
_ID_LENGTH = struct.Struct(">H")
_INDEX_CHUNK_IDS = 1_000  # ids per index record: well under a record's size limit
_WITH_ENTRIES = 0x8000_0000  # chunk number flag: the index record carries the entries (v3)
_WITH_ENTRIES_BYTE = 10  # the key's byte holding that flag (the chunk's first)
_INDEX_KEY_SIZE = len(_INDEX_PREFIX) + _INDEX_SUFFIX.size
_ENTRIES_VERSION = b"\x03"  # first byte of an index value that carries entries
_SWEEP_SCAN_RECORDS = 64  # index records read per partition per sweep

RETENTION_MARGIN_MS = 3600 * 1000
"""Covers the broker's retention check (``log.retention.check.interval.ms``, 5 min by
default) and clock skew between a due record's timestamp and this executor's clock."""
DEFAULT_SWEEP_MIN_IDS = 1_000


def required_retention_ms(retention_ms: int, segment_ms: int) -> int | None:
    """The least dedup retention for due topics with these configs; None when unbounded.

    A record is deleted once its segment's newest timestamp is ``retention.ms`` old; the
    segment rolls at most ``segment.ms`` after its first record, so a record stays readable
    at most its timestamp + ``segment.ms`` + ``retention.ms`` (+ the check interval).
    """
    if retention_ms < 0:
        return None
    return retention_ms + segment_ms + RETENTION_MARGIN_MS


DEFAULT_RETENTION_MS = DUE_RETENTION_MS + DUE_SEGMENT_MS + RETENTION_MARGIN_MS
"""``required_retention_ms`` of the due topics ``ensure_topics`` creates (7 days + 2 hours)."""


class DedupRetentionError(KafkronError):
    """The dedup retention is shorter than a due record can stay readable."""


def check_retention_covers_due_topics(
    admin: AdminClient, due_topics: Iterable[str], retention_ms: int, timeout_s: float = 30.0
) -> None:
    """Raise DedupRetentionError unless ``retention_ms`` outlives every due record.

    Reads each topic's effective ``retention.ms`` and ``segment.ms`` (topic or broker
    default) from the broker; call it at start-up, before consuming.
    """
    resources = [ConfigResource(ResourceType.TOPIC, topic) for topic in due_topics]
    for resource, future in admin.describe_configs(resources, request_timeout=timeout_s).items():
        try:
            configs = future.result()
        except KafkaException as exc:
            denied = denied_error(f"reading the configs of {resource.name} (DescribeConfigs)", exc)
            if denied is not None:
                raise denied from exc
            raise
        retention = int(configs["retention.ms"].value)
        segment = int(configs["segment.ms"].value)
        needed = required_retention_ms(retention, segment)
        if needed is None:
            raise DedupRetentionError(
                f"{resource.name} has retention.ms={retention}: it keeps records forever, so "
                "no dedup retention covers a re-read of them. Give the due topics a finite "
                "retention.ms."
            )
        if retention_ms < needed:
            raise DedupRetentionError(
                f"{resource.name} keeps a record up to retention.ms={retention} + "
                f"segment.ms={segment} after its timestamp, longer than the dedup retention "
                f"{retention_ms} ms: a re-read record could run a finished execution again. "
                f"Set KAFKRON_EXECUTOR_DEDUP_RETENTION_MS >= {needed} or lower the due "
                "topic's retention.ms / segment.ms."
            )


def _wall_clock_ms() -> int:
    return time.monotonic_ns() // 1_000_000 + clock.base_ms  # clock.now_ms(), inlined


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
        """The previous, unexpiring format: no write time."""
        # _value_ is .value without the enum property's cost (this runs once per execution)
        return _ENTRY.pack(self.progress._value_, self.attempt, self.replay_mark)

    def encode_at(self, written_at_ms: int) -> bytes:
        """The stored form with the wall ms of the commit that writes it."""
        return _STORED.pack(self.progress._value_, self.attempt, self.replay_mark, written_at_ms)

    @classmethod
    def decode(cls, raw: bytes) -> DedupEntry:
        """Either stored form."""
        if len(raw) != _ENTRY_SIZE and len(raw) != _ENTRY.size:
            raise ValueError(f"a dedup entry is {_ENTRY.size} or {_ENTRY_SIZE} bytes, not {raw!r}")
        status, attempt, mark = _ENTRY.unpack_from(raw)
        return cls(Progress(status), attempt, mark)


def written_at_ms(raw: bytes) -> int | None:
    """When the stored entry ``raw`` was written, or None for the previous format."""
    return _WRITTEN_AT.unpack_from(raw, _ENTRY.size)[0] if len(raw) == _ENTRY_SIZE else None


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


def index_key(written_at_ms: int, chunk: int) -> bytes:
    """The time-index key of one chunk of the ids one commit wrote."""
    return _INDEX_PREFIX + _INDEX_SUFFIX.pack(written_at_ms, chunk)


def entries_index_key(written_at_ms: int, chunk: int) -> bytes:
    """The key of one chunk of the entries one commit wrote, carried by the index (v3)."""
    return _INDEX_PREFIX + _INDEX_SUFFIX.pack(written_at_ms, chunk | _WITH_ENTRIES)


def _carries_entries(key: bytes) -> bool:
    """True for a v3 index key (its value lists ids with their entries)."""
    return (
        len(key) == _INDEX_KEY_SIZE
        and key.startswith(_INDEX_PREFIX)
        and key[_WITH_ENTRIES_BYTE] >= 0x80
    )


def _encode_entries(ids: list[bytes], entries: list[bytes]) -> bytes:
    # Per id: its 2-byte length, its bytes and its 13-byte entry (_ENTRY), in C loops.
    add = operator.add
    return _ENTRIES_VERSION + b"".join(
        map(add, map(add, map(_ID_LENGTH.pack, map(len, ids)), ids), entries)
    )


def _decode_entries(raw: bytes) -> list[tuple[bytes, bytes]]:
    """``(id, 13-byte entry)`` pairs of a v3 index value."""
    if raw[:1] != _ENTRIES_VERSION:
        raise ValueError(f"unknown dedup index format {raw[:1]!r}")
    pairs, i, size = [], 1, _ENTRY.size
    while i < len(raw):
        (length,) = _ID_LENGTH.unpack_from(raw, i)
        start = i + 2 + length
        pairs.append((raw[i + 2 : start], raw[start : start + size]))
        i = start + size
    return pairs


def _encode_ids(ids: list[bytes]) -> bytes:
    # Each id as its 2-byte length and its bytes, without a Python call per id.
    return b"".join(map(operator.add, map(_ID_LENGTH.pack, map(len, ids)), ids))


def _decode_ids(raw: bytes) -> list[bytes]:
    ids, i = [], 0
    while i < len(raw):
        (length,) = _ID_LENGTH.unpack_from(raw, i)
        ids.append(raw[i + 2 : i + 2 + length])
        i += 2 + length
    return ids


class DedupStore:
    """The dedup partitions this executor owns, and their writes since the last commit.

    ``retention_ms`` None keeps entries forever (the previous format, unindexed); otherwise
    entries carry their write time and each commit sweeps expired ones (see the module doc).
    ``entries_in_index`` (with a retention) writes the entries locally only and puts them in
    the index records, one changelog record per commit and partition (v3); False writes a
    changelog record per entry (v2). Either restores and sweeps both formats.
    ``clock_ms`` is the wall clock in ms (tests pass their own).
    """

    def __init__(
        self,
        group_id: str,
        state_dir: Path,
        changelog_topic: str,
        *,
        retention_ms: int | None = None,
        sweep_min_ids: int = DEFAULT_SWEEP_MIN_IDS,
        clock_ms: Callable[[], int] = _wall_clock_ms,
        entries_in_index: bool = False,
    ) -> None:
        if retention_ms is not None and retention_ms < 1:
            raise ValueError(f"retention_ms must be >= 1 or None, got {retention_ms}")
        self.store = Store(
            STORE_NAME,
            group_id,
            state_dir,
            changelog_topic,
            changelog_expander=self.expand_changelog_record,
        )
        self.retention_ms = retention_ms
        self.entries_in_index = entries_in_index and retention_ms is not None
        self._sweep_min_ids = sweep_min_ids
        self._clock_ms = clock_ms
        self._pending: dict[int, dict[str, DedupEntry]] = {}  # recorded since the last commit
        self._transactions: dict[int, StoreTransaction] = {}  # between prepare and flush
        self._written: set[int] = set()  # partitions recorded in since opened: restored
        self._last_written_at: dict[int, int] = {}
        self._sweep_cursor: dict[int, tuple[bytes, int]] = {}  # index key, ids done in it
        self._legacy_cursor: dict[int, bytes] = {}  # next key to check for the old format
        self._indexed: set[int] = set()  # partitions whose every entry is indexed
        # PartitionStore.get of each open partition that was read: one lookup per execution
        self._gets: dict[int, Callable[[bytes], bytes | None]] = {}

    def lookup(self, partition: int, execution_id: str) -> DedupEntry | None:
        """The entry of ``execution_id``, including writes not committed yet."""
        pending = self._pending.get(partition)
        if pending is not None:
            entry = pending.get(execution_id)
            if entry is not None:
                return entry
        key = execution_id.encode()
        if self._transactions:  # only inside a commit, between prepare and flush
            transaction = self._transactions.get(partition)
            if transaction is not None:
                raw = transaction.get(key)
                return None if raw is None else DedupEntry.decode(raw)
        get = self._gets.get(partition)
        if get is None:
            get = self._gets[partition] = self.store.partition(partition).get
        raw = get(key)
        return None if raw is None else DedupEntry.decode(raw)

    def lookup_many(self, partition: int, execution_ids: list[str]) -> list[DedupEntry | None]:
        """:meth:`lookup` of each of ``execution_ids`` as of now, in order: one RocksDB
        multi-get for the lot (~0.3 us a key against ~0.5 us for a get each, when absent).

        The entries are those of this instant: a :meth:`record` or a commit after the call
        is not in them (read them again after either).
        """
        keys = list(map(str.encode, execution_ids))
        transaction = self._transactions.get(partition) if self._transactions else None
        if transaction is not None:  # only inside a commit, between prepare and flush
            raws = list(map(transaction.get, keys))
        else:
            raws = self.store.partition(partition).get_many(keys)
        if raws.count(None) == len(raws):
            entries: list[DedupEntry | None] = [None] * len(raws)
        else:
            decode = DedupEntry.decode
            entries = [None if raw is None else decode(raw) for raw in raws]
        pending = self._pending.get(partition)
        if pending and not pending.keys().isdisjoint(execution_ids):
            for i, execution_id in enumerate(execution_ids):
                entry = pending.get(execution_id)
                if entry is not None:
                    entries[i] = entry
        return entries

    def record(self, partition: int, execution_id: str, entry: DedupEntry) -> None:
        """Record ``entry``; it goes to the store and its changelog at the next commit."""
        pending = self._pending.get(partition)
        if pending is None:
            self.store.partition(partition)  # refuses a partition that is not open here
            pending = self._pending[partition] = {}
            self._written.add(partition)
        pending[execution_id] = entry

    def expand_changelog_record(
        self, key: bytes, value: bytes | None
    ) -> list[tuple[bytes, bytes | None]] | None:
        """What a restore writes for one changelog record (None: the record as it is).

        A v3 index record is kept and gives each of its entries, stored with the record's
        write time, unless that time is past the retention by this executor's clock (the
        sweep would delete them; it finds them gone and only tombstones the record).
        """
        if value is None or not _carries_entries(key):
            return None
        (written_at,) = _INDEX_TIME.unpack_from(key, len(_INDEX_PREFIX))
        if self.retention_ms is not None and written_at <= self._clock_ms() - self.retention_ms:
            return None
        suffix = _WRITTEN_AT.pack(written_at)
        expanded: list[tuple[bytes, bytes | None]] = [(key, value)]
        expanded += [
            (execution_id, entry + suffix) for execution_id, entry in _decode_entries(value)
        ]
        return expanded

    @property
    def dirty(self) -> bool:
        return bool(self._pending) or bool(self._transactions)

    def prepare(self, producer: TransactionalProducer) -> None:
        """Commit step: write the recorded entries, sweep expired ones, produce every change.

        Only partitions recorded in since they were opened are swept: they are restored.
        """
        now_ms = self._clock_ms()
        pending, self._pending = self._pending, {}
        partitions = self._written if self.retention_ms is not None else set(pending)
        for partition in sorted(partitions):
            transaction = self._transactions.get(partition)
            if transaction is None:
                transaction = self._transactions[partition] = self.store.partition(
                    partition
                ).begin()
            entries = pending.get(partition, {})
            if self.retention_ms is None:
                for execution_id, entry in entries.items():
                    transaction.set(execution_id.encode(), entry.encode())
                continue
            budget = self._sweep_min_ids + 2 * len(entries)
            cutoff_ms = now_ms - self.retention_ms
            budget -= self.sweep(partition, transaction, cutoff_ms, budget, entries)
            self._index_legacy(partition, transaction, entries, budget)
            self._write_indexed(partition, transaction, entries, now_ms)
        for transaction in self._transactions.values():
            transaction.prepare(producer)  # one ``produce_changelog`` call per partition

    def sweep(
        self,
        partition: int,
        transaction: StoreTransaction,
        cutoff_ms: int,
        budget: int,
        relisted: dict[str, DedupEntry] | None = None,
    ) -> int:
        """Delete entries written at or before ``cutoff_ms``, visiting at most ``budget``
        ids of the time index in write order; returns the ids visited.

        ``relisted``: where a v2 record's ids that were rewritten since (by a v3 write, or by
        any write when this store writes v3) go, with their entries, to be written again by
        this commit, so that no per-id record outlives its id (see the module doc).
        """
        if cutoff_ms < 0:
            return 0
        end = _INDEX_PREFIX + _INDEX_TIME.pack(cutoff_ms + 1)
        visited = 0
        for key, value in transaction.iter_range(_INDEX_PREFIX, end, _SWEEP_SCAN_RECORDS):
            if visited >= budget:
                break
            carries = _carries_entries(key)
            ids = [i for i, _ in _decode_entries(value)] if carries else _decode_ids(value)
            cursor_key, start = self._sweep_cursor.get(partition, (key, 0))
            start = start if cursor_key == key else 0
            stop = min(len(ids), start + budget - visited)
            if carries:
                self._sweep_entries(transaction, key, ids[start:stop])
            else:
                self._sweep_ids(transaction, ids[start:stop], cutoff_ms, relisted)
            visited += stop - start
            if stop < len(ids):
                self._sweep_cursor[partition] = (key, stop)
                break
            transaction.delete(key)
            self._sweep_cursor.pop(partition, None)
        return visited

    @staticmethod
    def _sweep_entries(transaction: StoreTransaction, key: bytes, ids: list[bytes]) -> None:
        """Delete, locally only, the ids of a v3 record still as it wrote them: they have no
        per-id changelog records, and a rewritten one is its later record's to sweep."""
        written_at = key[len(_INDEX_PREFIX) : len(_INDEX_PREFIX) + _WRITTEN_AT.size]
        get = transaction.store.get  # committed: this commit's own writes come after
        gone = []
        for entry_key in ids:
            raw = get(entry_key)
            if raw is not None and raw[_ENTRY.size :] == written_at:
                gone.append((entry_key, None))
        transaction.set_local_many(gone)

    def _sweep_ids(
        self,
        transaction: StoreTransaction,
        ids: list[bytes],
        cutoff_ms: int,
        relisted: dict[str, DedupEntry] | None,
    ) -> None:
        """Delete, with changelog tombstones, the ids of a v2 record written at or before
        ``cutoff_ms``; put the kept ones whose per-id record would outlive them in
        ``relisted``."""
        get = transaction.store.get
        for entry_key in ids:
            # The committed value: this commit's own writes come after the sweep. A later
            # rewrite is listed again under its own, later time; the previous format (no
            # time) is indexed separately.
            raw = get(entry_key)
            if raw is None:
                continue
            at_ms = written_at_ms(raw)
            if at_ms is not None and at_ms <= cutoff_ms:
                transaction.delete(entry_key)
            elif relisted is None:
                continue
            elif self.entries_in_index:
                # Rewritten since, maybe by a v3 write (no per-id record): its per-id record
                # would outlive it. The tombstone goes before this commit's index record,
                # which lists the entry again (kept longer, never shorter).
                transaction.delete(entry_key)
                relisted.setdefault(entry_key.decode(), DedupEntry.decode(raw))
            elif at_ms is not None and transaction.get(entries_index_key(at_ms, 0)) is not None:
                # Rewritten by a v3 write: this v2 writer writes it again as a per-id record,
                # which replaces the old one on the compacted changelog.
                relisted.setdefault(entry_key.decode(), DedupEntry.decode(raw))

    def _index_legacy(
        self,
        partition: int,
        transaction: StoreTransaction,
        entries: dict[str, DedupEntry],
        budget: int,
    ) -> None:
        """Rewrite up to ``budget`` entries of the previous format with a write time (now)."""
        if partition in self._indexed or budget <= 0:
            return
        if transaction.get(_FORMAT_KEY) is not None:
            self._indexed.add(partition)
            return
        start = self._legacy_cursor.get(partition, _ENTRIES_START)
        items = transaction.iter_range(start, _ENTRIES_END, budget)
        for key, raw in items:
            if len(raw) == _ENTRY.size:
                if self.entries_in_index:
                    transaction.delete(key)  # its per-id record goes before the index record
                entries.setdefault(key.decode(), DedupEntry.decode(raw))
        if len(items) < budget:
            transaction.set(_FORMAT_KEY, _FORMAT_VERSION)
            self._indexed.add(partition)
            self._legacy_cursor.pop(partition, None)
        else:
            self._legacy_cursor[partition] = items[-1][0] + b"\x00"

    def _write_indexed(
        self,
        partition: int,
        transaction: StoreTransaction,
        entries: dict[str, DedupEntry],
        now_ms: int,
    ) -> None:
        """Write ``entries`` with one write time and list their ids under it in the index."""
        if not entries:
            return
        written_at = max(now_ms, self._last_written_at.get(partition, now_ms - 1) + 1)
        while (  # another owner's
            transaction.get(index_key(written_at, 0)) is not None
            or transaction.get(entries_index_key(written_at, 0)) is not None
        ):
            written_at += 1
        self._last_written_at[partition] = written_at
        ids = list(map(str.encode, entries))
        if self.entries_in_index:
            pack = _ENTRY.pack
            raw = [pack(p._value_, attempt, mark) for p, attempt, mark in entries.values()]
            suffix = _WRITTEN_AT.pack(written_at)
            stored = map(operator.add, raw, repeat(suffix))  # encode_at
            transaction.set_local_many(zip(ids, stored, strict=False))
            for chunk, first in enumerate(range(0, len(ids), _INDEX_CHUNK_IDS)):
                last = first + _INDEX_CHUNK_IDS
                value = _encode_entries(ids[first:last], raw[first:last])
                transaction.set(entries_index_key(written_at, chunk), value)
            return
        set_value, pack = transaction.set, _STORED.pack
        for key, (progress, attempt, replay_mark) in zip(ids, entries.values(), strict=True):
            set_value(key, pack(progress._value_, attempt, replay_mark, written_at))  # encode_at
        for chunk, first in enumerate(range(0, len(ids), _INDEX_CHUNK_IDS)):
            chunk_ids = ids[first : first + _INDEX_CHUNK_IDS]
            transaction.set(index_key(written_at, chunk), _encode_ids(chunk_ids))

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
        self._pending.clear()
        # Sweep and indexing progress was part of the dropped writes: start them again.
        self._sweep_cursor.clear()
        self._legacy_cursor.clear()
        self._indexed.clear()

    def close_partition(self, partition: int) -> None:
        """Close one partition's database (revoked or lost); its open writes must be gone."""
        transaction = self._transactions.pop(partition, None)
        if transaction is not None:
            transaction.discard()
        self._pending.pop(partition, None)
        for state in (self._last_written_at, self._sweep_cursor, self._legacy_cursor):
            state.pop(partition, None)
        self._written.discard(partition)
        self._indexed.discard(partition)
        self._gets.pop(partition, None)
        self.store.close_partition(partition)

    def close(self) -> None:
        self.discard()
        self._gets.clear()
        self.store.close()
