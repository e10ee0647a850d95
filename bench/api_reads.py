"""Read API latency: a job read and a page of 100, with many jobs in the view, while jobs fire.

    KAFKA_BOOTSTRAP=127.0.0.1:9092 .venv/bin/python -m bench.api_reads \
        [--jobs 1000000] [--fires-per-s 2000] [--requests 5000] [--connections 1]

Issue 18's target: p99 <= 10 ms for ``GET /api/jobs/{id}`` and ``GET /api/jobs?limit=100``
with 1M jobs in the status view while 2K jobs/s fire, given also as a ratio to a trivial
endpoint (``GET /healthz`` of the same API, which reads no RocksDB) in the same run.

A fresh namespace (deleted at the end) and view directory. ``--jobs`` jobs are created with
``submit_many`` (recurring over a few cron expressions, tenants and labels, a tenth of them
one-offs); the API (``services.ingest.main.run``) starts in a child process and answers
once its view has read them all. The firing is what the view sees of it: a child process
writes ``--fires-per-s`` executions a second to ``job-results`` (STARTED, then SUCCEEDED,
as an executor does), so each read competes with the view applying them; the timer and
the executors themselves are not run (their CPU would be the machine's, not the API's).
Each read load is ``--requests`` requests over ``--connections`` keep-alive connections
(``bench.http_load``): job reads of random ids, first pages and pages at random cursors,
and a filtered page (tenant and label).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.http_load import LoadFigures, http_request, run_load  # noqa: E402
from bench.ingest_submit import _free_port, _serve, serving  # noqa: E402
from services.ingest.client import KafkronClient  # noqa: E402
from services.ingest.job_index import encode_cursor  # noqa: E402
from services.ingest.settings import IngestSettings  # noqa: E402
from streams.admin import ensure_topics  # noqa: E402
from streams.codec import Codec, RecordKind  # noqa: E402
from streams.identity import execution_id  # noqa: E402
from streams.settings import KafkaSettings  # noqa: E402
from streams.topics import BASE_TOPICS, TopicNames  # noqa: E402

TARGET_P99_MS = 10.0
CRONS = ["*/5 * * * *", "0 * * * *", "30 2 * * *", "0 9 * * 1-5"]
CHUNK = 100_000


def load_jobs(settings: IngestSettings, jobs: int) -> list[str]:
    """Create ``jobs`` jobs in chunks; returns their ids."""
    run_at = time.time_ns() // 1_000_000 + 86_400_000
    ids: list[str] = []
    settings = settings.model_copy(update={"max_jobs_per_batch": CHUNK})
    with KafkronClient(settings) as client:
        for start in range(0, jobs, CHUNK):
            batch: list[dict[str, Any]] = []
            for i in range(start, min(jobs, start + CHUNK)):
                labels = {"team": f"team{i % 50}", "env": "prod" if i % 3 else "dev"}
                job: dict[str, Any] = {"handler": "bench.noop", "tenant": f"tenant{i % 20}",
                                       "labels": labels}  # fmt: skip
                if i % 10 == 0:
                    job["run_at"] = run_at + i
                else:
                    job["cron"] = {"expression": CRONS[i % len(CRONS)]}
                batch.append(job)
            ids += client.submit_many(batch)
            print(f"  created {len(ids):,} jobs", flush=True)
    return ids


def fire(kafka_json: str, job_ids: list[str], per_s: int, stop: Any) -> None:
    """Write ``per_s`` executions a second to ``job-results`` until ``stop`` is set."""
    kafka = KafkaSettings.model_validate_json(kafka_json)
    codec = Codec.from_directory()
    topic = TopicNames(kafka.namespace).job_results
    producer = Producer(kafka.client_config(**{"linger.ms": 5}))
    started = time.monotonic()
    fired = 0
    while not stop.is_set():
        due = int((time.monotonic() - started) * per_s)
        now_ms = time.time_ns() // 1_000_000
        for _ in range(due - fired):
            job_id = random.choice(job_ids)
            tick = now_ms // 1000 * 1000
            for status in ("STARTED", "SUCCEEDED"):
                result = {
                    "execution_id": execution_id(job_id, tick), "job_id": job_id,
                    "scheduled_for_ms": tick, "attempt": 1, "status": status, "reason": None,
                    "error": None, "worker_id": "bench-worker", "started_at_ms": now_ms,
                    "finished_at_ms": now_ms + 3 if status == "SUCCEEDED" else None,
                    "next_attempt_at_ms": None, "trigger": "SCHEDULE", "job_version": 1,
                    "recorded_at_ms": now_ms,
                }  # fmt: skip
                value = codec.encode(RecordKind.EXECUTION_RESULT, result)
                producer.produce(topic, value, job_id.encode())
        fired = max(fired, due)
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(30)


def _measure(settings: IngestSettings, requests: list[bytes], connections: int) -> LoadFigures:
    random.shuffle(requests)
    return asyncio.run(
        run_load(settings.http_host, settings.http_port, requests, connections=connections)
    )


def _line(name: str, figures: LoadFigures, base_p99_ms: float) -> str:
    p99 = figures.percentile_ms(0.99)
    ok = "meets" if p99 <= TARGET_P99_MS else "MISSES"
    return (
        f"{name:<34} p50 {figures.p50_ms:6.2f} ms  p99 {p99:6.2f} ms  "
        f"({p99 / base_p99_ms:5.2f}x /healthz)  {figures.per_s:7,.0f}/s  "
        f"statuses {figures.statuses}  {ok} the {TARGET_P99_MS:g} ms target"
    )


def bench_reads(settings: IngestSettings, ids: list[str], args: argparse.Namespace) -> None:
    count = args.requests
    sample = random.sample(ids, min(len(ids), count))
    reads = {
        "GET /healthz (trivial)": [http_request("GET", "/healthz")] * count,
        "GET /api/jobs/{id}": [http_request("GET", f"/api/jobs/{j}") for j in sample],
        "GET /api/jobs?limit=100": [http_request("GET", "/api/jobs?limit=100")] * count,
        "GET /api/jobs?limit=100&cursor=": [
            http_request("GET", f"/api/jobs?limit=100&cursor={encode_cursor(j.encode())}")
            for j in sample
        ],
        "GET /api/jobs?tenant&label&limit=100": [
            http_request(
                "GET", f"/api/jobs?tenant=tenant{i % 20}&label=team:team{i % 50}&limit=100"
            )
            for i in range(count)
        ],
    }
    figures = {name: _measure(settings, list(r), args.connections) for name, r in reads.items()}
    base = figures["GET /healthz (trivial)"].percentile_ms(0.99)
    for name, found in figures.items():
        print(_line(name, found, base))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--fires-per-s", type=int, default=2_000)
    parser.add_argument("--requests", type=int, default=5_000, help="requests per read load")
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=12)
    args = parser.parse_args()
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    namespace = f"bench{uuid.uuid4().hex[:8]}."
    with tempfile.TemporaryDirectory(prefix="kafkron-bench-") as state:
        kafka = KafkaSettings(bootstrap_servers=bootstrap, namespace=namespace,
                              partitions=args.partitions, state_dir=Path(state))  # fmt: skip
        ensure_topics(kafka)
        settings = IngestSettings(kafka=kafka, view_dir=Path(state) / "view",
                                  http_port=_free_port())  # fmt: skip
        try:
            started = time.perf_counter()
            ids = load_jobs(settings.model_copy(update={"view_dir": Path(state) / "v0"}), args.jobs)
            print(f"{len(ids):,} jobs created in {time.perf_counter() - started:.1f}s")
            started = time.perf_counter()
            # The view rebuilds from the topics first: 1M jobs take minutes on a busy machine.
            with serving(_serve, settings, healthy_within_s=900):
                print(
                    f"API healthy (its view read them) after {time.perf_counter() - started:.1f}s"
                )
                context = multiprocessing.get_context("spawn")
                stop = context.Event()
                firing = context.Process(
                    target=fire, args=(kafka.model_dump_json(), ids, args.fires_per_s, stop)
                )
                firing.start()
                try:
                    time.sleep(2)  # the view is applying results when the reads start
                    print(f"firing {args.fires_per_s:,} executions/s into job-results")
                    bench_reads(settings, ids, args)
                finally:
                    stop.set()
                    firing.join(60)
        finally:
            names = TopicNames(namespace)
            admin = AdminClient(kafka.client_config())
            topics = [names.name(spec.base_name) for spec in BASE_TOPICS]
            for future in admin.delete_topics(topics, operation_timeout=30).values():
                future.result()


if __name__ == "__main__":
    main()
