"""The design's six-node DAG run through real timer, dag and executor processes.

``extract`` and ``load-refs`` are roots on one schedule; ``join`` waits for both;
``transform`` and ``validate`` for ``join``; ``publish`` for both of those. Used by the
DAG tests (tests/services/dag) and ``bench/dag.py``; :class:`DagWatch` stamps every record
the DAG writes with when it became visible (``bench/dag.py``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from bench.herd import CODEC, TimerProcess, job_record, now_ms, produce_jobs
from services.demo import DEMO_DAG
from streams.codec import RecordKind
from streams.identity import execution_id
from streams.settings import KafkaSettings
from streams.topics import Priority, TopicNames

SIX_NODES = DEMO_DAG
"""Node name -> its upstreams, in dependency order (the demo's DAG)."""


class DagProcess(TimerProcess):
    """One ``python -m services.dag.main`` child with its own instance id and state dir."""

    module = "services.dag.main"

    def __init__(self, settings: KafkaSettings, instance_id: str, log_dir: Any, **env: str):
        super().__init__(settings, instance_id, log_dir, KAFKRON_DAG_INSTANCE_ID=instance_id, **env)


def dag_jobs(
    prefix: str,
    roots: Mapping[str, Any],
    handler: str,
    created_ms: int,
    nodes: Mapping[str, tuple[str, ...]] = SIX_NODES,
    per_node: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Job records of ``nodes`` named ``prefix + node``: roots get the ``roots`` fields (a
    ``cron`` or ``run_at_ms``), dependents ``depends_on``; every node overlap ALLOW (runs of
    a DAG may overlap) and ``per_node`` overrides. Dependents come first, so the dag
    processor knows the edges before a root's first result."""
    records = []
    for node, upstreams in nodes.items():
        fields: dict[str, Any] = {"handler": handler, "overlap": "ALLOW"}
        if upstreams:
            fields["depends_on"] = [prefix + u for u in upstreams]
        else:
            fields.update(roots)
        fields.update((per_node or {}).get(node, {}))
        records.append(job_record(prefix + node, created_ms, **fields))
    return sorted(records, key=lambda r: not r["depends_on"])


def cron_every(seconds: int, start_ms: int, end_ms: int) -> dict[str, Any]:
    """The ``cron`` field of a root firing every ``seconds`` from ``start_ms`` to ``end_ms``."""
    return {
        "cron": {
            "expression": f"*/{seconds} * * * * *",
            "timezone": "UTC",
            "start_ms": start_ms,
            "end_ms": end_ms,
            "fold_policy": "EVERY",
        }
    }


@dataclass
class Outcomes:
    """Every ExecutionResult read from ``job-results`` (read_committed), by execution id."""

    by_execution: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, result: dict[str, Any]) -> None:
        self.by_execution.setdefault(result["execution_id"], []).append(result)

    def statuses(self, execution: str) -> list[str]:
        return [r["status"] for r in self.by_execution.get(execution, [])]

    def final(self, execution: str) -> str | None:
        """The last final status of ``execution`` (None while it has none)."""
        finals = [s for s in self.statuses(execution) if s not in ("STARTED", "FAILED")]
        return finals[-1] if finals else None


class ResultsReader:
    """Reads ``job-results`` from the start, read_committed, into :class:`Outcomes`."""

    def __init__(self, settings: KafkaSettings) -> None:
        topic = TopicNames(settings.namespace).job_results
        self._consumer = Consumer(
            settings.client_config(
                **{
                    "group.id": f"dag-reader-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                }
            )
        )
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(settings.partitions)])
        self.outcomes = Outcomes()
        self.raw: list[tuple[bytes, bytes]] = []  # (key, value) of every result read

    def poll(self, timeout_s: float = 0.1) -> int:
        got = 0
        for message in self._consumer.consume(10_000, timeout_s):
            value, key = message.value(), message.key()
            if message.error() is not None or value is None or key is None:
                continue
            self.raw.append((key, value))
            self.outcomes.add(CODEC.decode(RecordKind.EXECUTION_RESULT, value))
            got += 1
        return got

    def wait(self, done: Any, timeout_s: float, what: str) -> None:
        """Poll until ``done(outcomes)``; a TimeoutError says ``what`` did not happen."""
        deadline = time.monotonic() + timeout_s
        while not done(self.outcomes):
            if time.monotonic() > deadline:
                seen = {k: v for k, v in list(self.outcomes.by_execution.items())[-12:]}
                statuses = {k: [r["status"] for r in v] for k, v in seen.items()}
                raise TimeoutError(f"not within {timeout_s:.0f} s: {what}; last seen {statuses}")
            self.poll()

    def close(self) -> None:
        self._consumer.close()


class DagWatch:
    """One read_committed consumer on results, signals, releases and the due topics.

    Keeps every record raw with the wall time it was first seen (ms) and its Kafka
    timestamp; decodes only results (to know when a phase is done) while reading.
    """

    def __init__(self, settings: KafkaSettings) -> None:
        names = TopicNames(settings.namespace)
        self.kinds = {
            names.job_results: "result",
            names.dag_signals: "signal",
            names.dag_releases: "release",
            **{names.due(p): "due" for p in Priority},
        }
        self._consumer = Consumer(
            settings.client_config(
                **{
                    "group.id": f"dag-watch-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                }
            )
        )
        self._consumer.assign(
            [TopicPartition(t, p, 0) for t in self.kinds for p in range(settings.partitions)]
        )
        # kind -> [(key, value, seen_ms, produced_ms)]
        self.records: dict[str, list[tuple[bytes, bytes, int, int]]] = {
            kind: [] for kind in set(self.kinds.values())
        }
        self.succeeded: set[str] = set()  # execution ids with a SUCCEEDED seen

    def poll(self, timeout_s: float = 0.05) -> None:
        """Read what is there, one record per poll, each stamped when its poll returned."""
        message = self._consumer.poll(timeout_s)
        while message is not None:
            seen_ms = now_ms()
            key, value = message.key(), message.value()
            if message.error() is None and key is not None and value is not None:
                kind = self.kinds[message.topic() or ""]
                self.records[kind].append((key, value, seen_ms, message.timestamp()[1]))
                if kind == "result":
                    result = CODEC.decode(RecordKind.EXECUTION_RESULT, value)
                    if result["status"] == "SUCCEEDED":
                        self.succeeded.add(result["execution_id"])
            message = self._consumer.poll(0)

    def poll_until(self, done: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"not within {timeout_s:.0f} s: {what}")
            self.poll()

    def poll_for(self, seconds: float) -> None:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            self.poll()

    def decoded(self, kind: str, prefix: str) -> list[tuple[dict[str, Any], int, int]]:
        """(record, seen_ms, produced_ms) of every ``kind`` record keyed ``prefix``..."""
        schema = {
            "result": RecordKind.EXECUTION_RESULT,
            "signal": RecordKind.DAG_SIGNAL,
            "release": RecordKind.DAG_RELEASE,
            "due": RecordKind.DUE_EVENT,
        }[kind]
        wanted = prefix.encode()
        return [
            (CODEC.decode(schema, value), seen, produced)
            for key, value, seen, produced in self.records[kind]
            if key.startswith(wanted)
        ]

    def close(self) -> None:
        self._consumer.close()


def run_executions(prefix: str, run_key_ms: int, nodes: Iterable[str] = SIX_NODES) -> list[str]:
    """The execution ids of one run of the DAG: ``<prefix><node>@<run_key_ms>`` each."""
    return [execution_id(prefix + node, run_key_ms) for node in nodes]


def wait_until_dag_serving(
    settings: KafkaSettings, reader: ResultsReader, handler: str, timeout_s: float = 120.0
) -> None:
    """A canary root due now and its dependent must both SUCCEED: timer, dag processor and
    executor all serve."""
    prefix = f"canary-{uuid.uuid4().hex[:6]}-"
    now = time.time_ns() // 1_000_000
    nodes = {"root": (), "child": ("root",)}
    produce_jobs(settings, dag_jobs(prefix, {"run_at_ms": now + 2_000}, handler, now, nodes))
    child = execution_id(prefix + "child", now + 2_000)
    reader.wait(lambda o: o.final(child) == "SUCCEEDED", timeout_s, f"canary {child} SUCCEEDED")


def handler_specs(*specs: str) -> str:
    """The executor's KAFKRON_EXECUTOR_HANDLER_SPECS value for ``specs``."""
    return json.dumps(list(specs))
