"""Dedup entries carried by their index records (v3) against the real broker: what the
changelog holds (one record per commit and partition), and restores into a wiped state
folder with ``Recovery``: rewrites, sweeps, a changelog mixed with per-entry records (v2),
and entries expired by the restore's clock."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from services.executor.commit import Committer
from services.executor.dedup import (
    STORE_NAME,
    DedupEntry,
    DedupStore,
    Progress,
    entries_index_key,
)
from services.executor.offsets import OffsetTracker
from streams.admin import admin_client
from streams.kafka.consumer import create_restore_consumer
from streams.kafka.producer import TransactionalProducer
from streams.settings import KafkaSettings
from streams.state.changelog import changelog_topic, ensure_changelog_topics
from streams.state.recovery import Recovery
from streams.topics import Priority, TopicNames
from tests.services.executor.support import SettableClock
from tests.streams.processor_testkit import Record, read_committed

pytestmark = pytest.mark.kafka
PARTITIONS = (0, 1)
RETENTION_MS = 60_000
T0 = 1_700_000_000_000
DONE = DedupEntry(Progress.SUCCEEDED, 1, 0)
FAILED = DedupEntry(Progress.RETRY_SCHEDULED, 1, 0)


class Changelog:
    """The dedup changelog of a fresh group, and a transactional producer writing it."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self.group = f"{settings.namespace}executor"
        due = [TopicNames(settings.namespace).due(p) for p in Priority]
        ensure_changelog_topics(settings, self.group, [STORE_NAME], due)
        self.topic = changelog_topic(settings, self.group, STORE_NAME)
        self.producer = TransactionalProducer(
            settings, f"{self.group}.dedup-v3-test", tracked_topics=[self.topic]
        )
        self.producer.init()

    def dedup(self, folder: Path, clock: SettableClock, *, entries_in_index: bool) -> DedupStore:
        dedup = DedupStore(
            self.group, folder, self.topic, retention_ms=RETENTION_MS, clock_ms=clock,
            entries_in_index=entries_in_index,
        )  # fmt: skip
        for partition in PARTITIONS:
            dedup.store.open_partition(partition)
        return dedup

    def commit(self, dedup: DedupStore, entries: dict[int, dict[str, DedupEntry]]) -> None:
        """The executor's commit path (no consumer positions here)."""
        for partition, by_id in entries.items():
            for execution_id, entry in by_id.items():
                dedup.record(partition, execution_id, entry)
        offsets: OffsetTracker[tuple[str, int]] = OffsetTracker()
        Committer(self.producer, lambda: None, offsets, dedup).commit([])

    def records(self) -> list[Record]:
        return read_committed(self.settings, self.topic)

    def restored(self, folder: Path, clock: SettableClock) -> DedupStore:
        """A dedup store restored from the changelog into ``folder`` (empty: from scratch)."""
        dedup = self.dedup(folder, clock, entries_in_index=True)
        recovery = Recovery(
            create_restore_consumer(self.settings, self.group), admin_client(self.settings)
        )
        try:
            for partition in PARTITIONS:
                recovery.start(dedup.store, partition)
            deadline = time.monotonic() + 60
            while any(recovery.pending(p) for p in PARTITIONS):
                assert time.monotonic() < deadline, "restore did not finish"
                recovery.step(0.2)
        finally:
            recovery.close()
        return dedup

    def close(self) -> None:
        self.producer.close()


def contents(dedup: DedupStore, partition: int) -> list[tuple[bytes, bytes]]:
    return dedup.store.partition(partition).scan(b"", b"\xff", 10**6)


def ids(prefix: str, n: int, entry: DedupEntry = DONE) -> dict[str, DedupEntry]:
    return {f"{prefix}-{i}@{T0}": entry for i in range(n)}


def test_v3_changelog_restores_rewrites_and_sweeps_into_a_wiped_folder(
    topics: KafkaSettings, tmp_path: Path
) -> None:
    changelog = Changelog(topics)
    clock = SettableClock(T0)
    live = changelog.dedup(tmp_path / "live", clock, entries_in_index=True)
    first = {p: ids(f"first-{p}", 300, FAILED) for p in PARTITIONS}
    rewritten = {p: {e: DedupEntry(Progress.SUCCEEDED, 2, 0) for e in list(first[p])[:50]}
                 for p in PARTITIONS}  # fmt: skip
    try:
        changelog.commit(live, first)
        clock.now_ms = T0 + RETENTION_MS // 2
        changelog.commit(live, {p: {**rewritten[p], **ids(f"second-{p}", 200)} for p in PARTITIONS})
        clock.now_ms = T0 + RETENTION_MS  # the first commit's entries expire
        changelog.commit(live, {p: {f"trigger-{p}@1": DONE} for p in PARTITIONS})
        for p in PARTITIONS:
            assert [e for e in list(first[p])[50:] if live.lookup(p, e)] == []
            assert all(live.lookup(p, e) == entry for e, entry in rewritten[p].items())
        expected = {p: contents(live, p) for p in PARTITIONS}
        offsets = {p: live.store.partition(p).changelog_offset() for p in PARTITIONS}
    finally:
        live.close()

    records = changelog.records()
    per_partition = Counter(r.partition for r in records)
    # per partition: the format mark, one index record per commit, the swept one's tombstone
    assert per_partition == {p: 1 + 3 + 1 for p in PARTITIONS}
    assert not any(r.key and not r.key.startswith(b"\x00") for r in records)  # no per-id ones
    assert {(r.partition, r.key) for r in records if r.value is None} == {
        (p, entries_index_key(T0, 0)) for p in PARTITIONS
    }

    restored = changelog.restored(tmp_path / "wiped", clock)
    try:
        for p in PARTITIONS:
            assert contents(restored, p) == expected[p]
            assert restored.store.partition(p).changelog_offset() == offsets[p]
            assert all(restored.lookup(p, e) == entry for e, entry in rewritten[p].items())
            assert [e for e in list(first[p])[50:] if restored.lookup(p, e)] == []
    finally:
        restored.close()
        changelog.close()


def test_entries_expired_by_the_restores_clock_are_not_restored(
    topics: KafkaSettings, tmp_path: Path
) -> None:
    changelog = Changelog(topics)
    clock = SettableClock(T0)
    live = changelog.dedup(tmp_path / "live", clock, entries_in_index=True)
    try:
        changelog.commit(live, {p: ids(f"early-{p}", 100) for p in PARTITIONS})
        clock.now_ms = T0 + 1_000
        changelog.commit(live, {p: ids(f"late-{p}", 100) for p in PARTITIONS})
    finally:
        live.close()
    # early ones expired, late ones not; nothing swept
    later = SettableClock(T0 + RETENTION_MS + 500)
    restored = changelog.restored(tmp_path / "wiped", later)
    try:
        for p in PARTITIONS:
            assert [e for e in ids(f"early-{p}", 100) if restored.lookup(p, e)] == []
            assert all(restored.lookup(p, e) == DONE for e in ids(f"late-{p}", 100))
            index = [k for k, _ in contents(restored, p) if k.startswith(b"\x00t")]
            assert index == [entries_index_key(T0, 0), entries_index_key(T0 + 1_000, 0)]
        changelog.commit(restored, {p: {f"next-{p}@1": DONE} for p in PARTITIONS})
        for p in PARTITIONS:  # the sweep finds the early ids gone and drops their record
            index = [k for k, _ in contents(restored, p) if k.startswith(b"\x00t")]
            assert entries_index_key(T0, 0) not in index
            assert all(restored.lookup(p, e) == DONE for e in ids(f"late-{p}", 100))
    finally:
        restored.close()
        changelog.close()


def test_a_changelog_mixed_with_per_entry_records_restores_and_empties(
    topics: KafkaSettings, tmp_path: Path
) -> None:
    changelog = Changelog(topics)
    clock = SettableClock(T0)
    folder = tmp_path / "live"
    legacy = {p: ids(f"legacy-{p}", 100, FAILED) for p in PARTITIONS}
    retried = {p: {e: DedupEntry(Progress.SUCCEEDED, 2, 0) for e in list(legacy[p])[:30]}
               for p in PARTITIONS}  # fmt: skip
    old_version = changelog.dedup(folder, clock, entries_in_index=False)
    try:
        changelog.commit(old_version, legacy)
    finally:
        old_version.close()
    live = changelog.dedup(folder, clock, entries_in_index=True)  # the upgrade takes over
    try:
        clock.now_ms = T0 + 5_000
        changelog.commit(live, {p: {**retried[p], **ids(f"new-{p}", 50)} for p in PARTITIONS})
        expected = {p: contents(live, p) for p in PARTITIONS}
    finally:
        live.close()
    restored = changelog.restored(tmp_path / "wiped", clock)
    try:
        for p in PARTITIONS:
            assert contents(restored, p) == expected[p]
            assert all(restored.lookup(p, e) == entry for e, entry in retried[p].items())
            assert all(restored.lookup(p, e) == FAILED for e in list(legacy[p])[30:])
        clock.now_ms = T0 + RETENTION_MS  # the legacy commit expires; the retries do not
        changelog.commit(restored, {p: {f"tick-{p}@1": DONE} for p in PARTITIONS})
        for p in PARTITIONS:
            assert [e for e in legacy[p] if restored.lookup(p, e)] == list(retried[p])
        clock.now_ms = T0 + 3 * RETENTION_MS  # everything expires
        changelog.commit(restored, {p: {f"tock-{p}@1": DONE} for p in PARTITIONS})
        clock.now_ms = T0 + 5 * RETENTION_MS
        changelog.commit(restored, {p: {f"tuck-{p}@1": DONE} for p in PARTITIONS})
        expected = {p: contents(restored, p) for p in PARTITIONS}
    finally:
        restored.close()
    last: dict[tuple[int, bytes], bytes | None] = {}
    for record in changelog.records():
        assert record.key is not None  # a changelog record is keyed
        last[(record.partition, record.key)] = record.value
    live_ids = {k for k, v in last.items() if v is not None and not k[1].startswith(b"\x00")}
    assert live_ids == set()  # every per-entry record ends with a tombstone
    again = changelog.restored(tmp_path / "wiped-again", clock)
    try:
        for p in PARTITIONS:
            assert contents(again, p) == expected[p]
            assert [k for k, _ in expected[p] if not k.startswith(b"\x00")] == [
                f"tuck-{p}@1".encode()
            ]
    finally:
        again.close()
        changelog.close()
