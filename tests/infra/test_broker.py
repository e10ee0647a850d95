"""The project's own broker: fetched, formatted, started idempotently, stopped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from infra.broker import LocalBroker, free_port
from infra.home_version import recorded_version
from infra.settings import BrokerSettings
from streams.exceptions import BrokerError
from tests.rocksdb_holder import held_open

ROOT = Path(__file__).resolve().parents[2]
LIBS = ROOT / ".state" / "kafka-libs"

pytestmark = pytest.mark.kafka


def _settings(home: Path) -> BrokerSettings:
    return BrokerSettings(home=home, libs_dir=LIBS, port=free_port(), controller_port=free_port())


def _index_file_sizes(bootstrap: str, data_dir: Path) -> dict[str, int]:
    """Create a topic of one partition; the sizes of its first segment's index files."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("index-sizes", 1, 1)])["index-sizes"].result(30)
    segment = data_dir / "index-sizes-0" / "00000000000000000000.log"
    deadline = time.monotonic() + 30
    while not segment.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return {
        suffix: segment.with_suffix(suffix).stat().st_size for suffix in (".index", ".timeindex")
    }


def test_start_is_ready_within_deadline_idempotent_and_stops(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "broker").model_copy(
        update={"jvm_options": "-XX:+UseSerialGC -Dkafkron.test='a b'"}
    )
    broker = LocalBroker(settings)
    started = time.monotonic()
    state = broker.start()
    ready_s = time.monotonic() - started
    try:
        assert ready_s < 120, f"broker took {ready_s:.1f}s to answer"
        arguments = Path(f"/proc/{state.pid}/cmdline").read_bytes().split(b"\0")
        assert b"-XX:+UseSerialGC" in arguments, "jvm_options reach the JVM"
        assert b"-Dkafkron.test=a b" in arguments, "jvm_options split like a shell"
        assert broker.answers(state.bootstrap)
        again = broker.start()
        assert again.pid == state.pid, "a running broker is reused, not started twice"
        assert "Kafka Server started" in (tmp_path / "broker/logs/server.log").read_text()
        assert recorded_version(broker.home) == settings.kafka_version, "the home's Kafka"
        assert _index_file_sizes(state.bootstrap, broker.home / "data") == {
            ".index": 1_048_576,  # 131,072 entries of 8 bytes
            ".timeindex": 1_048_572,  # 87,381 entries of 12 bytes
        }, "sparse index files of 1 MiB, not Kafka's 10 MiB (infra/server.properties)"
    finally:
        assert broker.stop()
    assert broker.running_state() is None
    assert not broker.stop(), "stopping a stopped broker reports that none ran"


def test_failed_start_reports_the_log(tmp_path: Path) -> None:
    taken = free_port()
    settings = BrokerSettings(
        home=tmp_path / "broker", libs_dir=LIBS, port=taken, controller_port=taken,
        start_timeout_s=60,
    )  # fmt: skip
    with pytest.raises(BrokerError) as error:
        LocalBroker(settings).start()
    assert "broker" in str(error.value)
    LocalBroker(settings).stop()


def _up_env(tmp_path: Path) -> dict[str, str]:
    return dict(
        os.environ,
        KAFKRON_BROKER_HOME=str(tmp_path / "up-broker"),
        KAFKRON_BROKER_LIBS_DIR=str(LIBS),
        KAFKRON_BROKER_PORT=str(free_port()),
        KAFKRON_NAMESPACE="upcheck.",
        KAFKRON_PARTITIONS="2",
        KAFKRON_STATE_DIR=str(tmp_path / "state"),
        KAFKRON_INGEST_HTTP_PORT=str(free_port()),
    )


def test_up_runs_the_demo_end_to_end_and_cleans_up(tmp_path: Path) -> None:
    env = _up_env(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "up", "--demo", "--check"],
        env=env, capture_output=True, text=True, timeout=240, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[kafkron] ready:" in done.stdout
    assert "upcheck.jobs" in done.stdout
    assert "ready: broker, topics, timer, dag, executor, api" in done.stdout
    lines = done.stdout.splitlines()
    # "ready" comes only after every service answered its probe (services/readiness.py).
    ready_at = next(i for i, line in enumerate(lines) if "[kafkron] ready:" in line)
    for serving in ("timer serving (group upcheck.timer (member timer-",
                    "dag serving (group upcheck.dag (member dag-",
                    "executor serving (group upcheck.executor (member executor-",
                    "api serving (http://127.0.0.1:"):  # fmt: skip
        assert any(serving in line for line in lines[:ready_at]), done.stdout
    # Each one-off of the demo reaches its final outcome through timer and executor.
    assert any("demo-echo-" in line and "SUCCEEDED" in line for line in lines), done.stdout
    assert any("demo-flaky-" in line and "attempt 2: SUCCEEDED" in line for line in lines)
    assert any("demo-fail-" in line and "DEAD_LETTER" in line for line in lines)
    assert any("demo-cron-" in line and "SUCCEEDED" in line for line in lines)
    # The six-node DAG: publish runs after its upstreams, in a run of the roots' tick.
    assert any("demo-publish-" in line and "SUCCEEDED" in line for line in lines), done.stdout
    assert LocalBroker(BrokerSettings(home=tmp_path / "up-broker")).running_state() is None
    assert "service(s) exited" not in done.stdout, done.stdout


def test_up_check_fails_when_a_service_died(tmp_path: Path) -> None:
    """The API cannot open a status view another process holds: ``up --demo --check`` says
    which service exited and fails, where it used to report success after the demo."""
    with held_open(tmp_path / "state" / "ingest-view"):
        done = subprocess.run(
            [sys.executable, "-m", "services.cli", "up", "--demo", "--check"],
            env=_up_env(tmp_path), capture_output=True, text=True, timeout=240, cwd=ROOT,
        )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "[kafkron] service(s) exited: api; shutting down" in done.stdout
    assert "is open in another process" in done.stderr, done.stderr
    assert LocalBroker(BrokerSettings(home=tmp_path / "up-broker")).running_state() is None
