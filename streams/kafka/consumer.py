"""Consumers of a partition-owning processor: the group consumer and the restore consumer.

Group protocol: KIP-848 (``group.protocol=consumer``) with the broker-side ``range`` assignor.

- ``range`` gives a member the same partition numbers of every co-partitioned input topic,
  which a processor needs (its stores are per partition number). The classic protocol's
  ``cooperative-sticky`` assignor does not: on the real broker it gave one member all of
  topic ``a`` and the other all of topic ``b``; classic ``range`` is eager (stop the world).
- KIP-848 rebalances incrementally: a joining or leaving member moves only its partitions.
- Transactions work with it: ``send_offsets_to_transaction`` with
  ``consumer_group_metadata()`` carries the member epoch, so a member that was fenced gets
  ``UNKNOWN_MEMBER_ID`` (abortable) and its partitions are reported lost.
- Failover time is the group's ``consumer.session.timeout.ms``, a broker-side group config
  (the client may not set ``session.timeout.ms`` under KIP-848); :func:`configure_group_session`
  sets it per group.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, Message
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from streams.admin import admin_client
from streams.exceptions import ConfigurationError
from streams.kafka.errors import denied_error
from streams.settings import KafkaSettings

DEFAULT_SESSION_TIMEOUT_MS = 6_000
DEFAULT_HEARTBEAT_INTERVAL_MS = 1_000
_ADMIN_TIMEOUT_S = 30.0
# Restore consumer tuning (the operator's librdkafka extras still override it):
# - librdkafka stops fetching a partition whose prefetch queue holds queued.min.messages
#   (100K) for fetch.queue.backoff.ms (default 1 s); with one partition restoring, applying
#   100K records takes well under that, so the restore would wait for fetches;
# - a fetch of partitions at their end waits fetch.wait.max.ms (default 500 ms) at the
#   broker, and the partition that starts restoring next is not fetched before it returns.
_RESTORE_CONSUMER_DEFAULTS = {"fetch.queue.backoff.ms": 20, "fetch.wait.max.ms": 10}
_APPLIED_POLL_S = 0.05


def group_consumer_config(
    settings: KafkaSettings,
    group_id: str,
    *,
    group_instance_id: str | None = None,
    client_id: str | None = None,
) -> dict[str, Any]:
    """librdkafka config of a processor's group consumer; operator extras apply first.

    ``client_id`` (the process's worker id) names the member in the group's description,
    where ``kafkron up`` looks for its own processes, unless the operator set ``client.id``.
    """
    config = settings.client_config()
    if client_id is not None and "client.id" not in settings.librdkafka:
        config["client.id"] = client_id
    config.update(
        {
            "group.id": group_id,
            "group.protocol": "consumer",
            "group.remote.assignor": "range",
            # Only committed transactions: never act on outputs a crashed writer left open.
            "isolation.level": "read_committed",
            # Offsets are committed inside the producer's transaction, never by the consumer.
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
        }
    )
    if group_instance_id is not None:
        config["group.instance.id"] = group_instance_id
    return config


def consume_ready(consumer: Consumer, batch_size: int, timeout_s: float) -> list[Message]:
    """Up to ``batch_size`` records, returned as soon as there is one; waits at most
    ``timeout_s`` for the first.

    librdkafka's ``consume(n, timeout)`` returns only once it holds ``n`` records or the
    timeout has passed (``rd_kafka_q_serve_rkmessages`` waits for more while it has fewer),
    so a record arriving at a quiet consumer waited out the whole timeout before anything
    saw it: up to the timer's 10 ms punctuation interval, the dag processor's 5 ms poll
    timeout, the executor's 100 ms, on each hop of a DAG run. Here: what is queued now;
    else one ``poll`` (returns with the first record), then whatever queued behind it.
    """
    messages = consumer.consume(batch_size, 0)
    if messages or timeout_s <= 0:
        return messages
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    if batch_size <= 1:
        return [first]
    return [first, *consumer.consume(batch_size - 1, 0)]


def create_group_consumer(
    settings: KafkaSettings,
    group_id: str,
    *,
    group_instance_id: str | None = None,
    client_id: str | None = None,
) -> Consumer:
    """A KIP-848 group consumer reading committed records only, never committing by itself."""
    return Consumer(
        group_consumer_config(
            settings, group_id, group_instance_id=group_instance_id, client_id=client_id
        )
    )


def create_restore_consumer(settings: KafkaSettings, group_id: str) -> Consumer:
    """A consumer for changelog restores: assigned partitions only, never joins or commits.

    librdkafka insists on a ``group.id``; a derived name that is never subscribed is used.
    """
    config = {**_RESTORE_CONSUMER_DEFAULTS, **settings.client_config()}
    config.update(
        {
            "group.id": f"{group_id}.restore",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
        }
    )
    return Consumer(config)


def configure_group_session(
    settings: KafkaSettings,
    group_id: str,
    *,
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
) -> None:
    """Set the group's KIP-848 session timeout and heartbeat interval on the broker.

    The session timeout bounds how long a dead member's partitions stay unprocessed. The
    broker clamps values to ``group.consumer.min/max.session.timeout.ms``; an out-of-range
    value is refused with an error naming the setting.
    """
    if heartbeat_interval_ms >= session_timeout_ms:
        raise ConfigurationError(
            f"heartbeat interval {heartbeat_interval_ms} ms must be below the session timeout "
            f"{session_timeout_ms} ms"
        )
    entries = [
        ConfigEntry(name, str(value), incremental_operation=AlterConfigOpType.SET)
        for name, value in (
            ("consumer.session.timeout.ms", session_timeout_ms),
            ("consumer.heartbeat.interval.ms", heartbeat_interval_ms),
        )
    ]
    resource = ConfigResource(ResourceType.GROUP, group_id, incremental_configs=entries)
    admin = admin_client(settings)  # keep a reference: a collected client fails its futures
    future = admin.incremental_alter_configs([resource])[resource]
    try:
        future.result(timeout=_ADMIN_TIMEOUT_S)
    except Exception as exc:
        denied = denied_error(f"setting group {group_id}'s session timeout (AlterConfigs)", exc)
        if denied is not None:
            raise denied from exc
        raise ConfigurationError(
            f"could not set consumer.session.timeout.ms={session_timeout_ms} for group "
            f"{group_id}: {exc}. Check the broker's group.consumer.min/max.session.timeout.ms "
            "and group.consumer.min/max.heartbeat.interval.ms."
        ) from exc
    _await_applied(admin, group_id, "consumer.session.timeout.ms", str(session_timeout_ms))


def _await_applied(admin: Any, group_id: str, name: str, value: str) -> None:
    """Wait until the broker describes the group's ``name`` as ``value``.

    The alter is acknowledged once it is in the metadata log; the broker's view of it lags
    (by seconds on a loaded machine), and a consumer joining before then gets the old
    session timeout.
    """
    resource = ConfigResource(ResourceType.GROUP, group_id)
    deadline_s = time.monotonic() + _ADMIN_TIMEOUT_S
    while True:
        described = admin.describe_configs([resource])[resource].result(timeout=_ADMIN_TIMEOUT_S)
        if described[name].value == value:
            return
        if time.monotonic() >= deadline_s:
            raise ConfigurationError(
                f"group {group_id}: {name} was set to {value} but the broker still describes "
                f"{described[name].value} after {_ADMIN_TIMEOUT_S:.0f} s"
            )
        time.sleep(_APPLIED_POLL_S)
