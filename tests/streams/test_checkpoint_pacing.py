"""When a checkpoint is due: the interval, a request now, or a request within a delay.

Pure logic: the producer is a fake that only says whether a transaction is open; the clock
is :func:`time.monotonic` patched for the test.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from streams.checkpoint import Checkpoint


class _OpenTransaction:
    in_transaction = True


class _Clock:
    def __init__(self) -> None:
        self.now_s = 1_000.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(time, "monotonic", fake)  # as streams.checkpoint reads it
    return fake


def _checkpoint(interval_ms: int) -> Checkpoint:
    producer: Any = _OpenTransaction()
    return Checkpoint(producer, consumer=None, commit_interval_ms=interval_ms)  # type: ignore[arg-type]


def test_interval_alone_makes_a_commit_due(clock: _Clock) -> None:
    checkpoint = _checkpoint(1_000)
    clock.now_s += 0.999
    assert not checkpoint.due()
    clock.now_s += 0.001
    assert checkpoint.due()


def test_request_now_is_due_at_once(clock: _Clock) -> None:
    checkpoint = _checkpoint(10_000)
    checkpoint.request_commit()
    assert checkpoint.due()


def test_earliest_request_within_a_delay_wins(clock: _Clock) -> None:
    checkpoint = _checkpoint(10_000)
    checkpoint.request_commit(250)
    clock.now_s += 0.2
    checkpoint.request_commit(250)  # a later request does not push the first one back
    assert not checkpoint.due()
    clock.now_s += 0.05
    assert checkpoint.due()
    checkpoint.request_commit(0)
    assert checkpoint.due()


def test_nothing_to_commit_is_never_due(clock: _Clock) -> None:
    checkpoint = _checkpoint(1_000)
    checkpoint._producer.in_transaction = False  # type: ignore[misc]
    checkpoint.request_commit()
    clock.now_s += 5
    assert not checkpoint.due()
