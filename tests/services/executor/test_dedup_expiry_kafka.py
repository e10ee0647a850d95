"""Dedup expiry against the real broker: tombstones in the changelog, restores, topic configs."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from services.executor.commit import Committer
from services.executor.dedup import (
    DEFAULT_RETENTION_MS,
    STORE_NAME,
    DedupEntry,
    DedupRetentionError,
    DedupStore,
    Progress,
    check_retention_covers_due_topics,
)
from services.executor.offsets import OffsetTracker
from streams.admin import admin_client
from streams.kafka.consumer import create_restore_consumer
from streams.kafka.producer import TransactionalProducer
from streams.settings import KafkaSettings
from streams.state.changelog import changelog_topic, ensure_changelog_topics
from streams.state.recovery import Recovery
from streams.state.store import Store
from streams.topics import Priority, TopicNames
from tests.streams.processor_testkit import create_topics, read_committed

pytestmark = pytest.mark.kafka
PARTITION = 1
RETENTION_MS = 60_000
T0 = 1_700_000_000_000
HOUR_MS = 3600 * 1000


def due_topics(settings: KafkaSettings) -> list[str]:
    return [TopicNames(settings.namespace).due(p) for p in Priority]


def commit(dedup: DedupStore, producer: TransactionalProducer) -> None:
    """The executor's commit path (no consumer positions here): the sweep runs inside it."""
    offsets: OffsetTracker[tuple[str, int]] = OffsetTracker()
    assert Committer(producer, lambda: None, offsets, dedup).commit([]) is not None


def contents(store: Store) -> list[tuple[bytes, bytes]]:
    return store.partition(PARTITION).scan(b"", b"\xff", 10**6)


def restore(settings: KafkaSettings, group: str, store: Store) -> None:
    store.open_partition(PARTITION)
    recovery = Recovery(create_restore_consumer(settings, group), admin_client(settings))
    try:
        recovery.start(store, PARTITION)
        deadline = time.monotonic() + 60
        while recovery.pending(PARTITION):
            assert time.monotonic() < deadline, "restore did not finish"
            recovery.step(0.2)
    finally:
        recovery.close()


def test_expired_entries_leave_the_changelog_and_restores_do_not_bring_them_back(
    topics: KafkaSettings, tmp_path: Path
) -> None:
    group = f"{topics.namespace}executor"
    ensure_changelog_topics(topics, group, [STORE_NAME], due_topics(topics))
    changelog = changelog_topic(topics, group, STORE_NAME)
    now = [T0]
    live = DedupStore(group, tmp_path / "live", changelog, retention_ms=RETENTION_MS,
                      clock_ms=lambda: now[0])  # fmt: skip
    live.store.open_partition(PARTITION)
    producer = TransactionalProducer(topics, f"{group}.dedup-test", tracked_topics=[changelog])
    producer.init()
    old = [f"old-{i}@{T0}" for i in range(200)]
    fresh = [f"fresh-{i}@{T0}" for i in range(200)]
    entry = DedupEntry(Progress.SUCCEEDED, 1, 0)
    try:
        for execution_id in old:
            live.record(PARTITION, execution_id, entry)
        commit(live, producer)
        live.store.close_partition(PARTITION)  # a copy of this owner's disk, before expiry
        shutil.copytree(tmp_path / "live", tmp_path / "stale")
        live.store.open_partition(PARTITION)
        now[0] = T0 + RETENTION_MS // 2
        for execution_id in fresh:
            live.record(PARTITION, execution_id, entry)
        commit(live, producer)
        now[0] = T0 + RETENTION_MS
        live.record(PARTITION, "trigger@1", entry)
        commit(live, producer)  # sweeps all 200 old ids (budget 1,000 + 2)
        assert [e for e in old if live.lookup(PARTITION, e)] == []
        assert all(live.lookup(PARTITION, e) == entry for e in fresh)
        expected = contents(live.store)
        expected_offset = live.store.partition(PARTITION).changelog_offset()
    finally:
        producer.close()
        live.close()

    last: dict[bytes | None, bytes | None] = {}
    for record in read_committed(topics, changelog):
        assert record.partition == PARTITION
        last[record.key] = record.value
    assert all(last[e.encode()] is None for e in old)  # a tombstone is the last word
    assert all(last[e.encode()] is not None for e in fresh)

    for folder in ("rebuilt", "stale"):  # from scratch, and from the stale copy's offset
        store = Store(STORE_NAME, group, tmp_path / folder, changelog)
        try:
            restore(topics, group, store)
            assert contents(store) == expected
            assert store.partition(PARTITION).changelog_offset() == expected_offset
        finally:
            store.close()
    restored = DedupStore(group, tmp_path / "stale", changelog, retention_ms=RETENTION_MS)
    restored.store.open_partition(PARTITION)
    try:
        assert [e for e in old if restored.lookup(PARTITION, e)] == []
        assert all(restored.lookup(PARTITION, e) == entry for e in fresh)
    finally:
        restored.close()


def test_retention_is_checked_against_the_due_topics_configs(topics: KafkaSettings) -> None:
    admin = admin_client(topics)
    due = due_topics(topics)
    # ensure_topics gives the due topics the retention and roll the default covers
    check_retention_covers_due_topics(admin, due, DEFAULT_RETENTION_MS)
    with pytest.raises(DedupRetentionError, match="DEDUP_RETENTION_MS"):
        check_retention_covers_due_topics(admin, due, DEFAULT_RETENTION_MS - 1)

    short = topics.namespace + "due.short"
    infinite = topics.namespace + "due.forever"
    create_topics(topics, [short], {"retention.ms": str(6 * HOUR_MS), "segment.ms": str(HOUR_MS)})
    create_topics(topics, [infinite], {"retention.ms": "-1"})
    check_retention_covers_due_topics(admin, [short], 8 * HOUR_MS)  # 6 h + 1 h + 1 h
    with pytest.raises(DedupRetentionError):
        check_retention_covers_due_topics(admin, [short], 8 * HOUR_MS - 1)
    with pytest.raises(DedupRetentionError, match="forever"):
        check_retention_covers_due_topics(admin, [infinite], 10**15)
