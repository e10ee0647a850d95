"""StoreTransaction.delete_many: the same as ``delete`` of each key in order, in every case."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.state.partition import PartitionStore
from streams.state.transaction import StoreTransaction

CHANGELOG = "ns.changelog.g.delete-many"
ALL = [b"a", b"b", b"c", b"d", b"e", b"f"]
KEYS = st.sampled_from(ALL)
VALUES = st.sampled_from([b"v1", b"v2"])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.lists(st.tuples(KEYS, VALUES), max_size=3)),
        st.tuples(st.just("delete_many"), st.lists(KEYS, max_size=5)),
        st.tuples(st.just("local"), st.lists(st.tuples(KEYS, st.none() | VALUES), max_size=3)),
    ),
    max_size=10,
)


class FakeChangelog:
    """Records what prepare() produces."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes | None, bytes | None]] = []

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, partition: int | None = None
    ) -> None:
        self.records.append((key, value))


@contextmanager
def two_partitions(stored: dict[bytes, bytes]) -> Iterator[tuple[PartitionStore, PartitionStore]]:
    folder = Path(tempfile.mkdtemp(prefix="txn-delete-many-"))
    partitions = [PartitionStore(folder / str(i), i, CHANGELOG) for i in range(2)]
    try:
        for partition in partitions:
            if stored:
                partition.write(dict(stored), 10)
        yield partitions[0], partitions[1]
    finally:
        for partition in partitions:
            partition.close()
        shutil.rmtree(folder)


def _apply(txn: StoreTransaction, kind: str, items: list[Any], many: bool) -> None:
    if kind == "set":
        for key, value in items:
            txn.set(key, value)
    elif kind == "local":
        txn.set_local_many(items)
    elif many:
        txn.delete_many(items)
    else:
        for key in items:
            txn.delete(key)


@settings(max_examples=200, deadline=None)
@given(stored=st.dictionaries(KEYS, VALUES, max_size=6), ops=OPS)
def test_delete_many_is_a_delete_of_each_key_in_order(
    stored: dict[bytes, bytes],
    ops: list[tuple[str, list]],  # type: ignore[type-arg]
) -> None:
    with two_partitions(stored) as (bulk_partition, single_partition):
        bulk, single = bulk_partition.begin(), single_partition.begin()
        for kind, items in ops:
            _apply(bulk, kind, items, many=True)
            _apply(single, kind, items, many=False)
            assert bulk.iter_range(b"", b"\xff", 100) == single.iter_range(b"", b"\xff", 100)
            assert bulk.iter_range(b"b", b"e", 2) == single.iter_range(b"b", b"e", 2)
            assert [bulk.get(k) for k in ALL] == [single.get(k) for k in ALL]
        bulk_changelog, single_changelog = FakeChangelog(), FakeChangelog()
        bulk.prepare(bulk_changelog)
        single.prepare(single_changelog)
        assert bulk_changelog.records == single_changelog.records
        bulk.flush(11)
        single.flush(11)
        everything = (b"", b"\xff", 100)
        assert bulk_partition.scan(*everything) == single_partition.scan(*everything)
        assert bulk_partition.changelog_offset() == single_partition.changelog_offset()


def test_delete_many_of_new_keys_produces_tombstones_in_order(tmp_path: Path) -> None:
    partition = PartitionStore(tmp_path / "0", 0, CHANGELOG)
    try:
        partition.write({b"k1": b"x", b"k3": b"y"}, 5)
        txn = partition.begin()
        txn.set(b"k0", b"z")
        txn.delete_many([b"k3", b"k1", b"k3", b"k2"])
        assert txn.iter_range(b"", b"\xff", 10) == [(b"k0", b"z")]
        changelog = FakeChangelog()
        txn.prepare(changelog)
        assert changelog.records == [(b"k0", b"z"), (b"k3", None), (b"k1", None), (b"k2", None)]
        txn.flush(6)
        assert partition.scan(b"", b"\xff", 10) == [(b"k0", b"z")]
    finally:
        partition.close()
