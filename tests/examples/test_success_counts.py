"""The downstream replay example rebuilds its state from a timestamp, on the real broker."""

from __future__ import annotations

from collections import Counter

import pytest
from confluent_kafka import Consumer, TopicPartition

from examples.success_counts import SuccessCounts, follow, rebuild, successes_only
from services.results_consumer import ResultsConsumer
from streams.topics import TopicNames

from .conftest import PipelineResults

pytestmark = pytest.mark.kafka


def expected_since(pipeline: PipelineResults, since_ms: int) -> Counter[str]:
    """SUCCEEDED executions per job among the records at or after ``since_ms``."""
    executions = {
        (r.decoded["job_id"], r.decoded["execution_id"])
        for r in pipeline.records
        if r.timestamp_ms >= since_ms and r.decoded["status"] == "SUCCEEDED"
    }
    return Counter(str(job_id) for job_id, _ in executions)


def test_rebuild_from_a_timestamp_counts_only_what_came_after(
    pipeline_results: PipelineResults,
) -> None:
    with ResultsConsumer(pipeline_results.settings, "counts-a", only=successes_only()) as c:
        counts = rebuild(c, pipeline_results.split_ms)
    assert counts.by_job == expected_since(pipeline_results, pipeline_results.split_ms)
    assert not set(counts.by_job) & set(pipeline_results.first_wave)
    assert counts.by_job["b-every-second"] >= 3
    assert counts.by_job["b-noop-0"] == counts.by_job["b-noop-1"] == 1


def test_rebuild_from_the_start_counts_every_success_once(
    pipeline_results: PipelineResults,
) -> None:
    with ResultsConsumer(pipeline_results.settings, "counts-b", only=successes_only()) as c:
        counts = rebuild(c, 0)
    assert counts.by_job == expected_since(pipeline_results, 0)
    for n in range(3):  # fail dead-letters, flaky succeeds on its second attempt
        assert f"a-fail-{n}" not in counts.by_job
        assert counts.by_job[f"a-flaky-{n}"] == counts.by_job[f"a-noop-{n}"] == 1


def test_rebuild_commits_its_group_offsets_and_a_second_replay_changes_nothing(
    pipeline_results: PipelineResults,
) -> None:
    settings = pipeline_results.settings
    with ResultsConsumer(settings, "counts-c", only=successes_only()) as c:
        counts = rebuild(c, pipeline_results.split_ms)
        ends = c.end_offsets()
        again = SuccessCounts()
        again.by_job, again._seen = Counter(counts.by_job), set(counts._seen)
        c.replay_from(pipeline_results.split_ms)
        follow(c, again, for_s=2.0)  # the same results once more: counted once
    assert again.by_job == counts.by_job
    topic = TopicNames(settings.namespace).job_results
    reader = Consumer(settings.client_config(**{"group.id": "counts-c"}))
    try:
        committed = reader.committed(
            [TopicPartition(topic, p) for p in range(settings.partitions)], timeout=30
        )
    finally:
        reader.close()
    assert {tp.partition: tp.offset for tp in committed} == ends
