"""The executor's consume / run / commit loop: one asyncio loop, many runs in flight.

- **Consume.** ``consume()`` runs on one dedicated thread with one call in flight (none
  while a lane is full, see :mod:`~services.executor.backpressure`), so the event loop keeps
  running handlers while it waits. Rebalance callbacks fire on that
  thread and hand their work to the event loop, waiting for it (a revoke waits for runs).
- **Dispatch.** Records wait in :class:`LaneBuffers` (priority with a starvation bound) and
  run on :class:`Chains`: a plain call per record (:meth:`RecordRunner.start`), and an
  ``await`` only for a run that must wait, up to ``max_in_flight`` waiting at once; one
  sweep timer (:class:`Deadlines`) keeps their deadlines. Outputs go to the producer in
  batches (each loop turn, but fewer than 100 wait up to 50 ms; before every commit). A record
  read before its ``fire_at_ms`` is held (:class:`Holds`, one timer) and goes back to its
  lane when due.
- **Commit** every ``commit_interval_ms`` through :class:`Committer`: results, retries,
  dead letters, dedup changelog and positions (per partition the lowest unfinished offset)
  in one transaction; sooner once the executor is idle (no chain running, nothing
  buffered) with outputs waiting, at most every ``idle_commit_ms``, so that results of
  light or bursty load are not held back a whole interval.
- **Revoke:** no new runs for those partitions, held ones are dropped, runs get
  ``revoke_grace_s`` to finish, commit (never past a held or unfinished offset), drop the
  rest. **Lost**, or an **aborted transaction:** abort, cancel every run,
  rewind every owned partition to its last committed position.
- **Failure:** an exception out of a record's processing (not a handler's error, which is
  an outcome) or out of a commit ends the loop: nothing commits after it (a record that
  raised may count as passed), every run is cancelled, the transaction is aborted, the
  consumer leaves the group, and :meth:`ExecutorLoop.run` raises that exception. The next
  owner reads every record since the last commit again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from functools import partial

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from services.executor.assignment import TP, Assignment
from services.executor.backpressure import PROBE_INTERVAL_S, Backpressure
from services.executor.chains import Chains
from services.executor.clients import open_clients
from services.executor.commit import CommitAbortedError, Committer
from services.executor.consuming import Consuming
from services.executor.deadlines import Deadlines
from services.executor.handlers import HandlerRegistry
from services.executor.holds import HeldRun, Holds
from services.executor.lane_buffers import Buffered, LaneBuffers
from services.executor.lanes import LANES
from services.executor.offsets import OffsetTracker
from services.executor.rebalance import RebalanceBridge
from services.executor.runs import RecordRunner, Rest, RunTask
from services.executor.settings import ExecutorSettings
from services.executor.stats import ExecutorStats
from services.executor.sync_pool import SyncHandlerPool
from streams.codec import Codec
from streams.exceptions import KafkronError
from streams.kafka.errors import raise_if_denied
from streams.kafka.lag import consumer_lag
from streams.runtime_stats import Periodic, RuntimeStats
from streams.topics import Priority, TopicNames

log = logging.getLogger(__name__)
_CONSUME_TIMEOUT_S = 0.1
_RESTORE_STEP_S = 0.005

ConsumeFuture = asyncio.Future[list[Message]]


def _seek(position: TopicPartition, consumer: Consumer) -> None:
    consumer.seek(position)


def _retrieve(task: RunTask) -> None:
    """Mark a failed chain's exception retrieved: the loop raises it, asyncio need not log it."""
    if not task.cancelled():
        task.exception()


class ExecutorLoop:
    """One executor process's group member: consumes ``due.*``, runs handlers, commits."""

    def __init__(self, settings: ExecutorSettings, registry: HandlerRegistry, codec: Codec) -> None:
        self.settings = settings
        self._names = TopicNames(settings.kafka.namespace)
        self._lane_of_topic = {self._names.due(lane): lane for lane in LANES}
        self._registry, self._codec = registry, codec
        self._offsets: OffsetTracker[TP] = OffsetTracker()
        self._buffers = LaneBuffers(
            self._lane_of_topic,
            settings.lane_buffer_size,
            settings.lane_max_passes,
            on_room=self._lane_has_room,
        )
        self.stats = ExecutorStats()
        self.runtime = RuntimeStats()  # commits, dedup restores, lag (for the metrics)
        self._sampling = Periodic()
        self._started = False
        self._rewind: dict[TP, int] = {}  # last committed (or first consumed) position
        self._pending_seeks: dict[TP, int] = {}
        self._abort_reason: str | None = None
        self._stopping = self._failed = False
        self._interval_s = settings.commit_interval_ms / 1000
        self._idle_s = settings.idle_commit_ms / 1000
        self._last_commit = time.monotonic()
        self._full_lanes: frozenset[Priority] = frozenset()
        self._held_full = False  # too many held: every lane blocked
        self._backpressure = Backpressure(settings.lane_pause_after_ms)
        self._paused_lanes: frozenset[Priority] = frozenset()
        self._wake = asyncio.Event()  # bound to the running loop at its first wait
        self._probe: asyncio.Future[bool] | None = None  # Consuming.others_pending in flight
        self._consume: ConsumeFuture | None = None  # the consume call in flight, if any
        self._failure: BaseException | None = None  # what a record's processing raised
        self._next_probe_s = 0.0

    def start(self) -> None:
        """Open the clients and stores, and subscribe to the due topics."""
        self._loop = asyncio.get_running_loop()
        clients = self._clients = open_clients(
            self.settings, list(self._lane_of_topic), self.runtime
        )
        self._producer = clients.producer
        consuming = self._consuming = Consuming(
            clients.consumer, self.settings.consume_batch_size, _CONSUME_TIMEOUT_S
        )
        self._assignment = Assignment(consuming, clients.dedup, clients.recovery)
        self._committer = Committer(
            self._producer, lambda: consuming.group_metadata, self._offsets, clients.dedup
        )
        self._pool = SyncHandlerPool(
            self.settings.sync_pool_size, max_abandoned=self.settings.sync_max_stuck_threads
        )
        self._deadlines = Deadlines(self._loop)
        self._holds: Holds | None = None
        if self.settings.max_hold_ms > 0:
            self._holds = Holds(
                self._loop,
                self._released,
                self.settings.max_hold_ms,
                self.settings.hold_resolution_ms,
            )
        self._runs = RecordRunner(
            worker_id=self.settings.worker_id, names=self._names, codec=self._codec,
            registry=self._registry, pool=self._pool, producer=self._producer,
            dedup=clients.dedup, assignment=self._assignment, offsets=self._offsets,
            stats=self.stats, request_abort=self._request_abort, deadlines=self._deadlines,
            holds=self._holds,
        )  # fmt: skip
        self._chains = Chains(
            self._buffers, self._start_records, self.settings.max_in_flight,
            on_idle=self._wake.set,
        )  # fmt: skip
        bridge = RebalanceBridge(
            self._loop, assigned=self._assigned, revoked=self._revoked, lost=self._lost,
            before_revoke=self._wait_for_runs, consuming=consuming,
        )  # fmt: skip
        clients.consumer.subscribe(
            list(self._lane_of_topic), on_assign=bridge.on_assign, on_revoke=bridge.on_revoke,
            on_lost=bridge.on_lost,
        )  # fmt: skip
        self._started = True

    def live_counts(self) -> tuple[int, int, int, int]:
        """Runs waiting for their handler, records held and buffered, and handler runs that
        ended in the millisecond they started, so far (zeros before :meth:`start`)."""
        if not self._started:
            return 0, 0, 0, 0
        return self._runs.waiting, self.held, self.buffered, self._runs.quick_runs

    def ready_partitions(self) -> list[TP]:
        """Owned due partitions that start runs (dedup restored, not being revoked)."""
        assignment = self._assignment
        return sorted(tp for tp in assignment.owned if assignment.token_to_start(tp) is not None)

    @property
    def buffered(self) -> int:
        """Consumed records waiting in the lane buffers."""
        return len(self._buffers)

    @property
    def held(self) -> int:
        """Records held until their ``fire_at_ms`` now."""
        return 0 if self._holds is None else len(self._holds)

    def produce_in_transaction(self, topic: str, *, key: bytes, value: bytes) -> None:
        """Produce inside the open transaction (``kafka`` handlers: exactly-once output)."""
        self._producer.produce(topic, key, value)

    async def run(self, stop_event: threading.Event) -> None:
        """Consume and run until ``stop_event`` is set; then drain, commit and close.

        Whatever else ends it is raised after a close that commits nothing more."""
        self.start()
        failure: BaseException | None = None
        try:
            while not stop_event.is_set():
                await self._iterate()
            await self._drain()
        except BaseException as exc:
            failure = exc
            self._failed = True
            log.error(
                "executor %s stops on %r: its transaction is aborted, and the records since "
                "its last commit run again on their next owner", self.settings.worker_id, exc,
            )  # fmt: skip
        # Not in a ``finally``: mypyc types a variable read there as the try block's normal
        # end left it; a consume future set to None there made a failure end in "TypeError:
        # None object expected; got _asyncio.Future" instead of the error that ended the loop.
        await self._close(failure)
        if failure is None:
            failure = self._failure  # a run that raised while the close stopped it
        if failure is not None:
            raise failure

    def _start_records(self, records: list[Buffered], task: RunTask) -> tuple[int, Rest | None]:
        """:meth:`RecordRunner.start` for the chains; what it raises ends the loop, and so does
        what the waiting rest of a run raises (a cancellation only drops the run)."""
        try:
            taken, rest = self._runs.start(records, task)
        except BaseException as exc:
            self._fail(exc, task)
            raise
        return taken, None if rest is None else self._finish_run(rest, task)

    async def _finish_run(self, rest: Rest, task: RunTask) -> None:
        try:
            await rest
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._fail(exc, task)
            raise

    def _fail(self, exc: BaseException, task: RunTask) -> None:
        """A record's processing raised ``exc``: the loop raises it at its next turn, and
        nothing commits meanwhile (the record's offset may count as passed already)."""
        if self._failure is None:
            self._failure = exc
        task.add_done_callback(_retrieve)
        self._wake.set()

    async def _iterate(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._abort_reason is not None:
            self._abort(self._abort_reason)
        consume = self._consume
        if consume is not None and consume.done():
            self._consume = None
            self._accept(consume.result())
            consume = None
        restoring = self._assignment.step_restore()
        if consume is None:
            self._probe_others()
        self._sync_pauses()
        # Seek only between consume calls: no stale batch can follow.
        if (
            consume is None
            and self._probe is None
            and self._backpressure.consume_allowed(time.monotonic())
        ):
            self._queue_seeks()
            consume = self._consume = self._consuming.start_batch(self._loop)
            consume.add_done_callback(lambda _: self._wake.set())
        spawned = self._chains.dispatch()
        self._runs.flush_due_outputs()
        self._producer.poll()
        now = time.monotonic()
        if now - self._last_commit >= self._interval_s or self._idle_commit_due(now):
            self._commit()
        if self._sampling.due():
            self._consuming.queue(self._sample_lag)
            self.runtime.store_keys = {
                (self._clients.dedup.store.name, partition): keys
                for partition, keys in self._clients.dedup.store.estimated_keys().items()
            }
        if spawned or restoring:
            await asyncio.sleep(0 if spawned else _RESTORE_STEP_S)
        else:
            await self._wait_for_wake()

    def _idle_commit_due(self, now: float) -> bool:
        """Whether outputs wait while nothing runs or waits to run, the last commit at least
        ``idle_commit_ms`` ago."""
        return now - self._last_commit >= self._idle_s and self._idle_with_outputs()

    def _idle_with_outputs(self) -> bool:
        """No chain running, nothing buffered, outputs not committed (idle commits on)."""
        if self._idle_s <= 0.0 or self._chains or self._buffers:
            return False
        return self._producer.in_transaction or self._runs.has_outputs

    def _probe_others(self) -> None:
        """While lanes block consuming: ask, every ``PROBE_INTERVAL_S``, whether records of
        the other lanes wait in the consumer; if so the blocked lanes are paused now."""
        probe = self._probe
        if probe is not None:
            if probe.done():
                self._probe = None
                if probe.result():
                    self._backpressure.others_waiting()
            return
        now = time.monotonic()
        if self._backpressure.consume_allowed(now) or now < self._next_probe_s:
            return
        blocked = self._backpressure.blocked
        tps = [tp for tp in self._assignment.owned if self._lane_of_topic[tp[0]] not in blocked]
        if tps:
            self._next_probe_s = now + PROBE_INTERVAL_S
            probe = self._probe = self._consuming.start_probe(self._loop, sorted(tps))
            probe.add_done_callback(lambda _: self._wake.set())

    def _sync_pauses(self) -> None:
        """Block full lanes, or every one while too many events are held: consuming stops,
        and the lanes' partitions are paused if they stay blocked (see backpressure.py)."""
        full = self._buffers.full_lanes()
        if full is not None:
            self._full_lanes = full
        held_full = self._held_full
        if self._holds is not None:
            held, limit = len(self._holds), self.settings.max_held
            held_full = held > limit // 2 if held_full else held >= limit
        now = time.monotonic()
        if full is not None or held_full is not self._held_full:
            self._held_full = held_full
            self._backpressure.update(frozenset(LANES) if held_full else self._full_lanes, now)
        paused = self._backpressure.paused_lanes(now)
        if paused != self._paused_lanes:
            self.stats.lane_pauses += bool(paused) and not self._paused_lanes
            self._paused_lanes = paused
            self._assignment.pause_topics(
                [t for t, lane in self._lane_of_topic.items() if lane in paused]
            )

    def _lane_has_room(self) -> None:
        """A full lane drained to its resume mark: consume again (the loop may be waiting)."""
        self._wake.set()

    def _released(self, runs: list[HeldRun]) -> None:
        """Runs whose hold ended: to the front of their lanes, for the chains to start."""
        self._buffers.requeue(runs)
        self._wake.set()

    async def _wait_for_wake(self) -> None:
        if not self._wake.is_set():
            now = time.monotonic()
            until = self._last_commit + self._interval_s
            if self._idle_with_outputs():
                until = min(until, self._last_commit + self._idle_s)
            pause_due = self._backpressure.pause_due_s(now)
            if pause_due is not None:  # blocked, not paused: wake to pause, or to probe
                until = min(until, pause_due)
                if self._next_probe_s > now:  # passed: no probe can start (all lanes blocked)
                    until = min(until, self._next_probe_s)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(until - now):
                    await self._wake.wait()
        self._wake.clear()

    def _accept(self, messages: list[Message]) -> None:
        """Buffer a consumed batch: each run of records of one partition at once."""
        add_many = self._buffers.add_many
        taken: dict[TP, bool] = {}  # per partition, decided at its first record of the batch
        run: list[Message] = []  # records of one partition in a row, to be taken or not
        topic, partition, take = "", -1, False
        errors = 0
        for message in messages:
            error = message.error()
            if error is not None:
                if take:
                    add_many(topic, run)
                run, topic, partition, take = [], "", -1, False
                errors += 1
                self._consumer_error(error)
                continue
            if message.partition() != partition or message.topic() != topic:
                if take:
                    add_many(topic, run)
                run, topic, partition = [], message.topic() or "", message.partition() or 0
                tp = (topic, partition)
                decided = taken.get(tp)
                if decided is None:
                    decided = taken[tp] = self._takes(tp, message.offset() or 0)
                take = decided
            run.append(message)
        if take:
            add_many(topic, run)
        self.stats.consumed += len(messages) - errors

    def _takes(self, tp: TP, offset: int) -> bool:
        """Whether records of ``tp`` at ``offset`` (and after, in this batch) are buffered."""
        if tp in self._pending_seeks or self._stopping:
            return False
        if self._assignment.token_to_start(tp) is not None:
            self._rewind.setdefault(tp, offset)
            return True
        if self._assignment.restoring(tp):
            self._pending_seeks[tp] = offset  # read again once its dedup is restored
        return False

    def _queue_seeks(self) -> None:
        """Rewind partitions; messages of theirs consumed before were dropped in _accept."""
        for (topic, partition), offset in self._pending_seeks.items():
            self._consuming.queue(partial(_seek, TopicPartition(topic, partition, offset)))
        self._pending_seeks.clear()

    def _request_abort(self, reason: str) -> None:
        self._abort_reason = self._abort_reason or reason
        self._wake.set()

    def _commit(self) -> None:
        if self._failure is not None:  # never past the record that raised: end the loop
            raise self._failure
        began = self._last_commit = time.monotonic()
        self._runs.publish_started()
        self._runs.flush_outputs()
        if self._abort_reason is not None:  # a produce failed: the transaction lacks records
            self._abort(self._abort_reason)
            return
        committing = time.monotonic()
        try:
            committed = self._committer.commit(self._runs.active)
        except CommitAbortedError as exc:
            self.stats.aborts += 1
            log.warning("%s; rewinding to the last commit, runs since then run again", exc)
            self._reset()
            return
        finally:
            self.stats.commit_s += time.monotonic() - began
        if committed is not None:
            self.stats.commits += 1
            self.runtime.commit_seconds.observe(time.monotonic() - committing)
            self._rewind.update(committed)

    def _sample_lag(self, consumer: Consumer) -> None:
        """On the consume thread: the due partitions' lag, for the metrics."""
        self.runtime.lag = consumer_lag(consumer)

    def _abort(self, reason: str) -> None:
        log.warning("aborting the transaction (%s); rewinding to the last commit", reason)
        self._abort_reason = None
        self.stats.aborts += 1
        try:
            self._committer.abort()
        finally:
            self._reset()

    def _reset(self) -> None:
        """After an abort: cancel every run, forget positions, rewind every owned partition."""
        self._runs.drop_outputs()
        self._chains.cancel_all()
        self._buffers.clear()
        if self._holds is not None:
            self.stats.dropped += self._holds.clear()
        for tp in self._runs.active:
            self._offsets.drop(tp)
        self._runs.active.clear()
        self._assignment.renew_tokens()
        self._pending_seeks.update(self._rewind)

    def _release(self, tps: list[TP]) -> None:
        self._buffers.discard(tps)
        if self._holds is not None:
            self.stats.dropped += self._holds.discard(tps)
        for tp in tps:
            self._runs.cancel(tp)
            self._offsets.drop(tp)
            self._runs.active.discard(tp)
            self._rewind.pop(tp, None)
            self._pending_seeks.pop(tp, None)
        self._assignment.released(tps)

    async def _wait_for_runs(self, tps: list[TP]) -> None:
        """Revoke began: no new runs for ``tps``; their runs get ``revoke_grace_s``."""
        self._assignment.stop_starting(tps)
        self._buffers.discard(tps)
        if self._holds is not None:  # not started: the next owner runs them
            self.stats.dropped += self._holds.discard(tps)
        await self._runs.wait(tps, self.settings.revoke_grace_s)

    def _revoked(self, tps: list[TP]) -> None:
        try:
            if self._failed or self._failure is not None:
                self._runs.drop_outputs()
                self._committer.abort()
            else:
                self._commit()
        finally:
            self._release(tps)
        log.info("%s released %s", self.settings.worker_id, sorted(tps))

    def _lost(self, tps: list[TP]) -> None:
        log.warning("%s lost %s: its transaction is aborted", self.settings.worker_id, sorted(tps))
        try:
            self._abort("partitions lost")
        finally:
            self._release(tps)

    def _assigned(self, tps: list[TP]) -> None:
        self._assignment.assigned(tps)
        log.info("%s assigned %s", self.settings.worker_id, sorted(tps))

    def _consumer_error(self, error: KafkaError) -> None:
        if error.code() == KafkaError._PARTITION_EOF:
            return
        raise_if_denied(f"consuming as group {self.settings.group_id()}", error)
        if error.fatal():
            raise KafkronError(f"the consumer failed fatally: {error}; restart the executor")
        log.warning("consumer: %s (librdkafka retries)", error)

    async def _drain(self) -> None:
        """Stop taking records, give runs ``revoke_grace_s`` to finish, commit, drop the rest."""
        self._stopping = self._chains.stopping = True
        await self._runs.wait(list(self._runs.running), self.settings.revoke_grace_s)
        self._commit()
        log.info("executor %s stopping: %s", self.settings.worker_id, self.stats.summary())

    async def _close(self, failure: BaseException | None) -> None:
        """Cancel the runs, leave the group (``_revoked`` commits, or aborts after a
        ``failure``), close the clients; after a ``failure``, errors here are only logged."""
        try:
            try:
                await self._stop_runs()
            finally:
                try:
                    self._consuming.close()  # revokes on this thread: _revoked commits, releases
                finally:
                    self._pool.close()
                    self._clients.close()
        except Exception:
            if failure is None:
                raise
            log.exception("executor %s: closing after %r failed too", self.settings.worker_id,
                          failure)  # fmt: skip

    async def _stop_runs(self) -> None:
        """Cancel every run and timer; wait for the consume thread's call in flight (the
        consumer closes on this thread, never while that thread uses it)."""
        self._chains.cancel_all()
        await self._chains.wait_all()
        self._deadlines.close()
        if self._holds is not None:
            self._holds.close()
        in_flight = [f for f in (self._consume, self._probe) if f is not None]
        if in_flight:
            await asyncio.wait(in_flight)
