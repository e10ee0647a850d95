"""One due record's way through the executor: read, dedup, run, record the outcome.

Everything a run produces (its result, a retry or a dead letter, its dedup entry) goes into
the open Kafka transaction and its offset is marked finished, so the next commit carries all of
it or none of it.

STARTED is produced only for a run still waiting when a transaction is about to commit
(:meth:`RecordRunner.publish_started`). A ``read_committed`` reader cannot tell the difference:
before, the STARTED of a run that ended before the commit became visible in the same instant as
its final result, whose ``started_at_ms`` says when it started. A short run now costs one result
record instead of two, for the executor, the broker and every reader of ``job-results``.

:meth:`RecordRunner.start` takes records of one partition as far as they go without
waiting: a skipped or undecodable record, and a run whose handler returns without
suspending (an ``async def`` that never awaits), are done when it returns, at the cost of a
few calls; the partition's ownership and offsets, and the dedup entries (one RocksDB
multi-get), are read once per call. A run that must wait (its coroutine suspended, or a
sync handler on the thread pool) comes back as a coroutine for the caller to await on its
task; its deadline is kept by
:class:`~services.executor.deadlines.Deadlines`, not by a timer of its own.

A record read before its ``fire_at_ms`` is held (:mod:`services.executor.holds`): its
offset stays in flight, and it comes back to :meth:`RecordRunner.start` as a
:class:`~services.executor.holds.HeldRun` when its hold ends, to run from the dedup check on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from types import CoroutineType
from typing import Any, cast

from confluent_kafka import Message

from services.executor.assignment import TP, Ownership, Token
from services.executor.context import HandlerContext
from services.executor.deadlines import Deadlines
from services.executor.dedup import DedupEntry, DedupStore, Progress, entry_after, skip_reason
from services.executor.due_view import TRIGGERS, DueEventMapping, DueReader, DueView, decode_long
from services.executor.exceptions import HandlerNotFoundError, SyncHandlersStuckError
from services.executor.failure_logs import log_failed_attempt
from services.executor.handlers import HandlerRegistry, RegisteredHandler
from services.executor.holds import HeldRun, Holds
from services.executor.lane_buffers import Buffered
from services.executor.offsets import OffsetTracker, PartitionOffsets
from services.executor.outcomes import attempt_outputs, started_result, undecodable_dead_letter
from services.executor.result_bytes import AvroClock, ResultEncoder
from services.executor.runner import (
    Resume,
    RunOutcome,
    RunStatus,
    cancel_note,
    deadline_outcome,
    error_outcome,
    failed_outcome,
    no_time_outcome,
)
from services.executor.stats import ExecutorStats
from services.executor.sync_pool import SyncHandlerPool
from streams import clock
from streams.codec import Codec, RecordKind
from streams.exceptions import DecodeError, InvalidRecordError
from streams.kafka.errors import KafkaOperationError
from streams.kafka.producer import TransactionalProducer
from streams.records import Trigger
from streams.topics import TopicNames

log = logging.getLogger(__name__)

_OUTPUT_BATCH = 1000
_OUTPUT_SMALL = 100
_OUTPUT_AGE_S = 0.05
"""Fewer than :data:`_OUTPUT_SMALL` outputs wait at most this long for more (a commit hands
over the rest): nobody reads them before their transaction commits, and librdkafka's
``produce()`` costs far more per record in small bursts. Measured here: 6.9 us a record in
bursts of 10 every 5 ms (the results of one hold slice at 2K jobs/s), 2.2 us in bursts of
100, 1.5 us in bursts of 1,000; bench.steady's executor 79-84 us of CPU per job against
104 us when every loop turn handed its outputs over."""
RunTask = asyncio.Task[Any]
Rest = Coroutine[Any, Any, None]
"""The part of a run that waits; await it on the task given to :meth:`RecordRunner.start`."""


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000 + clock.base_ms  # clock.now_ms(), inlined


_REPLAY = TRIGGERS.index(Trigger.REPLAY.value)
_SUCCEEDED = Progress.SUCCEEDED  # an Enum member read from its class costs ~0.1 us
_DONE = object()  # what the first step of a coroutine that returned gives (see _run)
_first_step = CoroutineType.__await__  # its iterator: a return ends it without StopIteration
_new_entry = tuple.__new__  # DedupEntry(...) without the NamedTuple's Python-level __new__


def succeeded_entry(view: DueView, previous: DedupEntry | None) -> DedupEntry:
    """``entry_after(event, Progress.SUCCEEDED, previous)`` read from the view's fields."""
    if view.trigger == _REPLAY:
        mark = decode_long(view.raw_emitted_at_ms)
    else:
        mark = previous.replay_mark if previous is not None else 0
    return _new_entry(DedupEntry, (_SUCCEEDED, view.attempt, mark))


class _Run:
    """What the waiting part of a run needs to finish it."""

    __slots__ = ("handler", "offset", "previous", "started", "started_ms", "token", "tp", "view")

    def __init__(
        self,
        view: DueView,
        handler: RegisteredHandler,
        tp: TP,
        offset: int,
        token: Token,
        previous: DedupEntry | None,
        started: bytes,
        started_ms: int,
    ) -> None:
        self.view, self.handler, self.tp, self.offset = view, handler, tp, offset
        self.token, self.previous = token, previous
        self.started, self.started_ms = started, started_ms


class RecordRunner:
    """Runs due records of owned partitions; tracks which runs are waiting where."""

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
        assignment: Ownership,
        offsets: OffsetTracker[TP],
        stats: ExecutorStats,
        request_abort: Callable[[str], None],
        deadlines: Deadlines,
        holds: Holds | None = None,
    ) -> None:
        self._worker_id = worker_id
        self._results, self._retry, self._dlq = names.job_results, names.retry, names.dlq
        self._codec, self._registry, self._pool = codec, registry, pool
        self._producer, self._dedup = producer, dedup
        self._reader = DueReader(codec)
        self._result_bytes = ResultEncoder(codec, worker_id)
        self._spliced = self._result_bytes.spliced
        self._splice_started = self._result_bytes.started
        self._splice_succeeded = self._result_bytes.succeeded
        self._clock = AvroClock()
        self._handlers: dict[bytes, RegisteredHandler] = {}
        self._sync_healthy = True
        self._assignment, self._offsets, self._stats = assignment, offsets, stats
        self._request_abort = request_abort
        self._deadlines = deadlines
        self._holds = holds  # None: every record runs when read, whatever its fire_at_ms
        # Outputs of runs not yet handed to the producer: one produce_many per batch.
        self._outputs: list[tuple[str, bytes | None, bytes | None]] = []
        self._outputs_since = 0.0  # monotonic time of the oldest output waiting
        # Waiting runs whose STARTED is not produced yet, by execution id.
        self._unpublished: dict[str, _Run] = {}
        self.running: dict[TP, dict[int, RunTask]] = {}
        self._running_ids: set[str] = set()
        self.active: set[TP] = set()  # partitions with runs since their (re)assignment
        # Handler runs that ended in the millisecond they started (most of a no-op's): one
        # int here per run; the others are timed into the stats' ``handler_ms``.
        self.quick_runs = 0

    @property
    def waiting(self) -> int:
        """Runs waiting for their handler (suspended, or on a handler thread)."""
        return len(self._running_ids)

    async def wait(self, tps: list[TP], timeout_s: float) -> None:
        """Until no run of ``tps`` is in progress, at most ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while any(self.running.get(tp) for tp in tps) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    def start(self, records: list[Buffered], task: RunTask) -> tuple[int, Rest | None]:
        """Run records of one partition in order (or skip, or dead-letter them) as far as
        they go without waiting: a run from :meth:`LaneBuffers.take_run`.

        Returns how many records it took and None when each is done (or held until its
        ``fire_at_ms``), else the waiting rest of the last one's run, to be awaited on
        ``task`` (which a deadline or a revoke cancels); the records after it are not
        touched. A :class:`HeldRun` whose hold ended comes alone and runs from the dedup
        check on.

        Each record as it would be alone, but the partition's ownership, offsets and the
        dedup entries are read once for the lot: nothing here awaits, so none of them
        can change meanwhile but by this call's own records (a duplicate id among them is
        looked up again at its turn).
        """
        first = records[0]
        if isinstance(first, HeldRun):
            return 1, self._resume(first, task)
        tp = (first.topic() or "", first.partition() or 0)
        token = self._assignment.token_to_start(tp)
        if token is None:
            return len(records), None  # released or rewound since buffered: read again
        if len(records) == 1:
            return 1, self._start_one(first, task, tp, token)
        messages = cast("list[Message]", records)  # a HeldRun comes alone (take_run)
        read = self._reader.read
        views: list[DueView] = []
        for message in messages:
            value = message.value()
            try:
                if value is None:
                    raise DecodeError("a null value (tombstone) on a due topic")
                view = read(value)
                if message.key() != view.key:
                    raise InvalidRecordError(self._reader.key_reason(message.key(), view))
                views.append(view)
            except DecodeError:
                if not views:  # the first: alone, dead-lettered
                    return 1, self._start_one(first, task, tp, token)
                break  # the records up to it now, it first of the next call
        taken = len(views)
        ids = [view.execution_id for view in views]
        # An id twice: the second must see what the first records, so each looks up alone.
        entries = self._dedup.lookup_many(tp[1], ids) if len(set(ids)) == taken else None
        offsets = self._offsets.partition(tp)
        clock, holds = self._clock, self._holds
        active = False
        for i in range(taken):
            message, view = messages[i], views[i]
            offset = message.offset() or 0
            try:
                offsets.passed(offset)
            except ValueError as exc:  # the consumer went back without a rewind of ours
                self._request_abort(f"{tp[0]}[{tp[1]}] went back: {exc}")
                continue
            if not active:
                self.active.add(tp)
                active = True
            if view.fire_at_ms > clock.ms and holds is not None:
                clock.now()  # clock.ms only lags the clock: read it only when it may matter
                if view.fire_at_ms > clock.ms:
                    offsets.hold(offset)
                    holds.hold(view, tp, offset, token, clock.ms)
                    self._stats.held += 1
                    continue
            previous = (
                self._dedup.lookup(tp[1], view.execution_id) if entries is None else entries[i]
            )
            rest = self._run(view, tp, offset, token, task, offsets, previous)
            if rest is not None:
                return i + 1, rest
        return taken, None

    def _start_one(self, message: Message, task: RunTask, tp: TP, token: Token) -> Rest | None:
        """One record of ``tp`` on its own: a run of one, or an undecodable record."""
        offset = message.offset() or 0
        offsets = self._offsets.partition(tp)
        try:
            offsets.passed(offset)
        except ValueError as exc:  # the consumer went back without a rewind of ours
            self._request_abort(f"{tp[0]}[{tp[1]}] went back: {exc}")
            return None
        self.active.add(tp)
        value = message.value()
        try:
            if value is None:
                raise DecodeError("a null value (tombstone) on a due topic")
            view = self._reader.read(value)
            if message.key() != view.key:
                raise InvalidRecordError(self._reader.key_reason(message.key(), view))
        except DecodeError as exc:
            self._undecodable(tp, offset, message.key(), value, str(exc))
            return None
        clock = self._clock
        if view.fire_at_ms > clock.ms and self._holds is not None:
            clock.now()  # clock.ms only lags the clock: read it only when it may matter
            if view.fire_at_ms > clock.ms:
                offsets.hold(offset)
                self._holds.hold(view, tp, offset, token, clock.ms)
                self._stats.held += 1
                return None
        previous = self._dedup.lookup(tp[1], view.execution_id)
        return self._run(view, tp, offset, token, task, offsets, previous)

    def _resume(self, held: HeldRun, task: RunTask) -> Rest | None:
        """Run a record whose hold ended, unless its partition went meanwhile."""
        tp, offset = held.tp, held.offset
        if self._assignment.token_to_start(tp) is not held.token:
            self._stats.dropped += 1  # released, rewound or being revoked: read again
            return None
        previous = self._dedup.lookup(tp[1], held.view.execution_id)
        rest = self._run(held.view, tp, offset, held.token, task, None, previous)
        if rest is None:
            self._offsets.finished(tp, offset)
        return rest

    def _run(
        self,
        view: DueView,
        tp: TP,
        offset: int,
        token: Token,
        task: RunTask,
        offsets: PartitionOffsets | None,
        previous: DedupEntry | None,
    ) -> Rest | None:
        """Run a read record from the dedup check on (``previous``: its entry, read now);
        ``offsets`` None: its offset is held."""
        execution_id = view.execution_id
        if (previous is not None or execution_id in self._running_ids) and self._skipped(
            view, previous
        ):
            return None
        handler = self._handlers.get(view.handler)
        if handler is None:
            try:
                handler = self._handler(view.handler)
            except HandlerNotFoundError as exc:
                self._complete(view, failed_outcome(exc), tp, previous, ran=False)
                return None
        if not (handler.is_async or self._sync_pool_healthy()):
            stuck = SyncHandlersStuckError(self._pool.abandoned_threads, self._pool.max_abandoned)
            self._stats.sync_refused += 1
            self._complete(view, failed_outcome(stuck), tp, previous, ran=False)
            return None
        started = self._clock.now()
        started_ms = self._clock.ms
        self._stats.started += 1  # its STARTED is produced only if it still waits at a commit
        if view.timeout_ms <= 0:
            outcome = no_time_outcome(handler.name, view.timeout_ms / 1000, started_ms)
            self._complete(view, outcome, tp, previous, ran=False)
            return None
        ctx = HandlerContext.of_run(
            execution_id, view.job_id, handler.name, view.scheduled_for_ms, view.attempt,
            view.payload, view.priority, self._worker_id, view.timeout_ms, time.monotonic(),
            started_ms,
        )  # fmt: skip
        rest: Awaitable[Any] | None
        if handler.is_async:
            try:
                rest = handler.fn(ctx)
                if type(rest) is CoroutineType:
                    # Step it once without a timer: most short handlers end here (next() with
                    # a default: a return raises no StopIteration, ~0.1 us less than send()).
                    yielded = next(_first_step(rest), _DONE)
                    rest = None if yielded is _DONE else Resume(rest, yielded)
            except Exception as exc:
                self._complete(view, error_outcome(exc, started_ms), tp, previous)
                return None
        else:
            rest = self._pool.run(handler.fn, ctx)
        if rest is None:
            self._succeeded(view, started, started_ms, tp, previous)
            return None
        if offsets is not None:
            offsets.hold(offset)
        run = _Run(view, handler, tp, offset, token, previous, started, started_ms)
        return self._wait(run, rest, task, ctx.deadline_monotonic_s)

    def cancel(self, tp: TP) -> None:
        """Cancel the runs of ``tp`` (released): their outcomes are never produced."""
        for task in self.running.pop(tp, {}).values():
            task.cancel()
            self._stats.dropped += 1

    async def _wait(self, run: _Run, rest: Awaitable[Any], task: RunTask, deadline: float) -> None:
        tp, offset, execution_id = run.tp, run.offset, run.view.execution_id
        running = self.running.setdefault(tp, {})
        running[offset] = task
        self._running_ids.add(execution_id)
        self._unpublished[execution_id] = run
        ticket = self._deadlines.add(task, deadline)
        outcome: RunOutcome | None = None
        try:
            await rest
        except asyncio.CancelledError as exc:
            if not self._deadlines.finish(task, ticket):
                raise  # released or stopping: the run is dropped
            timeout_s, note = run.view.timeout_ms / 1000, cancel_note(exc)
            outcome = deadline_outcome(run.handler.name, timeout_s, note, run.started_ms)
        except Exception as exc:
            self._deadlines.finish(task, ticket)
            outcome = error_outcome(exc, run.started_ms)
        else:
            self._deadlines.finish(task, ticket)
        finally:
            running.pop(offset, None)
            self._running_ids.discard(execution_id)
            self._unpublished.pop(execution_id, None)  # ended before a commit: no STARTED
        if not self._assignment.is_current(tp, run.token):
            self._stats.dropped += 1
            return
        if outcome is None:
            self._succeeded(run.view, run.started, run.started_ms, tp, run.previous)
        else:
            self._complete(run.view, outcome, tp, run.previous)
        self._offsets.finished(tp, offset)

    def _skipped(self, view: DueView, previous: DedupEntry | None) -> bool:
        reason = skip_reason(previous, DueEventMapping(view, self._reader))
        if reason is None and view.execution_id in self._running_ids:
            reason = "the same execution is running here"
        if reason is None:
            return False
        self._stats.skipped += 1
        log.debug("skipping %s attempt %s: %s", view.execution_id, view.attempt, reason)
        return True

    def _sync_pool_healthy(self) -> bool:
        """Whether sync handlers may run; says so in the log when that changes."""
        healthy = self._pool.healthy
        if healthy is not self._sync_healthy:
            self._sync_healthy = healthy
            if healthy:
                log.warning("sync handler threads returned: %s takes sync work again",
                            self._worker_id)  # fmt: skip
            else:
                log.error(
                    "%s takes no sync work: %d sync handler threads hang past their deadlines "
                    "(limit %d); fix the handler that hangs, then restart the executor",
                    self._worker_id, self._pool.abandoned_threads, self._pool.max_abandoned,
                )  # fmt: skip
        return healthy

    def _handler(self, name: bytes) -> RegisteredHandler:
        handler = self._handlers.get(name)
        if handler is None:
            handler = self._handlers[name] = self._registry.resolve(name.decode())
        return handler

    def _started_bytes(self, view: DueView, started: bytes) -> bytes:
        if self._spliced:
            return self._splice_started(view, started)
        record = started_result(self._reader.record(view), self._worker_id, self._clock.ms)
        return self._result_bytes.encode(record)

    def _succeeded(
        self, view: DueView, started: bytes, started_ms: int, tp: TP, previous: DedupEntry | None
    ) -> None:
        """Produce the SUCCEEDED result and record it in dedup."""
        if not self._spliced:
            outcome = RunOutcome(RunStatus.SUCCEEDED, None, False, None, started_ms, now_ms())
            self._complete(view, outcome, tp, previous)
            return
        result = self._splice_succeeded(view, started, self._clock.now())
        ran_ms = self._clock.ms - started_ms
        if ran_ms <= 0:
            self.quick_runs += 1
        else:
            self._stats.handler_ms.observe(ran_ms)
        outputs = self._outputs  # self._produce(self._results, view.key, result), inline
        if not outputs:
            self._outputs_since = time.monotonic()
        outputs.append((self._results, view.key, result))
        if len(outputs) >= _OUTPUT_BATCH:
            self.flush_outputs()
        self._stats.succeeded += 1
        self._dedup.record(tp[1], view.execution_id, succeeded_entry(view, previous))

    def _complete(
        self,
        view: DueView,
        outcome: RunOutcome,
        tp: TP,
        previous: DedupEntry | None,
        *,
        ran: bool = True,
    ) -> None:
        """Produce a failed attempt's result and retry or dead letter; record it in dedup;
        log the failure once. ``ran``: the handler was called (its time counts).

        ``previous`` is the dedup entry read before the run: only this executor writes the
        partition's entries, and a second run of the execution never starts meanwhile.
        """
        if ran:
            ran_ms = outcome.finished_at_ms - outcome.started_at_ms
            if ran_ms <= 0:
                self.quick_runs += 1
            else:
                self._stats.handler_ms.observe(ran_ms)
        if outcome.status is RunStatus.TIMED_OUT:
            self._stats.timed_out += 1
        event = self._reader.record(view)
        outputs = attempt_outputs(event, outcome, self._worker_id, now_ms())
        self._produce(self._results, view.key, self._result_bytes.encode(outputs.result))
        if outputs.retry_request is not None:
            retry = self._encode(RecordKind.RETRY_REQUEST, outputs.retry_request)
            self._produce(self._retry, view.key, retry)
            progress = Progress.RETRY_SCHEDULED
        elif outputs.dead_letter is not None:
            dead_letter = self._encode(RecordKind.DEAD_LETTER, outputs.dead_letter)
            self._produce(self._dlq, view.key, dead_letter)
            progress = Progress.DEAD_LETTER
        else:
            progress = Progress.SUCCEEDED
        self._stats.count(progress)
        self._dedup.record(tp[1], view.execution_id, entry_after(event, progress, previous))
        if progress is not Progress.SUCCEEDED:
            log_failed_attempt(event, outcome, outputs)

    def _undecodable(
        self, tp: TP, offset: int, key: bytes | None, value: bytes | None, reason: str
    ) -> None:
        log.warning(
            "%s[%d]@%d dead-lettered, not a usable DueEvent: %s", *tp, offset, reason,
            extra={"topic": tp[0], "partition": tp[1], "offset": offset, "reason": reason},
        )  # fmt: skip
        record = undecodable_dead_letter(reason, *tp, offset, key, value, now_ms())
        self._produce(self._dlq, None, self._encode(RecordKind.DEAD_LETTER, record))
        self._stats.undecodable += 1
        self._stats.undecodable_by_topic[tp[0]] += 1

    def _encode(self, kind: RecordKind, record: dict[str, Any]) -> bytes:
        return self._codec.encode(kind, record)

    @property
    def has_outputs(self) -> bool:
        """Whether outputs wait to be handed to the producer."""
        return bool(self._outputs)

    def publish_started(self) -> None:
        """Produce STARTED for the runs still waiting (once each): a commit is about to happen."""
        unpublished = self._unpublished
        if not unpublished:
            return
        is_current, results = self._assignment.is_current, self._results
        for run in unpublished.values():
            if is_current(run.tp, run.token):  # else dropped: the next owner runs it again
                self._produce(results, run.view.key, self._started_bytes(run.view, run.started))
        unpublished.clear()

    def flush_due_outputs(self) -> None:
        """:meth:`flush_outputs` unless fewer than :data:`_OUTPUT_SMALL` outputs wait and the
        oldest of them for less than :data:`_OUTPUT_AGE_S` (each loop turn)."""
        outputs = self._outputs
        if outputs and (
            len(outputs) >= _OUTPUT_SMALL or time.monotonic() - self._outputs_since >= _OUTPUT_AGE_S
        ):
            self.flush_outputs()

    def flush_outputs(self) -> None:
        """Hand the outputs of the runs so far to the producer (before every commit)."""
        outputs, self._outputs = self._outputs, []
        if not outputs:
            return
        try:
            self._producer.produce_many(outputs)
        except KafkaOperationError as exc:
            if exc.denied:  # a missing ACL: every retry would be refused the same way
                raise exc.access_error() from exc
            self._request_abort(f"produce failed: {exc}")
        except BufferError as exc:
            self._request_abort(f"produce failed: {exc}")

    def drop_outputs(self) -> None:
        """Forget the outputs not handed over yet (the transaction is aborted)."""
        self._outputs.clear()
        self._unpublished.clear()  # their runs are cancelled

    def _produce(self, topic: str, key: bytes | None, value: bytes) -> None:
        outputs = self._outputs
        if not outputs:
            self._outputs_since = time.monotonic()
        outputs.append((topic, key, value))
        if len(outputs) >= _OUTPUT_BATCH:
            self.flush_outputs()
