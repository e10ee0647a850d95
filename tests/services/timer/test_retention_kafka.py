"""Shared retention entries against the real broker: restored from the changelog after SIGKILL.

One-offs fire, their SUCCEEDED results arrive on ``job-results`` (produced here, as an
executor would), and the timer lists them in shared retention entries. The timer is then
killed with SIGKILL and its state folder wiped, so the restarted timer has only what its
changelogs restored: every finished one-off must still be tombstoned on ``jobs`` after the
retention, and the jobs updated or re-created meanwhile must not be.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from bench.herd import DueReader, TimerProcess, job_record, now_ms, produce_jobs, wait_until_live
from services.timer import keys
from services.timer.retention import LISTED, listed_jobs
from streams.codec import Codec, RecordKind
from streams.identity import execution_id
from streams.settings import KafkaSettings
from streams.topics import TopicNames

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

CODEC = Codec.from_directory()
RETENTION_MS = 20_000


def _produce_results(settings: KafkaSettings, job_ids: Iterable[str], tick_ms: int) -> None:
    """A SUCCEEDED for each job's execution of ``tick_ms``, keyed like every kafkron record."""
    producer = Producer(
        settings.client_config(
            **{"enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random"}
        )
    )
    topic = TopicNames(settings.namespace).job_results
    for job_id in job_ids:
        record = {
            "execution_id": execution_id(job_id, tick_ms),
            "job_id": job_id,
            "scheduled_for_ms": tick_ms,
            "status": "SUCCEEDED",
            "started_at_ms": tick_ms + 5,
            "recorded_at_ms": now_ms(),
        }
        producer.produce(topic, CODEC.encode(RecordKind.EXECUTION_RESULT, record), job_id.encode())
    assert producer.flush(30) == 0


def _read_all(settings: KafkaSettings, topic: str) -> list[tuple[bytes, bytes | None, int]]:
    """Every committed record of ``topic`` now, from the start: key, value, timestamp."""
    consumer = Consumer(
        settings.client_config(
            **{
                "group.id": f"check-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
    )
    try:
        partitions = [TopicPartition(topic, p, 0) for p in range(settings.partitions)]
        ends = {
            tp.partition: consumer.get_watermark_offsets(tp, timeout=30)[1] for tp in partitions
        }
        consumer.assign(partitions)
        records: list[tuple[bytes, bytes | None, int]] = []
        done: set[int] = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + 30
        while len(done) < len(ends) and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10_000, timeout=0.2):
                if message.error() is not None:
                    continue
                key = message.key()
                assert key is not None
                records.append((key, message.value(), message.timestamp()[1]))
                offset = message.offset()
                partition = message.partition()
                assert offset is not None and partition is not None
                if offset + 1 >= ends[partition]:
                    done.add(partition)
            # transaction markers end a partition without a record: check the position
            for tp in consumer.position(partitions):
                if tp.offset >= ends[tp.partition]:
                    done.add(tp.partition)
        return records
    finally:
        consumer.close()


def _ends(consumer: Consumer, partitions: list[TopicPartition]) -> list[tuple[TopicPartition, int]]:
    return [(tp, consumer.get_watermark_offsets(tp, timeout=30)[1]) for tp in partitions]


def _wait_results_applied(settings: KafkaSettings, timeout_s: float = 60) -> None:
    """Until the timer group's committed offsets reach the end of ``job-results``."""
    names = TopicNames(settings.namespace)
    probe = Consumer(settings.client_config(**{"group.id": f"{settings.namespace}timer"}))
    try:
        partitions = [TopicPartition(names.job_results, p) for p in range(settings.partitions)]
        ends = {tp.partition: end for tp, end in _ends(probe, partitions)}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            committed = probe.committed(partitions, timeout=30)
            if all(tp.offset >= ends[tp.partition] for tp in committed):
                return
            time.sleep(0.2)
        raise TimeoutError("the timer did not commit every result in time")
    finally:
        probe.close()


def _delete_job(settings: KafkaSettings, job_id: str) -> None:
    producer = Producer(settings.client_config(**{"partitioner": "murmur2_random"}))
    producer.produce(TopicNames(settings.namespace).jobs, None, job_id.encode())
    assert producer.flush(30) == 0


def _tombstones(settings: KafkaSettings) -> dict[str, list[int]]:
    """Per job id, the timestamps of its tombstones on ``jobs``."""
    found: dict[str, list[int]] = {}
    for key, value, timestamp_ms in _read_all(settings, TopicNames(settings.namespace).jobs):
        if value is None:
            found.setdefault(key.decode(), []).append(timestamp_ms)
    return found


def test_shared_retention_entries_are_restored_after_sigkill_and_a_wiped_state_dir(
    topics: KafkaSettings, tmp_path: Path
) -> None:
    count = 300
    ids = [f"ret-{i:04d}" for i in range(count)]
    updated, recreated = ids[0], ids[1]
    env = {"KAFKRON_TIMER_ONE_OFF_RETENTION_MS": str(RETENTION_MS)}
    reader = DueReader(topics)
    timer = TimerProcess(topics, "timer-ret", tmp_path, **env).start()
    try:
        wait_until_live(topics, reader)
        before = len(reader.values)
        instant = now_ms() + 1_000
        produce_jobs(topics, (job_record(j, now_ms(), run_at_ms=instant) for j in ids))
        reader.read_until(before + count, timeout_s=60)
        results_ms = now_ms()
        _produce_results(topics, ids, instant)
        later_ms = results_ms + 3_600_000
        _wait_results_applied(topics)
        # One runs again later; one is deleted (our own tombstone) and created anew.
        produce_jobs(topics, [job_record(updated, now_ms(), version=2, run_at_ms=later_ms)])
        _delete_job(topics, recreated)
        produce_jobs(topics, [job_record(recreated, now_ms(), run_at_ms=later_ms)])
        time.sleep(2)  # the timer applies them (one commit interval)
        timer.kill()
        shutil.rmtree(topics.state_dir / "timer-ret")
        timer = TimerProcess(topics, "timer-ret", tmp_path, **env).start()
        finished = set(ids) - {updated, recreated}
        deadline_ms = results_ms + RETENTION_MS + 60_000
        while now_ms() < deadline_ms and not finished <= set(_tombstones(topics)):
            time.sleep(1)
        time.sleep(2)  # nothing more follows
        tombstones = _tombstones(topics)
    finally:
        timer.stop()
        reader.close()
    assert Counter({j: len(t) for j, t in tombstones.items()}) == Counter(finished | {recreated})
    fire_ahead_ms = 1_000  # the drain reaches this far ahead (200 ms by default)
    earliest_ms = min(t for j in finished for t in tombstones[j])
    assert earliest_ms >= results_ms + RETENTION_MS - fire_ahead_ms
    changelog = TopicNames(topics.namespace).changelog(f"{topics.namespace}timer", "wheel")
    shared = [
        listed_jobs(k, v)
        for k, v, _ in _read_all(topics, changelog)
        if v is not None and k[-1] == keys.TOMBSTONE and v[:1] == LISTED
    ]
    assert {j for jobs in shared for j in jobs} == {j.encode() for j in ids}
    assert len(shared) < count // 4  # shared, not one entry per job
