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
