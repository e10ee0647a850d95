"""Which ListOffsets errors the view's ``latest_offsets`` waits out (pure: an admin client
that answers from a script, no broker)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from services.ingest import view as view_module
from services.ingest.settings import IngestSettings
from services.ingest.view import StatusView

NO_LEADERS = KafkaError(KafkaError._NOENT, "Failed to query partition leaders: No leaders found")
NOT_AVAILABLE = KafkaError(KafkaError.OFFSET_NOT_AVAILABLE, "Offset not available")
TIMED_OUT = KafkaError(KafkaError._TIMED_OUT, "Timed out")
DENIED = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed")


class ScriptedAdmin:
    """An admin client whose ListOffsets answers each error of ``errors`` in turn, then
    100 + partition for every partition asked; it counts the calls and the metadata
    refreshes (``list_topics``)."""

    def __init__(self, errors: list[KafkaError]) -> None:
        self.errors = list(errors)
        self.calls = 0
        self.refreshed: list[str] = []

    def list_offsets(self, request: Mapping[TopicPartition, Any], **_options: Any) -> Any:
        self.calls += 1
        futures: dict[TopicPartition, Future[Any]] = {}
        for tp in request:
            future: Future[Any] = Future()
            if self.errors:
                future.set_exception(KafkaException(self.errors[0]))
            else:
                future.set_result(type("Offset", (), {"offset": 100 + tp.partition})())
            futures[tp] = future
        if self.errors:
            self.errors.pop(0)
        return futures

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> None:
        self.refreshed.append(topic or "")


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "sleep", lambda _s: None)


def view_with(admin: ScriptedAdmin, tmp_path: Path) -> StatusView:
    view = StatusView(IngestSettings(view_dir=tmp_path / "view"))
    view._admin = admin  # type: ignore[assignment]
    return view


@pytest.mark.parametrize(
    "error",
    [NO_LEADERS, NOT_AVAILABLE, TIMED_OUT],
    ids=["no-leaders-found", "offset-not-available", "timed-out"],
)
def test_no_leader_known_yet_or_a_timeout_is_waited_out(tmp_path: Path, error: KafkaError) -> None:
    admin = ScriptedAdmin(errors=[error, error])

    offsets = view_with(admin, tmp_path).latest_offsets([("jobs", 0), ("jobs", 1)])

    assert offsets == {("jobs", 0): 100, ("jobs", 1): 101}
    assert admin.calls == 3


def test_a_leader_error_refreshes_the_metadata_before_the_retry(tmp_path: Path) -> None:
    admin = ScriptedAdmin(errors=[NO_LEADERS])

    view_with(admin, tmp_path).latest_offsets([("jobs", 0)])

    assert admin.refreshed == ["jobs"]


def test_an_error_that_is_not_transient_is_raised_at_once(tmp_path: Path) -> None:
    admin = ScriptedAdmin(errors=[DENIED])

    with pytest.raises(KafkaException) as raised:
        view_with(admin, tmp_path).latest_offsets([("jobs", 0)])
    assert raised.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert admin.calls == 1


def test_the_retries_end_at_the_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(view_module, "_ADMIN_TIMEOUT_S", 0.0)
    admin = ScriptedAdmin(errors=[TIMED_OUT] * 100)

    with pytest.raises(KafkaException):
        view_with(admin, tmp_path).latest_offsets([("jobs", 0)])
    assert admin.calls < 100
