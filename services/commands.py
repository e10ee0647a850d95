"""Subcommands that run the services (timer, dag, executor, api), registered here.

``LOCAL_SERVICES`` lists what ``kafkron up`` runs, as (name, argv after ``kafkron``), and
``READINESS`` how ``kafkron up`` tells that each is serving (``services/readiness.py``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Protocol

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


def _service_command(name: str, summary: str, prefix: str, main_module: str) -> click.Command:
    """``kafkron <name>``: run one service process until SIGTERM or Ctrl-C (the ``main`` of
    ``main_module``, imported only then, so that the CLI starts without every service)."""

    def command() -> int:
        importlib.import_module(main_module).main()
        return 0

    epilog = f"Environment: {prefix}* (the service's settings), {_KAFKA_ENV}."
    return click.Command(name, callback=command, help=summary, epilog=epilog)


def _register_service(
    name: str,
    summary: str,
    prefix: str,
    main_module: str,
    probe: Callable[[KafkaSettings, int], Probe],
) -> None:
    """Register ``kafkron <name>``, which ``kafkron up`` runs (in the order registered) and
    waits on with ``probe``."""
    command = _service_command(name, summary, prefix, main_module)
    REGISTRARS.append(lambda group: group.add_command(command))
    LOCAL_SERVICES.append((name, [name]))
    READINESS[name] = probe


class _MemberSettings(Protocol):
    """What :func:`_member_probe` reads of a consuming service's settings."""

    @property
    def model_fields_set(self) -> set[str]: ...

    def group_id(self) -> str: ...


def _member_probe(
    kafka: KafkaSettings,
    pid: int,
    settings: _MemberSettings,
    id_field: str,
    default_id: Callable[[int], str],
) -> Probe:
    """The group probe of process ``pid``, by the member id it runs with: ``id_field`` of
    ``settings`` when its environment sets it, else the service's default for the pid."""
    set_here = id_field in settings.model_fields_set
    member = str(getattr(settings, id_field)) if set_here else default_id(pid)
    return group_probe(kafka, settings.group_id(), member)


def _timer_probe(kafka: KafkaSettings, pid: int) -> Probe:
    from services.timer.settings import TimerSettings, default_instance_id

    settings = TimerSettings(kafka=kafka)  # KAFKRON_TIMER_INSTANCE_ID
    return _member_probe(kafka, pid, settings, "instance_id", default_instance_id)


def _dag_probe(kafka: KafkaSettings, pid: int) -> Probe:
    from services.dag.settings import DagSettings, default_instance_id

    settings = DagSettings(kafka=kafka)  # KAFKRON_DAG_INSTANCE_ID
    return _member_probe(kafka, pid, settings, "instance_id", default_instance_id)


def _executor_probe(kafka: KafkaSettings, pid: int) -> Probe:
    from services.executor.settings import ExecutorSettings, default_worker_id

    settings = ExecutorSettings(kafka=kafka)  # KAFKRON_EXECUTOR_WORKER_ID
    return _member_probe(kafka, pid, settings, "worker_id", default_worker_id)


def local_api_url(kafka: KafkaSettings) -> str:
    """The URL at which this machine reaches the API that ``kafkron api`` serves."""
    from services.ingest.settings import IngestSettings

    settings = IngestSettings(kafka=kafka)
    host = "127.0.0.1" if settings.http_host in ("0.0.0.0", "") else settings.http_host
    return f"http://{host}:{settings.http_port}"


def _api_probe(kafka: KafkaSettings, pid: int) -> Probe:
    return http_probe(f"{local_api_url(kafka)}/healthz")


_register_service(
    "timer",
    "Run a timer (fires due jobs of its partitions).",
    "KAFKRON_TIMER_",
    "services.timer.main",
    _timer_probe,
)
_register_service(
    "dag",
    "Run a dag processor (releases dependents of DAG runs).",
    "KAFKRON_DAG_",
    "services.dag.main",
    _dag_probe,
)
_register_service(
    "executor",
    "Run one executor (runs due executions, publishes results, retries, dead letters).",
    "KAFKRON_EXECUTOR_",
    "services.executor.main",
    _executor_probe,
)
_register_service(
    "api",
    "Serve the REST API and its status view (KAFKRON_INGEST_HTTP_PORT, 8080).",
    "KAFKRON_INGEST_",
    "services.ingest.main",
    _api_probe,
)
