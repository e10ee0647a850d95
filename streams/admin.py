"""Create kafkron's topics idempotently and refuse layouts that break co-partitioning."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from streams.exceptions import TopicLayoutError
from streams.settings import KafkaSettings
from streams.topics import BASE_TOPICS, TopicNames, TopicSpec

_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class TopicReport:
    """What ``ensure_topics`` found and did for one topic."""

    name: str
    partitions: int
    created: bool


def durability_configs(settings: KafkaSettings) -> dict[str, str]:
    """Topic configs for the replication of ``settings``: ``min.insync.replicas`` when there
    are replicas (none for one: the broker's default stays), so that an ``acks=all`` write
    is acknowledged only once that many brokers have it."""
    factor, wanted = settings.replication_factor, settings.min_insync_replicas
    if wanted is not None and wanted > factor:
        raise TopicLayoutError(
            f"min.insync.replicas {wanted} exceeds the replication factor {factor}: every "
            "acks=all write would fail. Lower KAFKRON_MIN_INSYNC_REPLICAS or raise "
            "KAFKRON_REPLICATION_FACTOR"
        )
    if factor == 1 and wanted is None:
        return {}
    return {"min.insync.replicas": str(wanted or (2 if factor >= 3 else 1))}


def admin_client(settings: KafkaSettings) -> AdminClient:
    """An AdminClient with the operator's librdkafka settings."""
    return AdminClient(settings.client_config())


def existing_partition_counts(admin: AdminClient, names: Iterable[str]) -> dict[str, int]:
    """Partition count of each named topic that exists."""
    metadata = admin.list_topics(timeout=_TIMEOUT_S)
    return {
        name: len(metadata.topics[name].partitions)
        for name in names
        if name in metadata.topics and metadata.topics[name].error is None
    }


def _wait_visible(admin: AdminClient, names: Iterable[str]) -> None:
    """Wait until the broker's metadata lists every topic (creation returns before that)."""
    wanted = set(names)
    deadline = time.monotonic() + _TIMEOUT_S
    while time.monotonic() < deadline:
        if set(existing_partition_counts(admin, wanted)) == wanted:
            return
        time.sleep(0.05)
    raise TopicLayoutError(f"created topics did not appear in metadata within {_TIMEOUT_S}s")


def _check_co_partitioning(
    existing: dict[str, int],
    specs: dict[str, TopicSpec],
    wanted: int,
    outcome: str = "Nothing was changed.",
) -> None:
    for name, count in sorted(existing.items()):
        if specs[name].co_partitioned and count != wanted:
            peers = [f"{n}={c}" for n, c in sorted(existing.items()) if n != name]
            raise TopicLayoutError(
                f"topic {name} has {count} partitions but kafkron is configured for {wanted} "
                f"(existing peers: {', '.join(peers) or 'none'}); co-partitioned topics must "
                f"share one count. Set KAFKRON_PARTITIONS to match, or recreate the topics. "
                f"{outcome}"
            )


def ensure_topics(settings: KafkaSettings, extra: Iterable[TopicSpec] = ()) -> list[TopicReport]:
    """Create every kafkron topic (plus ``extra``) that is missing, all or nothing.

    Co-partitioned topics must share one partition count, because a job's records must land
    on the same partition number on every topic. When an existing topic differs, nothing is
    created and the error names the topics and counts.
    """
    names = TopicNames(settings.namespace)
    specs = {names.name(spec.base_name): spec for spec in (*BASE_TOPICS, *extra)}
    durability = durability_configs(settings)
    admin = admin_client(settings)
    existing = existing_partition_counts(admin, specs)
    wanted = settings.partitions
    _check_co_partitioning(existing, specs, settings.partitions)
    missing = [
        NewTopic(name, num_partitions=spec.partitions or wanted,
                 replication_factor=settings.replication_factor,
                 config={**spec.configs(), **durability})
        for name, spec in specs.items() if name not in existing
    ]  # fmt: skip
    created: set[str] = set()
    if missing:
        for name, future in admin.create_topics(missing, request_timeout=_TIMEOUT_S).items():
            try:
                future.result()
                created.add(name)
            except KafkaException as exc:
                if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                    raise TopicLayoutError(f"could not create topic {name}: {exc}") from exc
        _wait_visible(admin, specs)
        # A topic created concurrently by someone else ("already exists") may differ.
        _check_co_partitioning(
            existing_partition_counts(admin, specs),
            specs,
            wanted,
            "Another client created it concurrently; the missing topics were created.",
        )
    return [
        TopicReport(name, existing.get(name, specs[name].partitions or wanted), name in created)
        for name in specs
    ]
