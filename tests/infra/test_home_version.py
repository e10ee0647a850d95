"""A broker home records its Kafka version, and another Kafka refuses to start it (no Java
runs here: the JVM steps of ``LocalBroker`` are replaced where a test gets that far)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infra import broker as broker_module
from infra import home_version
from infra.broker import LocalBroker
from infra.cluster import LocalCluster
from infra.settings import BrokerSettings
from streams.exceptions import BrokerError, KafkronError


def _settings(home: Path, version: str = "4.2.2", count: int = 1) -> BrokerSettings:
    return BrokerSettings(home=home, kafka_version=version, count=count, port=0, controller_port=0)


def _no_java(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_args: object) -> None:
        raise AssertionError("the refusal must come before any jar fetch or JVM")

    monkeypatch.setattr(broker_module, "fetch_jars", fail)
    monkeypatch.setattr(LocalBroker, "_format_once", fail)
    monkeypatch.setattr(LocalBroker, "_spawn", fail)


def _fake_jvm(monkeypatch: pytest.MonkeyPatch, formats: bool) -> None:
    """Launch without Java: no jars, a format that does (or finds done) nothing, this
    process's pid as the broker's, and a broker that answers at once."""
    monkeypatch.setattr(broker_module, "fetch_jars", lambda _settings: Path("/nonexistent"))
    monkeypatch.setattr(LocalBroker, "_format_once", lambda self, libs, config: formats)
    monkeypatch.setattr(LocalBroker, "_spawn", lambda self, libs, config: 1)
    monkeypatch.setattr(LocalBroker, "_wait_ready", lambda self, state, deadline: None)
    monkeypatch.setattr(LocalBroker, "running_state", lambda self: None)


def test_a_record_reads_back_and_a_home_without_one_is_unknown(tmp_path: Path) -> None:
    home = tmp_path / "broker"
    assert home_version.recorded_version(home) is None
    home_version.record_version(home, "4.4.0")
    assert home_version.recorded_version(home) == "4.4.0"
    home_version.record_version(home, "4.2.2")
    assert home_version.recorded_version(home) == "4.2.2"
    assert sorted(p.name for p in home.iterdir()) == ["kafka-version"]


def test_check_passes_the_same_version_and_an_unrecorded_home(tmp_path: Path) -> None:
    home_version.check(tmp_path / "never-written", "4.2.2")
    home_version.record_version(tmp_path, "4.2.2")
    home_version.check(tmp_path, "4.2.2")


def test_check_refuses_another_version_naming_both_the_home_and_the_ways_out(
    tmp_path: Path,
) -> None:
    home_version.record_version(tmp_path, "4.4.0")
    with pytest.raises(BrokerError) as error:
        home_version.check(tmp_path, "4.2.2")
    message = str(error.value)
    assert isinstance(error.value, KafkronError)
    assert "Kafka 4.4.0" in message and "Kafka 4.2.2" in message
    assert f"delete {tmp_path} (its topics and their records are lost)" in message
    assert "KAFKRON_BROKER_KAFKA_VERSION=4.4.0" in message


def test_start_refuses_a_home_of_another_kafka_before_fetching_or_running_java(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "broker"
    home_version.record_version(home, "4.4.0")
    _no_java(monkeypatch)
    broker = LocalBroker(_settings(home, "4.2.2"))
    with pytest.raises(BrokerError, match=re.escape("KAFKRON_BROKER_KAFKA_VERSION=4.4.0")):
        broker.start()
    assert not broker.state_file.exists(), "nothing started, nothing recorded as running"
    assert home_version.recorded_version(home) == "4.4.0", "the record stays as it was"


def test_a_cluster_refuses_before_any_node_starts_and_names_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "cluster"
    cluster = LocalCluster(_settings(home, "4.2.2", count=3))
    nodes = cluster.nodes()
    home_version.record_version(nodes[0].home, "4.2.2")
    home_version.record_version(nodes[1].home, "4.4.0")
    _no_java(monkeypatch)
    with pytest.raises(BrokerError) as error:
        cluster.start()
    message = str(error.value)
    assert f"{home / 'node-2'} was written by Kafka 4.4.0" in message
    assert f"delete {home} (its topics" in message, "the whole cluster, not one node"
    assert not any(node.state_file.exists() for node in nodes)


def test_a_fresh_home_is_recorded_when_formatted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "broker"
    _fake_jvm(monkeypatch, formats=True)
    broker = LocalBroker(_settings(home, "4.2.2"))
    broker.launch()
    assert home_version.recorded_version(home) == "4.2.2", "before the broker answers"


def test_an_unrecorded_home_with_data_starts_and_is_recorded_once_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "broker"
    _fake_jvm(monkeypatch, formats=False)  # formatted before records existed
    broker = LocalBroker(_settings(home, "4.4.0"))
    state = broker.launch()
    assert home_version.recorded_version(home) is None, "unknown until it answers"
    broker.wait_ready(state)
    assert home_version.recorded_version(home) == "4.4.0"
    refusal = re.escape("Kafka 4.4.0, and this start would run Kafka 4.2.2")
    with pytest.raises(BrokerError, match=refusal):
        LocalBroker(_settings(home, "4.2.2")).launch()


def test_an_unrecorded_home_that_fails_to_start_stays_unrecorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "broker"
    _fake_jvm(monkeypatch, formats=False)

    def exits(self: LocalBroker, state: object, deadline: float) -> None:
        raise BrokerError("the broker exited during start-up.")

    monkeypatch.setattr(LocalBroker, "_wait_ready", exits)
    broker = LocalBroker(_settings(home, "4.2.2"))
    with pytest.raises(BrokerError, match="exited"):
        broker.start()
    assert home_version.recorded_version(home) is None


def test_a_broker_another_process_runs_is_reused_and_never_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "broker"
    home_version.record_version(home, "4.4.0")
    running = broker_module.BrokerState(pid=1, port=9, controller_port=10)
    monkeypatch.setattr(LocalBroker, "running_state", lambda self: running)
    monkeypatch.setattr(LocalBroker, "_wait_ready", lambda self, state, deadline: None)
    broker = LocalBroker(_settings(home, "4.2.2"))
    assert broker.start() == running, "a running broker is reused, whatever Kafka it runs"
    assert home_version.recorded_version(home) == "4.4.0"
