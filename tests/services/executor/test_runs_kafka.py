"""Runs of consumed records of one partition started at once (``RecordRunner.start``), against
the real broker: each record ends as it would alone.

The records are on the topic before the executor starts, so it reads them in one batch and
its chains take them as runs of one partition.
"""

from __future__ import annotations

import time

import pytest

from streams.codec import RecordKind
from streams.settings import KafkaSettings
from streams.topics import Priority, TopicNames

from .test_loop_kafka import Calls, committed_offsets, outcomes, start_executor
from .test_service_kit import TopicReader, due_event, finals, produce, produce_due

pytestmark = pytest.mark.kafka
DEAD_LETTER = RecordKind.DEAD_LETTER


def test_a_run_with_duplicates_a_waiting_run_and_a_poison_record_ends_each_record_once(
    topics: KafkaSettings, reader: TopicReader, calls: Calls
) -> None:
    """Duplicates within a run run once; the records after a run that waits go on without
    it; an undecodable record mid-run is dead-lettered; no commit passes the waiting run."""
    topic = TopicNames(topics.namespace).due(Priority.NORMAL)
    quick = [due_event(f"quick-{i}", handler="tests.record") for i in range(40)]
    gated = due_event("gated", handler="tests.gate")
    order = [*quick[:10], quick[3], quick[9], gated, *quick[10:20], quick[12], *quick[20:]]
    landed = produce_due(topics, order, partition=2)
    [(_, _, poison_at)] = produce(topics, [(topic, b"poison", b"not a DueEvent", 2)])
    produce_due(topics, [quick[0], quick[30]], partition=2)  # after it, in the same run
    gated_at = landed[order.index(gated)][2]
    executor = start_executor(topics, calls, consume_batch_size=5000)
    try:
        reader.wait_for(lambda r: len(finals(r.results())) == len(quick), 30, "the quick runs")
        reader.wait_for(lambda r: len(r.decoded("dlq", DEAD_LETTER)) == 1, 30, "the dead letter")
        time.sleep(0.5)  # several commit intervals: the position stays at the gated run
        assert committed_offsets(topics, [(topic, 2)])[(topic, 2)] == gated_at
        assert finals(reader.results())[gated["execution_id"]] == 0
        calls.gate.set()
        reader.wait_for(lambda r: len(finals(r.results())) == len(quick) + 1, 30, "the gated run")
        deadline = time.monotonic() + 10
        while committed_offsets(topics, [(topic, 2)])[(topic, 2)] != poison_at + 3:
            assert time.monotonic() < deadline, "the position never passed the last record"
            time.sleep(0.2)
    finally:
        stats = executor.stop()
    results = reader.results()
    for event in [*quick, gated]:
        assert outcomes(results, event["execution_id"]) == [(1, "SUCCEEDED")], event
        assert calls.count(event["execution_id"]) == 1, event
    assert stats.skipped == 5 and stats.undecodable == 1
