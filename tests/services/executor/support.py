"""Helpers shared by the executor's unit tests."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from services.executor.context import HandlerContext
from streams.topics import Priority

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine on a fresh event loop (no pytest-asyncio in this venv)."""
    return asyncio.run(coro)


def new_ctx(*, timeout_s: float = 5.0, payload: bytes = b"{}", **overrides: Any) -> HandlerContext:
    fields: dict[str, Any] = {
        "execution_id": "job-1@1700000000000",
        "job_id": "job-1",
        "handler": "tests.noop",
        "scheduled_for_ms": 1_700_000_000_000,
        "attempt": 1,
        "payload": payload,
        "priority": Priority.NORMAL,
        "worker_id": "worker-a",
        "timeout_s": timeout_s,
    }
    fields.update(overrides)
    return HandlerContext.for_attempt(**fields)


class RecordingProducer:
    """What prepare() and flush() need: produce (one record or many, as
    TransactionalProducer does), and delivered offsets after the commit."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None, bytes | None, int | None]] = []

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, partition: int | None = None
    ) -> None:
        self.records.append((topic, key, value, partition))

    def produce_many(
        self, records: list[tuple[str, bytes | None, bytes | None]], partition: int | None = None
    ) -> None:
        self.records.extend((topic, key, value, partition) for topic, key, value in records)

    def delivered_offset(self, topic: str, partition: int) -> int | None:
        mine = [r for r in self.records if r[0] == topic and r[3] == partition]
        return len(mine) - 1 if mine else None


class SettableClock:
    """A wall clock in epoch ms that a test moves by hand (``clock.now_ms += ...``)."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms
