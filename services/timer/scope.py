"""What one unit of timer work touches: the partition's two stores, the clock, and its outputs.

The timer's logic is written against :class:`StoreTransaction` and :data:`Emit` so that it
runs unchanged on the processor runtime's RocksDB transactions and on the in-memory fake of
the unit tests. :class:`TimerEnv` holds what is fixed for the process; a :class:`Scope` is
built per input record or punctuation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from services.timer.due_bytes import DueEventBytes, due_event_record
from services.timer.fairness import TenantRanks
from services.timer.fire_stats import FireStats
from services.timer.limits import TenantLimits
from services.timer.settings import TimerSettings
from services.timer.stored_state import StoredStates
from streams.codec import Codec, RecordKind
from streams.identity import execution_id
from streams.job_reader import JobReader
from streams.result_reader import ResultFields, ResultReader, fields_of
from streams.topics import Priority, TopicNames

if TYPE_CHECKING:
    from services.timer.retention import RetentionBatch


class StoreTransaction(Protocol):
    """The key-value operations the timer needs from one partition's store."""

    def get(self, key: bytes) -> bytes | None: ...

    def set(self, key: bytes, value: bytes) -> None: ...

    def delete(self, key: bytes) -> None: ...

    def delete_many(self, keys: list[bytes]) -> None:
        """Delete each of ``keys``, as ``delete`` each in order."""

    def iter_range(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]: ...

    def prefetch(self, keys: list[bytes]) -> None:
        """Read ``keys`` ahead in one call, for the ``get`` calls that follow (a hint)."""


Emit = Callable[[str, bytes | None, bytes | None], None]
"""Produce ``(topic, key, value)`` in the current transaction; a ``None`` value is a tombstone."""

EmitMany = Callable[[list[tuple[str, bytes | None, bytes | None]]], None]
"""Produce many ``(topic, key, value)`` records in order, in the current transaction."""

PRIORITIES: tuple[str, ...] = tuple(p.value for p in Priority)
"""Priority names in the order of their one-byte index in stored wheel values."""
PRIORITY_INDEX: Mapping[str, int] = {name: i for i, name in enumerate(PRIORITIES)}


@dataclass(frozen=True)
class TimerEnv:
    """Everything fixed for one timer process: codec, topic names, limits."""

    codec: Codec
    due_bytes: DueEventBytes
    jobs_topic: str
    results_topic: str
    retry_topic: str
    dlq_topic: str
    due_topics: tuple[str, ...]  # indexed like PRIORITIES
    batch_size: int
    misfire_grace_ms: int
    max_catchup_ticks: int
    max_running_per_job: int
    one_off_retention_ms: int
    instance_id: str
    # Writes and reads the per-job TimerState in the jobs store (``stored_state.py``).
    states: StoredStates
    # Decodes Job records ~2x cheaper than the codec (a create decodes one); None: the codec.
    job_reader: JobReader | None = None
    # A drain fires entries due up to this long after now (``Scope.horizon_ms``).
    fire_ahead_ms: int = 0
    # Reads the fields the timer uses of an ExecutionResult ~3x cheaper than the codec (two
    # results per execution); None: the codec.
    result_reader: ResultReader | None = None
    # Input records dead-lettered (undecodable, or breaking a bound), by source topic.
    dead_letters: Counter[str] = field(default_factory=Counter)
    # The dag processor's verdicts on dependents' runs (``releases.py``).
    releases_topic: str = ""
    # Fires and their lateness, outcomes recorded, backlog and wheel size (``metrics.py``).
    fire_stats: FireStats = field(default_factory=FireStats)
    # The tenant rank of each new scheduled entry's wheel key (``fairness.py``).
    tenant_ranks: TenantRanks = field(default_factory=TenantRanks)
    # Per-tenant executions/s limits and their clocks (``limits.py``); inactive when empty.
    tenant_limits: TenantLimits = field(default_factory=lambda: TenantLimits({}, 1))
    # With limits: the endings of a fast entry whose tenant is limited (``drain.py``); None
    # sends every entry through its job's state.
    limited_suffixes: tuple[bytes, ...] | None = None

    def decode_job(self, data: bytes) -> dict[str, Any]:
        """The Job record in ``data``; raises DecodeError when it is not one."""
        if self.job_reader is not None:
            return self.job_reader.decode(data)
        return self.codec.decode(RecordKind.JOB, data)

    def read_result(self, data: bytes) -> ResultFields:
        """The fields of the ExecutionResult in ``data``; raises DecodeError like the codec."""
        return self.result_decoder()(data)

    def result_decoder(self) -> Callable[[bytes], ResultFields]:
        """What :meth:`read_result` calls: the reader, else the codec (a run of records binds
        it once)."""
        if self.result_reader is not None:
            return self.result_reader.read
        return self._result_from_codec

    def _result_from_codec(self, data: bytes) -> ResultFields:
        return fields_of(self.codec.decode(RecordKind.EXECUTION_RESULT, data))

    @classmethod
    def from_settings(cls, settings: TimerSettings, codec: Codec | None = None) -> TimerEnv:
        """The environment of a timer configured by ``settings``."""
        codec = codec or Codec.from_directory()
        names = TopicNames(settings.kafka.namespace)
        tenant_limits = TenantLimits(
            {
                tenant: limit.executions_per_s
                for tenant, limit in settings.tenant_limits.items()
                if limit.executions_per_s is not None
            },
            settings.kafka.partitions,
            {
                tenant: limit.in_flight
                for tenant, limit in settings.tenant_limits.items()
                if limit.in_flight is not None
            },
        )
        return cls(
            codec=codec,
            due_bytes=DueEventBytes(codec),
            jobs_topic=names.jobs,
            results_topic=names.job_results,
            retry_topic=names.retry,
            dlq_topic=names.dlq,
            due_topics=tuple(names.due(Priority(p)) for p in PRIORITIES),
            batch_size=settings.batch_size,
            misfire_grace_ms=settings.misfire_grace_ms,
            max_catchup_ticks=settings.max_catchup_ticks,
            max_running_per_job=settings.max_running_per_job,
            one_off_retention_ms=settings.one_off_retention_ms,
            instance_id=settings.instance_id,
            states=StoredStates(codec),
            job_reader=JobReader(codec),
            fire_ahead_ms=settings.fire_ahead_ms,
            result_reader=ResultReader(codec),
            releases_topic=names.dag_releases,
            tenant_ranks=TenantRanks(settings.tenant_weights, enabled=settings.fair_tenants),
            tenant_limits=tenant_limits,
            limited_suffixes=(
                tenant_limits.limited_suffixes() if _tenant_ends_prefixes(codec) else None
            ),
        )


def _tenant_ends_prefixes(codec: Codec) -> bool:
    """Whether ``tenant`` is the DueEvent field just before ``emitted_at_ms`` (where a fast
    entry's stored prefix ends: ``due_bytes.py``)."""
    names = [f["name"] for f in codec.writer_schema(RecordKind.DUE_EVENT)["fields"]]
    return "emitted_at_ms" in names and names[names.index("emitted_at_ms") - 1] == "tenant"


@dataclass
class Scope:
    """One record's or one punctuation's view: stores, now, and counted outputs.

    ``now_ms`` is the real clock: emitted and recorded times, lateness (misfire grace,
    catch-up windows), retention. Only a drain's reach, which entries to fire, uses
    :attr:`horizon_ms`, up to ``fire_ahead_ms`` later.
    """

    env: TimerEnv
    jobs: StoreTransaction
    wheel: StoreTransaction
    emit: Emit
    now_ms: int
    emitted: int = field(default=0)
    # The wheel's fired-through watermark, loaded on first use (see wheel.py).
    fired_through: bytes | None = field(default=None)
    # During a drain, new entries are keyed after the scan's bound (see wheel.place_ms).
    placement_floor_ms: int = field(default=0)
    # Bulk output for the drain's hot path (one call per batch, not per fire); None: ``emit``.
    emit_many: EmitMany | None = field(default=None)
    # The retention entry finished one-offs of this scope are listed in (``retention.py``).
    retention: RetentionBatch | None = field(default=None)
    # After a drain: the fire time of the oldest due entry it left unfired (its batch was
    # full), None when it fired every due entry (``metrics.py``: the due backlog).
    unfired_ms: int | None = field(default=None)
    # The partition of the stores (tenant ranks count per partition: ``fairness.py``).
    partition: int = field(default=0)

    @property
    def horizon_ms(self) -> int:
        """Entries keyed at or before this fire now (``now_ms`` plus the fire-ahead window)."""
        return self.now_ms + self.env.fire_ahead_ms

    def emit_all(self, records: list[tuple[str, bytes | None, bytes | None]]) -> None:
        """Emit ``records`` in order (counted by the caller, as fast fires are)."""
        if self.emit_many is not None:
            self.emit_many(records)
        else:
            for topic, key, value in records:
                self.emit(topic, key, value)

    def emit_due(self, job: Mapping[str, Any], tick_ms: int, fire_at_ms: int, trigger: str) -> None:
        """Emit the first attempt of the execution of ``job`` for ``tick_ms``."""
        exec_id = execution_id(job["job_id"], tick_ms)
        record = due_event_record(job, tick_ms, fire_at_ms, trigger, self.now_ms, exec_id)
        value = self.env.codec.encode(RecordKind.DUE_EVENT, record)
        topic = self.env.due_topics[PRIORITY_INDEX[job["priority"]]]
        self.emit(topic, job["job_id"].encode(), value)
        self.emitted += 1
        self.env.fire_stats.add(trigger, self.now_ms - fire_at_ms)

    def emit_outcome(
        self,
        job_id: str,
        tick_ms: int,
        status: str,
        reason: str,
        *,
        trigger: str = "SCHEDULE",
        job_version: int = 0,
        attempt: int = 0,
    ) -> None:
        """Record a fire's outcome that is not a run (SKIPPED, MISSED, CANCELLED) with why."""
        record = {
            "execution_id": execution_id(job_id, tick_ms),
            "job_id": job_id,
            "scheduled_for_ms": tick_ms,
            "attempt": attempt,
            "status": status,
            "reason": reason,
            "worker_id": self.env.instance_id,
            "trigger": trigger,
            "job_version": job_version,
            "recorded_at_ms": self.now_ms,
        }
        value = self.env.codec.encode(RecordKind.EXECUTION_RESULT, record)
        self.emit(self.env.results_topic, job_id.encode(), value)
        self.emitted += 1
        self.env.fire_stats.outcomes[status] += 1

    def emit_raw(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        """Emit bytes built elsewhere (a carried retry DueEvent, a tombstone, a dead letter)."""
        self.emit(topic, key, value)
        self.emitted += 1
