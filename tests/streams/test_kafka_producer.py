"""The transactional producer, error classification and group setup against the real broker."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

from streams.admin import admin_client
from streams.kafka import producer as producer_module
from streams.kafka.consumer import configure_group_session, group_consumer_config
from streams.kafka.errors import (
    CommitOutcomeUnknownError,
    ErrorKind,
    KafkaOperationError,
    classify,
)
from streams.kafka.producer import TransactionalProducer
from streams.kafka.producer_config import producer_config
from streams.settings import KafkaSettings
from tests.streams.processor_testkit import create_topics, read_committed

pytestmark = pytest.mark.kafka


def test_classify_follows_librdkafka_flags() -> None:
    assert classify(KafkaError(KafkaError._FENCED, "x", fatal=True)) is ErrorKind.FATAL
    abort = KafkaError(KafkaError.UNKNOWN_MEMBER_ID, "x", txn_requires_abort=True)
    assert classify(abort) is ErrorKind.ABORT_TRANSACTION
    assert classify(KafkaError(KafkaError._TIMED_OUT, "x", retriable=True)) is ErrorKind.RETRIABLE
    assert classify(KafkaError(KafkaError.INVALID_CONFIG, "x")) is ErrorKind.FATAL
    error = KafkaOperationError("commit", abort)
    assert error.requires_abort and error.retryable and "abort the transaction" in str(error)


def test_delivery_error_is_latched_and_raised_on_commit(kafka_settings: KafkaSettings) -> None:
    small = kafka_settings.namespace + "small"
    create_topics(kafka_settings, [small], config={"max.message.bytes": "1000"})
    producer = TransactionalProducer(kafka_settings, "latch")
    producer.init()
    try:
        producer.produce(small, b"k", b"fits", 0)
        producer.produce(small, b"k", b"x" * 5000, 0)  # the broker refuses it
        with pytest.raises(KafkaOperationError) as raised:
            producer.commit()
        assert raised.value.kind is not ErrorKind.RETRIABLE
        producer.abort()
        producer.produce(small, b"k", b"after", 1)
        producer.commit()
    finally:
        producer.close()
    assert [r.value for r in read_committed(kafka_settings, small)] == [b"after"]


def test_delivered_offsets_are_kept_for_tracked_topics(kafka_settings: KafkaSettings) -> None:
    tracked, other = kafka_settings.namespace + "log", kafka_settings.namespace + "out"
    create_topics(kafka_settings, [tracked, other])
    producer = TransactionalProducer(kafka_settings, "track", tracked_topics=[tracked])
    producer.init()
    try:
        for _ in range(3):
            producer.produce(tracked, b"k", b"v", 2)
        producer.produce(other, b"k", b"v", 2)
        producer.commit()
        assert producer.delivered_offset(tracked, 2) == 2
        assert producer.delivered_offset(other, 2) is None
        producer.produce(tracked, b"k", b"v", 2)  # a new transaction starts afresh
        assert producer.delivered_offset(tracked, 2) is None
        producer.commit()
        assert producer.delivered_offset(tracked, 2) == 4  # offset 3 is the commit marker
    finally:
        producer.close()


def test_changelog_batches_track_the_last_offset_of_their_partition(
    kafka_settings: KafkaSettings,
) -> None:
    log = kafka_settings.namespace + "log"
    create_topics(kafka_settings, [log])
    producer = TransactionalProducer(kafka_settings, "changelog", tracked_topics=[log])
    producer.init()
    try:
        producer.produce_changelog(log, 1, [(b"a", b"1"), (b"b", None), (b"c", b"3")])
        producer.produce_changelog(log, 3, [(b"d", b"4")])
        producer.produce_changelog(log, 1, [])  # nothing to write: no transaction state change
        producer.commit()
        assert producer.delivered_offset(log, 1) == 2
        assert producer.delivered_offset(log, 3) == 0
        producer.produce_changelog(log, 1, [(b"e", b"5"), (b"f", b"6")])
        producer.commit()
        assert producer.delivered_offset(log, 1) == 5  # offset 3 is the commit marker
    finally:
        producer.close()
    records = [(r.partition, r.offset, r.key, r.value) for r in read_committed(kafka_settings, log)]
    assert sorted(records) == [
        (1, 0, b"a", b"1"),
        (1, 1, b"b", None),
        (1, 2, b"c", b"3"),
        (1, 4, b"e", b"5"),
        (1, 5, b"f", b"6"),
        (3, 0, b"d", b"4"),
    ]


def test_a_failed_untracked_changelog_record_fails_the_commit(
    kafka_settings: KafkaSettings,
) -> None:
    """Only the last record of a batch has a callback; an earlier one failing still aborts."""
    small = kafka_settings.namespace + "small"
    create_topics(kafka_settings, [small], config={"max.message.bytes": "1000"})
    producer = TransactionalProducer(kafka_settings, "changelog-fail", tracked_topics=[small])
    producer.init()
    try:
        producer.produce_changelog(small, 0, [(b"k", b"x" * 5000), (b"k", b"fits")])
        with pytest.raises(KafkaOperationError):
            producer.commit()
        producer.abort()
    finally:
        producer.close()
    assert read_committed(kafka_settings, small) == []


def test_fenced_producer_is_replaced_on_abort(kafka_settings: KafkaSettings) -> None:
    topic = kafka_settings.namespace + "out"
    create_topics(kafka_settings, [topic])
    first = TransactionalProducer(kafka_settings, "same-id")
    first.init()
    first.produce(topic, b"k", b"zombie", 0)
    second = TransactionalProducer(kafka_settings, "same-id")
    second.init()  # fences the first and aborts its transaction
    try:
        with pytest.raises(KafkaOperationError) as raised:
            first.commit()
        assert raised.value.fatal
        first.abort()  # replaces the client (which fences the second in turn)
        first.produce(topic, b"k", b"new", 0)
        first.commit()
    finally:
        first.close()
        second.close()
    assert [r.value for r in read_committed(kafka_settings, topic)] == [b"new"]


def test_group_consumer_config_and_group_session(kafka_settings: KafkaSettings) -> None:
    config = group_consumer_config(kafka_settings, "g", group_instance_id="i-1")
    assert config["group.protocol"] == "consumer" and config["group.remote.assignor"] == "range"
    assert config["isolation.level"] == "read_committed" and config["enable.auto.commit"] is False
    assert config["group.instance.id"] == "i-1"
    group = kafka_settings.namespace + "grp"
    configure_group_session(kafka_settings, group, session_timeout_ms=4000)
    resource = ConfigResource(ResourceType.GROUP, group)
    admin = admin_client(kafka_settings)
    described = admin.describe_configs([resource])[resource].result()
    assert described["consumer.session.timeout.ms"].value == "4000"


def test_produce_on_a_client_fenced_in_the_background_is_a_fatal_operation_error(
    kafka_settings: KafkaSettings,
) -> None:
    """librdkafka refuses a fenced client's produce() with _FATAL but no fatal flag.

    That is the client's state, not a bad record: it must come out as a fatal
    KafkaOperationError (abort, replace the client), never as a caller error that stops
    the processor. Found when a member stalled past the transaction timeout.
    """
    topic = kafka_settings.namespace + "out"
    create_topics(kafka_settings, [topic])
    first = TransactionalProducer(kafka_settings, "fenced-bg", tracked_topics=[topic])
    first.init()
    first.produce_changelog(topic, 0, [(b"k", b"zombie")])
    second = TransactionalProducer(kafka_settings, "fenced-bg")
    second.init()  # fences the first; it learns so when adding its next partition
    try:
        deadline = time.monotonic() + 30
        with pytest.raises(KafkaOperationError) as raised:
            step = 1
            while time.monotonic() < deadline:  # a new partition makes it ask the coordinator
                first.produce_changelog(topic, step % kafka_settings.partitions, [(b"k", b"x")])
                step += 1
                time.sleep(0.05)
        assert raised.value.fatal
        first.abort()  # replaces the client
        first.produce_changelog(topic, 0, [(b"k", b"new")])
        first.commit()
    finally:
        first.close()
        second.close()
    assert [r.value for r in read_committed(kafka_settings, topic)] == [b"new"]


class _StuckInSendOffsets:
    """A real client whose send_offsets_to_transaction does not return until released, as
    librdkafka's did after a network cut (librdkafka #5456, #5511)."""

    def __init__(self, config: dict[str, Any], release: threading.Event) -> None:
        self._client = Producer(config)
        self._release = release
        self.closed = threading.Event()
        self.aborts = 0

    def send_offsets_to_transaction(self, *args: object) -> None:
        self._release.wait()
        raise RuntimeError("released")

    def abort_transaction(self, timeout_s: float = -1) -> None:
        self.aborts += 1
        self._client.abort_transaction(timeout_s)

    def close(self) -> bool:
        self.closed.set()
        return bool(self._client.close())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def first_client_stuck(
    monkeypatch: pytest.MonkeyPatch, stuck: type[_StuckInSendOffsets], release: threading.Event
) -> list[Any]:
    """The producer module makes its first client ``stuck`` (until ``release``), the next
    ones real: the clients it made, in order."""
    clients: list[Any] = []

    def client(config: dict[str, Any]) -> Any:
        made = stuck(config, release) if not clients else Producer(config)
        clients.append(made)
        return made

    monkeypatch.setattr(producer_module, "Producer", client)
    return clients


def test_a_producer_stuck_in_send_offsets_is_replaced_and_its_transaction_aborted(
    kafka_settings: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = kafka_settings.namespace + "out"
    create_topics(kafka_settings, [topic])
    release = threading.Event()
    clients = first_client_stuck(monkeypatch, _StuckInSendOffsets, release)
    producer = TransactionalProducer(
        kafka_settings, "stuck", transaction_timeout_ms=2_000, stuck_after_s=1.0
    )
    producer.init()
    group = Consumer(group_consumer_config(kafka_settings, kafka_settings.namespace + "g"))
    try:
        producer.produce(topic, b"k", b"zombie", 0)
        began = time.monotonic()
        with pytest.raises(KafkaOperationError) as raised:
            producer.send_offsets([TopicPartition(topic, 0, 1)], group.consumer_group_metadata())
        waited_s = time.monotonic() - began
        assert raised.value.fatal and "stuck" in str(raised.value)
        assert 3.0 <= waited_s < 6.0, waited_s  # the 2 s transaction timeout, then 1 s more
        producer.abort()  # a new client: its registration aborts the stuck one's transaction
        assert len(clients) == 2 and not clients[0].closed.is_set()
        producer.produce(topic, b"k", b"new", 0)
        producer.commit()
        release.set()  # the stuck call returns at last: only then is the old client closed
        assert clients[0].closed.wait(15)
    finally:
        release.set()
        producer.close()
        group.close()
    assert [r.value for r in read_committed(kafka_settings, topic)] == [b"new"]


class _StuckInCommit(_StuckInSendOffsets):
    """A real client whose commit_transaction does not return until released."""

    def commit_transaction(self, *args: object) -> None:
        self._release.wait()
        raise RuntimeError("released")


def test_a_commit_stuck_past_its_deadline_is_no_abort_and_the_client_is_replaced(
    kafka_settings: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker may have a commit that did not return: redoing its work could double it,
    so it raises CommitOutcomeUnknownError (the service stops), and the abort that follows
    replaces the client without an abort_transaction (it would conflict with the commit)."""
    topic = kafka_settings.namespace + "out"
    create_topics(kafka_settings, [topic])
    release = threading.Event()
    clients = first_client_stuck(monkeypatch, _StuckInCommit, release)
    producer = TransactionalProducer(
        kafka_settings, "stuck-commit", timeout_s=2.0, stuck_after_s=1.0
    )
    producer.init()
    try:
        producer.produce(topic, b"k", b"unknown", 0)
        began = time.monotonic()
        with pytest.raises(CommitOutcomeUnknownError, match="may have committed"):
            producer.commit()
        assert 3.0 <= time.monotonic() - began < 6.0
        producer.abort()
        assert len(clients) == 2 and clients[0].aborts == 0
        producer.produce(topic, b"k", b"new", 0)
        producer.commit()
    finally:
        release.set()
        producer.close()
    assert [r.value for r in read_committed(kafka_settings, topic)] == [b"new"]


def test_a_producer_does_not_rebootstrap(kafka_settings: KafkaSettings) -> None:
    """librdkafka's re-bootstrap after a cut decommissions the coordinator that
    send_offsets_to_transaction then waits for forever (#5511); the operator may still set it."""
    assert producer_config(kafka_settings, "t", 1000)["metadata.recovery.strategy"] == "none"
    extras = kafka_settings.model_copy(
        update={"librdkafka": {"metadata.recovery.strategy": "rebootstrap"}}
    )
    assert producer_config(extras, "t", 1000)["metadata.recovery.strategy"] == "rebootstrap"


def test_a_producer_tries_the_broker_again_within_a_second(kafka_settings: KafkaSettings) -> None:
    """librdkafka backs off reconnecting up to 10 s: after a 15 s cut, the abort a processor
    waited on left 7-10 s after the heal; the operator may still set it."""
    assert producer_config(kafka_settings, "t", 1000)["reconnect.backoff.max.ms"] == 1000
    extras = kafka_settings.model_copy(update={"librdkafka": {"reconnect.backoff.max.ms": 10_000}})
    assert producer_config(extras, "t", 1000)["reconnect.backoff.max.ms"] == 10_000


def test_a_producer_retries_a_refused_request_after_10_ms(kafka_settings: KafkaSettings) -> None:
    """A transaction started while the coordinator completes the previous one is refused
    (CONCURRENT_TRANSACTIONS) and retried after retry.backoff.ms: librdkafka's 100 ms was
    bench.dag's paced p99. The cap and the leader-query interval stay librdkafka's defaults;
    the operator may set each back."""
    config = producer_config(kafka_settings, "t", 1000)
    assert config["retry.backoff.ms"] == 10
    assert config["retry.backoff.max.ms"] == 1000
    assert config["topic.metadata.refresh.fast.interval.ms"] == 100
    back = {"retry.backoff.ms": 100, "retry.backoff.max.ms": 2000}
    extras = kafka_settings.model_copy(update={"librdkafka": back})
    assert producer_config(extras, "t", 1000)["retry.backoff.ms"] == 100
    assert producer_config(extras, "t", 1000)["retry.backoff.max.ms"] == 2000
