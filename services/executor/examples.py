"""Example handlers, registered by default as ``examples.*`` (see ``DEFAULT_HANDLER_SPECS``).

They show the handler contract: take a :class:`HandlerContext`, return on success, raise
:class:`RetryableError` / :class:`NonRetryableError` (or any exception: retryable) to fail.
"""

from __future__ import annotations

import asyncio
import logging
import math

from services.executor.context import HandlerContext
from services.executor.exceptions import NonRetryableError, RetryableError

log = logging.getLogger(__name__)
_MAX_LOGGED_PAYLOAD = 500


async def noop(ctx: HandlerContext) -> None:
    """Does nothing and succeeds: for wiring checks and benchmarks."""


async def echo(ctx: HandlerContext) -> None:
    """Logs the payload (the first 500 bytes) and succeeds."""
    payload = ctx.payload[:_MAX_LOGGED_PAYLOAD].decode("utf-8", "replace")
    log.info("echo %s attempt %d: %s", ctx.execution_id, ctx.attempt, payload)


async def flaky(ctx: HandlerContext) -> None:
    """Fails its first attempt (retryable), succeeds on every later one."""
    if ctx.attempt == 1:
        raise RetryableError(f"{ctx.execution_id}: the first attempt always fails")


async def sleep(ctx: HandlerContext) -> None:
    """Sleeps for the payload's number of seconds (e.g. ``b"0.1"``), then succeeds."""
    try:
        seconds = float(ctx.payload.decode("ascii").strip() or "0")
    except (UnicodeDecodeError, ValueError):
        raise NonRetryableError(
            f"examples.sleep needs a payload of seconds like b'0.5', got {ctx.payload[:40]!r}"
        ) from None
    if not math.isfinite(seconds) or seconds < 0:
        raise NonRetryableError(f"examples.sleep needs a finite number >= 0, got {seconds}")
    await asyncio.sleep(seconds)


async def fail(ctx: HandlerContext) -> None:
    """Always fails with a non-retryable error: the execution is dead-lettered at once."""
    raise NonRetryableError(f"{ctx.execution_id}: examples.fail always fails")
