"""One log line when a broker stops answering and one when it answers again, in place of the
Kafka clients' own connection errors.

While a broker is down, every client of a process (consumer, producer, restore consumer,
clock) logs each failed reconnect: a timer and an executor each logged about 2,000 lines in
the 45 s a killed broker took to come back, and nothing when it did. The clients reconnect by
themselves; what an operator needs is when the connection was lost, why, and when it was
back. :class:`BrokerConnectionLog` is a filter on the ``librdkafka`` logger (where
:meth:`KafkaSettings.client_config` sends every client's log): failed connects and dropped
connections are left out (at DEBUG level they still show); after a failed connect a thread
asks that broker for metadata every second, logs ``broker ... does not answer`` when it does
not at the first ask, and ``broker ... answers again after N s`` once it does. Any other
librdkafka line passes (authentication and TLS errors among them: those need the operator).
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from streams.kafka.errors import KafkaAccessError, denied_message
from streams.settings import LIBRDKAFKA_LOGGER, KafkaSettings

log = logging.getLogger(__name__)

_CONNECT_FAILED = re.compile(r"Connect to (?:ipv[46]#)?(\S+) failed: (.*?)(?: \(after |$)")
"""librdkafka's line for a failed connect (facility FAIL): the address and the reason."""
_FAIL = "FAIL"


def broker_answers(kafka: KafkaSettings, address: str, timeout_s: float = 2.0) -> bool:
    """Whether the broker at ``host:port`` accepts a connection and answers a metadata
    request (with the operator's client settings: TLS, SASL)."""
    host, _, port = address.rpartition(":")
    try:  # a plain connect first: a refused one costs no Kafka client
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except (OSError, ValueError):
        return False
    admin = AdminClient(
        kafka.client_config(**{"bootstrap.servers": address, "socket.timeout.ms": 2000})
    )
    try:
        admin.list_topics(timeout=timeout_s)
    except Exception:
        return False
    return True


@dataclass
class _Loss:
    """A broker whose connect failed: since when, why, and whether that was logged yet."""

    since: float  # monotonic s
    reason: str
    announced: bool = False


class BrokerConnectionLog(logging.Filter):
    """A filter for the ``librdkafka`` logger: one line per lost broker, one when it is back.

    ``answers(address)`` says whether a broker answers (:func:`broker_answers` with the
    process's settings); it is asked every ``probe_interval_s`` while a connect failed. A
    failure is logged only when that broker still does not answer at the first ask: a
    client's connect that failed while the broker answers others (seen when clients close)
    is no loss.
    """

    def __init__(self, answers: Callable[[str], bool], probe_interval_s: float = 1.0) -> None:
        super().__init__()
        self._answers = answers
        self._interval_s = probe_interval_s
        self._lock = threading.Lock()
        self._lost: dict[str, _Loss] = {}  # by broker address
        self._watcher: threading.Thread | None = None
        self._closed = threading.Event()

    def lost(self) -> list[str]:
        """The brokers logged as not answering, and not yet as answering again."""
        with self._lock:
            return sorted(a for a, loss in self._lost.items() if loss.announced)

    def filter(self, record: logging.LogRecord) -> bool:
        """False for librdkafka's connection errors; True for every other line."""
        args = record.args
        if not isinstance(args, tuple) or not args or args[0] != _FAIL:
            return True
        text = record.getMessage()
        failed = _CONNECT_FAILED.search(text)
        if failed is not None:
            self._connect_failed(failed.group(1), failed.group(2))
        elif "Disconnected" not in text:
            return True
        # A dropped connection: either the reconnect works (nothing to say) or it fails, and
        # that failure says it. KAFKRON_LOG_LEVEL=DEBUG shows each line left out.
        log.debug("left out: %s", text)
        return False

    def close(self) -> None:
        """Stop asking lost brokers."""
        self._closed.set()
        with self._lock:
            watcher = self._watcher
        if watcher is not None:
            watcher.join(timeout=5)

    def _connect_failed(self, address: str, reason: str) -> None:
        with self._lock:
            if address in self._lost or self._closed.is_set():
                return
            self._lost[address] = _Loss(time.monotonic(), reason)
            if self._watcher is not None:
                return
            watcher = self._watcher = threading.Thread(
                target=self._watch, name="broker-connection", daemon=True
            )
        watcher.start()

    def _watch(self) -> None:
        """Ask each broker whose connect failed every interval until none is left."""
        while not self._closed.wait(self._interval_s):
            with self._lock:
                lost = dict(self._lost)
                if not lost:
                    self._watcher = None  # a broker lost from now on starts another
                    return
            for address, loss in lost.items():
                answers = self._answers(address)
                with self._lock:
                    if answers:
                        del self._lost[address]
                    else:
                        loss.announced, announce = True, not loss.announced
                if answers and loss.announced:
                    log.info(
                        "broker %s answers again after %.1f s; the Kafka clients reconnect "
                        "by themselves",
                        address,
                        time.monotonic() - loss.since,
                    )
                elif not answers and announce:
                    log.warning(
                        "broker %s does not answer (%s); the Kafka clients retry by "
                        "themselves, and their connection errors are left out of this log "
                        "until it answers again",
                        address,
                        loss.reason,
                    )


LOGIN_CHECK_S = 10.0
"""How long :func:`check_login` waits for the brokers' first answer before leaving it to the
clients' own retries (a broker down at start is no reason to stop)."""
_LOGIN_ASK_S = 0.5


def check_login(kafka: KafkaSettings, timeout_s: float = LOGIN_CHECK_S) -> None:
    """Raise :class:`KafkaAccessError` when the brokers refuse this process's login (a wrong
    SASL password or mechanism, TLS trouble): librdkafka retries a refused login forever, so
    without this a service logs the refusal every half second and later fails with a
    transport error that names neither. Returns once a broker answers, or after
    ``timeout_s`` without an answer or a refusal."""
    refusals: list[KafkaError] = []
    admin = AdminClient(kafka.client_config(error_cb=refusals.append))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=_LOGIN_ASK_S)
        except KafkaException:
            pass
        else:
            return
        admin.poll(0)  # serves error_cb
        for error in refusals:
            message = denied_message("logging in to the brokers", error)
            if message is not None:
                raise KafkaAccessError(message)


@contextmanager
def broker_connection_log(kafka: KafkaSettings) -> Iterator[BrokerConnectionLog]:
    """Log broker connection losses and returns in one line each while the block runs (a
    service's main), once :func:`check_login` has found the login accepted."""
    check_login(kafka)
    watch = BrokerConnectionLog(lambda address: broker_answers(kafka, address))
    LIBRDKAFKA_LOGGER.addFilter(watch)
    try:
        yield watch
    finally:
        LIBRDKAFKA_LOGGER.removeFilter(watch)
        watch.close()
