"""Deadlines: one sweep timer cancels the runs that overrun, and only those."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from services.executor.deadlines import Deadlines

from .support import run


async def guarded(deadlines: Deadlines, seconds: float, timeout_s: float) -> tuple[str, float]:
    """Sleep under a deadline the way the runner does; returns how it ended and when."""
    task = asyncio.current_task()
    assert task is not None
    began = time.monotonic()
    ticket = deadlines.add(task, asyncio.get_running_loop().time() + timeout_s)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        if not deadlines.finish(task, ticket):
            raise
        return "expired", time.monotonic() - began
    deadlines.finish(task, ticket)
    return "done", time.monotonic() - began


def test_only_overrunning_runs_are_cancelled_near_their_deadline() -> None:
    async def scenario() -> list[Any]:
        deadlines = Deadlines(asyncio.get_running_loop())
        runs = [guarded(deadlines, 0.05, 0.3), guarded(deadlines, 5, 0.1),
                guarded(deadlines, 5, 0.2), guarded(deadlines, 0.01, 0.02)]  # fmt: skip
        results = await asyncio.gather(*runs)
        assert len(deadlines) == 0
        deadlines.close()
        return results

    (a, _), (b, tb), (c, tc), (d, _) = run(scenario())
    assert (a, b, c, d) == ("done", "expired", "expired", "done")
    assert 0.1 <= tb < 0.3 and 0.2 <= tc < 0.4


def test_a_task_goes_on_after_its_deadline_cancelled_a_run() -> None:
    """The cancellation is withdrawn (uncancel): later awaits and timeouts work normally."""

    async def scenario() -> tuple[str, str, int]:
        deadlines = Deadlines(asyncio.get_running_loop())
        first = await guarded(deadlines, 5, 0.05)
        second = await guarded(deadlines, 0.01, 1.0)
        task = asyncio.current_task()
        assert task is not None
        try:
            async with asyncio.timeout(0.02):
                await asyncio.sleep(1)
        except TimeoutError:
            pass
        deadlines.close()
        return first[0], second[0], task.cancelling()

    assert run(scenario()) == ("expired", "done", 0)


def test_a_run_that_swallows_the_cancellation_still_clears_it() -> None:
    async def scenario() -> int:
        deadlines = Deadlines(asyncio.get_running_loop())
        task = asyncio.current_task()
        assert task is not None
        ticket = deadlines.add(task, asyncio.get_running_loop().time() + 0.02)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(1)  # a handler that ignores cancellation and returns normally
        assert deadlines.finish(task, ticket)
        await asyncio.sleep(0.01)  # not cancelled again
        deadlines.close()
        return task.cancelling()

    assert run(scenario()) == 0


def test_thousands_of_deadlines_use_one_timer() -> None:
    async def scenario() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines(loop)
        before = len(loop._scheduled)  # type: ignore[attr-defined]
        runs = [asyncio.ensure_future(guarded(deadlines, 0.01, 10 + i / 1000)) for i in range(3000)]
        await asyncio.sleep(0)
        timers = len(loop._scheduled) - before  # type: ignore[attr-defined]
        results = await asyncio.gather(*runs)
        deadlines.close()
        return timers, sum(r[0] == "done" for r in results)

    timers, done = run(scenario())
    assert done == 3000
    assert timers <= 3000 + 1  # the runs' own sleeps, plus one sweep timer
