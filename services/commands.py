"""Subcommands contributed by the services (timer, dag, executor, api, dlq), registered here.

``LOCAL_SERVICES`` lists what ``kafkron up`` runs, as (name, argv after ``kafkron``), and
``READINESS`` how ``kafkron up`` tells that each is serving (``services/readiness.py``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from services.readiness import Probe, group_probe, http_probe
from streams.settings import KafkaSettings

Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

REGISTRARS: list[Registrar] = []

LOCAL_SERVICES: list[tuple[str, list[str]]] = []

READINESS: dict[str, Callable[[KafkaSettings, int], Probe]] = {}
"""Per service: its probe, given the Kafka settings and the pid of the process started."""


def run_demo(kafka: KafkaSettings) -> None:
    """Submit a few demo jobs and print their outcomes (services/demo.py)."""
    from services.demo import run_demo as demo

    demo(kafka)


def _executor_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``kafkron executor`` and ``kafkron dlq list|replay`` (services/executor/cli.py)."""
    from services.executor.cli import register

    register(sub)


def _executor_probe(kafka: KafkaSettings, pid: int) -> Probe:
    from services.executor.settings import ExecutorSettings, default_worker_id

    settings = ExecutorSettings(kafka=kafka)
    set_here = "worker_id" in settings.model_fields_set  # by KAFKRON_EXECUTOR_WORKER_ID
    member = settings.worker_id if set_here else default_worker_id(pid)
    return group_probe(kafka, settings.group_id(), member)


REGISTRARS.append(_executor_commands)
LOCAL_SERVICES.append(("executor", ["executor"]))
READINESS["executor"] = _executor_probe


def _api_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``kafkron api``: the REST API and status view (services/ingest)."""

    def _run(args: argparse.Namespace) -> int:
        from services.ingest.main import main

        main()
        return 0

    api = sub.add_parser("api", help="serve the REST API (KAFKRON_INGEST_HTTP_PORT, 8080)")
    api.set_defaults(func=_run)


def _api_probe(kafka: KafkaSettings, pid: int) -> Probe:
    from services.ingest.settings import IngestSettings

    settings = IngestSettings(kafka=kafka)
    host = "127.0.0.1" if settings.http_host in ("0.0.0.0", "") else settings.http_host
    return http_probe(f"http://{host}:{settings.http_port}/healthz")


REGISTRARS.append(_api_commands)
LOCAL_SERVICES.append(("api", ["api"]))
READINESS["api"] = _api_probe


def _timer_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``kafkron timer``: one timer process (services/timer)."""

    def _run(args: argparse.Namespace) -> int:
        from services.timer.main import main

        main()
        return 0

    timer = sub.add_parser("timer", help="run a timer (fires due jobs of its partitions)")
    timer.set_defaults(func=_run)


def _timer_probe(kafka: KafkaSettings, pid: int) -> Probe:
    from services.timer.settings import TimerSettings, default_instance_id

    settings = TimerSettings(kafka=kafka)
    set_here = "instance_id" in settings.model_fields_set  # by KAFKRON_TIMER_INSTANCE_ID
    member = settings.instance_id if set_here else default_instance_id(pid)
    return group_probe(kafka, settings.group_id(), member)


REGISTRARS.append(_timer_commands)
LOCAL_SERVICES.insert(0, ("timer", ["timer"]))
READINESS["timer"] = _timer_probe


def _dag_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``kafkron dag``: one dag processor (services/dag)."""

    def _run(args: argparse.Namespace) -> int:
        from services.dag.main import main

        main()
        return 0

    dag = sub.add_parser("dag", help="run a dag processor (releases dependents of DAG runs)")
    dag.set_defaults(func=_run)


def _dag_probe(kafka: KafkaSettings, pid: int) -> Probe:
    from services.dag.settings import DagSettings, default_instance_id

    settings = DagSettings(kafka=kafka)
    set_here = "instance_id" in settings.model_fields_set  # by KAFKRON_DAG_INSTANCE_ID
    member = settings.instance_id if set_here else default_instance_id(pid)
    return group_probe(kafka, settings.group_id(), member)


REGISTRARS.append(_dag_commands)
LOCAL_SERVICES.insert(1, ("dag", ["dag"]))
READINESS["dag"] = _dag_probe
