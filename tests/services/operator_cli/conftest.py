"""A small kafkron cluster for the command line's tests, on the session broker.

``kafkron timer``, ``kafkron executor`` and ``kafkron api`` run as child processes (the
service commands the CLI registers), on a namespace of this module's own; ``kafkron`` is
then called in-process (``services.cli.main``) with ``KAFKRON_API_URL`` and the Kafka
variables pointing at them and ``KAFKRON_PROFILE`` at a file that does not exist, so the
developer's own profile is never read.
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

import pytest

from infra.broker import free_port
from services import cli, commands
from services.local_cluster import ServiceProcess
from services.readiness import http_probe, wait_until_ready
from streams.admin import ensure_topics
from streams.settings import KafkaSettings
from tests.conftest import ROOT, _delete_topics


@dataclass
class CliCluster:
    """Where the test cluster is: its Kafka settings, API URL and the services' env."""

    kafka: KafkaSettings
    api_url: str
    env: dict[str, str]
    log_dir: Path

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in self.log_dir.iterdir())


@dataclass
class Ran:
    """What one ``kafkron`` call did: exit code, stdout, stderr."""

    code: int
    out: str
    err: str

    def json(self) -> object:
        return json.loads(self.out)


@contextmanager
def running_cli_cluster(
    kafka_bootstrap: str,
    base: Path,
    names: tuple[str, ...] = ("timer", "executor", "api"),
    extra_env: dict[str, str] | None = None,
) -> Iterator[CliCluster]:
    """The services ``names`` on a fresh namespace; stopped (topics deleted) at the end."""
    namespace = f"c{uuid.uuid4().hex[:10]}."
    kafka = KafkaSettings(
        bootstrap_servers=kafka_bootstrap, namespace=namespace, partitions=2,
        state_dir=base / "state",
    )  # fmt: skip
    ensure_topics(kafka)
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "KAFKRON_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "KAFKRON_NAMESPACE": namespace,
        "KAFKRON_PARTITIONS": "2",
        "KAFKRON_STATE_DIR": str(base / "state"),
        "KAFKRON_INGEST_HTTP_PORT": str(port),
        "KAFKRON_EXECUTOR_COMMIT_INTERVAL_MS": "100",
        **(extra_env or {}),
    }
    log_dir = base / "logs"
    log_dir.mkdir()
    services = [
        ServiceProcess(name, [sys.executable, "-m", "services.cli", name]) for name in names
    ]
    logs = [(log_dir / f"{s.name}.log").open("ab") for s in services]
    try:
        for service, log in zip(services, logs, strict=True):
            service.process = subprocess.Popen(
                service.argv, env=env, cwd=ROOT, stdout=log, stderr=log
            )
        cluster = CliCluster(kafka, f"http://127.0.0.1:{port}", env, log_dir)
        probes = {
            s.name: commands.READINESS[s.name](kafka, s.pid) for s in services if s.name != "api"
        }
        probes["api"] = http_probe(f"{cluster.api_url}/healthz")  # its port is in env only
        answers = wait_until_ready(probes, 120, lambda: not all(s.alive() for s in services))
        waiting = [f"{n}: {a.detail}" for n, a in answers.items() if not a.ready]
        assert not waiting, f"{waiting}\n{cluster.logs()}"
        yield cluster
    finally:
        for service in reversed(services):
            service.stop()
        for log in logs:
            log.close()
        _delete_topics(kafka_bootstrap, namespace)


@pytest.fixture(scope="module")
def cli_cluster(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CliCluster]:
    """Timer, executor and API on a fresh namespace; stopped (topics deleted) at the end."""
    with running_cli_cluster(kafka_bootstrap, tmp_path_factory.mktemp("cli-cluster")) as cluster:
        yield cluster


@pytest.fixture
def kafkron(
    cli_cluster: CliCluster,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[object]:
    """``kafkron(*args)``: run the command in-process against the test cluster -> Ran."""
    monkeypatch.setenv("KAFKRON_API_URL", cli_cluster.api_url)
    monkeypatch.setenv("KAFKRON_BOOTSTRAP_SERVERS", cli_cluster.kafka.bootstrap_servers)
    monkeypatch.setenv("KAFKRON_NAMESPACE", cli_cluster.kafka.namespace)
    monkeypatch.setenv("KAFKRON_PROFILE", str(tmp_path / "no-profile.json"))

    def run(*args: str) -> Ran:
        capsys.readouterr()
        code = cli.main(list(args))
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    yield run
