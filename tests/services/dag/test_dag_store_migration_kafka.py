"""From the five-store layout to the one store, on the real broker (``store_migration.py``).

The old layout's changelogs are made from a running processor's real state: it learns a
DAG's edge, stops, and its one changelog is split by key space into the five old topics (the
one deleted, its local store wiped). A processor then refuses to start, naming them; the
migration copies them back and deletes them; the processor restarted on the copy releases
the dependent when the root succeeds. The edge is known only from the copied state: the
group committed its ``jobs`` offsets past the dependent's record before it stopped.
"""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from bench.dag_runs import DagProcess, dag_jobs
from bench.herd import produce_jobs
from services.dag import keys
from services.dag.scope import KEY_SPACES, STORE
from services.dag.settings import DagSettings
from services.dag.store_migration import (
    OldDagStoresError,
    migrate_old_changelogs,
    old_changelogs,
    refuse_old_changelogs,
)
from streams.admin import admin_client, existing_partition_counts
from streams.identity import execution_id
from streams.migration.jobs_topic import end_offsets, read_range
from streams.settings import KafkaSettings
from streams.state.changelog import changelog_topic
from tests.services.dag.test_dag_kafka import Cluster
from tests.services.executor.test_service_kit import now_ms

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

NODES = {"root": (), "child": ("root",)}


def _live(topics: KafkaSettings, topic: str) -> dict[tuple[int, bytes], bytes]:
    """(partition, key) -> the last value of every live key of ``topic``."""
    live: dict[tuple[int, bytes], bytes] = {}
    for partition, _, key, value in read_range(topics, topic, {}, end_offsets(topics, topic)):
        assert key is not None
        if value is None:
            live.pop((partition, key), None)
        else:
            live[(partition, key)] = value
    return live


def _wait_for_key(topics: KafkaSettings, topic: str, key: bytes, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while key not in {k for _, k in _live(topics, topic)}:
        assert time.monotonic() < deadline, f"{key!r} not in {topic} within {timeout_s} s"
        time.sleep(0.5)


def _write_old_layout(topics: KafkaSettings, group: str) -> dict[str, int]:
    """Split the one store's changelog into the five old ones; delete it. Returns the live
    keys each old changelog holds."""
    admin = admin_client(topics)
    new = changelog_topic(topics, group, STORE)
    partitions = len(end_offsets(topics, new))
    live = _live(topics, new)
    old = {prefix: changelog_topic(topics, group, name) for name, prefix in KEY_SPACES.items()}
    created = [
        NewTopic(name, num_partitions=partitions, config={"cleanup.policy": "compact"})
        for name in old.values()
    ]
    for future in admin.create_topics(created, request_timeout=30).values():
        future.result()
    producer = Producer(topics.client_config(**{"acks": "all"}))
    counts = dict.fromkeys(old.values(), 0)
    for (partition, key), value in live.items():
        topic = old[key[:1]]
        # A stale value and a deleted key first: the copy keeps only what is live.
        producer.produce(topic, b"stale", key[1:], partition=partition)
        producer.produce(topic, b"gone", b"deleted-" + key[1:], partition=partition)
        producer.produce(topic, None, b"deleted-" + key[1:], partition=partition)
        producer.produce(topic, value, key[1:], partition=partition)
        counts[topic] += 1
    assert producer.flush(30) == 0
    for future in admin.delete_topics([new], request_timeout=30).values():
        future.result()
    while existing_partition_counts(admin, [new]):
        time.sleep(0.1)
    return counts


def test_the_old_layouts_state_is_refused_then_migrated_and_runs_continue(
    topics: KafkaSettings, tmp_path: Path
) -> None:
    cluster = Cluster(topics, tmp_path)
    try:
        reader = cluster.start()
        settings = DagSettings(kafka=topics)
        group = settings.group_id()
        prefix = f"mig-{uuid.uuid4().hex[:6]}-"
        roots = {"run_at_ms": now_ms() + 3_000}
        produce_jobs(topics, dag_jobs(prefix, roots, "tests.effect", now_ms(), NODES))
        edge = KEY_SPACES["edges"] + keys.edge_key(prefix + "root", prefix + "child")
        _wait_for_key(topics, changelog_topic(topics, group, STORE), edge, 30)
        cluster.dag.stop(timeout_s=30)
        counts = _write_old_layout(topics, group)
        shutil.rmtree(topics.state_dir / cluster.dag.instance_id)

        with pytest.raises(OldDagStoresError) as refused:
            refuse_old_changelogs(settings)
        assert all(name in str(refused.value) for name in counts)
        assert "store_migration" in str(refused.value)
        cluster.dag = DagProcess(topics, "dag-0", tmp_path)
        refusing = cluster.dag.start().process
        assert refusing is not None and refusing.wait(timeout=60) != 0  # refused to start
        assert "OldDagStoresError" in cluster.dag.log()

        report = migrate_old_changelogs(settings)
        assert report.copied == counts and sorted(report.deleted) == sorted(counts)
        assert old_changelogs(settings) == []
        cluster.dag = DagProcess(topics, "dag-0", tmp_path).start()
        child = execution_id(prefix + "child", roots["run_at_ms"])
        reader.wait(lambda outcomes: outcomes.final(child) is not None, 60, "the child final")
        assert reader.outcomes.final(child) == "SUCCEEDED"
        assert reader.outcomes.statuses(child).count("SUCCEEDED") == 1
    finally:
        cluster.stop()
