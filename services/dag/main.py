"""Entry point of one dag process: ``python -m services.dag.main`` (``kafkron dag``).

Settings come from the environment (``KAFKRON_DAG_*`` and ``KAFKRON_*``), read here only.
SIGTERM or SIGINT stops the process after a final commit.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

from services.dag.service import run
from services.dag.settings import DagSettings
from streams.clock import broker_clock
from streams.kafka.connection import broker_connection_log
from streams.logs import configure_logging


def main() -> None:
    """Run a dag processor until SIGTERM or SIGINT."""
    configure_logging("dag")
    settings = DagSettings()
    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    logging.getLogger(__name__).info(
        "dag processor %s starting in group %s", settings.instance_id, settings.group_id()
    )
    with broker_connection_log(settings.kafka), broker_clock(settings.kafka, "dag"):
        run(settings, stop)


if __name__ == "__main__":
    main()
