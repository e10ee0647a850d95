"""The dag processor's logic over in-memory stores and a hand-driven clock (no broker).

One :class:`Dag` stands for every partition: signals it emits are fed back to it, as the
``dag-signals`` topic does across partitions; releases are collected as the timer would
read them. The broker-backed proofs are in ``test_dag_kafka.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.herd import job_record
from services.dag.edges import node_job
from services.dag.inputs import apply_input
from services.dag.runs import settle_deadlines
from services.dag.scope import KEY_SPACES, DagEnv, DagScope
from services.dag.settings import DagSettings
from streams.codec import Codec, RecordKind
from streams.identity import execution_id
from streams.settings import KafkaSettings
from tests.services.timer.test_timer_logic import FakeStore, result_bytes

CODEC = Codec.from_directory()
K1 = 1_790_000_000_000
K2 = K1 + 2_000
HOUR_MS = 3_600_000


class Dag:
    """Every partition of one dag processor over fakes."""

    def __init__(self) -> None:
        settings = DagSettings(kafka=KafkaSettings(namespace="k."), run_retention_ms=HOUR_MS)
        self.env = DagEnv.from_settings(settings, CODEC)
        self.store = FakeStore()  # the one store: five key spaces
        self.signals: list[tuple[bytes, bytes | None]] = []
        self.releases: list[dict[str, Any]] = []
        self.dead: list[dict[str, Any]] = []
        self.now_ms = K1
        # Dependents whose partition this "process" owns: their ends are counted at once, in
        # the same unit of work (the local shortcut), the others' go through the topic.
        self.local: set[str] = set()

    def scope(self) -> DagScope:
        scope = DagScope.over(self.env, self.store, self._emit, self._emit, self.now_ms)
        scope.local_scope = self._local_scope
        return scope

    def space(self, name: str) -> dict[bytes, bytes]:
        """The items of the logical store ``name``: its key space, prefix removed."""
        prefix = KEY_SPACES[name]
        return {k[1:]: v for k, v in self.store.data.items() if k[:1] == prefix}

    def _local_scope(self, job_id: str) -> DagScope | None:
        if job_id not in self.local:
            return None
        scope = self.scope()
        return scope if node_job(scope, job_id) is not None else None

    def _emit(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        assert value is not None
        if topic == self.env.signals_topic:
            assert key is not None
            self.signals.append((key, value))
        elif topic == self.env.releases_topic:
            self.releases.append(CODEC.decode(RecordKind.DAG_RELEASE, value))
        else:
            assert topic == self.env.dlq_topic
            self.dead.append(CODEC.decode(RecordKind.DEAD_LETTER, value))

    def feed(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        """Apply one input record, then every signal it caused (and theirs), in order."""
        apply_input(self.scope(), topic, 0, 7, key, value)
        while self.signals:
            signal_key, signal = self.signals.pop(0)
            apply_input(self.scope(), self.env.signals_topic, 0, 8, signal_key, signal)

    def job(self, job_id: str, **fields: Any) -> None:
        fields.setdefault("version", 1)
        record = job_record(job_id, self.now_ms, handler="a.b", **fields)
        self.feed(self.env.jobs_topic, job_id.encode(), CODEC.encode(RecordKind.JOB, record))

    def ended(self, job_id: str, run_key_ms: int, status: str = "SUCCEEDED") -> None:
        value = result_bytes(job_id, run_key_ms, status, self.now_ms)
        self.feed(self.env.results_topic, job_id.encode(), value)

    def verdicts(self) -> list[tuple[str, int, str]]:
        return [(r["job_id"], r["run_key_ms"], r["verdict"]) for r in self.releases]

    def punctuate(self, now_ms: int) -> None:
        self.now_ms = now_ms
        settle_deadlines(self.scope())


@pytest.fixture
def dag() -> Dag:
    graph = Dag()
    graph.job("extract", run_at_ms=K1)
    graph.job("load-refs", run_at_ms=K1)
    graph.job("join", depends_on=["extract", "load-refs"], dag_wait_ms=HOUR_MS)
    return graph


def test_a_dependent_is_released_once_when_every_upstream_of_its_run_succeeded(
    dag: Dag,
) -> None:
    dag.ended("extract", K1)
    dag.ended("extract", K1)  # a repeated signal counts once
    assert dag.releases == []
    dag.ended("load-refs", K1)
    dag.ended("load-refs", K1)
    dag.ended("extract", K1)
    assert dag.verdicts() == [("join", K1, "RUN")]
    assert dag.releases[0]["upstream_execution_ids"] == [
        execution_id("extract", K1),
        execution_id("load-refs", K1),
    ]


def test_an_end_for_a_dependent_owned_here_is_counted_at_once_and_once(dag: Dag) -> None:
    dag.job("transform", depends_on=["join"])
    dag.local = {"join"}  # transform's partition is owned elsewhere
    dag.ended("extract", K1)
    dag.ended("extract", K1)  # a replay of the same result (after a crash) counts once
    dag.ended("load-refs", K1)
    assert dag.verdicts() == [("join", K1, "RUN")]
    assert dict(dag.env.signals) == {"local": 3}
    dag.local = {"join", "transform"}
    dag.ended("load-refs", K1)  # counted again locally, released nothing new
    dag.ended("join", K1)
    assert dag.verdicts() == [("join", K1, "RUN"), ("transform", K1, "RUN")]
    dag.local = set()
    dag.ended("join", K1)  # the next owner replays it through the topic: counted once
    assert dag.verdicts() == [("join", K1, "RUN"), ("transform", K1, "RUN")]
    assert dict(dag.env.signals) == {"local": 5, "topic": 1}


def test_an_end_for_a_dependent_not_held_here_goes_through_the_topic(dag: Dag) -> None:
    dag.local = {"join", "nobody"}
    dag.job("late", depends_on=["extract"])  # "late" is not local: its end takes the topic
    dag.ended("extract", K1)
    assert dag.env.signals == {"local": 1, "topic": 1}
    assert dag.verdicts() == [("late", K1, "RUN")]
    dag.ended("load-refs", K1)
    assert dag.verdicts() == [("late", K1, "RUN"), ("join", K1, "RUN")]


def test_overlapping_runs_never_mix(dag: Dag) -> None:
    dag.ended("extract", K1)
    dag.ended("load-refs", K2)
    assert dag.releases == []
    dag.ended("load-refs", K1)
    assert dag.verdicts() == [("join", K1, "RUN")]
    dag.ended("extract", K2)
    assert dag.verdicts() == [("join", K1, "RUN"), ("join", K2, "RUN")]


@pytest.mark.parametrize("status", ["STARTED", "FAILED", "TIMED_OUT"])
def test_attempts_that_are_not_final_do_not_count(dag: Dag, status: str) -> None:
    dag.ended("extract", K1, status)
    dag.ended("load-refs", K1)
    assert dag.releases == [] and dag.signals == []


def test_an_upstream_failure_fails_the_run_once_and_a_replayed_success_releases_it(
    dag: Dag,
) -> None:
    dag.ended("extract", K1, "DEAD_LETTER")
    assert dag.verdicts() == [("join", K1, "UPSTREAM_FAILED")]
    assert dag.releases[0]["reason"] == f"upstream {execution_id('extract', K1)} ended DEAD_LETTER"
    dag.ended("load-refs", K1, "SKIPPED")  # a second failure: still one outcome
    dag.ended("load-refs", K1)
    assert dag.verdicts() == [("join", K1, "UPSTREAM_FAILED")]
    dag.ended("extract", K1)  # the dead letter replayed, and it succeeded
    assert dag.verdicts() == [("join", K1, "UPSTREAM_FAILED"), ("join", K1, "RUN")]


def test_a_success_is_never_overwritten_by_a_later_failure(dag: Dag) -> None:
    dag.ended("extract", K1)
    dag.ended("extract", K1, "CANCELLED")
    dag.ended("load-refs", K1)
    assert dag.verdicts() == [("join", K1, "RUN")]


def test_a_run_open_past_dag_wait_is_missed_then_forgotten(dag: Dag) -> None:
    dag.ended("extract", K1)
    dag.punctuate(K1 + HOUR_MS - 1)
    assert dag.releases == []
    dag.punctuate(K1 + HOUR_MS)
    assert dag.verdicts() == [("join", K1, "MISSED")]
    assert execution_id("load-refs", K1) in (dag.releases[0]["reason"] or "")
    assert dag.releases[0]["upstream_execution_ids"] == [execution_id("extract", K1)]
    dag.ended("load-refs", K1)  # too late: the run is closed
    assert len(dag.releases) == 1
    assert len(dag.space("runs")) == 1
    dag.punctuate(K1 + 2 * HOUR_MS)  # retention (one hour here) over: forgotten
    assert dag.space("runs") == {} and dag.space("deadlines") == {}
    assert dag.store.data.keys() == {  # what remains: the nodes, edges and ends
        KEY_SPACES[name] + key for name in ("nodes", "edges", "ends") for key in dag.space(name)
    }


def test_a_released_or_failed_run_is_never_missed(dag: Dag) -> None:
    dag.ended("extract", K1)
    dag.ended("load-refs", K1)
    dag.ended("extract", K2, "DEAD_LETTER")
    dag.punctuate(K2 + HOUR_MS)
    assert [v for _, _, v in dag.verdicts()] == ["RUN", "UPSTREAM_FAILED"]


def test_edges_follow_the_dependents_latest_definition(dag: Dag) -> None:
    dag.job("join", version=2, depends_on=["extract"])  # load-refs dropped
    dag.ended("extract", K1)
    assert dag.verdicts() == [("join", K1, "RUN")]
    dag.ended("load-refs", K2)  # no edge any more: no signal
    assert dag.signals == [] and len(dag.releases) == 1
    dag.job("join", version=1, depends_on=["extract", "load-refs"])  # stale: ignored
    dag.ended("extract", K2)
    assert dag.verdicts()[-1] == ("join", K2, "RUN")


@pytest.mark.parametrize("change", ["cancelled", "deleted"])
def test_a_cancelled_or_deleted_dependent_has_no_runs(dag: Dag, change: str) -> None:
    if change == "cancelled":
        dag.job("join", version=2, depends_on=["extract", "load-refs"], status="CANCELLED")
    else:
        dag.feed(dag.env.jobs_topic, b"join", None)
    dag.ended("extract", K1)
    dag.ended("load-refs", K1)
    assert dag.releases == [] and dag.space("nodes") == {} and dag.space("edges") == {}


def test_dependents_are_released_transitively(dag: Dag) -> None:
    dag.job("transform", depends_on=["join"])
    dag.job("validate", depends_on=["join"])
    dag.ended("extract", K1)
    dag.ended("load-refs", K1)
    dag.ended("join", K1, "UPSTREAM_FAILED")  # what the timer records for a failed run
    assert dag.verdicts() == [
        ("join", K1, "RUN"),
        ("transform", K1, "UPSTREAM_FAILED"),
        ("validate", K1, "UPSTREAM_FAILED"),
    ]


@pytest.mark.parametrize(
    ("topic", "key", "value", "reason"),
    [
        ("results", b"extract", b"\x00junk", "header"),
        ("results", None, b"x", "no key"),
        ("signals", b"join", None, "null value"),
        ("jobs", b"other", "job", "is not its job id"),
    ],
)
def test_unusable_records_are_dead_lettered_and_processing_goes_on(
    dag: Dag, topic: str, key: bytes | None, value: Any, reason: str
) -> None:
    if value == "job":
        job = job_record("join", K1, handler="a.b", version=9, depends_on=["extract"])
        value = CODEC.encode(RecordKind.JOB, job)
    name = {"results": dag.env.results_topic, "signals": dag.env.signals_topic}
    dag.feed(name.get(topic, dag.env.jobs_topic), key, value)
    (dead,) = dag.dead
    assert dead["kind"] == "UNDECODABLE" and reason in dead["reason"]
    assert dead["raw_value"] == value and dead["source_offset"] == 7
    dag.ended("extract", K1)
    dag.ended("load-refs", K1)
    assert dag.verdicts() == [("join", K1, "RUN")]


def test_an_end_that_arrives_before_the_edge_still_counts_for_runs_after_the_creation() -> None:
    dag = Dag()
    dag.job("extract", run_at_ms=K1)
    dag.job("load-refs", run_at_ms=K1)
    dag.now_ms = K1 - 1_000  # join is created before the run ...
    dag.ended("extract", K1)  # ... but the ends reach the upstreams' partitions first
    dag.ended("load-refs", K1)
    dag.job("join", depends_on=["extract", "load-refs"])
    assert dag.verdicts() == [("join", K1, "RUN")]


def test_a_dependent_created_after_a_run_started_takes_no_part_in_it() -> None:
    dag = Dag()
    dag.job("extract", run_at_ms=K1)
    dag.job("load-refs", run_at_ms=K1)
    dag.ended("extract", K1)
    dag.ended("load-refs", K1)
    dag.now_ms = K1 + 1
    dag.job("join", depends_on=["extract", "load-refs"])
    assert dag.releases == []
    dag.ended("extract", K1)  # an older run's end never replaces a newer one
    dag.ended("extract", K2)
    dag.ended("extract", K1, "DEAD_LETTER")
    dag.ended("load-refs", K2)
    assert dag.verdicts() == [("join", K2, "RUN")]


def test_a_deleted_jobs_latest_end_is_forgotten(dag: Dag) -> None:
    dag.ended("extract", K1)
    assert dag.space("ends")
    dag.feed(dag.env.jobs_topic, b"extract", None)
    assert dag.space("ends") == {}


def test_every_recent_run_that_ended_before_the_edge_counts_and_old_ends_are_forgotten() -> None:
    dag = Dag()
    dag.job("extract", run_at_ms=K1)
    dag.job("load-refs", run_at_ms=K1)
    dag.now_ms = K1 - 1_000  # join is created before both runs; a catch-up applies the
    for key in (K1, K2):  # roots' ends of two runs before join's edges
        dag.ended("extract", key)
        dag.ended("load-refs", key)
    dag.job("join", depends_on=["extract", "load-refs"])
    assert dag.verdicts() == [("join", K1, "RUN"), ("join", K2, "RUN")]
    dag.now_ms = K2 + dag.env.ends_retention_ms + 1
    dag.ended("extract", dag.now_ms)  # K1's and K2's ends are past the retention
    assert [k for k in dag.space("ends") if k.startswith(b"\x00\x07extract")] == [
        b"\x00\x07extract" + dag.now_ms.to_bytes(8, "big")
    ]
