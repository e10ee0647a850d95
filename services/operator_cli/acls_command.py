"""``kafkron acls``: the Kafka ACLs each service needs (least privilege), printed as
``kafka-acls.sh`` commands or applied with the admin API (``streams/acls.py`` derives them)."""

from __future__ import annotations

import click

from services.operator_cli.config import Target
from services.operator_cli.options import target_options
from streams.acls import (
    SERVICES,
    AclRule,
    ProcessorIdentity,
    api_rules,
    dag_rules,
    executor_rules,
    timer_rules,
)
from streams.settings import KafkaSettings
from streams.topics import TopicNames

_EPILOG = (
    "The group ids and transactional ids come from each service's settings under the "
    "namespace; the executor's kafka handler routes from KAFKRON_EXECUTOR_KAFKA_ROUTES. "
    "--apply connects as the admin: KAFKRON_LIBRDKAFKA (JSON) carries its SASL settings. "
    "kafkron's topics are created by an admin ('kafkron topics create'); changelogs too with "
    "--precreated-changelogs, else each service creates its own (Create on its prefix)."
)


def service_rules(service: str, kafka: KafkaSettings, precreated_changelogs: bool) -> list[AclRule]:
    """The rules of one service of ``kafka``'s namespace, named as its settings name them."""
    from services.dag.settings import DagSettings
    from services.executor.settings import ExecutorSettings
    from services.timer.settings import TimerSettings
    from streams.processor import transactional_id

    names = TopicNames(kafka.namespace)
    if service == "timer":
        group = TimerSettings(kafka=kafka).group_id()
        who = ProcessorIdentity(group, transactional_id(group, ""))
        return timer_rules(names, who, precreated_changelogs)
    if service == "dag":
        group = DagSettings(kafka=kafka).group_id()
        who = ProcessorIdentity(group, transactional_id(group, ""))
        return dag_rules(names, who, precreated_changelogs)
    if service == "executor":
        executor = ExecutorSettings(kafka=kafka)
        prefix = executor.transactional_id().removesuffix(executor.worker_id)
        who = ProcessorIdentity(executor.group_id(), prefix)
        routes = executor.kafka_routes.values()
        return executor_rules(names, who, precreated_changelogs, routes)
    groups = [
        TimerSettings(kafka=kafka).group_id(),
        ExecutorSettings(kafka=kafka).group_id(),
        DagSettings(kafka=kafka).group_id(),
    ]
    return api_rules(names, groups)


@click.command(epilog=_EPILOG)
@click.option(
    "--service",
    type=click.Choice([*SERVICES, "all"]),
    required=True,
    help="the service whose ACLs to print or apply ('api' is the REST API)",
)
@click.option("--principal", required=True, help="the service's Kafka principal, e.g. User:timer")
@click.option("--apply", "apply_", is_flag=True, help="add them with the admin API, do not print")
@click.option(
    "--precreated-changelogs",
    is_flag=True,
    help="leave Create on changelogs out (an admin created them)",
)
@target_options(kafka=True)
def acls(
    target: Target, service: str, principal: str, apply_: bool, precreated_changelogs: bool
) -> int:
    """The Kafka ACLs a service needs to run with least privilege, as kafka-acls.sh lines."""
    if not principal.startswith("User:"):
        raise click.BadParameter("a principal is 'User:<name>'", param_hint="--principal")
    kafka = target.kafka_settings(KafkaSettings())
    services = SERVICES if service == "all" else (service,)
    rules = [r for s in services for r in service_rules(s, kafka, precreated_changelogs)]
    if apply_:
        from streams.admin import admin_client
        from streams.kafka.acl_admin import create_acls

        count = create_acls(admin_client(kafka), rules, principal)
        click.echo(f"added {count} ACL bindings for {principal} ({', '.join(services)})")
        return 0
    for rule in rules:
        click.echo(f"# {rule.why}")
        click.echo(rule.kafka_acls_line(principal, kafka.bootstrap_servers))
    return 0
