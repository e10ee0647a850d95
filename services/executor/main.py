"""Entry point of one executor process: ``python -m services.executor.main``.

Settings come from the environment (``KAFKRON_EXECUTOR_*`` and ``KAFKRON_*``), read here only.
SIGTERM or SIGINT stops it gracefully: no new runs, runs in progress get ``revoke_grace_s``
to finish, a final commit, then it leaves the group.
"""

from __future__ import annotations

import gc
import signal
import threading
from types import FrameType

from services.executor.service import run
from services.executor.settings import ExecutorSettings
from streams.clock import broker_clock
from streams.kafka.connection import broker_connection_log
from streams.logs import configure_logging


def main() -> None:
    """Run an executor until SIGTERM or SIGINT."""
    configure_logging("executor")
    settings = ExecutorSettings()
    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    # What start-up allocated (modules, classes, schemas) lives as long as the process:
    # keeping it out of the collector's full scans saves ~1 us of CPU per execution.
    gc.collect()
    gc.freeze()
    with broker_connection_log(settings.kafka), broker_clock(settings.kafka, "executor"):
        run(settings, stop)


if __name__ == "__main__":
    main()
