"""The Kafka clients and stores of one executor process, opened in order and closed together."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Consumer

from services.executor.dedup import STORE_NAME, DedupStore, check_retention_covers_due_topics
from services.executor.settings import ExecutorSettings
from streams.admin import admin_client
from streams.kafka.consumer import (
    configure_group_session,
    create_group_consumer,
    create_restore_consumer,
)
from streams.kafka.producer import TransactionalProducer
from streams.runtime_stats import RuntimeStats
from streams.state.changelog import changelog_topic, ensure_changelog_topics
from streams.state.recovery import Recovery


@dataclass
class ExecutorClients:
    """Transactional producer, group consumer (not subscribed yet), dedup store, restorer."""

    producer: TransactionalProducer
    consumer: Consumer
    dedup: DedupStore
    recovery: Recovery

    def close(self) -> None:
        """Close the stores and clients; the consumer must already be closed."""
        try:
            self.dedup.close()
        finally:
            try:
                self.recovery.close()
            finally:
                self.producer.close()


def open_clients(
    settings: ExecutorSettings, due_topics: list[str], stats: RuntimeStats | None = None
) -> ExecutorClients:
    """Create the dedup changelog, set the group's session, init the transactional producer.
    The dedup restores report their progress to ``stats``.

    The group uses KIP-848 with the broker-side range assignor (see
    :mod:`streams.kafka.consumer`): a member gets the same partition numbers of the three
    co-partitioned due topics, so one dedup partition serves all of them.
    """
    kafka, group = settings.kafka, settings.group_id()
    ensure_changelog_topics(kafka, group, [STORE_NAME], due_topics)
    admin = admin_client(kafka)
    check_retention_covers_due_topics(admin, due_topics, settings.dedup_retention_ms)
    if settings.configure_group:
        configure_group_session(
            kafka, group, session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
        )  # fmt: skip
    changelog = changelog_topic(kafka, group, STORE_NAME)
    producer = TransactionalProducer(
        kafka, settings.transactional_id(), transaction_timeout_ms=settings.transaction_timeout_ms,
        tracked_topics=[changelog],
        config_defaults={"compression.type": settings.compression_type},
    )  # fmt: skip
    producer.init()
    instance = settings.worker_id if settings.static_membership else None
    return ExecutorClients(
        producer=producer,
        consumer=create_group_consumer(
            kafka, group, group_instance_id=instance, client_id=settings.worker_id
        ),
        dedup=DedupStore(
            group,
            kafka.state_dir,
            changelog,
            retention_ms=settings.dedup_retention_ms,
            entries_in_index=settings.dedup_entries_in_index,
        ),
        recovery=Recovery(create_restore_consumer(kafka, group), admin, stats=stats),
    )
