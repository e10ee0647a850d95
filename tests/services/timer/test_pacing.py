"""Commit and collection pacing of the timer, and the bulk output path of the drain.

Pure logic: the pacer is driven by an explicit clock; the drain runs on the in-memory fakes
of ``test_timer_logic``. One run of the real timer against the broker checks that without
fire-ahead the trickle commit waits for nothing.
"""

from __future__ import annotations

import pytest

from bench.herd import DueReader, job_record, now_ms, produce_jobs, wait_until_live
from services.timer.drain import drain_due
from services.timer.pacing import RESCAN_MS, DrainPacer, trickle_commit_ms
from services.timer.scope import Scope
from services.timer.settings import TimerSettings
from services.timer.wheel import WATERMARK_KEY, collect_fired, watermark
from streams.settings import KafkaSettings
from tests.services.timer.test_timer_kafka import _timer_on_thread
from tests.services.timer.test_timer_logic import T0, Timer, cron_job, one_off


def test_caught_up_drain_commits_now_and_a_backlog_commits_within_the_interval() -> None:
    pacer = DrainPacer(batch_size=100, backlog_commit_interval_ms=250, collect_per_s=1_000)
    assert pacer.commit_within_ms(0, 0) is None  # nothing fired, nothing to hurry
    assert pacer.commit_within_ms(0, 7) == 0  # a trickle: visible at the end of the round
    assert pacer.commit_within_ms(1, 100) == 250  # a full batch: more is due, let it grow
    assert pacer.commit_within_ms(1, 100) == 250
    # The partition that was behind drained exactly its last batch: commit it now.
    assert pacer.commit_within_ms(1, 0) == 0
    assert pacer.commit_within_ms(1, 0) is None


def test_a_trickle_waits_for_the_trickle_commit_but_a_drained_backlog_commits_now() -> None:
    pacer = DrainPacer(
        100, backlog_commit_interval_ms=250, collect_per_s=1_000, trickle_commit_ms=50
    )
    assert pacer.commit_within_ms(0, 0) is None
    assert pacer.commit_within_ms(0, 7) == 50  # fired ahead: the next rounds share a commit
    assert pacer.commit_within_ms(1, 100) == 250  # a backlog still lets its transaction grow
    # The round that drains the rest of a backlog commits at once, fired or not: its fires
    # are late already.
    assert pacer.commit_within_ms(1, 3) == 0
    assert pacer.commit_within_ms(1, 3) == 50  # caught up: a trickle again
    pacer.commit_within_ms(2, 100)
    assert pacer.commit_within_ms(2, 0) == 0


def test_the_trickle_commit_waits_at_most_half_of_the_fire_ahead() -> None:
    assert trickle_commit_ms(25, 200) == 25
    assert trickle_commit_ms(150, 200) == 100  # half of the head start left for the commit
    assert trickle_commit_ms(50, 60) == 30
    assert trickle_commit_ms(50, 0) == 0  # no fire-ahead: fires commit every round, as before
    assert trickle_commit_ms(50, 1) == 0
    assert trickle_commit_ms(0, 200) == 0  # turned off


def test_collection_waits_while_any_partition_is_behind_and_is_rate_limited() -> None:
    pacer = DrainPacer(batch_size=1_000, backlog_commit_interval_ms=250, collect_per_s=2_000)
    assert pacer.collect_limit(T0) == 1_000  # a full bucket to start with
    pacer.collected(1_000)
    assert pacer.collect_limit(T0 + 100) == 200  # 2,000/s for 100 ms
    pacer.commit_within_ms(3, 1_000)  # partition 3 has a backlog: fires first
    assert pacer.collect_limit(T0 + 10_000) == 0
    pacer.forget(3)  # revoked: it no longer holds collection back
    assert pacer.collect_limit(T0 + 10_000) == 1_000  # the bucket is capped at a batch


def test_bulk_output_emits_what_one_by_one_emits_in_the_same_order() -> None:
    """Fast entries go out in bulk; slow entries in between keep the scan's order."""
    outputs = []
    for bulk in (False, True):
        timer = Timer(batch_size=50)
        for i in range(40):
            timer.submit(one_off(f"f{i:03d}", T0 + 1_000 + i % 4), T0)
        # A cron entry is settled through its state (slow) amid fast entries of its second:
        # keys sort by time, then job id, so "m-cron" sits between f... and later seconds.
        timer.submit(cron_job("m-cron", "* * * * * *", T0, overlap="ALLOW"), T0)
        batches: list[int] = []

        def emit_many(
            records: list[tuple[str, bytes | None, bytes | None]],
            batches: list[int] = batches,
            timer: Timer = timer,
        ) -> None:
            batches.append(len(records))
            timer.out.extend(records)

        scope = Scope(
            timer.env, timer.jobs, timer.wheel, timer._emit, T0 + 1_003,
            emit_many=emit_many if bulk else None,
        )  # fmt: skip
        emitted = drain_due(scope, 50)
        outputs.append((emitted, list(timer.out), timer.jobs.get(WATERMARK_KEY)))
        if bulk:
            assert batches == [10, 30]  # the cron's DueEvent went out between them
    assert outputs[0] == outputs[1] and outputs[0][0] == 41


def test_collection_resumes_where_the_last_one_stopped_and_rescans_every_minute() -> None:
    pacer = DrainPacer(batch_size=100, backlog_commit_interval_ms=250, collect_per_s=1_000)
    assert pacer.collect_start(2, T0) == b""  # first collection: from the first key
    pacer.collect_resume(2, b"k5\x00")
    assert pacer.collect_start(2, T0 + 1_000) == b"k5\x00"
    assert pacer.collect_start(4, T0 + 1_000) == b""  # per partition
    pacer.collect_resume(2, b"k9\x00")
    assert pacer.collect_start(2, T0 + RESCAN_MS - 1) == b"k9\x00"
    # After a minute it starts over: leftovers of an aborted collection get collected.
    assert pacer.collect_start(2, T0 + RESCAN_MS) == b""
    pacer.collect_resume(2, b"k3\x00")
    assert pacer.collect_start(2, T0 + RESCAN_MS + 10) == b"k3\x00"
    pacer.forget(2)  # revoked: a new owner's store starts from its first key
    assert pacer.collect_start(2, T0 + RESCAN_MS + 20) == b""


def test_collect_fired_deletes_below_the_watermark_from_start_and_says_where_to_resume() -> None:
    timer = Timer(batch_size=1_000)
    for i in range(30):
        timer.submit(one_off(f"j{i:03d}", T0 + 1_000 + i), T0)
    assert timer.punctuate(T0 + 2_000) == 30  # fired fast: left in the wheel below the mark
    scope = timer.scope(T0 + 2_000)
    fired = [k for k, _ in timer.wheel.iter_range(b"", watermark(scope), 100)]
    assert len(fired) == 30
    count, resume = collect_fired(scope, 10, b"")
    assert count == 10 and resume == fired[9] + b"\x00"
    assert [k for k, _ in timer.wheel.iter_range(b"", watermark(scope), 100)] == fired[10:]
    count, resume = collect_fired(scope, 10, resume)
    assert count == 10 and resume == fired[19] + b"\x00"
    count, resume = collect_fired(scope, 50, resume)  # the rest: resume at the watermark
    assert count == 10 and resume == watermark(scope)
    assert collect_fired(scope, 50, resume) == (0, resume)
    assert timer.wheel.iter_range(b"", watermark(scope), 100) == []
    assert timer.wheel.get(WATERMARK_KEY) is None  # the watermark lives in the jobs store


def test_collection_slows_to_a_trickle_while_inputs_wait() -> None:
    pacer = DrainPacer(1_000, 250, collect_per_s=1_000, busy_inputs=50)
    assert not pacer.busy(0)  # the first check: nothing to compare with
    pacer.collected(pacer.collect_limit(T0))
    pacer.note_inputs(30)
    assert not pacer.busy(0)  # fewer than a consume batch since the last check
    pacer.note_inputs(20)
    pacer.note_inputs(40)
    assert pacer.busy(0)
    assert not pacer.busy(0)  # nothing new since
    assert not pacer.busy(1)  # per partition: its first check
    pacer.note_inputs(60)
    assert pacer.busy(1) and pacer.busy(0)
    assert pacer.collect_limit(T0 + 100, busy=True) == 10  # a tenth of 1,000/s for 100 ms
    assert pacer.collect_limit(T0 + 200, busy=False) == 110  # 10 unspent, the full rate again
    never = DrainPacer(100, 250, collect_per_s=1_000)
    never.note_inputs(10_000)
    never.busy(0)
    never.note_inputs(10_000)
    assert not never.busy(0)  # no threshold: never busy


@pytest.mark.kafka
def test_without_fire_ahead_a_trickle_commits_every_round_whatever_the_trickle_interval(
    topics: KafkaSettings,
) -> None:
    """Fire-ahead 0 leaves no head start to wait in: fires are visible at once, as before."""
    settings = TimerSettings(
        kafka=topics,
        instance_id="timer-pacing",
        fire_ahead_ms=0,
        trickle_commit_interval_ms=5_000,
        commit_interval_ms=30_000,
    )
    reader = DueReader(topics)
    try:
        with _timer_on_thread(settings):
            wait_until_live(topics, reader)
            before = len(reader.values)
            created = now_ms()
            jobs = [
                job_record(f"trickle-{i:02d}", created, run_at_ms=created + 2_000 + 100 * i)
                for i in range(20)
            ]
            produce_jobs(topics, jobs)
            reader.read_until(before + len(jobs), timeout_s=20)
        events = [e for e in reader.events() if e["job_id"].startswith("trickle-")]
    finally:
        reader.close()
    visible = sorted(e["read_at_ms"] - e["fire_at_ms"] for e in events)
    print(f"\nvisible lateness ms, fire-ahead 0, trickle interval 5 s: {visible}")
    assert len(events) == len(jobs) and visible[-1] < 2_000  # far below the 5 s
