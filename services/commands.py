"""Subcommands that run the services (timer, dag, executor, api), registered here.

``LOCAL_SERVICES`` lists what ``kafkron up`` runs, as (name, argv after ``kafkron``), and
``READINESS`` how ``kafkron up`` tells that each is serving (``services/readiness.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import click

from services.readiness import Probe, group_probe, http_probe
from streams.settings import KafkaSettings

Registrar = Callable[[click.Group], None]

REGISTRARS: list[Registrar] = []

LOCAL_SERVICES: list[tuple[str, list[str]]] = []

READINESS: dict[str, Callable[[KafkaSettings, int], Probe]] = {}
"""Per service: its probe, given the Kafka settings and the pid of the process started."""


def run_demo(kafka: KafkaSettings) -> None:
    """Submit a few demo jobs and print their outcomes (services/demo.py)."""
    from services.demo import run_demo as demo

    demo(kafka)


_KAFKA_ENV = (
    "KAFKRON_BOOTSTRAP_SERVERS, KAFKRON_NAMESPACE, KAFKRON_PARTITIONS, KAFKRON_LIBRDKAFKA (JSON), "
    "KAFKRON_STATE_DIR"
)


def _service_command(
    name: str, summary: str, prefix: str, run: Callable[[], None]
) -> click.Command:
    """``kafkron <name>``: run one service process until SIGTERM or Ctrl-C."""

    def command() -> int:
        run()
        return 0

    epilog = f"Environment: {prefix}* (the service's settings), {_KAFKA_ENV}."
    return click.Command(name, callback=command, help=summary, epilog=epilog)


def _executor_commands(group: click.Group) -> None:
    """``kafkron executor``: one executor (services/executor)."""

    def run() -> None:
        from services.executor.main import main

        main()

    summary = "Run one executor (runs due executions, publishes results, retries, dead letters)."
    group.add_command(_service_command("executor", summary, "KAFKRON_EXECUTOR_", run))


def _executor_probe(kafka: KafkaSettings, pid: int) -> Probe:
    from services.executor.settings import ExecutorSettings, default_worker_id

    settings = ExecutorSettings(kafka=kafka)
    set_here = "worker_id" in settings.model_fields_set  # by KAFKRON_EXECUTOR_WORKER_ID
    member = settings.worker_id if set_here else default_worker_id(pid)
    return group_probe(kafka, settings.group_id(), member)


REGISTRARS.append(_executor_commands)
LOCAL_SERVICES.append(("executor", ["executor"]))
READINESS["executor"] = _executor_probe


def _api_commands(group: click.Group) -> None:
    """``kafkron api``: the REST API and status view (services/ingest)."""

    def run() -> None:
        from services.ingest.main import main

        main()

    summary = "Serve the REST API and its status view (KAFKRON_INGEST_HTTP_PORT, 8080)."
    group.add_command(_service_command("api", summary, "KAFKRON_INGEST_", run))


def local_api_url(kafka: KafkaSettings) -> str:
    """The URL at which this machine reaches the API that ``kafkron api`` serves."""
    from services.ingest.settings import IngestSettings

    settings = IngestSettings(kafka=kafka)
    host = "127.0.0.1" if settings.http_host in ("0.0.0.0", "") else settings.http_host
    return f"http://{host}:{settings.http_port}"


def _api_probe(kafka: KafkaSettings, pid: int) -> Probe:
    return http_probe(f"{local_api_url(kafka)}/healthz")


REGISTRARS.append(_api_commands)
LOCAL_SERVICES.append(("api", ["api"]))
READINESS["api"] = _api_probe


def _timer_commands(group: click.Group) -> None:
    """``kafkron timer``: one timer process (services/timer)."""

    def run() -> None:
        from services.timer.main import main

        main()

    summary = "Run a timer (fires due jobs of its partitions)."
    group.add_command(_service_command("timer", summary, "KAFKRON_TIMER_", run))


def _timer_probe(kafka: KafkaSettings, pid: int) -> Probe:
    from services.timer.settings import TimerSettings, default_instance_id

    settings = TimerSettings(kafka=kafka)
    set_here = "instance_id" in settings.model_fields_set  # by KAFKRON_TIMER_INSTANCE_ID
    member = settings.instance_id if set_here else default_instance_id(pid)
    return group_probe(kafka, settings.group_id(), member)


REGISTRARS.append(_timer_commands)
LOCAL_SERVICES.insert(0, ("timer", ["timer"]))
READINESS["timer"] = _timer_probe


def _dag_commands(group: click.Group) -> None:
    """``kafkron dag``: one dag processor (services/dag)."""

    def run() -> None:
        from services.dag.main import main

        main()

    summary = "Run a dag processor (releases dependents of DAG runs)."
    group.add_command(_service_command("dag", summary, "KAFKRON_DAG_", run))


def _dag_probe(kafka: KafkaSettings, pid: int) -> Probe:
    from services.dag.settings import DagSettings, default_instance_id

    settings = DagSettings(kafka=kafka)
    set_here = "instance_id" in settings.model_fields_set  # by KAFKRON_DAG_INSTANCE_ID
    member = settings.instance_id if set_here else default_instance_id(pid)
    return group_probe(kafka, settings.group_id(), member)


REGISTRARS.append(_dag_commands)
LOCAL_SERVICES.insert(1, ("dag", ["dag"]))
READINESS["dag"] = _dag_probe
