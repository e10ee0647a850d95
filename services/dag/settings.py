"""The dag processor's settings: one frozen object, read from the environment at the entry point."""

from __future__ import annotations

import os
import socket

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from streams.settings import KafkaSettings


def default_instance_id(pid: int | None = None) -> str:
    """The instance id of the dag process ``pid`` (this one by default) when none is set."""
    return f"dag-{socket.gethostname()}-{os.getpid() if pid is None else pid}"


class DagSettings(BaseSettings):
    """How one dag processor counts upstream completions and releases dependents.

    Environment variables carry the prefix ``KAFKRON_DAG_`` (for example
    ``KAFKRON_DAG_RUN_RETENTION_MS``); ``kafka`` is read with its own ``KAFKRON_`` prefix.
    """

    model_config = SettingsConfigDict(env_prefix="KAFKRON_DAG_", frozen=True, extra="ignore")

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    # Prometheus metrics at http://<metrics_host>:<metrics_port>/metrics (streams/metrics.py);
    # port 0 serves none. Processes sharing a host need ports of their own; listen on
    # 0.0.0.0 for a Prometheus on another host.
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(default=9703, ge=0, le=65535)
    # Names this process's transactional producer; give each a stable one (dag-0, dag-1...).
    instance_id: str = Field(default_factory=default_instance_id)
    # A run's state is kept this long after its deadline (run key + dag_wait_ms), so that a
    # replayed upstream that succeeds late still releases it; then it is deleted.
    run_retention_ms: int = Field(default=7 * 24 * 3600 * 1000, ge=0)
    # An upstream's execution ends are kept this long (by run key) for dependents whose edge
    # reaches the upstream's partition after them: a dependent created just before a run,
    # or a catch-up after a crash or an outage of up to this long.
    ends_retention_ms: int = Field(default=15 * 60_000, ge=0)
    # How often each owned partition's deadlines are checked (a run's MISSED is this late).
    punctuate_interval_ms: int = Field(default=200, ge=1)
    # At most this many deadlines are settled per partition per punctuation.
    deadline_batch_size: int = Field(default=1000, ge=1)
    # A signal or release is committed within this long of the input that caused it: the
    # delay from an upstream's SUCCEEDED to its dependent's DueEvent is about three commits.
    release_commit_within_ms: int = Field(default=0, ge=0)
    # An upstream's end for a dependent in a partition this process owns (restored) is
    # counted there in the same transaction instead of through dag-signals: one commit
    # fewer between an upstream's SUCCEEDED and its dependent's release.
    local_signals: bool = True
    # Processor runtime tuning (streams.processor.ProcessorOptions).
    consume_batch_size: int = Field(default=1000, ge=1)
    commit_interval_ms: int = Field(default=1000, ge=1)
    # A consume returns after this long with fewer than consume_batch_size records: the
    # wait a signal or release adds before its commit when the input is quiet.
    poll_timeout_ms: int = Field(default=5, ge=1)
    transaction_timeout_ms: int = Field(default=10_000, ge=1000)
    session_timeout_ms: int = Field(default=6_000, ge=1000)
    heartbeat_interval_ms: int = Field(default=1_000, ge=100)

    def group_id(self) -> str:
        """The consumer group of every dag process of this namespace."""
        return f"{self.kafka.namespace}dag"
