"""Reading ahead: ``PartitionStore.get_many`` and ``StoreTransaction.prefetch`` change no answer.

A timer reads each input record's job state; ``prefetch`` reads a run's states in one
RocksDB multi-get first. What ``get`` answers afterwards must be exactly what it answered
without it: stored values, None for absent keys, and the transaction's own writes first.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.state.partition import PartitionStore
from streams.state.transaction import StoreTransaction

CHANGELOG = "ns.changelog.g.jobs"


class _CountingStore(PartitionStore):
    """A real RocksDB partition that counts single-key reads."""

    gets = 0

    def get(self, key: bytes) -> bytes | None:
        self.gets += 1
        return super().get(key)


def test_get_many_answers_as_get_does(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "p", 0, CHANGELOG)
    try:
        store.write({b"a": b"1", b"c": b"3", b"\xff": b"x"}, 1)
        keys = [b"a", b"b", b"c", b"a", b"\xff", b""]
        assert store.get_many(keys) == [store.get(k) for k in keys]
        assert store.get_many([]) == []
    finally:
        store.close()


def test_prefetched_keys_are_answered_without_another_read(tmp_path: Path) -> None:
    store = _CountingStore(tmp_path / "p", 0, CHANGELOG)
    try:
        store.write({b"a": b"1", b"b": b"2"}, 1)
        txn = store.begin()
        txn.set(b"b", b"written")
        txn.delete(b"a")
        txn.prefetch([b"a", b"b", b"c", b"d", b"d"])
        assert [txn.get(k) for k in (b"a", b"b", b"c", b"d")] == [None, b"written", None, None]
        assert store.gets == 0
        assert txn.get(b"e") is None and store.gets == 1  # not prefetched: read
    finally:
        store.close()


@settings(max_examples=60, deadline=None)
@given(
    stored=st.dictionaries(st.binary(min_size=1, max_size=3), st.binary(max_size=4), max_size=12),
    writes=st.dictionaries(
        st.binary(min_size=1, max_size=3), st.none() | st.binary(max_size=4), max_size=6
    ),
    asked=st.lists(st.binary(min_size=1, max_size=3), max_size=16),
)
def test_prefetch_changes_no_answer(
    tmp_path_factory: pytest.TempPathFactory,
    stored: dict[bytes, bytes],
    writes: dict[bytes, bytes | None],
    asked: list[bytes],
) -> None:
    folder = tmp_path_factory.mktemp("prefetch")
    store = PartitionStore(folder / "p", 0, CHANGELOG)
    try:
        if stored:
            store.write(dict(stored), 1)
        plain, ahead = store.begin(), store.begin()
        for txn in (plain, ahead):
            _apply(txn, writes)
        ahead.prefetch(asked + list(writes))
        for key in asked + list(writes) + list(stored):
            assert ahead.get(key) == plain.get(key)
    finally:
        store.close()


def _apply(txn: StoreTransaction, writes: dict[bytes, bytes | None]) -> None:
    for key, value in writes.items():
        if value is None:
            txn.delete(key)
        else:
            txn.set(key, value)
