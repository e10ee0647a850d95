"""DAG runs end to end on the real broker (issue 17): timer, dag processor and executor as
child processes; the design's six-node DAG (``bench/dag_runs.py``).

Handler runs are counted from the handlers' own effect log (``record_effect``: a ``start``
and a ``done`` line per run, with the time), outcomes read ``read_committed`` from
``job-results``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from bench.dag_runs import (
    SIX_NODES,
    DagProcess,
    DagWatch,
    ResultsReader,
    cron_every,
    dag_jobs,
    handler_specs,
    run_executions,
    wait_until_dag_serving,
)
from bench.herd import CODEC, TimerProcess, produce_jobs
from services.executor.settings import DEFAULT_HANDLER_SPECS
from services.ingest.producer import partition_for_key
from streams.codec import RecordKind
from streams.dlq import replay
from streams.identity import execution_id
from streams.settings import KafkaSettings
from streams.topics import TopicNames
from tests.services.dag.handlers import GATE_ENV, GATED_SPEC
from tests.services.executor.test_service_kit import EFFECT_SPEC, ExecutorProcess, now_ms

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

RUNS = 10
PERIOD_MS = 2_000
DEPENDENTS = [node for node, upstreams in SIX_NODES.items() if upstreams]


class Cluster:
    """A timer, a dag processor and an executor, each a child process."""

    def __init__(self, topics: KafkaSettings, tmp_path: Path) -> None:
        self.topics, self.tmp_path = topics, tmp_path
        self.gate = tmp_path / "gate"
        specs = handler_specs(EFFECT_SPEC, GATED_SPEC, *DEFAULT_HANDLER_SPECS)
        self.timer = TimerProcess(topics, "dag-timer", tmp_path)
        self.dag = DagProcess(topics, "dag-0", tmp_path)
        self.executor = ExecutorProcess(
            topics,
            "dag-executor",
            tmp_path,
            KAFKRON_EXECUTOR_HANDLER_SPECS=specs,
            **{GATE_ENV: str(self.gate)},
        )
        self.reader: ResultsReader | None = None

    def start(self) -> ResultsReader:
        self.timer.start()
        self.dag.start()
        self.executor.start()
        self.reader = ResultsReader(self.topics)
        wait_until_dag_serving(self.topics, self.reader, "tests.effect")
        return self.reader

    def stop(self) -> None:
        if self.reader is not None:
            self.reader.close()
        self.executor.stop(timeout_s=30)
        self.dag.stop(timeout_s=30)
        self.timer.stop(timeout_s=30)

    def effects(self) -> dict[tuple[str, str], list[int]]:
        """(phase, execution id) -> the times (ms) ``record_effect`` logged it."""
        path = self.executor.effects_path
        found: dict[tuple[str, str], list[int]] = {}
        for line in path.read_text().splitlines() if path.exists() else []:
            phase, execution, _, _, at_ms = line.split()
            found.setdefault((phase, execution), []).append(int(at_ms))
        return found


@pytest.fixture
def cluster(topics: KafkaSettings, tmp_path: Path) -> Iterator[Cluster]:
    started = Cluster(topics, tmp_path)
    yield started
    started.stop()


def cron_runs(lead_ms: int = 4_000) -> tuple[dict[str, object], list[int]]:
    """The roots' cron (every 2 s, RUNS ticks from an even second ``lead_ms`` ahead) and the
    run keys it makes."""
    first = (now_ms() + lead_ms) // PERIOD_MS * PERIOD_MS + PERIOD_MS
    keys = [first + i * PERIOD_MS for i in range(RUNS)]
    return cron_every(PERIOD_MS // 1000, first, keys[-1] + 1), keys  # end_ms is exclusive


def assert_each_dependent_ran_once_after_its_upstreams(
    cluster: Cluster, prefix: str, keys: list[int]
) -> None:
    effects = cluster.effects()
    for key in keys:
        for node in DEPENDENTS:
            started = effects.get(("start", execution_id(prefix + node, key)), [])
            assert len(started) == 1, f"{node}@{key} ran {len(started)} times"
            for upstream in SIX_NODES[node]:
                (done_ms,) = effects[("done", execution_id(prefix + upstream, key))]
                assert started[0] >= done_ms, f"{node}@{key} started before {upstream} ended"


def test_six_node_dag_runs_in_order_once_per_run_and_overlapping_runs_never_mix(
    cluster: Cluster, topics: KafkaSettings
) -> None:
    reader = cluster.start()
    prefix = f"six-{uuid.uuid4().hex[:6]}-"
    roots, keys = cron_runs()
    # transform sleeps 3 s on a 2 s cron: each run's transform overlaps the next run's.
    slow = {"transform": {"payload": b"3"}}
    produce_jobs(topics, dag_jobs(prefix, roots, "tests.effect", now_ms(), per_node=slow))
    wanted = [e for key in keys for e in run_executions(prefix, key)]
    copies = Producer(topics.client_config(**{"partitioner": "murmur2_random"}))
    results_topic = TopicNames(topics.namespace).job_results
    read, copied = 0, set()

    def done_copying_duplicates(outcomes: object) -> bool:
        # Every SUCCEEDED of validate (which ends before transform) goes twice more onto
        # job-results while its run waits for transform: it must count once.
        nonlocal read
        for key, value in reader.raw[read:]:
            result = CODEC.decode(RecordKind.EXECUTION_RESULT, value)
            validated = key == f"{prefix}validate".encode() and result["status"] == "SUCCEEDED"
            if validated and value not in copied:
                copied.add(value)
                for _ in range(2):
                    copies.produce(results_topic, value, key)
        read = len(reader.raw)
        copies.poll(0)
        return all(reader.outcomes.final(e) is not None for e in wanted)

    try:
        reader.wait(done_copying_duplicates, 120, "every execution of 10 runs final")
    finally:
        missing = [e for e in wanted if reader.outcomes.final(e) is None]
        print("not final:", missing, {e: reader.outcomes.statuses(e) for e in missing})
    copies.flush(10)
    quiet_until = time.monotonic() + 3.0  # a late duplicate run would show up here
    while time.monotonic() < quiet_until:
        reader.poll(0.2)

    for execution in wanted:
        assert reader.outcomes.final(execution) == "SUCCEEDED", execution
    for key in keys:
        publish = execution_id(prefix + "publish", key)
        assert reader.outcomes.statuses(publish).count("SUCCEEDED") == 1, publish
    assert_each_dependent_ran_once_after_its_upstreams(cluster, prefix, keys)
    effects = cluster.effects()
    overlapped = [
        key
        for key in keys[:-1]
        if effects[("start", execution_id(prefix + "transform", key + PERIOD_MS))][0]
        < effects[("done", execution_id(prefix + "transform", key))][0]
    ]
    assert overlapped, "the runs were meant to overlap (transform slower than the cron)"


def test_sigkill_of_the_dag_processor_mid_runs_still_runs_each_dependent_once(
    cluster: Cluster, topics: KafkaSettings
) -> None:
    reader = cluster.start()
    prefix = f"kill-{uuid.uuid4().hex[:6]}-"
    roots, keys = cron_runs()
    produce_jobs(topics, dag_jobs(prefix, roots, "tests.effect", now_ms()))
    wanted = [e for key in keys for e in run_executions(prefix, key)]
    kills = 0
    next_kill = time.monotonic() + 1.0
    while kills < 5:
        reader.poll(0.2)
        if time.monotonic() >= next_kill:
            cluster.dag.kill()  # SIGKILL: no commit, no leaving the group
            cluster.dag.start()  # same instance id: the zombie's transaction is fenced
            kills += 1
            next_kill = time.monotonic() + 3.5
    reader.wait(
        lambda o: all(o.final(e) is not None for e in wanted),
        180,
        "every execution of 10 runs final after 5 kills",
    )
    quiet_until = time.monotonic() + 3.0
    while time.monotonic() < quiet_until:
        reader.poll(0.2)
    for execution in wanted:
        assert reader.outcomes.final(execution) == "SUCCEEDED", execution
        assert reader.outcomes.statuses(execution).count("SUCCEEDED") == 1, execution
    assert_each_dependent_ran_once_after_its_upstreams(cluster, prefix, keys)


def test_an_upstream_dead_letter_fails_its_dependents_and_its_replay_releases_them(
    cluster: Cluster, topics: KafkaSettings
) -> None:
    reader = cluster.start()
    prefix = f"dlq-{uuid.uuid4().hex[:6]}-"
    run_key = now_ms() + 3_000
    once = {"retry": {**_no_retries()}}
    jobs = dag_jobs(
        prefix,
        {"run_at_ms": run_key},
        "tests.effect",
        now_ms(),
        per_node={"extract": {"handler": "tests.gated", **once}},
    )
    produce_jobs(topics, jobs)
    failed = [execution_id(prefix + node, run_key) for node in DEPENDENTS]
    extract = execution_id(prefix + "extract", run_key)
    reader.wait(
        lambda o: o.final(extract) == "DEAD_LETTER" and all(o.final(e) for e in failed),
        90,
        "extract dead-lettered and its dependents ended",
    )
    for execution in failed:
        assert reader.outcomes.final(execution) == "UPSTREAM_FAILED", execution
    reasons = {
        r["execution_id"]: r["reason"]
        for e in failed
        for r in reader.outcomes.by_execution[e]
        if r["status"] == "UPSTREAM_FAILED"
    }
    assert extract in reasons[execution_id(prefix + "join", run_key)]
    assert execution_id(prefix + "join", run_key) in reasons[failed[1]]  # transform
    assert not any(("start", e) in cluster.effects() for e in failed)

    cluster.gate.touch()
    replay(topics, CODEC, extract)
    reader.wait(
        lambda o: all(o.final(e) == "SUCCEEDED" for e in failed),
        90,
        "join, transform, validate and publish SUCCEEDED after the replay",
    )
    effects = cluster.effects()
    for execution in failed:
        assert len(effects[("start", execution)]) == 1, execution


def _no_retries() -> dict[str, object]:
    return {
        "max_attempts": 1,
        "initial_backoff_ms": 100,
        "multiplier": 2.0,
        "max_backoff_ms": 1000,
        "jitter_ratio": 0.0,
    }


def _prefix_with_edges_across_halves(partitions: int) -> str:
    """A job-id prefix whose six-node DAG has an edge within one half of the partitions and
    one across the halves (the range assignor gives each of two members one half)."""
    half = partitions // 2
    while True:
        prefix = f"split-{uuid.uuid4().hex[:6]}-"

        def side(node: str, prefix: str = prefix) -> int:
            return partition_for_key((prefix + node).encode(), partitions) // half

        edges = [(up, node) for node, ups in SIX_NODES.items() for up in ups]
        if len({side(up) == side(node) for up, node in edges}) == 2:
            return prefix


def test_two_dag_processors_a_member_joining_and_one_killed_mid_runs_each_dependent_once(
    cluster: Cluster, topics: KafkaSettings, tmp_path: Path
) -> None:
    """An upstream's end for a dependent owned by the same process is counted in the same
    transaction (no signal), one owned by the other process goes through dag-signals; a
    member joining mid-run (revoke: commit, then give away) and one SIGKILLed mid-run (the
    survivor takes over its partitions) lose and double nothing."""
    reader = cluster.start()
    prefix = _prefix_with_edges_across_halves(topics.partitions)
    roots, keys = cron_runs(lead_ms=2_000)
    produce_jobs(topics, dag_jobs(prefix, roots, "tests.effect", now_ms()))
    watch = DagWatch(topics)
    second = DagProcess(topics, "dag-1", tmp_path, KAFKRON_DAG_METRICS_PORT="0")
    try:
        watch.poll_until(lambda: now_ms() >= keys[1], 30, "the second run started")
        second.start()  # joins mid-run: dag-0's partitions of one half are revoked
        watch.poll_until(lambda: now_ms() >= keys[6], 30, "the seventh run started")
        second.kill()  # mid-run: its half is lost and comes back to dag-0 after the session
        wanted = [e for key in keys for e in run_executions(prefix, key)]
        reader.wait(lambda o: all(o.final(e) for e in wanted), 120, "every execution final")
        watch.poll_for(3.0)  # a late duplicate run would show up here
        reader.poll(0.5)
    finally:
        second.stop(timeout_s=30)
        watch.close()
    for execution in wanted:
        assert reader.outcomes.statuses(execution).count("SUCCEEDED") == 1, execution
    assert_each_dependent_ran_once_after_its_upstreams(cluster, prefix, keys)
    ended = [s for s, _, _ in watch.decoded("signal", prefix) if s["kind"] == "UPSTREAM_ENDED"]
    edges = sum(len(ups) for ups in SIX_NODES.values())
    assert 0 < len(ended) < edges * len(keys), "some ends went through the topic, not all"
