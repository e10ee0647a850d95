"""Partitions restore one at a time and each processes as soon as its own restore is done.

Real broker, real RocksDB: every partition's changelog holds a few thousand records written
before the processor starts (its state dir is empty), the restore reads them in small
batches, and the input holds records of every partition. The hooks check, each time a
partition processes, that its store already holds everything its changelog had (its own
restore finished) and note whether another partition was still restoring at that moment.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

import pytest
from confluent_kafka import Producer

from streams.processing import InputRecord, ProcessorContext
from streams.processor import Processor, ProcessorOptions
from streams.settings import KafkaSettings
from streams.state.changelog import changelog_topic, ensure_changelog_topics
from tests.streams.processor_testkit import committed_offsets, create_topics, produce_keyed
from tests.streams.test_processor_runtime import running, wait_for

pytestmark = pytest.mark.kafka
GROUP = "staged"
STORE = "sums"
RESTORED_KEYS = 3_000  # per partition, in the changelog before the processor starts
INPUTS = 200


def restored_key(partition: int, i: int) -> bytes:
    return b"r%d-%05d" % (partition, i)


class Observer:
    """Counts inputs into the store; records what was true whenever a partition processed."""

    def __init__(self) -> None:
        self.processor: Processor | None = None
        self.first_seen: dict[int, int] = {}  # partition -> restored keys seen on first use
        self.overlaps: set[tuple[int, int]] = set()  # (processing, still restoring)
        self.violations: list[str] = []

    def observe(self, ctx: ProcessorContext, partition: int) -> None:
        assert self.processor is not None
        recovery = self.processor._recovery
        if recovery.pending(partition):
            self.violations.append(f"partition {partition} processed while restoring")
        if partition not in self.first_seen:
            prefix = b"r%d-" % partition
            items = ctx.store(STORE).iter_range(prefix, prefix + b"\xff", RESTORED_KEYS + 1)
            self.first_seen[partition] = len(items)
        for other in range(4):
            if other != partition and recovery.pending(other):
                self.overlaps.add((partition, other))

    def on_records(
        self, ctx: ProcessorContext, topic: str, partition: int, records: Sequence[InputRecord]
    ) -> None:
        self.observe(ctx, partition)
        sums = ctx.store(STORE)
        for record in records:
            key = record.key() or b""
            sums.set(key, str(int(sums.get(key) or b"0") + 1).encode())

    def on_record(self, *args: object) -> None:
        raise AssertionError("on_records is defined: the runtime must call it")

    def on_punctuate(self, ctx: ProcessorContext, partition: int, now_ms: int) -> None:
        self.observe(ctx, partition)


def fill_changelog(settings: KafkaSettings, topic: str) -> None:
    producer = Producer(settings.client_config(**{"linger.ms": 20}))
    for partition in range(settings.partitions):
        for i in range(RESTORED_KEYS):
            producer.produce(topic, key=restored_key(partition, i), value=b"1", partition=partition)
        producer.poll(0)
    assert producer.flush(30) == 0


def test_a_partition_processes_while_later_ones_still_restore(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    inputs = kafka_settings.namespace + "in"
    create_topics(kafka_settings, [inputs])
    ensure_changelog_topics(kafka_settings, GROUP, [STORE], [inputs])
    fill_changelog(kafka_settings, changelog_topic(kafka_settings, GROUP, STORE))
    produce_keyed(kafka_settings, inputs, [(b"in-%d" % i, b"1") for i in range(INPUTS)])
    hooks = Observer()
    options = ProcessorOptions(
        commit_interval_ms=200,
        restore_batch_size=100,
        max_restoring_partitions=1,
        small_restore_offsets=0,  # strictly one at a time, however small
    )
    processor = Processor(kafka_settings, GROUP, "one", [inputs], [STORE], hooks, options)
    hooks.processor = processor
    with running(processor) as errors:
        wait_for(
            lambda: sum(committed_offsets(kafka_settings, GROUP, inputs).values()) == INPUTS,
            timeout_s=90,
        )
    assert not errors and not hooks.violations
    # Each partition's first use saw its whole changelog: its restore had finished.
    assert hooks.first_seen == {p: RESTORED_KEYS for p in range(4)}
    # And partitions processed while others were still restoring (not all at the end).
    assert hooks.overlaps, "no partition processed before every restore had finished"
    finished = processor.recovery_progress()
    assert sorted(p.partition for p in finished) == [0, 1, 2, 3]
    assert all(p.applied == RESTORED_KEYS for p in finished)
    # One at a time: each restore began after the previous one finished.
    ordered = sorted(finished, key=lambda p: p.started_at)
    for before, after in pairwise(ordered):
        assert before.finished_at is not None and after.started_at >= before.finished_at
