"""Which watermark errors the migration's ``end_offsets`` waits out (pure: a consumer that
answers from a script, no broker)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streams.migration import jobs_topic
from streams.settings import KafkaSettings

NO_LEADERS = KafkaError(KafkaError._NOENT, "Failed to query partition leaders: No leaders found")
DENIED = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed")


class ScriptedConsumer:
    """A topic of ``partitions`` partitions whose watermark queries answer each error of
    ``errors`` in turn, then (0, 100 + partition)."""

    def __init__(self, partitions: int, errors: list[KafkaError]) -> None:
        self.partitions = partitions
        self.errors = list(errors)
        self.queries: list[int] = []  # the partition of each watermark query, in order
        self.closed = False

    def list_topics(self, topic: str, timeout: float = -1) -> Any:
        metadata = SimpleNamespace(error=None, partitions=dict.fromkeys(range(self.partitions)))
        return SimpleNamespace(topics={topic: metadata})

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float = -1) -> tuple[int, int]:
        self.queries.append(tp.partition)
        if self.errors:
            raise KafkaException(self.errors.pop(0))
        return 0, 100 + tp.partition

    def close(self) -> None:
        self.closed = True


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "sleep", lambda _s: None)


def ends_with(monkeypatch: pytest.MonkeyPatch, consumer: ScriptedConsumer) -> dict[int, int]:
    monkeypatch.setattr(jobs_topic, "_reader", lambda _kafka: consumer)
    return jobs_topic.end_offsets(KafkaSettings(), "t")


@pytest.mark.parametrize(
    "error",
    [NO_LEADERS, KafkaError(KafkaError.FENCED_LEADER_EPOCH, "Fenced leader epoch")],
    ids=["no-leaders-found", "fenced-leader-epoch"],
)
def test_no_leader_known_yet_is_waited_out(
    monkeypatch: pytest.MonkeyPatch, error: KafkaError
) -> None:
    consumer = ScriptedConsumer(partitions=2, errors=[error])

    assert ends_with(monkeypatch, consumer) == {0: 100, 1: 101}
    assert consumer.queries == [0, 0, 1]  # partition 0 asked again, then partition 1
    assert consumer.closed


def test_an_error_that_is_not_about_leaders_is_raised_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    consumer = ScriptedConsumer(partitions=2, errors=[DENIED])

    with pytest.raises(KafkaException) as raised:
        ends_with(monkeypatch, consumer)
    assert raised.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert consumer.queries == [0]
    assert consumer.closed


def test_a_leader_that_stays_unknown_is_raised_after_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    readings: list[float] = []

    def monotonic() -> float:  # each reading 10 s after the previous one
        readings.append(10.0 * len(readings))
        return readings[-1]

    monkeypatch.setattr(time, "monotonic", monotonic)
    consumer = ScriptedConsumer(partitions=1, errors=[NO_LEADERS] * 100)

    with pytest.raises(KafkaException) as raised:
        ends_with(monkeypatch, consumer)
    assert raised.value.args[0].code() == KafkaError._NOENT
    # deadline 0 + 30 s: tries at 10, 20 and 30 s wait, the one at 40 s gives up
    assert len(consumer.queries) == 4
