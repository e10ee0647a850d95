"""``kafkron broker | topics | up``: the local broker, kafkron's topics and the whole local
cluster (broker, topics, every service, and the profile other commands find it by)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from services.operator_cli.config import Target
from services.operator_cli.options import target_options
from services.operator_cli.profile import PROFILE_ENV, profile_path

if TYPE_CHECKING:
    from infra.cluster import LocalCluster

_BROKER_ENV = (
    "Environment: KAFKRON_BROKER_HOME (.state/broker), KAFKRON_BROKER_PORT (9092, 0 = free; "
    "node N of a cluster on PORT + N - 1), KAFKRON_BROKER_COUNT (1: how many nodes 'start' "
    "runs), KAFKRON_BROKER_HEAP_MB (per node), KAFKRON_BROKER_JVM_OPTIONS, "
    "KAFKRON_BROKER_START_TIMEOUT_S, KAFKRON_BROKER_LIBS_DIR."
)


@click.command(epilog=_BROKER_ENV)
@click.argument("action", type=click.Choice(["fetch", "start", "stop", "status"]))
@click.option(
    "--brokers",
    type=click.IntRange(1, 9),
    default=None,
    help="start: how many KRaft nodes (each broker and controller); 3 gives topics 3 "
    "replicas and min.insync.replicas 2 [default: KAFKRON_BROKER_COUNT, 1]",
)
def broker(action: str, brokers: int | None) -> int:
    """The local Kafka: one broker, or a cluster of several on this machine (--brokers 3):
    fetch its jars, start, stop or check every node."""
    from infra.cluster import LocalCluster
    from infra.fetch import fetch_jars
    from infra.settings import BrokerSettings

    settings = BrokerSettings()
    if brokers is not None:
        settings = settings.model_copy(update={"count": brokers})
    local = LocalCluster(settings)
    if action == "fetch":
        click.echo(f"Kafka jars in {fetch_jars(settings)}")
    elif action == "start":
        state = local.start()
        noun = "broker" if len(state.nodes) == 1 else f"{len(state.nodes)} brokers"
        pids = ", ".join(str(pid) for pid in state.pids)
        click.echo(f"{noun} ready on {state.bootstrap} (pid {pids}, home {local.home})")
    elif action == "stop":
        click.echo("broker stopped" if local.stop() else "no broker was running")
    else:
        return _status(local)
    return 0


def _status(local: LocalCluster) -> int:
    """One line per node that should run (and the active controller of a cluster); 1 when
    one is down or silent."""
    nodes = local.running_nodes()
    if not nodes:
        click.echo(f"no broker running from {local.home}")
        return 1
    ok = True
    for node, state in nodes:
        if state is None:
            ok = False
            click.echo(f"broker node {node.node_id}: NOT running (kafkron broker start)")
            continue
        answers = local.answers(state)
        ok = ok and answers
        verdict = "ready" if answers else "NOT answering"
        click.echo(f"broker node {node.node_id} pid {state.pid} on {state.bootstrap}: {verdict}")
    if len(nodes) > 1:
        click.echo(f"active controller: node {local.active_controller()}")
    return 0 if ok else 1


@click.command(epilog="Environment: KAFKRON_PARTITIONS (12), KAFKRON_REPLICATION_FACTOR (1).")
@click.argument("action", type=click.Choice(["create"]))
@target_options(kafka=True)
def topics(target: Target, action: str) -> int:
    """kafkron's topics: create every topic of the namespace (refuses mismatched layouts)."""
    from streams.admin import ensure_topics
    from streams.settings import KafkaSettings

    for report in ensure_topics(target.kafka_settings(KafkaSettings())):
        verb = "created" if report.created else "exists"
        click.echo(f"{verb:8} {report.name} ({report.partitions} partitions)")
    return 0


@click.command(
    epilog="Environment: every KAFKRON_* setting of the broker and the services (passed on "
    "to them), e.g. KAFKRON_NAMESPACE, KAFKRON_PARTITIONS, KAFKRON_STATE_DIR, "
    "KAFKRON_INGEST_HTTP_PORT, KAFKRON_BROKER_COUNT (3: a 3-node cluster, topics with 3 "
    "replicas); XDG_CONFIG_HOME places the profile it writes."
)
@click.option("--demo", is_flag=True, help="submit demo jobs and show them run")
@click.option("--check", is_flag=True, help="start everything, report, then stop")
@click.option(
    "--profile",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar=PROFILE_ENV,
    show_envvar=True,
    help="where to write the profile (default $XDG_CONFIG_HOME/kafkron/profile.json, else "
    "~/.config/kafkron/profile.json); one another running 'up' wrote is left alone",
)
def up(demo: bool, check: bool, profile: Path | None) -> int:
    """Broker + topics + every service, until Ctrl-C; writes the local profile once all
    serve (the API URL, bootstrap servers and namespace other commands use)."""
    from infra.settings import BrokerSettings
    from services.local_cluster import run_local_cluster
    from streams.settings import KafkaSettings

    return run_local_cluster(
        BrokerSettings(),
        KafkaSettings(),
        demo=demo,
        check=check,
        profile=profile if profile is not None else profile_path(os.environ),
    )


COMMANDS = [broker, topics, up]
