"""Partitions of kafkron's consumer groups, who owns each, and how far behind it is: what the
dashboard's partitions page shows (``GET /api/dashboard/partitions``).

Read from the broker with Kafka's admin API, as ``kafka-consumer-groups --describe`` does:
the group's members and their assignments (DescribeConsumerGroups), its committed offsets
(OffsetFetch) and each partition's end (ListOffsets, the high watermark). The lag of a
partition is its end minus the committed offset; a transactional writer's commit markers
count too, so an idle partition can show a lag of 1 or 2. A partition is listed when a
member owns it or the group committed an offset on it.

The groups are those of the timer, the executor and the dag processor under the namespace
(``<namespace>timer`` ..., as their settings' ``group_id()`` name them). Answers are
cached for ``cache_s``, so many open dashboards cost the broker one read a few seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec

from streams.settings import KafkaSettings

SERVICE_GROUPS = ("timer", "executor", "dag")
"""The services whose groups the dashboard shows; the group id is the namespace + the name."""

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Member:
    """One member of a group: its ``client.id`` (a kafkron process's worker id), host and
    assigned partitions."""

    client_id: str
    host: str
    partitions: tuple[TopicPartitionKey, ...]


def partition_rows(
    members: Iterable[Member],
    committed: Mapping[TopicPartitionKey, int],
    ends: Mapping[TopicPartitionKey, int],
) -> list[dict[str, Any]]:
    """One row per partition a member owns or the group committed on, in topic and
    partition order: its owner (None when unassigned), committed offset, end and lag (None
    where either is unknown)."""
    owners = {tp: m.client_id for m in members for tp in m.partitions}
    rows = []
    for tp in sorted(set(owners) | set(committed)):
        position, end = committed.get(tp), ends.get(tp)
        lag = None if position is None or end is None else max(0, end - position)
        rows.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "owner": owners.get(tp),
                "committed": position,
                "end": end,
                "lag": lag,
            }
        )
    return rows


def group_body(
    name: str, group_id: str, state: str, members: list[Member], rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """One group as the partitions endpoint shows it."""
    lags = [r["lag"] for r in rows if r["lag"] is not None]
    return {
        "name": name,
        "group_id": group_id,
        "state": state,
        "error": None,
        "members": [
            {"client_id": m.client_id, "host": m.host, "partitions": len(m.partitions)}
            for m in sorted(members, key=lambda m: m.client_id)
        ],
        "partitions": rows,
        "total_lag": sum(lags),
    }


def _error_body(name: str, group_id: str, message: str) -> dict[str, Any]:
    return {"name": name, "group_id": group_id, "state": "UNKNOWN", "error": message,
            "members": [], "partitions": [], "total_lag": 0}  # fmt: skip


class GroupLag:
    """Reads the service groups' partitions, owners and lag (blocking; call off the loop)."""

    def __init__(self, kafka: KafkaSettings, timeout_s: float = 5.0, cache_s: float = 2.0) -> None:
        self._kafka = kafka
        self._timeout_s = timeout_s
        self._cache_s = cache_s
        self._admin: AdminClient | None = None
        self._lock = threading.Lock()
        self._cached: tuple[float, list[dict[str, Any]]] | None = None
        self.group_ids = {name: f"{kafka.namespace}{name}" for name in SERVICE_GROUPS}

    def groups(self) -> list[dict[str, Any]]:
        """Every service group, read now or at most ``cache_s`` ago."""
        with self._lock:
            if self._cached is not None and time.monotonic() - self._cached[0] < self._cache_s:
                return self._cached[1]
            found = self._read()
            self._cached = (time.monotonic(), found)
            return found

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(self._kafka.client_config())
        return self._admin

    def _read(self) -> list[dict[str, Any]]:
        admin = self._admin_client()
        ids = list(self.group_ids.values())
        described = admin.describe_consumer_groups(ids, request_timeout=self._timeout_s)
        offsets = {
            group_id: admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group_id)], request_timeout=self._timeout_s
            )[group_id]
            for group_id in ids
        }
        seen: dict[str, tuple[str, list[Member], dict[TopicPartitionKey, int]]] = {}
        bodies: dict[str, dict[str, Any]] = {}
        for name, group_id in self.group_ids.items():
            try:
                description = described[group_id].result()
                committed = {
                    (tp.topic, tp.partition): tp.offset
                    for tp in offsets[group_id].result().topic_partitions
                    if tp.offset >= 0  # no committed offset: -1001
                }
            except Exception as exc:  # the broker is away, or the group is unknown to it
                bodies[name] = _error_body(name, group_id, f"{type(exc).__name__}: {exc}")
                continue
            members = [
                Member(
                    m.client_id,
                    m.host,
                    tuple((tp.topic, tp.partition) for tp in m.assignment.topic_partitions),
                )
                for m in description.members
            ]
            seen[name] = (description.state.name, members, committed)
        partitions = {tp for _, members, committed in seen.values() for tp in committed} | {
            tp for _, members, _ in seen.values() for m in members for tp in m.partitions
        }
        ends, ends_error = self._ends(admin, partitions)
        for name, (state, members, committed) in seen.items():
            body = group_body(
                name, self.group_ids[name], state, members, partition_rows(members, committed, ends)
            )
            body["error"] = ends_error
            bodies[name] = body
        return [bodies[name] for name in self.group_ids]

    def _ends(
        self, admin: AdminClient, partitions: Collection[TopicPartitionKey]
    ) -> tuple[dict[TopicPartitionKey, int], str | None]:
        """The high watermark of each partition, and what went wrong reading them."""
        if not partitions:
            return {}, None
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        request = {TopicPartition(t, p): latest for t, p in partitions}
        futures = admin.list_offsets(request, request_timeout=self._timeout_s)
        ends: dict[TopicPartitionKey, int] = {}
        error = None
        for tp, future in futures.items():
            try:
                ends[(tp.topic, tp.partition)] = future.result().offset
            except Exception as exc:  # e.g. a topic deleted meanwhile
                error = f"end offsets not read: {type(exc).__name__}: {exc}"
        return ends, error
