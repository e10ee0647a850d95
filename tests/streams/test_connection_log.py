"""The broker connection log: librdkafka's connection errors become one line per lost broker
and one when it answers again (the filter alone, with a stand-in for the broker's answer)."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from infra.broker import free_port
from streams.kafka.connection import BrokerConnectionLog, check_login
from streams.settings import KafkaSettings

CONNECTION = "streams.kafka.connection"


def rdkafka_record(fac: str, text: str, level: int = logging.ERROR) -> logging.LogRecord:
    """A record as confluent-kafka hands librdkafka's log lines to a Python logger."""
    return logging.LogRecord(
        "librdkafka", level, __file__, 0, "%s [%s] %s", (fac, "rdkafka#consumer-1", text), None
    )


def refused(address: str) -> logging.LogRecord:
    return rdkafka_record(
        "FAIL",
        f"[thrd:{address}/1]: {address}/1: Connect to ipv4#{address} failed: "
        "Connection refused (after 0ms in state CONNECT, 4 identical error(s) suppressed)",
    )


class Broker:
    """Whether each broker answers, as the watcher's probe sees it."""

    def __init__(self) -> None:
        self.down: set[str] = set()
        self.asked: list[str] = []
        self._lock = threading.Lock()

    def answers(self, address: str) -> bool:
        with self._lock:
            self.asked.append(address)
            return address not in self.down


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == CONNECTION]


def wait_for(check: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.01)


@pytest.fixture
def caplog_info(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger=CONNECTION)
    return caplog


def test_a_lost_broker_is_one_line_and_its_return_another(
    caplog_info: pytest.LogCaptureFixture,
) -> None:
    broker = Broker()
    broker.down.add("127.0.0.1:9092")
    watch = BrokerConnectionLog(broker.answers, probe_interval_s=0.02)
    try:
        dropped = rdkafka_record("FAIL", "127.0.0.1:9092/1: Disconnected (after 5ms in state UP)")
        assert not watch.filter(dropped)
        for _ in range(200):  # every client retries every few ms
            assert not watch.filter(refused("127.0.0.1:9092"))
        wait_for(lambda: watch.lost() == ["127.0.0.1:9092"])
        assert len(lines(caplog_info)) == 1
        assert lines(caplog_info)[0].startswith(
            "broker 127.0.0.1:9092 does not answer (Connection refused)"
        )
        for _ in range(50):
            assert not watch.filter(refused("127.0.0.1:9092"))
        broker.down.clear()
        wait_for(lambda: len(lines(caplog_info)) == 2)
        assert lines(caplog_info)[1].startswith("broker 127.0.0.1:9092 answers again after ")
        assert watch.lost() == []
        time.sleep(0.1)
        assert len(lines(caplog_info)) == 2, "nothing more once it is back"
        assert watch.filter(rdkafka_record("FAIL", "next line: not a connection error"))
    finally:
        watch.close()


def test_a_failed_connect_to_a_broker_that_answers_is_no_loss(
    caplog_info: pytest.LogCaptureFixture,
) -> None:
    """Clients that close log a refused connect now and then; the broker answers the first
    ask, so nothing is said."""
    broker = Broker()
    watch = BrokerConnectionLog(broker.answers, probe_interval_s=0.02)
    try:
        assert not watch.filter(refused("127.0.0.1:9092"))
        wait_for(lambda: broker.asked)
        time.sleep(0.1)
        assert lines(caplog_info) == []
        assert watch.lost() == []
    finally:
        watch.close()


def test_other_lines_pass_and_brokers_are_told_apart(
    caplog_info: pytest.LogCaptureFixture,
) -> None:
    broker = Broker()
    broker.down.update({"127.0.0.1:9093", "127.0.0.1:9094"})
    watch = BrokerConnectionLog(broker.answers, probe_interval_s=0.02)
    try:
        assert watch.filter(rdkafka_record("GETPID", "Coordinator load in progress: retrying"))
        tls = "127.0.0.1:9093/1: SSL handshake failed: certificate verify failed"
        assert watch.filter(rdkafka_record("FAIL", tls)), "the operator must see these"
        assert watch.filter(logging.LogRecord("x", logging.INFO, "", 0, "plain", None, None))
        watch.filter(refused("127.0.0.1:9093"))
        watch.filter(refused("127.0.0.1:9094"))
        wait_for(lambda: len(lines(caplog_info)) == 2)
        assert {line.split()[1] for line in lines(caplog_info)} == {
            "127.0.0.1:9093",
            "127.0.0.1:9094",
        }
        broker.down.discard("127.0.0.1:9094")
        wait_for(lambda: watch.lost() == ["127.0.0.1:9093"])
        assert "broker 127.0.0.1:9094 answers again after" in lines(caplog_info)[2]
    finally:
        watch.close()
    asked = len(broker.asked)
    time.sleep(0.1)
    assert len(broker.asked) == asked


def test_the_login_check_leaves_a_broker_that_does_not_answer_to_the_clients() -> None:
    """No broker at start is no refusal of the login: check_login gives up quietly after its
    timeout (a refused login is the SASL test's, tests/services/test_kafka_acls.py)."""
    nobody = KafkaSettings(bootstrap_servers=f"127.0.0.1:{free_port()}")
    started = time.monotonic()
    check_login(nobody, timeout_s=1.5)
    assert 1.4 <= time.monotonic() - started < 10
