"""Tenant-fair draining through a real timer on the broker: a big and a small herd at one instant.

Tenant A's 20,000 one-offs are created first and their ids sort before B's 200, so in
job-id order (the order before ranks) every B fire would come after all of A's in its
partition. With ranks, each partition's B fires must all be among its first 2 * n_B herd
records of the due topic (the bound of ``services/timer/fairness.py`` for 2 tenants of
weight 1), read back ``read_committed`` by position; and every job fires exactly once.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict

import pytest

from bench.e2e_herd import due_reader
from bench.herd import job_record, now_ms, produce_jobs, wait_until_applied
from services.timer.settings import TimerSettings
from streams.codec import Codec, RecordKind
from streams.settings import KafkaSettings
from tests.services.timer.test_timer_kafka import _timer_on_thread

pytestmark = pytest.mark.kafka

CODEC = Codec.from_directory()
A_JOBS = 20_000
B_JOBS = 200


def _read_due(settings: KafkaSettings, wanted: int, timeout_s: float) -> list[tuple[int, str]]:
    """(partition, job id) of every herd DueEvent, in offset order per partition."""
    consumer = due_reader(settings, "fair-reader")
    found: list[tuple[int, int, str]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(found) < wanted and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10_000, timeout=0.2):
                value = message.value()
                if message.error() is not None or value is None:
                    continue
                job_id = CODEC.decode(RecordKind.DUE_EVENT, value)["job_id"]
                if job_id.startswith(("a-", "b-")):
                    found.append((message.partition() or 0, message.offset() or 0, job_id))
    finally:
        consumer.close()
    found.sort()
    return [(partition, job_id) for partition, _, job_id in found]


def test_a_small_tenants_herd_fires_within_the_bound_behind_a_big_one(
    topics: KafkaSettings,
) -> None:
    settings = TimerSettings(kafka=topics, instance_id=f"timer-fair-{uuid.uuid4().hex[:4]}")
    with _timer_on_thread(settings):
        created = now_ms()
        instant_ms = created + 12_000
        for tenant, count in (("a", A_JOBS), ("b", B_JOBS)):  # A's creates first
            records = (
                job_record(f"{tenant}-{i:06d}", created, run_at_ms=instant_ms, tenant=tenant)
                for i in range(count)
            )
            produce_jobs(topics, records)
        applied_ms = wait_until_applied(topics, instant_ms + 30_000)
        assert applied_ms < instant_ms, "the timer took in the creates after the instant"
        fired = _read_due(topics, A_JOBS + B_JOBS, timeout_s=60)
    counts = Counter(job_id for _, job_id in fired)
    assert len(counts) == A_JOBS + B_JOBS and set(counts.values()) == {1}  # each once
    by_partition: dict[int, list[str]] = defaultdict(list)
    for partition, job_id in fired:
        by_partition[partition].append(job_id)
    for partition, job_ids in by_partition.items():
        b_positions = [i for i, job_id in enumerate(job_ids) if job_id.startswith("b-")]
        n_b = len(b_positions)
        assert n_b > 0 and len(job_ids) > 10 * n_b  # A's backlog dwarfs B's in each partition
        assert b_positions[-1] < 2 * n_b, (partition, n_b, b_positions[-5:])
