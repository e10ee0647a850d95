"""Results that kafkron itself wrote to ``job-results`` on the real broker, for the examples.

One timer and one executor process (``python -m services.<name>.main``) run once per
session: a first wave of one-offs (noop, flaky, fail) finishes, then ``split_ms`` is taken,
then a second wave (a job firing every second, and noop one-offs) runs. The examples read
what the services wrote.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from bench.e2e_herd import ExecutorChild, ResultLog, wait_until_serving
from bench.herd import TimerProcess
from services.ingest.client import KafkronClient
from services.ingest.settings import IngestSettings
from streams.admin import ensure_topics
from streams.codec import Codec, RecordKind
from streams.settings import KafkaSettings
from streams.topics import TopicNames
from tests.conftest import _delete_topics

FINAL = {"SUCCEEDED", "DEAD_LETTER"}
DEADLINE_S = 120.0


@dataclass(frozen=True)
class RawResult:
    """One record of ``job-results`` as it is on the broker, and as kafkron's codec reads it."""

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes
    value: bytes
    decoded: dict[str, object]


@dataclass(frozen=True)
class PipelineResults:
    """What the session's pipeline wrote: settings, the wave split and every result record."""

    settings: KafkaSettings
    split_ms: int
    first_wave: tuple[str, ...]
    second_wave: tuple[str, ...]
    records: tuple[RawResult, ...]


def read_all_results(settings: KafkaSettings) -> list[RawResult]:
    """Every committed record of ``job-results``, decoded by kafkron's codec."""
    codec = Codec.from_directory()
    topic = TopicNames(settings.namespace).job_results
    consumer = Consumer(
        settings.client_config(
            **{"group.id": f"read-{uuid.uuid4().hex[:8]}", "isolation.level": "read_committed"}
        )
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(settings.partitions)])
        records: list[RawResult] = []
        while messages := consumer.consume(num_messages=1000, timeout=3.0):
            for m in messages:
                assert m.error() is None, m.error()
                value, key = m.value(), m.key()
                assert value is not None and key is not None
                decoded = codec.decode(RecordKind.EXECUTION_RESULT, value)
                records.append(
                    RawResult(m.partition() or 0, m.offset() or 0, m.timestamp()[1], key, value,
                              decoded)
                )  # fmt: skip
        return records
    finally:
        consumer.close()


def _wait_final(results: ResultLog, job_ids: set[str]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while job_ids - {r["job_id"] for r in results.others if r["status"] in FINAL}:
        assert time.monotonic() < deadline, f"no final result for some of {sorted(job_ids)}"
        results.poll(0.2)


@pytest.fixture(scope="session")
def pipeline_results(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PipelineResults]:
    """Run a timer and an executor once, two waves of jobs, and read back every result."""
    tmp: Path = tmp_path_factory.mktemp("pipeline")
    prefix = f"t{uuid.uuid4().hex[:10]}."
    settings = KafkaSettings(
        bootstrap_servers=kafka_bootstrap, namespace=prefix, partitions=4, state_dir=tmp / "state"
    )
    ensure_topics(settings)
    timer = TimerProcess(settings, "examples-timer", tmp)
    executor = ExecutorChild(settings, "examples-executor", tmp)
    try:
        split_ms, first, second = _run_pipeline(settings, timer, executor)
        # Read once the timer and executor stopped: the records are every result there will
        # be, and no service idles on for the rest of the session (the timer alone took ~9%
        # of a core while a suite run went on, for its 25 minutes).
        yield PipelineResults(
            settings, split_ms, tuple(sorted(first)), tuple(sorted(second)),
            tuple(read_all_results(settings)),
        )  # fmt: skip
    finally:
        _delete_topics(kafka_bootstrap, prefix)


def _run_pipeline(
    settings: KafkaSettings, timer: TimerProcess, executor: ExecutorChild
) -> tuple[int, set[str], set[str]]:
    """Both waves through the timer and the executor, stopped at the end (also on failure);
    returns the split between the waves (epoch ms) and the job ids of each wave."""
    results: ResultLog | None = None
    try:
        timer.start()
        executor.start()
        results = ResultLog(settings, prefix="no-prefix-")
        wait_until_serving(settings, results, timeout_s=DEADLINE_S)
        now = int(time.time() * 1000)
        first = {f"a-{h}-{n}": h for n in range(3) for h in ("noop", "flaky", "fail")}
        with KafkronClient(IngestSettings(kafka=settings)) as client:
            for job_id, handler in first.items():
                client.submit({"job_id": job_id, "handler": f"examples.{handler}", "run_at": now})
            _wait_final(results, set(first))
            time.sleep(0.2)
            split_ms = int(time.time() * 1000)
            time.sleep(0.2)
            ticking = "b-every-second"
            second = {ticking, "b-noop-0", "b-noop-1"}
            client.submit(
                {
                    "job_id": ticking,
                    "handler": "examples.noop",
                    "cron": {"expression": "* * * * * *", "timezone": "UTC"},
                }
            )
            for job_id in sorted(second - {ticking}):
                client.submit(
                    {"job_id": job_id, "handler": "examples.noop", "run_at": split_ms + 300}
                )
            _wait_final(results, second)
            deadline = time.monotonic() + DEADLINE_S
            while (
                sum(
                    1
                    for r in results.others
                    if r["job_id"] == ticking and r["status"] == "SUCCEEDED"
                )
                < 3
            ):
                assert time.monotonic() < deadline, "the every-second job did not run 3 times"
                results.poll(0.2)
            client.cancel(ticking)
        time.sleep(2.0)  # the cancel's CANCELLED outcome, and anything in flight
        return split_ms, set(first), second
    finally:
        if results is not None:
            results.close()
        executor.stop(timeout_s=60)
        timer.stop(timeout_s=60)
