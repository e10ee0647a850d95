"""Session broker and per-test topic namespaces.

The broker is ``KAFKA_BOOTSTRAP`` when set; otherwise a testcontainers Kafka where a Docker
engine answers; otherwise the project's own local broker (``kafkron broker start``) in a
test home with a free port, stopped at the end of the session. A broker that cannot be had
fails the run (never skips), so CI cannot go green without Kafka.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.broker import LocalBroker, free_port
from infra.settings import BrokerSettings
from streams.admin import ensure_topics
from streams.settings import KafkaSettings

ROOT = Path(__file__).resolve().parent.parent


DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock"


def _docker_socket_answers() -> bool:
    """False when the Docker engine's unix socket (``DOCKER_HOST`` or the default) is dead.

    Checked with a socket closed here, before the Docker SDK is touched: docker-py never
    closes the socket of a unix connection whose ``connect`` fails, and the garbage
    collector later reports it (``ResourceWarning: unclosed <socket.socket ... family=1``)
    as an error of whatever test happens to be running. Other hosts (tcp, ssh) are left to
    the SDK, whose connections close on failure.
    """
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return True
    path = host.removeprefix("unix://") or DEFAULT_DOCKER_SOCKET
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2.0)
        try:
            sock.connect(path)
        except OSError:
            return False
    return True


def _docker_kafka() -> tuple[str, object] | None:
    if not _docker_socket_answers():
        return None
    try:
        import docker

        client = docker.from_env()
    except Exception:
        return None
    try:
        client.ping()
    except Exception:
        return None
    finally:
        client.close()  # its pooled connection would otherwise be left to the collector

    from testcontainers.kafka import KafkaContainer

    container = KafkaContainer("apache/kafka:4.1.0").with_kraft()
    container.start()
    return container.get_bootstrap_server(), container


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap servers of a real Kafka broker for the whole session."""
    env = os.environ.get("KAFKA_BOOTSTRAP")
    if env:
        yield env
        return
    docker = _docker_kafka()
    if docker is not None:
        bootstrap, container = docker
        yield bootstrap
        container.stop()  # type: ignore[attr-defined]
        return
    settings = BrokerSettings(
        home=ROOT / ".state" / "test-broker",
        libs_dir=ROOT / ".state" / "kafka-libs",
        port=free_port(),
        controller_port=free_port(),
    )
    broker = LocalBroker(settings)
    try:
        state = broker.start()
    except Exception as exc:  # turned into a failure with the reason, never a skip
        pytest.fail(f"no Kafka broker for the tests: {exc}", pytrace=False)
    try:
        yield state.bootstrap
    finally:
        broker.stop()


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh topic namespace, so tests never see each other's records.

    When the test used the broker, its namespace's topics are deleted afterwards: a
    long-lived broker keeps a directory (and open files) per partition, and thousands of
    leftover test topics exhaust its open-file limit.
    """
    prefix = f"t{uuid.uuid4().hex[:10]}."
    yield prefix
    if "kafka_bootstrap" in request.fixturenames:
        _delete_topics(request.getfixturevalue("kafka_bootstrap"), prefix)


def _delete_topics(bootstrap: str, prefix: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [t for t in admin.list_topics(timeout=30).topics if t.startswith(prefix)]
    if not names:
        return
    for future in admin.delete_topics(names, operation_timeout=30).values():
        try:
            future.result()
        except Exception as exc:  # a cleanup failure must not fail the test
            logging.getLogger(__name__).warning("could not delete test topic: %s", exc)


@pytest.fixture
def kafka_settings(kafka_bootstrap: str, namespace: str, tmp_path: Path) -> KafkaSettings:
    """Settings for one test: the session broker, its own namespace, 4 partitions."""
    return KafkaSettings(
        bootstrap_servers=kafka_bootstrap,
        namespace=namespace,
        partitions=4,
        state_dir=tmp_path / "state",
    )


@pytest.fixture
def topics(kafka_settings: KafkaSettings) -> KafkaSettings:
    """Settings whose kafkron topics exist on the broker."""
    ensure_topics(kafka_settings)
    return kafka_settings
