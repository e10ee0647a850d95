"""One due record's way through the executor: decode, dedup, run, record the outcome.

Everything a run produces (STARTED, its result, a retry or a dead letter, its dedup entry)
goes into the open Kafka transaction and its offset is marked finished, so the next commit
carries all of it or none of it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Message

from services.executor.assignment import TP, Assignment
from services.executor.context import HandlerContext
from services.executor.dedup import DedupEntry, DedupStore, Progress, entry_after, skip_reason
from services.executor.exceptions import HandlerNotFoundError
from services.executor.handlers import HandlerRegistry
from services.executor.offsets import OffsetTracker
from services.executor.outcomes import attempt_outputs, started_result, undecodable_dead_letter
from services.executor.result_bytes import ResultEncoder
from services.executor.runner import RunOutcome, failed_outcome, run_handler
from services.executor.stats import ExecutorStats
from services.executor.sync_pool import SyncHandlerPool
from streams.codec import Codec, RecordKind
from streams.exceptions import DecodeError
from streams.kafka.errors import KafkaOperationError
from streams.kafka.producer import TransactionalProducer
from streams.topics import TopicNames

log = logging.getLogger(__name__)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class RecordRunner:
    """Runs due records of owned partitions; tracks which runs are in progress where."""

    def __init__(
        self,
        *,
        worker_id: str,
        names: TopicNames,
        codec: Codec,
        registry: HandlerRegistry,
        pool: SyncHandlerPool,
        producer: TransactionalProducer,
        dedup: DedupStore,
        assignment: Assignment,
        offsets: OffsetTracker[TP],
        stats: ExecutorStats,
        request_abort: Callable[[str], None],
    ) -> None:
        self._worker_id = worker_id
        self._results, self._retry, self._dlq = names.job_results, names.retry, names.dlq
        self._codec, self._registry, self._pool = codec, registry, pool
        self._producer, self._dedup = producer, dedup
        self._result_bytes = ResultEncoder(codec)
        self._assignment, self._offsets, self._stats = assignment, offsets, stats
        self._request_abort = request_abort
        self.running: dict[TP, dict[int, asyncio.Task[Any]]] = {}
        self._running_ids: set[str] = set()
        self.active: set[TP] = set()  # partitions with runs since their (re)assignment

    async def wait(self, tps: list[TP], timeout_s: float) -> None:
        """Until no run of ``tps`` is in progress, at most ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while any(self.running.get(tp) for tp in tps) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    async def execute(self, message: Message, task: asyncio.Task[Any]) -> None:
        """Run one due record (or skip, or dead-letter it) and record what it produced."""
        tp = (message.topic() or "", message.partition() or 0)
        offset = message.offset() or 0
        token = self._assignment.token_to_start(tp)
        if token is None:
            return  # released or rewound since it was buffered: read again by the owner
        try:
            self._offsets.started(tp, offset)
        except ValueError as exc:  # the consumer went back without a rewind of ours
            self._request_abort(f"{tp[0]}[{tp[1]}] went back: {exc}")
            return
        self.active.add(tp)
        value = message.value()
        try:
            if value is None:
                raise DecodeError("a null value (tombstone) on a due topic")
            event = self._codec.decode(RecordKind.DUE_EVENT, value)
        except DecodeError as exc:
            self._undecodable(tp, offset, message.key(), value, str(exc))
            return
        execution_id: str = event["execution_id"]
        previous = self._dedup.lookup(tp[1], execution_id)
        reason = skip_reason(previous, event)
        if reason is None and execution_id in self._running_ids:
            reason = "the same execution is running here"
        if reason is not None:
            self._stats.skipped += 1
            log.debug("skipping %s attempt %s: %s", execution_id, event["attempt"], reason)
            self._offsets.finished(tp, offset)
            return
        try:
            handler = self._registry.resolve(event["handler"])
        except HandlerNotFoundError as exc:
            self._complete(event, failed_outcome(exc), tp, offset, previous)
            return
        key = event["job_id"].encode()
        started = started_result(event, self._worker_id, now_ms())
        self._produce(self._results, key, self._result_bytes.encode(started))
        self._stats.started += 1
        ctx = HandlerContext.from_due_event(event, worker_id=self._worker_id)
        running = self.running.setdefault(tp, {})
        running[offset] = task
        self._running_ids.add(execution_id)
        try:
            outcome = await run_handler(handler, ctx, event["timeout_ms"] / 1000, self._pool)
        finally:
            running.pop(offset, None)
            self._running_ids.discard(execution_id)
        if self._assignment.is_current(tp, token):
            self._complete(event, outcome, tp, offset, previous)
        else:
            self._stats.dropped += 1

    def cancel(self, tp: TP) -> None:
        """Cancel the runs of ``tp`` (released): their outcomes are never produced."""
        for task in self.running.pop(tp, {}).values():
            task.cancel()
            self._stats.dropped += 1

    def _complete(
        self,
        event: dict[str, Any],
        outcome: RunOutcome,
        tp: TP,
        offset: int,
        previous: DedupEntry | None,
    ) -> None:
        """Produce the attempt's result (and retry or dead letter), record it in dedup.

        ``previous`` is the dedup entry read before the run: only this executor writes the
        partition's entries, and a second run of the execution never starts meanwhile.
        """
        outputs = attempt_outputs(event, outcome, self._worker_id, now_ms())
        key = event["job_id"].encode()
        self._produce(self._results, key, self._result_bytes.encode(outputs.result))
        if outputs.retry_request is not None:
            retry = self._encode(RecordKind.RETRY_REQUEST, outputs.retry_request)
            self._produce(self._retry, key, retry)
            progress = Progress.RETRY_SCHEDULED
        elif outputs.dead_letter is not None:
            dead_letter = self._encode(RecordKind.DEAD_LETTER, outputs.dead_letter)
            self._produce(self._dlq, key, dead_letter)
            progress = Progress.DEAD_LETTER
        else:
            progress = Progress.SUCCEEDED
        self._stats.count(progress)
        execution_id = event["execution_id"]
        self._dedup.record(tp[1], execution_id, entry_after(event, progress, previous))
        self._offsets.finished(tp, offset)

    def _undecodable(
        self, tp: TP, offset: int, key: bytes | None, value: bytes | None, reason: str
    ) -> None:
        log.warning("%s[%d]@%d is not a DueEvent, dead-lettered: %s", *tp, offset, reason)
        record = undecodable_dead_letter(reason, *tp, offset, key, value, now_ms())
        self._produce(self._dlq, None, self._encode(RecordKind.DEAD_LETTER, record))
        self._stats.undecodable += 1
        self._offsets.finished(tp, offset)

    def _encode(self, kind: RecordKind, record: dict[str, Any]) -> bytes:
        return self._codec.encode(kind, record)

    def _produce(self, topic: str, key: bytes | None, value: bytes) -> None:
        try:
            self._producer.produce(topic, key, value)
        except (KafkaOperationError, BufferError) as exc:
            self._request_abort(f"produce to {topic} failed: {exc}")
