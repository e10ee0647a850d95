"""The executor loop against the real broker, in-process: outcomes, retries, lanes, dedup.

Every assertion reads the output topics back ``read_committed``: only what a committed
transaction carried counts.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bench.herd import job_record, produce_jobs
from services import cli
from services.executor.backoff import RetryPolicy, retry_delay_ms
from services.executor.commit import CommitAbortedError, Committer
from services.executor.context import HandlerContext
from services.executor.dedup import DedupStore
from services.executor.exceptions import NonRetryableError, RetryableError
from services.executor.lanes import LaneSelector
from services.executor.offsets import OffsetTracker
from services.executor.outcomes import started_result
from services.executor.service import build_registry
from services.timer.service import build_processor
from services.timer.settings import TimerSettings
from streams.codec import RecordKind
from streams.kafka.consumer import create_group_consumer
from streams.kafka.producer import TransactionalProducer
from streams.settings import KafkaSettings
from streams.topics import Priority, TopicNames

from .test_service_kit import (
    CODEC,
    ExecutorThread,
    RetryMover,
    TopicReader,
    due_event,
    executor_settings,
    finals,
    now_ms,
    produce,
    produce_due,
)

pytestmark = pytest.mark.kafka
OUTPUTS = ["job-results", "retry", "dlq"]


class Calls:
    """Test handlers that record every call (thread-safe; the executor runs on a thread)."""

    def __init__(self) -> None:
        self.calls: list[HandlerContext] = []
        self.gate = threading.Event()
        self.fail_switch = True
        self._lock = threading.Lock()

    def _note(self, ctx: HandlerContext) -> None:
        with self._lock:
            self.calls.append(ctx)

    async def record(self, ctx: HandlerContext) -> None:
        self._note(ctx)

    async def wait_for_gate(self, ctx: HandlerContext) -> None:
        self._note(ctx)
        while not self.gate.is_set():
            await asyncio.sleep(0.01)

    async def always_retryable(self, ctx: HandlerContext) -> None:
        self._note(ctx)
        raise RetryableError(f"attempt {ctx.attempt} failed")

    async def switch(self, ctx: HandlerContext) -> None:
        self._note(ctx)
        if self.fail_switch:
            raise NonRetryableError("switched off")

    def count(self, execution_id: str) -> int:
        return sum(1 for c in self.calls if c.execution_id == execution_id)


def start_executor(
    topics: KafkaSettings, calls: Calls, worker: str = "w0", **fields: Any
) -> ExecutorThread:
    settings = executor_settings(topics, worker, **fields)
    registry = build_registry(settings)
    registry.register("tests.record", calls.record)
    registry.register("tests.gate", calls.wait_for_gate)
    registry.register("tests.retryable", calls.always_retryable)
    registry.register("tests.switch", calls.switch)
    executor = ExecutorThread(settings, registry).start()
    executor.wait_ready(topics.partitions)
    return executor


@pytest.fixture
def executor(topics: KafkaSettings, calls: Calls) -> Iterator[ExecutorThread]:
    running = start_executor(topics, calls)
    yield running
    running.stop()


def by_status(results: list[dict[str, Any]], execution_id: str) -> list[tuple[int, str]]:
    return [(r["attempt"], r["status"]) for r in results if r["execution_id"] == execution_id]


def outcomes(results: list[dict[str, Any]], execution_id: str) -> list[tuple[int, str]]:
    """``by_status`` without STARTED, which a run has only if it still waited at a commit."""
    return [s for s in by_status(results, execution_id) if s[1] != "STARTED"]


def test_a_run_that_ends_before_the_commit_has_only_its_final_result(
    topics: KafkaSettings, executor: ExecutorThread, reader: TopicReader, calls: Calls
) -> None:
    events = [due_event(f"ok-{i}", handler="tests.record") for i in range(6)]
    produce_due(topics, events)
    reader.wait_for(lambda r: len(finals(r.results())) == 6, what="6 successes")
    results = reader.results()
    for e in events:
        assert by_status(results, e["execution_id"]) == [(1, "SUCCEEDED")]
        assert calls.count(e["execution_id"]) == 1
    assert {r["worker_id"] for r in results} == {"w0"}
    assert all(r["started_at_ms"] <= r["finished_at_ms"] <= r["recorded_at_ms"] for r in results)


def test_a_run_still_waiting_at_a_commit_has_started_then_its_final_result(
    topics: KafkaSettings, executor: ExecutorThread, reader: TopicReader
) -> None:
    """A 1 s run spans several 100 ms commits: its STARTED is committed while it runs."""
    slow = due_event("slow", handler="examples.sleep", payload=b"1")
    produce_due(topics, [slow])
    reader.wait_for(lambda r: r.results() != [], 30, "the STARTED")
    (started,) = reader.results()
    assert started["status"] == "STARTED" and started["finished_at_ms"] is None
    reader.wait_for(lambda r: len(finals(r.results())) == 1, 30, "the success")
    results = reader.results()
    assert by_status(results, slow["execution_id"]) == [(1, "STARTED"), (1, "SUCCEEDED")]
    succeeded = results[1]
    assert succeeded["started_at_ms"] == started["started_at_ms"]
    assert succeeded["finished_at_ms"] - succeeded["started_at_ms"] >= 1000


def test_results_commit_once_the_executor_is_idle_not_at_the_interval(
    topics: KafkaSettings, reader: TopicReader, calls: Calls
) -> None:
    """With a 30 s commit interval, runs that ended wait for it while idle commits are off
    (``idle_commit_ms`` 0); with them on, they commit as soon as nothing else runs."""
    long_interval = {"commit_interval_ms": 30_000, "transaction_timeout_ms": 60_000}
    held = [due_event(f"held-{i}", handler="tests.record") for i in range(5)]
    soon = [due_event(f"soon-{i}", handler="tests.record") for i in range(5)]

    def ran(events: list[dict[str, Any]]) -> bool:
        return all(calls.count(e["execution_id"]) == 1 for e in events)

    def committed(events: list[dict[str, Any]]) -> set[str]:
        ids = {e["execution_id"] for e in events}
        return {r["execution_id"] for r in reader.results() if r["execution_id"] in ids}

    off = start_executor(topics, calls, "w-off", idle_commit_ms=0, **long_interval)
    try:
        produce_due(topics, held)
        deadline = time.monotonic() + 30
        while not ran(held):
            assert time.monotonic() < deadline, "the runs did not happen"
            time.sleep(0.05)
        until = time.monotonic() + 1.5
        while time.monotonic() < until:
            reader.poll()
        assert committed(held) == set()  # ran, but the interval is 30 s away
    finally:
        off.stop()  # its drain commits them
    on = start_executor(topics, calls, "w-on", idle_commit_ms=20, **long_interval)
    try:
        produce_due(topics, soon)
        reader.wait_for(lambda r: len(committed(soon)) == 5, 15, "the results before 30 s")
    finally:
        on.stop()


def test_failure_then_success_through_the_real_timer(
    topics: KafkaSettings, executor: ExecutorThread, reader: TopicReader
) -> None:
    timer = build_processor(TimerSettings(kafka=topics, instance_id="timer-t0"))
    stop = threading.Event()
    thread = threading.Thread(target=timer.run, args=(stop,), daemon=True)
    thread.start()
    try:
        created = now_ms()
        retry = {"max_attempts": 3, "initial_backoff_ms": 1000, "multiplier": 2.0,
                 "max_backoff_ms": 60_000, "jitter_ratio": 0.1}  # fmt: skip
        job = job_record("flaky-job", created, run_at_ms=created + 1000,
                         handler="examples.flaky", retry=retry)  # fmt: skip
        produce_jobs(topics, [job])
        reader.wait_for(lambda r: len(finals(r.results())) == 1, 60, "the flaky job to succeed")
    finally:
        stop.set()
        thread.join(30)
    execution_id = f"flaky-job@{created + 1000}"
    results = [r for r in reader.results() if r["execution_id"] == execution_id]
    results = [r for r in results if r["status"] != "STARTED"]
    assert [(r["attempt"], r["status"]) for r in results] == [(1, "FAILED"), (2, "SUCCEEDED")]
    failed, retried = results
    delay = retry_delay_ms(RetryPolicy.from_record(retry), 1, execution_id)
    assert failed["next_attempt_at_ms"] == failed["recorded_at_ms"] + delay
    assert 900 <= delay <= 1100
    assert retried["started_at_ms"] >= failed["next_attempt_at_ms"]  # the timer held it
    assert retried["trigger"] == "RETRY"
    requests = reader.decoded("retry", RecordKind.RETRY_REQUEST)
    assert [q["due"]["attempt"] for q in requests] == [2]


def test_dead_letter_after_the_last_attempt(
    topics: KafkaSettings, executor: ExecutorThread, reader: TopicReader, calls: Calls
) -> None:
    mover = RetryMover(topics)
    try:
        event = due_event("doomed", handler="tests.retryable", max_attempts=3,
                          initial_backoff_ms=400, multiplier=2.0)  # fmt: skip
        produce_due(topics, [event])
        reader.wait_for(lambda r: len(finals(r.results())) == 1, 60, "the dead letter")
    finally:
        mover.close()
    results = [r for r in reader.results() if r["execution_id"] == event["execution_id"]]
    ends = [r for r in results if r["status"] != "STARTED"]
    assert [(r["attempt"], r["status"]) for r in ends] == [
        (1, "FAILED"), (2, "FAILED"), (3, "DEAD_LETTER"),
    ]  # fmt: skip
    failures = [r for r in results if r["status"] == "FAILED"]
    starts = [r["started_at_ms"] for r in ends]
    gaps = [f["next_attempt_at_ms"] - f["recorded_at_ms"] for f in failures]
    assert 360 <= gaps[0] <= 440 and 720 <= gaps[1] <= 880  # 400 ms, then 800 ms, +/- 10 %
    assert starts[1] >= failures[0]["next_attempt_at_ms"]
    assert starts[2] >= failures[1]["next_attempt_at_ms"]
    (dead,) = reader.decoded("dlq", RecordKind.DEAD_LETTER)
    assert dead["kind"] == "EXECUTION" and dead["last_error"] == "RetryableError: attempt 3 failed"
    assert [h["attempt"] for h in dead["execution"]["history"]] == [1, 2, 3]
    assert calls.count(event["execution_id"]) == 3


def test_timeout_is_reported_timed_out(
    topics: KafkaSettings, executor: ExecutorThread, reader: TopicReader
) -> None:
    event = due_event("slowpoke", handler="examples.sleep", payload=b"5", timeout_ms=300)
    produce_due(topics, [event])
    reader.wait_for(lambda r: any(x["status"] == "TIMED_OUT" for x in r.results()), 30, "TIMED_OUT")
    (timed_out,) = [r for r in reader.results() if r["status"] == "TIMED_OUT"]
    assert timed_out["attempt"] == 1 and timed_out["next_attempt_at_ms"] is not None
    assert 250 <= timed_out["finished_at_ms"] - timed_out["started_at_ms"] < 2000
    assert "did not finish within 0.3s" in timed_out["error"]


def test_unknown_handler_and_poison_record_do_not_stop_the_executor(
    topics: KafkaSettings, executor: ExecutorThread, reader: TopicReader
) -> None:
    names = TopicNames(topics.namespace)
    unknown = due_event("ghost", handler="nope.missing")
    after_poison = due_event("after-poison")
    value = CODEC.encode(RecordKind.DUE_EVENT, after_poison)
    landed = produce(
        topics,
        [
            (names.due(Priority.NORMAL), b"after-poison", b"\xc3\x01garbage!", 2),
            (names.due(Priority.NORMAL), b"after-poison", value, 2),
        ],
    )
    produce_due(topics, [unknown])
    reader.wait_for(lambda r: len(finals(r.results())) == 2, 30, "two final results")
    results = reader.results()
    assert by_status(results, after_poison["execution_id"]) == [(1, "SUCCEEDED")]
    assert by_status(results, unknown["execution_id"]) == [(1, "DEAD_LETTER")]
    (ghost,) = [r for r in results if r["execution_id"] == unknown["execution_id"]]
    assert "no handler named 'nope.missing'" in ghost["error"]
    reader.wait_for(lambda r: len(r.decoded("dlq", RecordKind.DEAD_LETTER)) == 2, 10, "dlq")
    kinds = {d["kind"]: d for d in reader.decoded("dlq", RecordKind.DEAD_LETTER)}
    poison = kinds["UNDECODABLE"]
    assert (poison["source_topic"], poison["source_partition"], poison["source_offset"]) == (
        landed[0]
    )
    assert poison["raw_value"] == b"\xc3\x01garbage!" and poison["raw_key"] == b"after-poison"
    assert kinds["EXECUTION"]["execution"]["execution_id"] == unknown["execution_id"]
    committed = committed_offsets(topics, [(landed[0][0], 2)])
    assert committed[(landed[0][0], 2)] == landed[1][2] + 1


def committed_offsets(topics: KafkaSettings, tps: list[tuple[str, int]]) -> dict[Any, int]:
    """The executor group's committed positions (read without joining the group)."""
    deadline = time.monotonic() + 10
    consumer = Consumer(topics.client_config(**{"group.id": f"{topics.namespace}executor"}))
    try:
        while True:
            got = consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=10)
            positions = {(tp.topic, tp.partition): tp.offset for tp in got}
            if all(o >= 0 for o in positions.values()) or time.monotonic() > deadline:
                return positions
            time.sleep(0.2)
    finally:
        consumer.close()


def test_priority_order_and_starvation_bound(
    topics: KafkaSettings, reader: TopicReader, calls: Calls
) -> None:
    executor = start_executor(topics, calls, max_in_flight=1)
    try:
        produce_due(topics, [due_event("gate", handler="tests.gate", priority="HIGH")])
        deadline = time.monotonic() + 30
        while not calls.calls:
            assert time.monotonic() < deadline, "the gate never ran"
            time.sleep(0.02)
        per_lane = 40
        events = [
            due_event(f"{lane.value.lower()}-{i}", handler="tests.record", priority=lane.value)
            for i in range(per_lane)
            for lane in Priority
        ]
        produce_due(topics, events)
        while executor.loop.buffered < len(events):  # all waiting behind the gate
            assert time.monotonic() < deadline, executor.loop.buffered
            time.sleep(0.02)
        calls.gate.set()
        reader.wait_for(lambda r: len(finals(r.results())) == len(events) + 1, 60, "all runs")
    finally:
        executor.stop()
    order = [ctx.priority for ctx in calls.calls[1:]]
    # Exactly what the selector picks from full lanes: priority with the starvation bound.
    selector, left = LaneSelector(), Counter(dict.fromkeys(Priority, per_lane))
    expected = []
    for _ in range(len(events)):
        lane = selector.pick([p for p in Priority if left[p]])
        assert lane is not None
        expected.append(lane)
        left[lane] -= 1
    assert order == expected
    assert order[:2] == [Priority.HIGH, Priority.HIGH]
    assert order.index(Priority.LOW) <= 32
    last_high = max(i for i, p in enumerate(order) if p is Priority.HIGH)
    assert last_high < max(i for i, p in enumerate(order) if p is Priority.LOW)


def test_a_full_lane_stops_consuming_and_resumes_without_a_pause(
    topics: KafkaSettings, reader: TopicReader, calls: Calls
) -> None:
    """One lane with work: a full lane stops consume() (bounded buffer) and never pauses
    its partitions, which would drop librdkafka's prefetch of them."""
    executor = start_executor(topics, calls, lane_buffer_size=8, consume_batch_size=8)
    seen: list[int] = []

    async def watch(ctx: HandlerContext) -> None:
        seen.append(executor.loop.buffered)
        await asyncio.sleep(0.002)

    executor.registry.register("tests.watch", watch)
    try:
        events = [due_event(f"low-{i}", handler="tests.watch", priority="LOW") for i in range(120)]
        produce_due(topics, events)
        reader.wait_for(lambda r: len(finals(r.results())) == 120, 60, "120 runs")
    finally:
        executor.stop()
    assert len(seen) == 120 and max(seen) <= 8 + 8  # capacity + one consumer batch
    assert executor.loop.stats.lane_pauses == 0


def test_a_full_lane_is_paused_when_a_high_record_waits_behind_it(
    topics: KafkaSettings, reader: TopicReader, calls: Calls
) -> None:
    """A full LOW lane stops consuming without a pause while nothing else waits; once a HIGH
    record is fetched behind librdkafka's prefetch of LOW records, the probe sees it and the
    LOW partitions are paused, so it runs next. The lane drains to half and refills every
    40 ms here, so the pause_after bound (minutes) never pauses: without the probe the HIGH
    record ran 148th of 151."""
    executor = start_executor(
        topics, calls, lane_buffer_size=4, consume_batch_size=4, max_in_flight=1,
        lane_pause_after_ms=600_000,
    )  # fmt: skip
    order: list[str] = []

    async def slow(ctx: HandlerContext) -> None:
        await asyncio.sleep(0.02)
        order.append(ctx.job_id)

    executor.registry.register("tests.slow", slow)
    lows = 150  # 3 s of runs, one at a time
    try:
        produce_due(
            topics,
            [due_event(f"low-{i}", handler="tests.slow", priority="LOW") for i in range(lows)],
        )
        deadline = time.monotonic() + 30
        while len(order) < 10:
            assert time.monotonic() < deadline, "the LOW runs never started"
            time.sleep(0.01)
        produce_due(topics, [due_event("high", handler="tests.slow", priority="HIGH")])
        reader.wait_for(lambda r: len(finals(r.results())) == lows + 1, 60, "all runs")
    finally:
        executor.stop()
    # Produced after 10 LOW runs; fetched within a fetch wait (0.5 s, 25 runs), then paused
    # past: measured 39th-40th on an idle machine, compiled or not, and 63rd once under the
    # whole suite's load (a slow fetch). Without the probe it runs 148th of 151.
    assert order.index("high") < 10 + 90, order.index("high")
    assert executor.loop.stats.lane_pauses >= 1


def test_redelivered_final_execution_is_skipped_and_replay_runs_once(
    topics: KafkaSettings,
    executor: ExecutorThread,
    reader: TopicReader,
    calls: Calls,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    done = due_event("twice", handler="tests.record")
    produce_due(topics, [done])
    reader.wait_for(lambda r: len(finals(r.results())) == 1, 30, "the first run")
    produce_due(topics, [done])  # the same attempt again: already SUCCEEDED
    dead = due_event("revived", handler="tests.switch")
    produce_due(topics, [dead])
    reader.wait_for(lambda r: len(finals(r.results())) == 2, 30, "the dead letter")
    for name, value in (("BOOTSTRAP_SERVERS", topics.bootstrap_servers),
                        ("NAMESPACE", topics.namespace), ("PARTITIONS", "4")):  # fmt: skip
        monkeypatch.setenv(f"KAFKRON_{name}", value)
    assert cli.main(["dlq", "list"]) == 0
    listing = capsys.readouterr().out
    assert f"EXECUTION {dead['execution_id']} handler=tests.switch attempts=1" in listing
    calls.fail_switch = False
    assert cli.main(["dlq", "replay", dead["execution_id"]]) == 0
    reader.wait_for(lambda r: finals(r.results())[dead["execution_id"]] == 2, 30, "the replay")
    replays = TopicReader(topics, ["due.normal"])
    replays.wait_for(lambda r: len(r.records) == 4, 10, "the replay DueEvent")
    replay_value = replays.records[-1][4]
    replays.close()
    assert CODEC.decode(RecordKind.DUE_EVENT, replay_value)["trigger"] == "REPLAY"
    produce(topics, [(r[0], r[3], r[4], r[1]) for r in [replays.records[-1]]])  # again
    produce_due(topics, [due_event("marker", handler="tests.record")])
    reader.wait_for(lambda r: len(finals(r.results())) == 3, 30, "the marker")
    results = reader.results()
    assert outcomes(results, done["execution_id"]) == [(1, "SUCCEEDED")]
    assert calls.count(done["execution_id"]) == 1
    revived = [r for r in results if r["execution_id"] == dead["execution_id"]]
    assert [(r["status"], r["trigger"]) for r in revived if r["status"] != "STARTED"] == [
        ("DEAD_LETTER", "SCHEDULE"), ("SUCCEEDED", "REPLAY"),
    ]  # fmt: skip
    assert calls.count(dead["execution_id"]) == 2  # the replay delivered twice ran once
    assert executor.loop.stats.skipped == 2


@pytest.mark.parametrize("grace_s", [8.0, 0.0])
def test_revoke_waits_for_runs_then_hands_partitions_over(
    topics: KafkaSettings, reader: TopicReader, calls: Calls, grace_s: float
) -> None:
    first = start_executor(topics, calls, "w-a", revoke_grace_s=grace_s)
    second = None
    try:
        # Runs last longer than the second executor takes to join: the revoke finds them.
        events = [due_event(f"slow-{i}", handler="examples.sleep", payload=b"4")
                  for i in range(16)]  # fmt: skip
        produce_due(topics, events)
        reader.wait_for(
            lambda r: sum(x["status"] == "STARTED" for x in r.results()) == 16, 30, "16 starts"
        )
        second = ExecutorThread(first.settings.model_copy(update={"worker_id": "w-b", "kafka":
            topics.model_copy(update={"state_dir": topics.state_dir / "w-b"})}),
            first.registry).start()  # fmt: skip
        reader.wait_for(lambda r: len(finals(r.results())) == 16, 60, "16 successes")
        deadline = time.monotonic() + 30
        while not second.loop.ready_partitions():
            assert time.monotonic() < deadline, "the second executor got no partitions"
            time.sleep(0.05)
    finally:
        first.stop()
        if second is not None:
            second.stop()
    results = reader.results()
    assert set(finals(results).values()) == {1}
    starts = Counter(r["execution_id"] for r in results if r["status"] == "STARTED")
    if grace_s:
        assert set(starts.values()) == {1}, starts  # finished within the grace: no rerun
        assert first.loop.stats.dropped == 0
    else:
        rerun = [e for e, n in starts.items() if n == 2]
        assert rerun and first.loop.stats.dropped == len(rerun)
        winners = {r["execution_id"]: r["worker_id"] for r in results
                   if r["status"] == "SUCCEEDED"}  # fmt: skip
        assert all(winners[e] == "w-b" for e in rerun)


def test_a_member_that_lost_its_partitions_cannot_commit(
    topics: KafkaSettings, reader: TopicReader, tmp_path: Path
) -> None:
    """The commit's fence: positions go in with group metadata the broker checks."""
    names = TopicNames(topics.namespace)
    group = f"{topics.namespace}executor"
    tp = (names.due(Priority.NORMAL), 0)
    producer = TransactionalProducer(topics, f"{group}.fence-test")
    producer.init()
    dedup = DedupStore(group, tmp_path, names.changelog(group, "dedup"))

    def commit_one_result(job_id: str, metadata: object) -> None:
        offsets: OffsetTracker[tuple[str, int]] = OffsetTracker()
        offsets.started(tp, 0)
        offsets.finished(tp, 0)
        result = started_result(due_event(job_id), "fence-test", now_ms())
        producer.produce(names.job_results, job_id.encode(),
                         CODEC.encode(RecordKind.EXECUTION_RESULT, result))  # fmt: skip
        Committer(producer, lambda: metadata, offsets, dedup).commit([tp])

    live = None
    try:
        stale, leaving = member(topics, group)
        leaving.close()  # its member left the group: the metadata is stale
        with pytest.raises(CommitAbortedError):
            commit_one_result("from-a-stale-member", stale)
        current, live = member(topics, group)
        commit_one_result("from-a-live-member", current)
    finally:
        producer.close()
        dedup.close()
        if live is not None:
            live.close()
    reader.wait_for(lambda r: len(r.results()) == 1, 20, "the live member's result")
    reader.poll(1.0)
    assert [r["job_id"] for r in reader.results()] == ["from-a-live-member"]


def member(topics: KafkaSettings, group: str) -> tuple[object, Consumer]:
    """A member that got partitions of the due topics, and its group metadata."""
    names = TopicNames(topics.namespace)
    consumer = create_group_consumer(topics, group)
    consumer.subscribe([names.due(p) for p in Priority])
    deadline = time.monotonic() + 30
    while not consumer.assignment():
        assert time.monotonic() < deadline, "no assignment"
        consumer.consume(10, 0.2)
    return consumer.consumer_group_metadata(), consumer


def test_kafka_route_produces_inside_the_executors_transaction(
    topics: KafkaSettings, reader: TopicReader, calls: Calls
) -> None:
    notify = f"{topics.namespace}notify"
    admin = AdminClient(topics.client_config())
    admin.create_topics([NewTopic(notify, num_partitions=1, replication_factor=1)])[notify].result()
    executor = start_executor(
        topics, calls, kafka_routes={"routes.notify": notify}, allowed_kafka_topics=[notify]
    )
    try:
        event = due_event("notifier", handler="routes.notify", payload=b"hello")
        produce_due(topics, [event])
        reader.wait_for(lambda r: len(finals(r.results())) == 1, 30, "the kafka route")
        out = Consumer(topics.client_config(**{"group.id": "notify-reader",
                                                "isolation.level": "read_committed"}))  # fmt: skip
        out.assign([TopicPartition(notify, 0, 0)])
        messages = [m for m in out.consume(10, 5.0) if m.error() is None]
        out.close()
    finally:
        executor.stop()
    assert [(m.key(), m.value()) for m in messages] == [(event["execution_id"].encode(), b"hello")]
    assert by_status(reader.results(), event["execution_id"])[-1] == (1, "SUCCEEDED")


def test_stuck_sync_handlers_are_timed_out_then_sync_work_stops_until_they_return(
    topics: KafkaSettings, reader: TopicReader, calls: Calls
) -> None:
    """A hanging sync handler never blocks the executor beyond its timeout; once
    ``sync_max_stuck_threads`` hang, sync attempts fail at once (retryable, saying why)
    while async ones run on; when the threads return, sync work resumes."""
    release = threading.Event()
    ran: list[str] = []

    def hang(ctx: HandlerContext) -> None:
        release.wait(60)

    executor = start_executor(topics, calls, sync_pool_size=2, sync_max_stuck_threads=2)
    executor.registry.register("tests.hang", hang)
    executor.registry.register("tests.sync", lambda ctx: ran.append(ctx.execution_id))
    try:
        hung = [due_event(f"hang-{i}", handler="tests.hang", timeout_ms=300, max_attempts=1)
                for i in range(2)]  # fmt: skip
        began = time.monotonic()
        produce_due(topics, hung)
        reader.wait_for(lambda r: len(finals(r.results())) == 2, 30, "two dead hung runs")
        assert time.monotonic() - began < 15
        assert not executor.loop._pool.healthy  # two threads hang: the limit
        refused = due_event("sync-refused", handler="tests.sync", max_attempts=1)
        fine = due_event("async-fine", handler="tests.record")
        produce_due(topics, [refused, fine])
        reader.wait_for(lambda r: len(finals(r.results())) == 4, 30, "refused and fine")
        release.set()
        deadline = time.monotonic() + 30
        while not executor.loop._pool.healthy:
            assert time.monotonic() < deadline, "the hung threads never returned"
            time.sleep(0.05)
        later = due_event("sync-later", handler="tests.sync")
        produce_due(topics, [later])
        reader.wait_for(lambda r: len(finals(r.results())) == 5, 30, "the later sync run")
    finally:
        release.set()
        stats = executor.stop()
    results = reader.results()
    for event in hung:
        (timed_out,) = [r for r in results if r["execution_id"] == event["execution_id"]
                        and r["status"] == "DEAD_LETTER"]  # fmt: skip
        assert "did not finish within 0.3s" in timed_out["error"]
        assert "abandoned" in timed_out["error"]
    assert by_status(results, refused["execution_id"]) == [(1, "DEAD_LETTER")]  # never STARTED
    (dead,) = [r for r in results if r["execution_id"] == refused["execution_id"]]
    assert "sync handler threads hang past their deadlines" in dead["error"]
    assert by_status(results, fine["execution_id"]) == [(1, "SUCCEEDED")]  # never waited
    assert outcomes(results, later["execution_id"]) == [(1, "SUCCEEDED")]
    assert ran == [later["execution_id"]] and stats.sync_refused == 1


def test_many_waiting_runs_time_out_at_their_own_deadlines(
    topics: KafkaSettings, reader: TopicReader, calls: Calls
) -> None:
    """Deadlines of thousands of waiting runs (one sweep timer, not one timer each)."""
    executor = start_executor(topics, calls, max_in_flight=3000)
    try:
        slow = [due_event(f"slow-{i}", handler="examples.sleep", payload=b"30",
                          timeout_ms=400 + 10 * (i % 50), max_attempts=1)
                for i in range(2000)]  # fmt: skip
        quick = [due_event(f"quick-{i}", handler="examples.sleep", payload=b"0.05",
                           timeout_ms=5000) for i in range(500)]  # fmt: skip
        produce_due(topics, slow + quick)
        reader.wait_for(lambda r: len(finals(r.results())) == 2500, 60, "2,500 outcomes")
    finally:
        executor.stop()
    results = reader.results()
    by_id = {r["execution_id"]: r for r in results if r["status"] in ("SUCCEEDED", "DEAD_LETTER")}
    for event in slow:
        dead = by_id[event["execution_id"]]
        assert dead["status"] == "DEAD_LETTER"
        ran_ms = dead["finished_at_ms"] - dead["started_at_ms"]
        assert event["timeout_ms"] <= ran_ms + 1 < event["timeout_ms"] + 1000, (event, dead)
    assert all(by_id[e["execution_id"]]["status"] == "SUCCEEDED" for e in quick)
