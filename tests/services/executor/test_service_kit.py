"""Helpers of the executor's broker tests; no tests here.

Due records, readers of the output topics, an executor on a thread or in a child process,
a stand-in for the timer's retry wheel; ``record_effect`` (a handler that appends its
effects to the file named by ``KAFKRON_TEST_EFFECTS`` so that tests count runs per
execution across processes) and ``TopicReader`` live in bench/ (``bench.effects``,
``bench.fleet``), which ``bench.chaos`` shares, and are imported here for the tests.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from bench.effects import EFFECT_SPEC as EFFECT_SPEC
from bench.effects import EFFECTS_ENV as EFFECTS_ENV
from bench.effects import append_line as append_line
from bench.effects import effects as effects
from bench.effects import record_effect as record_effect
from bench.fleet import TopicReader as TopicReader
from services.executor.handlers import HandlerRegistry
from services.executor.loop import ExecutorLoop
from services.executor.service import build_registry, serve
from services.executor.settings import DEFAULT_HANDLER_SPECS, ExecutorSettings
from services.executor.stats import ExecutorStats
from streams.codec import Codec, RecordKind
from streams.kafka.partitioner import PARTITION_UA
from streams.settings import KafkaSettings
from streams.topics import Priority, TopicNames

ROOT = Path(__file__).resolve().parents[3]
CODEC = Codec.from_directory()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def due_event(job_id: str, scheduled_for_ms: int | None = None, **fields: Any) -> dict[str, Any]:
    """An encodable first-attempt DueEvent; ``max_attempts`` and friends go into ``retry``."""
    tick = now_ms() if scheduled_for_ms is None else scheduled_for_ms
    retry = {"max_attempts": 3, "initial_backoff_ms": 300, "multiplier": 2.0,
             "max_backoff_ms": 60_000, "jitter_ratio": 0.1}  # fmt: skip
    for name in list(retry):
        if name in fields:
            retry[name] = fields.pop(name)
    record: dict[str, Any] = {
        "execution_id": f"{job_id}@{tick}",
        "job_id": job_id,
        "job_version": 1,
        "scheduled_for_ms": tick,
        "fire_at_ms": tick,
        "attempt": 1,
        "handler": "examples.noop",
        "payload": b"",
        "timeout_ms": 10_000,
        "priority": "NORMAL",
        "retry": retry,
        "trigger": "SCHEDULE",
        "tenant": "default",
        "emitted_at_ms": now_ms(),
        "history": [],
    }
    record.update(fields)
    return record


def produce(
    settings: KafkaSettings, records: Iterable[tuple[str, bytes | None, bytes | None, int | None]]
) -> list[tuple[str, int, int]]:
    """Produce (topic, key, value, partition or None); returns where each landed, in order."""
    producer = Producer(
        settings.client_config(
            **{"enable.idempotence": True, "acks": "all", "linger.ms": 5,
               "partitioner": "murmur2_random", "queue.buffering.max.messages": 500_000}
        )
    )  # fmt: skip
    landed: dict[int, tuple[str, int, int]] = {}
    count = 0
    for topic, key, value, partition in records:

        def _report(error: Any, message: Any, i: int = count) -> None:
            assert error is None, error
            landed[i] = (message.topic(), message.partition(), message.offset())

        chosen = PARTITION_UA if partition is None else partition
        while True:
            try:
                producer.produce(topic, value, key, partition=chosen, on_delivery=_report)
                break
            except BufferError:
                producer.poll(0.05)
        count += 1
    assert producer.flush(60) == 0
    return [landed[i] for i in range(count)]


def produce_due(
    settings: KafkaSettings, events: Iterable[dict[str, Any]], partition: int | None = None
) -> list[tuple[str, int, int]]:
    """Produce DueEvents to ``due.<priority>`` keyed by job id (or to one partition)."""
    names = TopicNames(settings.namespace)
    return produce(
        settings,
        (
            (names.due(Priority(e["priority"])), e["job_id"].encode(),
             CODEC.encode(RecordKind.DUE_EVENT, e), partition)
            for e in events
        ),
    )  # fmt: skip


def finals(results: Iterable[dict[str, Any]]) -> Counter[str]:
    """How many final results (SUCCEEDED or DEAD_LETTER) each execution has."""
    return Counter(
        r["execution_id"] for r in results if r["status"] in ("SUCCEEDED", "DEAD_LETTER")
    )


def executor_settings(kafka: KafkaSettings, worker_id: str, **fields: Any) -> ExecutorSettings:
    """Settings for a test executor: fast commits, entry points off."""
    values: dict[str, Any] = {
        "kafka": kafka.model_copy(update={"state_dir": kafka.state_dir / worker_id}),
        "worker_id": worker_id,
        "commit_interval_ms": 100,
        "load_entry_points": False,
        "revoke_grace_s": 5.0,
        "metrics_port": 0,  # many at once: a test that scrapes gives its own port
    }
    values.update(fields)
    return ExecutorSettings(**values)


class ExecutorThread:
    """One executor (``serve``) on its own thread and event loop, inside the test process."""

    def __init__(self, settings: ExecutorSettings, registry: HandlerRegistry | None = None):
        self.settings = settings
        self.registry = registry if registry is not None else build_registry(settings)
        self.stop_event = threading.Event()
        self.errors: list[BaseException] = []
        self.stats: ExecutorStats | None = None
        self._loop: Future[ExecutorLoop] = Future()
        self._thread = threading.Thread(target=self._run, name=settings.worker_id, daemon=True)

    def start(self) -> ExecutorThread:
        self._thread.start()
        return self

    @property
    def loop(self) -> ExecutorLoop:
        return self._loop.result(timeout=30)

    def _run(self) -> None:
        async def main() -> None:
            ready: asyncio.Future[ExecutorLoop] = asyncio.get_running_loop().create_future()
            ready.add_done_callback(lambda f: self._loop.set_result(f.result()))
            self.stats = await serve(self.settings, self.stop_event, self.registry,
                                     loop_ready=ready)  # fmt: skip

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported by stop()
            self.errors.append(exc)

    def wait_ready(self, partitions: int, timeout_s: float = 60.0) -> None:
        """Until the executor runs records of ``partitions`` x 3 due partitions."""
        deadline = time.monotonic() + timeout_s
        while len(self.loop.ready_partitions()) < 3 * partitions:
            assert not self.errors, self.errors
            assert time.monotonic() < deadline, self.loop.ready_partitions()
            time.sleep(0.05)

    def alive(self) -> bool:
        """True while the executor runs and has raised nothing."""
        return self._thread.is_alive() and not self.errors

    def stop(self, timeout_s: float = 60.0) -> ExecutorStats:
        self.stop_event.set()
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "the executor did not stop"
        assert not self.errors, self.errors
        assert self.stats is not None
        return self.stats


class ExecutorProcess:
    """One ``kafkron executor`` child (``python -m services.cli executor``), own id and state."""

    def __init__(self, kafka: KafkaSettings, worker_id: str, log_dir: Path, **env: str) -> None:
        self.worker_id = worker_id
        self.log_path = log_dir / f"{worker_id}.log"
        self.effects_path = log_dir / "effects.log"
        specs = [EFFECT_SPEC, *DEFAULT_HANDLER_SPECS]
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "KAFKRON_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
            "KAFKRON_NAMESPACE": kafka.namespace,
            "KAFKRON_PARTITIONS": str(kafka.partitions),
            "KAFKRON_STATE_DIR": str(kafka.state_dir / worker_id),
            "KAFKRON_EXECUTOR_WORKER_ID": worker_id,
            "KAFKRON_EXECUTOR_COMMIT_INTERVAL_MS": "100",
            "KAFKRON_EXECUTOR_LOAD_ENTRY_POINTS": "false",
            "KAFKRON_EXECUTOR_HANDLER_SPECS": json.dumps(specs),
            "KAFKRON_EXECUTOR_METRICS_PORT": "0",  # a test that scrapes gives its own port
            EFFECTS_ENV: str(self.effects_path),
            **env,
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> ExecutorProcess:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "services.cli", "executor"], env=self.env, cwd=ROOT,
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        return self

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL: no commit, no leaving the group."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self, timeout_s: float = 30.0) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class RetryMover:
    """Stands in for the timer's retry wheel: RetryRequest -> its DueEvent at ``fire_at_ms``."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._reader = TopicReader(settings, ["retry"])
        self._names = TopicNames(settings.namespace)
        self.moved: list[tuple[int, dict[str, Any]]] = []  # (produced at ms, DueEvent)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="retry-mover", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        waiting: list[tuple[int, int, dict[str, Any]]] = []
        seen = 0
        while not self._stop.is_set():
            self._reader.poll(0.02)
            for _, _, _, _, value in self._reader.records[seen:]:
                due = CODEC.decode(RecordKind.RETRY_REQUEST, value)["due"]
                heapq.heappush(waiting, (due["fire_at_ms"], seen, due))
                seen += 1
            while waiting and waiting[0][0] <= now_ms():
                _, _, due = heapq.heappop(waiting)
                produce_due(self._settings, [due])
                self.moved.append((now_ms(), due))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._reader.close()
