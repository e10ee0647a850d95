"""The partition-owning stateful processor runtime: consume, call hooks, commit exactly once.

One thread runs :meth:`Processor.run`. Partitions arrive through the group (KIP-848, range
assignor, see ``streams.kafka.consumer``); each assigned partition opens its stores, restores
them from their changelogs while its input stays paused, then processes records and
punctuations. Partitions restore a few at a time (``max_restoring_partitions``) and each
processes as soon as its own restore is done, while later ones still restore. Every
output, store change and input offset commits in one Kafka transaction
(``streams.checkpoint``).

Failures:
- a hook raises: the transaction is aborted (nothing since the last commit is kept), the
  processor closes without committing and ``run`` raises :class:`ProcessorHookError`; a
  restart processes the same records again, so a record is never silently skipped;
- the broker aborts or fences the transaction (delivery error, stale member epoch, a stall
  past the transaction timeout): store writes are dropped, the input is rewound to the last
  commit and processing goes on (a fenced producer is replaced);
- lost partitions (the member was fenced): abort, drop without committing, close stores.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from streams import clock
from streams.admin import admin_client
from streams.checkpoint import Checkpoint, CheckpointAbortedError
from streams.exceptions import ConfigurationError, KafkronError
from streams.kafka.consumer import (
    configure_group_session,
    consume_ready,
    create_group_consumer,
    create_restore_consumer,
)
from streams.kafka.errors import KafkaOperationError, raise_if_denied
from streams.kafka.lag import consumer_lag
from streams.kafka.producer import TransactionalProducer
from streams.processing import ProcessorContext, ProcessorHookError, ProcessorHooks
from streams.runtime_stats import Periodic, RuntimeStats
from streams.settings import KafkaSettings
from streams.state.changelog import changelog_topic, ensure_changelog_topics
from streams.state.exceptions import StoreError
from streams.state.recovery import Recovery, RecoveryProgress
from streams.state.store import Store

log = logging.getLogger(__name__)


def transactional_id(group_id: str, instance_id: str) -> str:
    """The transactional.id of one processor process: stable across its restarts, unique per
    instance, every one of a group under the prefix ``<group>.`` (its PREFIXED ACL)."""
    return f"{group_id}.{instance_id}"


@dataclass(frozen=True)
class ProcessorOptions:
    """Tuning of one processor; defaults suit the timer (sub-second punctuation)."""

    commit_interval_ms: int = 1_000
    punctuate_interval_ms: int = 100
    batch_size: int = 1_000
    poll_timeout_ms: int = 100
    # Bounds how long a SIGKILLed member's open transaction blocks its partitions' next owner.
    transaction_timeout_ms: int = 10_000
    # Set on the group (KIP-848 group config) at start when configure_group is True.
    session_timeout_ms: int = 6_000
    heartbeat_interval_ms: int = 1_000
    configure_group: bool = True
    # group.instance.id = instance id: a restart within the session keeps its partitions.
    static_membership: bool = False
    restore_batch_size: int = 10_000
    # Partitions reading their changelogs at once: each is ready as soon as its own restore
    # is done, so the first processes after ~1/N of a full restore instead of at its end.
    max_restoring_partitions: int = 1
    # ... and more start while those have fewer offsets than this left to read in total
    # (catch-ups of stores kept on disk restore together, the next fetch overlaps a tail).
    small_restore_offsets: int = 50_000
    # librdkafka settings of the transactional producer that the operator's extras override.
    producer_defaults: Mapping[str, Any] = field(default_factory=dict)


class Processor:
    """Runs ``hooks`` over co-partitioned ``input_topics`` with per-partition ``store_names``."""

    def __init__(
        self,
        settings: KafkaSettings,
        group_id: str,
        instance_id: str,
        input_topics: Sequence[str],
        store_names: Sequence[str],
        hooks: ProcessorHooks,
        options: ProcessorOptions | None = None,
    ) -> None:
        if not input_topics or not instance_id:
            raise ConfigurationError("a processor needs input topics and a stable instance id")
        self.settings, self.group_id, self.instance_id = settings, group_id, instance_id
        self.input_topics = list(input_topics)
        self.options = options or ProcessorOptions()
        self._hooks = hooks
        self._stores = {
            name: Store(
                name, group_id, settings.state_dir, changelog_topic(settings, group_id, name)
            )
            for name in store_names
        }
        self._owned: dict[int, set[str]] = {}  # partition -> its assigned input topics
        self._contexts: dict[int, ProcessorContext] = {}  # restored partitions only
        self._next_punctuate: dict[int, float] = {}
        self._failed = False
        # Commits, restores and lag, for the process's metrics (read at scrape time).
        self.stats = RuntimeStats()
        self._sampling = Periodic()

    def ready_partitions(self) -> list[int]:
        """Partitions restored and processing."""
        return sorted(self._contexts)

    def recovery_progress(self) -> list[RecoveryProgress]:
        """Finished restores, most recent last."""
        return list(self._recovery.finished)

    def start(self) -> None:
        """Create changelogs, set the group session, init the transactional producer, subscribe."""
        opts = self.options
        ensure_changelog_topics(self.settings, self.group_id, self._stores, self.input_topics)
        if opts.configure_group:
            configure_group_session(
                self.settings,
                self.group_id,
                session_timeout_ms=opts.session_timeout_ms,
                heartbeat_interval_ms=opts.heartbeat_interval_ms,
            )
        self._producer = TransactionalProducer(
            self.settings,
            transactional_id(self.group_id, self.instance_id),
            transaction_timeout_ms=opts.transaction_timeout_ms,
            tracked_topics=[store.changelog_topic for store in self._stores.values()],
            config_defaults=opts.producer_defaults,
        )
        self._producer.init()
        instance = self.instance_id if opts.static_membership else None
        self._consumer = create_group_consumer(
            self.settings, self.group_id, group_instance_id=instance, client_id=self.instance_id
        )
        self._recovery = Recovery(
            create_restore_consumer(self.settings, self.group_id),
            admin_client(self.settings),
            batch_size=opts.restore_batch_size,
            max_restoring_partitions=opts.max_restoring_partitions,
            small_restore_offsets=opts.small_restore_offsets,
            on_progress=getattr(self._hooks, "on_restore_progress", None),
            stats=self.stats,
        )
        self._checkpoint = Checkpoint(
            self._producer, self._consumer, opts.commit_interval_ms, self.stats
        )
        self._consumer.subscribe(
            self.input_topics,
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )

    def run(self, stop_event: threading.Event) -> None:
        """Process until ``stop_event`` is set, then commit and close; raises what stopped it."""
        self.start()
        try:
            while not stop_event.is_set():
                self.poll_once()
        except BaseException:
            self._failed = True
            raise
        finally:
            self.close()

    def poll_once(self) -> None:
        """One bounded iteration: restore step, one input batch, punctuations, maybe commit."""
        restoring = self._restore_step()
        timeout_s = 0.0 if restoring else self._poll_timeout_s()
        messages = consume_ready(self._consumer, self.options.batch_size, timeout_s)
        self._producer.poll()
        try:
            self._process(messages)
            self._punctuate()
            if self._checkpoint.due():
                self._checkpoint.commit()
            if self._sampling.due():
                self._sample()
        except CheckpointAbortedError as exc:
            log.warning("%s; reprocessing from the last commit", exc)
        except KafkaOperationError as exc:  # a delivery failed or the producer was fenced
            self._checkpoint.abort()  # replaces a fenced producer; rewinds the input
            if exc.denied:  # a missing ACL: every retry would be refused the same way
                raise exc.access_error() from exc
            log.warning("%s; transaction aborted, reprocessing from the last commit", exc)

    def close(self) -> None:
        """Commit (unless a failure stopped the run), leave the group, close stores and clients."""
        try:
            if not self._failed:
                self._checkpoint.commit()
            else:
                self._checkpoint.abort()
        finally:
            try:
                self._consumer.close()  # revokes: on_revoke commits (a no-op now) and closes
            finally:
                for store in self._stores.values():
                    store.close()
                self._recovery.close()
                self._producer.close()

    def _process(self, messages: list[Message]) -> None:
        on_records = getattr(self._hooks, "on_records", None)
        contexts = self._contexts
        first: dict[tuple[str, int], int] = {}  # per partition, processed or not
        # Runs of consecutive records of one restored topic partition, in consumed order
        # (records of other partitions between them do not end a run): one hook call and
        # one offset update per run instead of per record. One pass, and a record's offset
        # is read only where a run starts.
        runs: list[tuple[str, int, list[Message]]] = []
        run: list[Message] = []
        run_key: tuple[str, int] | None = None
        for message in messages:
            error = message.error()
            if error is not None:
                self._consumer_error(error)
                continue
            key = (message.topic() or "", message.partition() or 0)
            if key == run_key:
                run.append(message)
                continue
            if key not in first:
                first[key] = message.offset() or 0
            if key[1] in contexts:
                run_key, run = key, [message]
                runs.append((*key, run))
        for key, offset in first.items():
            if key[1] not in contexts:  # not restored (or just released): read again
                self._seek_back(TopicPartition(*key, offset))
        # Each batch's first offsets are rewind points of this transaction (restored partitions
        # only: the others were just sought back, or belong to another member now).
        self._checkpoint.note_consumed({k: o for k, o in first.items() if k[1] in contexts})
        if on_records is None:
            self._process_each([message for _, _, run in runs for message in run])
            return
        for topic, partition, run in runs:
            self._checkpoint.record_offset(topic, partition, run[-1].offset() or 0)
            self._call_hook("on_records", on_records, contexts[partition], topic, partition, run)

    def _process_each(self, ready: list[Message]) -> None:
        for message in ready:
            topic, partition = message.topic() or "", message.partition() or 0
            offset = message.offset() or 0
            context = self._contexts[partition]
            self._checkpoint.record_offset(topic, partition, offset)
            _, timestamp_ms = message.timestamp()
            self._call_hook(
                "on_record",
                self._hooks.on_record,
                context,
                topic,
                partition,
                message.key(),
                message.value(),
                timestamp_ms,
            )

    def _sample(self) -> None:
        """Read what the metrics show but nothing counts: consumer lag, store sizes."""
        self.stats.lag = consumer_lag(self._consumer)
        self.stats.store_keys = {
            (name, partition): keys
            for name, store in self._stores.items()
            for partition, keys in store.estimated_keys().items()
        }

    def _punctuate(self) -> None:
        now = time.monotonic()
        for partition, context in list(self._contexts.items()):
            if now >= self._next_punctuate[partition]:
                self._next_punctuate[partition] = now + self.options.punctuate_interval_ms / 1000
                now_ms = clock.now_ms()
                self._call_hook(
                    "on_punctuate", self._hooks.on_punctuate, context, partition, now_ms
                )

    def _seek_back(self, position: TopicPartition) -> None:
        try:
            self._consumer.seek(position)
        except KafkaException as exc:
            assigned = {(tp.topic, tp.partition) for tp in self._consumer.assignment()}
            if (position.topic, position.partition) in assigned:
                raise KafkronError(
                    f"could not seek {position.topic}[{position.partition}] back to "
                    f"{position.offset} ({exc}); stopping so that no record is skipped. "
                    "Restart the processor: it resumes from the last commit."
                ) from exc
            log.debug("not seeking %s, no longer assigned: %s", position, exc)

    def _call_hook(self, name: str, hook: Callable[..., object], *args: object) -> None:
        try:
            hook(*args)
        except KafkaOperationError:
            raise  # the transaction failed under the hook: poll_once aborts and reprocesses
        except StoreError:  # damaged or full: its message says what to do (state/damage.py)
            self._failed = True
            self._checkpoint.abort()
            raise
        except Exception as exc:
            self._failed = True
            self._checkpoint.abort()
            raise ProcessorHookError(
                f"{name} raised {exc!r} (args {args[1:3]}); the transaction was aborted and "
                "nothing since the last commit is committed. Fix the hook or route such "
                "records to a dead-letter topic; a restart reprocesses them."
            ) from exc

    def _consumer_error(self, error: KafkaError) -> None:
        if error.code() == KafkaError._PARTITION_EOF:
            return
        raise_if_denied(f"consuming as group {self.group_id}", error)
        if error.fatal() or error.code() == KafkaError._FATAL:
            hint = (
                " With static membership a restart within the session timeout of a crashed "
                "member is refused (instance id still in use): restart after the timeout."
                if self.options.static_membership
                else ""
            )
            raise KafkronError(
                f"the consumer failed fatally: {error}; restart the processor.{hint}"
            )
        log.warning("consumer: %s (librdkafka retries)", error)

    def _poll_timeout_s(self) -> float:
        timeout = self.options.poll_timeout_ms / 1000
        if self._next_punctuate:
            timeout = min(timeout, max(0.0, min(self._next_punctuate.values()) - time.monotonic()))
        return timeout

    def _restore_step(self) -> bool:
        if not self._owned.keys() - self._contexts.keys():
            return False
        # Ready partitions keep their punctuation on time: the restore waits (for its first
        # record only) no longer than until the next punctuation is due.
        timeout_s = self.options.poll_timeout_ms / 1000
        if self._contexts:
            timeout_s = self._poll_timeout_s()
        for partition in self._recovery.step(timeout_s):
            if partition in self._owned and partition not in self._contexts:
                self._mark_ready(partition)
        return bool(self._owned.keys() - self._contexts.keys())

    def _mark_ready(self, partition: int) -> None:
        self._contexts[partition] = ProcessorContext(
            partition, self._checkpoint, self._stores, self._producer, self._contexts
        )
        self._next_punctuate[partition] = time.monotonic()
        topics = self._owned.get(partition, set())
        self._consumer.resume([TopicPartition(t, partition) for t in topics])
        log.debug("%s partition %d ready", self.instance_id, partition)
        on_assigned = getattr(self._hooks, "on_assigned", None)
        if on_assigned is not None:
            self._call_hook("on_assigned", on_assigned, partition)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_assign(partitions)
        new = sorted({tp.partition for tp in partitions} - self._owned.keys())
        for tp in partitions:
            self._owned.setdefault(tp.partition, set()).add(tp.topic)
        waiting = [tp for tp in partitions if tp.partition not in self._contexts]
        if waiting:
            consumer.pause(waiting)
        for partition in new:
            for store in self._stores.values():
                self._recovery.start(store, partition)  # opens the store when it begins
            if not self._recovery.pending(partition):
                self._mark_ready(partition)
        log.info("%s assigned %s", self.instance_id, new)
        self._recovery.end_round()  # says so now when none of them had anything to read

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._checkpoint.release(partitions)  # their next owner reads from the commit
        try:
            if self._failed:
                self._checkpoint.abort()
            else:
                self._checkpoint.commit()  # always commit before giving partitions away
        except CheckpointAbortedError as exc:
            log.warning("commit before revoke aborted: %s", exc)
        finally:
            self._release(consumer, partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._checkpoint.release(partitions)
        try:
            self._checkpoint.abort()  # another member owns them now: never commit
        finally:
            self._release(consumer, partitions)

    def _release(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        released: list[int] = []
        for tp in partitions:
            topics = self._owned.get(tp.partition, set())
            topics.discard(tp.topic)
            if not topics and self._owned.pop(tp.partition, None) is not None:
                released.append(tp.partition)
        try:
            for partition in released:
                self._release_partition(partition)
        finally:
            consumer.incremental_unassign(partitions)
        log.info("%s released %s", self.instance_id, released)

    def _release_partition(self, partition: int) -> None:
        self._recovery.cancel(partition)
        self._next_punctuate.pop(partition, None)
        was_ready = self._contexts.pop(partition, None) is not None
        try:
            on_revoked = getattr(self._hooks, "on_revoked", None)
            if was_ready and on_revoked is not None:
                on_revoked(partition)
        finally:
            for store in self._stores.values():
                store.close_partition(partition)
