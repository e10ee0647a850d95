"""The in-flight window: *chains* of runs that take buffered records, a run at a time.

A chain is a task that takes the next records from the lane buffers (a run of one
partition, :meth:`LaneBuffers.take_run`) and starts them (a plain call), awaiting only the
rest of a run that must wait, after putting the records behind it back, then takes the
next, until the buffers are empty. A handler that finishes without suspending costs no
task, no coroutine frame, no timer and no loop turn; a run that waits holds its chain, and
:meth:`Chains.dispatch` starts more while records wait and no chain is free to take them
(1, 2, 4, ... per loop turn, up to ``max_in_flight`` chains). A chain yields to the loop
every ``yield_every`` records so that consuming and committing go on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from services.executor.lane_buffers import Buffered, LaneBuffers

StartRecords = Callable[
    [list[Buffered], "asyncio.Task[Any]"], tuple[int, Coroutine[Any, Any, None] | None]
]
"""Starts records of one partition in order (a run from :meth:`LaneBuffers.take_run`) until
one must wait; returns how many it took (the rest were not touched) and the rest of the run
of the last one taken to await, or None when all are done. The task is the chain's own, to
cancel the run at its deadline or when it is dropped."""


class Chains:
    """At most ``max_in_flight`` chains running records from ``buffers`` with ``start``."""

    def __init__(
        self,
        buffers: LaneBuffers,
        start: StartRecords,
        max_in_flight: int,
        yield_every: int = 256,
        on_idle: Callable[[], None] | None = None,
    ) -> None:
        self._buffers = buffers
        self._on_idle = on_idle  # called when the last chain ends
        self._start = start
        self._max = max_in_flight
        self._yield_every = yield_every
        self._tasks: set[asyncio.Task[None]] = set()
        self._free = 0  # chains at their yield point, about to take more records
        self._burst = 1
        # Records per take, for every chain: 1 once a run had to wait (the records taken
        # after it go back, read again later: a take of many while most runs wait would
        # read each record many times), doubled after each take that ran to its end without
        # waiting, up to ``yield_every``.
        self._run_limit = yield_every
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
            task.add_done_callback(self._ended)
        self._burst *= 2
        return count

    def _ended(self, task: asyncio.Task[None]) -> None:
        tasks = self._tasks
        tasks.discard(task)
        if not tasks and self._on_idle is not None:
            self._on_idle()

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
        buffers, start = self._buffers, self._start
        take_run = buffers.take_run
        every = self._yield_every
        left = every  # records until the next yield
        while not self.stopping:
            limit = self._run_limit
            records = take_run(limit if limit < left else left)
            if not records:
                return
            taken, rest = start(records, task)
            if taken < len(records):
                buffers.put_back(records[taken:])  # before any await: taken next, as if never
                self._run_limit = 1
            elif rest is None and limit < every:
                self._run_limit = limit + limit
            if rest is not None:
                await rest
            left -= taken
            if left <= 0:
                left = every
                self._free += 1
                try:
                    await asyncio.sleep(0)
                finally:
                    self._free -= 1
