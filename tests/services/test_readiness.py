"""The probes ``kafkron up`` waits on before it prints "ready" (services/readiness.py).

The group probe runs against the real broker; the HTTP probe against a local server.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from confluent_kafka import Consumer

from infra.broker import free_port
from services import readiness
from services.readiness import Readiness, group_probe, http_probe, wait_until_ready
from streams.kafka.consumer import group_consumer_config
from streams.settings import KafkaSettings
from streams.topics import TopicNames


class _Health(BaseHTTPRequestHandler):
    status = 503

    def do_GET(self) -> None:
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[tuple[str, type[_Health]]]:
    handler = type("Health", (_Health,), {"status": 503})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/healthz", handler
    finally:
        server.shutdown()
        server.server_close()


def test_http_probe_is_ready_only_on_200(health_server: tuple[str, type[_Health]]) -> None:
    url, handler = health_server
    probe = http_probe(url)
    unavailable = probe()
    assert not unavailable.ready and "503" in unavailable.detail
    handler.status = 200
    assert probe() == Readiness(True, f"{url}: 200")


def test_http_probe_of_a_port_nobody_listens_on_is_not_ready() -> None:
    answer = http_probe(f"http://127.0.0.1:{free_port()}/healthz")()
    assert not answer.ready
    assert "refused" in answer.detail.lower(), answer.detail


def test_group_probe_waits_for_partitions_of_the_member_it_names(topics: KafkaSettings) -> None:
    group = f"{topics.namespace}probe-group"
    ours, other = group_probe(topics, group, "member-a"), group_probe(topics, group, "member-b")
    anyone = group_probe(topics, group)
    before = ours()
    assert not before.ready, before
    config = group_consumer_config(topics, group, client_id="member-a")
    consumer = Consumer(config)
    consumer.subscribe([TopicNames(topics.namespace).jobs])
    try:
        answers = wait_until_ready(
            {"consumer": lambda: (consumer.poll(0.2), ours())[1]}, 30.0, lambda: False, 0.1
        )
        answer = answers["consumer"]
        assert answer.ready, answer
        assert answer.detail == f"group {group} (member member-a): {topics.partitions} partitions"
        assert anyone().ready
        # Another process of the group (or one of an earlier run) does not pass for "member-b".
        assert other() == Readiness(False, f"group {group} (member member-b): no partitions "
                                    "assigned yet")  # fmt: skip
    finally:
        consumer.close()


def test_group_consumers_carry_the_worker_id_unless_the_operator_names_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Nothing answers at 127.0.0.1:1: the probe's answer is its request's timeout error,
    # after 0.5 s here instead of the 15 s a busy broker gets (the test took 15 s).
    monkeypatch.setattr(readiness, "GROUP_PROBE_TIMEOUT_S", 0.5)
    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    assert group_consumer_config(kafka, "g", client_id="timer-h-1")["client.id"] == "timer-h-1"
    assert "client.id" not in group_consumer_config(kafka, "g")
    named = KafkaSettings(bootstrap_servers="127.0.0.1:1", librdkafka={"client.id": "ops"})
    assert group_consumer_config(named, "g", client_id="timer-h-1")["client.id"] == "ops"
    # The probe then cannot tell the members apart, and takes any member's partitions.
    assert "(member" not in group_probe(named, "g", "timer-h-1")().detail


def test_wait_returns_what_is_not_ready_at_the_deadline() -> None:
    calls: list[str] = []

    def never() -> Readiness:
        calls.append("never")
        return Readiness(False, "still restoring")

    def once() -> Readiness:
        calls.append("once")
        return Readiness(True, "up")

    answers = wait_until_ready({"a": never, "b": once}, 0.3, lambda: False, 0.05)
    assert answers == {"a": Readiness(False, "still restoring"), "b": Readiness(True, "up")}
    assert calls.count("once") == 1, "a ready service is not probed again"
    assert calls.count("never") >= 3


def test_wait_stops_when_interrupted() -> None:
    rounds: list[dict[str, Readiness]] = []
    answers = wait_until_ready(
        {"a": lambda: Readiness(False, "no")},
        60.0,
        lambda: len(rounds) >= 2,
        0.01,
        on_answers=lambda seen: rounds.append(dict(seen)),
    )
    assert answers == {"a": Readiness(False, "no")}
    assert len(rounds) == 2
