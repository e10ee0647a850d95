"""The Kafka ACLs each kafkron service needs: least privilege, derived from the topic layout.

Each service's rules come from what its code does with Kafka, written once here next to the
reason, from the names the code itself uses (:class:`streams.topics.TopicNames`, each
service's group id and transactional id prefix, passed in by ``kafkron acls``):

- a group consumer: Read on its group, Read on the topics it consumes; the processors and the
  executor set their group's session timeout at start (IncrementalAlterConfigs, then
  DescribeConfigs on the group) and restore stores with a consumer of group ``<group>.restore``
  that never joins it (Describe, for a coordinator lookup: the status view's consumer of the
  same kind does one; the restore consumer ran without it in a test, too);
- a transactional producer: Write on its transactional id (``<group>.<instance>``: a PREFIXED
  rule), Write on every topic it produces to; its offsets commit in the transaction (Read
  on the group, above). Write implies Describe, Read implies Describe (Kafka's rules);
- changelogs: ``<namespace>changelog.<group>.<store>``, created at start when missing
  (Create, a PREFIXED rule), read to restore and written in every transaction;
- the broker's clock (``streams/clock.py``): Write on ``<namespace>clock``;
- the executor checks that its dedup retention outlives the due topics (DescribeConfigs);
- the API's idempotent producer needs no cluster IdempotentWrite (Kafka 3.0+: Write on a
  topic suffices); its status view reads with a consumer of group
  ``kafkron-ingest-view-<random>`` (PREFIXED, Describe: its coordinator lookup) and its
  dashboard describes the services' groups and the end offsets of their topics.

kafkron's own topics (``kafkron topics create``, ``kafkron up``) are created by an admin
principal, as are ``kafkron migrate``'s and the dead-letter commands' reads and writes: those
run as a super user. Changelogs need Create only when a service creates its own: with
``precreated_changelogs`` the rules leave Create out (create them as the admin first).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from streams.topics import BASE_TOPICS, CLOCK, Priority, TopicNames

VIEW_GROUP_PREFIX = "kafkron-ingest-view-"
"""The status view's consumer groups (``services/ingest/view.py``): assigned, never joined."""


class Resource(StrEnum):
    """Kafka's ACL resource types kafkron needs (named as ``kafka-acls.sh`` names them)."""

    TOPIC = "topic"
    GROUP = "group"
    TRANSACTIONAL_ID = "transactional-id"
    CLUSTER = "cluster"


class Pattern(StrEnum):
    """How a rule's name matches: the whole name, or every name that starts with it."""

    LITERAL = "literal"
    PREFIXED = "prefixed"


class Operation(StrEnum):
    """Kafka ACL operations, spelled as ``kafka-acls.sh --operation`` takes them."""

    READ = "Read"
    WRITE = "Write"
    DESCRIBE = "Describe"
    CREATE = "Create"
    DESCRIBE_CONFIGS = "DescribeConfigs"
    ALTER_CONFIGS = "AlterConfigs"
    IDEMPOTENT_WRITE = "IdempotentWrite"


@dataclass(frozen=True)
class AclRule:
    """Operations allowed on one resource pattern, and why the service needs them."""

    resource: Resource
    name: str
    pattern: Pattern
    operations: tuple[Operation, ...]
    why: str

    def kafka_acls_line(self, principal: str, bootstrap: str) -> str:
        """The ``kafka-acls.sh --add`` command that grants this rule to ``principal``."""
        target = (
            "--cluster" if self.resource is Resource.CLUSTER else f"--{self.resource} {self.name}"
        )
        pattern = " --resource-pattern-type prefixed" if self.pattern is Pattern.PREFIXED else ""
        operations = " ".join(f"--operation {op}" for op in self.operations)
        return (
            f"kafka-acls.sh --bootstrap-server {bootstrap} --command-config admin.properties "
            f"--add --allow-principal {principal} {operations} {target}{pattern}"
        )


@dataclass(frozen=True)
class ProcessorIdentity:
    """What names one partition-owning service's Kafka resources: its consumer group and
    the prefix of its processes' transactional ids (from the service's settings)."""

    group_id: str
    transactional_id_prefix: str


SERVICES = ("timer", "executor", "dag", "api")


def _topics(names: Iterable[str], ops: Sequence[Operation], why: str) -> list[AclRule]:
    return [AclRule(Resource.TOPIC, n, Pattern.LITERAL, tuple(ops), why) for n in names]


def _processor_rules(
    names: TopicNames, who: ProcessorIdentity, precreated_changelogs: bool
) -> list[AclRule]:
    """Group, restore group, transactional ids, changelogs and the clock of one processor."""
    changelog_ops: tuple[Operation, ...] = (Operation.READ, Operation.WRITE)
    if not precreated_changelogs:
        changelog_ops = (*changelog_ops, Operation.CREATE)
    return [
        AclRule(
            Resource.GROUP, who.group_id, Pattern.LITERAL,
            (Operation.READ, Operation.ALTER_CONFIGS, Operation.DESCRIBE_CONFIGS),
            "join the group, commit offsets in transactions, set the group's session timeout",
        ),
        AclRule(
            Resource.GROUP, f"{who.group_id}.restore", Pattern.LITERAL, (Operation.DESCRIBE,),
            "the restore consumer (assigned partitions, never joins)",
        ),
        AclRule(
            Resource.TRANSACTIONAL_ID, who.transactional_id_prefix, Pattern.PREFIXED,
            (Operation.WRITE, Operation.DESCRIBE),
            "one transactional id per process: <group>.<instance id>",
        ),
        AclRule(
            Resource.TOPIC, names.changelog(who.group_id, ""), Pattern.PREFIXED, changelog_ops,
            "its stores' changelogs: restored, written in each transaction"
            + ("" if precreated_changelogs else ", created at start when missing"),
        ),
        *_topics([names.name(CLOCK)], [Operation.WRITE], "probes of the broker's clock"),
    ]  # fmt: skip


def timer_rules(
    names: TopicNames, who: ProcessorIdentity, precreated_changelogs: bool = False
) -> list[AclRule]:
    """The timer (``services/timer/service.py``): consumes jobs, job-results, retry and
    dag-releases; writes due topics, SKIPPED and other outcomes, tombstones of finished
    one-offs on jobs, dead letters."""
    return [
        *_topics([names.jobs], [Operation.READ, Operation.WRITE], "consumed; tombstones of "
                 "finished one-offs"),
        *_topics([names.job_results], [Operation.READ, Operation.WRITE], "consumed; outcomes "
                 "the timer writes (SKIPPED, CANCELLED, the dag processor's verdicts)"),
        *_topics([names.retry, names.dag_releases], [Operation.READ], "consumed"),
        *_topics([names.due(p) for p in Priority], [Operation.WRITE], "fires (DueEvents)"),
        *_topics([names.dlq], [Operation.WRITE], "dead letters of undecodable inputs"),
        *_processor_rules(names, who, precreated_changelogs),
    ]  # fmt: skip


def executor_rules(
    names: TopicNames,
    who: ProcessorIdentity,
    precreated_changelogs: bool = False,
    route_topics: Iterable[str] = (),
) -> list[AclRule]:
    """The executor (``services/executor/loop.py``, ``runs.py``): consumes the due topics
    (and reads their retention configs), writes outcomes, retries and dead letters, and
    the topics of its ``kafka`` handler routes."""
    return [
        *_topics([names.due(p) for p in Priority],
                 [Operation.READ, Operation.DESCRIBE_CONFIGS],
                 "consumed; retention checked against the dedup store's"),
        *_topics([names.job_results, names.retry, names.dlq], [Operation.WRITE],
                 "outcomes, retries, dead letters"),
        *_topics(sorted(set(route_topics)), [Operation.WRITE], "a kafka handler route"),
        *_processor_rules(names, who, precreated_changelogs),
    ]  # fmt: skip


def dag_rules(
    names: TopicNames, who: ProcessorIdentity, precreated_changelogs: bool = False
) -> list[AclRule]:
    """The dag processor (``services/dag/``): consumes jobs, job-results and dag-signals;
    writes signals between partitions, releases to the timer and dead letters."""
    return [
        *_topics([names.jobs, names.job_results], [Operation.READ], "consumed"),
        *_topics([names.dag_signals], [Operation.READ, Operation.WRITE],
                 "edges and ends sent between partitions"),
        *_topics([names.dag_releases, names.dlq], [Operation.WRITE], "releases, dead letters"),
        *_processor_rules(names, who, precreated_changelogs),
    ]  # fmt: skip


def api_rules(names: TopicNames, service_groups: Iterable[str]) -> list[AclRule]:
    """The REST API (``services/ingest/``): produces jobs (idempotent), reads jobs,
    job-results and dead letters for its status view, and for its dashboard describes
    ``service_groups`` and the end offsets of every kafkron topic."""
    read = {names.jobs, names.job_results, names.dlq}
    described = sorted(names.name(s.base_name) for s in BASE_TOPICS if s.base_name != CLOCK)
    return [
        *_topics([names.jobs], [Operation.READ, Operation.WRITE], "creates and commands; "
                 "its status view"),
        *_topics([names.job_results, names.dlq], [Operation.READ], "its status view"),
        *_topics([n for n in described if n not in read], [Operation.DESCRIBE],
                 "the dashboard's end offsets"),
        AclRule(Resource.GROUP, VIEW_GROUP_PREFIX, Pattern.PREFIXED, (Operation.DESCRIBE,),
                "the status view's consumer: assigned partitions, never joins, but it looks "
                "up its coordinator (without: an ERROR line)"),
        *(AclRule(Resource.GROUP, g, Pattern.LITERAL, (Operation.DESCRIBE,),
                  "the dashboard: members and committed offsets")
          for g in service_groups),
    ]  # fmt: skip


def without(rules: Iterable[AclRule], resource_name: str, operation: Operation) -> list[AclRule]:
    """``rules`` less one operation on one resource (a rule left with none is dropped):
    what a service runs with when an operator forgot that ACL."""
    kept = []
    for rule in rules:
        if rule.name == resource_name and operation in rule.operations:
            ops = tuple(op for op in rule.operations if op is not operation)
            if not ops:
                continue
            rule = AclRule(rule.resource, rule.name, rule.pattern, ops, rule.why)
        kept.append(rule)
    return kept
