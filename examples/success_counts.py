"""A downstream service that keeps its own state from ``job-results``: successes per job.

It owns its state and rebuilds it by replay: at start it reads every result recorded at or
after ``--since`` (``offsets_for_times``), up to the end offsets it saw when it started, then
follows new results and commits its group's offsets as it goes. Counting is idempotent: a
SUCCEEDED is counted once per ``execution_id``, so results read twice (after a crash before a
commit, or a replay that overlaps what was counted) change nothing.

    python -m examples.success_counts --since 2026-12-01T00:00:00Z [--follow-s 60]

Environment: ``KAFKRON_BOOTSTRAP_SERVERS``, ``KAFKRON_NAMESPACE``, ``KAFKRON_LIBRDKAFKA``, as
for kafkron itself.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from datetime import datetime

from services.results_consumer import ReceivedResult, ResultFilter, ResultsConsumer
from streams.records import ExecutionStatus
from streams.settings import KafkaSettings


class SuccessCounts:
    """Per-job counts of SUCCEEDED executions, each execution counted once."""

    def __init__(self) -> None:
        self.by_job: Counter[str] = Counter()
        self._seen: set[str] = set()

    def apply(self, item: ReceivedResult) -> None:
        """Count ``item`` if it is the first SUCCEEDED of its execution seen."""
        execution_id = item.result.execution_id
        if execution_id not in self._seen:
            self._seen.add(execution_id)
            self.by_job[item.result.job_id] += 1


def rebuild(consumer: ResultsConsumer, since_ms: int, deadline_s: float = 300.0) -> SuccessCounts:
    """Replay every SUCCEEDED recorded at or after ``since_ms``, up to the end seen now."""
    counts = SuccessCounts()
    consumer.replay_from(since_ms)
    ends = consumer.end_offsets()
    deadline = time.monotonic() + deadline_s
    while not consumer.caught_up(ends):
        if time.monotonic() > deadline:
            raise TimeoutError(f"replay did not reach the end offsets {ends} in {deadline_s} s")
        for item in consumer.poll(timeout_s=0.5):
            counts.apply(item)
    consumer.commit()
    return counts


def follow(consumer: ResultsConsumer, counts: SuccessCounts, for_s: float) -> None:
    """Apply new results for ``for_s`` seconds, committing after each batch is applied."""
    until = time.monotonic() + for_s
    while time.monotonic() < until:
        for item in consumer.poll(timeout_s=0.5):
            counts.apply(item)
        consumer.commit()


def successes_only() -> ResultFilter:
    """The filter this service reads with: SUCCEEDED results of any job."""
    return ResultFilter(statuses=frozenset({ExecutionStatus.SUCCEEDED}))


def main(argv: list[str] | None = None) -> None:
    """Rebuild from ``--since``, follow for ``--follow-s``, print the counts as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--since", required=True, help="ISO-8601 time, e.g. 2026-12-01T00:00Z")
    parser.add_argument("--follow-s", type=float, default=0.0)
    parser.add_argument("--group", default="examples.success-counts")
    args = parser.parse_args(argv)
    since_ms = int(datetime.fromisoformat(args.since).timestamp() * 1000)
    with ResultsConsumer(KafkaSettings(), args.group, only=successes_only()) as consumer:
        counts = rebuild(consumer, since_ms)
        follow(consumer, counts, args.follow_s)
    print(json.dumps(dict(sorted(counts.by_job.items())), indent=1))


if __name__ == "__main__":
    main()
