"""Expiry of the executor's dedup entries: real RocksDB on disk, a clock the test moves.

The changelog side uses a recording producer here (pure store logic); the round trip
through a real changelog topic and a restore is in ``test_dedup_expiry_kafka.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from services.executor.dedup import (
    DEFAULT_RETENTION_MS,
    DEFAULT_SWEEP_MIN_IDS,
    DedupEntry,
    DedupStore,
    Progress,
    index_key,
    required_retention_ms,
    written_at_ms,
)
from services.executor.settings import ExecutorSettings
from streams.state.store import Store
from streams.topics import DUE_RETENTION_MS, DUE_SEGMENT_MS
from tests.services.executor.support import RecordingProducer, SettableClock

CHANGELOG = "ns.changelog.g.dedup"
PARTITION = 3
RETENTION_MS = 10_000
T0 = 1_700_000_000_000
DONE = DedupEntry(Progress.SUCCEEDED, 1, 0)


class Harness:
    """One dedup store with expiry, its clock, and the changelog records it produced."""

    def __init__(
        self,
        tmp_path: Path,
        producer: RecordingProducer | None = None,
        sweep_min_ids: int = DEFAULT_SWEEP_MIN_IDS,
    ) -> None:
        self.clock = SettableClock(T0)
        self.producer = producer or RecordingProducer()  # one per store: offsets go on
        self.dedup = DedupStore(
            "g",
            tmp_path,
            CHANGELOG,
            retention_ms=RETENTION_MS,
            clock_ms=self.clock,
            sweep_min_ids=sweep_min_ids,
        )
        self.dedup.store.open_partition(PARTITION)

    def commit(self, *execution_ids: str, entry: DedupEntry = DONE) -> None:
        for execution_id in execution_ids:
            self.dedup.record(PARTITION, execution_id, entry)
        self.dedup.prepare(self.producer)  # type: ignore[arg-type]
        self.dedup.flush(self.producer)  # type: ignore[arg-type]

    def present(self, execution_ids: list[str]) -> list[str]:
        return [e for e in execution_ids if self.dedup.lookup(PARTITION, e) is not None]

    def stored_keys(self) -> list[bytes]:
        return [k for k, _ in self.dedup.store.partition(PARTITION).scan(b"", b"\xff", 10**6)]

    def index_keys(self) -> list[bytes]:
        return [k for k in self.stored_keys() if k.startswith(b"\x00t")]

    def tombstones(self) -> set[bytes]:
        """Keys whose last changelog record is a delete."""
        last: dict[bytes | None, bytes | None] = {}
        for _, key, value, _ in self.producer.records:
            last[key] = value
        return {k for k, v in last.items() if v is None and k is not None}


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path)
    yield h
    h.dedup.close()


def ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{i}@{T0}" for i in range(n)]


def test_entries_past_retention_are_swept_and_fresh_ones_stay(harness: Harness) -> None:
    old, fresh = ids("old", 30), ids("fresh", 30)
    harness.commit(*old)
    harness.clock.now_ms = T0 + RETENTION_MS // 2
    harness.commit(*fresh)
    harness.clock.now_ms = T0 + RETENTION_MS  # old ones are exactly RETENTION_MS old
    harness.commit("trigger@1")
    assert harness.present(old) == [] and harness.present(fresh) == fresh
    assert {e.encode() for e in old} <= harness.tombstones()  # deletes reach the changelog
    assert len(harness.index_keys()) == 2  # fresh's and trigger's; old's index is deleted
    harness.clock.now_ms = T0 + RETENTION_MS + RETENTION_MS // 2 - 1
    harness.commit()
    assert harness.present(fresh) == fresh  # one ms short of its retention
    harness.clock.now_ms += 1
    harness.commit()
    assert harness.present(fresh) == [] and harness.present(["trigger@1"]) == ["trigger@1"]


def test_nothing_is_deleted_before_its_retention(harness: Harness) -> None:
    execution_ids = ids("job", 50)
    for step in range(50):
        harness.clock.now_ms = T0 + step * 100
        harness.commit(execution_ids[step])
    harness.clock.now_ms = T0 + RETENTION_MS - 1  # the first is 1 ms short of it
    harness.commit()
    assert harness.present(execution_ids) == execution_ids
    for step in range(50):
        harness.clock.now_ms = T0 + step * 100 + RETENTION_MS
        harness.commit()
        assert harness.present(execution_ids) == execution_ids[step + 1 :]


def test_the_sweep_is_bounded_and_keeps_pace_with_writes(tmp_path: Path) -> None:
    h = Harness(tmp_path, sweep_min_ids=10)
    old = ids("old", 35)
    h.commit(*old)
    h.clock.now_ms = T0 + RETENTION_MS
    before = len(h.producer.records)
    h.commit()  # no writes: at most sweep_min_ids ids visited
    assert len(h.present(old)) == 25
    assert len(h.producer.records) - before == 10  # ten tombstones, the index record stays
    h.commit()
    h.commit()
    assert len(h.present(old)) == 5
    h.commit()  # the last five, then the index record itself
    assert h.present(old) == [] and h.index_keys() == []
    # A commit that writes n entries may sweep 10 + 2n ids: removal keeps up with writes.
    h.commit(*ids("burst", 40))
    h.clock.now_ms += RETENTION_MS
    h.commit(*ids("next", 20))  # budget 10 + 40 = 50 >= the 40 expired
    assert h.present(ids("burst", 40)) == []
    h.dedup.close()


def test_rewriting_an_entry_moves_its_expiry(harness: Harness) -> None:
    harness.commit("job@1", entry=DedupEntry(Progress.RETRY_SCHEDULED, 1, 0))
    harness.clock.now_ms = T0 + RETENTION_MS - 1
    harness.commit("job@1", entry=DedupEntry(Progress.SUCCEEDED, 2, 0))
    harness.clock.now_ms = T0 + RETENTION_MS + 1
    harness.commit()  # the first write's index record goes, the rewritten entry stays
    assert harness.dedup.lookup(PARTITION, "job@1") == DedupEntry(Progress.SUCCEEDED, 2, 0)
    assert harness.index_keys() == [index_key(T0 + RETENTION_MS - 1, 0)]
    harness.clock.now_ms = T0 + 2 * RETENTION_MS - 1
    harness.commit()
    assert harness.present(["job@1"]) == [] and harness.index_keys() == []


def test_entries_of_the_previous_format_read_and_then_expire(tmp_path: Path) -> None:
    legacy = {f"legacy-{i}@1": DedupEntry(Progress.DEAD_LETTER, 3, i) for i in range(25)}
    old_version = DedupStore("g", tmp_path, CHANGELOG)  # no retention: the old format
    old_version.store.open_partition(PARTITION)
    for execution_id, entry in legacy.items():
        old_version.record(PARTITION, execution_id, entry)
    producer = RecordingProducer()
    old_version.prepare(producer)  # type: ignore[arg-type]
    old_version.flush(producer)  # type: ignore[arg-type]
    old_version.close()
    assert {len(r[2] or b"") for r in producer.records} == {13}

    h = Harness(tmp_path, producer, sweep_min_ids=10)
    assert all(h.dedup.lookup(PARTITION, e) == entry for e, entry in legacy.items())
    h.commit("new@1")  # budget 12: indexes the first 12 old entries as written now
    for _ in range(2):
        h.clock.now_ms += 1
        h.commit()
    assert h.dedup.store.partition(PARTITION).get(b"\x00format") == b"\x02"
    stored = dict(h.dedup.store.partition(PARTITION).scan(b"\x01", b"\xff", 100))
    assert all(written_at_ms(raw) is not None for raw in stored.values())
    assert all(h.dedup.lookup(PARTITION, e) == entry for e, entry in legacy.items())
    h.clock.now_ms = T0 + 2 + RETENTION_MS
    for _ in range(3):
        h.commit()
    assert h.present(list(legacy)) == [] and h.present(["new@1"]) == []
    h.dedup.close()


def test_a_commit_of_many_entries_is_indexed_in_chunks(harness: Harness) -> None:
    many = ids("herd", 2_500)
    harness.commit(*many)
    assert len(harness.index_keys()) == 3  # 1,000 ids per index record
    assert max(len(r[2] or b"") for r in harness.producer.records) < 64_000
    harness.clock.now_ms += RETENTION_MS
    harness.commit(*ids("next", 1_000))  # budget 1,000 + 2 x 1,000
    assert harness.present(many) == []


def test_an_aborted_commit_restarts_the_sweep_where_it_was(tmp_path: Path) -> None:
    h = Harness(tmp_path, sweep_min_ids=10)
    old = ids("old", 30)
    h.commit(*old)
    h.clock.now_ms += RETENTION_MS
    h.commit()
    h.dedup.record(PARTITION, "lost@1", DONE)
    h.dedup.prepare(h.producer)  # type: ignore[arg-type]
    h.dedup.discard()  # the Kafka transaction aborted: its ten deletes never happened
    assert len(h.present(old)) == 20 and h.present(["lost@1"]) == []
    h.commit()  # starts the index record again: its first ten ids are visited for nothing
    assert len(h.present(old)) == 20
    h.commit()
    h.commit()
    assert h.present(old) == [] and h.index_keys() == []
    h.dedup.close()


def test_partitions_not_written_since_opened_are_not_swept(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.commit("a@1")
    h.dedup.close_partition(PARTITION)  # revoked; opened again, it may still be restoring
    h.dedup.store.open_partition(PARTITION)
    h.clock.now_ms += RETENTION_MS
    h.dedup.prepare(h.producer)  # type: ignore[arg-type]
    h.dedup.flush(h.producer)  # type: ignore[arg-type]
    assert h.present(["a@1"]) == ["a@1"]
    h.commit("b@1")  # its first run here: restored, so swept
    assert h.present(["a@1"]) == [] and h.present(["b@1"]) == ["b@1"]
    h.dedup.close()


def test_a_write_time_taken_by_another_owner_is_not_overwritten(tmp_path: Path) -> None:
    first = Harness(tmp_path)
    first.commit("a@1")
    first.dedup.close()
    second = Harness(tmp_path, first.producer)  # same clock reading, e.g. the partition moved back
    second.commit("b@1")
    assert second.index_keys() == [index_key(T0, 0), index_key(T0 + 1, 0)]
    second.clock.now_ms += RETENTION_MS + 1
    second.commit()
    assert second.present(["a@1", "b@1"]) == []
    second.dedup.close()


def test_without_retention_nothing_is_indexed_or_swept(tmp_path: Path) -> None:
    clock = SettableClock(T0)
    dedup = DedupStore("g", tmp_path, CHANGELOG, clock_ms=clock)
    dedup.store.open_partition(PARTITION)
    producer = RecordingProducer()
    dedup.record(PARTITION, "a@1", DONE)
    dedup.prepare(producer)  # type: ignore[arg-type]
    dedup.flush(producer)  # type: ignore[arg-type]
    clock.now_ms += 10 * DEFAULT_RETENTION_MS
    dedup.record(PARTITION, "b@1", DONE)
    dedup.prepare(producer)  # type: ignore[arg-type]
    dedup.flush(producer)  # type: ignore[arg-type]
    assert [r[1] for r in producer.records] == [b"a@1", b"b@1"]
    assert dedup.lookup(PARTITION, "a@1") == DONE
    dedup.close()


def test_previous_format_decodes_and_bad_lengths_are_refused() -> None:
    legacy = DONE.encode()
    assert len(legacy) == 13 and DedupEntry.decode(legacy) == DONE
    assert written_at_ms(legacy) is None
    stored = DONE.encode_at(T0)
    assert DedupEntry.decode(stored) == DONE and written_at_ms(stored) == T0
    with pytest.raises(ValueError):
        DedupEntry.decode(stored + b"x")


def test_time_index_keys_sort_by_write_time_and_never_collide_with_ids() -> None:
    keys = [index_key(t, c) for t in (5, 256, 2**40) for c in (0, 1)]
    assert keys == sorted(keys)
    assert all(k < b"0" for k in keys)  # execution ids start with [A-Za-z0-9]
    assert index_key(5, 0) < b"\x00t" + (6).to_bytes(8, "big")


def test_default_retention_covers_the_due_topics_kafkron_creates(tmp_path: Path) -> None:
    assert required_retention_ms(DUE_RETENTION_MS, DUE_SEGMENT_MS) == DEFAULT_RETENTION_MS
    assert DEFAULT_RETENTION_MS == (7 * 24 + 2) * 3600 * 1000
    assert required_retention_ms(-1, 1000) is None  # infinite retention: nothing suffices
    assert ExecutorSettings().dedup_retention_ms == DEFAULT_RETENTION_MS
    with pytest.raises(ValidationError):
        ExecutorSettings(dedup_retention_ms=1000)


def test_a_store_written_with_expiry_reopens_with_its_index(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.commit("a@1")
    h.dedup.close()
    reopened = Store("dedup", "g", tmp_path, CHANGELOG)
    partition = reopened.open_partition(PARTITION)
    assert partition.get(index_key(T0, 0)) is not None and partition.get(b"a@1") is not None
    reopened.close()
