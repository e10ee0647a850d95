"""The executor service's settings: one frozen object, read from the environment at start."""

from __future__ import annotations

import os
import socket
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.executor.dedup import DEFAULT_RETENTION_MS as DEFAULT_DEDUP_RETENTION_MS
from services.executor.lanes import DEFAULT_MAX_PASSES, MIN_MAX_PASSES
from streams.settings import KafkaSettings
from streams.topics import Priority

DEFAULT_HANDLER_SPECS: tuple[str, ...] = (
    "examples.noop=services.executor.examples:noop",
    "examples.echo=services.executor.examples:echo",
    "examples.flaky=services.executor.examples:flaky",
    "examples.sleep=services.executor.examples:sleep",
    "examples.fail=services.executor.examples:fail",
)
"""The example handlers every executor registers unless its operator replaces the list."""


def default_worker_id(pid: int | None = None) -> str:
    """The worker id of the executor process ``pid`` (this one by default) when none is set."""
    return f"executor-{socket.gethostname()}-{os.getpid() if pid is None else pid}"


class ExecutorSettings(BaseSettings):
    """How one executor process consumes, runs and commits.

    Environment variables carry the prefix ``KAFKRON_EXECUTOR_`` (for example
    ``KAFKRON_EXECUTOR_MAX_IN_FLIGHT``; lists and maps as JSON); ``kafka`` is read with its
    own ``KAFKRON_`` prefix.
    """

    model_config = SettingsConfigDict(
        env_prefix="KAFKRON_EXECUTOR_", env_nested_delimiter="__", frozen=True, extra="ignore"
    )

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    # Prometheus metrics at http://<metrics_host>:<metrics_port>/metrics (streams/metrics.py);
    # port 0 serves none. Processes sharing a host need ports of their own; listen on
    # 0.0.0.0 for a Prometheus on another host.
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(default=9702, ge=0, le=65535)
    # Names this process in results and its transactional producer. Give each executor a
    # stable one (executor-0, executor-1, ...): a restart then aborts its predecessor's
    # open transaction at once instead of after transaction_timeout_ms.
    worker_id: str = Field(default_factory=default_worker_id, min_length=1)
    # Runs waiting for their handler at once (one that returns without suspending holds
    # none). Size it as handler latency x wanted rate x 2-3: the default carries 100 ms
    # handlers at 15K/s with room; more costs CPU per run (the event loop's timer heap).
    max_in_flight: int = Field(default=3000, ge=1)
    # The event loop of ``python -m services.executor.main``: "auto" picks uvloop when
    # installed (its timers and callbacks cost less per waiting run; embedders of ``serve``
    # bring their own loop).
    event_loop: Literal["auto", "asyncio", "uvloop"] = "auto"
    # Threads for sync (``def``) handlers; async handlers run on the event loop.
    sync_pool_size: int = Field(default=16, ge=1)
    # A sync handler past its deadline is reported TIMED_OUT and its thread abandoned (it
    # cannot be killed). Once this many abandoned threads still hang, the executor takes no
    # sync work (those attempts fail, retryable, saying why) until some return; restart it
    # to free them. None: 4 x sync_pool_size.
    sync_max_stuck_threads: int | None = Field(default=None, ge=1)
    # A DueEvent read before its fire_at_ms (timers fire up to their fire_ahead_ms early) is
    # held and started at fire_at_ms, but at most this long after it was read, so that a
    # clock skew between hosts or a far-future fire_at_ms cannot park a run and its
    # partition's committed position. 0: run every event when read (no holding).
    max_hold_ms: int = Field(default=5_000, ge=0)
    # Held runs start in slices this wide (at the end of the slice of their fire_at_ms), so
    # that a steady stream starts, and produces its results, in batches (see holds.py).
    hold_resolution_ms: int = Field(default=5, ge=1)
    # While this many events are held, every due partition is paused (resumed at half).
    max_held: int = Field(default=50_000, ge=2)
    # Results, retries, dead letters and offsets commit in one transaction this often.
    commit_interval_ms: int = Field(default=500, ge=10)
    # Whenever nothing runs or waits to run and outputs wait for a commit, they commit then,
    # if the last commit was at least this long ago, instead of at the interval: results of
    # light or bursty load (a DAG upstream's SUCCEEDED, which releases its dependents) are
    # visible tens of ms after their runs, not up to commit_interval_ms later. 0: only at
    # the interval.
    idle_commit_ms: int = Field(default=100, ge=0)
    consume_batch_size: int = Field(default=2000, ge=1)
    # Consumed records waiting per priority lane. A full lane stops consuming until it is
    # down to half; if it is still full after lane_pause_after_ms, its partitions are paused
    # so that other lanes flow again (a pause drops librdkafka's prefetch of them, which is
    # fetched again after the resume: see backpressure.py). Rebalance callbacks run only
    # while consuming, so this also bounds how long an assignment waits (failover time).
    lane_buffer_size: int = Field(default=10_000, ge=1)
    lane_pause_after_ms: int = Field(default=1_000, ge=0)
    # Starvation bound: a lane with work is passed over at most this many picks in a row.
    lane_max_passes: dict[Priority, int] = Field(default_factory=lambda: dict(DEFAULT_MAX_PASSES))
    # Python handlers as "name=package.module:attr"; entry points of kafkron.handlers too.
    handler_specs: list[str] = Field(default_factory=lambda: list(DEFAULT_HANDLER_SPECS))
    load_entry_points: bool = True
    # Built-in kinds: handler name -> webhook URL (host must be allowed) or full topic name.
    http_routes: dict[str, str] = Field(default_factory=dict)
    allowed_http_hosts: list[str] = Field(default_factory=list)
    kafka_routes: dict[str, str] = Field(default_factory=dict)
    allowed_kafka_topics: list[str] = Field(default_factory=list)
    # On revoke (and on stop), runs of the departing partitions get this long to finish;
    # the rest are dropped and run again by the partitions' next owner.
    revoke_grace_s: float = Field(default=10.0, ge=0)
    # Failover of a SIGKILLed executor takes max(session, transaction timeout) + restore:
    # its partitions move after the session timeout (KIP-848 group config, set on the
    # broker at start when configure_group is True), and the next owner's dedup restore
    # waits for the broker to abort its open transaction. Transactions stay open about one
    # commit interval, so the transaction timeout can be as short as the session's.
    transaction_timeout_ms: int = Field(default=6_000, ge=1000)
    session_timeout_ms: int = Field(default=6_000, ge=1000)
    heartbeat_interval_ms: int = Field(default=1_000, ge=100)
    configure_group: bool = True
    # Dedup entries are kept at least this long after the commit that wrote them, then
    # swept (bounded, at commits). It must outlive every due record: a due topic's
    # retention.ms + segment.ms + 1 h (checked against the broker's topic configs at
    # start-up). The default fits the due topics kafkron creates (7 d + 1 h + 1 h); lower
    # the due topics' retention.ms / segment.ms to shrink the store.
    dedup_retention_ms: int = Field(default=DEFAULT_DEDUP_RETENTION_MS, ge=60_000)
    # One dedup changelog record per commit and partition, carrying the commit's entries
    # (format v3), instead of one per execution (v2). Executors older than this format
    # restore a v3 changelog without its entries (their executions would run again): to
    # upgrade a group that runs them, deploy with False first, then turn it on. Both
    # settings restore and sweep both formats, so turning it off is safe.
    dedup_entries_in_index: bool = True
    # group.instance.id = worker_id: a restart within the session keeps its partitions.
    static_membership: bool = False
    # Compression of everything the executor produces (librdkafka compression.type).
    compression_type: Literal["none", "gzip", "snappy", "lz4", "zstd"] = "none"

    @field_validator("lane_max_passes")
    @classmethod
    def _bounds_allow_every_lane(cls, value: dict[Priority, int]) -> dict[Priority, int]:
        merged = {**DEFAULT_MAX_PASSES, **value}
        low = {lane.value: bound for lane, bound in merged.items() if bound < MIN_MAX_PASSES}
        if low:
            raise ValueError(f"lane_max_passes must be >= {MIN_MAX_PASSES} per lane, got {low}")
        return merged

    def group_id(self) -> str:
        """The consumer group of every executor process of this namespace."""
        return f"{self.kafka.namespace}executor"

    def transactional_id(self) -> str:
        """This process's transactional.id: unique per live executor, stable across restarts."""
        return f"{self.group_id()}.{self.worker_id}"
