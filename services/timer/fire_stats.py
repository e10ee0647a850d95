"""What the timer fired and how late, kept as plain counts for its metrics (``metrics.py``).

A fire's *lateness* is the time it was emitted minus the time it was due: its wheel entry's
fire time for a fast fire and a retry, the DueEvent's ``fire_at_ms`` for the others. A
fire emitted early (``fire_ahead_ms``: the executor holds it until it is due) counts as 0.

The drain's fast path (``drain.py``) fires a run of wheel entries in key order, which is
fire-time order, all at one ``now_ms``: lateness falls along the run, so
:meth:`FireStats.add_sorted` finds each bucket's share with one binary search per bucket
bound and its sum with a few subtractions when the run shares few fire times (a herd's
share one): the fast path itself counts nothing per fire. Every other fire comes through
:meth:`FireStats.add`, one at a time.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from operator import itemgetter

from services.timer.keys import pack_ms
from streams.runtime_stats import Buckets

LATENESS_BOUNDS_MS: tuple[int, ...] = (
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000,
)  # fmt: skip
"""Upper bounds of the lateness buckets, in ms."""
SCHEDULE = "SCHEDULE"  # the trigger of every fast fire
_TIME_LEN = 8
_SPLIT_BELOW = 16  # runs shorter than this are summed one key at a time
_key_of = itemgetter(0)


def fire_ms_of(key: bytes) -> int:
    """The fire time a wheel key starts with."""
    return int.from_bytes(key[:_TIME_LEN], "big")


class FireStats:
    """Fires by trigger with their lateness, and the non-run outcomes the timer recorded.

    Written by the processor's thread only; read by the metrics server's.
    """

    def __init__(self) -> None:
        self.lateness: dict[str, Buckets] = {}  # by trigger; a fire counts in exactly one
        self.outcomes: Counter[str] = Counter()  # SKIPPED, MISSED, CANCELLED by status
        # Per partition: how long the oldest due entry the last drain left unfired had been
        # due (0: it fired everything due).
        self.backlog_ms: dict[int, int] = {}

    def buckets(self, trigger: str) -> Buckets:
        """The lateness buckets of ``trigger``'s fires (created on first use)."""
        buckets = self.lateness.get(trigger)
        if buckets is None:
            buckets = self.lateness[trigger] = Buckets(LATENESS_BOUNDS_MS)
        return buckets

    def add(self, trigger: str, lateness_ms: int) -> None:
        """Count one fire of ``trigger`` emitted ``lateness_ms`` after it was due."""
        self.buckets(trigger).observe(max(0, lateness_ms))

    def add_key(self, key: bytes, now_ms: int) -> None:
        """Count one fast fire of wheel entry ``key`` at ``now_ms``."""
        self.add(SCHEDULE, now_ms - fire_ms_of(key))

    def add_sorted(self, entries: list[tuple[bytes, bytes]], count: int, now_ms: int) -> None:
        """Count the fast fires of ``entries[:count]`` (wheel items in key order) at ``now_ms``."""
        if count <= 0:
            return
        buckets = self.buckets(SCHEDULE)
        counts = buckets.counts
        # Lateness falls along the run: when its first and last fall in one bucket, all do
        # (a herd's instant; a trickle fired ahead, all 0).
        most_late = now_ms - fire_ms_of(entries[0][0])
        first = bisect_left(LATENESS_BOUNDS_MS, most_late)
        if first == bisect_left(LATENESS_BOUNDS_MS, now_ms - fire_ms_of(entries[count - 1][0])):
            counts[first] += count
            if most_late > 0:
                late = bisect_left(entries, pack_ms(now_ms), 0, count, key=_key_of)
                buckets.total += late_ms_sum(entries, 0, late, now_ms)
            return
        # Entries before ``above[i]`` are due before now - bound i: later than that bound.
        above = [
            bisect_left(entries, pack_ms(now_ms - bound), 0, count, key=_key_of)
            for bound in LATENESS_BOUNDS_MS
        ]
        counts[0] += count - above[0]
        for i in range(1, len(above)):
            counts[i] += above[i - 1] - above[i]
        counts[-1] += above[-1]
        late = bisect_left(entries, pack_ms(now_ms), 0, count, key=_key_of)
        buckets.total += late_ms_sum(entries, 0, late, now_ms)


def late_ms_sum(entries: list[tuple[bytes, bytes]], lo: int, hi: int, now_ms: int) -> int:
    """``sum(now_ms - fire time)`` over the keys of ``entries[lo:hi]`` (in key order).

    A run whose first and last keys share a fire time shares it throughout: one product.
    Otherwise the halves are summed, down to short runs summed key by key, so a run of a
    few distinct fire times costs a few steps and one of many costs about one per key.
    """
    if hi <= lo:
        return 0
    first = entries[lo][0][:_TIME_LEN]
    if first == entries[hi - 1][0][:_TIME_LEN]:
        return (hi - lo) * (now_ms - int.from_bytes(first, "big"))
    if hi - lo < _SPLIT_BELOW:
        return sum(now_ms - fire_ms_of(entries[i][0]) for i in range(lo, hi))
    middle = (lo + hi) // 2
    return late_ms_sum(entries, lo, middle, now_ms) + late_ms_sum(entries, middle, hi, now_ms)
