"""One partition of one store: a RocksDB on disk and the changelog offset it reflects.

The changelog offset lives in its own column family, written in the same WriteBatch as the
data it describes, so after any crash the database and its offset agree.

A RocksDB error (damaged files, a full disk) raises the :class:`StoreError` that
:mod:`streams.state.damage` makes of it, and the store refuses further use; a damaged store
is marked to be rebuilt from its changelog at its next open.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, cast

from rocksdict import (
    BlockBasedOptions,
    ColumnFamily,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteBufferManager,
    WriteOptions,
)

from streams.state.damage import mark_damaged, store_error
from streams.state.exceptions import (
    ChangelogOffsetRegressionError,
    StoreClosedError,
    StoreCorruptedError,
    StoreError,
)

if TYPE_CHECKING:
    from streams.state.transaction import StoreTransaction

log = logging.getLogger(__name__)

META_COLUMN_FAMILY = "kafkron.meta"
CHANGELOG_OFFSET_KEY = b"changelog_offset"


_WRITE_BUFFER_BYTES = 8 << 20
_BLOOM_BITS_PER_KEY = 10
_MEMTABLE_BLOOM_RATIO = 0.1


def _unlogged() -> WriteOptions:
    options = WriteOptions()
    # A property at runtime; rocksdict's stub declares it as a method.
    setattr(options, "disable_wal", True)  # noqa: B010
    return options


def _options(write_buffers: WriteBufferManager | None = None) -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    # Restores write without the WAL: memtables of the data and the offset must then reach
    # disk together, or a crash could keep an offset whose data was lost.
    options.set_atomic_flush(True)
    # A get of a key that is not there (every create: no state yet) otherwise searches the
    # SST files: with ~1.2 bytes of filter per key such a miss is ~5x cheaper at 1M keys.
    table = BlockBasedOptions()
    table.set_bloom_filter(_BLOOM_BITS_PER_KEY, False)
    options.set_block_based_table_factory(table)
    # A get of a key not in the memtable (a herd's results read states written long ago)
    # otherwise searches its skip list first; a bloom filter over the memtable's keys (a
    # tenth of its size) skips that: ~1.5 us instead of ~2.1 us a key, multi-gets of 80 at
    # 1M keys while the keys read are written back. A block cache of 64-256 MiB, no
    # compression, a hash index in data blocks or filters for hits gained nothing there
    # (a herd's results come in key order: the next key is mostly in the block just read).
    options.set_memtable_prefix_bloom_ratio(_MEMTABLE_BLOOM_RATIO)
    options.set_memtable_whole_key_filtering(True)
    if write_buffers is not None:
        # Memtables (64 MiB each by default) otherwise hold a whole partition's pending
        # jobs in memory: bounded, the data lives in SST files and the OS page cache.
        options.set_write_buffer_size(_WRITE_BUFFER_BYTES)
        options.set_write_buffer_manager(write_buffers)
    return options


class PartitionStore:
    """A RocksDB of bytes keys and values for one partition, closed explicitly.

    ``created`` is True when no database existed on disk before opening: recovery then
    restores from the beginning of the changelog instead of from the stored offset.
    ``write_buffers``, shared by the partitions of a store, caps their memtables together.
    """

    def __init__(
        self,
        path: Path,
        partition: int,
        changelog_topic: str,
        write_buffers: WriteBufferManager | None = None,
    ) -> None:
        self.path = path
        self.partition = partition
        self.changelog_topic = changelog_topic
        self.created = not (path / "CURRENT").exists()
        path.mkdir(parents=True, exist_ok=True)
        self._db: Rdict | None = Rdict(
            str(path),
            options=_options(write_buffers),
            column_families={META_COLUMN_FAMILY: _options(write_buffers)},
        )
        # Column family objects keep the database open: dropped before close() closes it.
        self._meta: Rdict | None = self._db.get_column_family(META_COLUMN_FAMILY)
        self._meta_handle: ColumnFamily | None = self._db.get_column_family_handle(
            META_COLUMN_FAMILY
        )
        # [from, until) holds no key (until None: nothing from ``from`` on), as of the last
        # write. A scan that found nothing learns the next key after it, so that the next
        # scans inside that gap need no RocksDB iterator: a timer's due scan every
        # punctuation while nothing is due (each seek steps through every level and the
        # deletion markers of the fired entries collected; ~4% of the timer's CPU at 1M).
        self._gap: tuple[bytes, bytes | None] | None = None
        self._error: StoreError | None = None  # the first RocksDB error: the store is unusable

    @property
    def closed(self) -> bool:
        return self._db is None

    def begin(self) -> StoreTransaction:
        """A new transaction over this partition."""
        from streams.state.transaction import StoreTransaction

        return StoreTransaction(self)

    def changelog_offset(self) -> int | None:
        """Offset of the last changelog record applied to this database, or None."""
        meta = self._meta_db()
        try:
            raw = meta.get(CHANGELOG_OFFSET_KEY)
        except Exception as exc:
            self._raise_failed(exc, "reading")
        return None if raw is None else int.from_bytes(raw, "big", signed=True)

    def estimated_keys(self) -> int:
        """RocksDB's estimate of the keys in the database (no scan; for metrics)."""
        estimate = self._data_db().property_int_value("rocksdb.estimate-num-keys")
        return int(estimate or 0)

    def get(self, key: bytes) -> bytes | None:
        """The committed value of ``key``, or None."""
        db = self._data_db()
        try:
            value: bytes | None = db.get(key)
        except Exception as exc:
            self._raise_failed(exc, "reading")
        return value

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """The committed values of ``keys``, in order (None: absent), in one multi-get.

        About half the cost per key of one :meth:`get` each (~1.2 us against ~2.2 us at
        200K keys): one call into RocksDB and one snapshot for the lot.
        """
        if not keys:
            return []
        request: list[str | int | float | bytes | bool] = list(keys)
        db = self._data_db()
        try:
            # A list of keys gives a list of values (the stub types the result as one value).
            return cast("list[bytes | None]", db.get(request))
        except Exception as exc:
            self._raise_failed(exc, "reading")

    def scan(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` committed items with ``start <= key < end``, in key order."""
        if limit <= 0:
            return []
        gap = self._gap
        if gap is not None and gap[0] <= start and (gap[1] is None or end <= gap[1]):
            return []
        found = self._scan(start, end, limit)
        if not found and start < end:
            following = self._scan(end, None, 1)
            self._gap = (start, following[0][0] if following else None)
        return found

    def _scan(self, start: bytes, end: bytes | None, limit: int) -> list[tuple[bytes, bytes]]:
        db = self._data_db()
        read_options = ReadOptions()
        if end is not None:
            read_options.set_iterate_upper_bound(end)
        # One call per item (items()) instead of four (valid, key, value, next): ~2x faster.
        items = cast(
            "Iterable[tuple[bytes, bytes]]", db.items(from_key=start, read_opt=read_options)
        )
        try:
            found = list(islice(items, limit))
        except Exception as exc:
            self._raise_failed(exc, "reading")
        finally:
            del items  # an iterator keeps the database open
        if len(found) < limit:
            self._check_scan_end(db, found[-1][0] + b"\x00" if found else start, read_options)
        return found

    def _check_scan_end(self, db: Rdict, after: bytes, read_options: ReadOptions) -> None:
        """Raise when a scan ended early because of an error, not at its end.

        ``items()`` ends its iteration on an error as if the range were exhausted (a data
        block failing its checksum ends it silently): a new iterator sought to the first key
        after the scan's last one reads the same block and reports the error (~3-8 us, only
        for a scan that returned less than its limit).
        """
        iterator = db.iter(read_options)
        try:
            iterator.seek(after)
            iterator.status()  # raises the iterator's error
        except Exception as exc:
            self._raise_failed(exc, "reading")
        finally:
            del iterator

    def write(
        self,
        updates: Mapping[bytes, bytes | None],
        changelog_offset: int | None,
        *,
        wal: bool = True,
    ) -> None:
        """Apply ``updates`` (None deletes) and the changelog offset in one atomic WriteBatch.

        Refuses an offset at or below the stored one: that write would replay history.
        ``changelog_offset`` None keeps the stored offset: for local-only writes, which no
        changelog record carries (see :mod:`streams.state.transaction`).
        ``wal=False`` (a restore replaying the changelog; ~0.4 us less CPU a record) skips the
        write-ahead log: a crash then loses the latest such writes, but data and offset
        together (atomic flush), so a restore resumes from an earlier offset and replays
        them. Call :meth:`flush` before the next write with the WAL.
        """
        stored = None if changelog_offset is None else self.changelog_offset()
        if stored is not None and changelog_offset is not None and changelog_offset <= stored:
            raise ChangelogOffsetRegressionError(
                f"{self.changelog_topic}[{self.partition}] at {self.path}: changelog offset "
                f"{changelog_offset} is not after the stored {stored}. Delete the folder to "
                "restore the partition from its changelog."
            )
        self._gap = None
        batch = WriteBatch(raw_mode=True)
        put, delete = batch.put, batch.delete
        for key, value in updates.items():
            if value is None:
                delete(key)
            else:
                put(key, value)
        if changelog_offset is not None:
            batch.put(
                CHANGELOG_OFFSET_KEY,
                changelog_offset.to_bytes(8, "big", signed=True),
                self._meta_handle,
            )
        db = self._data_db()
        try:
            if wal:
                db.write(batch)
            else:
                db.write(batch, _unlogged())
        except Exception as exc:
            self._raise_failed(exc, "writing")

    def flush(self) -> None:
        """Persist every memtable to SST files: the data, then the offset that describes it."""
        data, meta = self._data_db(), self._meta_db()
        try:
            data.flush(True)
            meta.flush(True)
        except Exception as exc:
            self._raise_failed(exc, "flushing")

    def close(self) -> None:
        """Close the database; idempotent. A failed close (a full disk, say) is logged, not
        raised: what it could not flush is in the write-ahead log or, for a restore's
        writes, behind the stored changelog offset, so the next open or restore brings it
        back; and a service stopping on an error reports that error, not its close's."""
        if self._db is None:
            return
        self._meta = None
        self._meta_handle = None
        db, self._db = self._db, None
        self._gap = None
        try:
            db.close()
        except Exception as exc:
            level = logging.WARNING if self._error is not None else logging.ERROR
            log.log(level, "closing the store %s failed: %s", self.path, exc)

    def _raise_failed(self, exc: Exception, doing: str) -> NoReturn:
        """Raise what RocksDB's ``exc`` means (see :mod:`streams.state.damage`): the first
        such error is kept and raised by every later use, and a damaged store is marked to
        be rebuilt at its next open. An error that is not RocksDB's is raised as it is."""
        if self._error is not None:
            raise self._error from exc
        error = store_error(exc, self.path, doing)
        if error is None:
            raise exc
        if isinstance(error, StoreCorruptedError):
            mark_damaged(self.path, str(exc).splitlines()[0] if str(exc) else doing)
        self._error = error
        raise error from exc

    def _data_db(self) -> Rdict:
        if self._error is not None:
            raise self._error
        if self._db is None:
            raise StoreClosedError(
                f"partition store {self.path} is closed (its partition was revoked or the "
                "processor stopped); open the partition again before using it"
            )
        return self._db

    def _meta_db(self) -> Rdict:
        self._data_db()
        assert self._meta is not None
        return self._meta
