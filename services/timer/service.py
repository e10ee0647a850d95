"""The timer as a partition-owning processor: stores ``jobs`` and ``wheel``, three inputs.

Group ``<namespace>timer`` consumes the co-partitioned ``jobs``, ``job-results`` and
``retry``. Each partition has two RocksDB stores, restored from their changelogs before the
partition processes anything: ``jobs`` (per-job state, key job id) and ``wheel`` (the timing
wheel, keys in fire-time order). Every punctuation drains the partition's due entries in a
bounded batch and, when it emitted and caught up, asks for a commit within
``trickle_commit_interval_ms`` capped at half of ``fire_ahead_ms`` (at once without
fire-ahead; ``pacing.py``), so fires reach the due topics before their fire time; while a
hot second is still draining, its fires commit together every ``backlog_commit_interval_ms``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from services.timer.drain import drain_due
from services.timer.inputs import apply_input, apply_results, finish_inputs, handle_input
from services.timer.metrics import TimerCollector
from services.timer.pacing import DrainPacer, trickle_commit_ms
from services.timer.scope import Scope, TimerEnv
from services.timer.settings import TimerSettings
from services.timer.throttle import release_unheld
from services.timer.wheel import collect_fired
from streams import clock
from streams.metrics import serve_metrics
from streams.processing import InputRecord, ProcessorContext
from streams.processor import Processor, ProcessorOptions

JOBS_STORE = "jobs"
WHEEL_STORE = "wheel"


class TimerHooks:
    """The processor hooks of the timer: apply input records, fire due entries."""

    def __init__(self, env: TimerEnv, pacer: DrainPacer | None = None) -> None:
        self.env = env
        self.pacer = pacer or DrainPacer(env.batch_size, 250, 20_000)
        # Partitions whose parked fires the limits in force were checked against since they
        # were assigned (``throttle.release_unheld``).
        self._unheld: set[int] = set()

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
        # The per-record hook has no offset; dead letters carry None.
        handle_input(self._scope(ctx, _now_ms(), partition), topic, partition, None, key, value)

    def on_records(
        self,
        ctx: ProcessorContext,
        topic: str,
        partition: int,
        records: Sequence[InputRecord],
    ) -> None:
        """Apply a run of records of one topic partition with one scope (one clock reading).

        A subclass that overrides :meth:`on_record` (to observe each record) keeps being
        called per record.
        """
        self.pacer.note_inputs(len(records))
        if type(self).on_record is not TimerHooks.on_record:
            for record in records:
                self.on_record(
                    ctx, topic, partition, record.key(), record.value(), record.timestamp()[1]
                )
            return
        scope = self._scope(ctx, _now_ms(), partition)
        # Every record reads its job's state: one multi-get for the run (~1 us less per key).
        if len(records) > 1:
            scope.jobs.prefetch([key for record in records if (key := record.key()) is not None])
        if topic == self.env.results_topic:
            apply_results(scope, partition, records)
        else:
            for record in records:
                apply_input(scope, topic, partition, record.offset(), record.key(), record.value())
            if topic == self.env.releases_topic and scope.emitted:
                # A released DAG run is due now: commit its DueEvent with this batch, not
                # at the commit interval (a wait of up to a second per DAG level).
                ctx.request_commit(0)
        finish_inputs(scope)
        if self.env.tenant_limits.active:  # a queued or released fire took a slot
            self.env.tenant_limits.flush(scope.jobs, partition)

    def on_punctuate(self, ctx: ProcessorContext, partition: int, now_ms: int) -> None:
        """Fire the partition's due entries, oldest first, at most one batch; ask for a commit.

        With nothing due, collect fired entries as the pacer allows (see ``pacing.py``), at a
        trickle while inputs wait (a herd's results).
        """
        scope = self._scope(ctx, now_ms, partition)
        if partition not in self._unheld:
            if release_unheld(scope):
                self._unheld.add(partition)
            if scope.emitted:
                ctx.request_commit(0)
        emitted = drain_due(scope, self.env.batch_size, collect=False)
        self._note_backlog(scope, partition, now_ms)
        commit_within_ms = self.pacer.commit_within_ms(partition, emitted)
        if commit_within_ms is not None:
            ctx.request_commit(commit_within_ms)
        busy = self.pacer.busy(partition)
        if not emitted:
            limit = self.pacer.collect_limit(now_ms, busy)
            if limit > 0:
                start = self.pacer.collect_start(partition, now_ms)
                count, resume = collect_fired(scope, limit, start)
                self.pacer.collected(count)
                self.pacer.collect_resume(partition, resume)

    def on_revoked(self, partition: int) -> None:
        """Forget the partition's drain progress and its due backlog."""
        self.pacer.forget(partition)
        self._unheld.discard(partition)
        self.env.fire_stats.backlog_ms.pop(partition, None)
        self.env.tenant_ranks.forget(partition)
        self.env.tenant_limits.forget(partition)
        self.env.tenant_limits.in_flight.forget(partition)

    def _note_backlog(self, scope: Scope, partition: int, now_ms: int) -> None:
        """After a drain: how long the oldest due entry it left unfired has been due."""
        unfired_ms = scope.unfired_ms
        backlog_ms = 0 if unfired_ms is None else max(0, now_ms - unfired_ms)
        self.env.fire_stats.backlog_ms[partition] = backlog_ms

    def _scope(self, ctx: ProcessorContext, now_ms: int, partition: int) -> Scope:
        return Scope(
            self.env,
            ctx.store(JOBS_STORE),
            ctx.store(WHEEL_STORE),
            ctx.produce,
            now_ms,
            emit_many=ctx.produce_many,
            partition=partition,
        )


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
        # DueEvents of one job set repeat most of their bytes: lz4 batches cut what the
        # broker writes and copies (a herd committed ~1.3-2x faster in the same runs).
        producer_defaults={"compression.type": settings.compression_type},
    )
    return Processor(
        settings.kafka,
        settings.group_id(),
        settings.instance_id,
        [env.jobs_topic, env.results_topic, env.retry_topic, env.releases_topic],
        [JOBS_STORE, WHEEL_STORE],
        TimerHooks(
            env,
            DrainPacer(
                settings.batch_size,
                settings.backlog_commit_interval_ms,
                settings.collect_per_s,
                busy_inputs=settings.consume_batch_size,
                trickle_commit_ms=trickle_commit_ms(
                    settings.trickle_commit_interval_ms, settings.fire_ahead_ms
                ),
            ),
        ),
        options,
    )


def run(settings: TimerSettings, stop_event: threading.Event) -> None:
    """Run one timer process until ``stop_event`` is set; raises what stopped it otherwise.

    Its metrics are served on ``metrics_port`` meanwhile (0: not served).
    """
    env = TimerEnv.from_settings(settings)
    processor = build_processor(settings, env)
    collector = TimerCollector(env.fire_stats, env.dead_letters, processor.stats, env.tenant_limits)
    with serve_metrics([collector], settings.metrics_host, settings.metrics_port):
        processor.run(stop_event)


def _now_ms() -> int:
    return clock.now_ms()
