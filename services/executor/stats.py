"""Counters of one executor loop, for logs, tests and benchmarks."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from services.executor.dedup import Progress


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

    def count(self, progress: Progress) -> None:
        """Count one finished attempt."""
        if progress is Progress.SUCCEEDED:
            self.succeeded += 1
        elif progress is Progress.DEAD_LETTER:
            self.dead_lettered += 1
        else:
            self.retries_scheduled += 1

    def summary(self) -> str:
        return ", ".join(
            f"{name} {value:.3f}" if isinstance(value, float) else f"{name} {value}"
            for name, value in asdict(self).items()
        )
