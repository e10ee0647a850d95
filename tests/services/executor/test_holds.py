"""DueEvents read before their ``fire_at_ms`` are held, then started at it (or at the bound).

The first tests drive :class:`Holds` and the lane buffers on a real event loop (pure logic);
the rest run an executor against the real broker and read its outputs ``read_committed``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest

from services.executor.assignment import Token
from services.executor.context import HandlerContext
from services.executor.due_view import DueReader, DueView
from services.executor.holds import HeldRun, Holds
from services.executor.lane_buffers import LaneBuffers
from streams.codec import RecordKind
from streams.settings import KafkaSettings
from streams.topics import Priority, TopicNames

from .test_loop_kafka import Calls, committed_offsets, outcomes, start_executor
from .test_service_kit import (
    CODEC,
    ExecutorThread,
    TopicReader,
    due_event,
    finals,
    now_ms,
    produce_due,
)

READER = DueReader(CODEC)
LANE_OF = {"due.high": Priority.HIGH, "due.normal": Priority.NORMAL, "due.low": Priority.LOW}


def view(job_id: str, fire_at_ms: int, **fields: Any) -> DueView:
    record = due_event(job_id, fire_at_ms, fire_at_ms=fire_at_ms, **fields)
    return READER.read(CODEC.encode(RecordKind.DUE_EVENT, record))


def test_the_reader_gives_fire_at() -> None:
    assert view("a", 1_790_000_000_123).fire_at_ms == 1_790_000_000_123
    jittered = due_event("j", 1_790_000_000_000, fire_at_ms=1_790_000_004_321)
    value = CODEC.encode(RecordKind.DUE_EVENT, jittered)
    assert READER.read(value).fire_at_ms == 1_790_000_004_321
    assert READER.read(value).scheduled_for_ms == 1_790_000_000_000


def run_holds(
    holds_of: list[tuple[str, int]],
    max_hold_ms: int,
    discard: list[str] | None = None,
    resolution_ms: int = 1,
) -> list[tuple[int, str, int]]:
    """Hold (job, ms from now) pairs, one partition per job; (released at ms, job, fire_at)."""
    released: list[tuple[int, str, int]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = asyncio.Event()

        def release(runs: list[HeldRun]) -> None:
            at = now_ms()
            released.extend((at, r.view.job_id, r.view.fire_at_ms) for r in runs)
            if len(released) + len(discard or []) >= len(holds_of):
                done.set()

        holds = Holds(loop, release, max_hold_ms, resolution_ms)
        start = now_ms()
        for i, (job_id, in_ms) in enumerate(holds_of):
            holds.hold(view(job_id, start + in_ms), ("due.normal", i), i, Token(), now_ms())
        assert len(holds) == len(holds_of)
        if discard:
            parts = [("due.normal", i) for i, (j, _) in enumerate(holds_of) if j in discard]
            assert holds.discard(parts) == len(discard)
        await asyncio.wait_for(done.wait(), 10)
        assert len(holds) == 0
        holds.close()

    asyncio.run(main())
    return released


def test_holds_release_each_run_at_its_fire_at_in_order_with_one_timer() -> None:
    released = run_holds([("c", 150), ("a", 50), ("b", 100), ("a2", 50)], 10_000)
    assert [job for _, job, _ in released] == ["a", "a2", "b", "c"]  # ties keep arrival order
    for at, _, fire_at in released:
        assert fire_at <= at <= fire_at + 100  # never early; late by the loop's latency only


def test_runs_of_one_slice_start_together_at_its_end_never_before_fire_at() -> None:
    offsets_ms = [30 + 3 * i for i in range(20)]  # 30..87 ms from now
    released = run_holds([(f"s{i}", ms) for i, ms in enumerate(offsets_ms)], 10_000, None, 25)
    assert len(released) == 20
    slices = Counter(-(-fire_at // 25) for _, _, fire_at in released)
    assert len(slices) <= 4  # 60 ms of fire times in 25 ms slices: at most 4 releases
    for at, _, fire_at in released:
        assert at >= -(-fire_at // 25) * 25 >= fire_at  # at the end of its slice
    by_slice: dict[int, set[int]] = {}
    for at, _, fire_at in released:
        by_slice.setdefault(-(-fire_at // 25), set()).add(at)
    assert all(len(times) == 1 for times in by_slice.values())  # one release per slice


def test_a_hold_is_bounded_by_max_hold_ms() -> None:
    start = now_ms()
    [(at, job, fire_at)] = run_holds([("far", 3_600_000)], 80)
    assert job == "far" and at < fire_at
    assert start + 80 <= at <= start + 80 + 200


def test_discarded_holds_are_never_released() -> None:
    released = run_holds([("keep", 60), ("gone", 30), ("keep2", 90)], 10_000, ["gone"])
    assert [job for _, job, _ in released] == ["keep", "keep2"]


def test_released_runs_go_to_the_front_of_their_lane_and_lanes_still_decide() -> None:
    buffers = LaneBuffers(LANE_OF, capacity=1000)

    class Record:
        def __init__(self, topic: str, offset: int) -> None:
            self._where = (topic, offset)

        def topic(self) -> str:
            return self._where[0]

        def partition(self) -> int:
            return 0

    for i in range(3):
        buffers.add(Record("due.low", 10 + i))  # type: ignore[arg-type]
    buffers.add(Record("due.high", 20))  # type: ignore[arg-type]
    held = [
        HeldRun(view(f"h{i}", 0), ("due.low", 0), i, Token(), 0) for i in range(2)
    ]  # released oldest first
    buffers.requeue(held)
    taken = [buffers.take() for _ in range(6)]
    assert buffers.take() is None and len(buffers) == 0
    assert taken[0].topic() == "due.high"  # type: ignore[union-attr]
    assert taken[1:3] == held  # before the low records read after them
    buffers.requeue([HeldRun(view("x", 0), ("due.low", 3), 9, Token(), 0)])
    assert buffers.discard([("due.low", 3)]) == 1 and len(buffers) == 0


# --- against the broker -------------------------------------------------------------------


def started(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per execution, its first result: STARTED if it still waited at a commit, else its end.

    Both carry ``started_at_ms``.
    """
    return {r["execution_id"]: r for r in reversed(results)}


def succeeded_once_lateness_ms(
    results: list[dict[str, Any]], events: list[dict[str, Any]]
) -> list[int]:
    """Checks that each event's execution SUCCEEDED once (attempt 1); its start lateness
    (``started_at_ms`` - ``fire_at_ms``), in the events' order."""
    starts = started(results)
    lateness_ms = []
    for event in events:
        execution = event["execution_id"]
        assert outcomes(results, execution) == [(1, "SUCCEEDED")], execution
        lateness_ms.append(starts[execution]["started_at_ms"] - event["fire_at_ms"])
    return lateness_ms


@pytest.mark.kafka
def test_a_future_event_starts_at_its_fire_at_and_its_deadline_starts_then(
    topics: KafkaSettings, reader: TopicReader, calls: Calls
) -> None:
    executor = start_executor(topics, calls)
    try:
        base = now_ms() + 1_500
        # 0.2 s handlers with a 0.6 s timeout, held ~1.5 s: a deadline from the read would fire.
        future = [
            due_event(f"later-{i}", base + 40 * i, handler="examples.sleep", payload=b"0.2",
                      timeout_ms=600, max_attempts=1)
            for i in range(12)
        ]  # fmt: skip
        past = [due_event(f"now-{i}", now_ms() - 5, handler="tests.record") for i in range(4)]
        produce_due(topics, future + past)
        reader.wait_for(lambda r: len(finals(r.results())) == 16, 60, "16 finals")
    finally:
        stats = executor.stop()
    lateness_ms = succeeded_once_lateness_ms(reader.results(), future)
    assert min(lateness_ms) >= 0 and max(lateness_ms) <= 300, lateness_ms
    assert stats.held == 12  # the past ones ran when read


@pytest.mark.kafka
def test_max_held_stops_taking_records_until_held_runs_start(
    topics: KafkaSettings, reader: TopicReader, calls: Calls
) -> None:
    """While ``max_held`` events are held the executor takes no more (it stops consuming,
    then pauses every lane after ``lane_pause_after_ms``); the rest come in once held runs
    start, and every run still starts at its fire_at."""
    executor = start_executor(
        topics, calls, max_held=10, consume_batch_size=4, lane_pause_after_ms=300
    )
    seen: list[int] = []

    async def watch(ctx: HandlerContext) -> None:
        seen.append(executor.loop.held)

    executor.registry.register("tests.watch", watch)
    try:
        base = now_ms() + 1_500
        # Four waves of 10, 0.4 s apart: each wave fills the holds by itself.
        events = [
            due_event(f"wave-{i}", base + 400 * (i // 10), handler="tests.watch") for i in range(40)
        ]
        produce_due(topics, events)
        reader.wait_for(lambda r: len(finals(r.results())) == 40, 60, "40 finals")
    finally:
        stats = executor.stop()
    assert min(succeeded_once_lateness_ms(reader.results(), events)) >= 0
    assert len(seen) == 40 and max(seen) <= 10 + 4  # max_held + one consumer batch
    # The first wave was held ~1.5 s: consuming stopped, then every lane was paused. Later
    # waves came in when held runs started (some after their fire_at: run when read).
    assert stats.held >= 10 and stats.lane_pauses >= 1


@pytest.mark.kafka
def test_nothing_commits_past_a_held_event(
    topics: KafkaSettings, reader: TopicReader, calls: Calls
) -> None:
    executor = start_executor(topics, calls)
    topic = TopicNames(topics.namespace).due(Priority.NORMAL)
    try:
        held = due_event("held", now_ms() + 5_000, handler="tests.record")
        quick = due_event("quick", now_ms() - 1, handler="tests.record")
        [(_, _, held_at), (_, _, quick_at)] = produce_due(topics, [held, quick], partition=1)
        reader.wait_for(lambda r: len(finals(r.results())) == 1, 30, "the quick one")
        time.sleep(0.5)  # several commit intervals
        assert committed_offsets(topics, [(topic, 1)])[(topic, 1)] == held_at
        assert [(r["job_id"], r["status"]) for r in reader.results()] == [("quick", "SUCCEEDED")]
        reader.wait_for(lambda r: len(finals(r.results())) == 2, 30, "the held one")
        deadline = time.monotonic() + 10
        while committed_offsets(topics, [(topic, 1)])[(topic, 1)] != quick_at + 1:
            assert time.monotonic() < deadline, "the position never passed the held event"
            time.sleep(0.2)
    finally:
        executor.stop()
    assert reader.results()[-1]["started_at_ms"] >= held["fire_at_ms"]


@pytest.mark.kafka
def test_held_events_are_released_on_revoke_without_results_and_the_next_owner_runs_them(
    topics: KafkaSettings, reader: TopicReader, calls: Calls
) -> None:
    first = start_executor(topics, calls, "w-a", max_hold_ms=30_000)
    second: ExecutorThread | None = None
    try:
        fire_at = now_ms() + 10_000
        lanes = [p.value for p in Priority]
        events = [due_event(f"held-{i}", fire_at, handler="tests.record", priority=lanes[i % 3])
                  for i in range(24)]  # fmt: skip
        produce_due(topics, events)
        deadline = time.monotonic() + 10
        while first.loop.stats.held < 24:
            assert time.monotonic() < deadline, first.loop.stats
            time.sleep(0.05)
        second = ExecutorThread(first.settings.model_copy(update={"worker_id": "w-b", "kafka":
            topics.model_copy(update={"state_dir": topics.state_dir / "w-b"})}),
            first.registry).start()  # fmt: skip
        deadline = time.monotonic() + 8
        while not second.loop.ready_partitions():
            assert time.monotonic() < deadline, "the second executor got no partitions"
            time.sleep(0.05)
        reader.wait_for(lambda r: len(finals(r.results())) == 24, 60, "24 successes")
    finally:
        first_stats = first.stop()
        if second is not None:
            second.stop()
    results = reader.results()
    assert set(finals(results).values()) == {1}
    starts = started(results)
    assert len(starts) == 24 == len(results)  # each ran once: one SUCCEEDED, nothing else
    assert all(r["started_at_ms"] >= fire_at for r in starts.values())
    moved = [e for e, r in starts.items() if r["worker_id"] == "w-b"]
    assert moved and first_stats.dropped == len(moved)  # dropped unstarted, run by w-b


@pytest.mark.kafka
def test_a_far_future_event_starts_after_max_hold_ms(
    topics: KafkaSettings, reader: TopicReader, calls: Calls
) -> None:
    executor = start_executor(topics, calls, max_hold_ms=700)
    try:
        produced_ms = now_ms()
        event = due_event("skewed", produced_ms + 3_600_000, handler="tests.record")
        produce_due(topics, [event])
        reader.wait_for(lambda r: len(finals(r.results())) == 1, 30, "the far-future one")
    finally:
        executor.stop()
    started_ms = started(reader.results())[event["execution_id"]]["started_at_ms"]
    assert produced_ms + 700 <= started_ms <= produced_ms + 700 + 3_000
