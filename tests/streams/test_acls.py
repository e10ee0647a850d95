"""The ACL rules of each service (streams/acls.py) against the names the services' own code
uses, their kafka-acls.sh and admin API forms, and the errors a refusal turns into."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclOperation,
    ResourcePatternType,
    ResourceType,
)

from services.cli import root
from services.dag.service import build_processor as build_dag
from services.dag.settings import DagSettings
from services.executor.settings import ExecutorSettings
from services.operator_cli.acls_command import service_rules
from services.timer.service import build_processor as build_timer
from services.timer.settings import TimerSettings
from streams.acls import AclRule, Operation, Pattern, Resource, without
from streams.kafka.acl_admin import acl_bindings
from streams.kafka.errors import (
    ErrorKind,
    KafkaAccessError,
    KafkaOperationError,
    classify,
    denied_error,
    raise_if_denied,
)
from streams.processor import transactional_id
from streams.settings import KafkaSettings
from streams.topics import Priority, TopicNames

_IMPLIED = {Operation.DESCRIBE: (Operation.READ, Operation.WRITE)}
"""Kafka's implication: Read or Write on a resource allows Describe too."""


def grants(rules: list[AclRule], resource: Resource, name: str, op: Operation) -> bool:
    """Whether ``rules`` allow ``op`` on the resource ``name``, as Kafka matches them."""
    ops = (op, *_IMPLIED.get(op, ()))
    return any(
        rule.resource is resource
        and (rule.name == name if rule.pattern is Pattern.LITERAL else name.startswith(rule.name))
        and any(o in rule.operations for o in ops)
        for rule in rules
    )


@pytest.fixture
def kafka(tmp_path: Path) -> KafkaSettings:
    return KafkaSettings(namespace="team-a.", state_dir=tmp_path)


def test_processors_may_read_their_inputs_and_use_their_own_ids(kafka: KafkaSettings) -> None:
    for service, processor in (
        ("timer", build_timer(TimerSettings(kafka=kafka, instance_id="timer-7"))),
        ("dag", build_dag(DagSettings(kafka=kafka, instance_id="dag-7"))),
    ):
        rules = service_rules(service, kafka, precreated_changelogs=False)
        for topic in processor.input_topics:
            assert grants(rules, Resource.TOPIC, topic, Operation.READ), (service, topic)
        group = processor.group_id
        assert grants(rules, Resource.GROUP, group, Operation.READ)
        assert grants(rules, Resource.GROUP, group, Operation.ALTER_CONFIGS)
        assert grants(rules, Resource.GROUP, f"{group}.restore", Operation.DESCRIBE)
        txn = transactional_id(group, processor.instance_id)
        assert grants(rules, Resource.TRANSACTIONAL_ID, txn, Operation.WRITE)
        for store in processor._stores.values():
            for op in (Operation.READ, Operation.WRITE, Operation.CREATE):
                assert grants(rules, Resource.TOPIC, store.changelog_topic, op), store
        assert grants(rules, Resource.TOPIC, "team-a.clock", Operation.WRITE)
        # Another namespace's resources are not covered.
        assert not grants(
            rules, Resource.GROUP, group.replace("team-a.", "team-b."), Operation.READ
        )


def test_the_executor_reads_due_topics_and_writes_outcomes(kafka: KafkaSettings) -> None:
    names = TopicNames(kafka.namespace)
    rules = service_rules("executor", kafka, precreated_changelogs=True)
    settings = ExecutorSettings(kafka=kafka, worker_id="executor-3")
    for lane in Priority:
        assert grants(rules, Resource.TOPIC, names.due(lane), Operation.READ)
        assert grants(rules, Resource.TOPIC, names.due(lane), Operation.DESCRIBE_CONFIGS)
        assert not grants(rules, Resource.TOPIC, names.due(lane), Operation.WRITE)
    for topic in (names.job_results, names.retry, names.dlq):
        assert grants(rules, Resource.TOPIC, topic, Operation.WRITE)
    assert not grants(rules, Resource.TOPIC, names.jobs, Operation.READ)
    assert grants(rules, Resource.TRANSACTIONAL_ID, settings.transactional_id(), Operation.WRITE)
    changelog = names.changelog(settings.group_id(), "dedup")
    assert grants(rules, Resource.TOPIC, changelog, Operation.WRITE)
    assert not grants(rules, Resource.TOPIC, changelog, Operation.CREATE)  # pre-created


def test_executor_kafka_routes_get_write(
    kafka: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKRON_EXECUTOR_KAFKA_ROUTES", '{"notify": "orders.events"}')
    rules = service_rules("executor", kafka, precreated_changelogs=False)
    assert grants(rules, Resource.TOPIC, "orders.events", Operation.WRITE)


def test_the_api_writes_jobs_only_and_describes_the_groups(kafka: KafkaSettings) -> None:
    names = TopicNames(kafka.namespace)
    rules = service_rules("api", kafka, precreated_changelogs=False)
    assert grants(rules, Resource.TOPIC, names.jobs, Operation.WRITE)
    assert not grants(rules, Resource.TOPIC, names.job_results, Operation.WRITE)
    assert grants(rules, Resource.TOPIC, names.job_results, Operation.READ)
    assert grants(rules, Resource.TOPIC, names.due(Priority.LOW), Operation.DESCRIBE)
    assert grants(rules, Resource.GROUP, "kafkron-ingest-view-1a2b3c4d", Operation.DESCRIBE)
    for group in ("team-a.timer", "team-a.executor", "team-a.dag"):
        assert grants(rules, Resource.GROUP, group, Operation.DESCRIBE)
        assert not grants(rules, Resource.GROUP, group, Operation.READ)
    assert not any(r.resource is Resource.TRANSACTIONAL_ID for r in rules)


def test_without_drops_one_operation() -> None:
    rule = AclRule(Resource.TOPIC, "t", Pattern.LITERAL, (Operation.READ, Operation.WRITE), "")
    assert without([rule], "t", Operation.WRITE)[0].operations == (Operation.READ,)
    assert without([rule], "u", Operation.WRITE) == [rule]
    single = AclRule(Resource.TOPIC, "t", Pattern.LITERAL, (Operation.WRITE,), "")
    assert without([single], "t", Operation.WRITE) == []


def test_kafka_acls_lines_and_bindings() -> None:
    rule = AclRule(
        Resource.TRANSACTIONAL_ID, "ns.timer.", Pattern.PREFIXED,
        (Operation.WRITE, Operation.DESCRIBE), "why",
    )  # fmt: skip
    line = rule.kafka_acls_line("User:timer", "b:9092")
    assert line.endswith(
        "--add --allow-principal User:timer --operation Write --operation Describe "
        "--transactional-id ns.timer. --resource-pattern-type prefixed"
    )
    bindings = acl_bindings([rule], "User:timer")
    assert [(b.restype, b.name, b.resource_pattern_type, b.operation) for b in bindings] == [
        (ResourceType.TRANSACTIONAL_ID, "ns.timer.", ResourcePatternType.PREFIXED, op)
        for op in (AclOperation.WRITE, AclOperation.DESCRIBE)
    ]


def test_cli_prints_every_service() -> None:
    result = CliRunner().invoke(
        root,
        ["acls", "--service", "all", "--principal", "User:k", "--bootstrap", "b:1",
         "--namespace", "x."],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("kafka-acls.sh")]
    assert "--group x.timer" in result.output and "--group x.executor" in result.output
    assert "--group x.dag" in result.output and "--topic x.jobs" in result.output
    assert all("--allow-principal User:k" in line for line in lines)
    refused = CliRunner().invoke(root, ["acls", "--service", "timer", "--principal", "k"])
    assert refused.exit_code != 0


@pytest.mark.parametrize(
    ("code", "named"),
    [
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, "Write on each topic it produces to"),
        (KafkaError.GROUP_AUTHORIZATION_FAILED, "Read on its consumer group"),
        (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "Write and Describe on the PREFIXED"),
    ],
)
def test_refusals_stop_with_the_acl_to_add(code: int, named: str) -> None:
    error = KafkaError(code, "Broker: refused", txn_requires_abort=True)
    assert classify(error) is ErrorKind.DENIED
    op = KafkaOperationError("commit_transaction", error)
    assert op.denied and not op.retryable and not op.requires_abort
    assert named in str(op) and "kafkron acls --service" in str(op)
    assert isinstance(op.access_error(), KafkaAccessError)
    with pytest.raises(KafkaAccessError, match=named):
        raise_if_denied("consuming", error)
    assert isinstance(denied_error("admin", KafkaException(error)), KafkaAccessError)


def test_other_errors_are_no_refusals() -> None:
    error = KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION, "moved", retriable=True)
    assert classify(error) is ErrorKind.RETRIABLE
    raise_if_denied("consuming", error)  # no raise
    assert denied_error("admin", KafkaException(error)) is None
    assert denied_error("admin", ValueError("x")) is None
