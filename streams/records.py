"""Pydantic models of kafkron's records, field by field the Avro schemas in ``schemas/``.

Services build and read these; ``to_avro()`` gives the dict ``Codec.encode`` takes and
``from_avro()`` validates the dict ``Codec.decode`` returns. ``tests/streams/test_records.py``
checks every model against its ``.avsc`` (names, order, types, nullability, defaults,
enum symbols), so change both together.
"""

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field

from schemas import field_defaults
from streams.codec import RecordKind
from streams.topics import Priority

__all__ = [
    "ATTEMPT_FAILURE_STATUSES",
    "FINAL_STATUSES",
    "MODEL_BY_KIND",
    "AttemptOutcome",
    "AvroInt",
    "AvroLong",
    "AvroRecord",
    "CatchupPolicy",
    "CronSchedule",
    "DeadLetter",
    "DeadLetterKind",
    "DueEvent",
    "ExecutionResult",
    "ExecutionStatus",
    "FoldPolicy",
    "Job",
    "JobStatus",
    "OverlapPolicy",
    "Priority",
    "RetryPolicy",
    "RetryRequest",
    "Trigger",
]

# Avro ints are 32-bit and longs 64-bit; fastavro would write a too-large int silently and
# Java readers would then fail, so the bounds are checked here, where the record is built.
AvroInt = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
AvroLong = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]


class JobStatus(StrEnum):
    """Lifecycle of a job definition on the ``jobs`` topic."""

    SCHEDULED = "SCHEDULED"
    PAUSED = "PAUSED"
    CANCELLED = "CANCELLED"
    COMPLETED = "COMPLETED"


class OverlapPolicy(StrEnum):
    """What a fire does while an earlier execution of the same job still runs."""

    SKIP = "SKIP"
    QUEUE_ONE = "QUEUE_ONE"
    ALLOW = "ALLOW"
    REPLACE = "REPLACE"


class CatchupPolicy(StrEnum):
    """Which missed ticks fire after downtime (within ``catchup_window_ms``)."""

    ALL = "ALL"
    LATEST = "LATEST"
    NONE = "NONE"


class FoldPolicy(StrEnum):
    """How a cron fires in the repeated hour of a DST fall-back."""

    AUTO = "AUTO"
    FIRST = "FIRST"
    EVERY = "EVERY"


class ExecutionStatus(StrEnum):
    """State of one execution (or of one nominal fire) on ``job-results``."""

    STARTED = "STARTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    DEAD_LETTER = "DEAD_LETTER"
    SKIPPED = "SKIPPED"
    MISSED = "MISSED"
    CANCELLED = "CANCELLED"
    UPSTREAM_FAILED = "UPSTREAM_FAILED"
    # What an old reader sees for a status added by a newer writer (the enum's Avro default).
    UNKNOWN = "UNKNOWN"

    @property
    def is_final(self) -> bool:
        """True when nothing more happens to the execution (invariant 1 counts these)."""
        return self in FINAL_STATUSES


FINAL_STATUSES: frozenset[ExecutionStatus] = frozenset(
    {
        ExecutionStatus.SUCCEEDED,
        ExecutionStatus.DEAD_LETTER,
        ExecutionStatus.SKIPPED,
        ExecutionStatus.MISSED,
        ExecutionStatus.CANCELLED,
        ExecutionStatus.UPSTREAM_FAILED,
    }
)
"""Every nominal fire of an active job ends in exactly one of these (ARCHITECTURE.md, 1)."""

ATTEMPT_FAILURE_STATUSES: frozenset[ExecutionStatus] = frozenset(
    {ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT}
)
"""An attempt failed; the execution goes on to a retry or to the dead-letter queue."""


class Trigger(StrEnum):
    """Why an execution exists."""

    SCHEDULE = "SCHEDULE"
    MANUAL = "MANUAL"
    RETRY = "RETRY"
    REPLAY = "REPLAY"
    DAG = "DAG"
    BACKFILL = "BACKFILL"


class DeadLetterKind(StrEnum):
    """What a dead letter holds: a dead execution or bytes that could not be decoded."""

    EXECUTION = "EXECUTION"
    UNDECODABLE = "UNDECODABLE"
    UNKNOWN = "UNKNOWN"


class DagSignalKind(StrEnum):
    """What a DagSignal carries between partitions of the dag processor."""

    EDGE_ADDED = "EDGE_ADDED"
    EDGE_REMOVED = "EDGE_REMOVED"
    UPSTREAM_ENDED = "UPSTREAM_ENDED"


class DagVerdict(StrEnum):
    """The dag processor's verdict on one run of one dependent."""

    RUN = "RUN"
    UPSTREAM_FAILED = "UPSTREAM_FAILED"
    MISSED = "MISSED"


class AvroRecord(BaseModel):
    """Base of the record models: immutable, no unknown fields, convertible to Avro dicts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_avro(self) -> dict[str, Any]:
        """This record as the dict ``Codec.encode`` takes (enums stay ``StrEnum``, i.e. str)."""
        return self.model_dump(mode="python")

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> Self:
        """Validate a dict returned by ``Codec.decode`` into this model."""
        return cls.model_validate(record)


_RETRY_DEFAULTS = field_defaults("kafkron.RetryPolicy")  # the schema's, written nowhere else


class RetryPolicy(AvroRecord):
    """Exponential backoff: attempt n waits min(max, initial * multiplier^(n-1)) +/- jitter."""

    max_attempts: AvroInt = _RETRY_DEFAULTS["max_attempts"]
    initial_backoff_ms: AvroLong = _RETRY_DEFAULTS["initial_backoff_ms"]
    multiplier: float = _RETRY_DEFAULTS["multiplier"]
    max_backoff_ms: AvroLong = _RETRY_DEFAULTS["max_backoff_ms"]
    jitter_ratio: float = _RETRY_DEFAULTS["jitter_ratio"]


class CronSchedule(AvroRecord):
    """A recurring schedule: a cron expression evaluated in a time zone, within a window."""

    expression: str
    timezone: str = "UTC"
    start_ms: AvroLong | None = None
    end_ms: AvroLong | None = None
    fold_policy: FoldPolicy = FoldPolicy.AUTO


class Backfill(AvroRecord):
    """A request to run a recurring job's ticks in [from_ms, to_ms] now (trigger BACKFILL)."""

    from_ms: AvroLong
    to_ms: AvroLong
    per_s: AvroInt
    requested_at_ms: AvroLong


class Job(AvroRecord):
    """Full desired state of one job on the compacted ``jobs`` topic (key job_id)."""

    job_id: str
    version: AvroLong
    status: JobStatus = JobStatus.SCHEDULED
    handler: str
    payload: bytes = b""
    run_at_ms: AvroLong | None = None
    cron: CronSchedule | None = None
    depends_on: list[str] = Field(default_factory=list)
    priority: Priority = Priority.NORMAL
    timeout_ms: AvroLong = 300_000
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    overlap: OverlapPolicy = OverlapPolicy.SKIP
    catchup: CatchupPolicy = CatchupPolicy.LATEST
    catchup_window_ms: AvroLong = 86_400_000
    jitter_ms: AvroLong = 0
    dag_wait_ms: AvroLong = 86_400_000
    tenant: str = "default"
    labels: dict[str, str] = Field(default_factory=dict)
    manual_fire_at_ms: AvroLong | None = None
    backfill: Backfill | None = None
    idempotency_key: str | None = None
    request_hash: str | None = None
    created_at_ms: AvroLong
    updated_at_ms: AvroLong


class AttemptOutcome(AvroRecord):
    """How one earlier attempt of an execution ended."""

    attempt: AvroInt
    status: ExecutionStatus
    error: str | None = None
    worker_id: str | None = None
    started_at_ms: AvroLong | None = None
    finished_at_ms: AvroLong | None = None


class DueEvent(AvroRecord):
    """One attempt of one execution, emitted by the timer to ``due.<priority>`` (key job_id)."""

    execution_id: str
    job_id: str
    job_version: AvroLong
    scheduled_for_ms: AvroLong
    fire_at_ms: AvroLong
    attempt: AvroInt
    handler: str
    payload: bytes = b""
    timeout_ms: AvroLong
    priority: Priority = Priority.NORMAL
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    trigger: Trigger = Trigger.SCHEDULE
    tenant: str = "default"
    emitted_at_ms: AvroLong
    history: list[AttemptOutcome] = Field(default_factory=list)


class ExecutionResult(AvroRecord):
    """One state change of one execution, or a nominal fire's outcome, on ``job-results``."""

    execution_id: str
    job_id: str
    scheduled_for_ms: AvroLong
    attempt: AvroInt = 0
    status: ExecutionStatus
    reason: str | None = None
    error: str | None = None
    worker_id: str | None = None
    started_at_ms: AvroLong | None = None
    finished_at_ms: AvroLong | None = None
    next_attempt_at_ms: AvroLong | None = None
    trigger: Trigger = Trigger.SCHEDULE
    job_version: AvroLong = 0
    recorded_at_ms: AvroLong


class RetryRequest(AvroRecord):
    """A failed attempt to re-fire later, on the ``retry`` topic; ``due`` is the next attempt."""

    due: DueEvent
    requested_at_ms: AvroLong


class DeadLetter(AvroRecord):
    """A dead execution, or an undecodable record with its raw bytes, on ``dlq``."""

    kind: DeadLetterKind
    reason: str
    execution: DueEvent | None = None
    last_error: str | None = None
    source_topic: str | None = None
    source_partition: AvroInt | None = None
    source_offset: AvroLong | None = None
    raw_key: bytes | None = None
    raw_value: bytes | None = None
    dead_at_ms: AvroLong


class DagSignal(AvroRecord):
    """An edge learnt (to the upstream's partition) or an upstream's end (to the
    dependent's partition), on ``dag-signals``."""

    job_id: str
    kind: DagSignalKind
    upstream_job_id: str
    dependent_job_id: str
    dependent_version: AvroLong = 0
    dependent_created_at_ms: AvroLong = 0
    run_key_ms: AvroLong | None = None
    upstream_execution_id: str | None = None
    upstream_status: ExecutionStatus | None = None
    reason: str | None = None
    emitted_at_ms: AvroLong


class DagRelease(AvroRecord):
    """The verdict on one run of one dependent, on ``dag-releases`` (the timer acts on it)."""

    job_id: str
    run_key_ms: AvroLong
    verdict: DagVerdict
    reason: str | None = None
    upstream_execution_ids: list[str] = Field(default_factory=list)
    emitted_at_ms: AvroLong


MODEL_BY_KIND: Mapping[RecordKind, type[AvroRecord]] = {
    RecordKind.JOB: Job,
    RecordKind.DUE_EVENT: DueEvent,
    RecordKind.EXECUTION_RESULT: ExecutionResult,
    RecordKind.RETRY_REQUEST: RetryRequest,
    RecordKind.DEAD_LETTER: DeadLetter,
    RecordKind.DAG_SIGNAL: DagSignal,
    RecordKind.DAG_RELEASE: DagRelease,
}
"""The model of each top-level record kind, e.g. to turn ``Codec.decode_any`` into a model."""
