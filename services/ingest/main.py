"""Entry point of the ingest service: ``python -m services.ingest.main`` (or ``run(settings)``)."""

from __future__ import annotations

import logging

import uvicorn

from services.ingest.api import create_app
from services.ingest.settings import IngestSettings


def run(settings: IngestSettings) -> None:
    """Serve the REST API with uvicorn until interrupted."""
    uvicorn.run(
        create_app(settings),
        host=settings.http_host,
        port=settings.http_port,
        log_level="info",
        access_log=False,
    )


def main() -> None:
    """Read settings from the environment (only here) and serve."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    run(IngestSettings())


if __name__ == "__main__":
    main()
