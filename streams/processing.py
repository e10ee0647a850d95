"""What a processor's user code sees: the hooks it implements and the per-partition context."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from streams.checkpoint import Checkpoint
from streams.exceptions import KafkronError
from streams.kafka.producer import TransactionalProducer
from streams.state.exceptions import StoreError
from streams.state.store import Store
from streams.state.transaction import StoreTransaction


class InputRecord(Protocol):
    """One consumed record as ``on_records`` sees it (a ``confluent_kafka.Message``)."""

    def key(self) -> bytes | None: ...

    def value(self) -> bytes | None: ...

    def offset(self) -> int | None: ...

    def timestamp(self) -> tuple[int, int]: ...


class ProcessorHooks(Protocol):
    """The user object of a :class:`streams.processor.Processor`.

    Optional extra hooks, called when defined: ``on_records(ctx, topic, partition, records)``
    instead of ``on_record``, with a run of consecutive records of one topic partition
    (:class:`InputRecord` each, in offset order), which saves a call and an offset update
    per record; ``on_assigned(partition)`` once the partition is restored and about to
    process, ``on_revoked(partition)`` after its last
    commit (or after dropping it, when lost), before its stores close, and
    ``on_restore_progress(progress: RecoveryProgress)`` after each restore step. Hooks run
    on the processor's thread, one at a time.
    """

    def on_record(
        self,
        ctx: ProcessorContext,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
    ) -> None:
        """Handle one input record (decode it, update stores, produce outputs)."""

    def on_punctuate(self, ctx: ProcessorContext, partition: int, now_ms: int) -> None:
        """Wall-clock tick, every ``punctuate_interval_ms`` per owned, restored partition."""


class ProcessorHookError(KafkronError):
    """A hook raised: the transaction was aborted and the processor stopped.

    Nothing since the last commit is committed; a restart processes those records again.
    Fix the hook, or make it route records it cannot handle (e.g. to a DLQ topic).
    """


class ProcessorContext:
    """One owned partition's view: its store transactions, transactional output, commit."""

    def __init__(
        self,
        partition: int,
        checkpoint: Checkpoint,
        stores: dict[str, Store],
        producer: TransactionalProducer,
        ready: Mapping[int, ProcessorContext] | None = None,
    ) -> None:
        self.partition = partition
        self._checkpoint = checkpoint
        self._stores = stores
        self._producer = producer
        self._ready = ready if ready is not None else {}

    def owned(self, partition: int) -> ProcessorContext | None:
        """The context of ``partition`` when this processor owns it and it is restored (this
        one's for its own partition), else None.

        Its stores and outputs belong to the same Kafka transaction as this partition's, so a
        record meant for that partition's input (e.g. re-keyed to another key) can be applied
        there directly instead of through a topic: it commits or aborts with the record that
        caused it. Ask again for each record; a partition given away is None from then on.
        """
        if partition == self.partition:
            return self
        return self._ready.get(partition)

    def store(self, name: str) -> StoreTransaction:
        """The open transaction of store ``name`` on this partition."""
        store = self._stores.get(name)
        if store is None:
            raise StoreError(f"unknown store {name!r}; the processor has {sorted(self._stores)}")
        return self._checkpoint.store_transaction(store, self.partition)

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, partition: int | None = None
    ) -> None:
        """Produce inside the Kafka transaction; default partition: this one (co-partitioning)."""
        self._producer.produce(
            topic, key, value, self.partition if partition is None else partition
        )

    def produce_keyed(self, topic: str, key: bytes, value: bytes | None) -> None:
        """Produce inside the Kafka transaction to the partition of ``key`` (the partitioner,
        ``murmur2_random`` like every kafkron producer): a record re-keyed to another job."""
        self._producer.produce(topic, key, value, None)

    def produce_many(
        self,
        records: list[tuple[str, bytes | None, bytes | None]],
        partition: int | None = None,
    ) -> None:
        """Produce ``(topic, key, value)`` records in order, like :meth:`produce` each."""
        self._producer.produce_many(records, self.partition if partition is None else partition)

    def request_commit(self, within_ms: int = 0) -> None:
        """Commit within ``within_ms`` (0: at the end of the current batch), not at the interval."""
        self._checkpoint.request_commit(within_ms)
