"""The dag processor's Prometheus metrics, built at scrape time from its counters (``scope.py``).

Besides the families every processor exports (:func:`streams.metrics.runtime_families`):
verdicts given on dependents' runs, upstream ends by path (local or topic), and the input
records it dead-lettered.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from services.dag.scope import DagEnv
from streams.metrics import (
    counter_family,
    dead_letter_family,
    decode_failure_family,
    runtime_families,
)
from streams.runtime_stats import RuntimeStats


class DagCollector:
    """The metric families of one dag process."""

    def __init__(self, env: DagEnv, runtime: RuntimeStats) -> None:
        self._env = env
        self._runtime = runtime

    def collect(self) -> Iterator[Metric]:
        yield counter_family(
            "kafkron_dag_verdicts_total",
            "Verdicts on dependents' runs, by verdict: RUN (released), UPSTREAM_FAILED, MISSED.",
            ["verdict"],
            {(verdict,): n for verdict, n in dict(self._env.verdicts).items()},
        )
        yield counter_family(
            "kafkron_dag_signals_total",
            "Upstream ends sent to dependents, by path: local (counted in the same "
            "transaction, a partition this process owns) or topic (through dag-signals).",
            ["path"],
            {(path,): n for path, n in dict(self._env.signals).items()},
        )
        dead = dict(self._env.dead_letters)
        yield decode_failure_family(dead)
        yield dead_letter_family({"undecodable": sum(dead.values())})
        yield from runtime_families(self._runtime)
