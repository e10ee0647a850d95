"""The fire ledger of a fault run, read back from the topics once it is over.

Every committed DueEvent (``due.*``) and every result (``job-results``) of the run's jobs
(ids starting with ``prefix``), read ``read_committed`` from the start to the end: which
executions were fired and when (``emitted_at_ms``, the timer's clock), which ended how and
when (``recorded_at_ms``), so that the checks and the figures (lost, doubled, the stall, the
time from the broker's return to the first fire) come from what any consumer would see.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from itertools import pairwise

from confluent_kafka import Consumer, KafkaError, TopicPartition

from streams.codec import Codec, RecordKind
from streams.settings import KafkaSettings
from streams.topics import Priority, TopicNames

CODEC = Codec.from_directory()
FINAL = frozenset({"SUCCEEDED", "DEAD_LETTER", "SKIPPED", "MISSED", "CANCELLED", "UPSTREAM_FAILED"})
"""An execution's final outcomes: exactly one each (docs/architecture.md, invariant 1)."""


@dataclass(frozen=True)
class Fire:
    """One committed DueEvent."""

    execution_id: str
    job_id: str
    scheduled_for_ms: int
    emitted_at_ms: int


@dataclass
class Ledger:
    """What the topics say about the run's jobs."""

    fires: list[Fire] = field(default_factory=list)
    finals: Counter[str] = field(default_factory=Counter)  # execution id -> final outcomes
    final_at_ms: dict[str, list[int]] = field(default_factory=dict)  # their recorded_at_ms
    final_jobs: Counter[str] = field(default_factory=Counter)  # job id -> final outcomes
    statuses: Counter[str] = field(default_factory=Counter)
    succeeded_at_ms: list[int] = field(default_factory=list)  # recorded_at_ms of SUCCEEDED

    def fire_counts(self) -> Counter[str]:
        """Committed DueEvents per execution (attempt 1 each: no handler here fails)."""
        return Counter(fire.execution_id for fire in self.fires)

    def lost_creates(self, acknowledged: Iterable[str]) -> list[str]:
        """Acknowledged job ids without a final outcome."""
        return sorted(j for j in acknowledged if self.final_jobs[j] == 0)

    def unfinished_fires(self) -> list[str]:
        """Fired executions without a final outcome."""
        return sorted(e for e in self.fire_counts() if self.finals[e] == 0)

    def doubled(self) -> dict[str, int]:
        """Executions with more than one final outcome."""
        return {e: n for e, n in self.finals.items() if n > 1}

    def doubled_fires(self) -> dict[str, int]:
        """Executions fired (committed) more than once."""
        return {e: n for e, n in self.fire_counts().items() if n > 1}

    def doubled_across(self, at_ms: int) -> tuple[set[str], set[str]]:
        """Executions with 2+ final outcomes or committed fires, split in two: those whose
        copies are exactly two, one made before ``at_ms`` and one after (what a transaction in
        flight at a broker's SIGKILL leaves when the broker fails to abort it), and the rest."""
        fired: dict[str, list[int]] = {}
        for fire in self.fires:
            fired.setdefault(fire.execution_id, []).append(fire.emitted_at_ms)
        copies = [
            {e: t for e, t in self.final_at_ms.items() if len(t) > 1},
            {e: t for e, t in fired.items() if len(t) > 1},
        ]

        def across(times: list[int] | None) -> bool:
            return times is None or (len(times) == 2 and min(times) < at_ms <= max(times))

        doubled = set(copies[0]) | set(copies[1])
        explained = {e for e in doubled if across(copies[0].get(e)) and across(copies[1].get(e))}
        return explained, doubled - explained

    def longest_fire_gap_ms(self, job_prefix: str, since_ms: int) -> tuple[int, int]:
        """(longest gap between consecutive fires of jobs starting with ``job_prefix`` emitted
        from ``since_ms`` on, when that gap began): a steady load's stall."""
        times = sorted(
            f.emitted_at_ms
            for f in self.fires
            if f.job_id.startswith(job_prefix) and f.emitted_at_ms >= since_ms
        )
        gaps = [(b - a, a) for a, b in pairwise(times)]
        return max(gaps, default=(0, since_ms))

    def first_fire_after_ms(self, at_ms: int) -> int | None:
        """The earliest ``emitted_at_ms`` at or after ``at_ms`` of any committed fire."""
        return min((f.emitted_at_ms for f in self.fires if f.emitted_at_ms >= at_ms), default=None)

    def max_lateness_ms(self, job_prefix: str) -> int:
        """The latest fire (emitted - scheduled) among jobs starting with ``job_prefix``."""
        return max(
            (
                f.emitted_at_ms - f.scheduled_for_ms
                for f in self.fires
                if f.job_id.startswith(job_prefix)
            ),
            default=0,
        )


def read_ledger(settings: KafkaSettings, prefix: str, timeout_s: float = 120.0) -> Ledger:
    """Read every committed DueEvent and result of jobs starting with ``prefix``."""
    names = TopicNames(settings.namespace)
    ledger = Ledger()
    key_prefix = prefix.encode()
    due_topics = {names.due(p) for p in Priority}
    for topic, value in _committed_records(settings, [*due_topics, names.job_results], timeout_s):
        if topic in due_topics:
            due = CODEC.decode(RecordKind.DUE_EVENT, value)
            if due["job_id"].encode().startswith(key_prefix):
                ledger.fires.append(
                    Fire(
                        due["execution_id"],
                        due["job_id"],
                        due["scheduled_for_ms"],
                        due["emitted_at_ms"],
                    )
                )
            continue
        result = CODEC.decode(RecordKind.EXECUTION_RESULT, value)
        if not result["job_id"].encode().startswith(key_prefix):
            continue
        status = result["status"]
        ledger.statuses[status] += 1
        if status in FINAL:
            ledger.finals[result["execution_id"]] += 1
            ledger.final_at_ms.setdefault(result["execution_id"], []).append(
                result["recorded_at_ms"]
            )
            ledger.final_jobs[result["job_id"]] += 1
        if status == "SUCCEEDED":
            ledger.succeeded_at_ms.append(result["recorded_at_ms"])
    return ledger


def written_job_ids(settings: KafkaSettings, prefix: str, timeout_s: float = 120.0) -> set[str]:
    """The keys starting with ``prefix`` of every record on ``jobs``, committed or not: the
    creates that are durable, whatever a transaction left open does to readers."""
    jobs = TopicNames(settings.namespace).jobs
    key_prefix = prefix.encode()
    return {
        key.decode()
        for _, key, _ in _records(settings, [jobs], timeout_s, "read_uncommitted")
        if key is not None and key.startswith(key_prefix)
    }


def _committed_records(
    settings: KafkaSettings, topics: Collection[str], timeout_s: float
) -> Iterable[tuple[str, bytes]]:
    """(topic, value) of every committed record of ``topics``, from the start to the end."""
    for topic, _, value in _records(settings, topics, timeout_s, "read_committed"):
        if value is not None:
            yield topic, value


def _records(
    settings: KafkaSettings, topics: Collection[str], timeout_s: float, isolation: str
) -> Iterable[tuple[str, bytes | None, bytes | None]]:
    """(topic, key, value) of every record of ``topics`` a reader with ``isolation`` reads,
    from the start to the end."""
    consumer = Consumer(
        settings.client_config(
            **{
                "group.id": f"ledger-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": isolation,
                "enable.partition.eof": True,
                "fetch.max.bytes": 52_428_800,
            }
        )
    )
    pending = {(t, p) for t in topics for p in range(settings.partitions)}
    consumer.assign([TopicPartition(t, p, 0) for t, p in pending])
    deadline = time.monotonic() + timeout_s
    try:
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the ledger did not reach the end of {sorted(pending)[:3]}")
            for message in consumer.consume(num_messages=50_000, timeout=0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        pending.discard((message.topic() or "", message.partition() or 0))
                    continue
                yield message.topic() or "", message.key(), message.value()
    finally:
        consumer.close()
