"""The timer service's settings: one frozen object, read from the environment at the entry point."""

from __future__ import annotations

import os
import socket
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from streams.settings import KafkaSettings


def default_instance_id(pid: int | None = None) -> str:
    """The instance id of the timer process ``pid`` (this one by default) when none is set."""
    return f"timer-{socket.gethostname()}-{os.getpid() if pid is None else pid}"


class TenantLimit(BaseModel):
    """One tenant's limit (``KAFKRON_TIMER_TENANT_LIMITS``); an unknown field is refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Fires per second across the whole timer group (``limits.py``); None: no limit.
    executions_per_s: float | None = Field(default=None, gt=0)
    # Runs emitted and not finished across the group (``in_flight.py``: max(1, N // P) per
    # partition of ``jobs``); None: no limit.
    in_flight: int | None = Field(default=None, ge=1)


class TimerSettings(BaseSettings):
    """How one timer process fires: pace, batch bounds, grace and retention.

    Environment variables carry the prefix ``KAFKRON_TIMER_`` (for example
    ``KAFKRON_TIMER_BATCH_SIZE``); ``kafka`` is read with its own ``KAFKRON_`` prefix.
    """

    model_config = SettingsConfigDict(env_prefix="KAFKRON_TIMER_", frozen=True, extra="ignore")

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    # Prometheus metrics at http://<metrics_host>:<metrics_port>/metrics (streams/metrics.py);
    # port 0 serves none. Processes sharing a host need ports of their own; listen on
    # 0.0.0.0 for a Prometheus on another host.
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(default=9701, ge=0, le=65535)
    # How often each owned partition's wheel is scanned for due entries.
    punctuate_interval_ms: int = Field(default=10, ge=1)
    # Entries fire (their DueEvents are emitted and committed) up to this long before their
    # fire time, so that punctuation and the transaction commit are paid ahead; executors
    # hold an early DueEvent until its ``fire_at_ms``. Late, on-time and catch-up decisions
    # still use the real clock. A command applied less than this before a fire may come
    # after the fire was emitted (the fire then runs). 0 fires nothing before it is due.
    fire_ahead_ms: int = Field(default=200, ge=0)
    # At most this many records are emitted per partition per punctuation, so a hot second
    # is drained in bounded slices and other partitions keep firing.
    batch_size: int = Field(default=1000, ge=1)
    # A finished one-off job is deleted from ``jobs`` (tombstone) this long after it ended.
    one_off_retention_ms: int = Field(default=7 * 24 * 3600 * 1000, ge=0)
    # A tick fired within this lateness is on time even for catch-up=NONE (rebalances and
    # failovers make every timer a few seconds late now and then).
    misfire_grace_ms: int = Field(default=60_000, ge=0)
    # At most this many ticks of one job are settled per firing; the rest follow next time.
    max_catchup_ticks: int = Field(default=1000, ge=1)
    # Executions remembered as running per job (overlap decisions); older ones are dropped.
    max_running_per_job: int = Field(default=64, ge=1)
    # Names this process's transactional producer; give each timer a stable one (timer-0,
    # timer-1, ...) so a restart aborts its predecessor's open transaction at once instead
    # of after transaction_timeout_ms.
    instance_id: str = Field(default_factory=default_instance_id)
    # Fires become visible when their transaction commits. A drain that caught up commits
    # within ``trickle_commit_interval_ms`` (below); one still behind (a hot second) lets the
    # transaction grow for up to this long: fewer, larger transactions cost the broker far
    # less per fire.
    backlog_commit_interval_ms: int = Field(default=250, ge=0)
    # Fired one-off entries are deleted (a changelog tombstone each) in idle punctuations
    # at up to this many per second, so that collecting after a herd never crowds out fires
    # (a tenth of it while inputs wait: ``pacing.py``).
    collect_per_s: int = Field(default=20_000, ge=1)
    # Compression of everything the timer produces (librdkafka compression.type).
    compression_type: str = "lz4"
    # Processor runtime tuning (streams.processor.ProcessorOptions).
    consume_batch_size: int = Field(default=1000, ge=1)
    commit_interval_ms: int = Field(default=1000, ge=1)
    poll_timeout_ms: int = Field(default=100, ge=1)
    transaction_timeout_ms: int = Field(default=10_000, ge=1000)
    # A dead timer's partitions move to the others after this long (KIP-848 group config).
    session_timeout_ms: int = Field(default=6_000, ge=1000)
    heartbeat_interval_ms: int = Field(default=1_000, ge=100)
    static_membership: bool = False
    # A drain that caught up lets its fires wait up to this long for a commit, so a steady
    # trickle commits every ~this-many ms instead of every punctuation round: a commit costs
    # the timer ~1 ms of CPU (begin, flush, EndTxn, RocksDB write). Fires are emitted
    # ``fire_ahead_ms`` early, so the wait is capped at half of it (``pacing.py``): the rest
    # is left for the commit and the executor's fetch, and start lateness does not change.
    # In bench.steady (2K fires/s, fire-ahead 200) 25 ms cut commits from ~46/s to ~22/s and
    # the timer's CPU per job by ~10%; 50 ms (13/s) saved little more, 100 ms brought fires
    # within ~10-30 ms of their fire time at p99 and start lateness p99 up. A fire placed at
    # once (a job created already due, a catch-up tail) can wait this long too.
    # 0, or fire_ahead_ms 0: commit at the end of each punctuation round that fired.
    trickle_commit_interval_ms: int = Field(default=25, ge=0)
    # Tenant-fair draining (``fairness.py``): the scheduled entries due at one instant fire
    # tenant by tenant in turn, so a small tenant's herd is not queued behind a big one's.
    # Off: job-id order within an instant (the order before; for comparisons).
    fair_tenants: bool = True
    # Entries per turn of a tenant in that order (default 1), as JSON, e.g.
    # KAFKRON_TIMER_TENANT_WEIGHTS='{"interactive": 4}'. Only the timer's order within an
    # instant reads it; weights below 1 are refused.
    tenant_weights: dict[str, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    # Per-tenant limits as JSON, "*" for every tenant not named, e.g.
    # KAFKRON_TIMER_TENANT_LIMITS='{"*": {"executions_per_s": 500, "in_flight": 200},
    # "batch": {"executions_per_s": 50}}'. Each limit is split evenly over the ``kafka.partitions``
    # partitions of ``jobs`` and kept per partition by the drain (``limits.py``), so it
    # holds for the whole group. Empty: no limit, and the fire path is unchanged.
    tenant_limits: dict[str, TenantLimit] = Field(default_factory=dict)

    def group_id(self) -> str:
        """The consumer group of every timer process of this namespace."""
        return f"{self.kafka.namespace}timer"
