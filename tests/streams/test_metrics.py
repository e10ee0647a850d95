"""The shared metrics plumbing (streams/metrics.py, streams/runtime_stats.py): histogram
buckets kept as plain ints, the families built from them, and the /metrics server."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from infra.broker import free_port
from streams.metrics import (
    FamiliesOf,
    histogram_family,
    metrics_registry,
    runtime_families,
    serve_metrics,
)
from streams.runtime_stats import Buckets, RuntimeStats


def samples(families: list[Metric]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample by (name, sorted labels)."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


@given(st.lists(st.floats(min_value=0, max_value=1_000, allow_nan=False), max_size=200))
def test_a_histogram_family_counts_each_value_in_every_bucket_at_or_above_it(
    values: list[float],
) -> None:
    bounds = (0.5, 1.0, 10.0, 100.0)
    buckets = Buckets(bounds)
    for value in values:
        buckets.observe(value)
    family = histogram_family("kafkron_test_seconds", "test", [], {(): buckets})
    got = samples([family])
    for bound in bounds:
        expected = sum(v <= bound for v in values)
        assert got[("kafkron_test_seconds_bucket", (("le", repr(bound)),))] == expected
    assert got[("kafkron_test_seconds_bucket", (("le", "+Inf"),))] == len(values)
    assert got[("kafkron_test_seconds_count", ())] == len(values) == buckets.count
    assert got[("kafkron_test_seconds_sum", ())] == pytest.approx(sum(values))


def test_buckets_kept_in_ms_are_exposed_in_seconds() -> None:
    buckets = Buckets((5, 25, 1_000))
    for value_ms in (0, 5, 6, 2_000):
        buckets.observe(value_ms)
    got = samples([histogram_family("kafkron_x_seconds", "x", [], {(): buckets}, scale=0.001)])
    assert got[("kafkron_x_seconds_bucket", (("le", "0.005"),))] == 2
    assert got[("kafkron_x_seconds_bucket", (("le", "0.025"),))] == 3
    assert got[("kafkron_x_seconds_bucket", (("le", "1.0"),))] == 3
    assert got[("kafkron_x_seconds_sum", ())] == pytest.approx(2.011)


def test_buckets_refuse_bounds_out_of_order() -> None:
    with pytest.raises(ValueError, match="ascend"):
        Buckets((1.0, 0.5))


def test_runtime_families_show_commits_restores_store_sizes_and_lag() -> None:
    stats = RuntimeStats()
    stats.commit_seconds.observe(0.003)
    stats.restored_records["wheel"] += 120
    stats.restore_remaining = {("wheel", 3): 40}
    stats.restore_queued = {"jobs": 2}
    stats.store_keys = {("wheel", 3): 1_000}
    stats.lag = {("k.jobs", 1): 7}
    got = samples(list(runtime_families(stats)))
    assert got[("kafkron_commit_duration_seconds_count", ())] == 1
    assert got[("kafkron_commit_duration_seconds_bucket", (("le", "0.0025"),))] == 0
    assert got[("kafkron_commit_duration_seconds_bucket", (("le", "0.005"),))] == 1
    assert got[("kafkron_restore_records_total", (("store", "wheel"),))] == 120
    labels = (("partition", "3"), ("store", "wheel"))
    assert got[("kafkron_restore_remaining_offsets", labels)] == 40
    assert got[("kafkron_restore_queued_partitions", (("store", "jobs"),))] == 2
    assert got[("kafkron_store_keys", labels)] == 1_000
    assert got[("kafkron_consumer_lag_records", (("partition", "1"), ("topic", "k.jobs")))] == 7


def scrape(port: int) -> list[Metric]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return list(text_string_to_metric_families(answer.read().decode()))


@pytest.fixture
def stats() -> RuntimeStats:
    return RuntimeStats()


def families(stats: RuntimeStats) -> Iterator[Metric]:
    return runtime_families(stats)


def test_the_server_shows_what_the_counters_hold_at_each_scrape(stats: RuntimeStats) -> None:
    port = free_port()
    with serve_metrics([FamiliesOf(lambda: families(stats))], "127.0.0.1", port) as server:
        assert server.port == port
        stats.commit_seconds.observe(0.02)
        first = samples(scrape(port))
        stats.commit_seconds.observe(0.02)
        second = samples(scrape(port))
    assert first[("kafkron_commit_duration_seconds_count", ())] == 1
    assert second[("kafkron_commit_duration_seconds_count", ())] == 2
    assert ("process_cpu_seconds_total", ()) in second  # the client's process metrics


def test_a_port_in_use_is_logged_and_the_process_goes_on(
    stats: RuntimeStats, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with serve_metrics([FamiliesOf(lambda: families(stats))], "127.0.0.1", port) as server:
            assert server.port == 0
    assert "metrics are not served" in caplog.text and "METRICS_PORT" in caplog.text


def test_port_zero_serves_nothing(stats: RuntimeStats) -> None:
    with serve_metrics([FamiliesOf(lambda: families(stats))], "127.0.0.1", 0) as server:
        assert server.port == 0


def test_a_registry_holds_the_collectors_and_the_process_metrics(stats: RuntimeStats) -> None:
    registry = metrics_registry([FamiliesOf(lambda: families(stats))])
    names = {family.name for family in registry.collect()}
    assert {"kafkron_commit_duration_seconds", "process_cpu_seconds"} <= names
