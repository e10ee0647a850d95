"""Apply or remove the ACL rules of :mod:`streams.acls` with an AdminClient (CreateAcls,
DeleteAcls); the admin's principal must be allowed to (a super user, or Alter on the cluster)."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from streams.acls import AclRule, Operation, Pattern, Resource
from streams.exceptions import KafkronError

_TIMEOUT_S = 30.0
CLUSTER_NAME = "kafka-cluster"
"""The one name of Kafka's cluster resource."""

_RESOURCE = {
    Resource.TOPIC: ResourceType.TOPIC,
    Resource.GROUP: ResourceType.GROUP,
    Resource.TRANSACTIONAL_ID: ResourceType.TRANSACTIONAL_ID,
    Resource.CLUSTER: ResourceType.BROKER,
}
_PATTERN = {
    Pattern.LITERAL: ResourcePatternType.LITERAL,
    Pattern.PREFIXED: ResourcePatternType.PREFIXED,
}
_OPERATION = {
    Operation.READ: AclOperation.READ,
    Operation.WRITE: AclOperation.WRITE,
    Operation.DESCRIBE: AclOperation.DESCRIBE,
    Operation.CREATE: AclOperation.CREATE,
    Operation.DESCRIBE_CONFIGS: AclOperation.DESCRIBE_CONFIGS,
    Operation.ALTER_CONFIGS: AclOperation.ALTER_CONFIGS,
    Operation.IDEMPOTENT_WRITE: AclOperation.IDEMPOTENT_WRITE,
}


def acl_bindings(rules: Iterable[AclRule], principal: str, host: str = "*") -> list[AclBinding]:
    """One ALLOW binding per rule and operation for ``principal`` (``User:name``)."""
    return [
        AclBinding(
            _RESOURCE[rule.resource],
            CLUSTER_NAME if rule.resource is Resource.CLUSTER else rule.name,
            _PATTERN[rule.pattern],
            principal,
            host,
            _OPERATION[op],
            AclPermissionType.ALLOW,
        )
        for rule in rules
        for op in rule.operations
    ]


def create_acls(admin: AdminClient, rules: Iterable[AclRule], principal: str) -> int:
    """Grant ``rules`` to ``principal`` (existing bindings stay as they are); how many."""
    bindings = acl_bindings(rules, principal)
    if not bindings:
        return 0
    for binding, future in admin.create_acls(bindings, request_timeout=_TIMEOUT_S).items():
        try:
            future.result()
        except Exception as exc:
            raise KafkronError(
                f"could not add the ACL {binding}: {exc}. The admin client's principal must "
                "be a super user or have Alter on the cluster (KAFKRON_LIBRDKAFKA sets its "
                "SASL user)"
            ) from exc
    return len(bindings)


def delete_acls(admin: AdminClient, rules: Iterable[AclRule], principal: str) -> int:
    """Remove exactly the bindings of ``rules`` for ``principal``; how many were found."""
    filters = [
        AclBindingFilter(
            b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
            b.permission_type,
        )
        for b in acl_bindings(rules, principal)
    ]  # fmt: skip
    if not filters:
        return 0
    deleted = 0
    for future in admin.delete_acls(filters, request_timeout=_TIMEOUT_S).values():
        deleted += len(future.result())
    return deleted
