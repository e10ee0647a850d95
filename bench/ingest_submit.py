"""Ingest throughput: client ``submit_many`` and REST creates, on a real broker.

    KAFKA_BOOTSTRAP=127.0.0.1:9092 .venv/bin/python -m bench.ingest_submit \
        [--jobs 100000] [--requests 20000] [--connections 64] [--depth 1] \
        [--batch-jobs 100000] [--batch-size 500] [--api-processes 1] [--repeat 1] \
        [--only client|rest] [--httpx-check]

Each run uses a fresh topic namespace (deleted at the end) and a temporary view directory.
The REST part starts the API (``services.ingest.main.run``) in a child process on loopback
and drives it with ``bench.http_load`` (raw asyncio keep-alive connections; httpx costs more
CPU per request than the server does). In the same run it measures two baselines with the
same load generator: a trivial FastAPI endpoint (reads the body, answers a constant) on the
same uvicorn, and the raw Kafka pipe (``bench.pipe.measure_pipe``). Then, per repeat:
``POST /api/jobs`` without and with an Idempotency-Key, and ``POST /api/jobs/batch``.
CPU is the server's (all its processes) per created job. ``--httpx-check`` also drives the
trivial endpoint with httpx, the load loop this benchmark used before.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka.admin import AdminClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.http_load import LoadFigures, http_request, run_load  # noqa: E402
from bench.pipe import measure_pipe  # noqa: E402
from services.ingest.client import KafkronClient  # noqa: E402
from services.ingest.settings import IngestSettings  # noqa: E402
from streams.admin import ensure_topics  # noqa: E402
from streams.settings import KafkaSettings  # noqa: E402
from streams.topics import BASE_TOPICS, TopicNames  # noqa: E402


def bench_client(settings: IngestSettings, jobs: int, payload_bytes: int) -> dict[str, float]:
    """submit_many of ``jobs`` one-off jobs (dict requests), timed end to end (durable)."""
    run_at = time.time_ns() // 1_000_000 + 3_600_000
    filler = "x" * max(0, payload_bytes - 30)
    requests = [
        {"handler": "bench.noop", "run_at": run_at + i, "payload": {"i": i, "pad": filler}}
        for i in range(jobs)
    ]
    settings = settings.model_copy(update={"max_jobs_per_batch": jobs})
    with KafkronClient(settings) as client:
        client.submit_many(requests[:100])  # warm up: connections, metadata, shape cache
        started, cpu = time.perf_counter(), time.process_time()
        ids = client.submit_many(requests)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert len(ids) == jobs
    return {"jobs": jobs, "seconds": elapsed, "jobs_per_s": jobs / elapsed, "cpu_s": cpu}


# servers -----------------------------------------------------------------------------------


def _serve(settings_json: str) -> None:
    from services.ingest.main import run

    run(IngestSettings.model_validate_json(settings_json))


def _serve_trivial(settings_json: str) -> None:
    """The baseline: FastAPI on the same uvicorn settings, an endpoint that does nothing."""
    import uvicorn
    from fastapi import FastAPI, Request, Response

    settings = IngestSettings.model_validate_json(settings_json)
    app = FastAPI()

    @app.post("/api/jobs", status_code=201)
    async def trivial(request: Request) -> Response:
        await request.body()
        return Response(b'{"job_id":"x"}', status_code=201, media_type="application/json")

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(b"{}", media_type="application/json")

    uvicorn.run(app, host=settings.http_host, port=settings.http_port, log_level="warning",
                loop=settings.event_loop, http=settings.http_implementation)  # fmt: skip


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a process and its live children; Linux /proc, else 0."""
    ticks = 0
    for path in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = path.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if path.parent.name == str(pid) or fields[1] == str(pid):  # it, or an API worker
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving(
    target: Callable[[str], None], settings: IngestSettings, healthy_within_s: float = 90
) -> Iterator[Any]:
    """``target`` serving ``settings`` in a child process until healthy (RuntimeError
    after ``healthy_within_s``); yields the process."""
    server = multiprocessing.get_context("spawn").Process(
        target=target, args=(settings.model_dump_json(),), daemon=False
    )
    server.start()
    url = f"http://{settings.http_host}:{settings.http_port}/healthz"
    try:
        deadline = time.monotonic() + healthy_within_s
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline or not server.is_alive():
                raise RuntimeError(f"the API did not become healthy within {healthy_within_s:g}s")
            time.sleep(0.2)
        if settings.api_processes > 1:
            time.sleep(3)  # every worker process answers health on its own view: let all start
        yield server
    finally:
        server.terminate()
        server.join(20)


# loads -------------------------------------------------------------------------------------


def _single_requests(count: int, keyed: bool) -> list[bytes]:
    run_at = time.time_ns() // 1_000_000 + 3_600_000
    tag = uuid.uuid4().hex[:8]
    requests = []
    for i in range(count):
        body = json.dumps({"handler": "bench.noop", "run_at": run_at + i, "payload": {"i": i}})
        headers = [("idempotency-key", f"{tag}-{i}")] if keyed else []
        requests.append(http_request("POST", "/api/jobs", body.encode(), headers))
    return requests


def _batch_requests(count: int, size: int, keyed: bool) -> list[bytes]:
    run_at = time.time_ns() // 1_000_000 + 3_600_000
    tag = uuid.uuid4().hex[:8]
    requests = []
    for start in range(0, count, size):
        items = []
        for i in range(start, min(count, start + size)):
            item: dict[str, Any] = {
                "job": {"handler": "bench.noop", "run_at": run_at + i, "payload": {"i": i}}
            }
            if keyed:
                item["idempotency_key"] = f"{tag}-{i}"
            items.append(item)
        body = json.dumps({"items": items}).encode()
        requests.append(http_request("POST", "/api/jobs/batch", body))
    return requests


def _drive(
    settings: IngestSettings,
    server: Any,
    requests: list[bytes],
    jobs: int,
    args: argparse.Namespace,
) -> tuple[LoadFigures, float]:
    """Run a load; returns its figures and the server's CPU microseconds per job."""
    server_cpu = _cpu_s(server.pid or 0)
    figures = asyncio.run(
        run_load(
            settings.http_host,
            settings.http_port,
            requests,
            connections=args.connections,
            depth=args.depth,
        )
    )
    return figures, 1e6 * (_cpu_s(server.pid or 0) - server_cpu) / jobs


def _line(name: str, figures: LoadFigures, jobs: int, cpu_us: float, base: Baselines) -> str:
    rate = jobs / figures.seconds
    return (
        f"{name}: {jobs:,} jobs in {figures.requests:,} requests, {figures.seconds:.2f}s = "
        f"{rate:,.0f} jobs/s ({rate / base.trivial_per_s:.2f} of the trivial endpoint, "
        f"{rate / base.produce_per_s:.3f} of raw produce); latency p50 "
        f"{figures.p50_ms:.1f} ms, p99 {figures.percentile_ms(0.99):.1f} ms; statuses "
        f"{dict(sorted(figures.statuses.items()))}; server CPU {cpu_us:.0f} us/job"
    )


@dataclass(frozen=True)
class Baselines:
    """The same run's raw Kafka produce rate and trivial-endpoint request rate."""

    produce_per_s: float
    trivial_per_s: float


async def _httpx_load(url: str, requests: int, connections: int) -> float:
    """The load loop this benchmark used before bench.http_load: httpx, one client each."""
    body = {"handler": "bench.noop", "run_at": 1, "payload": {"i": 0}}
    left = list(range(requests))

    async def worker() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            while left:
                left.pop()
                await http.post("/api/jobs", json=body)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(connections)))
    return requests / (time.perf_counter() - started)


def bench_rest(settings: IngestSettings, args: argparse.Namespace, produce_per_s: float) -> None:
    """Trivial endpoint baseline, then single creates (unkeyed, keyed) and batches."""
    settings = settings.model_copy(
        update={
            "http_host": "127.0.0.1",
            "http_port": _free_port(),
            "api_processes": args.api_processes,
        }
    )
    n = args.requests
    with serving(_serve_trivial, settings.model_copy(update={"api_processes": 1})) as server:
        asyncio.run(run_load("127.0.0.1", settings.http_port, _single_requests(500, False)))
        load_cpu = time.process_time()
        trivial, trivial_cpu = _drive(settings, server, _single_requests(n, False), n, args)
        load_cpu_us = 1e6 * (time.process_time() - load_cpu) / n
        if args.httpx_check:
            url = f"http://127.0.0.1:{settings.http_port}"
            load_cpu = time.process_time()
            httpx_rate = asyncio.run(_httpx_load(url, 3000, args.connections))
            httpx_cpu_us = 1e6 * (time.process_time() - load_cpu) / 3000
            print(f"trivial endpoint driven by httpx instead: {httpx_rate:,.0f} requests/s "
                  f"(load generator CPU {httpx_cpu_us:.0f} us/request)")  # fmt: skip
    base = Baselines(produce_per_s, trivial.per_s)
    print(f"baseline trivial FastAPI endpoint (1 process): {trivial.per_s:,.0f} requests/s, "
          f"server CPU {trivial_cpu:.0f} us/request, p50 {trivial.p50_ms:.1f} ms; load "
          f"generator CPU {load_cpu_us:.0f} us/request")  # fmt: skip
    with serving(_serve, settings) as server:
        asyncio.run(run_load("127.0.0.1", settings.http_port, _single_requests(500, False)))
        for _ in range(args.repeat):
            for keyed in (False, True):
                figures, cpu_us = _drive(settings, server, _single_requests(n, keyed), n, args)
                name = f"POST /api/jobs (keyed={keyed}, {args.api_processes} process(es))"
                print(_line(name, figures, n, cpu_us, base), flush=True)
            for keyed in (False, True):
                jobs = args.batch_jobs
                requests = _batch_requests(jobs, args.batch_size, keyed)
                figures, cpu_us = _drive(settings, server, requests, jobs, args)
                name = (f"POST /api/jobs/batch x{args.batch_size} (keyed={keyed}, "
                        f"{args.api_processes} process(es))")  # fmt: skip
                print(_line(name, figures, jobs, cpu_us, base), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="client submit_many jobs")
    parser.add_argument("--payload-bytes", type=int, default=100)
    parser.add_argument("--requests", type=int, default=20_000, help="single REST creates")
    parser.add_argument("--batch-jobs", type=int, default=100_000, help="jobs sent in batches")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--depth", type=int, default=1, help="pipelined requests per connection")
    parser.add_argument("--api-processes", type=int, default=1)
    parser.add_argument("--pipe-records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--only", choices=["client", "rest"])
    parser.add_argument("--repeat", type=int, default=1, help="runs of each part")
    parser.add_argument(
        "--httpx-check",
        action="store_true",
        help="also drive the trivial endpoint with httpx (the old load loop)",
    )
    args = parser.parse_args()
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    namespace = f"bench{uuid.uuid4().hex[:8]}."
    pipe = measure_pipe(bootstrap, args.pipe_records, args.partitions)
    print(f"baseline raw pipe, {pipe.records:,} records: produce {pipe.produce_per_s:,.0f}/s")
    with tempfile.TemporaryDirectory(prefix="kafkron-bench-") as state:
        kafka = KafkaSettings(bootstrap_servers=bootstrap, namespace=namespace,
                              partitions=args.partitions, state_dir=Path(state))  # fmt: skip
        ensure_topics(kafka)
        settings = IngestSettings(kafka=kafka, view_dir=Path(state) / "view")
        try:
            for _ in range(args.repeat if args.only in (None, "client") else 0):
                result = bench_client(settings, args.jobs, args.payload_bytes)
                print(f"client submit_many: {result['jobs']:,} jobs in {result['seconds']:.2f}s"
                      f" = {result['jobs_per_s']:,.0f} jobs/s "
                      f"({result['jobs_per_s'] / pipe.produce_per_s:.2f} of raw produce; process "
                      f"CPU {1e6 * result['cpu_s'] / result['jobs']:.1f} us/job)")  # fmt: skip
            if args.only in (None, "rest"):
                bench_rest(settings, args, pipe.produce_per_s)
        finally:
            names = TopicNames(namespace)
            admin = AdminClient(kafka.client_config())
            topics = [names.name(spec.base_name) for spec in BASE_TOPICS]
            for future in admin.delete_topics(topics, operation_timeout=30).values():
                future.result()


if __name__ == "__main__":
    main()
