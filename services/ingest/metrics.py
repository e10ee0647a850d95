"""The API's Prometheus metrics: its status view's health, besides the process metrics.

Served on a port of its own (``metrics_port``, process N of ``api_processes`` on
``metrics_port + N``), never on the API's: ``/metrics`` stays out of the API's routes and
its authentication. Read at scrape time from the view (``view.py``); the request path
counts nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from prometheus_client.core import Metric

from services.ingest.view import StatusView
from streams.metrics import counter_family, gauge_family

log = logging.getLogger(__name__)


class ApiCollector:
    """The metric families of one API process; ``view_of`` gives its status view once the
    app started it (None before)."""

    def __init__(self, view_of: Callable[[], StatusView | None]) -> None:
        self._view_of = view_of

    def collect(self) -> Iterator[Metric]:
        view = self._view_of()
        ready = view is not None and view.ready and view.alive
        yield gauge_family(
            "kafkron_api_view_ready",
            "1 while the status view has caught up and consumes (reads are served), else 0.",
            [],
            {(): 1.0 if ready else 0.0},
        )
        undecodable: dict[tuple[str, ...], float] = {}
        if view is not None:
            try:
                undecodable[()] = view.undecodable_count()
            except Exception as exc:  # its RocksDB is closing: left out of this scrape
                log.debug("view not read for the metrics: %s", exc)
        yield counter_family(
            "kafkron_api_view_undecodable_records_total",
            "Records the status view skipped because they did not decode, since its store "
            "was created.",
            [],
            undecodable,
        )


def app_view(state: object) -> Callable[[], StatusView | None]:
    """The status view the API's lifespan puts on ``app.state`` (None until it did)."""

    def view() -> StatusView | None:
        found = getattr(state, "view", None)
        return found if isinstance(found, StatusView) else None

    return view
