"""A transactional producer that latches the first delivery error and remembers changelog offsets.

Every record a processor writes (outputs and changelog) goes through one Kafka transaction
together with the input offsets. librdkafka reports delivery failures asynchronously: a
record that fails puts the transaction in an abortable state, so the commit fails and the
transaction is aborted instead of committing with a lost record (a committed transaction
proves every record in it was delivered). Changelog records get a delivery callback, which
keeps their offsets and latches the first error (through ``produce_changelog`` only the last
record of each partition does); other records get none (it costs CPU).

The transactional API calls run on the client's own thread (:mod:`streams.kafka.calls`),
waited for at most their timeout plus ``stuck_after_s``: librdkafka's
``send_offsets_to_transaction`` can block forever after the broker was out of reach, and the
caller (an executor's event loop) would never run again. A client stuck in a call, fenced or
failed, or unable to abort, is replaced by a new one of the same transactional.id, whose
``init_transactions`` aborts the open transaction at the broker.

Its configuration is :mod:`streams.kafka.producer_config`'s, what a refused produce means is
:func:`streams.kafka.errors.refused_error`, and a replaced client is closed by
:mod:`streams.kafka.producer_close`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition

from streams.kafka.calls import CallStuckError, ClientCalls
from streams.kafka.errors import (
    CommitOutcomeUnknownError,
    ErrorKind,
    KafkaOperationError,
    kafka_exception,
    operation_error,
    refused_error,
    stuck_error,
)
from streams.kafka.producer_close import discard_client
from streams.kafka.producer_config import DEFAULT_TRANSACTION_TIMEOUT_MS, producer_config
from streams.settings import KafkaSettings

_T = TypeVar("_T")
log = logging.getLogger(__name__)
DEFAULT_STUCK_AFTER_S = 5.0  # past a call's own timeout, the client is taken as stuck in it
_MIN_CALL_TIMEOUT_S = 1.0  # the least a retried call gets, even past the deadline
_MAX_RESETS_PER_MINUTE = 3


class TransactionalProducer:
    """One transactional.id: lazily begun transactions, latched errors, delivered offsets.

    ``tracked_topics`` are the changelog topics whose delivered offsets are kept per partition
    for the current transaction (read them with :meth:`delivered_offset` after commit).
    ``config_defaults`` are librdkafka settings the operator's extras may override.
    ``timeout_s`` bounds each step with its retries; a call that has not returned
    ``stuck_after_s`` past its own timeout leaves the client stuck, and it is replaced.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        transactional_id: str,
        *,
        transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
        tracked_topics: Collection[str] = (),
        timeout_s: float = 30.0,
        config_defaults: Mapping[str, Any] | None = None,
        stuck_after_s: float = DEFAULT_STUCK_AFTER_S,
    ) -> None:
        self._config = producer_config(
            settings, transactional_id, transaction_timeout_ms, config_defaults
        )
        self._tracked = frozenset(tracked_topics)
        self._timeout_s = timeout_s
        self._transaction_timeout_s = transaction_timeout_ms / 1000
        self._stuck_after_s = stuck_after_s
        self._in_transaction = False
        self._error: KafkaOperationError | None = None
        self._delivered: dict[tuple[str, int], int] = {}
        self._resets: list[float] = []
        self._began_s = 0.0  # monotonic time the current transaction began
        self._open_client()

    @property
    def in_transaction(self) -> bool:
        """True between the first write of a transaction and its commit or abort."""
        return self._in_transaction

    def init(self) -> None:
        """Register the transactional.id; aborts a previous incarnation's open transaction."""
        self._call("init_transactions", self._producer.init_transactions)
        self._registered = True

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, partition: int | None = None
    ) -> None:
        """Write one record inside the current transaction (begun on first use)."""
        self.produce_many([(topic, key, value)], partition)

    def produce_many(
        self,
        records: Iterable[tuple[str, bytes | None, bytes | None]],
        partition: int | None = None,
    ) -> None:
        """Write ``(topic, key, value)`` records in order inside the current transaction.

        ``partition`` None lets the partitioner (murmur2_random) pick each record's partition
        from its key. Only tracked (changelog) records get a delivery callback, for their
        offsets: any other record that fails makes the transaction abortable, so the commit
        raises and the transaction is aborted. A callback per output record costs ~0.5 us.
        """
        if self._error is not None:
            raise self._error
        if not self._in_transaction:
            self._begin()
        produce, tracked, on_delivery = self._producer.produce, self._tracked, self._on_delivery
        number = -1 if partition is None else partition
        for topic, key, value in records:
            try:
                if topic in tracked:
                    produce(topic, value, key, number, on_delivery)
                else:
                    produce(topic, value, key, number)
            except BufferError:
                self._produce_when_room(topic, key, value, number)
            except KafkaException as exc:
                raise refused_error(topic, partition, exc) from exc

    def produce_changelog(
        self, topic: str, partition: int, items: Sequence[tuple[bytes, bytes | None]]
    ) -> None:
        """Write ``(key, value)`` records of one tracked topic partition, in order.

        Only the last record gets a delivery callback: an idempotent producer delivers a
        partition's records in order, so its offset is the partition's highest, and any
        earlier record that fails makes the transaction abortable (the commit raises).
        A callback per record would cost ~1 us each.
        """
        if self._error is not None:
            raise self._error
        if not items:
            return
        if not self._in_transaction:
            self._begin()
        produce = self._producer.produce
        for key, value in items[:-1]:
            try:
                produce(topic, value, key, partition)
            except BufferError:
                self._produce_when_room(topic, key, value, partition, track=False)
            except KafkaException as exc:
                raise refused_error(topic, partition, exc) from exc
        key, value = items[-1]
        try:
            produce(topic, value, key, partition, self._on_delivery)
        except BufferError:
            self._produce_when_room(topic, key, value, partition, track=True)
        except KafkaException as exc:
            raise refused_error(topic, partition, exc) from exc

    def _produce_when_room(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        track: bool | None = None,
    ) -> None:
        """The local queue is full: serve delivery reports until the record fits.

        ``track`` None: a delivery callback when ``topic`` is tracked.
        """
        deadline = time.monotonic() + self._timeout_s
        if track is None:
            track = topic in self._tracked
        while True:
            self._serve("produce", lambda: self._producer.poll(0.05))
            try:
                if track:
                    self._producer.produce(topic, value, key, partition, self._on_delivery)
                else:
                    self._producer.produce(topic, value, key, partition)
                return
            except BufferError:
                if time.monotonic() > deadline:
                    raise
            except KafkaException as exc:
                raise refused_error(topic, partition, exc) from exc

    def send_offsets(self, offsets: list[TopicPartition], group_metadata: object) -> None:
        """Add consumer positions (next offsets to read) to the current transaction.

        librdkafka caps this call at what is left of the transaction timeout, and so does
        the wait for it; retries stop once the transaction is older than that (the broker
        aborts it then).
        """
        self._begin()
        send = self._producer.send_offsets_to_transaction
        self._call(
            "send_offsets_to_transaction",
            lambda timeout_s: send(offsets, group_metadata, timeout_s),
            cap_s=self._transaction_timeout_s,
            retry_until_s=self._began_s + self._transaction_timeout_s,
        )

    def commit(self) -> None:
        """Flush, raise a latched delivery error, then commit the transaction.

        A commit that neither finishes nor fails by its deadline raises
        :class:`CommitOutcomeUnknownError`: the caller must not redo the transaction's work.
        """
        if not self._in_transaction:
            return
        remaining = self._serve("flush", lambda: self._producer.flush(self._timeout_s))
        self.raise_delivery_error()
        if remaining:
            raise KafkaOperationError(
                "flush before commit",
                KafkaError(
                    KafkaError._MSG_TIMED_OUT,
                    f"{remaining} records undelivered",
                    txn_requires_abort=True,
                ),
            )
        try:
            self._call("commit_transaction", self._producer.commit_transaction)
        except KafkaOperationError as exc:
            if exc.kind is ErrorKind.RETRIABLE or self._calls.stuck:
                # Timed out or stuck: the commit may have reached the broker, so nothing may
                # be redone. The abort replaces the client (abort_transaction would conflict
                # with the commit librdkafka still has in progress).
                self._commit_unknown = True
                raise CommitOutcomeUnknownError(exc) from exc
            raise
        self._in_transaction = False

    def abort(self) -> None:
        """Abort the open transaction, or replace the client when it cannot.

        A client fenced, failed or stuck in a call, or whose abort failed (the broker out
        of reach until the deadline), is replaced: the new client's ``init_transactions``
        aborts the open transaction at the broker. When the broker cannot be reached for
        that either, the next transaction registers first. Raises a refusal of access, and
        replacements that repeat (see :meth:`reset`).
        """
        try:
            if self._broken:
                self._replace()
            elif self._in_transaction:
                try:
                    self._call("abort_transaction", self._producer.abort_transaction)
                except KafkaOperationError as exc:
                    if exc.denied:
                        raise
                    log.warning("%s; replacing the producer instead", exc)
                    self._replace()
        finally:
            self._in_transaction = False
            self._error = None
            self._delivered.clear()

    def reset(self) -> None:
        """Replace a fenced, failed or stuck producer with a new one of the same id.

        Typical cause: the process stalled past ``transaction.timeout.ms`` and the broker
        aborted its transaction. Resets that repeat within a minute mean another live
        process uses the same transactional.id; that is raised instead of fencing it back.
        """
        self._new_client()
        self.init()

    @property
    def _broken(self) -> bool:
        """The client can make no transactional call again: fenced, failed or stuck."""
        return (
            self._calls.stuck
            or self._commit_unknown
            or (self._error is not None and self._error.fatal)
        )

    def _replace(self) -> None:
        """:meth:`reset`, leaving a registration the broker does not answer to the next
        transaction (a new client that cannot reach it is no worse than the old one)."""
        self._new_client()
        try:
            self.init()
        except KafkaOperationError as exc:
            if exc.denied:
                raise
            log.warning("the new producer is not registered yet (%s); the next transaction "
                        "registers it first", exc)  # fmt: skip

    def _new_client(self) -> None:
        now = time.monotonic()
        self._resets = [t for t in self._resets if now - t < 60.0] + [now]
        if len(self._resets) > _MAX_RESETS_PER_MINUTE:
            raise KafkaOperationError(
                "producer reset",
                KafkaError(
                    KafkaError._FENCED,
                    f"fenced {len(self._resets)} times in a minute: "
                    "is another process running with the same instance id?",
                    fatal=True,
                ),
            )
        self._discard_client()
        self._open_client()

    def delivered_offset(self, topic: str, partition: int) -> int | None:
        """Highest delivered offset of a tracked topic partition in the current transaction."""
        return self._delivered.get((topic, partition))

    def poll(self) -> None:
        """Serve delivery callbacks without blocking; a failure is latched for the next step."""
        try:
            self._serve("poll", lambda: self._producer.poll(0))
        except KafkaOperationError as exc:
            if self._error is None:
                self._error = exc

    def raise_delivery_error(self) -> None:
        """Raise the first delivery error latched since the transaction began, if any."""
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Abort an open transaction (best effort) and release the client; never resets it."""
        try:
            if self._in_transaction and not self._broken:
                self._call("abort_transaction", self._producer.abort_transaction)
        except KafkaOperationError as exc:
            # Closing anyway: the broker aborts the transaction at its timeout.
            log.warning("closing without a clean abort: %s", exc)
        finally:
            self._in_transaction = False
            self._discard_client()

    def _open_client(self) -> None:
        """A new client (not registered yet) with its call thread and delivery callback."""
        client = self._producer = Producer(self._config)
        self._calls = ClientCalls("kafkron-producer-calls")
        self._registered = False
        self._commit_unknown = False
        self._in_transaction = False
        self._error = None
        self._delivered.clear()

        def on_delivery(error: KafkaError | None, message: Message) -> None:
            if self._producer is client:  # a replaced client's reports change nothing
                self._delivery(error, message)

        self._on_delivery = on_delivery

    def _discard_client(self) -> None:
        """Close the client (:func:`streams.kafka.producer_close.discard_client`)."""
        discard_client(self._producer, self._calls, self._broken)

    def _begin(self) -> None:
        if self._in_transaction:
            return
        if self._error is not None:
            raise self._error
        if not self._registered:  # replaced while the broker was out of reach
            self.init()
        self._delivered.clear()
        begin = self._producer.begin_transaction
        self._call("begin_transaction", lambda _timeout_s: begin())
        self._in_transaction = True
        self._began_s = time.monotonic()

    def _delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            if self._error is None:
                self._error = KafkaOperationError(f"delivery to {message.topic()}", error)
            return
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        if topic in self._tracked and topic is not None and offset is not None:
            key = (topic, partition if partition is not None else -1)
            self._delivered[key] = max(offset, self._delivered.get(key, -1))

    def _serve(self, action: str, step: Callable[[], _T]) -> _T:
        """Run a call that serves delivery callbacks (poll, flush), wrapping its Kafka error.

        A fenced or fatally failed client raises its fatal error from these calls, and
        confluent-kafka reports it as a SystemError when a delivery callback ran meanwhile:
        both become a fatal :class:`KafkaOperationError`, so the transaction is aborted and
        the client replaced instead of the processor dying.
        """
        try:
            return step()
        except (KafkaException, SystemError) as exc:
            cause = kafka_exception(exc)
            if cause is None:
                raise
            error = operation_error(action, cause)
            if error.fatal:
                self._error = error
            raise error from exc

    def _call(
        self,
        action: str,
        step: Callable[[float], _T],
        *,
        cap_s: float | None = None,
        retry_until_s: float | None = None,
    ) -> _T:
        """Run one transactional API call, ``step(timeout_s)``, repeating it while librdkafka
        says it is retriable, until ``timeout_s`` passed (or the monotonic ``retry_until_s``).

        Each try gets what is left (at most ``cap_s``) and is waited for that long plus
        ``stuck_after_s``; one still running then leaves the client stuck, and raises a
        fatal error: the client must be replaced.
        """
        deadline = time.monotonic() + self._timeout_s
        if retry_until_s is not None:
            deadline = min(deadline, retry_until_s)
        while True:
            timeout_s = max(deadline - time.monotonic(), _MIN_CALL_TIMEOUT_S)
            if cap_s is not None:
                timeout_s = min(timeout_s, cap_s)
            try:
                return self._calls.run(
                    action, partial(step, timeout_s), timeout_s + self._stuck_after_s
                )
            except CallStuckError as stuck:
                error = self._error = stuck_error(action, stuck.waited_s)
                log.error("%s; the producer is replaced", error)
                raise error from None
            except KafkaException as exc:
                error = operation_error(action, exc)
                if error.kind is not ErrorKind.RETRIABLE or time.monotonic() >= deadline:
                    if error.fatal:
                        self._error = error
                    raise error from exc
                time.sleep(0.1)
