"""The local cluster of several KRaft nodes: its layout, and on real JVMs ``kafkron up`` and
``kafkron broker start|status|stop --brokers 3`` with topics of 3 replicas."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource

from infra.broker import free_port
from infra.cluster import LocalCluster, replication_of
from infra.settings import BrokerSettings
from streams.exceptions import BrokerError

ROOT = Path(__file__).resolve().parents[2]
Completed = subprocess.CompletedProcess[str]
LIBS = ROOT / ".state" / "kafka-libs"


@pytest.mark.parametrize(
    ("nodes", "expected"), [(1, (1, 1)), (2, (2, 1)), (3, (3, 2)), (5, (3, 2))]
)
def test_replication_of_a_cluster(nodes: int, expected: tuple[int, int]) -> None:
    assert replication_of(nodes) == expected


def test_layout_numbers_the_nodes_from_the_port_and_keeps_it(tmp_path: Path) -> None:
    settings = BrokerSettings(home=tmp_path, count=3, port=19092, controller_port=19192)
    nodes = LocalCluster(settings).nodes()
    assert [(n.node_id, n.settings.port, n.settings.controller_port) for n in nodes] == [
        (1, 19092, 19192),
        (2, 19093, 19193),
        (3, 19094, 19194),
    ]
    assert [n.home for n in nodes] == [tmp_path / f"node-{i}" for i in (1, 2, 3)]
    assert nodes[0].membership is not None
    assert nodes[0].membership.voters == "1@127.0.0.1:19192,2@127.0.0.1:19193,3@127.0.0.1:19194"
    layout = json.loads((tmp_path / "cluster.json").read_text())
    again = LocalCluster(settings.model_copy(update={"port": 0})).nodes()
    assert [n.settings.port for n in again] == [19092, 19093, 19094], "recorded ports stay"
    assert json.loads((tmp_path / "cluster.json").read_text()) == layout
    with pytest.raises(BrokerError, match="has 3 nodes, not 5"):
        LocalCluster(settings.model_copy(update={"count": 5})).nodes()


def test_free_ports_are_distinct_and_nothing_runs(tmp_path: Path) -> None:
    cluster = LocalCluster(BrokerSettings(home=tmp_path, count=3, port=0, controller_port=0))
    ports = [(n.settings.port, n.settings.controller_port) for n in cluster.nodes()]
    assert len({p for pair in ports for p in pair}) == 6
    assert cluster.running_nodes() == []
    assert cluster.running_state() is None
    assert cluster.active_controller() is None
    assert not cluster.stop()


def _env(tmp_path: Path) -> dict[str, str]:
    return dict(
        os.environ,
        KAFKRON_BROKER_HOME=str(tmp_path / "cluster"),
        KAFKRON_BROKER_LIBS_DIR=str(LIBS),
        KAFKRON_BROKER_PORT="0",
        KAFKRON_BROKER_COUNT="3",
        KAFKRON_BROKER_HEAP_MB="512",
        KAFKRON_NAMESPACE="three.",
        KAFKRON_PARTITIONS="2",
        KAFKRON_STATE_DIR=str(tmp_path / "state"),
        KAFKRON_INGEST_HTTP_PORT=str(free_port()),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
    )


def _kafkron(env: dict[str, str], *args: str, timeout_s: float = 240) -> Completed:
    """Run ``kafkron ARGS`` in a session of its own; past ``timeout_s`` kill it with the
    services it started and fail with what it printed."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "services.cli", *args],
            env=env, cwd=ROOT, stdout=out, stderr=err, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            out.seek(0)
            err.seek(0)
            pytest.fail(
                f"kafkron {' '.join(args)} still ran after {timeout_s:.0f} s; it printed:\n"
                f"{out.read()}\n{err.read()[-4000:]}"
            )
        out.seek(0)
        err.seek(0)
        return Completed(process.args, process.returncode, out.read(), err.read())


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.timeout(500)
def test_up_on_three_brokers_then_broker_start_status_stop(tmp_path: Path) -> None:
    """``kafkron up`` with KAFKRON_BROKER_COUNT=3 runs every service on a 3-node cluster whose
    topics (the services' changelogs too) have 3 replicas and min.insync.replicas 2; then the
    broker command starts it again, reports a killed node, restarts only that one, stops all."""
    env = _env(tmp_path)
    cluster = LocalCluster(BrokerSettings(home=tmp_path / "cluster", count=3, libs_dir=LIBS))
    try:
        _up_then_broker_commands(env, cluster)
    finally:
        cluster.stop()  # the nodes of an 'up' that was killed run in sessions of their own


def _up_then_broker_commands(env: dict[str, str], cluster: LocalCluster) -> None:
    up = _kafkron(env, "up", "--check", timeout_s=300)
    assert up.returncode == 0, up.stdout + up.stderr
    assert "[kafkron] 3 brokers ready on 127.0.0.1:" in up.stdout
    assert "3 replicas, min.insync.replicas 2" in up.stdout
    assert "ready: broker, topics, timer, dag, executor, api" in up.stdout
    assert cluster.running_nodes() == [], "up stopped every node"

    started = _kafkron(env, "broker", "start")
    assert started.returncode == 0, started.stdout + started.stderr
    assert started.stdout.startswith("3 brokers ready on ")
    try:
        state = cluster.running_state()
        assert state is not None and len(state.nodes) == 3
        _check_replication(AdminClient({"bootstrap.servers": state.bootstrap}))

        controller = cluster.active_controller()
        assert controller in (1, 2, 3)
        assert cluster.node(controller).kill()
        status = _kafkron(env, "broker", "status")
        assert status.returncode == 1
        assert f"broker node {controller}: NOT running" in status.stdout
        assert status.stdout.count(": ready") == 2
        others = {n.pid for n in state.nodes if n.node_id != controller}

        again = _kafkron(env, "broker", "start")
        assert again.returncode == 0, again.stdout + again.stderr
        restarted = cluster.running_state()
        assert restarted is not None and len(restarted.nodes) == 3
        assert others <= set(restarted.pids), "only the killed node was started"
        status = _kafkron(env, "broker", "status")
        assert status.returncode == 0, status.stdout
        assert status.stdout.count(": ready") == 3
        assert "active controller: node " in status.stdout
    finally:
        stopped = _kafkron(env, "broker", "stop")
    assert stopped.stdout.strip() == "broker stopped"
    assert cluster.running_nodes() == []


def _check_replication(admin: AdminClient) -> None:
    """Every kafkron topic and changelog, and Kafka's own, have 3 replicas; kafkron's have
    min.insync.replicas 2."""
    topics = admin.list_topics(timeout=30).topics
    ours = sorted(t for t in topics if t.startswith("three."))
    assert "three.jobs" in ours and "three.changelog.three.timer.jobs" in ours, ours
    for name in [*ours, "__consumer_offsets", "__transaction_state"]:
        replicas = {len(p.replicas) for p in topics[name].partitions.values()}
        assert replicas == {3}, f"{name}: {replicas}"
    resources = [ConfigResource("topic", name) for name in ours]
    for resource, future in admin.describe_configs(resources).items():
        assert future.result()["min.insync.replicas"].value == "2", resource
