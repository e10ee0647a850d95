"""Restoring partition stores from a real changelog topic into a real RocksDB."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer

from streams.admin import admin_client
from streams.kafka.consumer import create_restore_consumer
from streams.kafka.producer import TransactionalProducer
from streams.settings import KafkaSettings
from streams.state.changelog import changelog_topic, ensure_changelog_topics
from streams.state.recovery import Recovery, RecoveryProgress
from streams.state.store import Store
from tests.streams.processor_testkit import create_topics, end_offsets

pytestmark = pytest.mark.kafka
GROUP = "rec"
PARTITION = 1


@pytest.fixture
def changelog(kafka_settings: KafkaSettings) -> str:
    inputs = kafka_settings.namespace + "input"
    create_topics(kafka_settings, [inputs])
    ensure_changelog_topics(kafka_settings, GROUP, ["wheel"], [inputs])
    return changelog_topic(kafka_settings, GROUP, "wheel")


def commit_batches(
    settings: KafkaSettings, store: Store, batches: list[dict[bytes, bytes | None]]
) -> int:
    """Write each batch the way a checkpoint does; returns the changelog records produced."""
    producer = TransactionalProducer(settings, "rec-writer", tracked_topics=[store.changelog_topic])
    producer.init()
    produced = 0
    try:
        for batch in batches:
            txn = store.partition(PARTITION).begin()
            for key, value in batch.items():
                txn.set(key, value) if value is not None else txn.delete(key)
            txn.prepare(producer)
            producer.commit()
            txn.flush(producer.delivered_offset(store.changelog_topic, PARTITION))
            produced += len(batch)
    finally:
        producer.close()
    return produced


def contents(store: Store) -> list[tuple[bytes, bytes]]:
    return store.partition(PARTITION).scan(b"", b"\xff" * 8, 10**9)


def restore(settings: KafkaSettings, store: Store) -> RecoveryProgress:
    store.open_partition(PARTITION)
    seen: list[RecoveryProgress] = []
    recovery = Recovery(
        create_restore_consumer(settings, GROUP),
        admin_client(settings),
        batch_size=5_000,
        on_progress=seen.append,
    )
    try:
        progress = recovery.start(store, PARTITION)
        deadline = time.monotonic() + 60
        while recovery.pending(PARTITION):
            assert time.monotonic() < deadline, "restore did not finish"
            recovery.step(0.2)
        assert progress.done and progress.position >= progress.end_offset
        assert not seen or seen[-1] is progress  # progress is reported while restoring
        return progress
    finally:
        recovery.close()


def opened(directory: Path, changelog: str) -> Store:
    """The test's store in ``directory`` with its partition open."""
    store = Store("wheel", GROUP, directory, changelog)
    store.open_partition(PARTITION)
    return store


@dataclass(frozen=True)
class Restored:
    """What restoring a store left: the restore's progress, the store's rows and offset."""

    progress: RecoveryProgress
    contents: list[tuple[bytes, bytes]]
    changelog_offset: int | None


def restored(settings: KafkaSettings, directory: Path, changelog: str) -> Restored:
    """The store in ``directory`` (as a restart finds it) restored from ``changelog``."""
    store = Store("wheel", GROUP, directory, changelog)
    try:
        progress = restore(settings, store)
        return Restored(progress, contents(store), store.partition(PARTITION).changelog_offset())
    finally:
        store.close()


def key(i: int) -> bytes:
    return i.to_bytes(4, "big")


def test_store_rebuilt_from_changelog_after_its_folder_is_deleted(
    kafka_settings: KafkaSettings, changelog: str, tmp_path: Path
) -> None:
    original = opened(tmp_path / "a", changelog)
    batches: list[dict[bytes, bytes | None]] = [
        {key(i): b"v%d" % i for i in range(j * 500, (j + 1) * 500)} for j in range(8)
    ]
    batches.append({key(i): None for i in range(0, 4000, 3)})  # tombstones
    batches.append({key(i): b"updated" for i in range(1, 4000, 7)})
    produced = commit_batches(kafka_settings, original, batches)
    expected, expected_offset = contents(original), original.partition(PARTITION).changelog_offset()
    original.close()

    shutil.rmtree(tmp_path / "a")
    rebuilt = restored(kafka_settings, tmp_path / "a", changelog)
    assert rebuilt.progress.start_offset == 0 and rebuilt.progress.applied == produced
    assert rebuilt.contents == expected
    assert rebuilt.changelog_offset == expected_offset
    rate_per_s = rebuilt.progress.rate_per_s()
    print(f"\nrestore rate: {rebuilt.progress.applied} records, {rate_per_s:.0f}/s")


def test_intact_store_restores_only_records_after_its_stored_offset(
    kafka_settings: KafkaSettings, changelog: str, tmp_path: Path
) -> None:
    live = opened(tmp_path / "live", changelog)
    commit_batches(kafka_settings, live, [{key(i): b"a" for i in range(300)}] * 2)
    live.close()
    shutil.copytree(tmp_path / "live", tmp_path / "stale")  # this owner's disk, then it left
    live.open_partition(PARTITION)
    later: list[dict[bytes, bytes | None]] = [
        {key(i): b"b" for i in range(100, 250)},
        {key(i): None for i in range(0, 40)},
    ]
    replay = commit_batches(kafka_settings, live, later)
    expected = contents(live)
    live.close()

    stale = restored(kafka_settings, tmp_path / "stale", changelog)
    assert stale.progress.applied == replay == 190
    assert stale.progress.start_offset > 600  # past the first two transactions' records
    assert stale.contents == expected


def test_aborted_changelog_records_are_not_restored(
    kafka_settings: KafkaSettings, changelog: str, tmp_path: Path
) -> None:
    store = opened(tmp_path / "s", changelog)
    commit_batches(kafka_settings, store, [{b"kept": b"1"}])
    store.close()
    writer = Producer(kafka_settings.client_config(**{"transactional.id": "rec-aborter"}))
    writer.init_transactions(30)
    writer.begin_transaction()
    writer.produce(changelog, key=b"ghost", value=b"x", partition=PARTITION)
    writer.produce(changelog, key=b"kept", value=None, partition=PARTITION)
    assert writer.flush(30) == 0  # in the log, then aborted
    writer.abort_transaction(30)
    assert end_offsets(kafka_settings, changelog)[PARTITION] >= 5  # 1 + marker + 2 + marker
    shutil.rmtree(tmp_path / "s")
    rebuilt = restored(kafka_settings, tmp_path / "s", changelog)
    assert rebuilt.contents == [(b"kept", b"1")] and rebuilt.progress.applied == 1


def test_store_ahead_of_its_changelog_is_rebuilt(
    kafka_settings: KafkaSettings, changelog: str, tmp_path: Path
) -> None:
    store = opened(tmp_path / "s", changelog)
    commit_batches(kafka_settings, store, [{b"k": b"1"}])
    store.partition(PARTITION).write({b"phantom": b"x"}, 1_000)  # not in the changelog
    store.close()
    assert restored(kafka_settings, tmp_path / "s", changelog).contents == [(b"k", b"1")]


def fill_partitions(settings: KafkaSettings, topic: str, per_partition: int) -> None:
    producer = Producer(settings.client_config(**{"linger.ms": 20}))
    for partition in range(settings.partitions):
        for i in range(per_partition):
            key = b"%d-%05d" % (partition, i)
            producer.produce(topic, key=key, value=b"v", partition=partition)
        producer.poll(0)
    assert producer.flush(30) == 0


def keys_of(store: Store, partition: int) -> int:
    return len(store.partition(partition).scan(b"", b"\xff", 10**6))


def test_partitions_restore_one_at_a_time_and_each_completes_on_its_own(
    kafka_settings: KafkaSettings, changelog: str, tmp_path: Path
) -> None:
    per_partition = 2_000
    fill_partitions(kafka_settings, changelog, per_partition)
    store = Store("wheel", GROUP, tmp_path / "s", changelog)
    recovery = Recovery(
        create_restore_consumer(kafka_settings, GROUP),
        admin_client(kafka_settings),
        batch_size=300,
        max_restoring_partitions=1,
        small_restore_offsets=0,
    )
    try:
        progress = {p: recovery.start(store, p) for p in range(4)}
        # Only the first began (store opened, offsets measured); the others wait unopened.
        assert not progress[0].queued and progress[0].end_offset == per_partition
        assert all(progress[p].queued and not progress[p].done for p in (1, 2, 3))
        assert sorted(store.partitions) == [0]
        recovery.cancel(2)  # revoked while waiting: never opened, never restored
        assert not recovery.pending(2)
        completed: list[int] = []
        cancelled_midway = False
        deadline = time.monotonic() + 60
        while recovery.pending(0) or recovery.pending(1) or recovery.pending(3):
            assert time.monotonic() < deadline, "restore did not finish"
            cancelled = {2, 1} if cancelled_midway else {2}
            reading = [
                p for p, g in progress.items() if p not in cancelled and not (g.queued or g.done)
            ]
            assert len(reading) <= 1, f"{reading} restore at once"
            if reading == [1] and 0 < progress[1].applied < per_partition and not cancelled_midway:
                recovery.cancel(1)  # revoked midway: what was applied stays applied
                cancelled_midway = True
                continue
            for partition in sorted(recovery.step(0.2)):
                # Reported only once its own changelog was read to the end.
                assert progress[partition].done
                assert keys_of(store, partition) == per_partition
                completed.append(partition)
        assert cancelled_midway and completed == [0, 3]
        assert 2 not in store.partitions
        partial = keys_of(store, 1)
        assert 0 < partial < per_partition
        stored = store.partition(1).changelog_offset()
        assert stored is not None
    finally:
        recovery.close()
        store.close()  # flushes the writes that skipped the WAL
    # Assigned again later: it resumes after what the cancelled restore applied.
    again = Store("wheel", GROUP, tmp_path / "s", changelog)
    try:
        again.open_partition(1)
        assert again.partition(1).changelog_offset() == stored
        recovery = Recovery(
            create_restore_consumer(kafka_settings, GROUP), admin_client(kafka_settings)
        )
        try:
            progress_1 = recovery.start(again, 1)
            assert progress_1.start_offset == stored + 1
            while recovery.pending(1):
                recovery.step(0.2)
            assert keys_of(again, 1) == per_partition
            assert progress_1.applied == per_partition - partial
        finally:
            recovery.close()
    finally:
        again.close()
