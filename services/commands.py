"""Subcommands contributed by the services (timer, executor, api, dlq), registered here.

``LOCAL_SERVICES`` lists what ``kafkron up`` runs, as (name, argv after ``kafkron``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from streams.settings import KafkaSettings

Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

REGISTRARS: list[Registrar] = []

LOCAL_SERVICES: list[tuple[str, list[str]]] = []


def run_demo(kafka: KafkaSettings) -> None:
    """Submit a few demo jobs and print their outcomes (services/demo.py)."""
    from services.demo import run_demo as demo

    demo(kafka)


def _executor_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``kafkron executor`` and ``kafkron dlq list|replay`` (services/executor/cli.py)."""
    from services.executor.cli import register

    register(sub)


REGISTRARS.append(_executor_commands)
LOCAL_SERVICES.append(("executor", ["executor"]))


def _api_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``kafkron api``: the REST API and status view (services/ingest)."""

    def _run(args: argparse.Namespace) -> int:
        from services.ingest.main import main

        main()
        return 0

    api = sub.add_parser("api", help="serve the REST API (KAFKRON_INGEST_HTTP_PORT, 8080)")
    api.set_defaults(func=_run)


REGISTRARS.append(_api_commands)
LOCAL_SERVICES.append(("api", ["api"]))


def _timer_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``kafkron timer``: one timer process (services/timer)."""

    def _run(args: argparse.Namespace) -> int:
        from services.timer.main import main

        main()
        return 0

    timer = sub.add_parser("timer", help="run a timer (fires due jobs of its partitions)")
    timer.set_defaults(func=_run)


REGISTRARS.append(_timer_commands)
LOCAL_SERVICES.insert(0, ("timer", ["timer"]))
