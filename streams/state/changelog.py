"""Changelog topics: compacted, one per store, with the partition count of the input topics."""

from __future__ import annotations

import time
from collections.abc import Iterable

from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from streams.admin import admin_client, durability_configs, existing_partition_counts
from streams.exceptions import TopicLayoutError
from streams.kafka.errors import denied_error
from streams.settings import KafkaSettings
from streams.topics import TopicNames

_TIMEOUT_S = 30.0


def changelog_topic(settings: KafkaSettings, group: str, store: str) -> str:
    """The changelog topic name of one store of one processor group."""
    return TopicNames(settings.namespace).changelog(group, store)


def ensure_changelog_topics(
    settings: KafkaSettings, group: str, stores: Iterable[str], input_topics: Iterable[str]
) -> int:
    """Create the missing changelog topics and return the shared partition count.

    Inputs must be co-partitioned (one partition count), and so must existing changelogs:
    store partition N restores from changelog partition N.
    """
    admin = admin_client(settings)
    inputs = list(input_topics)
    counts = existing_partition_counts(admin, inputs)
    missing_inputs = sorted(set(inputs) - set(counts))
    if missing_inputs or len(set(counts.values())) != 1:
        raise TopicLayoutError(
            f"input topics must exist with one partition count; missing {missing_inputs}, "
            f"found {counts}. Create them (ensure_topics) or fix the processor's topic list. "
            "With ACLs, a topic this principal may not Describe (Read implies it) is not "
            "listed: add its ACL (kafkron acls)."
        )
    partitions = next(iter(counts.values()))
    names = [changelog_topic(settings, group, store) for store in stores]
    existing = existing_partition_counts(admin, names)
    wrong = {name: count for name, count in existing.items() if count != partitions}
    if wrong:
        raise TopicLayoutError(
            f"changelog topics {wrong} do not have the inputs' {partitions} partitions; "
            "delete them (the stores restore from the new ones) or repartition the inputs"
        )
    new = [
        NewTopic(
            name,
            num_partitions=partitions,
            replication_factor=settings.replication_factor,
            config={"cleanup.policy": "compact", **durability_configs(settings)},
        )
        for name in names
        if name not in existing
    ]
    if new:
        for name, future in admin.create_topics(new, request_timeout=_TIMEOUT_S).items():
            try:
                future.result()
            except Exception as exc:
                denied = denied_error(f"creating changelog {name} (Create)", exc)
                if denied is not None:
                    raise denied from exc
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise TopicLayoutError(f"could not create changelog {name}: {exc}") from exc
    deadline = time.monotonic() + _TIMEOUT_S
    while len(existing_partition_counts(admin, names)) < len(names):
        if time.monotonic() > deadline:
            raise TopicLayoutError(f"changelog topics {names} did not appear in metadata")
        time.sleep(0.05)
    return partitions
