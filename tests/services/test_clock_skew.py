"""Hosts whose clocks are wrong: runs still start at their time by the broker's clock.

A timer and an executor run as real processes whose wall clocks are shifted
(``skewed_clock.py``): the timer's 30 s ahead and the executor's 30 s behind, and both 30 s
ahead (the case that would start runs early). Each job's handler is an HTTP webhook to a
server in this test, whose clock is the host's own (the broker's, on this machine): the
request's arrival is the run's start as the broker's clock counts it, plus the request's
own few milliseconds. Every run must arrive no earlier than its ``run_at`` minus the
clock's error bound, and not much later.

Without ``streams/clock.py`` (each process on its own wall clock) both cases fail: runs
start 30 s early (both ahead; the executor's hold is bounded by ``max_hold_ms``, 5 s, so a
timer 30 s ahead with an executor behind starts runs ~25 s early too).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from services.ingest.client import KafkronClient
from services.ingest.settings import IngestSettings
from services.readiness import group_probe, wait_until_ready
from streams.settings import KafkaSettings
from tests.conftest import ROOT

pytestmark = pytest.mark.kafka

JOBS = 12
LEAD_MS = 12_000  # services start (~3-6 s), then the jobs are created
EARLY_TOLERANCE_MS = 50  # the clock's error bound here is a few ms; the request's own time


class Arrivals(ThreadingHTTPServer):
    """Records when (this host's clock, epoch ms) each job's webhook arrived."""

    def __init__(self) -> None:
        self.arrived_ms: dict[str, int] = {}
        super().__init__(("127.0.0.1", 0), _Hit)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/run"


class _Hit(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        arrived_ms = time.time_ns() // 1_000_000
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        server = self.server
        assert isinstance(server, Arrivals)
        server.arrived_ms.setdefault(self.headers["X-Kafkron-Job-Id"], arrived_ms)
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def arrivals() -> Iterator[Arrivals]:
    server = Arrivals()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def start_skewed(
    name: str, skew_ms: int, module: str, kafka: KafkaSettings, log_dir: Path, **env: str
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "KAFKRON_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "KAFKRON_NAMESPACE": kafka.namespace,
        "KAFKRON_PARTITIONS": str(kafka.partitions),
        "KAFKRON_STATE_DIR": str(kafka.state_dir / name),
        **env,
    }
    argv = [sys.executable, "-m", "tests.services.skewed_clock", str(skew_ms), module]
    with (log_dir / f"{name}.log").open("ab") as log:  # the child keeps its own descriptor
        return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def logs(log_dir: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in log_dir.glob("*.log"))


@pytest.mark.parametrize(
    ("timer_skew_ms", "executor_skew_ms"),
    [(30_000, -30_000), (30_000, 30_000)],
    ids=["timer-ahead-executor-behind", "both-ahead"],
)
def test_runs_start_at_their_time_by_the_brokers_clock(
    topics: KafkaSettings,
    arrivals: Arrivals,
    tmp_path: Path,
    timer_skew_ms: int,
    executor_skew_ms: int,
) -> None:
    processes = [
        start_skewed(
            "timer", timer_skew_ms, "services.timer.main", topics, tmp_path,
            KAFKRON_TIMER_INSTANCE_ID="skewed-timer",
        ),
        start_skewed(
            "executor", executor_skew_ms, "services.executor.main", topics, tmp_path,
            KAFKRON_EXECUTOR_WORKER_ID="skewed-executor",
            KAFKRON_EXECUTOR_LOAD_ENTRY_POINTS="false",
            KAFKRON_EXECUTOR_HTTP_ROUTES=json.dumps({"skew.hit": arrivals.url}),
            KAFKRON_EXECUTOR_ALLOWED_HTTP_HOSTS=json.dumps(["127.0.0.1"]),
        ),
    ]  # fmt: skip
    try:
        probes = {
            "timer": group_probe(topics, f"{topics.namespace}timer"),
            "executor": group_probe(topics, f"{topics.namespace}executor"),
        }
        answers = wait_until_ready(
            probes, 120, lambda: any(p.poll() is not None for p in processes)
        )
        assert all(a.ready for a in answers.values()), f"{answers}\n{logs(tmp_path)}"
        first_ms = time.time_ns() // 1_000_000 + LEAD_MS
        run_at = {f"skew-{i}": first_ms + i * 150 for i in range(JOBS)}
        with KafkronClient(IngestSettings(kafka=topics)) as client:
            client.submit_many(
                [{"job_id": j, "handler": "skew.hit", "run_at": t} for j, t in run_at.items()]
            )
        deadline = time.monotonic() + LEAD_MS / 1000 + 60
        while len(arrivals.arrived_ms) < JOBS and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
    assert set(arrivals.arrived_ms) == set(run_at), logs(tmp_path)
    early = {j: run_at[j] - t for j, t in arrivals.arrived_ms.items() if t < run_at[j]}
    assert all(ms <= EARLY_TOLERANCE_MS for ms in early.values()), (early, logs(tmp_path))
    lateness_ms = sorted(t - run_at[j] for j, t in arrivals.arrived_ms.items())
    assert lateness_ms[-1] < 5_000, (lateness_ms, logs(tmp_path))
    # Each process said how far off its own clock is.
    for name, skew_ms in (("timer", timer_skew_ms), ("executor", executor_skew_ms)):
        said = re.findall(
            r"this host's clock is ([+-]\d+) ms", (tmp_path / f"{name}.log").read_text()
        )
        assert said and abs(int(said[0]) - skew_ms) < 100, (name, said, logs(tmp_path))
