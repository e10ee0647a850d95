"""Entry point of the ingest service: ``python -m services.ingest.main`` (or ``run(settings)``).

With ``api_processes`` > 1 (``KAFKRON_INGEST_API_PROCESSES``) this process supervises that
many API processes, each bound to the same port with ``SO_REUSEPORT`` so that the kernel
spreads connections over them. Each has its own producer and its own status view (its own
RocksDB next to ``view_path``, and its own read of ``jobs``, ``job-results`` and ``dlq``):
N times the view's memory, disk and consumer load, and read-your-writes holds per process
(a GET that reaches another process than the create may answer 404 for a moment). Keyed
creates stay exactly-once across processes: each reads the job's partition to its end first.

Without a tokens file (``KAFKRON_INGEST_TOKENS_FILE``) the API refuses to listen on anything
but loopback, and says at start that it is open to every local user
(:mod:`services.ingest.access`).
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import signal
import socket
import sys
import threading
from pathlib import Path
from types import FrameType

import uvicorn
from fastapi import FastAPI

from services.ingest.access import BearerAuth, bind_refusal
from services.ingest.api import create_app
from services.ingest.create_lane import serve_creates_first
from services.ingest.metrics import ApiCollector, app_view
from services.ingest.settings import IngestSettings
from streams.exceptions import ConfigurationError
from streams.logs import configure_logging
from streams.metrics import serve_metrics

log = logging.getLogger(__name__)


def run(settings: IngestSettings) -> None:
    """Serve the REST API with uvicorn until interrupted (in ``api_processes`` processes)."""
    check_access(settings)
    if settings.api_processes == 1:
        sys.setswitchinterval(settings.gil_switch_interval_s)
        _serve(settings, settings.metrics_port)
    else:
        _supervise(settings)


def check_access(settings: IngestSettings) -> None:
    """Refuse to listen beyond loopback without tokens; say how callers are checked."""
    refusal = bind_refusal(settings.http_host, settings.tokens_file is not None)
    if refusal is not None:
        raise ConfigurationError(refusal)
    if settings.tokens_file is None:
        log.warning(
            "no API tokens (KAFKRON_INGEST_TOKENS_FILE unset): every caller is the admin, so "
            "the API listens on %s only; set a tokens file to serve other machines",
            settings.http_host,
        )
    else:
        log.info("API tokens from %s: each caller sees its tenant's jobs", settings.tokens_file)


def _serve(
    settings: IngestSettings, metrics_port: int, sockets: list[socket.socket] | None = None
) -> None:
    """Serve one API process, and its metrics on ``metrics_port`` (0: none) meanwhile."""
    app = create_app(settings)
    # What start-up allocated (modules, FastAPI's routes and models, schemas) lives as long
    # as the process: out of the collector's full scans, which took ~16 ms each (a request
    # waits for them), which the view's applying of results triggers now and then.
    gc.collect()
    gc.freeze()
    with serve_metrics([ApiCollector(app_view(app.state))], settings.metrics_host, metrics_port):
        uvicorn.Server(_config(settings, app)).run(sockets=sockets)


def _config(settings: IngestSettings, app: FastAPI | None = None) -> uvicorn.Config:
    app = app if app is not None else create_app(settings)
    # Creates skip FastAPI's stack (serve_creates_first), so the token check goes in front.
    front = BearerAuth(serve_creates_first(app, settings), app.state.tokens, lambda: app.routes)
    return uvicorn.Config(
        front,
        host=settings.http_host,
        port=settings.http_port,
        loop=settings.event_loop,
        http=settings.http_implementation,
        log_level="info",
        log_config=None,  # uvicorn logs through kafkron's handler (streams/logs.py)
        access_log=False,
    )


def view_path_of_process(view_path: Path, index: int) -> Path:
    """Process 0 keeps the single-process view; the others get ``<view_path>-<index>``."""
    return view_path if index == 0 else view_path.with_name(f"{view_path.name}-{index}")


def _serve_process(settings_json: str, index: int) -> None:
    """One of several API processes: its own view, a port shared with SO_REUSEPORT."""
    configure_logging(f"api-{index}")
    settings = IngestSettings.model_validate_json(settings_json)
    settings = settings.model_copy(
        update={"view_dir": view_path_of_process(settings.view_path, index)}
    )
    sock = socket.socket(socket.AF_INET6 if ":" in settings.http_host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((settings.http_host, settings.http_port))
    sys.setswitchinterval(settings.gil_switch_interval_s)
    metrics_port = settings.metrics_port + index if settings.metrics_port else 0
    _serve(settings, metrics_port, [sock])


def _supervise(settings: IngestSettings) -> None:
    """Start the API processes; stop them all when asked to, or when one of them exits."""
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ConfigurationError("api_processes > 1 needs SO_REUSEPORT (Linux, BSD); set it to 1")
    if settings.http_port == 0:
        raise ConfigurationError("api_processes > 1 needs a fixed http_port, not 0")
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(
            target=_serve_process,
            args=(settings.model_dump_json(), index),
            name=f"kafkron-api-{index}",
        )
        for index in range(settings.api_processes)
    ]
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for process in processes:
            process.start()
        while not stop.wait(0.5):
            exited = [p for p in processes if not p.is_alive()]
            if exited:
                log.error("API process %s exited (%s); stopping the others", exited[0].name,
                          exited[0].exitcode)  # fmt: skip
                break
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join(15)
            if process.is_alive():
                process.kill()
                process.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main() -> None:
    """Read settings from the environment (only here) and serve."""
    configure_logging("api")
    run(IngestSettings())


if __name__ == "__main__":
    main()
