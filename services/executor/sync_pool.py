"""A bounded pool of daemon threads for sync handlers that survives handlers that never return.

Python cannot kill a thread. When a sync handler overruns its deadline, the waiting
coroutine is cancelled (the runner reports TIMED_OUT) and the thread is *abandoned*: it
keeps running the handler until that returns, and its result is dropped. The pool counts
abandoned threads and frees their run slots, starting a new thread in their place, so a
stuck handler never holds up other runs beyond its own timeout. To keep a handler that
always hangs from growing threads without bound, at most ``max_abandoned`` threads are
abandoned at once; past that, a newly abandoned thread keeps its slot until it returns
(capacity shrinks rather than threads grow) and :attr:`SyncHandlerPool.healthy` is False,
a signal to restart the executor: it then takes no sync work until some return (see
:mod:`services.executor.runs`). Threads are daemons, so stuck ones never block exit.
"""

from __future__ import annotations

import asyncio
import inspect
import queue
import threading
from collections.abc import Callable
from enum import Enum

from services.executor.context import HandlerContext

SyncFn = Callable[[HandlerContext], object]

ABANDONED_NOTE = "sync handler thread abandoned at the deadline; it may still be running"
NOT_STARTED_NOTE = "sync handler never started: no free handler thread before the deadline"


class _State(Enum):
    PENDING = 0
    RUNNING = 1
    CANCELLED = 2
    ABANDONED = 3
    DONE = 4


class _WorkItem:
    __slots__ = ("ctx", "fn", "future", "holds_slot", "loop", "state")

    def __init__(self, fn: SyncFn, ctx: HandlerContext, loop: asyncio.AbstractEventLoop) -> None:
        self.fn = fn
        self.ctx = ctx
        self.loop = loop
        self.future: asyncio.Future[None] = loop.create_future()
        self.state = _State.PENDING
        self.holds_slot = False


def _call_sync(fn: SyncFn, ctx: HandlerContext) -> None:
    result = fn(ctx)
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()
        raise TypeError("a sync handler returned an awaitable; declare it with 'async def'")


def _resolve(future: asyncio.Future[None], exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is None:
        future.set_result(None)
    elif isinstance(exc, Exception):
        future.set_exception(exc)
    else:  # SystemExit and the like must not end the executor's event loop
        future.set_exception(RuntimeError(f"sync handler raised {exc!r}"))


class SyncHandlerPool:
    """Runs sync handlers on at most ``max_workers`` threads at once (plus abandoned ones).

    Use it from one event loop; call :meth:`close` when done.
    """

    def __init__(
        self,
        max_workers: int,
        *,
        max_abandoned: int | None = None,
        thread_name_prefix: str = "kafkron-handler",
    ) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.max_workers = max_workers
        self.max_abandoned = max_workers * 4 if max_abandoned is None else max_abandoned
        self._prefix = thread_name_prefix
        self._queue: queue.SimpleQueue[_WorkItem | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._slots = asyncio.Semaphore(max_workers)
        self._threads = 0
        self._idle = 0
        self._abandoned = 0
        self.abandoned_total = 0
        self._closed = False
        self._completed: list[tuple[asyncio.Future[None], BaseException | None]] = []
        self._drain_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def abandoned_threads(self) -> int:
        """Threads still running a handler whose run was abandoned at its deadline."""
        return self._abandoned

    @property
    def threads(self) -> int:
        """Live worker threads, abandoned ones included."""
        return self._threads

    @property
    def healthy(self) -> bool:
        """False once abandoned threads reach ``max_abandoned`` and capacity is shrinking."""
        return self._abandoned < self.max_abandoned

    async def run(self, fn: SyncFn, ctx: HandlerContext) -> None:
        """Run ``fn(ctx)`` in a thread; raise what it raises. Cancel to abandon it."""
        try:
            await self._slots.acquire()
        except asyncio.CancelledError:
            raise asyncio.CancelledError(NOT_STARTED_NOTE) from None
        try:
            item = self._submit(fn, ctx)
        except BaseException:
            self._slots.release()
            raise
        try:
            await item.future
        except asyncio.CancelledError:
            note = self._cancel(item)
            raise asyncio.CancelledError(note) from None
        except BaseException:
            self._slots.release()
            raise
        self._slots.release()

    def _submit(self, fn: SyncFn, ctx: HandlerContext) -> _WorkItem:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None:
                raise RuntimeError("a SyncHandlerPool serves one event loop; make one per loop")
            self._loop = loop
        item = _WorkItem(fn, ctx, loop)
        with self._lock:
            if self._closed:
                raise RuntimeError("the sync handler pool is closed")
            # Every queued item has a thread reserved for it, so none waits behind a stuck one.
            spawn = self._idle == 0
            if spawn:
                self._threads += 1
            else:
                self._idle -= 1
        self._queue.put(item)
        if spawn:
            name = f"{self._prefix}-{self.abandoned_total}-{self._threads}"
            threading.Thread(target=self._work, name=name, daemon=True).start()
        return item

    def _cancel(self, item: _WorkItem) -> str | None:
        """Called on the loop when the awaiting run is cancelled; settles the slot."""
        with self._lock:
            state = item.state
            if state is _State.RUNNING:
                item.state = _State.ABANDONED
                self._abandoned += 1
                self.abandoned_total += 1
                item.holds_slot = self._abandoned > self.max_abandoned
            elif state is _State.PENDING:
                item.state = _State.CANCELLED
        if not item.holds_slot:
            self._slots.release()
        if state is _State.RUNNING:
            return ABANDONED_NOTE
        return NOT_STARTED_NOTE if state is _State.PENDING else None

    def _work(self) -> None:
        item = self._queue.get()
        while item is not None and not self._run_item(item):
            item = self._queue.get()

    def _run_item(self, item: _WorkItem) -> bool:
        """Run one item and report it; True when this thread must exit."""
        with self._lock:
            run = item.state is _State.PENDING
            if run:
                item.state = _State.RUNNING
        exc: BaseException | None = None
        if run:
            try:
                _call_sync(item.fn, item.ctx)
            except BaseException as caught:
                exc = caught
        wake = release_slot = False
        with self._lock:
            if item.state is _State.ABANDONED:
                self._abandoned -= 1
                release_slot = item.holds_slot
            elif run:
                self._completed.append((item.future, exc))
                # One wake-up of the loop per burst of completions, not one per run.
                wake = not self._drain_scheduled
                self._drain_scheduled = True
            item.state = _State.DONE
            exit_thread = self._closed or self._idle >= self.max_workers
            if exit_thread:
                self._threads -= 1
            else:
                self._idle += 1
        try:
            if wake:
                item.loop.call_soon_threadsafe(self._drain)
            if release_slot:
                item.loop.call_soon_threadsafe(self._slots.release)
        except RuntimeError:
            pass  # the event loop is closed: nobody waits for this result any more
        return exit_thread

    def _drain(self) -> None:
        with self._lock:
            completed, self._completed = self._completed, []
            self._drain_scheduled = False
        for future, exc in completed:
            _resolve(future, exc)

    def close(self) -> None:
        """Stop idle threads and refuse new runs; running (even abandoned) threads finish."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            idle = self._idle
            self._idle = 0
            self._threads -= idle
        for _ in range(idle):
            self._queue.put(None)
