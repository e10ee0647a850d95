"""Which ListOffsets errors a restore waits out (pure: an admin client that answers from a
script, no broker)."""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streams.state.recovery import Recovery

NO_LEADERS = KafkaError(KafkaError._NOENT, "Failed to query partition leaders: No leaders found")


class _Offset:
    def __init__(self, offset: int) -> None:
        self.offset = offset


Answers = dict[TopicPartition, "Future[_Offset]"]


class ScriptedAdmin:
    """Answers each ListOffsets call with the next error of ``errors``, then with offsets."""

    def __init__(self, errors: list[KafkaError]) -> None:
        self.errors = list(errors)
        self.calls = 0
        self.metadata_requests = 0

    def list_offsets(self, request: dict[TopicPartition, Any], **_: Any) -> Answers:
        self.calls += 1
        answers: Answers = {}
        for tp in request:
            answer: Future[_Offset] = Future()
            if self.errors:
                answer.set_exception(KafkaException(self.errors.pop(0)))
            else:
                answer.set_result(_Offset(7))
            answers[tp] = answer
        return answers

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> None:
        self.metadata_requests += 1


def recovery_with(admin: ScriptedAdmin) -> Recovery:
    return Recovery(consumer=None, admin=admin)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "sleep", lambda _s: None)


def test_no_leaders_found_after_a_broker_restart_is_waited_out() -> None:
    admin = ScriptedAdmin([NO_LEADERS])

    assert recovery_with(admin)._watermarks("t", 0) == (7, 7)
    assert admin.calls == 4  # two attempts of two requests (earliest, latest)
    assert admin.metadata_requests == 1  # asked for the leaders again before the retry


def test_an_error_that_is_not_about_leaders_stops_the_restore() -> None:
    denied = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed")
    admin = ScriptedAdmin([denied])

    with pytest.raises(KafkaException) as raised:
        recovery_with(admin)._watermarks("t", 0)
    assert raised.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert admin.metadata_requests == 0
