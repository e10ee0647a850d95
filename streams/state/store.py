"""A named store of one processor group: one :class:`PartitionStore` per owned partition."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from rocksdict import WriteBufferManager

from streams.state.damage import open_or_rebuild
from streams.state.exceptions import StoreError
from streams.state.partition import PartitionStore

DEFAULT_MEMTABLE_BUDGET_BYTES = 64 << 20

ChangelogExpander = Callable[[bytes, bytes | None], Iterable[tuple[bytes, bytes | None]] | None]
"""What one changelog record ``(key, value)`` restores as: the ``(key, value)`` pairs to
write (None deletes), in order; None for the record itself. For stores whose records carry
keys written locally only (see :meth:`StoreTransaction.set_local_many`)."""


class Store:
    """Opens, finds and closes the partitions of one store under ``state_dir/<group>/<name>``.

    ``changelog_expander``, when given, is what a restore applies for each changelog record.
    """

    def __init__(
        self,
        name: str,
        group: str,
        state_dir: Path,
        changelog_topic: str,
        memtable_budget_bytes: int = DEFAULT_MEMTABLE_BUDGET_BYTES,
        changelog_expander: ChangelogExpander | None = None,
    ) -> None:
        self.name = name
        self.changelog_expander = changelog_expander
        self.changelog_topic = changelog_topic
        self.path = state_dir / group / name
        self._partitions: dict[int, PartitionStore] = {}
        # One budget for the memtables of all partitions, so RSS does not grow with the
        # number of pending jobs (each partition's RocksDB would otherwise keep 64+ MiB).
        self._write_buffers = WriteBufferManager(memtable_budget_bytes, False)

    @property
    def partitions(self) -> dict[int, PartitionStore]:
        """The open partitions by number (a copy)."""
        return dict(self._partitions)

    def estimated_keys(self) -> dict[int, int]:
        """RocksDB's estimate of the keys in each open partition, by partition (no scan)."""
        return {number: store.estimated_keys() for number, store in self._partitions.items()}

    def open_partition(self, partition: int) -> PartitionStore:
        """Open (or return the already open) partition store; a damaged one is moved aside
        and opened anew, empty, for its restore to rebuild (:mod:`streams.state.damage`)."""
        store = self._partitions.get(partition)
        if store is None:
            path = self.path / str(partition)
            store = open_or_rebuild(  # a damaged directory is moved aside: see damage.py
                path,
                lambda: PartitionStore(path, partition, self.changelog_topic, self._write_buffers),
                f"partition {partition} of store {self.name} (changelog {self.changelog_topic})",
            )
            self._partitions[partition] = store
        return store

    def partition(self, partition: int) -> PartitionStore:
        """The open partition store, or StoreError naming the partition."""
        try:
            return self._partitions[partition]
        except KeyError:
            raise StoreError(
                f"store {self.name} has no open partition {partition}; it is not assigned here"
            ) from None

    def close_partition(self, partition: int) -> None:
        """Close one partition's database if it is open."""
        store = self._partitions.pop(partition, None)
        if store is not None:
            store.close()

    def wipe_partition(self, partition: int) -> PartitionStore:
        """Close, delete and reopen one partition's database (to restore it from scratch)."""
        self.close_partition(partition)
        shutil.rmtree(self.path / str(partition), ignore_errors=True)
        return self.open_partition(partition)

    def close(self) -> None:
        """Close every open partition; each close is attempted even if one fails."""
        errors: list[BaseException] = []
        for partition in list(self._partitions):
            try:
                self.close_partition(partition)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
