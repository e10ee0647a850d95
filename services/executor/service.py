"""The executor service: build the handler registry from settings and run the loop.

Run it with ``python -m services.executor.main`` or ``kafkron executor``; tests and
embedders call :func:`serve` with their own registry.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from services.executor.handlers import HandlerRegistry
from services.executor.loop import ExecutorLoop
from services.executor.metrics import ExecutorCollector
from services.executor.settings import ExecutorSettings
from services.executor.stats import ExecutorStats
from streams.codec import Codec
from streams.exceptions import ConfigurationError
from streams.metrics import serve_metrics

log = logging.getLogger(__name__)


def build_registry(settings: ExecutorSettings) -> HandlerRegistry:
    """The handlers of ``settings``: specs, entry points and http routes (kafka: see serve)."""
    registry = HandlerRegistry(
        allowed_http_hosts=settings.allowed_http_hosts,
        allowed_kafka_topics=settings.allowed_kafka_topics,
    )
    registry.load_specs(settings.handler_specs)
    if settings.load_entry_points:
        registry.load_entry_points()
    for name, url in sorted(settings.http_routes.items()):
        registry.register_http(name, url)
    return registry


async def serve(
    settings: ExecutorSettings,
    stop_event: threading.Event,
    registry: HandlerRegistry | None = None,
    *,
    loop_ready: asyncio.Future[ExecutorLoop] | None = None,
) -> ExecutorStats:
    """Run one executor until ``stop_event`` is set; returns its counters.

    ``kafka_routes`` become ``kafka`` handlers producing inside the executor's transaction,
    so their message and the execution's result commit together. Its metrics are served
    on ``metrics_port`` meanwhile (0: not served).
    """
    registry = registry if registry is not None else build_registry(settings)
    loop = ExecutorLoop(settings, registry, Codec.from_directory())
    for name, topic in sorted(settings.kafka_routes.items()):
        registry.register_kafka(name, topic, loop.produce_in_transaction)
    log.info(
        "executor %s in group %s, handlers: %s",
        settings.worker_id, settings.group_id(), ", ".join(registry.names()),
    )  # fmt: skip
    if loop_ready is not None:
        loop_ready.set_result(loop)
    metrics = serve_metrics([ExecutorCollector(loop)], settings.metrics_host, settings.metrics_port)
    try:
        await loop.run(stop_event)
    finally:
        try:
            await registry.aclose()
        finally:
            metrics.close()
    return loop.stats


def run(settings: ExecutorSettings, stop_event: threading.Event) -> ExecutorStats:
    """Run one executor process until ``stop_event`` is set; raises what stopped it otherwise."""
    with asyncio.Runner(loop_factory=loop_factory(settings.event_loop)) as runner:
        return runner.run(serve(settings, stop_event))


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop factory for ``choice`` ("auto", "asyncio" or "uvloop"); None: asyncio's."""
    if choice == "asyncio":
        return None
    try:
        import uvloop  # optional: only where it is installed
    except ImportError:
        if choice == "uvloop":
            raise ConfigurationError(
                "event_loop is 'uvloop' but uvloop is not installed: install it, or set "
                "KAFKRON_EXECUTOR_EVENT_LOOP=asyncio"
            ) from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory
