"""StoreTransaction: reads through writes, bounded merged range scans, status, prepare/flush."""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streams.state.exceptions import ChangelogOffsetRegressionError, TransactionStateError
from streams.state.partition import PartitionStore
from streams.state.transaction import StoreTransaction, TransactionStatus

CHANGELOG = "ns.changelog.g.wheel"


def _write(
    txn: StoreTransaction, model: dict[bytes, bytes], key: bytes, value: bytes | None
) -> None:
    """Set (or, for None, delete) ``key`` in the transaction and in its dict model."""
    if value is None:
        txn.delete(key)
        model.pop(key, None)
    else:
        txn.set(key, value)
        model[key] = value


def _model_range(
    model: dict[bytes, bytes], start: bytes, end: bytes, limit: int
) -> list[tuple[bytes, bytes]]:
    """What ``iter_range`` must answer: the model's items in [start, end), in order."""
    return sorted((k, v) for k, v in model.items() if start <= k < end)[:limit]


@contextmanager
def begun_on(stored: dict[bytes, bytes]) -> Iterator[StoreTransaction]:
    """A transaction on a fresh on-disk partition holding ``stored`` (hypothesis tests cannot
    take the function-scoped ``store`` fixture); the partition is removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="txn-model-"))
    partition = PartitionStore(folder / "0", 0, CHANGELOG)
    try:
        partition.write(dict(stored), 0)
        yield partition.begin()
    finally:
        partition.close()
        shutil.rmtree(folder)


class FakeChangelog:
    """Records what prepare() would produce."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None, bytes | None, int | None]] = []

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, partition: int | None = None
    ) -> None:
        self.records.append((topic, key, value, partition))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[PartitionStore]:
    partition = PartitionStore(tmp_path / "2", 2, CHANGELOG)
    yield partition
    partition.close()


def test_reads_see_own_writes_and_deletes(store: PartitionStore) -> None:
    store.write({b"a": b"1", b"b": b"2"}, 0)
    txn = store.begin()
    txn.set(b"a", b"10")
    txn.delete(b"b")
    txn.set(b"c", b"3")
    assert (txn.get(b"a"), txn.get(b"b"), txn.get(b"c")) == (b"10", None, b"3")
    assert store.get(b"a") == b"1" and store.get(b"b") == b"2"  # nothing written yet


def test_iter_range_merges_writes_in_order_and_respects_limit(store: PartitionStore) -> None:
    store.write({b"b": b"B", b"d": b"D", b"f": b"F", b"h": b"H"}, 0)
    txn = store.begin()
    txn.set(b"a", b"a")
    txn.delete(b"b")
    txn.set(b"d", b"d2")
    txn.set(b"e", b"e")
    txn.delete(b"zz")  # a delete of a missing key hides nothing
    assert txn.iter_range(b"a", b"g", 10) == [
        (b"a", b"a"),
        (b"d", b"d2"),
        (b"e", b"e"),
        (b"f", b"F"),
    ]
    assert txn.iter_range(b"b", b"z", 2) == [(b"d", b"d2"), (b"e", b"e")]
    assert txn.iter_range(b"g", b"z", 10) == [(b"h", b"H")]


def test_iter_range_fills_the_limit_past_deleted_stored_keys(store: PartitionStore) -> None:
    store.write({b"a": b"A", b"b": b"B", b"c": b"C", b"d": b"D"}, 0)
    txn = store.begin()
    txn.delete(b"a")
    txn.delete(b"b")
    assert txn.iter_range(b"", b"z", 2) == [(b"c", b"C"), (b"d", b"D")]


def test_prepare_produces_dirty_keys_to_the_same_partition_then_flush_writes(
    store: PartitionStore,
) -> None:
    store.write({b"old": b"x"}, 4)
    txn = store.begin()
    txn.set(b"k", b"v")
    txn.delete(b"old")
    changelog = FakeChangelog()
    txn.prepare(changelog)
    assert txn.status.name == "PREPARED"
    assert sorted(changelog.records, key=str) == sorted(
        [(CHANGELOG, b"k", b"v", 2), (CHANGELOG, b"old", None, 2)], key=str
    )
    assert txn.get(b"k") == b"v"  # readable while prepared
    with pytest.raises(TransactionStateError, match="PREPARED"):
        txn.set(b"late", b"write")
    txn.flush(11)
    assert txn.status is TransactionStatus.COMMITTED
    assert store.get(b"k") == b"v" and store.get(b"old") is None
    assert store.changelog_offset() == 11


def test_flush_refuses_offset_regression_and_fails(store: PartitionStore) -> None:
    store.write({b"a": b"1"}, 20)
    txn = store.begin()
    txn.set(b"a", b"2")
    txn.prepare(FakeChangelog())
    with pytest.raises(ChangelogOffsetRegressionError):
        txn.flush(19)
    assert txn.status is TransactionStatus.FAILED
    assert store.get(b"a") == b"1"
    with pytest.raises(TransactionStateError, match="FAILED"):
        txn.get(b"a")


def test_dirty_flush_without_changelog_offset_fails(store: PartitionStore) -> None:
    txn = store.begin()
    txn.set(b"a", b"1")
    txn.prepare(FakeChangelog())
    with pytest.raises(TransactionStateError, match="no delivered changelog offset"):
        txn.flush(None)
    assert txn.status is TransactionStatus.FAILED and store.get(b"a") is None


def test_clean_transaction_commits_without_offset(store: PartitionStore) -> None:
    txn = store.begin()
    assert txn.get(b"a") is None and not txn.dirty
    txn.prepare(FakeChangelog())
    txn.flush(None)
    assert txn.status is TransactionStatus.COMMITTED and store.changelog_offset() is None


def test_discard_drops_writes_and_refuses_use(store: PartitionStore) -> None:
    txn = store.begin()
    txn.set(b"a", b"1")
    txn.discard()
    assert txn.status is TransactionStatus.FAILED and not txn.dirty
    with pytest.raises(TransactionStateError):
        txn.prepare(FakeChangelog())


def test_non_bytes_write_fails_the_transaction(store: PartitionStore) -> None:
    txn = store.begin()
    with pytest.raises(TypeError, match="bytes"):
        txn.set(b"a", "text")  # type: ignore[arg-type]
    assert txn.status is TransactionStatus.FAILED


# A small key space, so writes and deletes often hit stored keys and range bounds.
keys = st.builds(bytes, st.lists(st.integers(min_value=0, max_value=3), max_size=3))
operations = st.lists(st.tuples(keys, st.one_of(st.none(), st.binary(max_size=4))), max_size=40)


@settings(max_examples=100, deadline=None)
@example(stored={b"a": b"", b"b": b"", b"c": b""}, ops=[(b"a", None)], start=b"", end=b"z", limit=2)
@given(
    stored=st.dictionaries(keys, st.binary(max_size=4), max_size=40),
    ops=operations,
    start=keys,
    end=keys,
    limit=st.integers(min_value=0, max_value=12),
)
def test_iter_range_matches_a_dict_model(
    stored: dict[bytes, bytes],
    ops: list[tuple[bytes, bytes | None]],
    start: bytes,
    end: bytes,
    limit: int,
) -> None:
    with begun_on(stored) as txn:
        model = dict(stored)
        for key, value in ops:
            _write(txn, model, key, value)
        assert txn.iter_range(start, end, limit) == _model_range(model, start, end, limit)
        for key in {k for k, _ in ops} | set(stored):
            assert txn.get(key) == model.get(key)


# Interleaved writes and range scans: a scan sorts the keys written since the previous one
# into those already in order, so later writes (new keys, rewrites, deletes of keys already
# written) must show in every later scan.
scan = st.tuples(st.just("scan"), keys, keys, st.integers(min_value=0, max_value=12))
write = st.tuples(st.just("write"), keys, st.one_of(st.none(), st.binary(max_size=4)))


@settings(max_examples=200, deadline=None)
@example(
    stored={b"\x01": b"x"},
    steps=[("scan", b"", b"\x03", 5), ("write", b"\x00", None), ("scan", b"", b"\x03", 5)],
)
@example(  # a key written after a scan sorts between keys of the earlier sorted run
    stored={},
    steps=[
        *[("write", key, b"v") for key in (b"\x00", b"\x02", b"\x03", b"\x03\x00", b"\x03\x01")],
        ("scan", b"", b"\x04", 12),
        ("write", b"\x01", b"w"),
        ("scan", b"", b"\x04", 12),
    ],
)
@given(
    stored=st.dictionaries(keys, st.binary(max_size=4), max_size=30),
    steps=st.lists(st.one_of(scan, write), max_size=60),
)
def test_interleaved_writes_and_scans_match_a_dict_model(
    stored: dict[bytes, bytes],
    steps: list[
        tuple[Literal["write"], bytes, bytes | None] | tuple[Literal["scan"], bytes, bytes, int]
    ],
) -> None:
    with begun_on(stored) as txn:
        model = dict(stored)
        for step in steps:
            if step[0] == "write":
                _, key, value = step
                _write(txn, model, key, value)
            else:
                _, start, end, limit = step
                assert txn.iter_range(start, end, limit) == _model_range(model, start, end, limit)
        for key in set(model) | set(stored):
            assert txn.get(key) == model.get(key)


def test_discard_releases_the_sorted_keys(store: PartitionStore) -> None:
    txn = store.begin()
    txn.delete(b"b")
    txn.set(b"c", b"C")
    assert txn.iter_range(b"", b"z", 10) == [(b"c", b"C")]
    txn.set(b"a", b"A")
    txn.discard()
    assert (txn._runs, txn._new_keys) == ([], [])  # a backlog's keys are not kept


def test_many_scans_between_many_writes_match_a_dict_model(store: PartitionStore) -> None:
    """Thousands of keys, so that sorted runs of many sizes form and merge."""
    rng = random.Random(4)
    stored = {rng.randbytes(3): b"s" for _ in range(500)}
    store.write(stored, 0)
    txn = store.begin()
    model = dict(stored)
    for step in range(3000):
        key = rng.randbytes(rng.choice((2, 3)))
        if rng.random() < 0.3:
            txn.delete(key)
            model.pop(key, None)
        else:
            txn.set(key, b"%d" % step)
            model[key] = b"%d" % step
        if step % rng.choice((1, 7, 50)) == 0:
            start, end = sorted((rng.randbytes(2), rng.randbytes(2)))
            limit = rng.choice((1, 10, 1000))
            expected = sorted((k, v) for k, v in model.items() if start <= k < end)[:limit]
            assert txn.iter_range(start, end, limit) == expected
    assert txn.iter_range(b"", b"\xff" * 4, 10_000) == sorted(model.items())


def test_a_key_read_twice_is_read_from_the_store_once(store: PartitionStore) -> None:
    store.write({b"a": b"1"}, 0)
    txn = store.begin()
    reads: list[bytes] = []
    stored_get = store.get

    def counting_get(key: bytes) -> bytes | None:
        reads.append(key)
        return stored_get(key)

    store.get = counting_get  # type: ignore[method-assign]
    assert [txn.get(b"a"), txn.get(b"a"), txn.get(b"b"), txn.get(b"b")] == [b"1", b"1", None, None]
    assert reads == [b"a", b"b"]
    txn.set(b"a", b"2")  # a write after a read: the write wins
    txn.delete(b"b")
    assert (txn.get(b"a"), txn.get(b"b")) == (b"2", None)
    txn.prepare(FakeChangelog())
    txn.flush(1)
    later = store.begin()  # a later transaction reads what the earlier one wrote
    assert (later.get(b"a"), later.get(b"b")) == (b"2", None)
