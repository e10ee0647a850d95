"""DueEvents that arrive before their ``fire_at_ms``, held until then by one loop timer.

The timer may emit a DueEvent up to its ``fire_ahead_ms`` before ``fire_at_ms``, so that its
punctuation and transaction commit are paid before the run is due; the executor starts the
run at ``fire_at_ms``. A held event counts as in flight: its offset is held in the
:class:`~services.executor.offsets.OffsetTracker`, so no commit passes it. It has not
started, so a revoke, a loss or an aborted transaction drops it without any output, and the
partition's next owner (or this one, rewound) reads it again. Its deadline starts when it
starts.

**Bound.** A hold ends at ``min(fire_at_ms, received + max_hold_ms)``: a clock skew between
timer and executor hosts, or a record with a far-future ``fire_at_ms``, must not park a run
(and its partition's committed position) for long, so such an event starts at most
``max_hold_ms`` after it was read, early by the executor's clock.

One heap ordered by release time and one ``call_at`` for its head, not a sleeping task or a
timer handle per event; released runs go back to the front of their priority lane (the
loop's :class:`~services.executor.lane_buffers.LaneBuffers`), so lanes and their starvation
bound decide as for any record.

**Resolution.** Release times are rounded *up* to a multiple of ``resolution_ms``, so runs
never start early and the runs of one slice start together. In ``bench.steady`` (2K/s) the
executor used 87-107 us CPU per run with 1 ms slices, 65-68 us with 5 ms slices and 36-47 us
with nothing held (each release is a loop wake-up and a small batch of results to produce).
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Callable, Collection

from services.executor.assignment import TP, Token
from services.executor.due_view import DueView
from streams import clock


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000 + clock.base_ms  # clock.now_ms(), inlined


class HeldRun:
    """A consumed due record whose run waits for its release time (offset already held)."""

    __slots__ = ("offset", "release_ms", "token", "tp", "view")

    def __init__(self, view: DueView, tp: TP, offset: int, token: Token, release_ms: int) -> None:
        self.view, self.tp, self.offset, self.token = view, tp, offset, token
        self.release_ms = release_ms

    # Named like a consumed Message's, so the lane buffers file it with the records.
    def topic(self) -> str:
        return self.tp[0]

    def partition(self) -> int:
        return self.tp[1]


Release = Callable[[list[HeldRun]], None]
"""Takes the runs whose hold ended, oldest release first."""


class Holds:
    """The held runs of one executor loop; releases each at its time through ``release``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        release: Release,
        max_hold_ms: int,
        resolution_ms: int = 1,
    ) -> None:
        self._loop = loop
        self._release = release
        self.max_hold_ms = max_hold_ms
        self._resolution_ms = resolution_ms
        self._heap: list[tuple[int, int, HeldRun]] = []
        self._seq = 0  # ties keep arrival order
        self._timer: asyncio.TimerHandle | None = None
        self._timer_ms = 0

    def __len__(self) -> int:
        return len(self._heap)

    def hold(self, view: DueView, tp: TP, offset: int, token: Token, received_ms: int) -> None:
        """Hold the run of ``view`` until its ``fire_at_ms`` (at most ``max_hold_ms``)."""
        release_ms = min(view.fire_at_ms, received_ms + self.max_hold_ms)
        release_ms += -release_ms % self._resolution_ms  # up to the end of its slice
        self._seq += 1
        heapq.heappush(
            self._heap, (release_ms, self._seq, HeldRun(view, tp, offset, token, release_ms))
        )
        if self._timer is None or release_ms < self._timer_ms:
            self._arm(release_ms, received_ms)

    def discard(self, tps: Collection[TP]) -> int:
        """Forget the held runs of ``tps`` (released or lost); returns how many."""
        wanted = set(tps)
        kept = [entry for entry in self._heap if entry[2].tp not in wanted]
        dropped = len(self._heap) - len(kept)
        if dropped:
            heapq.heapify(kept)
            self._heap = kept
            self._rearm()
        return dropped

    def clear(self) -> int:
        """Forget every held run (the transaction was aborted); returns how many."""
        dropped = len(self._heap)
        self._heap.clear()
        self._rearm()
        return dropped

    def close(self) -> None:
        """Stop the timer; nothing is released any more."""
        self._heap.clear()
        self._rearm()

    def _rearm(self) -> None:
        if not self._heap:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        elif self._timer is None or self._heap[0][0] != self._timer_ms:
            self._arm(self._heap[0][0], now_ms())

    def _arm(self, release_ms: int, at_ms: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_ms = release_ms
        delay_s = max(0, release_ms - at_ms) / 1000
        self._timer = self._loop.call_at(self._loop.time() + delay_s, self._fire)

    def _fire(self) -> None:
        self._timer = None
        heap = self._heap
        at_ms = now_ms()
        due = []
        while heap and heap[0][0] <= at_ms:
            due.append(heapq.heappop(heap)[2])
        if heap:  # woke early (timer resolution) or more to come: at least 1 ms later
            self._arm(heap[0][0], at_ms)
        if due:
            self._release(due)
