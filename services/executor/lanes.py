"""Which priority lane (``due.high``, ``due.normal``, ``due.low``) to take the next event from.

Higher priority first, with a starvation bound. Each lane counts its *passes*: picks that
went to another lane while it had work. A lane with no work, or just picked, has 0. A lane
whose passes reach its threshold ``K = max_passes - (lanes - 2)`` is *overdue*; the
selector takes the most overdue lane (passes - K largest, ties to the higher priority), and
the highest-priority lane with work when none is overdue.

**Bound.** A lane that has work is passed over at most ``max_passes[lane]`` times in a
row: with the default, NORMAL waits behind at most 8 other picks and LOW behind at most 32.

Proof sketch, for n lanes. Passes grow by one per pick, so a lane X first becomes overdue
at exactly K_X passes. The lane picked at that step has just reset to 0 (overdue -K < 0).
After that, X is passed only for a lane Y at least as overdue; Y then resets and, growing
no faster than X while neither is picked, never catches up before X is picked. So at most
the n - 2 other lanes pass X once each: X is passed at most K_X + n - 2 = max_passes times.
A "pick" is whatever the loop takes from a lane at once; with batches of B records the
bound in records is B times as large. ``tests/services/executor/test_lanes.py`` checks the
bound with hypothesis.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from streams.topics import Priority

LANES: tuple[Priority, ...] = (Priority.HIGH, Priority.NORMAL, Priority.LOW)
"""Lanes from highest to lowest priority."""

DEFAULT_MAX_PASSES: Mapping[Priority, int] = {
    Priority.HIGH: 2,
    Priority.NORMAL: 8,
    Priority.LOW: 32,
}
MIN_MAX_PASSES = len(LANES) - 1


class LaneSelector:
    """Picks the next lane to consume from; deterministic, no I/O, O(lanes) per pick."""

    def __init__(self, max_passes: Mapping[Priority, int] | None = None) -> None:
        bounds = {**DEFAULT_MAX_PASSES, **(max_passes or {})}
        for lane, bound in bounds.items():
            if bound < MIN_MAX_PASSES:
                raise ValueError(
                    f"max_passes[{lane.value}] = {bound}: with {len(LANES)} lanes the "
                    f"starvation bound must be at least {MIN_MAX_PASSES}"
                )
        self.max_passes: dict[Priority, int] = {lane: bounds[lane] for lane in LANES}
        # Passes at which a lane is overdue; the n - 2 slack makes max_passes the true bound.
        self._threshold = {lane: bounds[lane] - (len(LANES) - 2) for lane in LANES}
        self._passes = dict.fromkeys(LANES, 0)

    def passes(self, lane: Priority) -> int:
        """How many picks in a row went to other lanes while ``lane`` had work."""
        return self._passes[lane]

    def pick(self, lanes_with_work: Collection[Priority]) -> Priority | None:
        """The lane to take the next event from, or None when no lane has work."""
        chosen: Priority | None = None
        most_overdue = -1
        for lane in LANES:
            if lane not in lanes_with_work:
                continue
            if chosen is None:
                chosen = lane  # the highest priority with work, unless one is overdue
            overdue = self._passes[lane] - self._threshold[lane]
            if overdue > most_overdue:
                chosen, most_overdue = lane, overdue
        for lane in LANES:
            if lane is chosen or lane not in lanes_with_work:
                self._passes[lane] = 0
            else:
                self._passes[lane] += 1
        return chosen

    def reset(self) -> None:
        """Forget all waiting, e.g. after a rebalance emptied the lane buffers."""
        self._passes = dict.fromkeys(LANES, 0)
