"""The in-flight window: *chains* of runs that take buffered records one at a time.

A chain is a task that takes the next record from the lane buffers and starts it (a plain
call), awaiting only the rest of a run that must wait, then takes the next, until the
buffers are empty. A handler that finishes without suspending costs no task, no coroutine
frame, no timer and no loop turn; a run that waits holds its chain, and
:meth:`Chains.dispatch` starts more while records wait and no chain is free to take them
(1, 2, 4, ... per loop turn, up to ``max_in_flight`` chains). A chain yields to the loop
every ``yield_every`` records so that consuming and committing go on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from services.executor.lane_buffers import Buffered, LaneBuffers

StartRecord = Callable[[Buffered, "asyncio.Task[Any]"], Coroutine[Any, Any, None] | None]
"""Starts one record; returns the rest of its run to await, or None when it is done.
The task is the chain's own, to cancel the run at its deadline or when it is dropped."""


class Chains:
    """At most ``max_in_flight`` chains running records from ``buffers`` with ``start``."""

    def __init__(
        self, buffers: LaneBuffers, start: StartRecord, max_in_flight: int, yield_every: int = 256
    ) -> None:
        self._buffers = buffers
        self._start = start
        self._max = max_in_flight
        self._yield_every = yield_every
        self._tasks: set[asyncio.Task[None]] = set()
        self._free = 0  # chains at their yield point, about to take more records
        self._burst = 1
        self.stopping = False

    def __len__(self) -> int:
        return len(self._tasks)

    def dispatch(self) -> int:
        """Start chains while records wait and no chain is free; returns how many started."""
        room = self._max - len(self._tasks)
        if self.stopping or self._free or not self._buffers or room <= 0:
            self._burst = 1
            return 0
        count = min(room, len(self._buffers), self._burst)
        loop = asyncio.get_running_loop()
        for _ in range(count):
            task = loop.create_task(self._chain())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._burst *= 2
        return count

    def cancel_all(self) -> None:
        """Cancel every chain (their runs are dropped)."""
        for task in self._tasks:
            task.cancel()

    async def wait_all(self) -> None:
        """Wait until every chain has ended (after :meth:`cancel_all` or ``stopping``)."""
        if self._tasks:
            await asyncio.wait(list(self._tasks))

    async def _chain(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        take, start = self._buffers.take, self._start
        done = 0
        while not self.stopping:
            message = take()
            if message is None:
                return
            rest = start(message, task)
            if rest is not None:
                await rest
            done += 1
            if done % self._yield_every == 0:
                self._free += 1
                try:
                    await asyncio.sleep(0)
                finally:
                    self._free -= 1
