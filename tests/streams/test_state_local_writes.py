"""StoreTransaction.set_local_many: writes the store gets and the changelog does not.

Real RocksDB on disk; the changelog is a recording fake (what ``prepare`` would produce).
The rule under test: the changelog gets each key's last ``set``/``delete`` of the
transaction, in the key's first-write order; the store gets each key's last write.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.state.exceptions import TransactionStateError
from streams.state.partition import PartitionStore

CHANGELOG = "ns.changelog.g.local"


class FakeChangelog:
    """Records what prepare() produces, in one call per partition like the real producer."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[bytes, bytes | None]]] = []

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, partition: int | None = None
    ) -> None:
        raise AssertionError("produce_changelog is used when present")

    def produce_changelog(
        self, topic: str, partition: int, items: list[tuple[bytes, bytes | None]]
    ) -> None:
        self.calls.append(list(items))

    @property
    def records(self) -> list[tuple[bytes, bytes | None]]:
        return [item for call in self.calls for item in call]


@contextmanager
def partition_on_disk(stored: dict[bytes, bytes]) -> Iterator[PartitionStore]:
    folder = Path(tempfile.mkdtemp(prefix="txn-local-"))
    partition = PartitionStore(folder / "0", 0, CHANGELOG)
    try:
        if stored:
            partition.write(dict(stored), 10)
        yield partition
    finally:
        partition.close()
        shutil.rmtree(folder)


def contents(partition: PartitionStore) -> dict[bytes, bytes]:
    return dict(partition.scan(b"", b"\xff" * 4, 10**6))


def test_local_writes_are_read_and_flushed_but_not_produced() -> None:
    with partition_on_disk({b"old": b"0"}) as partition:
        txn = partition.begin()
        txn.set_local_many([(b"a", b"1"), (b"b", b"2"), (b"old", None)])
        txn.set(b"index", b"ab")
        assert txn.get(b"a") == b"1" and txn.get(b"old") is None
        assert txn.iter_range(b"", b"z", 10) == [(b"a", b"1"), (b"b", b"2"), (b"index", b"ab")]
        changelog = FakeChangelog()
        txn.prepare(changelog)
        assert changelog.calls == [[(b"index", b"ab")]]
        txn.flush(11)
        assert contents(partition) == {b"a": b"1", b"b": b"2", b"index": b"ab"}
        assert partition.changelog_offset() == 11


def test_a_transaction_with_only_local_writes_keeps_the_stored_offset() -> None:
    with partition_on_disk({b"a": b"1"}) as partition:
        txn = partition.begin()
        txn.set_local_many([(b"a", None), (b"c", b"3")])
        changelog = FakeChangelog()
        txn.prepare(changelog)
        assert changelog.records == []
        txn.flush(7)  # a stale offset of an earlier transaction: not used, not refused
        assert contents(partition) == {b"c": b"3"}
        assert partition.changelog_offset() == 10


def test_a_transaction_that_produced_needs_its_offset() -> None:
    with partition_on_disk({}) as partition:
        txn = partition.begin()
        txn.set_local_many([(b"a", b"1")])
        txn.delete(b"a")  # changelogged again
        txn.prepare(FakeChangelog())
        with pytest.raises(TransactionStateError):
            txn.flush(None)


def test_set_and_delete_after_a_local_write_are_changelogged() -> None:
    with partition_on_disk({}) as partition:
        txn = partition.begin()
        txn.set_local_many([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])
        txn.set(b"a", b"10")
        txn.delete(b"b")
        changelog = FakeChangelog()
        txn.prepare(changelog)
        assert changelog.records == [(b"a", b"10"), (b"b", None)]
        txn.flush(0)
        assert contents(partition) == {b"a": b"10", b"c": b"3"}


def test_a_local_write_after_a_set_keeps_the_set_on_the_changelog() -> None:
    with partition_on_disk({}) as partition:
        txn = partition.begin()
        txn.delete(b"x")  # e.g. a per-id record's tombstone
        txn.set(b"y", b"1")
        txn.set_local_many([(b"x", b"new"), (b"y", b"2"), (b"z", b"3")])
        txn.set(b"index", b"xyz")
        changelog = FakeChangelog()
        txn.prepare(changelog)
        assert changelog.records == [(b"x", None), (b"y", b"1"), (b"index", b"xyz")]
        assert txn.get(b"x") == b"new"
        txn.flush(2)
        assert contents(partition) == {b"index": b"xyz", b"x": b"new", b"y": b"2", b"z": b"3"}


def test_local_writes_of_a_discarded_transaction_are_dropped() -> None:
    with partition_on_disk({b"a": b"1"}) as partition:
        txn = partition.begin()
        txn.set_local_many([(b"a", None)])
        txn.discard()
        assert contents(partition) == {b"a": b"1"}
        with pytest.raises(TransactionStateError):
            txn.set_local_many([(b"b", b"2")])


def test_local_writes_refuse_what_is_not_bytes() -> None:
    with partition_on_disk({}) as partition:
        txn = partition.begin()
        with pytest.raises(TypeError):
            txn.set_local_many([(b"a", "text")])  # type: ignore[list-item]
        with pytest.raises(TransactionStateError):
            txn.set(b"a", b"1")  # the transaction failed


KEYS = st.sampled_from([b"k%d" % i for i in range(6)])
VALUES = st.one_of(st.none(), st.sampled_from([b"v1", b"v2", b"v3"]))
OPS = st.lists(
    st.tuples(
        st.sampled_from(["set", "delete", "local"]),
        st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=4),
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(
    stored=st.dictionaries(KEYS, st.sampled_from([b"s1", b"s2"]), max_size=6),
    ops=OPS,
)
def test_local_writes_follow_the_rule_against_a_model(
    stored: dict[bytes, bytes], ops: list[tuple[str, list[tuple[bytes, bytes | None]]]]
) -> None:
    store_model = dict[bytes, bytes | None](stored)
    changelog_model: dict[bytes, bytes | None] = {}  # last set/delete of each key
    first_write: list[bytes] = []
    with partition_on_disk(stored) as partition:
        txn = partition.begin()
        for kind, items in ops:
            for key, _ in items:
                if key not in first_write:
                    first_write.append(key)
            if kind == "local":
                txn.set_local_many(items)
                store_model.update(items)
                continue
            for key, value in items:
                if kind == "delete" or value is None:
                    txn.delete(key)
                    value = None
                else:
                    txn.set(key, value)
                store_model[key] = value
                changelog_model[key] = value
            live = {k: v for k, v in store_model.items() if v is not None}
            assert txn.iter_range(b"", b"\xff", 100) == sorted(live.items())
            assert all(txn.get(k) == store_model.get(k) for k in first_write)
        changelog = FakeChangelog()
        txn.prepare(changelog)
        assert changelog.records == [
            (k, changelog_model[k]) for k in first_write if k in changelog_model
        ]
        txn.flush(11)
        assert contents(partition) == {k: v for k, v in store_model.items() if v is not None}
        assert partition.changelog_offset() == (11 if changelog_model else (10 if stored else None))
