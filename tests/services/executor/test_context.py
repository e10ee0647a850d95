from __future__ import annotations

import time

import pytest

from services.executor.context import HandlerContext
from streams.topics import Priority

from .support import new_ctx


def test_deadlines_are_timeout_after_the_given_clocks() -> None:
    ctx = new_ctx(timeout_s=2.5, now_monotonic_s=100.0, now_epoch_ms=1_000)
    assert ctx.deadline_monotonic_s == 102.5
    assert ctx.deadline_epoch_ms == 3_500


def test_remaining_counts_down_and_stops_at_zero() -> None:
    ctx = new_ctx(timeout_s=10.0)
    assert 9.0 < ctx.remaining_s() <= 10.0
    past = new_ctx(timeout_s=1.0, now_monotonic_s=time.monotonic() - 5.0)
    assert past.remaining_s() == 0.0


def test_context_is_frozen() -> None:
    ctx = new_ctx()
    with pytest.raises(AttributeError):
        ctx.attempt = 2  # type: ignore[misc]


def test_from_due_event_reads_the_avro_record() -> None:
    event = {
        "execution_id": "j@5",
        "job_id": "j",
        "job_version": 3,
        "scheduled_for_ms": 5,
        "fire_at_ms": 6,
        "attempt": 2,
        "handler": "reports.nightly",
        "payload": b"\x00\x01",
        "timeout_ms": 1500,
        "priority": "HIGH",
    }
    ctx = HandlerContext.from_due_event(
        event, worker_id="w1", now_monotonic_s=10.0, now_epoch_ms=1_000
    )
    assert ctx.execution_id == "j@5"
    assert ctx.job_id == "j"
    assert ctx.handler == "reports.nightly"
    assert ctx.attempt == 2
    assert ctx.payload == b"\x00\x01"
    assert ctx.priority is Priority.HIGH
    assert ctx.worker_id == "w1"
    assert ctx.deadline_monotonic_s == 11.5
    assert ctx.deadline_epoch_ms == 2_500


def test_the_hot_path_constructor_sets_every_field_as_the_keyword_constructor_does() -> None:
    fast = HandlerContext.of_run(
        "j@5", "j", "reports.nightly", 5, 2, b"\x00", Priority.LOW, "w1", 1500, 10.0, 1_000
    )
    slow = new_ctx(
        execution_id="j@5", job_id="j", handler="reports.nightly", scheduled_for_ms=5,
        attempt=2, payload=b"\x00", priority=Priority.LOW, worker_id="w1", timeout_s=1.5,
        now_monotonic_s=10.0, now_epoch_ms=1_000,
    )  # fmt: skip
    assert fast == slow
    assert fast._asdict() == slow._asdict()  # every field, by name
    assert type(fast) is HandlerContext
    with pytest.raises(AttributeError):
        fast.attempt = 3  # type: ignore[misc]
