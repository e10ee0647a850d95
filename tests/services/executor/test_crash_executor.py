"""Executor processes killed, stopped, resumed and terminated against the real broker.

Each executor is a ``kafkron executor`` child process. Handler effects are counted
in a file (``record_effect`` in ``test_service_kit``), results read back ``read_committed``.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from streams.codec import RecordKind
from streams.settings import KafkaSettings
from streams.topics import Priority, TopicNames

from .test_service_kit import (
    CODEC,
    ExecutorProcess,
    TopicReader,
    due_event,
    effects,
    finals,
    now_ms,
    produce_due,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[list[ExecutorProcess]]:
    started: list[ExecutorProcess] = []
    yield started
    for process in started:
        process.stop()


@pytest.fixture
def reader(topics: KafkaSettings) -> Iterator[TopicReader]:
    outputs = TopicReader(topics, ["job-results", "dlq"])
    yield outputs
    outputs.close()


def spawn(
    processes: list[ExecutorProcess], topics: KafkaSettings, worker: str, tmp_path: Path, **env: str
) -> ExecutorProcess:
    process = ExecutorProcess(topics, worker, tmp_path, **env).start()
    processes.append(process)
    return process


def owners(topics: KafkaSettings, reader: TopicReader, round_id: str) -> dict[int, str]:
    """Run one canary per partition; returns partition -> worker id that ran it."""
    events = [due_event(f"canary-{round_id}-{p}") for p in range(topics.partitions)]
    for p, event in enumerate(events):
        produce_due(topics, [event], partition=p)
    ids = {e["execution_id"]: p for p, e in enumerate(events)}
    reader.wait_for(lambda r: all(finals(r.results())[i] for i in ids), 90, "canaries")
    return {
        ids[r["execution_id"]]: r["worker_id"]
        for r in reader.results()
        if r["execution_id"] in ids and r["status"] == "SUCCEEDED"
    }


def stable_owners(topics: KafkaSettings, reader: TopicReader, workers: set[str]) -> dict[int, str]:
    """Canary rounds until two in a row agree and every worker in ``workers`` owns some."""
    previous: dict[int, str] = {}
    for attempt in range(30):
        current = owners(topics, reader, f"{attempt}-{now_ms()}")
        if current == previous and set(current.values()) == workers:
            return current
        previous = current
        time.sleep(0.5)
    raise AssertionError(f"assignment never settled: {previous}")


def test_sigkill_mid_run_reruns_it_but_never_a_succeeded_execution(
    topics: KafkaSettings, reader: TopicReader, processes: list[ExecutorProcess], tmp_path: Path
) -> None:
    first = spawn(processes, topics, "crash-0", tmp_path)
    # One job, so one partition: the slow run holds the committed position below the fast
    # ones, which succeed (results committed) above it and are delivered again after the kill.
    slow = due_event("one-job", 1, handler="tests.effect", payload=b"60")
    fast = [due_event("one-job", 2 + i, handler="tests.effect") for i in range(20)]
    landed = produce_due(topics, [slow, *fast])
    assert len({(t, p) for t, p, _ in landed}) == 1
    reader.wait_for(lambda r: len(finals(r.results())) == 20, 60, "the 20 fast runs")
    assert effects(first.effects_path)[("start", slow["execution_id"])] == 1
    first.kill()
    second = spawn(processes, topics, "crash-1", tmp_path)  # fresh state dir: dedup restores
    reader.wait_for(lambda r: finals(r.results())[slow["execution_id"]] == 1, 90, "the rerun")
    reader.poll(1.0)
    counted = effects(first.effects_path)
    assert counted[("start", slow["execution_id"])] == 2  # ran again, same execution id
    assert counted[("done", slow["execution_id"])] == 1
    for event in fast:
        assert counted[("start", event["execution_id"])] == 1, event["execution_id"]
    results = reader.results()
    assert set(finals(results).values()) == {1}
    (rerun,) = [r for r in results if r["status"] == "SUCCEEDED"
                and r["execution_id"] == slow["execution_id"]]  # fmt: skip
    assert rerun["worker_id"] == "crash-1" and second.alive()
    second.stop()  # logs its counters: the 20 fast ones were delivered again and skipped
    assert "started 1, succeeded 1," in second.log() and "skipped 20," in second.log()


def test_sigterm_lets_runs_finish_commits_and_exits(
    topics: KafkaSettings, reader: TopicReader, processes: list[ExecutorProcess], tmp_path: Path
) -> None:
    executor = spawn(processes, topics, "term-0", tmp_path)
    slow = [due_event(f"term-{i}", handler="tests.effect", payload=b"2") for i in range(8)]
    produce_due(topics, slow)
    reader.wait_for(
        lambda r: sum(x["status"] == "STARTED" for x in r.results()) == 8, 60, "8 starts"
    )
    executor.signal(signal.SIGTERM)
    assert executor.process is not None
    assert executor.process.wait(30) == 0
    reader.wait_for(lambda r: len(finals(r.results())) == 8, 10, "8 results")
    assert {r["worker_id"] for r in reader.results()} == {"term-0"}
    assert "stopping: consumed 8, started 8, succeeded 8" in executor.log()


def test_a_stopped_executor_is_fenced_and_its_results_never_show(
    topics: KafkaSettings, reader: TopicReader, processes: list[ExecutorProcess], tmp_path: Path
) -> None:
    stopped = spawn(processes, topics, "fence-a", tmp_path)
    owners(topics, reader, "warmup")
    spawn(processes, topics, "fence-b", tmp_path)
    mapping = stable_owners(topics, reader, {"fence-a", "fence-b"})
    slow = [due_event(f"slow-{p}", handler="tests.effect", payload=b"3")
            for p in range(topics.partitions)]  # fmt: skip
    for p, event in enumerate(slow):
        produce_due(topics, [event], partition=p)
    ids = {e["execution_id"] for e in slow}
    reader.wait_for(
        lambda r: {x["execution_id"] for x in r.results() if x["status"] == "STARTED"} >= ids,
        30, "every slow run started",
    )  # fmt: skip
    # Steady traffic: the stopped executor most likely holds an open transaction with results.
    ticks = Ticker(topics, "fence")
    try:  # a failure must not leave the ticker producing into the next test's broker
        time.sleep(0.5)
        stopped.signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        mine = {slow[p]["execution_id"] for p, w in mapping.items() if w == "fence-a"}
        try:
            reader.wait_for(lambda r: all(finals(r.results())[i] for i in ids), 90, "takeover")
            time.sleep(max(0.0, stopped_at + 12 - time.monotonic()))  # past the txn timeout
        finally:
            stopped.signal(signal.SIGCONT)
        time.sleep(6)  # it wakes up, its runs finish, it tries to commit and finds out
    finally:
        ticks.stop()
    owners(topics, reader, "after")  # everything still runs, on both
    late = TopicReader(topics, ["job-results"], isolation="read_uncommitted")
    late.wait_for(lambda r: len(r.records) >= len(reader.results()), 30, "uncommitted results")
    late.close()
    results = reader.results()
    assert set(finals(results).values()) == {1}  # slow runs, ticks, canaries: once each
    assert all(finals(results)[t] == 1 for t in ticks.execution_ids)
    succeeded = {r["execution_id"]: r["worker_id"] for r in results if r["status"] == "SUCCEEDED"}
    assert all(succeeded[i] == "fence-b" for i in mine), succeeded
    written = [CODEC.decode(RecordKind.EXECUTION_RESULT, v) for *_, v in late.records]
    invisible = [
        r for r in written
        if r["worker_id"] == "fence-a" and r["status"] == "SUCCEEDED"
        and succeeded.get(r["execution_id"], "fence-a") != "fence-a"
    ]  # fmt: skip
    log = stopped.log()
    assert "lost" in log or "transaction aborted" in log, log[-3000:]
    assert stopped.alive(), "the fenced executor must recover, not crash"
    print(
        f"fenced executor: {len(invisible)} SUCCEEDED it wrote stayed invisible (aborted); "
        f"partitions reported lost: {'lost' in log}; commit refused: "
        f"{'transaction aborted' in log}"
    )


class Ticker:
    """Produces a no-op DueEvent to every partition every 100 ms, on a thread."""

    def __init__(self, topics: KafkaSettings, name: str) -> None:
        self.execution_ids: list[str] = []
        self._topics, self._name = topics, name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        producer = Producer(self._topics.client_config(**{"enable.idempotence": True}))
        topic = TopicNames(self._topics.namespace).due(Priority.NORMAL)
        i = 0
        while not self._stop.is_set():
            for p in range(self._topics.partitions):
                event = due_event(f"{self._name}-tick-{p}-{i}")
                value = CODEC.encode(RecordKind.DUE_EVENT, event)
                producer.produce(topic, value, event["job_id"].encode(), partition=p)
                self.execution_ids.append(event["execution_id"])
            producer.poll(0)
            i += 1
            time.sleep(0.1)
        assert producer.flush(30) == 0

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def test_failover_time_after_sigkill(
    topics: KafkaSettings, reader: TopicReader, processes: list[ExecutorProcess], tmp_path: Path
) -> None:
    victim = spawn(processes, topics, "fail-a", tmp_path)
    owners(topics, reader, "warmup")
    spawn(processes, topics, "fail-b", tmp_path)
    mapping = stable_owners(topics, reader, {"fail-a", "fail-b"})
    ticks = Ticker(topics, "fail")
    try:
        time.sleep(1.0)
        killed_at = now_ms()
        victim.kill()
        orphaned = [p for p, w in mapping.items() if w == "fail-a"]

        def resumed(r: TopicReader) -> bool:
            return all(first_run_after(r, p, killed_at) is not None for p in orphaned)

        reader.wait_for(resumed, 90, "the orphaned partitions to run again")
    finally:
        ticks.stop()
    gaps = {p: (first_run_after(reader, p, killed_at) or 0) - killed_at for p in orphaned}
    print(f"failover after SIGKILL: partitions {orphaned} ran again after {gaps} ms")
    assert max(gaps.values()) < 6_000 + 15_000  # session timeout + restore and slack


def first_run_after(reader: TopicReader, partition: int, after_ms: int) -> int | None:
    prefix = f"fail-tick-{partition}-"
    # Any result says when its run started: a quick run has no STARTED, only its end.
    starts = [r["started_at_ms"] for r in reader.results()
              if r["worker_id"] == "fail-b" and r["job_id"].startswith(prefix)
              and r["started_at_ms"] > after_ms]  # fmt: skip
    return min(starts, default=None)


def test_every_execution_succeeds_exactly_once_across_a_kill_and_restart(
    topics: KafkaSettings, reader: TopicReader, processes: list[ExecutorProcess], tmp_path: Path
) -> None:
    count = 20_000
    victim = spawn(processes, topics, "e2e-a", tmp_path)
    spawn(processes, topics, "e2e-b", tmp_path)
    priorities = ("HIGH", "NORMAL", "LOW")
    events = [due_event(f"e2e-{i}", handler="tests.effect", priority=priorities[i % 3])
              for i in range(count)]  # fmt: skip
    produce_due(topics, events)
    reader.wait_for(lambda r: len(finals(r.results())) >= count // 3, 120, "a third done")
    victim.kill()
    time.sleep(1.0)
    spawn(processes, topics, "e2e-a", tmp_path)  # same worker id: aborts the open transaction
    started = time.monotonic()
    reader.wait_for(lambda r: len(finals(r.results())) >= count, 300, "every execution")
    reader.poll(1.0)
    done = finals(reader.results())
    assert len(done) == count and set(done.values()) == {1}
    counted = effects(victim.effects_path)
    runs = [counted[("start", e["execution_id"])] for e in events]
    assert min(runs) == 1
    print(
        f"e2e: {count} executions, each SUCCEEDED once; {sum(n > 1 for n in runs)} ran twice "
        f"(in flight at the kill); finished {time.monotonic() - started:.1f}s after restart"
    )
