"""Per-run deadlines with one loop timer for all runs, instead of one ``asyncio.timeout`` each.

``asyncio.timeout`` costs a Timeout object and a timer handle pushed on (and cancelled in)
the event loop's heap per run; with thousands of runs in flight that heap work was a
large share of the executor's CPU. Here a run registers its task in the bucket of its
deadline (``resolution_s`` wide) and removes it when it ends: a set add and a set discard.
One timer fires at the end of the earliest bucket and cancels the tasks still in it,
so a run is cancelled at most ``resolution_s`` after its deadline.

A run learns that the cancellation was its deadline from :meth:`Deadlines.finish`, which
also withdraws the cancellation request (``Task.uncancel``), as ``asyncio.timeout`` does,
so the task can go on running other records.
"""

from __future__ import annotations

import asyncio
import heapq
from typing import Any

RunTask = asyncio.Task[Any]


class Deadlines:
    """Deadlines of the runs in flight on one event loop; cancels the tasks that overrun."""

    def __init__(self, loop: asyncio.AbstractEventLoop, resolution_s: float = 0.01) -> None:
        self._loop = loop
        self._resolution_s = resolution_s
        self._buckets: dict[int, set[RunTask]] = {}
        self._ticks: list[int] = []  # heap of the buckets' ticks
        self._timer: asyncio.TimerHandle | None = None
        self._timer_tick = 0
        self._expired: set[RunTask] = set()

    def __len__(self) -> int:
        """Runs registered and not finished (empty buckets are not counted)."""
        return sum(len(bucket) for bucket in self._buckets.values())

    def add(self, task: RunTask, deadline_s: float) -> int:
        """Cancel ``task`` once ``loop.time()`` passes ``deadline_s``; returns its ticket."""
        tick = int(deadline_s / self._resolution_s) + 1
        bucket = self._buckets.get(tick)
        if bucket is None:
            bucket = self._buckets[tick] = set()
            heapq.heappush(self._ticks, tick)
            if self._timer is None or tick < self._timer_tick:
                self._arm(tick)
        bucket.add(task)
        return tick

    def finish(self, task: RunTask, ticket: int) -> bool:
        """The run of ``task`` ended; True when its deadline cancelled it (now withdrawn)."""
        bucket = self._buckets.get(ticket)
        if bucket is not None:
            bucket.discard(task)
        if task not in self._expired:
            return False
        self._expired.discard(task)
        task.uncancel()
        return True

    def close(self) -> None:
        """Stop the timer; registered runs are no longer cancelled."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._buckets.clear()
        self._ticks.clear()

    def _arm(self, tick: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_tick = tick
        self._timer = self._loop.call_at(tick * self._resolution_s, self._sweep)

    def _sweep(self) -> None:
        self._timer = None
        # asyncio may run a timer up to its clock resolution early: allow a hair of slack.
        now_tick = self._loop.time() / self._resolution_s + 1e-3
        ticks, buckets = self._ticks, self._buckets
        while ticks and ticks[0] <= now_tick:
            for task in buckets.pop(heapq.heappop(ticks)):
                if not task.done():
                    self._expired.add(task)
                    task.cancel()
        if ticks:
            self._arm(ticks[0])
