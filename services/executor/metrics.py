"""The executor's Prometheus metrics, built at scrape time from its loop's counters.

Besides the families every Kafka-consuming process exports
(:func:`streams.metrics.runtime_families`): finished attempts by outcome, timeouts,
handler durations, runs in flight, records held and buffered, dead letters, and the due
records that could not be decoded. The loop counts with plain ints (``stats.py``,
``RecordRunner.quick_runs``); nothing here runs on its thread.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from services.executor.loop import ExecutorLoop
from services.executor.stats import ExecutorStats
from streams.metrics import (
    SECONDS_PER_MS,
    counter_family,
    dead_letter_family,
    decode_failure_family,
    gauge_family,
    histogram_family,
    runtime_families,
)
from streams.runtime_stats import Buckets


class ExecutorCollector:
    """The metric families of one executor (its loop's counters, read when scraped)."""

    def __init__(self, loop: ExecutorLoop) -> None:
        self._loop = loop

    def collect(self) -> Iterator[Metric]:
        loop = self._loop
        in_flight, held, buffered, quick_runs = loop.live_counts()
        yield from executor_families(loop.stats, quick_runs)
        yield gauge_family(
            "kafkron_executor_runs_in_flight",
            "Runs waiting for their handler now (suspended, or on a handler thread).",
            [],
            {(): in_flight},
        )
        yield gauge_family(
            "kafkron_executor_held_records",
            "Due records read before their fire time, held until it comes.",
            [],
            {(): held},
        )
        yield gauge_family(
            "kafkron_executor_buffered_records",
            "Consumed due records waiting in the priority lanes for a run.",
            [],
            {(): buffered},
        )
        yield from runtime_families(loop.runtime)


def executor_families(stats: ExecutorStats, quick_runs: int) -> Iterator[Metric]:
    """The families of the loop's counters (``quick_runs``: handler runs timed at 0 ms)."""
    yield counter_family(
        "kafkron_executor_executions_total",
        "Attempts the executor finished, by outcome: succeeded, retry_scheduled (failed or "
        "timed out, another attempt follows), dead_letter (failed, no attempt left).",
        ["outcome"],
        {
            ("succeeded",): stats.succeeded,
            ("retry_scheduled",): stats.retries_scheduled,
            ("dead_letter",): stats.dead_lettered,
        },
    )
    yield counter_family(
        "kafkron_executor_timeouts_total",
        "Attempts whose handler did not finish within the job's timeout.",
        [],
        {(): stats.timed_out},
    )
    yield counter_family(
        "kafkron_executor_duplicates_skipped_total",
        "Due records not run: their execution had already ended, or runs here already.",
        [],
        {(): stats.skipped},
    )
    handler_ms = stats.handler_ms
    durations = Buckets(handler_ms.bounds)
    durations.counts = list(handler_ms.counts)
    durations.counts[0] += quick_runs
    durations.total = handler_ms.total
    yield histogram_family(
        "kafkron_executor_handler_duration_seconds",
        "How long handlers ran, from their call to their outcome (ms resolution; a timed "
        "out run counts until its deadline).",
        [],
        {(): durations},
        scale=SECONDS_PER_MS,
    )
    yield dead_letter_family({"execution": stats.dead_lettered, "undecodable": stats.undecodable})
    yield decode_failure_family(stats.undecodable_by_topic)
