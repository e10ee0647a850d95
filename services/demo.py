"""``kafkron up --demo``: submit a few jobs through the client library and show their outcomes."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import OFFSET_END, Consumer, TopicPartition

from services.ingest.client import KafkronClient
from services.ingest.settings import IngestSettings
from streams.codec import Codec, RecordKind
from streams.exceptions import DecodeError
from streams.records import FINAL_STATUSES, ExecutionStatus
from streams.settings import KafkaSettings
from streams.topics import TopicNames

DEMO_DAG: dict[str, tuple[str, ...]] = {
    "extract": (),
    "load-refs": (),
    "join": ("extract", "load-refs"),
    "transform": ("join",),
    "validate": ("join",),
    "publish": ("transform", "validate"),
}
"""The design's six-node DAG: node -> its upstreams (roots first)."""
DAG_ROOTS = [node for node, upstreams in DEMO_DAG.items() if not upstreams]


def demo_jobs(now_ms: int, tag: str) -> list[dict[str, object]]:
    """Three one-offs (echo, flaky-then-ok, always failing), a cron every 5 seconds and the
    six-node DAG, whose roots run every 10 seconds."""
    return [*_one_offs_and_cron(now_ms, tag), *_dag(tag)]


def _dag(tag: str) -> list[dict[str, object]]:
    every_10_s = {"expression": "*/10 * * * * *", "timezone": "UTC"}
    return [
        {"job_id": f"demo-{node}-{tag}", "handler": "examples.noop",
         **({"depends_on": [f"demo-{u}-{tag}" for u in upstreams]} if upstreams
            else {"cron": every_10_s})}
        for node, upstreams in DEMO_DAG.items()
    ]  # fmt: skip


def _one_offs_and_cron(now_ms: int, tag: str) -> list[dict[str, object]]:
    return [
        {"job_id": f"demo-echo-{tag}", "handler": "examples.echo", "run_at": now_ms + 3000,
         "payload": {"hello": "kafkron"}},
        {"job_id": f"demo-flaky-{tag}", "handler": "examples.flaky", "run_at": now_ms + 3000,
         "retry": {"max_attempts": 3, "initial_backoff_s": 1, "max_backoff_s": 10}},
        {"job_id": f"demo-fail-{tag}", "handler": "examples.fail", "run_at": now_ms + 3000},
        {"job_id": f"demo-cron-{tag}", "handler": "examples.noop",
         "cron": {"expression": "*/5 * * * * *", "timezone": "UTC"}},
    ]  # fmt: skip


def demo_settings(kafka: KafkaSettings) -> IngestSettings:
    """The demo client's settings: a status view of its own (its submits by job id look up
    state), not the API's default one, which the API process holds open."""
    return IngestSettings(kafka=kafka, view_dir=kafka.state_dir / "demo-view")


def run_demo(kafka: KafkaSettings, *, duration_s: float = 25.0) -> int:
    """Submit the demo jobs, print every result until ``duration_s``; the count of finals."""
    tag = uuid.uuid4().hex[:6]
    names = TopicNames(kafka.namespace)
    consumer = Consumer(
        kafka.client_config(
            **{"group.id": f"kafkron-demo-{tag}", "isolation.level": "read_committed",
               "enable.auto.commit": False}
        )
    )  # fmt: skip
    metadata = consumer.list_topics(names.job_results, timeout=10)
    partitions = list(metadata.topics[names.job_results].partitions)
    # OFFSET_END resolves inside librdkafka, which retries while fresh partitions elect leaders.
    consumer.assign([TopicPartition(names.job_results, p, OFFSET_END) for p in partitions])
    client = KafkronClient(demo_settings(kafka))
    try:
        for job in demo_jobs(int(time.time() * 1000), tag):
            receipt = client.submit(job)
            print(f"[demo] submitted {receipt.job_id} ({job['handler']})")
        finals = _print_results(consumer, Codec.from_directory(), tag, duration_s)
        for job_id in [f"demo-cron-{tag}", *(f"demo-{root}-{tag}" for root in DAG_ROOTS)]:
            client.cancel(job_id)
            print(f"[demo] cancelled {job_id}")
        print(f"[demo] {finals} final outcomes seen")
        return finals
    finally:
        client.close()
        consumer.close()


def _print_results(consumer: Consumer, codec: Codec, tag: str, duration_s: float) -> int:
    finals = 0
    deadline = time.monotonic() + duration_s
    while time.monotonic() < deadline:
        for message in consumer.consume(num_messages=100, timeout=0.5):
            value = message.value()
            if message.error() is not None or value is None:
                continue
            try:
                result = codec.decode(RecordKind.EXECUTION_RESULT, value)
            except DecodeError:
                continue
            if not str(result["job_id"]).endswith(tag):
                continue
            status = ExecutionStatus(result["status"])
            finals += status in FINAL_STATUSES
            why = result.get("reason") or result.get("error") or ""
            print(f"[demo] {result['execution_id']} attempt {result['attempt']}: {status} {why}")
    return finals
