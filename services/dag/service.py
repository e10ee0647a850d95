"""The dag processor as a partition-owning processor: one store, three co-partitioned inputs.

Group ``<namespace>dag`` consumes ``jobs`` (the edges), ``job-results`` (upstream ends) and
``dag-signals`` (edges and ends re-keyed between partitions). Each partition has one RocksDB
store, five key spaces (``scope.py``), restored from its changelog before it processes
anything.
Store changes, signals, releases and input offsets commit in one Kafka transaction, so a
crash never counts a completion twice nor loses one. An upstream's end for a dependent in
another partition this process owns is counted there in the same transaction (the local
shortcut, ``runs.py``) instead of through ``dag-signals``. Anything emitted asks for a commit
within ``release_commit_within_ms``: each hop of a release waits for a commit.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from services.dag.edges import node_job
from services.dag.inputs import apply_input
from services.dag.metrics import DagCollector
from services.dag.runs import settle_deadlines
from services.dag.scope import STORE, DagEnv, DagScope
from services.dag.settings import DagSettings
from services.dag.store_migration import refuse_old_changelogs
from services.ingest.producer import partition_for_key
from streams import clock
from streams.metrics import serve_metrics
from streams.processing import InputRecord, ProcessorContext
from streams.processor import Processor, ProcessorOptions


class DagHooks:
    """The processor hooks of the dag processor."""

    def __init__(self, env: DagEnv, commit_within_ms: int = 0) -> None:
        self.env = env
        self.commit_within_ms = commit_within_ms

    def on_record(
        self,
        ctx: ProcessorContext,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
    ) -> None:
        """Apply one input record (the per-record hook has no offset)."""
        scope = self._scope(ctx, _now_ms())
        apply_input(scope, topic, partition, None, key, value)
        self._commit_soon(ctx, scope)

    def on_records(
        self, ctx: ProcessorContext, topic: str, partition: int, records: Sequence[InputRecord]
    ) -> None:
        """Apply a run of records of one topic partition with one scope."""
        scope = self._scope(ctx, _now_ms())
        for record in records:
            apply_input(scope, topic, partition, record.offset(), record.key(), record.value())
        self._commit_soon(ctx, scope)

    def on_punctuate(self, ctx: ProcessorContext, partition: int, now_ms: int) -> None:
        """Settle the partition's due deadlines (MISSED runs, forgotten runs)."""
        scope = self._scope(ctx, now_ms)
        settle_deadlines(scope)
        self._commit_soon(ctx, scope)

    def _commit_soon(self, ctx: ProcessorContext, scope: DagScope) -> None:
        if scope.emitted:
            ctx.request_commit(self.commit_within_ms)

    def _scope(self, ctx: ProcessorContext, now_ms: int) -> DagScope:
        scope = DagScope.over(self.env, ctx.store(STORE), ctx.produce, ctx.produce_keyed, now_ms)
        if self.env.partitions:
            scope.local_scope = lambda job_id: self._local_scope(ctx, job_id, now_ms)
        return scope

    def _local_scope(self, ctx: ProcessorContext, job_id: str, now_ms: int) -> DagScope | None:
        """The scope of ``job_id``'s partition when this process owns it, restored, and it
        holds ``job_id`` as a dependent (else its signal goes through ``dag-signals``)."""
        target = ctx.owned(partition_for_key(job_id.encode(), self.env.partitions))
        if target is None:
            return None
        scope = self._scope(target, now_ms)
        return scope if node_job(scope, job_id) is not None else None


def build_processor(settings: DagSettings, env: DagEnv | None = None) -> Processor:
    """A dag processor configured by ``settings`` (not started)."""
    env = env or DagEnv.from_settings(settings)
    options = ProcessorOptions(
        commit_interval_ms=settings.commit_interval_ms,
        punctuate_interval_ms=settings.punctuate_interval_ms,
        batch_size=settings.consume_batch_size,
        poll_timeout_ms=settings.poll_timeout_ms,
        transaction_timeout_ms=settings.transaction_timeout_ms,
        session_timeout_ms=settings.session_timeout_ms,
        heartbeat_interval_ms=settings.heartbeat_interval_ms,
    )
    return Processor(
        settings.kafka,
        settings.group_id(),
        settings.instance_id,
        [env.jobs_topic, env.results_topic, env.signals_topic],
        [STORE],
        DagHooks(env, settings.release_commit_within_ms),
        options,
    )


def run(settings: DagSettings, stop_event: threading.Event) -> None:
    """Run one dag process until ``stop_event`` is set; raises what stopped it otherwise.

    Refuses to start while changelogs of the five-store layout exist (``store_migration.py``).

    Its metrics are served on ``metrics_port`` meanwhile (0: not served).
    """
    refuse_old_changelogs(settings)
    env = DagEnv.from_settings(settings)
    processor = build_processor(settings, env)
    collector = DagCollector(env, processor.stats)
    with serve_metrics([collector], settings.metrics_host, settings.metrics_port):
        processor.run(stop_event)


def _now_ms() -> int:
    return clock.now_ms()
