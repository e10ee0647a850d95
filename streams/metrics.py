"""Prometheus metrics of every kafkron process: the ``/metrics`` server and the shared families.

Each service defines its own metrics next to its code (``services/<service>/metrics.py``) as
a collector: an object whose ``collect()`` builds metric families from the plain counters
the service keeps (:mod:`streams.runtime_stats`), at scrape time, on the server's thread.
The hot paths never touch a Prometheus object. :func:`serve_metrics` serves a process's
collectors, with the client's process metrics (``process_cpu_seconds_total``,
``process_resident_memory_bytes``, ...), on a port of its own (0: not served).

Names follow Prometheus' conventions: the ``kafkron_`` prefix, base units in the name
(``_seconds``), counters ending in ``_total``, and labels of bounded cardinality only
(topic, partition, store, outcome; never a job or execution id). Which service exported a
series is the scrape's ``job`` label, so metrics every processor has share one name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Protocol, TypeVar

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import start_http_server

from streams.runtime_stats import Buckets, RuntimeStats

log = logging.getLogger(__name__)

Labels = tuple[str, ...]

SECONDS_PER_MS = 0.001
"""The ``scale`` of a histogram, and the factor of a gauge, counted in ms and named ``_seconds``."""


class Collector(Protocol):
    """What :func:`serve_metrics` serves: metric families built when Prometheus scrapes."""

    def collect(self) -> Iterable[Metric]: ...


class FamiliesOf:
    """A collector of the families a function returns (a service's collector in one call)."""

    def __init__(self, families: Callable[[], Iterable[Metric]]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return list(self._families())


def counter_family(
    name: str, doc: str, label_names: Sequence[str], values: Mapping[Labels, float]
) -> CounterMetricFamily:
    """A counter ``name`` (ending in ``_total``) with one sample per label values."""
    return _with_samples(CounterMetricFamily(name, doc, labels=label_names), values)


def gauge_family(
    name: str, doc: str, label_names: Sequence[str], values: Mapping[Labels, float]
) -> GaugeMetricFamily:
    """A gauge ``name`` with one sample per label values."""
    return _with_samples(GaugeMetricFamily(name, doc, labels=label_names), values)


_Family = TypeVar("_Family", CounterMetricFamily, GaugeMetricFamily)


def _with_samples(family: _Family, values: Mapping[Labels, float]) -> _Family:
    for labels, value in sorted(values.items()):
        family.add_metric(labels, value)
    return family


def histogram_family(
    name: str,
    doc: str,
    label_names: Sequence[str],
    series: Mapping[Labels, Buckets],
    scale: float = 1.0,
) -> HistogramMetricFamily:
    """A histogram ``name`` with one series per label values; ``scale`` turns the buckets'
    unit into the name's (:data:`SECONDS_PER_MS` for buckets kept in ms, a ``_seconds`` name)."""
    family = HistogramMetricFamily(name, doc, labels=label_names)
    for labels, buckets in sorted(series.items()):
        counts = list(buckets.counts)  # one copy: the loop thread may be adding to it
        cumulative: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip(buckets.bounds, counts, strict=False):
            running += count
            cumulative.append((_bound_text(bound * scale), running))
        cumulative.append(("+Inf", running + counts[-1]))
        family.add_metric(labels, cumulative, buckets.total * scale)
    return family


def _bound_text(bound: float) -> str:
    """A bucket bound as Prometheus' clients write it (``0.005``, ``1.0``, ``300.0``); the
    rounding drops a scaled bound's float noise (``0.025000000000000001``)."""
    return repr(float(round(bound, 9)))


def runtime_families(stats: RuntimeStats) -> Iterator[Metric]:
    """The families every Kafka-consuming process exports: commits, restores, store sizes,
    lag."""
    yield histogram_family(
        "kafkron_commit_duration_seconds",
        "Time one Kafka transaction commit took: outputs flushed, offsets sent, committed, "
        "stores written.",
        [],
        {(): stats.commit_seconds},
    )
    yield counter_family(
        "kafkron_restore_records_total",
        "Changelog records applied by restores of partition stores, by store.",
        ["store"],
        {(store,): n for store, n in dict(stats.restored_records).items()},
    )
    remaining = stats.restore_remaining
    yield gauge_family(
        "kafkron_restore_remaining_offsets",
        "Changelog offsets a store partition still has to read before it is restored (only "
        "while it restores).",
        ["store", "partition"],
        {(store, str(partition)): n for (store, partition), n in remaining.items()},
    )
    yield gauge_family(
        "kafkron_restore_queued_partitions",
        "Store partitions waiting for their restore to begin, by store.",
        ["store"],
        {(store,): n for store, n in stats.restore_queued.items()},
    )
    yield gauge_family(
        "kafkron_store_keys",
        "Keys in a store partition: RocksDB's estimate, sampled every few seconds (the "
        "timer's 'wheel' holds its due entries; fired one-offs count until collected).",
        ["store", "partition"],
        {(store, str(partition)): n for (store, partition), n in stats.store_keys.items()},
    )
    yield gauge_family(
        "kafkron_consumer_lag_records",
        "Records of an input partition not yet consumed: its high watermark as last fetched "
        "minus the consumer's position (sampled every few seconds; a partition shows once "
        "a record of it was consumed).",
        ["topic", "partition"],
        {(topic, str(partition)): n for (topic, partition), n in stats.lag.items()},
    )


def decode_failure_family(by_topic: Mapping[str, int]) -> CounterMetricFamily:
    """``kafkron_decode_failures_total``: input records that could not be used, by topic."""
    return counter_family(
        "kafkron_decode_failures_total",
        "Input records that did not decode or broke a bound (each was dead-lettered), by "
        "source topic.",
        ["topic"],
        {(topic,): n for topic, n in dict(by_topic).items()},
    )


def dead_letter_family(by_kind: Mapping[str, int]) -> CounterMetricFamily:
    """``kafkron_dead_letters_total``: records written to ``dlq``, by kind."""
    return counter_family(
        "kafkron_dead_letters_total",
        "Dead letters written to the dlq topic, by kind: 'execution' (an execution out of "
        "attempts or not retryable), 'undecodable' (an input record that could not be used).",
        ["kind"],
        {(kind,): n for kind, n in by_kind.items()},
    )


class MetricsServer:
    """The ``/metrics`` endpoint of one process (none when its port is 0 or was taken);
    a context manager that stops it."""

    def __init__(self, registry: CollectorRegistry, port: int, host: str) -> None:
        self.registry = registry
        self._server = None
        self.port = 0  # the port served (0: none)
        if port <= 0:
            return
        try:
            self._server, _ = start_http_server(port, host, registry)
        except OSError as exc:
            log.error(
                "metrics are not served: cannot listen on %s:%d (%s). Give this process a "
                "free port with its METRICS_PORT setting, or 0 to turn metrics off",
                host, port, exc,
            )  # fmt: skip
            return
        self.port = self._server.server_port
        log.info("metrics served at http://%s:%d/metrics", host, self.port)

    def close(self) -> None:
        """Stop serving; idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def metrics_registry(collectors: Iterable[Collector]) -> CollectorRegistry:
    """A registry of ``collectors`` and the client's process and platform metrics."""
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    for collector in collectors:
        registry.register(collector)
    return registry


def serve_metrics(collectors: Iterable[Collector], host: str, port: int) -> MetricsServer:
    """Serve ``collectors`` at ``http://host:port/metrics`` on a daemon thread until the
    returned server is closed; port 0 serves nothing. A port already taken is logged, not
    raised: a process is never stopped by its metrics."""
    return MetricsServer(metrics_registry(collectors), port, host)
