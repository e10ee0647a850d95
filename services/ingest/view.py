"""The status view: ``jobs``, ``job-results`` and ``dlq`` materialised into RocksDB.

A consumer with no group (it assigns every partition itself, ``read_committed``) applies
records in batches; each batch is one RocksDB WriteBatch holding the data *and* the next
offsets, so a restart resumes where the last batch ended and never applies a record twice
in a way that matters (every apply is idempotent anyway). Requests read RocksDB only; they
never scan topics. A record that does not decode is counted, logged and skipped: the view
never stops on bad input.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec

from services.ingest.end_offsets import end_offsets
from services.ingest.job_index import JobFilter
from services.ingest.lifecycle import Lifecycle
from services.ingest.recent_outcomes import RecentOutcomes
from services.ingest.settings import IngestSettings
from services.ingest.view_batch import ViewBatch
from services.ingest.view_store import JobRow, ViewStore
from streams import clock
from streams.codec import Codec
from streams.exceptions import DecodeError, TopicLayoutError
from streams.kafka.errors import denied_message
from streams.kafka.leaders import leader_moved, refresh_leaders, retriable_offsets_error
from streams.topics import TopicNames

log = logging.getLogger(__name__)


TopicPartitionKey = tuple[str, int]
_BATCH_MAX = 2_000
# Applied (and written) in slices of this many records: RocksDB's write of a WriteBatch
# holds the GIL (about 4 us a key), and a request waits for it; a slice of 100 results
# is ~500 keys, so a read waits ~2 ms at most instead of ~40 ms behind 2,000.
_APPLY_SLICE = 100
_POLL_S = 0.05
_ADMIN_TIMEOUT_S = 10.0
# A ListOffsets that timed out or lost its connection (a broker restarting): tried again like
# the "no leader known now" errors of streams.kafka.leaders.retriable_offsets_error.
_TIMEOUT_CODES = frozenset(
    {KafkaError.REQUEST_TIMED_OUT, KafkaError._TRANSPORT, KafkaError._TIMED_OUT}
)


class StatusView:
    """Job state, run history and dead letters for the API and the client library.

    ``start()`` opens the store and starts the consumer thread; ``close()`` stops both.
    Reads (``job``, ``jobs``, ``executions``, ``execution``, ``running``, ``dependents``,
    ``dead_letters``...) are served from RocksDB.
    """

    def __init__(self, settings: IngestSettings, codec: Codec | None = None) -> None:
        self._settings = settings
        self._codec = codec or Codec.from_directory()
        names = TopicNames(settings.kafka.namespace)
        self.jobs_topic, self.results_topic, self.dlq_topic = (
            names.jobs,
            names.job_results,
            names.dlq,
        )
        self._store: ViewStore | None = None
        self._consumer: Consumer | None = None
        self._admin: AdminClient | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._advanced = threading.Condition()
        self._positions: dict[TopicPartitionKey, int] = {}
        self._partitions: dict[str, int] = {}
        self._ready = threading.Event()
        self._startup_targets: dict[TopicPartitionKey, int] = {}
        self._advance_listeners: list[Callable[[], None]] = []
        self.last_error: str | None = None
        self.recent_outcomes = RecentOutcomes()  # live throughput and lateness (dashboard)

    # lifecycle ---------------------------------------------------------------------------

    def start(self) -> StatusView:
        """Open the store, assign every partition from its stored offset, start consuming.

        Raises ``TopicLayoutError`` when kafkron's topics do not exist (nothing left open).
        """
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def _open(self) -> None:
        self._store = ViewStore(
            self._settings.view_path,
            self._codec,
            recent_executions=self._settings.recent_executions_per_job,
            executions_kept=self._settings.executions_kept_per_job,
            attempts_kept=self._settings.attempts_kept_per_execution,
            block_cache_mb=self._settings.view_block_cache_mb,
        )
        kafka = self._settings.kafka
        self._admin = AdminClient(kafka.client_config())
        self._partitions = self._partition_counts()
        stored = self._store.offsets()
        assignment = []
        for topic, count in self._partitions.items():
            for partition in range(count):
                offset = stored.get((topic, partition))
                self._positions[(topic, partition)] = offset or 0
                start = OFFSET_BEGINNING if offset is None else offset
                assignment.append(TopicPartition(topic, partition, start))
        self._consumer = Consumer(
            kafka.client_config(
                **{
                    # Required by the client but unused: no subscribe, no commits.
                    "group.id": f"kafkron-ingest-view-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "enable.partition.eof": True,
                    "isolation.level": "read_committed",
                    # A stored offset that retention deleted: apply what is left.
                    "auto.offset.reset": "earliest",
                }
            )
        )
        self._consumer.assign(assignment)
        self._startup_targets = self._latest_offsets(self._positions)
        if self._reached(self._startup_targets):
            self._ready.set()
        self._thread = threading.Thread(target=self._run, name="ingest-status-view", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the consumer thread, then close the consumer and the store.

        The admin client has no ``close()``: dropping it here destroys it (and its broker
        connections) now rather than whenever the view itself is collected.
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        try:
            if self._consumer is not None:
                self._consumer.close()
        finally:
            if self._store is not None:
                self._store.close()
            self._store = self._consumer = self._admin = None

    def __enter__(self) -> StatusView:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def ready(self) -> bool:
        """True once the view has read everything that existed when it started."""
        return self._ready.is_set()

    @property
    def alive(self) -> bool:
        """True while the consumer thread runs."""
        return self._thread is not None and self._thread.is_alive()

    # reads -------------------------------------------------------------------------------

    @property
    def store(self) -> ViewStore:
        if self._store is None:
            raise RuntimeError("the status view is not started; call start() first")
        return self._store

    def job(self, job_id: str) -> dict[str, Any] | None:
        """The job's current Job record, or None when unknown."""
        return self.store.job(job_id)

    def lifecycle(self, job_id: str) -> Lifecycle | None:
        """What the job's shown status follows from (COMPLETED one-offs), or None."""
        return self.store.lifecycle(job_id)

    def jobs(
        self, where: JobFilter, cursor: str | None, limit: int
    ) -> tuple[list[JobRow], str | None]:
        """A page of jobs matching ``where``, in job id order, and the next page's cursor."""
        return self.store.job_page(where, cursor, limit)

    def jobs_json(
        self, where: JobFilter, cursor: str | None, limit: int, now_ms: int
    ) -> tuple[list[bytes], str | None]:
        """:meth:`jobs` as the API's items (JSON bytes, pre-rendered by the view; times
        that follow from now, such as a cron's next run, as of ``now_ms``)."""
        return self.store.job_page_json(where, cursor, limit, now_ms)

    def executions(self, job_id: str) -> list[dict[str, Any]]:
        """Recent executions of the job, newest first, each with its attempts."""
        return self.store.executions(job_id)

    def execution_page(
        self, job_id: str, cursor: str | None, limit: int
    ) -> tuple[list[dict[str, Any]], str | None]:
        """A page of the job's kept executions, newest first, and the next page's cursor."""
        return self.store.execution_page(job_id, cursor, limit)

    def execution(self, execution_id: str) -> dict[str, Any] | None:
        """One execution with every attempt kept, or None."""
        return self.store.execution(execution_id)

    def dead_letter_of(self, execution_id: str) -> dict[str, Any] | None:
        """The newest dead letter of an execution, or None."""
        return self.store.dead_letter_of(execution_id)

    def running(self, job_id: str) -> dict[str, int]:
        """The job's executions STARTED without an outcome yet (execution_id -> attempt)."""
        return self.store.running(job_id)

    def dependents(self, job_id: str, limit: int) -> list[str]:
        """The jobs whose ``depends_on`` names ``job_id`` (sorted, at most ``limit``)."""
        return self.store.dependents(job_id, limit)

    def dead_letters(
        self, cursor: str | None, limit: int, tenant: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """A page of dead letters (only ``tenant``'s when given), newest first, and the next
        page's cursor (or None)."""
        return self.store.dead_letters(cursor, limit, tenant)

    def undecodable_count(self) -> int:
        """Records skipped because they did not decode, since the store was created."""
        return self.store.undecodable_count()

    # read-your-writes --------------------------------------------------------------------

    def wait_for_offsets(self, targets: Mapping[TopicPartitionKey, int], timeout_s: float) -> bool:
        """Wait until each partition is applied up to (excluding) its target offset."""
        with self._advanced:
            return self._advanced.wait_for(lambda: self._reached(targets), timeout=timeout_s)

    def wait_until_caught_up(
        self, timeout_s: float, partitions: Collection[TopicPartitionKey] | None = None
    ) -> bool:
        """Wait until the view has applied everything committed to its topics right now,
        and on ``jobs`` everything acknowledged (its high watermark: a command another
        process wrote above a transaction still open there counts, see
        :meth:`latest_offsets_async`).

        ``partitions`` limits the wait to some partitions (e.g. the one of a job). Returns
        False when the deadline passed first.
        """
        deadline = time.monotonic() + timeout_s
        wanted = list(self._positions) if partitions is None else list(partitions)
        jobs = [tp for tp in wanted if tp[0] == self.jobs_topic]
        others = [tp for tp in wanted if tp[0] != self.jobs_topic]
        targets = {
            **self._latest_offsets(jobs, IsolationLevel.READ_UNCOMMITTED),
            **self._latest_offsets(others),
        }
        return self.wait_for_offsets(targets, max(0.0, deadline - time.monotonic()))

    def position(self, tp: TopicPartitionKey) -> int:
        """The next offset of the partition the view will apply (all below are applied)."""
        return self._positions.get(tp, 0)

    def reached(self, targets: Mapping[TopicPartitionKey, int]) -> bool:
        """True when each partition is applied up to (excluding) its target offset."""
        with self._advanced:
            return self._reached(targets)

    def add_advance_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (in the view's thread; keep it short) after each applied batch."""
        self._advance_listeners.append(listener)

    def latest_offsets(
        self, partitions: Collection[TopicPartitionKey]
    ) -> dict[TopicPartitionKey, int]:
        """The last stable offset of each partition now (one ListOffsets round trip)."""
        return self._latest_offsets(partitions)

    async def latest_offsets_async(
        self, partitions: Collection[TopicPartitionKey]
    ) -> dict[TopicPartitionKey, int]:
        """The high watermark of each partition (one ListOffsets, the loop is never blocked:
        :func:`~services.ingest.end_offsets.end_offsets`): every record acknowledged to
        any writer lies below it, also one written above a transaction still open there
        (the timer writes to ``jobs`` in transactions), where the last stable offset stops.
        The view reaches it once such transactions end. Retries in a thread (as
        :meth:`latest_offsets` does) when the broker answers a retriable error."""
        if not partitions:
            return {}
        assert self._admin is not None
        uncommitted = IsolationLevel.READ_UNCOMMITTED
        try:
            return await end_offsets(self._admin, partitions, _ADMIN_TIMEOUT_S, uncommitted)
        except KafkaException:
            return await asyncio.to_thread(self._latest_offsets, partitions, uncommitted)

    def _reached(self, targets: Mapping[TopicPartitionKey, int]) -> bool:
        return all(self._positions.get(tp, 0) >= end for tp, end in targets.items())

    def _latest_offsets(
        self,
        partitions: Collection[TopicPartitionKey],
        isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
    ) -> dict[TopicPartitionKey, int]:
        """The last stable offset of each partition (what read_committed can read up to),
        or with ``READ_UNCOMMITTED`` its high watermark.

        Retries retriable errors (a new topic's leader is still being elected) for a while.
        """
        if not partitions:
            return {}
        assert self._admin is not None
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        request = {TopicPartition(t, p): latest for t, p in partitions}
        deadline = time.monotonic() + _ADMIN_TIMEOUT_S
        while True:
            futures = self._admin.list_offsets(
                request,
                isolation_level=isolation,
                request_timeout=_ADMIN_TIMEOUT_S,
            )
            try:
                return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                retriable = retriable_offsets_error(exc) or (
                    isinstance(error, KafkaError) and error.code() in _TIMEOUT_CODES
                )
                if not retriable or time.monotonic() > deadline:
                    raise
                if leader_moved(exc):  # the admin client keeps a stale epoch until refreshed
                    refresh_leaders(self._admin, {t for t, _ in partitions})
                time.sleep(0.1)

    def _partition_counts(self) -> dict[str, int]:
        assert self._admin is not None
        metadata = self._admin.list_topics(timeout=_ADMIN_TIMEOUT_S)
        counts: dict[str, int] = {}
        for topic in (self.jobs_topic, self.results_topic, self.dlq_topic):
            found = metadata.topics.get(topic)
            if found is None or found.error is not None:
                raise TopicLayoutError(
                    f"topic {topic} does not exist; create kafkron's topics first "
                    "(streams.admin.ensure_topics, or `kafkron up`)"
                )
            counts[topic] = len(found.partitions)
        return counts

    # the consumer thread -----------------------------------------------------------------

    def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while not self._stop.is_set():
            first = consumer.poll(_POLL_S)
            if first is None:
                continue
            messages = [first, *consumer.consume(num_messages=_BATCH_MAX - 1, timeout=0)]
            messages = [m for m in messages if not self._consumer_failed(m)]
            for start in range(0, len(messages), _APPLY_SLICE):
                self._apply_durably(messages[start : start + _APPLY_SLICE])

    def _consumer_failed(self, message: Message) -> bool:
        """An error of the consumer itself, of no partition (its group refused by an ACL, a
        failed login): the view's error for ``/healthz`` and the log, nothing to apply.
        librdkafka keeps trying, so the view catches up once the operator fixes it."""
        error = message.error()
        if error is None or message.topic() is not None:
            return False
        text = denied_message("the status view's consumer", error) or f"consumer error: {error}"
        if text != self.last_error:
            log.error("status view: %s", text)
        self.last_error = text
        return True

    def _apply_durably(self, messages: list[Message]) -> None:
        """Apply a batch in one WriteBatch; retry the write until it succeeds or we stop."""
        delay_s = 0.1
        while not self._stop.is_set():
            try:
                positions, results = self._apply(messages)
            except Exception as exc:  # a RocksDB failure: keep the batch, retry it
                self.last_error = f"status view store write failed: {exc}"
                log.exception("status view could not write a batch; retrying in %.1fs", delay_s)
                self._stop.wait(delay_s)
                delay_s = min(delay_s * 2, 5.0)
                continue
            self.last_error = None
            with self._advanced:
                for tp, offset in positions.items():
                    if offset > self._positions.get(tp, 0):
                        self._positions[tp] = offset
                if not self._ready.is_set() and self._reached(self._startup_targets):
                    self._ready.set()  # before waiters wake, so they see it
                self._advanced.notify_all()
            for listener in self._advance_listeners:
                listener()
            if results:
                self.recent_outcomes.add_results(results, clock.now_ms())
            return

    def _apply(
        self, messages: list[Message]
    ) -> tuple[dict[TopicPartitionKey, int], list[dict[str, Any]]]:
        batch = self.store.begin()
        positions: dict[TopicPartitionKey, int] = {}
        for message in messages:
            topic, partition, offset = message.topic(), message.partition(), message.offset()
            assert topic is not None and partition is not None and offset is not None
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    positions[(topic, partition)] = max(
                        positions.get((topic, partition), 0), offset
                    )
                else:
                    log.warning("status view consumer error: %s", error)
                continue
            self._apply_one(batch, message, topic, partition, offset)
            batch.consumed(topic, partition, offset)
            positions[(topic, partition)] = max(positions.get((topic, partition), 0), offset + 1)
        batch.commit()
        return positions, batch.results

    def _apply_one(
        self, batch: ViewBatch, message: Message, topic: str, partition: int, offset: int
    ) -> None:
        value = message.value()
        try:
            if topic == self.jobs_topic:
                batch.apply_job(message.key(), value)
            elif value is None:
                raise DecodeError("a null value (tombstone) where a record was expected")
            elif topic == self.results_topic:
                batch.apply_result(value)
            else:
                batch.apply_dead_letter(partition, offset, value)
        except (DecodeError, KeyError, TypeError, ValueError) as exc:
            batch.undecodable()
            log.warning("status view skipped %s[%d]@%d: %s", topic, partition, offset, exc)
