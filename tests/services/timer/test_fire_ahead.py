"""Firing ahead: entries fire up to ``fire_ahead_ms`` early; lateness stays on the real clock.

Pure logic on the in-memory fakes of ``test_timer_logic`` (an explicit clock), plus one
run of the real timer against the broker.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from bench.herd import DueReader, job_record, now_ms, produce_jobs
from services.timer.policies import MISSED_CATCHUP_NONE, MISSED_OUTSIDE_WINDOW
from streams import clock
from streams.codec import RecordKind
from streams.settings import KafkaSettings

from .test_timer_kafka import _timer_on_thread
from .test_timer_logic import CODEC, T0, T_MIN, Timer, _retry_request, cron_job, one_off

AHEAD_MS = 200


def _run_collecting(timer: Timer, start_ms: int, end_ms: int, step_ms: int) -> list[int]:
    """Punctuate every ``step_ms``; the clock reading of each punctuation that emitted."""
    emitted_at = []
    for now in range(start_ms, end_ms + 1, step_ms):
        before = len(timer.out)
        timer.punctuate(now)
        if len(timer.out) > before:
            emitted_at.append(now)
    return emitted_at


@pytest.mark.parametrize("ahead_ms", [0, AHEAD_MS])
def test_a_one_off_fires_within_the_window_and_not_earlier(ahead_ms: int) -> None:
    timer = Timer(fire_ahead_ms=ahead_ms)
    timer.submit(one_off("a", T0 + 5_000, jitter_ms=0), T0)
    fired_at = _run_collecting(timer, T0, T0 + 6_000, 1)
    assert fired_at == [T0 + 5_000 - ahead_ms]  # the first clock reading in the window
    [due] = timer.dues()
    # The event's times are the job's; emitted_at is the real clock of the punctuation.
    assert (due["scheduled_for_ms"], due["fire_at_ms"], due["emitted_at_ms"]) == (
        T0 + 5_000,
        T0 + 5_000,
        T0 + 5_000 - ahead_ms,
    )


def test_cron_ticks_fire_ahead_once_each_with_no_tick_missed_or_superseded() -> None:
    """Each tick fires once, AHEAD_MS early; a tick not yet due is not 'pending' for LATEST."""
    timer = Timer(fire_ahead_ms=AHEAD_MS)
    job = cron_job("c", "* * * * * *", T_MIN - 1_000, catchup="LATEST", overlap="ALLOW")
    timer.submit(job, T_MIN - 1_000)
    fired_at = _run_collecting(timer, T_MIN - 1_000, T_MIN + 30_000, 10)
    dues = timer.dues()
    assert timer.results() == []
    assert [d["scheduled_for_ms"] for d in dues] == list(range(T_MIN, T_MIN + 30_001, 1000))
    assert Counter(timer.ledger().values()) == {1: 31}
    assert all(d["fire_at_ms"] - d["emitted_at_ms"] == AHEAD_MS for d in dues)
    assert fired_at == [d["emitted_at_ms"] for d in dues]


def test_a_tick_late_within_the_grace_fires_even_when_the_window_would_push_it_past() -> None:
    """On-time and misfire decisions measure now - tick on the real clock, not the horizon."""
    timer = Timer(fire_ahead_ms=AHEAD_MS, misfire_grace_ms=1_000)
    # Late by 900 ms at the first punctuation: on time (the horizon would make it 1,100).
    timer.submit(one_off("fast", T0, catchup="NONE"), T0 - 10_000)  # fast entry
    timer.submit(cron_job("slow", "* * * * * *", T_MIN - 2_000, catchup="NONE"), T_MIN - 2_000)
    timer.punctuate(T0 + 900)
    timer.punctuate(T_MIN - 1_000 + 900)  # cron tick T_MIN - 1000, late by 900
    assert [d["job_id"] for d in timer.dues()] == ["fast", "slow"]
    assert timer.results() == []
    # Late by 1,100 ms on the real clock: MISSED, whatever the window.
    late = Timer(fire_ahead_ms=AHEAD_MS, misfire_grace_ms=1_000)
    late.submit(one_off("fast", T0, catchup="NONE"), T0 - 10_000)
    late.submit(cron_job("slow", "* * * * * *", T_MIN - 2_000, catchup="NONE"), T_MIN - 2_000)
    late.punctuate(T0 + 1_100)
    late.punctuate(T_MIN - 1_000 + 1_100)
    missed = [(r["job_id"], r["status"], r["reason"]) for r in late.results()]
    assert ("fast", "MISSED", MISSED_CATCHUP_NONE) in missed
    assert ("slow", "MISSED", MISSED_CATCHUP_NONE) in missed
    assert all(r["recorded_at_ms"] in (T0 + 1_100, T_MIN + 100) for r in late.results())


def test_the_catchup_window_is_measured_on_the_real_clock() -> None:
    # No grace: the catch-up plan decides (on_time_from would fire it within a grace).
    timer = Timer(fire_ahead_ms=AHEAD_MS, misfire_grace_ms=0)
    # Inside its window (late by 900 <= 1000); the horizon would put it outside.
    timer.submit(one_off("w", T0, catchup_window_ms=1_000, catchup="ALL"), T0 - 10_000)
    timer.punctuate(T0 + 900)
    assert [d["job_id"] for d in timer.dues()] == ["w"] and timer.results() == []
    out = Timer(fire_ahead_ms=AHEAD_MS, misfire_grace_ms=0)
    out.submit(one_off("w", T0, catchup_window_ms=1_000, catchup="ALL"), T0 - 10_000)
    out.punctuate(T0 + 1_100)
    [result] = out.results()
    assert (result["status"], result["reason"]) == ("MISSED", MISSED_OUTSIDE_WINDOW)


def test_a_retry_fires_ahead_as_is_and_a_new_entry_below_the_horizon_fires_next_time() -> None:
    timer = Timer(fire_ahead_ms=AHEAD_MS)
    timer.submit(one_off("r", T0), T0)
    timer.punctuate(T0 - AHEAD_MS)  # first attempt, ahead
    request = _retry_request("r", T0, T0 + 5_000)
    timer.feed("k.retry", b"r", CODEC.encode(RecordKind.RETRY_REQUEST, request.to_avro()), T0)
    fired_at = _run_collecting(timer, T0 + 1, T0 + 4_801, 10)
    assert fired_at == [T0 + 4_801]  # the first punctuation with 5000 in its window
    assert timer.out[-1][2] == CODEC.encode(RecordKind.DUE_EVENT, request.due.to_avro())
    # The watermark now sits past the clock: a job due before it is keyed after it and
    # fires at the next punctuation, with its own fire_at and the real emitted_at.
    timer.submit(one_off("soon", T0 + 4_900), T0 + 4_805)
    timer.punctuate(T0 + 4_811)
    [soon] = [d for d in timer.dues() if d["job_id"] == "soon"]
    assert (soon["fire_at_ms"], soon["emitted_at_ms"]) == (T0 + 4_900, T0 + 4_811)


# --- the real timer -----------------------------------------------------------------------


@pytest.fixture
def reader(topics: KafkaSettings) -> Iterator[DueReader]:
    due_reader = DueReader(topics)
    yield due_reader
    due_reader.close()


@pytest.mark.kafka
def test_the_timer_commits_fires_ahead_and_never_before_the_window(
    topics: KafkaSettings, reader: DueReader
) -> None:
    from services.timer.settings import TimerSettings

    ahead_ms = 400
    settings = TimerSettings(kafka=topics, instance_id="timer-ahead", fire_ahead_ms=ahead_ms)
    with _timer_on_thread(settings):
        created = now_ms()
        first_ms = created + 4_000
        jobs = [job_record(f"ahead-{i}", created, run_at_ms=first_ms + 37 * i) for i in range(40)]
        produce_jobs(topics, jobs)
        reader.read_until(40, 60)
        # The record's Kafka timestamp is this host's wall clock; kafkron's clock is the
        # broker's (streams/clock.py), a few ms away. Read the stamps on kafkron's clock.
        host_skew_ms = clock.host_skew_ms()
    events = reader.events()
    assert sorted(e["job_id"] for e in events) == sorted(j["job_id"] for j in jobs)
    for event in events:
        assert event["fire_at_ms"] == event["scheduled_for_ms"]
        # Never emitted before the window, and emitted_at is the real clock.
        assert event["emitted_at_ms"] >= event["fire_at_ms"] - ahead_ms
        # 1 ms: the wall and monotonic clocks truncate to ms at different instants.
        assert event["kafka_ts_ms"] - host_skew_ms >= event["fire_at_ms"] - ahead_ms - 1
    # Visible (committed) before fire_at for most: the window paid for the commit.
    early = sorted(e["read_at_ms"] - e["fire_at_ms"] for e in events)
    assert early[len(early) // 2] < 0, early
