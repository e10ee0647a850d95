"""kafkron's services as child processes of a test or of ``bench.chaos``, and the fire
ledger read back from ``job-results``.

A :class:`Fleet` runs the timer, the dag processor and the executor of one namespace
(``python -m services.cli <service>``), each with its own state directory and log, and
stops, kills, pauses (SIGSTOP) or restarts any of them; two fleets of different names on one
namespace are two instances of each service. Handlers are ``bench/effects.py``'s
``tests.effect`` and ``chaos.dedup`` (each run appends lines to an effects file, so runs are
counted across processes). :class:`Ledger` reads ``job-results`` ``read_committed`` and
counts the final outcomes of each execution: invariant 1 of docs/architecture.md is that
each nominal fire has exactly one.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from bench.effects import DEDUP_SPEC, EFFECT_SPEC, EFFECTS_ENV, effects
from services.executor.settings import DEFAULT_HANDLER_SPECS
from services.readiness import group_probe, wait_until_ready
from streams.codec import Codec, RecordKind
from streams.identity import execution_id
from streams.settings import KafkaSettings
from streams.topics import TopicNames

ROOT = Path(__file__).resolve().parents[1]
CODEC = Codec.from_directory()

FINAL_STATUSES = frozenset(
    {"SUCCEEDED", "DEAD_LETTER", "SKIPPED", "MISSED", "CANCELLED", "UPSTREAM_FAILED"}
)
SERVICES = ("timer", "dag", "executor")
_ID_ENV = {
    "timer": "KAFKRON_TIMER_INSTANCE_ID",
    "dag": "KAFKRON_DAG_INSTANCE_ID",
    "executor": "KAFKRON_EXECUTOR_WORKER_ID",
}
_GROUP = {"timer": "timer", "dag": "dag", "executor": "executor"}


class Fleet:
    """The services of one namespace, as child processes with logs in ``base/logs``."""

    def __init__(self, kafka: KafkaSettings, base: Path, name: str = "fleet") -> None:
        self.kafka = kafka
        self.name = name
        self.state_root = base / "state" / name
        self.log_dir = base / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.effects_path = base / "effects.log"  # shared by every fleet of a test
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.exit_codes: dict[str, list[int]] = {}

    def member(self, service: str) -> str:
        return f"{self.name}-{service}"

    def state_dir(self, service: str) -> Path:
        return self.state_root / service

    def env(self, service: str, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "KAFKRON_BOOTSTRAP_SERVERS": self.kafka.bootstrap_servers,
            "KAFKRON_NAMESPACE": self.kafka.namespace,
            "KAFKRON_PARTITIONS": str(self.kafka.partitions),
            "KAFKRON_STATE_DIR": str(self.state_dir(service)),
            _ID_ENV[service]: self.member(service),
            f"KAFKRON_{service.upper()}_METRICS_PORT": "0",
            "KAFKRON_EXECUTOR_COMMIT_INTERVAL_MS": "100",
            "KAFKRON_EXECUTOR_LOAD_ENTRY_POINTS": "false",
            "KAFKRON_EXECUTOR_HANDLER_SPECS": json.dumps(
                [EFFECT_SPEC, DEDUP_SPEC, *DEFAULT_HANDLER_SPECS]
            ),
            EFFECTS_ENV: str(self.effects_path),
            **extra,
        }

    def start(self, *services: str, wait: bool = True, **extra_env: str) -> None:
        """Start ``services`` (default: all three) and, with ``wait``, wait until each has
        partitions."""
        names = services or SERVICES
        for service in names:
            assert not self.alive(service), f"{service} is running already"
            log_path = self.log_dir / f"{self.name}-{service}.log"
            with log_path.open("ab") as log:  # the child keeps its own descriptor
                log.write(f"--- start {time.strftime('%H:%M:%S')}\n".encode())
                log.flush()
                self.processes[service] = subprocess.Popen(
                    [sys.executable, "-m", "services.cli", service],
                    env=self.env(service, **extra_env),
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
        if wait:
            self.wait_ready(names)

    def wait_ready(self, services: Iterable[str], timeout_s: float = 90.0) -> None:
        probes = {
            s: group_probe(self.kafka, f"{self.kafka.namespace}{_GROUP[s]}", self.member(s))
            for s in services
        }
        answers = wait_until_ready(
            probes, timeout_s, lambda: any(not self.alive(s) for s in probes)
        )
        assert all(a.ready for a in answers.values()), f"{answers}\n{self.logs()}"

    def alive(self, service: str) -> bool:
        process = self.processes.get(service)
        return process is not None and process.poll() is None

    def pid(self, service: str) -> int:
        return self.processes[service].pid

    def kill(self, service: str) -> int | None:
        """SIGKILL: no commit, no leaving the group; its exit code."""
        if self.alive(service):
            self.processes[service].kill()
        return self.wait_exit(service, 30.0)

    def pause(self, service: str) -> None:
        """SIGSTOP: the process holds its partitions, sockets and transaction, frozen."""
        self.processes[service].send_signal(signal.SIGSTOP)

    def resume(self, service: str) -> None:
        self.processes[service].send_signal(signal.SIGCONT)

    def stop(self, *services: str, timeout_s: float = 30.0) -> None:
        """SIGTERM (a final commit, leaving the group), SIGKILL after ``timeout_s``; a
        paused service is continued first."""
        names = services or tuple(self.processes)
        for service in names:
            if self.alive(service):
                self.processes[service].send_signal(signal.SIGCONT)
                self.processes[service].send_signal(signal.SIGTERM)
        for service in names:
            self.wait_exit(service, timeout_s, kill_after=True)

    def wait_exit(self, service: str, timeout_s: float, kill_after: bool = False) -> int | None:
        """Wait for ``service`` to exit; its exit code (None: still running)."""
        process = self.processes.get(service)
        if process is None:
            return None
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            if not kill_after:
                return None
            process.kill()
            code = process.wait()
        self.processes.pop(service)
        self.exit_codes.setdefault(service, []).append(code)
        return code

    def delete_state(self, service: str) -> None:
        shutil.rmtree(self.state_dir(service))

    def partition_dirs(self, service: str) -> list[Path]:
        """Every store partition's RocksDB directory of ``service``
        (``<state>/<group>/<store>/<partition>``)."""
        return sorted(p for p in self.state_dir(service).glob("*/*/*") if p.name.isdigit())

    def log(self, service: str) -> str:
        path = self.log_dir / f"{self.name}-{service}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}"
            for p in sorted(self.log_dir.glob("*.log"))
        )

    def effects(self) -> Counter[tuple[str, str]]:
        return effects(self.effects_path)


class TopicReader:
    """Reads topics of the namespace from the start; keeps every record it read."""

    def __init__(
        self, settings: KafkaSettings, bases: Iterable[str], isolation: str = "read_committed"
    ) -> None:
        names = TopicNames(settings.namespace)
        self.topics = [names.name(b) for b in bases]
        self._consumer = Consumer(
            settings.client_config(
                **{"group.id": f"test-reader-{uuid.uuid4().hex[:8]}", "isolation.level": isolation,
                   "enable.auto.commit": False}
            )
        )  # fmt: skip
        self._consumer.assign(
            [TopicPartition(t, p, 0) for t in self.topics for p in range(settings.partitions)]
        )
        self.records: list[tuple[str, int, int, bytes | None, bytes]] = []

    def poll(self, timeout_s: float = 0.2) -> None:
        for message in self._consumer.consume(10_000, timeout_s):
            if message.error() is None:
                self.records.append(
                    (message.topic() or "", message.partition() or 0, message.offset() or 0,
                     message.key(), message.value() or b"")
                )  # fmt: skip

    def decoded(self, base: str, kind: RecordKind) -> list[dict[str, Any]]:
        topic = next(t for t in self.topics if t.endswith(base))
        return [CODEC.decode(kind, r[4]) for r in self.records if r[0] == topic]

    def results(self) -> list[dict[str, Any]]:
        return self.decoded("job-results", RecordKind.EXECUTION_RESULT)

    def wait_for(
        self, done: Callable[[TopicReader], bool], timeout_s: float = 60.0, what: str = ""
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while not done(self):
            if time.monotonic() > deadline:
                raise TimeoutError(f"not within {timeout_s}s: {what} ({len(self.records)} read)")
            self.poll()

    def close(self) -> None:
        self._consumer.close()


class Ledger:
    """Every result on ``job-results`` of one namespace, read ``read_committed``."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self._reader = TopicReader(kafka, ["job-results"])

    def results(self) -> list[dict[str, Any]]:
        self._reader.poll(0.2)
        return self._reader.results()

    def finals(self) -> Counter[str]:
        """How many final outcomes each execution has."""
        return Counter(r["execution_id"] for r in self.results() if r["status"] in FINAL_STATUSES)

    def final_statuses(self) -> dict[str, list[str]]:
        """Each execution's final outcomes, in the order read."""
        found: dict[str, list[str]] = {}
        for result in self.results():
            if result["status"] in FINAL_STATUSES:
                found.setdefault(result["execution_id"], []).append(result["status"])
        return found

    def wait_for(self, wanted: set[str], timeout_s: float) -> Counter[str]:
        """Read until every execution in ``wanted`` has a final outcome, then 2 s more (a
        late duplicate would show there); returns the final outcomes per execution."""
        deadline = time.monotonic() + timeout_s
        while not wanted <= set(self.finals()) and time.monotonic() < deadline:
            time.sleep(0.2)
        quiet_until = time.monotonic() + 2.0
        while time.monotonic() < quiet_until:
            self.results()
        return self.finals()

    def close(self) -> None:
        self._reader.close()


def ticks(start_ms: int, end_ms: int, every_ms: int) -> Iterator[int]:
    """The ticks of a schedule every ``every_ms`` from ``start_ms`` (on the grid) to ``end_ms``,
    end excluded."""
    return iter(range(start_ms, end_ms, every_ms))


def executions(job_id: str, fire_times_ms: Iterable[int]) -> set[str]:
    return {execution_id(job_id, t) for t in fire_times_ms}


def whole_second_ms(at_ms: int) -> int:
    """The first whole second at or after ``at_ms``."""
    return -(-at_ms // 1000) * 1000


def cron_every_second(job_id: str, start_ms: int, end_ms: int, **fields: Any) -> dict[str, Any]:
    """A job request firing every second in [start_ms, end_ms), catching up on every tick
    and letting its runs overlap (so that a catch-up runs every tick, none is SKIPPED)."""
    return {
        "job_id": job_id,
        "handler": "tests.effect",
        "payload": 0,
        "cron": {"expression": "* * * * * *", "start": start_ms, "end": end_ms},
        "catchup": "all",
        "overlap": "allow",
        **fields,
    }


def one_off(job_id: str, run_at_ms: int) -> dict[str, Any]:
    return {"job_id": job_id, "handler": "tests.effect", "payload": 0, "run_at": run_at_ms}
