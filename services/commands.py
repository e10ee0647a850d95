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
    """Submit a few demo jobs and print their outcomes (filled in as services land)."""
    print("[kafkron] demo: no services to run jobs yet")
