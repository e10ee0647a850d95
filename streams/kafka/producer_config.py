"""The librdkafka configuration of the transactional producer (:mod:`streams.kafka.producer`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streams.settings import KafkaSettings

DEFAULT_TRANSACTION_TIMEOUT_MS = 10_000
_PRODUCER_DEFAULTS = {
    "metadata.recovery.strategy": "none",
    "reconnect.backoff.max.ms": 1000,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 1000,
    "topic.metadata.refresh.fast.interval.ms": 100,
}


def producer_config(
    settings: KafkaSettings,
    transactional_id: str,
    transaction_timeout_ms: int,
    defaults: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """librdkafka config of a transactional producer.

    ``defaults`` (a service's tuning, e.g. compression) apply first, then the operator's
    extras, then the settings exactly-once needs.

    No re-bootstrap (``metadata.recovery.strategy``, the operator may set it back): after
    every connection dropped for a while, librdkafka's re-bootstrap decommissions the brokers
    it knew, and its group coordinator requests keep waiting for a decommissioned one
    (librdkafka #5511), so each ``send_offsets_to_transaction`` after a 15 s network cut got
    stuck. This producer bootstraps afresh by being replaced when it cannot reach the broker.

    Reconnects at least once a second (``reconnect.backoff.max.ms``, librdkafka's default
    10 s; the operator may set it back): after a 15 s cut, a timer's or dag processor's abort
    waited for the transaction coordinator's connection up to 10 s after the network was
    back, and the process took its partitions back 8.6-11.3 s after the heal (1.6-2.5 s
    with 1 s).

    Retries a refused request after 10 ms (``retry.backoff.ms``, librdkafka's default 100):
    a transaction whose first record comes 2-7 ms after the previous commit returned finds
    the coordinator still completing that one; it answers AddOffsetsToTxn
    ``CONCURRENT_TRANSACTIONS`` and librdkafka retried it 100 ms later. In ``bench.dag`` 1-3 of
    the timer's ~150 transactions a run stalled so, and the one carrying a dag burst's
    released DueEvents set the paced p99 (upstream SUCCEEDED -> dependent DueEvent, both
    committed) at 152-189 ms; with 10 ms the timer's hop p99 was 35-56 ms against 104-149
    (bench/HISTORY.md, 2026-12-05). The same backoff paces every other protocol retry
    (EndTxn, produce batches, idempotent-producer requests), each doubling per attempt up to
    ``retry.backoff.max.ms`` (set here to librdkafka's 1 s default, so the cap does not follow
    a library change). ``topic.metadata.refresh.fast.interval.ms`` would default to the
    backoff and so query a leaderless partition's metadata from 10 ms on; it stays at its
    100 ms. The operator may set any of these back.
    """
    base = {**_PRODUCER_DEFAULTS, **(defaults or {}), **settings.client_config()}
    base.update(
        {
            "transactional.id": transactional_id,
            "enable.idempotence": True,
            "acks": "all",
            # Java-compatible hashing, so Java and Go producers agree on partitions by key.
            "partitioner": "murmur2_random",
            # A SIGKILLed producer's open transaction blocks read_committed readers (and the
            # next owner's offset fetch) until the broker aborts it after this long.
            "transaction.timeout.ms": transaction_timeout_ms,
        }
    )
    return base
