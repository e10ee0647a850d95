"""Settings of the ingest service (env prefix ``KAFKRON_INGEST_``); read once at the entry point."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from schemas import field_defaults
from streams.settings import KafkaSettings

_RETRY = field_defaults("kafkron.RetryPolicy")  # the schema's, written nowhere else


class DefaultRetry(BaseModel):
    """Retry policy of jobs whose request omits (part of) ``retry``; by default the
    ``RetryPolicy`` defaults of the schemas."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = Field(default=_RETRY["max_attempts"], ge=1, le=1000)
    initial_backoff_s: float = Field(default=_RETRY["initial_backoff_ms"] / 1000, ge=0)
    multiplier: float = Field(default=_RETRY["multiplier"], ge=1)
    max_backoff_s: float = Field(default=_RETRY["max_backoff_ms"] / 1000, ge=0)
    jitter_ratio: float = Field(default=_RETRY["jitter_ratio"], ge=0, le=1)


class IngestSettings(BaseSettings):
    """Everything ingest needs: HTTP address, request limits, view store and Kafka.

    ``kafka`` defaults to ``KafkaSettings()`` (env prefix ``KAFKRON_``); nested values can
    also be given as ``KAFKRON_INGEST_KAFKA__BOOTSTRAP_SERVERS`` and the like.
    """

    model_config = SettingsConfigDict(
        env_prefix="KAFKRON_INGEST_", env_nested_delimiter="__", frozen=True, extra="ignore"
    )

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    http_host: str = "127.0.0.1"
    http_port: int = Field(default=8080, ge=0, le=65535)
    # Prometheus metrics at http://<metrics_host>:<metrics_port>/metrics (services/ingest/
    # metrics.py), a port of their own; API process N of api_processes on metrics_port + N.
    # Port 0 serves none.
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(default=9704, ge=0, le=65535)
    # The API's bearer tokens (streams/api_tokens.py; 'kafkron token add' writes it), re-read
    # when it changes. Unset: no tokens, every caller is the admin, and the API listens on
    # loopback only (services/ingest/access.py).
    tokens_file: Path | None = None
    max_payload_bytes: int = Field(default=256 * 1024, ge=0)
    # A run_at this far in the past is still accepted (and fires at once): clock skew.
    run_at_grace_s: float = Field(default=60.0, ge=0)
    # Where the status view's RocksDB lives; default <kafka.state_dir>/ingest-view.
    view_dir: Path | None = None
    default_retry: DefaultRetry = Field(default_factory=DefaultRetry)
    max_jobs_per_batch: int = Field(default=100_000, ge=1)
    recent_executions_per_job: int = Field(default=20, ge=1, le=1000)
    # Executions the view keeps per job (each with every attempt), oldest dropped first;
    # GET /api/jobs/{id}/executions pages through them.
    executions_kept_per_job: int = Field(default=100, ge=1, le=10_000)
    # Attempts kept per execution (a replayed one starts a new round of attempts).
    attempts_kept_per_execution: int = Field(default=100, ge=1, le=1000)
    # Ticks of one backfill window, at most. Counting them costs ~50 us a tick (croniter),
    # so a request at this bound answers in ~0.5 s; raise it for longer windows.
    max_backfill_ticks: int = Field(default=10_000, ge=1, le=100_000)
    # The status view's RocksDB block cache, per API process (view_store.view_options);
    # a view of 1M jobs is 0.7 GB on disk.
    view_block_cache_mb: int = Field(default=256, ge=8, le=1 << 20)
    # How long a command waits for the view to read the latest state of its job.
    view_catch_up_timeout_s: float = Field(default=5.0, gt=0)
    # How long a produce may take to become durable before the command fails.
    delivery_timeout_s: float = Field(default=30.0, gt=0)
    # Items of one POST /api/jobs/batch and bytes of its body; more is refused whole (413).
    max_batch_items: int = Field(default=1000, ge=1, le=100_000)
    max_batch_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    # API processes sharing the port (SO_REUSEPORT); each has its own status view.
    api_processes: int = Field(default=1, ge=1, le=64)
    # uvicorn's event loop and HTTP parser; "auto" picks uvloop and httptools when installed.
    event_loop: Literal["auto", "asyncio", "uvloop"] = "auto"
    http_implementation: Literal["auto", "h11", "httptools"] = "auto"
    # The API process's GIL switch interval (Python's default is 5 ms). The producer's
    # delivery reports and the status view run on threads of their own; while the event
    # loop is busy they wait up to this long for the GIL, and every create waits for them.
    # Measured against 5 ms: single keyed creates 8-10% more per second at the same CPU,
    # POST /api/jobs/batch of 500 keyed items 8-13% fewer (the view thread takes the GIL
    # more often from the loop encoding the batch): set 0.005 for an API used for bulk.
    gil_switch_interval_s: float = Field(default=0.001, gt=0, le=0.1)

    @model_validator(mode="after")
    def _backoff_bounds(self) -> IngestSettings:
        retry = self.default_retry
        if retry.max_backoff_s < retry.initial_backoff_s:
            raise ValueError(
                "default_retry.max_backoff_s must be >= default_retry.initial_backoff_s"
            )
        return self

    @property
    def view_path(self) -> Path:
        """The status view's RocksDB directory."""
        return self.view_dir if self.view_dir is not None else self.kafka.state_dir / "ingest-view"
