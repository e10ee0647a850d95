"""Live throughput and start lateness of the last minutes, from the results the status view
reads: what the dashboard plots (``GET /api/dashboard/live``).

A ring of one slot per second (``window_s``, 5 minutes by default, and a few more) holds, for the
results recorded in that second, a count per kind of outcome, and for the attempts started
in it a histogram of their start lateness (``started_at - scheduled_for``). Memory is fixed
(slots x buckets) whatever the load; a slot is reset when a newer second takes it, and a
result older than the window (the view reading history after a restart) is not counted.

Only first attempts fired on time count for lateness (trigger SCHEDULE or MANUAL): a retry
starts after its backoff, a replay or a backfill long after its tick, and a DAG dependent
after its upstreams, so their ``started_at - scheduled_for`` is no lateness of the timer.
A job's jitter is part of its lateness here (the result does not say what it was).
Percentiles come from the histogram: a bucket's upper bound (at most 25% above the true
value, never above the largest lateness seen), so they are estimates; the maximum is exact.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable, Mapping
from typing import Any

OUTCOME_KINDS = ("succeeded", "failed", "dead_letter", "other")
"""How outcomes are counted: SUCCEEDED; FAILED or TIMED_OUT (an attempt that will be
retried); DEAD_LETTER; and every other final outcome (SKIPPED, MISSED, CANCELLED,
UPSTREAM_FAILED). STARTED is no outcome."""

_KIND_OF_STATUS = {
    "SUCCEEDED": 0,
    "FAILED": 1,
    "TIMED_OUT": 1,
    "DEAD_LETTER": 2,
    "SKIPPED": 3,
    "MISSED": 3,
    "CANCELLED": 3,
    "UPSTREAM_FAILED": 3,
}
_ATTEMPT_ENDS = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "DEAD_LETTER"})
_ON_TIME_TRIGGERS = frozenset({"SCHEDULE", "MANUAL"})


def _bounds(top_ms: int = 120_000, ratio: float = 1.2) -> tuple[int, ...]:
    bounds = list(range(11))  # 0 (early or on time) to 10 ms, one bucket per ms
    while bounds[-1] < top_ms:
        bounds.append(math.ceil(bounds[-1] * ratio))
    return tuple(bounds)


LATENESS_BOUNDS_MS = _bounds()
"""Upper bounds (inclusive) of the lateness buckets: every ms to 10 ms, then steps of about
20% to 2 minutes (62 bounds); one more bucket holds everything later."""

DEFAULT_WINDOW_S = 300
AHEAD_S = 5
"""Results stamped up to this many seconds ahead of this process's clock (another host's
clock is ahead) are kept; later ones are not counted."""


def lateness_bucket(lateness_ms: int) -> int:
    """The index of the bucket holding ``lateness_ms`` (early starts count as 0)."""
    return bisect.bisect_left(LATENESS_BOUNDS_MS, lateness_ms)


def quantile_ms(buckets: list[int], max_ms: int, q: float) -> int | None:
    """The ``q`` quantile of a lateness histogram (a bucket's upper bound, capped at
    ``max_ms``), or None when it is empty."""
    total = sum(buckets)
    if total == 0:
        return None
    wanted = max(1, round(q * total))
    seen = 0
    for index, count in enumerate(buckets):
        seen += count
        if seen >= wanted:
            bound = LATENESS_BOUNDS_MS[index] if index < len(LATENESS_BOUNDS_MS) else max_ms
            return min(bound, max_ms)
    return max_ms


class _Slot:
    """What one second holds."""

    __slots__ = ("lateness", "lateness_max_ms", "outcomes", "second")

    def __init__(self) -> None:
        self.second = -1
        self.outcomes = [0] * len(OUTCOME_KINDS)
        self.lateness = [0] * (len(LATENESS_BOUNDS_MS) + 1)
        self.lateness_max_ms = 0

    def reset(self, second: int) -> None:
        self.second = second
        self.outcomes = [0] * len(OUTCOME_KINDS)
        self.lateness = [0] * (len(LATENESS_BOUNDS_MS) + 1)
        self.lateness_max_ms = 0


class RecentOutcomes:
    """Per-second outcome counts and lateness histograms of the last ``window_s`` seconds.

    ``add_results`` is called by the status view's thread after each applied batch,
    ``series`` by requests; a lock keeps them apart (both are short).
    """

    def __init__(self, window_s: int = DEFAULT_WINDOW_S) -> None:
        if window_s < 1:
            raise ValueError("window_s must be >= 1")
        self.window_s = window_s
        # The window's seconds before now, the one filling now, and up to AHEAD_S more.
        self._slots = [_Slot() for _ in range(window_s + 1 + AHEAD_S)]
        self._lock = threading.Lock()

    def add_results(self, results: Iterable[Mapping[str, Any]], now_ms: int) -> None:
        """Count decoded ExecutionResults (records of ``job-results``)."""
        oldest_s = now_ms // 1000 - self.window_s
        newest_s = now_ms // 1000 + AHEAD_S
        with self._lock:
            for result in results:
                status = result["status"]
                kind = _KIND_OF_STATUS.get(status)
                if kind is not None:
                    slot = self._slot_of(result["recorded_at_ms"] // 1000, oldest_s, newest_s)
                    if slot is not None:
                        slot.outcomes[kind] += 1
                started_at_ms = result.get("started_at_ms")
                if (
                    started_at_ms is not None
                    and status in _ATTEMPT_ENDS
                    and result["attempt"] == 1
                    and result["trigger"] in _ON_TIME_TRIGGERS
                ):
                    slot = self._slot_of(started_at_ms // 1000, oldest_s, newest_s)
                    if slot is not None:
                        lateness_ms = max(0, started_at_ms - result["scheduled_for_ms"])
                        slot.lateness[lateness_bucket(lateness_ms)] += 1
                        slot.lateness_max_ms = max(slot.lateness_max_ms, lateness_ms)

    def _slot_of(self, second: int, oldest_s: int, newest_s: int) -> _Slot | None:
        if not oldest_s <= second <= newest_s:
            return None
        slot = self._slots[second % len(self._slots)]
        if slot.second < second:
            slot.reset(second)
        elif slot.second > second:
            return None  # its slot holds a newer second already: this one left the window
        return slot

    def series(self, now_ms: int, seconds: int) -> dict[str, Any]:
        """The last ``seconds`` whole seconds before ``now_ms`` (the current one is still
        filling), oldest first, as columns, and the lateness over all of them."""
        if not 1 <= seconds <= self.window_s:
            raise ValueError(f"seconds must be within 1..{self.window_s}")
        first_s = now_ms // 1000 - seconds
        outcomes: dict[str, list[int]] = {kind: [] for kind in OUTCOME_KINDS}
        p50: list[int | None] = []
        p99: list[int | None] = []
        highest: list[int | None] = []
        total = [0] * (len(LATENESS_BOUNDS_MS) + 1)
        total_max = 0
        with self._lock:
            for second in range(first_s, first_s + seconds):
                slot = self._slots[second % len(self._slots)]
                held = slot.second == second
                for kind, count in zip(OUTCOME_KINDS, slot.outcomes, strict=True):
                    outcomes[kind].append(count if held else 0)
                buckets = slot.lateness if held else [0]
                top = slot.lateness_max_ms if held else 0
                p50.append(quantile_ms(buckets, top, 0.5))
                p99.append(quantile_ms(buckets, top, 0.99))
                highest.append(top if any(buckets) else None)
                if held:
                    total = [a + b for a, b in zip(total, slot.lateness, strict=True)]
                    total_max = max(total_max, top)
        return {
            "from_s": first_s,
            "seconds": seconds,
            "outcomes": outcomes,
            "lateness_ms": {"p50": p50, "p99": p99, "max": highest},
            "window": {
                "outcomes": {kind: sum(counts) for kind, counts in outcomes.items()},
                "lateness_count": sum(total),
                "lateness_p50_ms": quantile_ms(total, total_max, 0.5),
                "lateness_p99_ms": quantile_ms(total, total_max, 0.99),
                "lateness_max_ms": total_max if any(total) else None,
            },
        }
