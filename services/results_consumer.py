"""A typed consumer of ``job-results`` for downstream services: decode, filter, commit, replay.

Every execution's state changes (and every nominal fire's outcome) arrive on ``job-results``,
keyed by job id. This helper hands them over as :class:`ExecutionResult` models with where
each came from, keeps only the jobs and statuses asked for, and commits what it handed over.
It reads ``read_committed``: results of an executor transaction that was aborted never show.

A result carries its ``job_id`` but not the job's ``tenant`` or ``labels`` (those live on the
Job record, on the compacted ``jobs`` topic): filter on them with ``where=`` and a lookup of
your own (the REST API's ``GET /api/jobs/{id}``, or a table read from ``jobs``).

Two ways to start reading: :meth:`ResultsConsumer.subscribe` joins a consumer group (resumes
from the group's committed offsets, else from the oldest result); :meth:`replay_from`
assigns every partition at the first result at or after a timestamp (``offsets_for_times``),
which is how a service rebuilds its own state (see ``examples/success_counts.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from streams.codec import Codec, RecordKind
from streams.exceptions import DecodeError, KafkronError
from streams.kafka.errors import ErrorKind, classify
from streams.records import ExecutionResult, ExecutionStatus
from streams.settings import KafkaSettings
from streams.topics import TopicNames

log = logging.getLogger(__name__)

_METADATA_TIMEOUT_S = 30.0
_TRANSIENT_CODES = frozenset(
    {
        KafkaError._TIMED_OUT,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)
_T = TypeVar("_T")


class ResultsConsumerError(KafkronError):
    """The results consumer cannot go on (a broker error that is not transient)."""


@dataclass(frozen=True, slots=True)
class ReceivedResult:
    """One decoded result and where it was on ``job-results``."""

    result: ExecutionResult
    partition: int
    offset: int
    timestamp_ms: int
    """The record's Kafka timestamp (the producer's create time): what replays seek by."""


@dataclass(frozen=True, slots=True)
class ResultFilter:
    """Which results a consumer hands over; ``None`` means any. All given parts must match."""

    job_ids: frozenset[str] | None = None
    statuses: frozenset[ExecutionStatus] | None = None
    where: Callable[[ExecutionResult], bool] | None = None
    """Any further test, e.g. a tenant looked up by ``job_id`` in your own table of jobs."""

    def accepts(self, result: ExecutionResult) -> bool:
        """Whether ``result`` passes every part of this filter."""
        if self.job_ids is not None and result.job_id not in self.job_ids:
            return False
        if self.statuses is not None and result.status not in self.statuses:
            return False
        return self.where is None or self.where(result)


@dataclass(slots=True)
class ConsumerCounts:
    """What a consumer read: handed over, filtered out, and records it could not decode."""

    handed_over: int = 0
    filtered_out: int = 0
    undecodable: int = 0
    last_undecodable: str = field(default="")


class ResultsConsumer:
    """Reads ``job-results`` as typed results, filtered, committing what it handed over.

    Use as a context manager (closing leaves the group cleanly). Call :meth:`subscribe` or
    :meth:`replay_from` once, then :meth:`poll` in a loop and :meth:`commit` after your own
    state is durable: a crash between the two re-delivers results, never skips them, so make
    what you do with a result idempotent (key it on ``execution_id`` and ``status``).
    """

    def __init__(
        self,
        settings: KafkaSettings,
        group_id: str,
        *,
        only: ResultFilter | None = None,
        codec: Codec | None = None,
        librdkafka: Mapping[str, Any] | None = None,
    ) -> None:
        self.topic = TopicNames(settings.namespace).job_results
        self.only = only or ResultFilter()
        self.counts = ConsumerCounts()
        self._codec = codec or Codec.from_directory()
        config = settings.client_config(
            **{
                "group.id": group_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }
        )
        config.update(librdkafka or {})
        self._consumer = Consumer(config)
        self._starts: dict[int, int] = {}  # where replay_from / replay_all started each partition

    def partitions(self) -> list[int]:
        """The partition numbers of ``job-results``, from the broker's metadata."""
        metadata = self._consumer.list_topics(self.topic, timeout=_METADATA_TIMEOUT_S)
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            raise ResultsConsumerError(
                f"topic {self.topic} not found ({topic.error if topic else 'no metadata'}): "
                "check KAFKRON_BOOTSTRAP_SERVERS and KAFKRON_NAMESPACE"
            )
        return sorted(topic.partitions)

    def subscribe(self) -> None:
        """Join the consumer group: resume from its committed offsets, else the oldest result."""
        self._consumer.subscribe([self.topic])

    def replay_from(self, timestamp_ms: int) -> dict[int, int]:
        """Read every partition from its first result at or after ``timestamp_ms``.

        Returns the start offset per partition (its end offset where no result is that new).
        The group's committed offsets are ignored, and :meth:`commit` overwrites them.
        """
        wanted = [TopicPartition(self.topic, p, timestamp_ms) for p in self.partitions()]
        found = self._with_retries(lambda: self._consumer.offsets_for_times(wanted, timeout=5.0))
        return self._assign_at(
            {tp.partition: tp.offset if tp.offset >= 0 else self._end(tp.partition) for tp in found}
        )

    def replay_all(self) -> dict[int, int]:
        """Read every partition from its oldest retained result (``job-results`` keeps 30 days)."""
        return self._assign_at({p: self._watermarks(p)[0] for p in self.partitions()})

    def end_offsets(self) -> dict[int, int]:
        """Each assigned partition's end offset now: the offset the next result will get."""
        return {tp.partition: self._end(tp.partition) for tp in self._consumer.assignment()}

    def caught_up(self, ends: Mapping[int, int]) -> bool:
        """Whether every assigned partition was read up to ``ends`` (see :meth:`end_offsets`).

        The client's position moves past transaction markers too, so a partition read to its
        end has its position at its end offset.
        """
        for tp in self._consumer.position(self._consumer.assignment()):
            position = tp.offset if tp.offset >= 0 else self._starts.get(tp.partition, 0)
            if position < ends.get(tp.partition, 0):
                return False
        return True

    def poll(self, timeout_s: float = 1.0, max_results: int = 500) -> list[ReceivedResult]:
        """The next results that pass the filter, in partition order; [] when none came."""
        messages = self._consumer.consume(num_messages=max_results, timeout=timeout_s)
        received: list[ReceivedResult] = []
        for message in messages:
            item = self._decoded(message)
            if item is None:
                continue
            if self.only.accepts(item.result):
                received.append(item)
            else:
                self.counts.filtered_out += 1
        self.counts.handed_over += len(received)
        return received

    def commit(self) -> None:
        """Commit the position after everything :meth:`poll` returned (and filtered out).

        Partitions a replay started at their end, where nothing was read, commit that start.
        """
        offsets = []
        for tp in self._consumer.position(self._consumer.assignment()):
            position = tp.offset if tp.offset >= 0 else self._starts.get(tp.partition, -1)
            if position >= 0:
                offsets.append(TopicPartition(self.topic, tp.partition, position))
        if offsets:
            self._consumer.commit(offsets=offsets, asynchronous=False)

    def close(self) -> None:
        """Leave the group (or drop the assignment) and close the client."""
        self._consumer.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _assign_at(self, starts: dict[int, int]) -> dict[int, int]:
        self._starts = dict(starts)
        self._consumer.assign([TopicPartition(self.topic, p, o) for p, o in starts.items()])
        return dict(starts)

    def _watermarks(self, partition: int) -> tuple[int, int]:
        tp = TopicPartition(self.topic, partition)
        low, high = self._with_retries(
            lambda: self._consumer.get_watermark_offsets(tp, timeout=5.0, cached=False)
        )
        return int(low), int(high)

    def _with_retries(self, call: Callable[[], _T]) -> _T:
        """``call()``, again while the broker answers with a transient error (a partition
        leader moving or not elected yet, a timeout), until ``_METADATA_TIMEOUT_S``."""
        deadline = time.monotonic() + _METADATA_TIMEOUT_S
        while True:
            try:
                return call()
            except KafkaException as exc:
                error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                transient = error is not None and (
                    classify(error) == ErrorKind.RETRIABLE or error.code() in _TRANSIENT_CODES
                )
                if not transient or time.monotonic() > deadline:
                    raise ResultsConsumerError(
                        f"asking the broker about {self.topic} failed: {exc}; check that the "
                        "cluster at KAFKRON_BOOTSTRAP_SERVERS is up and the topic exists"
                    ) from exc
                time.sleep(0.1)

    def _end(self, partition: int) -> int:
        return self._watermarks(partition)[1]

    def _decoded(self, message: Message) -> ReceivedResult | None:
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF or classify(error) not in (
                ErrorKind.FATAL,
                ErrorKind.DENIED,
            ):
                return None  # the client goes on by itself
            raise ResultsConsumerError(f"reading {self.topic} failed: {error}")
        value = message.value()
        partition, offset = message.partition() or 0, message.offset() or 0
        try:
            if value is None:
                raise DecodeError("a null value (a tombstone) is not a result")
            result = ExecutionResult.from_avro(
                self._codec.decode(RecordKind.EXECUTION_RESULT, value)
            )
        except (DecodeError, ValueError) as exc:
            self.counts.undecodable += 1
            self.counts.last_undecodable = f"{self.topic}[{partition}]@{offset}: {exc}"
            if self.counts.undecodable == 1:
                log.warning("skipping undecodable result %s", self.counts.last_undecodable)
            return None
        _, timestamp_ms = message.timestamp()
        return ReceivedResult(result, partition, offset, timestamp_ms)
