from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import pytest

from services.executor.context import HandlerContext
from services.executor.exceptions import (
    HandlerNotFoundError,
    HandlerTimeoutError,
    NonRetryableError,
    RetryableError,
)
from services.executor.handlers import HandlerRegistry, RegisteredHandler
from services.executor.runner import RunOutcome, RunStatus, failed_outcome, run_handler
from services.executor.sync_pool import ABANDONED_NOTE, NOT_STARTED_NOTE, SyncHandlerPool
from streams import clock

from .support import new_ctx, run

SCHEMA = Path(__file__).resolve().parents[3] / "schemas" / "due_event.v1.avsc"


def handler(fn: Callable[[HandlerContext], Any]) -> RegisteredHandler:
    return HandlerRegistry().register("tests.handler", fn)


async def run_one(
    fn: Callable[[HandlerContext], Any], timeout_s: float = 2.0, pool_size: int = 2
) -> RunOutcome:
    pool = SyncHandlerPool(pool_size)
    try:
        return await run_handler(handler(fn), new_ctx(timeout_s=timeout_s), timeout_s, pool)
    finally:
        pool.close()


async def async_ok(ctx: HandlerContext) -> None:
    await asyncio.sleep(0)


def sync_ok(ctx: HandlerContext) -> None:
    return None


@pytest.mark.parametrize("fn", [async_ok, sync_ok])
def test_success(fn: Callable[[HandlerContext], Any]) -> None:
    before = clock.now_ms()  # the runner stamps with the service's (broker) clock
    outcome = run(run_one(fn))
    assert outcome.status is RunStatus.SUCCEEDED and outcome.succeeded
    assert outcome.error is None and outcome.retryable is False
    assert before <= outcome.started_at_ms <= outcome.finished_at_ms <= before + 1000


def raiser(exc: Exception, is_async: bool) -> Callable[[HandlerContext], Any]:
    async def async_fn(ctx: HandlerContext) -> None:
        raise exc

    def sync_fn(ctx: HandlerContext) -> None:
        raise exc

    return async_fn if is_async else sync_fn


@pytest.mark.parametrize("is_async", [True, False])
@pytest.mark.parametrize(
    ("exc", "retryable", "retry_after_s", "text"),
    [
        (NonRetryableError("bad payload"), False, None, "NonRetryableError: bad payload"),
        (RetryableError("busy", retry_after_s=5), True, 5, "RetryableError: busy"),
        (ValueError("boom"), True, None, "ValueError: boom"),
        (KeyError("k"), True, None, "KeyError: 'k'"),
    ],
)
def test_exceptions_become_failed_outcomes(
    is_async: bool, exc: Exception, retryable: bool, retry_after_s: float | None, text: str
) -> None:
    outcome = run(run_one(raiser(exc, is_async)))
    assert outcome.status is RunStatus.FAILED
    assert outcome.retryable is retryable
    assert outcome.retry_after_s == retry_after_s
    assert outcome.error == text


def test_async_handlers_run_in_the_calling_task_without_a_new_task() -> None:
    seen: list[Any] = []

    async def probe(ctx: HandlerContext) -> None:
        seen.append(asyncio.current_task())

    async def scenario() -> Any:
        await run_one(probe)
        return asyncio.current_task()

    assert run(scenario()) is seen[0]


def test_sync_handlers_run_off_the_event_loop_thread() -> None:
    seen: list[str] = []
    run(run_one(lambda ctx: seen.append(threading.current_thread().name)))
    assert seen[0].startswith("kafkron-handler")


def test_an_async_handler_past_its_deadline_is_timed_out_promptly() -> None:
    async def slow(ctx: HandlerContext) -> None:
        await asyncio.sleep(10)

    started = time.monotonic()
    outcome = run(run_one(slow, timeout_s=0.1))
    assert outcome.status is RunStatus.TIMED_OUT
    assert outcome.retryable is True
    assert "did not finish within 0.1s" in (outcome.error or "")
    assert time.monotonic() - started < 1.0


def test_a_handlers_own_timeout_error_is_a_failure_not_our_timeout() -> None:
    async def own_timeout(ctx: HandlerContext) -> None:
        async with asyncio.timeout(0.01):
            await asyncio.sleep(1)

    outcome = run(run_one(own_timeout, timeout_s=5))
    assert outcome.status is RunStatus.FAILED
    assert outcome.retryable is True


@pytest.mark.parametrize("is_async", [True, False])
def test_handler_timeout_error_is_timed_out(is_async: bool) -> None:
    outcome = run(run_one(raiser(HandlerTimeoutError("webhook slow"), is_async)))
    assert outcome.status is RunStatus.TIMED_OUT
    assert "webhook slow" in (outcome.error or "")


def test_no_time_left_is_timed_out_without_running() -> None:
    calls: list[int] = []
    outcome = run(run_one(lambda ctx: calls.append(1), timeout_s=0))
    assert outcome.status is RunStatus.TIMED_OUT
    assert calls == []


def test_a_sync_handler_returning_a_coroutine_fails_cleanly() -> None:
    outcome = run(run_one(lambda ctx: async_ok(ctx)))
    assert outcome.status is RunStatus.FAILED
    assert "async def" in (outcome.error or "")


def test_system_exit_in_a_sync_handler_does_not_end_the_loop() -> None:
    outcome = run(run_one(lambda ctx: sys.exit(3)))
    assert outcome.status is RunStatus.FAILED
    assert "SystemExit" in (outcome.error or "")


def test_cancelling_the_caller_still_propagates() -> None:
    async def slow(ctx: HandlerContext) -> None:
        await asyncio.sleep(10)

    async def scenario() -> None:
        task = asyncio.ensure_future(run_one(slow))
        await asyncio.sleep(0.01)
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        run(scenario())


def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_a_stuck_sync_handler_is_abandoned_and_blocks_nobody_beyond_its_timeout() -> None:
    release = threading.Event()

    async def scenario() -> tuple[RunOutcome, RunOutcome, SyncHandlerPool]:
        pool = SyncHandlerPool(1)  # one slot: the stuck run would otherwise block everything
        stuck = handler(lambda ctx: release.wait(10))
        first = await run_handler(stuck, new_ctx(), 0.1, pool)
        assert pool.abandoned_threads == 1 and pool.abandoned_total == 1
        started = time.monotonic()
        second = await run_handler(handler(sync_ok), new_ctx(), 1.0, pool)
        assert time.monotonic() - started < 0.5
        pool.close()
        return first, second, pool

    try:
        first, second, pool = run(scenario())
    finally:
        release.set()
    assert first.status is RunStatus.TIMED_OUT
    assert ABANDONED_NOTE in (first.error or "")
    assert second.status is RunStatus.SUCCEEDED
    wait_until(lambda: pool.abandoned_threads == 0 and pool.threads == 0)


def test_abandoned_threads_are_capped_then_capacity_shrinks() -> None:
    release = threading.Event()
    ran: list[Any] = []

    async def scenario() -> list[RunOutcome]:
        pool = SyncHandlerPool(1, max_abandoned=1)
        stuck = handler(lambda ctx: release.wait(10))
        outcomes = [await run_handler(stuck, new_ctx(), 0.05, pool) for _ in range(2)]
        assert pool.threads == 2 and pool.abandoned_threads == 2 and not pool.healthy
        # The second abandoned thread kept the only slot: a new run waits, then times out
        # without ever starting.
        outcomes.append(await run_handler(handler(ran.append), new_ctx(), 0.1, pool))
        release.set()
        outcomes.append(
            await run_handler(handler(lambda ctx: ran.append("late")), new_ctx(), 2, pool)
        )
        # The thread that kept the slot has returned (the late run got its slot); the other
        # abandoned thread returns on its own schedule, then the pool is healthy again.
        deadline = time.monotonic() + 5.0
        while not pool.healthy and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert pool.healthy and pool.abandoned_threads == 0
        pool.close()
        return outcomes

    try:
        outcomes = run(scenario())
    finally:
        release.set()
    assert [o.status for o in outcomes] == [RunStatus.TIMED_OUT] * 3 + [RunStatus.SUCCEEDED]
    assert NOT_STARTED_NOTE in (outcomes[2].error or "")
    assert ran == ["late"]


def test_sync_runs_are_bounded_by_max_workers() -> None:
    active = 0
    peak = 0
    lock = threading.Lock()

    def busy(ctx: HandlerContext) -> None:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.02)
        with lock:
            active -= 1

    async def scenario() -> list[RunOutcome]:
        pool = SyncHandlerPool(3)
        try:
            h = handler(busy)
            return await asyncio.gather(*(run_handler(h, new_ctx(), 5, pool) for _ in range(12)))
        finally:
            pool.close()

    outcomes = run(scenario())
    assert all(o.succeeded for o in outcomes)
    assert peak == 3


def test_a_closed_pool_refuses_runs() -> None:
    async def scenario() -> RunOutcome:
        pool = SyncHandlerPool(1)
        pool.close()
        return await run_handler(handler(sync_ok), new_ctx(), 1, pool)

    outcome = run(scenario())
    assert outcome.status is RunStatus.FAILED
    assert "closed" in (outcome.error or "")


def test_pool_size_must_be_positive() -> None:
    with pytest.raises(ValueError):
        SyncHandlerPool(0)


def test_attempt_record_fits_the_due_event_history_schema() -> None:
    schema = fastavro.parse_schema(json.loads(SCHEMA.read_text()))
    outcome = run(run_one(raiser(ValueError("boom"), True)))
    record = {
        "execution_id": "j@1",
        "job_id": "j",
        "job_version": 1,
        "scheduled_for_ms": 1,
        "fire_at_ms": 1,
        "attempt": 2,
        "handler": "tests.handler",
        "payload": b"",
        "timeout_ms": 1000,
        "emitted_at_ms": 1,
        "history": [outcome.attempt_record(1, "worker-a")],
    }
    assert fastavro.validation.validate(record, schema, raise_errors=True)


class CountingTimeouts:
    """Wraps asyncio.timeout to count how many deadline timers a run arms."""

    def __init__(self) -> None:
        self.armed = 0
        self.real = asyncio.timeout

    def __call__(self, delay: float | None) -> Any:
        self.armed += 1
        return self.real(delay)


def test_a_handler_that_never_suspends_arms_no_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = CountingTimeouts()
    monkeypatch.setattr(asyncio, "timeout", counter)

    async def no_suspend(ctx: HandlerContext) -> None:
        return None

    async def one_suspend(ctx: HandlerContext) -> None:
        await asyncio.sleep(0)

    assert run(run_one(no_suspend)).succeeded
    assert counter.armed == 0
    assert run(run_one(one_suspend)).succeeded
    assert counter.armed == 1


def test_a_handler_resumed_after_its_first_step_behaves_like_a_plain_await() -> None:
    steps: list[str] = []

    async def many_awaits(ctx: HandlerContext) -> None:
        for i in range(3):
            await asyncio.sleep(0.001)
            fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(fut.set_result, i)
            steps.append(f"got {await fut}")
        raise RetryableError("after three steps")

    outcome = run(run_one(many_awaits))
    assert steps == ["got 0", "got 1", "got 2"]
    assert outcome.status is RunStatus.FAILED
    assert outcome.error == "RetryableError: after three steps"


def test_a_timed_out_async_handler_sees_the_cancellation_and_cleans_up() -> None:
    cleaned: list[bool] = []

    async def slow(ctx: HandlerContext) -> None:
        try:
            await asyncio.sleep(0)
            await asyncio.sleep(10)
        finally:
            cleaned.append(True)

    outcome = run(run_one(slow, timeout_s=0.05))
    assert outcome.status is RunStatus.TIMED_OUT
    assert cleaned == [True]


def test_handlers_returning_other_awaitables_are_awaited_under_the_deadline() -> None:
    def returns_future(ctx: HandlerContext) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.01, fut.set_result, None)
        return fut

    def never_done(ctx: HandlerContext) -> asyncio.Future[None]:
        return asyncio.get_running_loop().create_future()

    async def scenario() -> list[RunStatus]:
        pool = SyncHandlerPool(1)
        statuses = []
        for fn in (returns_future, never_done):
            registered = RegisteredHandler("tests.future", fn, True, handler(sync_ok).kind, "test")
            statuses.append((await run_handler(registered, new_ctx(), 0.1, pool)).status)
        pool.close()
        return statuses

    assert run(scenario()) == [RunStatus.SUCCEEDED, RunStatus.TIMED_OUT]


def test_a_pool_serves_one_event_loop() -> None:
    pool = SyncHandlerPool(1)
    h = handler(sync_ok)
    try:
        assert run(run_handler(h, new_ctx(), 1, pool)).succeeded
        outcome = run(run_handler(h, new_ctx(), 1, pool))
    finally:
        pool.close()
    assert outcome.status is RunStatus.FAILED
    assert "one event loop" in (outcome.error or "")


def test_an_unknown_handler_becomes_a_non_retryable_failed_outcome() -> None:
    try:
        HandlerRegistry().resolve("reports.nightly")
    except HandlerNotFoundError as exc:
        outcome = failed_outcome(exc)
    assert outcome.status is RunStatus.FAILED
    assert outcome.retryable is False
    assert "reports.nightly" in (outcome.error or "")
    assert outcome.started_at_ms <= outcome.finished_at_ms
