"""A whole kafkron (timer, dag processor, executor, API) as child processes on the session
broker, for the dashboard's browser tests and its README screenshot.

Like ``tests/services/operator_cli/conftest.py``'s cluster, plus the dag processor and the
``tests.fails_first`` handler (:mod:`.dashboard_handlers`), on a namespace of its own whose
topics are deleted when it stops.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from infra.broker import free_port
from services import commands
from services.executor.settings import DEFAULT_HANDLER_SPECS
from services.local_cluster import ServiceProcess, stop_services
from services.readiness import http_probe, wait_until_ready
from streams.admin import ensure_topics
from streams.settings import KafkaSettings
from tests.conftest import ROOT, _delete_topics
from tests.services.ingest.dashboard_handlers import FAILS_FIRST_SPEC, SEEN_DIR_ENV

SERVICES = ("timer", "dag", "executor", "api")


@dataclass
class Cluster:
    """Where a running test cluster is: its Kafka settings, API URL and log folder."""

    kafka: KafkaSettings
    api_url: str
    log_dir: Path
    env: dict[str, str]

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in self.log_dir.iterdir())


@contextmanager
def running_cluster(bootstrap: str, base: Path, partitions: int = 2) -> Iterator[Cluster]:
    """Every service on a fresh namespace, serving; stopped (topics deleted) at the end."""
    namespace = f"ui{uuid.uuid4().hex[:10]}."
    kafka = KafkaSettings(
        bootstrap_servers=bootstrap, namespace=namespace, partitions=partitions,
        state_dir=base / "state",
    )  # fmt: skip
    ensure_topics(kafka)
    port = free_port()
    (base / "seen").mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "KAFKRON_BOOTSTRAP_SERVERS": bootstrap,
        "KAFKRON_NAMESPACE": namespace,
        "KAFKRON_PARTITIONS": str(partitions),
        "KAFKRON_STATE_DIR": str(base / "state"),
        "KAFKRON_INGEST_HTTP_PORT": str(port),
        "KAFKRON_EXECUTOR_COMMIT_INTERVAL_MS": "100",
        "KAFKRON_EXECUTOR_HANDLER_SPECS": json.dumps([FAILS_FIRST_SPEC, *DEFAULT_HANDLER_SPECS]),
        SEEN_DIR_ENV: str(base / "seen"),
    }
    log_dir = base / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    services = [ServiceProcess(n, [sys.executable, "-m", "services.cli", n]) for n in SERVICES]
    logs = [(log_dir / f"{s.name}.log").open("ab") for s in services]
    try:
        for service, log in zip(services, logs, strict=True):
            service.process = subprocess.Popen(
                service.argv, env=env, cwd=ROOT, stdout=log, stderr=log
            )
        cluster = Cluster(kafka, f"http://127.0.0.1:{port}", log_dir, env)
        probes = {s.name: commands.READINESS[s.name](kafka, s.pid) for s in services[:3]}
        probes["api"] = http_probe(f"{cluster.api_url}/healthz")  # its port is in env only
        answers = wait_until_ready(probes, 120, lambda: not all(s.alive() for s in services))
        waiting = [f"{n}: {a.detail}" for n, a in answers.items() if not a.ready]
        if waiting:
            raise AssertionError(f"not serving: {waiting}\n{cluster.logs()}")
        yield cluster
    finally:
        stop_services(services)
        for log in logs:
            log.close()
        _delete_topics(bootstrap, namespace)


@contextmanager
def another_api(cluster: Cluster, view_dir: Path, **env: str) -> Iterator[str]:
    """One more API process on the cluster's namespace, with its own view, port and ``env``
    (e.g. ``KAFKRON_INGEST_TOKENS_FILE``); yields its URL once it serves."""
    port = free_port()
    service = ServiceProcess("api-2", [sys.executable, "-m", "services.cli", "api"])
    settings = {"KAFKRON_INGEST_HTTP_PORT": str(port), "KAFKRON_INGEST_VIEW_DIR": str(view_dir)}
    with (cluster.log_dir / "api-2.log").open("ab") as log:
        service.process = subprocess.Popen(
            service.argv, env={**cluster.env, **settings, **env}, cwd=ROOT, stdout=log,
            stderr=log,
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            answers = wait_until_ready({"api-2": http_probe(f"{url}/healthz")}, 120,
                                       lambda: not service.alive())  # fmt: skip
            if not answers["api-2"].ready:
                raise AssertionError(f"api-2 not serving: {answers}\n{cluster.logs()}")
            yield url
        finally:
            service.stop()
