"""Counters of one executor loop, for logs, tests, benchmarks and its metrics (``metrics.py``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields

from services.executor.dedup import Progress
from streams.runtime_stats import Buckets

HANDLER_BOUNDS_MS: tuple[int, ...] = (
    1, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000,
)  # fmt: skip
"""Upper bounds of the handler duration buckets, in ms."""


@dataclass
class ExecutorStats:
    """What one executor did since it started; read from the loop's thread."""

    consumed: int = 0
    started: int = 0
    succeeded: int = 0
    retries_scheduled: int = 0
    dead_lettered: int = 0
    skipped: int = 0  # already done (dedup) or running here already
    undecodable: int = 0
    sync_refused: int = 0  # sync attempts not run: too many handler threads hang
    dropped: int = 0  # runs whose partition was released or whose transaction aborted
    held: int = 0  # records read before their fire_at_ms, run when it came
    lane_pauses: int = 0  # times full lanes' partitions were paused (backpressure.py)
    commits: int = 0
    aborts: int = 0
    commit_s: float = 0.0  # the event loop's time blocked in commits (flush + commit)
    timed_out: int = 0  # attempts past their deadline (each also retried or dead-lettered)
    # Undecodable records (each dead-lettered), by due topic.
    undecodable_by_topic: Counter[str] = field(default_factory=Counter)
    # How long handlers ran, in ms: the runs measured at 1 ms or more, and the failed ones.
    # A run that ended in the millisecond it started counts in the runner's ``quick_runs``
    # instead (per run an int, not a call): see ``RecordRunner``.
    handler_ms: Buckets = field(default_factory=lambda: Buckets(HANDLER_BOUNDS_MS))

    def count(self, progress: Progress) -> None:
        """Count one finished attempt."""
        if progress is Progress.SUCCEEDED:
            self.succeeded += 1
        elif progress is Progress.DEAD_LETTER:
            self.dead_lettered += 1
        else:
            self.retries_scheduled += 1

    def summary(self) -> str:
        """The counters as ``name value, ...`` (the line an executor logs when it stops)."""
        values = ((f.name, getattr(self, f.name)) for f in fields(self))
        return ", ".join(
            f"{name} {value:.3f}" if isinstance(value, float) else f"{name} {value}"
            for name, value in values
            if isinstance(value, int | float)
        )
