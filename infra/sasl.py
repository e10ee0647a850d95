"""A local broker with SASL/SCRAM and ACLs (``BrokerSettings.extra_properties``): clients
log in on a SASL_PLAINTEXT listener and the StandardAuthorizer allows only what an ACL grants.

The PLAINTEXT listener stays for the broker's own traffic (inter-broker, and the controller
listener beside it): its principal, ``User:ANONYMOUS``, is a super user, as the node's
requests to itself need ClusterAction before any ACL exists. So that listener is trusted
and local (127.0.0.1); services and the test's clients go through the SASL one. For tests
and development only: a production cluster authenticates its inter-broker listener too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

MECHANISM = "SCRAM-SHA-512"
_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


def sasl_acl_properties(
    port: int, controller_port: int, sasl_port: int, super_users: Iterable[str]
) -> dict[str, str]:
    """Broker properties adding a SASL_PLAINTEXT listener on ``sasl_port`` (SCRAM-SHA-512)
    and the StandardAuthorizer with no access without an ACL; ``super_users`` are names."""
    listeners = {
        "PLAINTEXT": f"127.0.0.1:{port}",
        "CONTROLLER": f"127.0.0.1:{controller_port}",
        "SASL_PLAINTEXT": f"127.0.0.1:{sasl_port}",
    }
    supers = ["User:ANONYMOUS", *(f"User:{name}" for name in super_users)]
    return {
        "listeners": ",".join(f"{name}://{addr}" for name, addr in listeners.items()),
        "advertised.listeners": f"PLAINTEXT://{listeners['PLAINTEXT']},"
        f"SASL_PLAINTEXT://{listeners['SASL_PLAINTEXT']}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": MECHANISM,
        f"listener.name.sasl_plaintext.{MECHANISM.lower()}.sasl.jaas.config": _SCRAM_LOGIN,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": ";".join(supers),
    }


def scram_format_args(users: Mapping[str, str]) -> list[str]:
    """``kafka-storage format`` arguments that create each user's SCRAM credentials."""
    args: list[str] = []
    for name, password in sorted(users.items()):
        args += ["--add-scram", f"{MECHANISM}=[name={name},password={password}]"]
    return args


def sasl_client_config(username: str, password: str) -> dict[str, str]:
    """librdkafka settings of a client logging in as ``username`` (``KAFKRON_LIBRDKAFKA``)."""
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": MECHANISM,
        "sasl.username": username,
        "sasl.password": password,
    }
