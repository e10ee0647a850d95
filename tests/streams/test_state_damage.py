"""Damaged, deleted, locked and full store directories (streams/state/damage.py), on a real
RocksDB: a damaged store is moved aside and opened empty for its restore, never read half;
a full disk and a held lock stop with errors that say what to do, moving nothing."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from streams.state.damage import DAMAGE_MARK
from streams.state.exceptions import (
    StoreCorruptedError,
    StoreDiskFullError,
    StoreError,
    StoreInUseError,
)
from streams.state.partition import PartitionStore
from streams.state.store import Store
from tests.rocksdb_holder import held_open
from tests.small_filesystem import fill_up, small_filesystem

from .store_damage_kit import DAMAGES, FOUND_AT_OPEN, damage

CHANGELOG = "ns.changelog.g.s"
KEYS_PER_BATCH, BATCHES = 2_000, 10


def key(batch: int, n: int) -> bytes:
    return f"k{batch:03d}-{n:06d}".encode()


def filled_store(state_dir: Path) -> Store:
    """A store whose partition 0 holds BATCHES x KEYS_PER_BATCH keys in table files, closed."""
    store = Store("s", "g", state_dir, CHANGELOG)
    partition = store.open_partition(0)
    value = os.urandom(64)
    for batch in range(BATCHES):
        partition.write({key(batch, n): value for n in range(KEYS_PER_BATCH)}, batch)
    partition.flush()
    store.close()
    return store


def set_aside_dirs(store: Store) -> list[Path]:
    return sorted(store.path.glob("0.damaged-*"))


@pytest.mark.parametrize("how", FOUND_AT_OPEN)
def test_damage_found_at_open_moves_the_directory_aside_and_opens_it_empty(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = filled_store(tmp_path)
    touched = damage(store.path / "0", how)
    assert touched
    with caplog.at_level(logging.ERROR, logger="streams.state.damage"):
        partition = store.open_partition(0)
    try:
        # Empty and new: the restore reads its changelog from the beginning.
        assert partition.created and partition.changelog_offset() is None
        assert partition.scan(b"", b"\xff", 10) == []
        (aside,) = set_aside_dirs(store)
        assert (aside / "IDENTITY").exists()  # the damaged files are kept, moved
        (line,) = [r.getMessage() for r in caplog.records]
        assert str(store.path / "0") in line and str(aside) in line
        assert "partition 0 of store s" in line and "rebuilding" in line
        partition.write({b"a": b"1"}, 0)
    finally:
        store.close()


def test_a_bad_data_block_fails_every_read_marks_the_store_and_the_next_open_rebuilds(
    tmp_path: Path,
) -> None:
    store = filled_store(tmp_path)
    damage(store.path / "0", "sst-garbage")
    partition = store.open_partition(0)  # RocksDB reads data blocks only when asked
    assert not partition.created
    # A full scan would otherwise end silently at the bad block, as if the range ended.
    with pytest.raises(StoreCorruptedError, match=r"is damaged .*restart the service"):
        partition.scan(b"", b"\xff", BATCHES * KEYS_PER_BATCH + 1)
    assert (store.path / "0" / DAMAGE_MARK).read_text().startswith("Corruption")
    # Every later use raises the same error, none answers.
    with pytest.raises(StoreCorruptedError):
        partition.get(key(0, 0))
    with pytest.raises(StoreCorruptedError):
        partition.write({b"a": b"1"}, 99)
    store.close()  # the service stops: closing a failed store does not raise
    again = store.open_partition(0)
    try:
        assert again.created and again.get(key(0, 0)) is None
        assert len(set_aside_dirs(store)) == 1
    finally:
        store.close()


def test_gets_and_short_scans_that_meet_a_bad_block_raise(tmp_path: Path) -> None:
    store = filled_store(tmp_path)
    damage(store.path / "0", "sst-garbage")
    keys = [key(b, n) for b in range(BATCHES) for n in range(0, KEYS_PER_BATCH, 50)]
    for read in ("get", "get_many", "scan"):
        partition = store.open_partition(0)
        found = 0
        with pytest.raises(StoreCorruptedError):
            if read == "get_many":
                found = len(partition.get_many(keys))
            for k in keys:
                if read == "get":
                    partition.get(k)
                else:  # short scans: a limit above what each range holds
                    found += len(partition.scan(k, k + b"\xff", 100))
        store.close()
        (store.path / "0" / DAMAGE_MARK).unlink()  # the same damage, for the next kind
        assert found < len(keys), read


def test_scans_of_a_healthy_store_pass_the_end_check(tmp_path: Path) -> None:
    store = filled_store(tmp_path)
    partition = store.open_partition(0)
    try:
        assert len(partition.scan(b"", b"\xff", 10**6)) == BATCHES * KEYS_PER_BATCH
        assert len(partition.scan(key(3, 0), key(3, 100), 1_000)) == 100
        assert partition.scan(b"zz", b"zzz", 10) == []
    finally:
        store.close()
    assert not set_aside_dirs(store)


def test_a_deleted_directory_opens_empty_without_moving_anything(tmp_path: Path) -> None:
    store = filled_store(tmp_path)
    for file in (store.path / "0").iterdir():
        file.unlink()
    (store.path / "0").rmdir()
    partition = store.open_partition(0)
    try:
        assert partition.created and not set_aside_dirs(store)
    finally:
        store.close()


def test_a_store_another_process_holds_is_refused_and_left_alone(tmp_path: Path) -> None:
    store = filled_store(tmp_path)
    with (
        held_open(store.path / "0"),
        pytest.raises(StoreInUseError, match="in use by another process"),
    ):
        store.open_partition(0)
    assert not set_aside_dirs(store)
    partition = store.open_partition(0)
    try:
        assert partition.get(key(0, 0)) is not None
    finally:
        store.close()


def test_errors_that_are_not_rocksdbs_pass_through(tmp_path: Path) -> None:
    partition = PartitionStore(tmp_path / "p", 0, CHANGELOG)
    try:
        with pytest.raises(KeyError, match="raw mode only support bytes"):  # rocksdict's
            partition.get_many([b"a", "not bytes"])  # type: ignore[list-item]
        partition.write({b"a": b"1"}, 1)  # still usable
        assert partition.get(b"a") == b"1"
    finally:
        partition.close()


def test_a_full_disk_stops_writes_with_what_to_do_and_the_store_reopens_after(
    tmp_path: Path,
) -> None:
    with small_filesystem(tmp_path / "disk", 8) as disk:
        store = Store("s", "g", disk, CHANGELOG)
        partition = store.open_partition(0)
        partition.write({b"before": b"1"}, 1)
        filler = fill_up(disk)
        with pytest.raises(StoreDiskFullError, match=r"is full .*Free space") as raised:
            for offset in range(2, 10_000):  # the WAL's last page may still take a few
                partition.write({f"k{offset}".encode(): os.urandom(512)}, offset)
        assert isinstance(raised.value, StoreError)
        with pytest.raises(StoreDiskFullError):
            partition.get(b"before")
        store.close()  # RocksDB's close fails too on the full disk: logged, not raised
        assert not (disk / "g" / "s" / "0" / DAMAGE_MARK).exists()
        filler.unlink()
        again = store.open_partition(0)
        try:
            assert not again.created and again.get(b"before") == b"1"
            last = again.changelog_offset()
            assert last is not None and last >= 1  # what was written before the error
            again.write({b"after": b"2"}, last + 1)
        finally:
            store.close()
        assert not set_aside_dirs(store)


def test_every_damage_kind_is_covered() -> None:
    assert set(DAMAGES) - set(FOUND_AT_OPEN) == {"sst-garbage"}
