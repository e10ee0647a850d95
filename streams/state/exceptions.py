"""Errors of the partition stores."""

from __future__ import annotations

from streams.exceptions import KafkronError


class StoreError(KafkronError):
    """A partition store was used wrongly or its files are unusable."""


class StoreClosedError(StoreError):
    """The partition store was closed (its partition was revoked or the processor stopped)."""


class TransactionStateError(StoreError):
    """A store transaction was used in a status that does not allow it (e.g. after failing)."""


class ChangelogOffsetRegressionError(StoreError):
    """A write would move a store's changelog offset backwards: the store would be corrupt.

    Usually two owners wrote one partition; the partition must be restored from its changelog.
    """


class StoreCorruptedError(StoreError):
    """A partition store's files are damaged; the next open rebuilds it from its changelog.

    See :mod:`streams.state.damage` for what kafkron does with a damaged store.
    """


class StoreDiskFullError(StoreError):
    """The disk holding a partition store is full: the service stops until space is freed."""


class StoreInUseError(StoreError):
    """Another process holds the partition store's RocksDB lock."""
