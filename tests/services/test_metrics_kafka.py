"""Issue 19's proof on the real broker: /metrics of a running timer and executor during a
small herd, and the failure logs.

One timer and one executor run as child processes (JSON logs, metrics on free ports). After
canaries proved both serve, a herd of one-offs due at one instant goes in, with one job whose
handler always fails (dead-lettered at its first attempt) and one record on ``jobs`` that is
not a Job (the timer dead-letters it). Between a scrape before and one after, the timer's
fire count and lateness histogram count equal the executions the executor counts by outcome;
the dead letters appear once in each log and once in the metrics; no log carries a payload.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.e2e_herd import ids_on_every_partition
from bench.herd import TimerProcess, job_record, produce_jobs
from infra.broker import free_port
from streams.identity import execution_id
from streams.settings import KafkaSettings
from streams.topics import Priority, TopicNames

from .executor.test_service_kit import ExecutorProcess, TopicReader, now_ms, produce

pytestmark = pytest.mark.kafka

HERD = 300
LEAD_MS = 4_000
SECRET = "4111-1111-1111-1111"
NOOP = "examples.noop"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def json_lines(log: str) -> list[dict[str, Any]]:
    """The JSON log lines of a child's output (other output, if any, is skipped)."""
    lines = []
    for line in log.splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def wait_for_finals(reader: TopicReader, job_ids: set[str], timeout_s: float) -> None:
    """Until every job of ``job_ids`` has a final result (SUCCEEDED or DEAD_LETTER)."""

    def done(r: TopicReader) -> bool:
        finals = {x["job_id"] for x in r.results() if x["status"] in ("SUCCEEDED", "DEAD_LETTER")}
        return job_ids <= finals

    reader.wait_for(done, timeout_s, f"final results of {len(job_ids)} jobs")


@pytest.mark.timeout(300)
def test_metrics_count_every_fire_and_execution_of_a_herd_and_each_dead_letter_once(
    topics: KafkaSettings, tmp_path: Path
) -> None:
    timer_port, executor_port = free_port(), free_port()
    timer = TimerProcess(
        topics, "metrics-timer", tmp_path,
        KAFKRON_TIMER_METRICS_PORT=str(timer_port), KAFKRON_LOG_FORMAT="json",
    )  # fmt: skip
    executor = ExecutorProcess(
        topics, "metrics-executor", tmp_path,
        KAFKRON_EXECUTOR_METRICS_PORT=str(executor_port), KAFKRON_LOG_FORMAT="json",
    )  # fmt: skip
    reader = TopicReader(topics, ["job-results"])
    names = TopicNames(topics.namespace)
    try:
        timer.start()
        executor.start()
        canaries = set(ids_on_every_partition("canary-", topics.partitions))
        created = now_ms()
        produce_jobs(
            topics, (job_record(j, created, run_at_ms=created, handler=NOOP) for j in canaries)
        )
        wait_for_finals(reader, canaries, 120)
        timer_before, executor_before = scrape(timer_port), scrape(executor_port)

        instant_ms = now_ms() + LEAD_MS
        herd = [f"herd-{i:03d}" for i in range(HERD)]
        jobs = [job_record(j, now_ms(), run_at_ms=instant_ms, handler=NOOP) for j in herd]
        failing = job_record(
            "doomed", now_ms(), run_at_ms=instant_ms, handler="examples.fail",
            payload=json.dumps({"card": SECRET}).encode(),
        )  # fmt: skip
        produce_jobs(topics, [*jobs, failing])
        produce(topics, [(names.jobs, b"garbage", f"not a job {SECRET}".encode(), None)])
        wait_for_finals(reader, {*herd, "doomed"}, 120)
        time.sleep(6)  # one lag sample (every 5 s) after the last run
        timer_after, executor_after = scrape(timer_port), scrape(executor_port)
    finally:
        reader.close()
        executor.stop(timeout_s=60)
        timer.stop(timeout_s=60)

    def timer_delta(name: str, **labels: str) -> float:
        return value(timer_after, name, **labels) - value(timer_before, name, **labels)

    def executor_delta(name: str, **labels: str) -> float:
        return value(executor_after, name, **labels) - value(executor_before, name, **labels)

    # Every fire of the herd (and the doomed job) once, each in the lateness histogram.
    fires = timer_delta("kafkron_timer_fires_total", trigger="SCHEDULE")
    lateness_count = timer_delta("kafkron_timer_fire_lateness_seconds_count", trigger="SCHEDULE")
    bucket = "kafkron_timer_fire_lateness_seconds_bucket"
    inf_bucket = timer_delta(bucket, trigger="SCHEDULE", le="+Inf")
    assert fires == lateness_count == inf_bucket == HERD + 1
    # ... equal to the executions the executor finished, by outcome.
    executions = {
        outcome: executor_delta("kafkron_executor_executions_total", outcome=outcome)
        for outcome in ("succeeded", "retry_scheduled", "dead_letter")
    }
    assert executions == {"succeeded": HERD, "retry_scheduled": 0, "dead_letter": 1}
    assert sum(executions.values()) == lateness_count
    assert executor_delta("kafkron_executor_handler_duration_seconds_count") == HERD + 1
    # Each dead letter once in the metrics: the execution, and the timer's undecodable record.
    assert executor_delta("kafkron_dead_letters_total", kind="execution") == 1
    assert timer_delta("kafkron_dead_letters_total", kind="undecodable") == 1
    assert timer_delta("kafkron_decode_failures_total", topic=names.jobs) == 1
    # Gauges and the runtime's families are there and sane.
    assert value(executor_after, "kafkron_executor_runs_in_flight") == 0
    normal = ("topic", names.due(Priority.NORMAL))
    due_lag = [
        v for (name, labels), v in executor_after.items()
        if name == "kafkron_consumer_lag_records" and normal in labels
    ]  # fmt: skip
    assert due_lag and set(due_lag) == {0}  # every due record of the herd was consumed
    wheel = [
        v for (name, labels), v in timer_after.items()
        if name == "kafkron_store_keys" and ("store", "wheel") in labels
    ]  # fmt: skip
    assert len(wheel) == topics.partitions and sum(wheel) > 0
    assert value(timer_after, "kafkron_commit_duration_seconds_count") > 0
    assert value(executor_after, "kafkron_commit_duration_seconds_count") > 0

    # Each dead letter once in the logs, with its ids as fields and its reason; no payload.
    executor_lines = json_lines(executor.log())
    doomed_id = execution_id("doomed", instant_ms)
    dead = [line for line in executor_lines if line.get("execution_id") == doomed_id]
    assert len(dead) == 1, dead
    (line,) = dead
    assert line["level"] == "ERROR" and "dead-lettered" in line["msg"]
    assert line["job_id"] == "doomed" and line["attempt"] == 1 and "non-retryable" in line["reason"]
    timer_lines = json_lines(timer.log())
    undecodable = [line for line in timer_lines if "dead-lettered" in line["msg"]]
    assert len(undecodable) == 1, undecodable
    assert undecodable[0]["topic"] == names.jobs and undecodable[0]["reason"]
    assert SECRET not in executor.log() and SECRET not in timer.log()
    # Start-up says what it restored in one line per set of partitions, not per store.
    restored = [line for line in timer_lines if line["msg"].startswith("restored partition")]
    assigned = [line for line in timer_lines if " assigned [" in line["msg"]]
    assert 1 <= len(restored) <= len(assigned), [line["msg"] for line in timer_lines]
    assert not [line for line in timer_lines if "records up to offset" in line["msg"]]
    levels = Counter(line["level"] for line in executor_lines)
    print(f"\nmetrics herd: executor log levels {dict(levels)}; timer: {restored[0]['msg']}")
