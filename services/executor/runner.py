"""Run one attempt of a handler under a deadline and turn whatever happens into an outcome."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Coroutine, Generator
from enum import StrEnum
from types import CoroutineType
from typing import Any, NamedTuple, cast

from services.executor.context import HandlerContext
from services.executor.exceptions import HandlerTimeoutError
from services.executor.handlers import RegisteredHandler
from services.executor.sync_pool import SyncHandlerPool
from streams import clock
from streams.exceptions import KafkronError

MAX_ERROR_CHARS = 2000


class RunStatus(StrEnum):
    """How an attempt ended; the values are ``ExecutionStatus`` symbols of the Avro schema."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"


class RunOutcome(NamedTuple):
    """The result of one attempt: status, error text and whether a retry may help.

    A NamedTuple rather than a frozen dataclass: it is built once per run and is 4x cheaper.
    """

    status: RunStatus
    error: str | None
    retryable: bool
    retry_after_s: float | None
    started_at_ms: int
    finished_at_ms: int

    @property
    def succeeded(self) -> bool:
        return self.status is RunStatus.SUCCEEDED

    def attempt_record(self, attempt: int, worker_id: str) -> dict[str, Any]:
        """This outcome as an ``AttemptOutcome`` record for a DueEvent's ``history``."""
        return {
            "attempt": attempt,
            "status": self.status.value,
            "error": self.error,
            "worker_id": worker_id,
            "started_at_ms": self.started_at_ms,
            "finished_at_ms": self.finished_at_ms,
        }


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000 + clock.base_ms  # clock.now_ms(), inlined


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def failed_outcome(exc: Exception, started_ms: int | None = None) -> RunOutcome:
    """The FAILED outcome of ``exc``, e.g. a HandlerNotFoundError from ``resolve``.

    Retryability comes from a KafkronError's attributes; any other exception is retryable
    (``max_attempts`` bounds it, as with Temporal's application errors).
    """
    if started_ms is None:
        started_ms = _now_ms()
    retryable = exc.retryable if isinstance(exc, KafkronError) else True
    retry_after_s = exc.retry_after_s if isinstance(exc, KafkronError) else None
    return RunOutcome(
        RunStatus.FAILED, _describe(exc), retryable, retry_after_s, started_ms, _now_ms()
    )


def _timed_out(message: str, started_ms: int) -> RunOutcome:
    return RunOutcome(RunStatus.TIMED_OUT, message, True, None, started_ms, _now_ms())


def error_outcome(exc: Exception, started_ms: int) -> RunOutcome:
    """The outcome of a handler that raised ``exc``: TIMED_OUT for its own timeout, else FAILED."""
    if isinstance(exc, HandlerTimeoutError):
        return _timed_out(_describe(exc), started_ms)
    return failed_outcome(exc, started_ms)


def deadline_outcome(name: str, timeout_s: float, note: str, started_ms: int) -> RunOutcome:
    """TIMED_OUT at our deadline; ``note`` says what became of a sync handler's thread."""
    message = f"{name} did not finish within {timeout_s}s"
    return _timed_out(f"{message}; {note}" if note else message, started_ms)


def no_time_outcome(name: str, timeout_s: float, started_ms: int) -> RunOutcome:
    """TIMED_OUT without running: the attempt had no time left."""
    return _timed_out(f"no time left to run {name} (timeout {timeout_s}s)", started_ms)


def cancel_note(exc: BaseException) -> str:
    """The note a CancelledError carries (the sync pool's, about its thread), or ''."""
    return exc.args[0] if exc.args and isinstance(exc.args[0], str) else ""


class _DeadlineExpiredError(Exception):
    """Our deadline (not a TimeoutError of the handler's own) ended the run."""


class Resume:
    """Continues a coroutine whose first step already ran, exactly as ``await coro`` would."""

    __slots__ = ("_coro", "_yielded")

    def __init__(self, coro: Coroutine[Any, Any, Any], yielded: Any) -> None:
        self._coro = coro
        self._yielded = yielded

    def __await__(self) -> Generator[Any, Any, None]:
        coro, yielded = self._coro, self._yielded
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancellation included: the handler sees it
                try:
                    yielded = coro.throw(exc)
                except StopIteration:
                    return
            else:
                try:
                    yielded = coro.send(sent)
                except StopIteration:
                    return


async def _await_until(awaitable: Awaitable[Any], timeout_s: float) -> None:
    """Await under a deadline; our expiry becomes _DeadlineExpiredError, with the pool's note."""
    deadline = asyncio.timeout(timeout_s)
    try:
        async with deadline:
            await awaitable
    except TimeoutError as exc:
        if not deadline.expired():
            raise
        cause = exc.__context__
        note = cancel_note(cause) if isinstance(cause, asyncio.CancelledError) else ""
        raise _DeadlineExpiredError(note) from None


async def _run_async(handler: RegisteredHandler, ctx: HandlerContext, timeout_s: float) -> None:
    t0 = time.monotonic()
    awaitable = handler.fn(ctx)
    if awaitable is None:
        return
    if type(awaitable) is not CoroutineType:
        await _await_until(awaitable, timeout_s)
        return
    # Step the coroutine once without a timer: a handler that finishes without suspending
    # (most short ones) then costs no timer handle, which is most of asyncio.timeout's cost.
    coro = cast(Coroutine[Any, Any, Any], awaitable)
    try:
        yielded = coro.send(None)
    except StopIteration:
        return
    await _await_until(Resume(coro, yielded), timeout_s - (time.monotonic() - t0))


async def run_handler(
    handler: RegisteredHandler,
    ctx: HandlerContext,
    timeout_s: float,
    sync_pool: SyncHandlerPool,
) -> RunOutcome:
    """Run ``handler(ctx)`` for at most ``timeout_s`` seconds; never raises for its failures.

    Async handlers are awaited directly in the calling task (no task per run: the caller
    decides concurrency); the deadline cancels them at their next ``await``, so an async
    handler that blocks the event loop cannot be timed out. Sync handlers run on
    ``sync_pool``; at the deadline they are reported TIMED_OUT and their thread abandoned
    (see :mod:`services.executor.sync_pool`). Waiting for a free thread counts against the
    deadline. Cancelling the calling task still propagates ``CancelledError``.

    The executor's loop does the same through :meth:`RecordRunner.start
    <services.executor.runs.RecordRunner.start>`, with one sweep timer for every run's
    deadline (:mod:`services.executor.deadlines`) instead of an ``asyncio.timeout`` each.
    """
    started_ms = _now_ms()
    if timeout_s <= 0:
        return no_time_outcome(handler.name, timeout_s, started_ms)
    try:
        if handler.is_async:
            await _run_async(handler, ctx, timeout_s)
        else:
            await _await_until(sync_pool.run(handler.fn, ctx), timeout_s)
    except _DeadlineExpiredError as exc:
        return deadline_outcome(handler.name, timeout_s, str(exc), started_ms)
    except Exception as exc:
        return error_outcome(exc, started_ms)
    return RunOutcome(RunStatus.SUCCEEDED, None, False, None, started_ms, _now_ms())
