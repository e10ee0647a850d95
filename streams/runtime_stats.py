"""Plain counters a process keeps while it works, read by its metrics at scrape time.

The hot loops never call a Prometheus client object (each ``inc`` or ``observe`` takes a
lock, ~1-2 us): they add to the ints and lists here, per batch where they can, and the
service's collector (:mod:`streams.metrics`) turns them into metric families when
Prometheus scrapes. Only the thread that does the work writes them; a scrape reads them from
the metrics server's thread, copying each container in one C-level call (atomic under the
GIL), so it may see one batch more in a counter than in another, never a torn value.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

COMMIT_BOUNDS_S: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
"""Upper bounds of the commit duration buckets, in seconds."""
SAMPLE_INTERVAL_S = 5.0
"""How often a process samples what it reads rather than counts (lag, store sizes)."""


class Buckets:
    """A histogram's counts: one per upper bound in :attr:`bounds` (ascending), and one more
    for the values above the last; each value counts in the first bucket whose bound is at
    or above it. Bounds are in whatever unit the caller observes in (ms, s); the metric
    family scales them (:func:`streams.metrics.histogram_family`)."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        if list(bounds) != sorted(set(bounds)):
            raise ValueError(f"bucket bounds must ascend without repeats: {bounds}")
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total: float = 0  # the sum of the values observed

    def observe(self, value: float) -> None:
        """Count one value."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        """How many values were observed."""
        return sum(self.counts)


@dataclass
class RuntimeStats:
    """What a Kafka-consuming process's runtime did: commits, restores, consumer lag.

    Written by the process's loop thread only (the processor, the executor's event loop).
    The dicts of partitions (``restore_remaining``, ``restore_queued``, ``lag``) are
    replaced whole, never changed in place, so a scrape reads one consistent picture.
    """

    # Transaction commits: how long each took (flush, offsets, EndTxn, store writes).
    commit_seconds: Buckets = field(default_factory=lambda: Buckets(COMMIT_BOUNDS_S))
    # Changelog records applied by restores, by store name.
    restored_records: Counter[str] = field(default_factory=Counter)
    # Offsets still to read, by (store name, partition), while a restore reads its changelog.
    restore_remaining: dict[tuple[str, int], int] = field(default_factory=dict)
    # Store partitions waiting for a restore slot, by store name.
    restore_queued: dict[str, int] = field(default_factory=dict)
    # Records behind each input partition's end, by (topic, partition), at the last sample.
    lag: dict[tuple[str, int], int] = field(default_factory=dict)
    # Keys in each open store partition (RocksDB's estimate), by (store, partition).
    store_keys: dict[tuple[str, int], int] = field(default_factory=dict)


class Periodic:
    """Says when a periodic sample is due: once per ``interval_s``, the first call included."""

    def __init__(self, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self._interval_s = interval_s
        self._next_s = 0.0

    def due(self) -> bool:
        now = time.monotonic()
        if now < self._next_s:
            return False
        self._next_s = now + self._interval_s
        return True
