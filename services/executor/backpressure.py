"""What the executor does while lanes are full: stop consuming first, pause only if it lasts.

A full lane (or too many held runs: every lane) must stop taking records. Two ways:

- **Stop calling** ``consume()``. librdkafka keeps what it prefetched, bounded by its
  ``queued.max.messages.kbytes``, and hands it over when consuming goes on: no cost. But the
  consumer's queue is one FIFO over every partition, so records of *other* lanes (a HIGH
  record behind a flood of NORMAL ones) wait too, and so do rebalance callbacks, which fire
  inside ``consume()``.
- **Pause** the full lanes' partitions and go on consuming the others. librdkafka drops what
  it prefetched of a paused partition and fetches it again after the resume: measured on
  ``bench.execute`` (no-op handler, lane of 20,000), every pause/resume cycle left the
  executor without records for 70-250 ms, 4-6 cycles per 300K runs.

So a lane that fills stops consuming at once, and its partitions are paused only when
records of another lane wait (the loop asks the consumer every ``PROBE_INTERVAL_S``: a
partition of a lane that is not full whose cached high watermark is past the position
handed to us; see ``Consuming.others_pending``), or when the lanes are still blocked
``pause_after_ms`` later, so that rebalance callbacks run (they fire inside ``consume()``).
A one-lane herd whose lane drains to half within that bound never pauses; a HIGH record
behind a backlog of LOW ones gets the pause, as before.
"""

from __future__ import annotations

from collections.abc import Set

from streams.topics import Priority

PROBE_INTERVAL_S = 0.025
"""How often a blocked executor asks whether records of lanes with room wait."""


class Backpressure:
    """Per executor: whether to consume, and which lanes to keep paused, given full lanes."""

    def __init__(self, pause_after_ms: int) -> None:
        if pause_after_ms < 0:
            raise ValueError(f"pause_after_ms must be >= 0, got {pause_after_ms}")
        self._pause_after_s = pause_after_ms / 1000
        self._blocked: frozenset[Priority] = frozenset()
        self._since_s: float | None = None  # when consuming stopped for full lanes
        self._others_wait = False  # records of lanes with room wait behind the blocked ones

    def update(self, blocked: Set[Priority], now_s: float) -> None:
        """The lanes that must take no more records now (``now_s``: monotonic seconds)."""
        self._blocked = frozenset(blocked)
        if not blocked:
            self._since_s = None
            self._others_wait = False
        elif self._since_s is None:
            self._since_s = now_s

    def others_waiting(self) -> None:
        """Records of lanes that are not blocked wait: pause the blocked lanes now."""
        if self._since_s is not None:
            self._others_wait = True

    @property
    def blocked(self) -> frozenset[Priority]:
        return self._blocked

    def consume_allowed(self, now_s: float) -> bool:
        """False while lanes are full and their pause is not due yet."""
        return self._since_s is None or self.pausing(now_s)

    def pausing(self, now_s: float) -> bool:
        """True once blocked lanes hold others up, or stayed blocked ``pause_after_ms``."""
        since_s = self._since_s
        return since_s is not None and (self._others_wait or now_s - since_s >= self._pause_after_s)

    def paused_lanes(self, now_s: float) -> frozenset[Priority]:
        """The lanes whose partitions to keep paused."""
        return self._blocked if self.pausing(now_s) else frozenset()

    def pause_due_s(self, now_s: float) -> float | None:
        """Monotonic time at which blocked lanes get paused (None: nothing blocked, or they
        are paused already): the loop must wake then, and not before for this."""
        if self._since_s is None or self.pausing(now_s):
            return None
        return self._since_s + self._pause_after_s
