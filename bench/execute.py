"""The executor's throughput: N pre-produced DueEvents, one executor process, real Kafka.

Run: ``.venv/bin/python -m bench.execute --bootstrap 127.0.0.1:9092 [--events 100000]``.

Measures in one run on one broker: the raw pipe (``bench.pipe.measure_pipe``) for the same
record count; then, per scenario, pre-produces the DueEvents, starts one executor process
(``python -m services.executor.main``) and reads ``job-results`` back ``read_committed``
until every execution's SUCCEEDED is there. Executions/s counts from the first STARTED to
the last SUCCEEDED (Kafka timestamps of the results: results and commits included) and
is printed as a ratio to the raw produce and consume rates. Scenarios:

- ``noop``: ``examples.noop`` (returns at once);
- ``sleep100ms-<window>``: ``examples.sleep`` with 0.1 s, ``max_in_flight`` = window.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.herd import ROOT, _delete_namespace
from bench.pipe import measure_pipe
from streams.admin import ensure_topics
from streams.codec import Codec, RecordKind
from streams.settings import KafkaSettings
from streams.topics import Priority, TopicNames

CODEC = Codec.from_directory()


def due_record(i: int, now_ms: int, handler: str, payload: bytes) -> dict[str, object]:
    job_id = f"bench-{i:07d}"
    return {
        "execution_id": f"{job_id}@{now_ms}",
        "job_id": job_id,
        "job_version": 1,
        "scheduled_for_ms": now_ms,
        "fire_at_ms": now_ms,
        "attempt": 1,
        "handler": handler,
        "payload": payload,
        "timeout_ms": 60_000,
        "priority": "NORMAL",
        "retry": {
            "max_attempts": 3,
            "initial_backoff_ms": 1000,
            "multiplier": 2.0,
            "max_backoff_ms": 300_000,
            "jitter_ratio": 0.1,
        },
        "trigger": "SCHEDULE",
        "tenant": "default",
        "emitted_at_ms": now_ms,
        "history": [],
    }


def produce_due(settings: KafkaSettings, count: int, handler: str, payload: bytes) -> None:
    """Produce ``count`` DueEvents to ``due.normal``, keyed by job id."""
    producer = Producer(
        settings.client_config(
            **{
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "partitioner": "murmur2_random",
                "queue.buffering.max.messages": 1_000_000,
            }
        )
    )
    topic = TopicNames(settings.namespace).due(Priority.NORMAL)
    now_ms = time.time_ns() // 1_000_000
    for i in range(count):
        record = due_record(i, now_ms, handler, payload)
        value = CODEC.encode(RecordKind.DUE_EVENT, record)
        while True:
            try:
                producer.produce(topic, value, str(record["job_id"]).encode())
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("due events were not all delivered within 120 s")


@dataclass
class Figures:
    name: str
    executions: int
    per_s: float
    wall_s: float
    statuses: Counter[str]
    rss_mb: float


def run_scenario(
    bootstrap: str, name: str, events: int, handler: str, payload: bytes, window: int,
    partitions: int,
) -> Figures:  # fmt: skip
    namespace = f"bx{uuid.uuid4().hex[:6]}."
    state_dir = ROOT / ".state" / "bench" / namespace.rstrip(".")
    settings = KafkaSettings(
        bootstrap_servers=bootstrap, namespace=namespace, partitions=partitions,
        state_dir=state_dir,
    )  # fmt: skip
    ensure_topics(settings)
    produce_due(settings, events, handler, payload)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "KAFKRON_BOOTSTRAP_SERVERS": bootstrap,
        "KAFKRON_NAMESPACE": namespace,
        "KAFKRON_PARTITIONS": str(partitions),
        "KAFKRON_STATE_DIR": str(state_dir),
        "KAFKRON_EXECUTOR_WORKER_ID": "bench-executor-0",
        "KAFKRON_EXECUTOR_MAX_IN_FLIGHT": str(window),
        "KAFKRON_EXECUTOR_LANE_BUFFER_SIZE": str(max(20_000, 2 * window)),
        "KAFKRON_EXECUTOR_CONSUME_BATCH_SIZE": "5000",
        "KAFKRON_EXECUTOR_COMMIT_INTERVAL_MS": "500",
    }
    log_path = state_dir / "executor.log"
    state_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "services.executor.main"], env=env, cwd=ROOT, stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        first_ms, last_ms, statuses, rss = read_results(settings, events, process.pid)
        wall_s = time.monotonic() - started
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
        _delete_namespace(bootstrap, namespace)
    shutil.rmtree(state_dir, ignore_errors=True)  # kept (with executor.log) when it failed
    per_s = events / max((last_ms - first_ms) / 1000, 1e-3)
    return Figures(name, events, per_s, wall_s, statuses, rss)


def read_results(
    settings: KafkaSettings, events: int, pid: int
) -> tuple[int, int, Counter[str], float]:
    """Read job-results until 2 x ``events`` (STARTED + final); then decode and count them."""
    consumer = Consumer(
        settings.client_config(
            **{
                "group.id": f"bench-reader-{uuid.uuid4().hex[:6]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.max.bytes": 52_428_800,
            }
        )
    )
    topic = TopicNames(settings.namespace).job_results
    consumer.assign([TopicPartition(topic, p, 0) for p in range(settings.partitions)])
    values: list[bytes] = []
    first_ms = last_ms = 0
    deadline = time.monotonic() + 600
    rss = 0.0
    while len(values) < 2 * events and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 0.5):
            value = message.value()
            if message.error() is None and value is not None:
                values.append(value)
                stamp = message.timestamp()[1]
                first_ms = stamp if not first_ms else min(first_ms, stamp)
                last_ms = max(last_ms, stamp)
        rss = max(rss, peak_rss_mb(pid))
    consumer.close()
    statuses = Counter(CODEC.decode(RecordKind.EXECUTION_RESULT, v)["status"] for v in values)
    return first_ms, last_ms, statuses, rss


def peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--sleep-events", type=int, default=50_000)
    parser.add_argument("--windows", default="2000,10000")
    parser.add_argument("--partitions", type=int, default=12)
    args = parser.parse_args()
    pipe = measure_pipe(args.bootstrap, args.events)
    print(f"raw pipe: produce {pipe.produce_per_s:,.0f}/s, consume {pipe.consume_per_s:,.0f}/s")
    scenarios = [("noop", args.events, "examples.noop", b"", 1000)]
    for window in (int(w) for w in args.windows.split(",") if w):
        scenarios.append((f"sleep100ms-{window}", args.sleep_events, "examples.sleep", b"0.1",
                          window))  # fmt: skip
    for name, events, handler, payload, window in scenarios:
        f = run_scenario(args.bootstrap, name, events, handler, payload, window, args.partitions)
        print(
            f"{f.name}: {f.executions:,} executions, {f.per_s:,.0f}/s first STARTED -> last "
            f"result ({f.wall_s:.1f}s wall incl. start-up), ratio to raw produce "
            f"{f.per_s / pipe.produce_per_s:.3f}, to raw consume {f.per_s / pipe.consume_per_s:.3f}"
            f"; peak RSS {f.rss_mb:.0f} MiB; statuses {dict(f.statuses)}"
        )


if __name__ == "__main__":
    main()
