"""PartitionStore on a real RocksDB: atomic writes with their changelog offset, explicit close."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streams.state.exceptions import ChangelogOffsetRegressionError, StoreClosedError, StoreError
from streams.state.partition import PartitionStore
from streams.state.store import Store


def open_store(path: Path) -> PartitionStore:
    return PartitionStore(path, 3, "ns.changelog.g.s")


def test_write_persists_values_and_offset_across_reopen(tmp_path: Path) -> None:
    store = open_store(tmp_path / "p")
    assert store.created and store.changelog_offset() is None
    store.write({b"a": b"1", b"b": b"2"}, 7)
    store.write({b"a": None, b"c": b"3"}, 9)
    assert store.scan(b"", b"\xff", 10) == [(b"b", b"2"), (b"c", b"3")]
    store.close()
    again = open_store(tmp_path / "p")
    try:
        assert not again.created
        assert again.changelog_offset() == 9
        assert again.get(b"a") is None and again.get(b"c") == b"3"
    finally:
        again.close()


def test_offset_regression_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    store = open_store(tmp_path / "p")
    try:
        store.write({b"a": b"1"}, 10)
        for offset in (10, 3):
            with pytest.raises(ChangelogOffsetRegressionError, match="not after the stored 10"):
                store.write({b"a": b"stale", b"z": b"new"}, offset)
        assert store.get(b"a") == b"1" and store.get(b"z") is None
        assert store.changelog_offset() == 10
    finally:
        store.close()


def test_a_batch_that_fails_to_build_applies_nothing(tmp_path: Path) -> None:
    store = open_store(tmp_path / "p")
    try:
        store.write({b"a": b"1"}, 1)
        bad: dict[bytes, bytes | None] = {b"b": b"2", b"c": "not bytes"}  # type: ignore[dict-item]
        with pytest.raises(Exception):  # noqa: B017 - rocksdict raises a bare Exception/TypeError
            store.write(bad, 2)
        assert store.get(b"b") is None
        assert store.changelog_offset() == 1
    finally:
        store.close()


def test_the_memtables_have_a_bloom_filter_of_their_keys(tmp_path: Path) -> None:
    """Gets of keys not in the memtable skip its skip list (the options RocksDB applied, as it
    records them in the database's OPTIONS file); reads through it stay exact."""
    store = open_store(tmp_path / "p")
    try:
        store.write({b"k%d" % i: b"v%d" % i for i in range(1_000)}, 1)
        store.flush()
        store.write({b"k%d" % i: b"new" for i in range(0, 1_000, 2)}, 2)  # in the memtable
        values = store.get_many([b"k%d" % i for i in range(1_000)] + [b"absent"])
        assert values == [b"new" if i % 2 == 0 else b"v%d" % i for i in range(1_000)] + [None]
        [options_file] = sorted((tmp_path / "p").glob("OPTIONS-*"))[-1:]
        text = options_file.read_text()
        assert "memtable_whole_key_filtering=true" in text
        assert "memtable_prefix_bloom_size_ratio=0.1" in text
    finally:
        store.close()


def test_meta_key_is_outside_the_data_key_space(tmp_path: Path) -> None:
    store = open_store(tmp_path / "p")
    try:
        store.write({b"changelog_offset": b"user value"}, 5)
        assert store.get(b"changelog_offset") == b"user value"
        assert store.changelog_offset() == 5
        assert store.scan(b"", b"\xff", 10) == [(b"changelog_offset", b"user value")]
    finally:
        store.close()


def test_close_releases_the_database_and_refuses_use(tmp_path: Path) -> None:
    store = open_store(tmp_path / "p")
    store.write({b"a": b"1"}, 1)
    store.scan(b"", b"\xff", 10)  # an iterator must not keep the database open
    store.close()
    store.close()  # idempotent
    assert store.closed
    with pytest.raises(StoreClosedError, match="closed"):
        store.get(b"a")
    reopened = open_store(tmp_path / "p")  # the RocksDB lock was released
    reopened.close()


def test_scan_is_bounded_and_half_open(tmp_path: Path) -> None:
    store = open_store(tmp_path / "p")
    try:
        store.write({bytes([i]): bytes([i]) for i in range(10)}, 1)
        assert [k for k, _ in store.scan(bytes([2]), bytes([6]), 100)] == [
            bytes([i]) for i in (2, 3, 4, 5)
        ]
        assert len(store.scan(b"", b"\xff", 3)) == 3
    finally:
        store.close()


def test_store_maps_partitions_to_folders(tmp_path: Path) -> None:
    store = Store("wheel", "timer", tmp_path, "ns.changelog.timer.wheel")
    try:
        p1 = store.open_partition(1)
        assert store.open_partition(1) is p1
        assert p1.path == tmp_path / "timer" / "wheel" / "1"
        p1.write({b"k": b"v"}, 4)
        with pytest.raises(StoreError, match="no open partition 2"):
            store.partition(2)
        wiped = store.wipe_partition(1)
        assert wiped.created and wiped.get(b"k") is None
        store.close_partition(1)
        assert store.partitions == {}
    finally:
        store.close()


def test_writes_without_the_wal_persist_through_flush_and_close(tmp_path: Path) -> None:
    store = open_store(tmp_path / "p")
    store.write({b"a": b"1", b"b": b"2"}, 3, wal=False)
    store.flush()
    store.write({b"b": None, b"c": b"3"}, 4, wal=False)
    store.close()  # RocksDB flushes memtables that the WAL does not cover on close
    again = open_store(tmp_path / "p")
    try:
        assert again.changelog_offset() == 4
        assert again.scan(b"", b"\xff", 10) == [(b"a", b"1"), (b"c", b"3")]
    finally:
        again.close()


_UNLOGGED_WRITER = """
import os, signal, sys
from pathlib import Path
from streams.state.store import Store
store = Store("s", "g", Path(sys.argv[1]), "t", memtable_budget_bytes=4 << 20)
partition = store.open_partition(0)
for batch in range(int(sys.argv[2])):
    value = b"%d" % batch * 200  # large values: the memtable budget forces flushes
    partition.write({b"%06d-%04d" % (batch, i): value for i in range(500)}, batch, wal=False)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_crash_during_unlogged_writes_keeps_every_record_up_to_the_stored_offset(
    tmp_path: Path,
) -> None:
    """Data and offset skip the WAL (a restore): after SIGKILL, what the offset claims is there.

    Memtables reach disk only through flushes, which the small budget forces while writing;
    the data and offset column families must be flushed together, else the offset could
    survive without its data and a restore would resume past records it never applied.
    """
    batches = 120
    done = subprocess.run(
        [sys.executable, "-c", _UNLOGGED_WRITER, str(tmp_path), str(batches)],
        cwd=Path(__file__).resolve().parents[2],
        check=False,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL
    store = Store("s", "g", tmp_path, "t")
    try:
        partition = store.open_partition(0)
        stored = partition.changelog_offset()
        assert stored is not None, "no flush happened: raise the batches"
        assert stored < batches - 1, "everything was flushed: the crash proved nothing"
        for batch in range(stored + 1):
            prefix = b"%06d-" % batch
            items = partition.scan(prefix, prefix + b"\xff", 1_000)
            assert len(items) == 500, f"batch {batch} <= stored offset {stored} is missing"
    finally:
        store.close()


# Scans between writes: an empty scan remembers the gap up to the next key, and a write
# forgets it, so every scan must still see exactly what is stored.
_keys = st.builds(bytes, st.lists(st.integers(min_value=0, max_value=3), max_size=3))
_scan = st.tuples(st.just("scan"), _keys, _keys, st.integers(min_value=0, max_value=5))
_write = st.tuples(
    st.just("write"),
    st.dictionaries(_keys, st.one_of(st.none(), st.binary(max_size=2)), max_size=4),
)


@settings(max_examples=200, deadline=None)
@example(  # an empty scan, then a write into the gap it learned
    steps=[
        ("scan", b"\x01", b"\x02", 3),
        ("write", {b"\x01\x05": b"x"}),
        ("scan", b"\x01", b"\x02", 3),
    ]
)
@given(steps=st.lists(st.one_of(_scan, _write), max_size=40))
def test_scans_between_writes_match_a_dict_model(
    steps: list[
        tuple[Literal["scan"], bytes, bytes, int]
        | tuple[Literal["write"], dict[bytes, bytes | None]]
    ],
) -> None:
    folder = Path(tempfile.mkdtemp(prefix="partition-gaps-"))
    store = open_store(folder)
    try:
        model: dict[bytes, bytes] = {}
        offset = 0
        for step in steps:
            if step[0] == "write":
                updates = step[1]
                assert isinstance(updates, dict)
                offset += 1
                store.write(updates, offset)
                for key, value in updates.items():
                    if value is None:
                        model.pop(key, None)
                    else:
                        model[key] = value
            else:
                _, start, end, limit = step
                assert isinstance(start, bytes) and isinstance(end, bytes)
                assert isinstance(limit, int)
                expected = sorted((k, v) for k, v in model.items() if start <= k < end)[:limit]
                assert store.scan(start, end, limit) == expected
    finally:
        store.close()
        shutil.rmtree(folder)


def test_an_empty_scan_spares_the_next_scans_of_its_gap_until_a_write(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    iterators: list[tuple[bytes, bytes | None]] = []
    rocksdb_scan = store._scan

    def counting_scan(start: bytes, end: bytes | None, limit: int) -> list[tuple[bytes, bytes]]:
        iterators.append((start, end))
        return rocksdb_scan(start, end, limit)

    store._scan = counting_scan  # type: ignore[method-assign]
    try:
        store.write({b"a": b"1", b"m": b"2"}, 1)
        assert store.scan(b"b", b"c", 10) == []
        assert iterators == [(b"b", b"c"), (b"c", None)]  # the gap reaches the next key
        assert store.scan(b"c", b"m", 10) == []  # inside the gap: no iterator
        assert store.scan(b"b", b"n", 10) == [(b"m", b"2")]  # past it
        assert len(iterators) == 3
        store.write({b"d": b"3"}, 2)  # a write forgets the gap
        assert store.scan(b"c", b"e", 10) == [(b"d", b"3")]
        store.close()
        with pytest.raises(StoreClosedError):
            store.scan(b"c", b"m", 10)
    finally:
        store.close()
