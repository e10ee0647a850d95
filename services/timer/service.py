"""The timer as a partition-owning processor: stores ``jobs`` and ``wheel``, three inputs.

Group ``<namespace>timer`` consumes the co-partitioned ``jobs``, ``job-results`` and
``retry``. Each partition has two RocksDB stores, restored from their changelogs before the
partition processes anything: ``jobs`` (per-job state, key job id) and ``wheel`` (the timing
wheel, keys in fire-time order). Every punctuation drains the partition's due entries in a
bounded batch and asks for a commit right away when it emitted, so fires reach the due
topics within a punctuation interval plus one transaction commit.
"""

from __future__ import annotations

import threading
import time

from services.timer.drain import drain_due
from services.timer.inputs import handle_input
from services.timer.scope import Scope, TimerEnv
from services.timer.settings import TimerSettings
from streams.processing import ProcessorContext
from streams.processor import Processor, ProcessorOptions

JOBS_STORE = "jobs"
WHEEL_STORE = "wheel"


class TimerHooks:
    """The processor hooks of the timer: apply input records, fire due entries."""

    def __init__(self, env: TimerEnv) -> None:
        self.env = env

    def on_record(
        self,
        ctx: ProcessorContext,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
    ) -> None:
        """Apply one record of ``jobs``, ``job-results`` or ``retry``."""
        # The runtime does not pass the record's offset yet; dead letters carry None.
        handle_input(self._scope(ctx, _now_ms()), topic, partition, None, key, value)

    def on_punctuate(self, ctx: ProcessorContext, partition: int, now_ms: int) -> None:
        """Fire the partition's due entries, oldest first, at most one batch."""
        if drain_due(self._scope(ctx, now_ms), self.env.batch_size):
            ctx.request_commit()

    def _scope(self, ctx: ProcessorContext, now_ms: int) -> Scope:
        return Scope(self.env, ctx.store(JOBS_STORE), ctx.store(WHEEL_STORE), ctx.produce, now_ms)


def build_processor(settings: TimerSettings, env: TimerEnv | None = None) -> Processor:
    """A timer processor configured by ``settings`` (not started)."""
    env = env or TimerEnv.from_settings(settings)
    options = ProcessorOptions(
        commit_interval_ms=settings.commit_interval_ms,
        punctuate_interval_ms=settings.punctuate_interval_ms,
        batch_size=settings.consume_batch_size,
        poll_timeout_ms=settings.poll_timeout_ms,
        transaction_timeout_ms=settings.transaction_timeout_ms,
        session_timeout_ms=settings.session_timeout_ms,
        heartbeat_interval_ms=settings.heartbeat_interval_ms,
        static_membership=settings.static_membership,
    )
    return Processor(
        settings.kafka,
        settings.group_id(),
        settings.instance_id,
        [env.jobs_topic, env.results_topic, env.retry_topic],
        [JOBS_STORE, WHEEL_STORE],
        TimerHooks(env),
        options,
    )


def run(settings: TimerSettings, stop_event: threading.Event) -> None:
    """Run one timer process until ``stop_event`` is set; raises what stopped it otherwise."""
    build_processor(settings).run(stop_event)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
