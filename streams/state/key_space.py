"""Key spaces: several logical stores in one partition store, each under a one-byte prefix.

A processor's transaction writes one changelog partition per store it changed, and librdkafka
sends one produce request per partition (at most 5 in flight), so a transaction's flush grows
with the partitions it writes (bench/txn_partitions.py: 4 partitions 3.7 ms, 48 24 ms). Logical
stores that change together are cheaper as key spaces of one store: one RocksDB, one changelog
topic. :class:`KeySpace` is the view of one key space through the store's transaction.

Invariant: a view's keys are the store's keys under its prefix with the prefix removed, so
within a key space their order is the logical store's (the prefix is the same leading byte);
a range read through one view never returns another space's keys, whatever bytes they hold.
"""

from __future__ import annotations

from typing import Protocol


class KeyValueTransaction(Protocol):
    """The operations a key space needs from its store's transaction (``transaction.py``)."""

    def get(self, key: bytes) -> bytes | None: ...

    def set(self, key: bytes, value: bytes) -> None: ...

    def delete(self, key: bytes) -> None: ...

    def delete_many(self, keys: list[bytes]) -> None: ...

    def iter_range(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]: ...

    def prefetch(self, keys: list[bytes]) -> None: ...


class KeySpace:
    """One logical store: the keys of ``transaction`` under the one-byte ``prefix``."""

    __slots__ = ("_prefix", "_transaction")

    def __init__(self, transaction: KeyValueTransaction, prefix: bytes) -> None:
        if len(prefix) != 1:
            raise ValueError(f"a key space prefix is one byte, got {prefix!r}")
        self._transaction = transaction
        self._prefix = prefix

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key`` in this key space."""
        return self._transaction.get(self._prefix + key)

    def set(self, key: bytes, value: bytes) -> None:
        """Write ``value`` under ``key`` in this key space."""
        self._transaction.set(self._prefix + key, value)

    def delete(self, key: bytes) -> None:
        """Delete ``key`` from this key space."""
        self._transaction.delete(self._prefix + key)

    def delete_many(self, keys: list[bytes]) -> None:
        """Delete each of ``keys``, as :meth:`delete` each in order."""
        prefix = self._prefix
        self._transaction.delete_many([prefix + key for key in keys])

    def iter_range(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` items of this key space with ``start <= key < end``, in key order."""
        prefix = self._prefix
        items = self._transaction.iter_range(prefix + start, prefix + end, limit)
        return [(key[1:], value) for key, value in items]

    def prefetch(self, keys: list[bytes]) -> None:
        """Read ``keys`` ahead for the :meth:`get` calls that follow (a hint)."""
        prefix = self._prefix
        self._transaction.prefetch([prefix + key for key in keys])
