"""A tenant's executions/s limit through a real timer and executor, across a timer's SIGKILL.

Tenant A (limited to 24 executions/s: 24/P per second in each of the P partitions)
and tenant B (no limit) each have one-offs due at one instant. Read back ``read_committed``:
every job's DueEvent is committed once and its execution SUCCEEDED once, although the timer
was killed while most of A's fires were held and restarted from its changelogs; in each
partition A's ``fire_at_ms`` are at least P/24 s apart (the clock survived the restart), B's
fire at the instant, and every outcome's ``started_at_ms - scheduled_for_ms`` shows the wait.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from bench.e2e_herd import (
    EXECUTOR_ENV,
    HANDLER,
    ExecutorChild,
    ResultLog,
    due_reader,
    wait_until_serving,
)
from bench.herd import TimerProcess, job_record, now_ms, produce_jobs, wait_until_applied
from streams.codec import Codec, RecordKind
from streams.settings import KafkaSettings

pytestmark = pytest.mark.kafka

CODEC = Codec.from_directory()
PREFIX = "tl-"
A_JOBS = 96  # ~4 s of slots at 24/s
B_JOBS = 24
LIMIT = {"a": {"executions_per_s": 24}}


def _produce_herd(
    topics: KafkaSettings, a_jobs: int, b_jobs: int, lead_ms: int
) -> tuple[list[dict[str, Any]], int]:
    """One-offs of tenants a and b all due at one instant ``lead_ms`` from now, written to
    jobs: the records and the instant."""
    created = now_ms()
    instant_ms = created + lead_ms
    records = [
        job_record(f"{PREFIX}{tenant}-{i:04d}", created, run_at_ms=instant_ms, tenant=tenant)
        | {"handler": HANDLER}
        for tenant, count in (("a", a_jobs), ("b", b_jobs))
        for i in range(count)
    ]
    produce_jobs(topics, records)
    return records, instant_ms


def _read_due(settings: KafkaSettings, wanted: int, timeout_s: float) -> list[dict[str, Any]]:
    """Every DueEvent of this test's jobs, committed, with its partition."""
    consumer = due_reader(settings, "limits-reader")
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=0.2):
                value = message.value()
                if message.error() is not None or value is None:
                    continue
                due = CODEC.decode(RecordKind.DUE_EVENT, value)
                if due["job_id"].startswith(PREFIX):
                    found.append({**due, "partition": message.partition()})
            if len(found) >= wanted:  # then a second more: a duplicate would show up here
                quiet_until = quiet_until or time.monotonic() + 1.0
                if time.monotonic() > quiet_until:
                    break
    finally:
        consumer.close()
    return found


@pytest.mark.timeout(240)
def test_a_limited_tenant_fires_at_its_rate_once_each_across_a_timer_kill(
    topics: KafkaSettings, tmp_path: Path
) -> None:
    env = {"KAFKRON_TIMER_TENANT_LIMITS": json.dumps(LIMIT)}
    timer_id = f"timer-limits-{uuid.uuid4().hex[:4]}"
    timer = TimerProcess(topics, timer_id, tmp_path, **env)
    executor = ExecutorChild(topics, "limits-executor", tmp_path, **EXECUTOR_ENV)
    results = None
    try:
        timer.start()
        executor.start()
        results = ResultLog(topics, prefix=PREFIX)
        wait_until_serving(topics, results, timeout_s=120)
        records, instant_ms = _produce_herd(topics, A_JOBS, B_JOBS, lead_ms=6_000)
        assert wait_until_applied(topics, instant_ms + 30_000) < instant_ms
        while now_ms() < instant_ms + 1_500:  # mid-throttle: most of A's fires are held
            results.poll(0.1)
        timer.kill()
        timer = TimerProcess(topics, timer_id, tmp_path, **env)  # same state dir and id
        timer.start()
        tally = results.wait_all_succeeded(A_JOBS + B_JOBS, timeout_s=120)
        dues = _read_due(topics, A_JOBS + B_JOBS, timeout_s=30)
    finally:
        if results is not None:
            results.close()
        executor.stop(timeout_s=60)
        timer.stop(timeout_s=60)

    # The limit is split over the partitions: a slot every P / 24 s in each (rounded to ms).
    slot_ms = topics.partitions * 1000 // 24
    job_ids = {r["job_id"] for r in records}
    assert tally.succeeded_jobs == Counter(dict.fromkeys(job_ids, 1))  # each ran once
    assert not tally.duplicates()
    fired = Counter(d["job_id"] for d in dues)
    assert fired == Counter(dict.fromkeys(job_ids, 1)), fired.most_common(3)  # one commit each
    a_by_partition: dict[int, list[int]] = defaultdict(list)
    for due in dues:
        assert due["scheduled_for_ms"] == instant_ms
        if due["tenant"] == "a":
            a_by_partition[due["partition"]].append(due["fire_at_ms"])
        else:
            assert due["fire_at_ms"] == instant_ms  # B is not limited
    for partition, fire_at in a_by_partition.items():
        fire_at.sort()
        gaps = [later - earlier for earlier, later in itertools.pairwise(fire_at)]
        assert all(gap >= slot_ms for gap in gaps), (partition, gaps)
    latest_a = max(max(f) for f in a_by_partition.values())
    assert latest_a > instant_ms + 2_000  # A's fires went on after the kill (at +1.5 s)
    assert latest_a - instant_ms >= slot_ms * (max(map(len, a_by_partition.values())) - 1)
    # The outcomes record the wait: A's later executions started later.
    started = {
        r["job_id"]: r["started_at_ms"] - r["scheduled_for_ms"]
        for r in (CODEC.decode(RecordKind.EXECUTION_RESULT, v) for v in results.values)
        if r["status"] == "SUCCEEDED"
    }
    a_late = sorted(v for j, v in started.items() if j.startswith(f"{PREFIX}a-"))
    assert a_late[-1] >= latest_a - instant_ms - 50


@pytest.mark.timeout(240)
def test_a_tenant_at_its_in_flight_limit_never_runs_more_and_every_job_runs_once(
    topics: KafkaSettings, tmp_path: Path
) -> None:
    """A limited to one run in flight per partition (``in_flight`` = P), B unlimited: in
    each partition A's runs (started..finished, from the outcomes) never overlap, and every
    job runs once; parked fires are let out by the results alone."""
    share_in_flight = topics.partitions  # max(1, P // P) = 1 per partition
    env = {"KAFKRON_TIMER_TENANT_LIMITS": json.dumps({"a": {"in_flight": share_in_flight}})}
    timer = TimerProcess(topics, f"timer-inflight-{uuid.uuid4().hex[:4]}", tmp_path, **env)
    executor = ExecutorChild(topics, "inflight-executor", tmp_path, **EXECUTOR_ENV)
    results = None
    a_jobs, b_jobs = 60, 20
    try:
        timer.start()
        executor.start()
        results = ResultLog(topics, prefix=PREFIX)
        wait_until_serving(topics, results, timeout_s=120)
        records, _ = _produce_herd(topics, a_jobs, b_jobs, lead_ms=5_000)
        tally = results.wait_all_succeeded(a_jobs + b_jobs, timeout_s=120)
        dues = _read_due(topics, a_jobs + b_jobs, timeout_s=30)
    finally:
        if results is not None:
            results.close()
        executor.stop(timeout_s=60)
        timer.stop(timeout_s=60)

    job_ids = {r["job_id"] for r in records}
    assert tally.succeeded_jobs == Counter(dict.fromkeys(job_ids, 1))
    assert Counter(d["job_id"] for d in dues) == Counter(dict.fromkeys(job_ids, 1))
    partition_of = {d["job_id"]: d["partition"] for d in dues}
    runs: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for value in results.values:
        result = CODEC.decode(RecordKind.EXECUTION_RESULT, value)
        if result["status"] == "SUCCEEDED" and result["job_id"].startswith(f"{PREFIX}a-"):
            span = (result["started_at_ms"], result["finished_at_ms"])
            runs[partition_of[result["job_id"]]].append(span)
    assert sum(map(len, runs.values())) == a_jobs
    emitted: dict[int, list[int]] = defaultdict(list)
    for due in dues:
        if due["tenant"] == "a":
            emitted[due["partition"]].append(due["emitted_at_ms"])
    for partition, spans in runs.items():
        spans.sort()
        for (_, finished), (started, _) in itertools.pairwise(spans):
            assert started >= finished, (partition, spans)  # one A run at a time
        # The timer let each A fire out only after the run before it had finished (without
        # the limit all of them go out at the instant, before any finishes).
        finished_ms = sorted(finished for _, finished in spans)
        for k, emitted_ms in enumerate(sorted(emitted[partition])[1:]):
            assert emitted_ms >= finished_ms[k], (partition, k)
