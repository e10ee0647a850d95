"""The topic layout of ARCHITECTURE.md: names under a namespace, cleanup and co-partitioning."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Priority(StrEnum):
    """Execution lanes; each has its own ``due.<priority>`` topic."""

    HIGH = "HIGH"
    NORMAL = "NORMAL"
    LOW = "LOW"


LONG_RETENTION_MS = 30 * 24 * 3600 * 1000
DUE_RETENTION_MS = 7 * 24 * 3600 * 1000
"""How long a DueEvent stays readable on ``due.*``: how long executors may be down without
losing undelivered fires. The executor's dedup store must outlive it (``dedup_retention_ms``)."""
DUE_SEGMENT_MS = 3600 * 1000
"""Due segments roll hourly, so a record is deleted at most an hour after its retention."""


@dataclass(frozen=True)
class TopicSpec:
    """One topic kafkron owns: its base name, cleanup policy and extra configs."""

    base_name: str
    compact: bool
    co_partitioned: bool = True
    retention_ms: int | None = None
    segment_ms: int | None = None
    broker_timestamps: bool = False
    """Records stamped with the broker's clock when appended (LogAppendTime)."""
    partitions: int | None = None
    """A fixed count (not co-partitioned topics only); None: the configured count."""

    def configs(self) -> dict[str, str]:
        """Topic configs for CreateTopics."""
        configs = {"cleanup.policy": "compact" if self.compact else "delete"}
        if self.broker_timestamps:
            configs["message.timestamp.type"] = "LogAppendTime"
        if self.retention_ms is not None:
            configs["retention.ms"] = str(self.retention_ms)
        if self.segment_ms is not None:
            configs["segment.ms"] = str(self.segment_ms)
        return configs


JOBS = "jobs"
JOB_RESULTS = "job-results"
RETRY = "retry"
DLQ = "dlq"
DAG_SIGNALS = "dag-signals"
DAG_RELEASES = "dag-releases"
CLOCK = "clock"
"""Probes stamped by the broker's clock, by which every service reads time (streams/clock.py)."""
CLOCK_RETENTION_MS = 3600 * 1000


def due_topic_base(priority: Priority) -> str:
    """Base name of the due topic of one priority lane."""
    return f"due.{priority.value.lower()}"


BASE_TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec(JOBS, compact=True),
    *(
        TopicSpec(
            due_topic_base(p),
            compact=False,
            retention_ms=DUE_RETENTION_MS,
            segment_ms=DUE_SEGMENT_MS,
        )
        for p in Priority
    ),
    TopicSpec(JOB_RESULTS, compact=False, retention_ms=LONG_RETENTION_MS),
    TopicSpec(RETRY, compact=False),
    TopicSpec(DLQ, compact=False, retention_ms=LONG_RETENTION_MS),
    TopicSpec(DAG_SIGNALS, compact=False, retention_ms=DUE_RETENTION_MS),
    TopicSpec(DAG_RELEASES, compact=False, retention_ms=DUE_RETENTION_MS),
    TopicSpec(
        CLOCK,
        compact=False,
        co_partitioned=False,
        retention_ms=CLOCK_RETENTION_MS,
        segment_ms=CLOCK_RETENTION_MS,
        broker_timestamps=True,
        partitions=1,
    ),
)


@dataclass(frozen=True)
class TopicNames:
    """Full topic names under one namespace (default ``kafkron.``)."""

    namespace: str

    def name(self, base: str) -> str:
        """The full name of a topic given its base name."""
        return f"{self.namespace}{base}"

    @property
    def jobs(self) -> str:
        return self.name(JOBS)

    @property
    def job_results(self) -> str:
        return self.name(JOB_RESULTS)

    @property
    def retry(self) -> str:
        return self.name(RETRY)

    @property
    def dlq(self) -> str:
        return self.name(DLQ)

    @property
    def dag_signals(self) -> str:
        return self.name(DAG_SIGNALS)

    @property
    def dag_releases(self) -> str:
        return self.name(DAG_RELEASES)

    def due(self, priority: Priority) -> str:
        return self.name(due_topic_base(priority))

    def changelog(self, group: str, store: str) -> str:
        """The compacted changelog topic of one store of one processor group."""
        return self.name(f"changelog.{group}.{store}")
