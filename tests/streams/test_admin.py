"""Topic creation against the real broker: idempotent, and refusing broken co-partitioning."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.cimpl import NewTopic

from streams.admin import (
    admin_client,
    durability_configs,
    ensure_topics,
    existing_partition_counts,
)
from streams.exceptions import TopicLayoutError
from streams.settings import KafkaSettings
from streams.topics import BASE_TOPICS, CLOCK, TopicNames


def test_creates_every_topic_with_its_cleanup_policy(kafka_settings: KafkaSettings) -> None:
    reports = ensure_topics(kafka_settings)
    names = TopicNames(kafka_settings.namespace)
    assert {r.name for r in reports} == {names.name(s.base_name) for s in BASE_TOPICS}
    assert all(r.created for r in reports)
    assert {r.name: r.partitions for r in reports if r.partitions != 4} == {names.name(CLOCK): 1}
    admin = admin_client(kafka_settings)
    from confluent_kafka.admin._config import ConfigResource

    resource = ConfigResource("topic", names.jobs)
    configs = admin.describe_configs([resource])[resource].result()
    assert configs["cleanup.policy"].value == "compact"
    resource = ConfigResource("topic", names.job_results)
    configs = admin.describe_configs([resource])[resource].result()
    assert configs["cleanup.policy"].value == "delete"
    assert configs["message.timestamp.type"].value == "CreateTime"
    resource = ConfigResource("topic", names.name(CLOCK))
    configs = admin.describe_configs([resource])[resource].result()
    assert configs["message.timestamp.type"].value == "LogAppendTime"


def test_second_run_creates_nothing(kafka_settings: KafkaSettings) -> None:
    ensure_topics(kafka_settings)
    again = ensure_topics(kafka_settings)
    assert not any(r.created for r in again)


def test_mismatched_partition_count_fails_and_changes_nothing(
    kafka_settings: KafkaSettings,
) -> None:
    names = TopicNames(kafka_settings.namespace)
    admin = admin_client(kafka_settings)
    admin.create_topics([NewTopic(names.retry, num_partitions=2, replication_factor=1)])[
        names.retry
    ].result()
    while names.retry not in existing_partition_counts(admin, [names.retry]):
        time.sleep(0.05)  # creation returns before the broker's metadata lists the topic
    with pytest.raises(TopicLayoutError) as error:
        ensure_topics(kafka_settings)
    assert names.retry in str(error.value) and "2 partitions" in str(error.value)
    existing = existing_partition_counts(admin, [names.name(s.base_name) for s in BASE_TOPICS])
    assert existing == {names.retry: 2}


@pytest.mark.parametrize(
    ("factor", "wanted", "configs"),
    [
        (1, None, {}),  # one broker: the broker's default stays, as before
        (2, None, {"min.insync.replicas": "1"}),
        (3, None, {"min.insync.replicas": "2"}),
        (5, None, {"min.insync.replicas": "2"}),
        (3, 3, {"min.insync.replicas": "3"}),
        (1, 1, {"min.insync.replicas": "1"}),
    ],
)
def test_durability_configs_follow_the_replication_factor(
    factor: int, wanted: int | None, configs: dict[str, str]
) -> None:
    settings = KafkaSettings(replication_factor=factor, min_insync_replicas=wanted)
    assert durability_configs(settings) == configs


def test_more_insync_replicas_than_replicas_is_refused_with_what_to_do() -> None:
    settings = KafkaSettings(replication_factor=2, min_insync_replicas=3)
    with pytest.raises(TopicLayoutError, match="KAFKRON_MIN_INSYNC_REPLICAS"):
        durability_configs(settings)
