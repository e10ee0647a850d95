"""What one unit of dag work touches: the partition's five key spaces, the clock, its outputs.

:class:`DagEnv` holds what is fixed for the process; a :class:`DagScope` is built per run of
input records or per punctuation. The logic (``edges.py``, ``runs.py``) is written against
these, so it runs on the processor runtime's RocksDB transactions.

Logical stores per partition: ``nodes`` and ``runs`` and ``deadlines`` hold dependents' state
(in the dependent's partition), ``edges`` and ``ends`` upstreams' (in the upstream's
partition): its dependents, and the final ends of its executions of recent runs (``keys.py``).
They are key spaces of ONE processor store, :data:`STORE` (one RocksDB, one changelog topic),
each under its one-byte prefix in :data:`KEY_SPACES` (``streams/state/key_space.py``): a burst's
transaction then writes one changelog partition per partition it touched, not up to five
(each a produce request the commit waits for). The five-store layout's changelogs
(:data:`OLD_STORES`) are copied into it by ``store_migration.py``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from services.dag.settings import DagSettings
from services.timer.scope import StoreTransaction
from streams.codec import Codec
from streams.result_reader import ResultReader
from streams.state.key_space import KeySpace, KeyValueTransaction
from streams.topics import TopicNames

Emit = Callable[[str, bytes | None, bytes | None], None]
"""Produce ``(topic, key, value)`` in the current transaction."""
EmitKeyed = Callable[[str, bytes, bytes | None], None]
"""Produce ``(topic, key, value)`` in the current transaction, to the partition of ``key``."""
LocalScope = Callable[[str], "DagScope | None"]
"""The scope of job ``job_id``'s partition when this process owns it and holds the job as a
dependent (its signals can be applied there in the same transaction), else None."""

STORE = "state"
"""The dag processor's one store (changelog ``<namespace>changelog.<group>.state``)."""
KEY_SPACES: dict[str, bytes] = {
    "nodes": b"n",
    "edges": b"e",
    "runs": b"r",
    "deadlines": b"d",
    "ends": b"x",
}
"""Each logical store's one-byte key prefix in :data:`STORE` (never change one: stored)."""
OLD_STORES = tuple(KEY_SPACES)
"""The stores of the five-store layout (before 2026-12-05), one changelog each, named as the
key spaces that replace them."""


@dataclass(frozen=True)
class DagEnv:
    """Everything fixed for one dag process: codec, topic names, limits, counters."""

    codec: Codec
    result_reader: ResultReader
    jobs_topic: str
    results_topic: str
    signals_topic: str
    releases_topic: str
    dlq_topic: str
    run_retention_ms: int
    deadline_batch_size: int
    ends_retention_ms: int = 15 * 60_000
    # Partitions of the co-partitioned topics: where a job id's records go. 0: signals
    # always go through ``dag-signals`` (no local shortcut).
    partitions: int = 0
    # Input records dead-lettered (undecodable, or breaking a bound), by source topic.
    dead_letters: Counter[str] = field(default_factory=Counter)
    # Verdicts given, by DagVerdict name (RUN, UPSTREAM_FAILED, MISSED).
    verdicts: Counter[str] = field(default_factory=Counter)
    # UPSTREAM_ENDED signals by path: "local" (applied in the dependent's partition in the
    # same transaction) or "topic" (produced to ``dag-signals``).
    signals: Counter[str] = field(default_factory=Counter)

    @classmethod
    def from_settings(cls, settings: DagSettings, codec: Codec | None = None) -> DagEnv:
        """The environment of a dag processor configured by ``settings``."""
        codec = codec or Codec.from_directory()
        names = TopicNames(settings.kafka.namespace)
        return cls(
            codec=codec,
            result_reader=ResultReader(codec),
            jobs_topic=names.jobs,
            results_topic=names.job_results,
            signals_topic=names.dag_signals,
            releases_topic=names.dag_releases,
            dlq_topic=names.dlq,
            run_retention_ms=settings.run_retention_ms,
            ends_retention_ms=settings.ends_retention_ms,
            deadline_batch_size=settings.deadline_batch_size,
            partitions=settings.kafka.partitions if settings.local_signals else 0,
        )


@dataclass
class DagScope:
    """One partition's stores and outputs for one unit of work at ``now_ms``.

    ``emit`` writes to this partition (a release for the timer, a dead letter);
    ``emit_keyed`` to the partition of the record's key (a signal re-keyed to another job).
    ``local_scope`` finds the partition of another job when this process owns it (None:
    every signal goes through the topic).
    """

    env: DagEnv
    nodes: StoreTransaction
    edges: StoreTransaction
    runs: StoreTransaction
    deadlines: StoreTransaction
    ends: StoreTransaction
    emit: Emit
    emit_keyed: EmitKeyed
    now_ms: int
    emitted: int = 0
    local_scope: LocalScope | None = None

    @classmethod
    def over(
        cls, env: DagEnv, store: KeyValueTransaction, emit: Emit, emit_keyed: EmitKeyed, now_ms: int
    ) -> DagScope:
        """The scope whose logical stores are the key spaces of one store transaction."""
        nodes, edges, runs, deadlines, ends = (KeySpace(store, p) for p in KEY_SPACES.values())
        return cls(env, nodes, edges, runs, deadlines, ends, emit, emit_keyed, now_ms)
