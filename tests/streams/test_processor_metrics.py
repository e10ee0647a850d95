"""What the processor runtime keeps for the metrics, on the real broker: commit durations,
restore progress, store sizes and consumer lag; and one log line per set of restores."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from streams.settings import KafkaSettings
from streams.state.changelog import changelog_topic
from streams.state.recovery import (
    RESTORED_LINE,
    RecoveryProgress,
    parse_partition_ranges,
    partition_ranges,
    restored_summary,
)
from tests.streams.processor_testkit import committed_offsets, produce_keyed, read_committed
from tests.streams.test_processor_runtime import GROUP, Hooks, io, make, running, wait_for

__all__ = ["io"]  # the fixture, used by name


@pytest.mark.kafka
def test_a_processor_counts_commits_restores_store_keys_and_lag_and_logs_one_restore_line(
    kafka_settings: KafkaSettings,
    io: tuple[str, str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    records = [(b"k%d" % (i % 40), b"%d" % i) for i in range(400)]
    produce_keyed(kafka_settings, io[0], records)
    first = make(kafka_settings, io, Hooks(io[1]))
    with running(first) as errors:
        wait_for(lambda: sum(committed_offsets(kafka_settings, GROUP, io[0]).values()) == 400)
        # Sampled every 5 s, once each partition handed over a record: all read, none behind.
        wait_for(lambda: len(first.stats.lag) == 4 and set(first.stats.lag.values()) == {0})
    assert not errors
    assert first.stats.commit_seconds.count >= 1
    assert {store for store, _ in first.stats.store_keys} == {"sums"}

    # A new instance on an empty disk restores every partition: one line, its stats.
    moved = kafka_settings.model_copy(update={"state_dir": tmp_path / "elsewhere"})
    second = make(moved, io, Hooks(io[1]))
    caplog.set_level(logging.DEBUG, logger="streams.state.recovery")
    with running(second) as errors:
        wait_for(lambda: len(second.ready_partitions()) == 4)
        wait_for(lambda: sum(second.stats.store_keys.values()) > 0)
    assert not errors
    changes = len(read_committed(kafka_settings, changelog_topic(kafka_settings, GROUP, "sums")))
    assert second.stats.restored_records == {"sums": changes}
    assert second.stats.restore_remaining == {} and second.stats.restore_queued == {}
    summaries = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.INFO and r.getMessage().startswith("restored partition")
    ]
    assert 1 <= len(summaries) <= 4  # one per set of partitions assigned together
    restored = [int(m.split("sums ")[1].split(" records")[0].replace(",", "")) for m in summaries]
    assert sum(restored) == changes
    per_store = [r for r in caplog.records if "records up to offset" in r.getMessage()]
    assert per_store and all(r.levelno == logging.DEBUG for r in per_store)


def test_partition_ranges_and_the_summary_line() -> None:
    assert partition_ranges([0, 1, 2, 3, 7, 9, 10]) == "0-3, 7, 9-10"
    assert partition_ranges([5]) == "5" and partition_ranges([]) == ""


def test_the_restored_line_parses_back_to_its_partitions() -> None:
    for partitions in ([0, 1, 2, 3, 7, 9, 10], [5], [0, 2, 4], list(range(12))):
        text = partition_ranges(partitions)
        assert parse_partition_ranges(text) == partitions
        done = [RecoveryProgress("t-changelog", p, 0, 0, 0) for p in partitions]
        line = restored_summary(done, 0.5)
        found = RESTORED_LINE.search(f"INFO streams.state.recovery {line}")
        assert found is not None and parse_partition_ranges(found.group(1)) == partitions
    assert parse_partition_ranges("") == []
    done = [
        RecoveryProgress("c-jobs", 0, 0, 10, 10, applied=1_200, store="jobs"),
        RecoveryProgress("c-wheel", 0, 0, 10, 10, applied=300, store="wheel"),
        RecoveryProgress("c-jobs", 1, 0, 0, 0, store="jobs"),
    ]
    line = restored_summary(done, 0.5)
    assert line == (
        "restored partitions 0-1 in 0.50 s: jobs 1,200 records, wheel 300 records (3,000 records/s)"
    )
    empty = [RecoveryProgress("c-jobs", 2, 0, 0, 0, store="jobs")]
    assert restored_summary(empty, 0.01) == (
        "restored partition 2 in 0.01 s: nothing to read, jobs up to date"
    )
