"""The timer's Prometheus metrics, built at scrape time from what it counted (``fire_stats.py``).

Besides the families every processor exports (:func:`streams.metrics.runtime_families`):
fires by trigger and their lateness, the non-run outcomes it recorded, per partition the
due backlog, and the input records it dead-lettered. The wheel's size per partition is
``kafkron_store_keys{store="wheel"}``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import Metric

from services.timer.fire_stats import FireStats
from services.timer.limits import TenantLimits
from streams.metrics import (
    SECONDS_PER_MS,
    counter_family,
    dead_letter_family,
    decode_failure_family,
    gauge_family,
    histogram_family,
    runtime_families,
)
from streams.runtime_stats import RuntimeStats


class TimerCollector:
    """The metric families of one timer process."""

    def __init__(
        self,
        fires: FireStats,
        dead_letters: Counter[str],
        runtime: RuntimeStats,
        limits: TenantLimits | None = None,
    ) -> None:
        self._fires = fires
        self._dead_letters = dead_letters  # by source topic
        self._runtime = runtime
        self._limits = limits

    def collect(self) -> Iterator[Metric]:
        fires = self._fires
        lateness = dict(fires.lateness)
        yield counter_family(
            "kafkron_timer_fires_total",
            "DueEvents the timer emitted, by trigger (one emitted again after an aborted "
            "transaction counts again).",
            ["trigger"],
            {(trigger,): buckets.count for trigger, buckets in lateness.items()},
        )
        yield histogram_family(
            "kafkron_timer_fire_lateness_seconds",
            "Time from when a fire was due (its wheel entry's time; a DueEvent's fire_at) to "
            "when the timer emitted it, by trigger; a fire emitted ahead counts as 0.",
            ["trigger"],
            {(trigger,): buckets for trigger, buckets in lateness.items()},
            scale=SECONDS_PER_MS,
        )
        yield counter_family(
            "kafkron_timer_outcomes_total",
            "Fires the timer settled without a run, by status: SKIPPED (paused, overlap), "
            "MISSED (catch-up), CANCELLED.",
            ["status"],
            {(status,): n for status, n in dict(fires.outcomes).items()},
        )
        yield gauge_family(
            "kafkron_timer_due_backlog_seconds",
            "How long the oldest due wheel entry the last drain of a partition left unfired "
            "has been due (0: the partition fired everything due).",
            ["partition"],
            {(str(p),): ms * SECONDS_PER_MS for p, ms in dict(fires.backlog_ms).items()},
        )
        yield from self._limit_families()
        dead = dict(self._dead_letters)
        yield decode_failure_family(dead)
        yield dead_letter_family({"undecodable": sum(dead.values())})
        yield from runtime_families(self._runtime)

    def _limit_families(self) -> Iterator[Metric]:
        """Per tenant: fires its executions/s limit delayed, by how much, and entries held."""
        limits = self._limits
        if limits is None:
            return
        yield counter_family(
            "kafkron_timer_tenant_throttled_total",
            "Scheduled fires the tenant's executions/s limit gave a later slot than their "
            "due time, by tenant.",
            ["tenant"],
            {(tenant,): n for tenant, n in dict(limits.throttled).items()},
        )
        yield counter_family(
            "kafkron_timer_tenant_throttle_delay_seconds_total",
            "The sum of those delays (slot minus due time), by tenant.",
            ["tenant"],
            {(tenant,): ms * SECONDS_PER_MS for tenant, ms in dict(limits.delay_ms).items()},
        )
        yield counter_family(
            "kafkron_timer_tenant_held_total",
            "Scheduled entries the limit moved to a later wheel key (past the fire-ahead "
            "window) to wait there durably, by tenant.",
            ["tenant"],
            {(tenant,): n for tenant, n in dict(limits.held).items()},
        )
        in_flight = limits.in_flight
        yield gauge_family(
            "kafkron_timer_tenant_in_flight",
            "Runs emitted under the tenant's in-flight limit and not finished, over the "
            "partitions this timer counted.",
            ["tenant"],
            {(tenant,): n for tenant, n in in_flight.in_flight().items()},
        )
        yield gauge_family(
            "kafkron_timer_tenant_parked",
            "DueEvents parked by this timer until a run of the tenant finishes, less those "
            "let out (a rebalance moves some to other timers).",
            ["tenant"],
            {(tenant,): n for tenant, n in dict(in_flight.parked).items()},
        )
