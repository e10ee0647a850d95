"""Backfills in the timer: a recurring job's ticks in a window, run now (no broker)."""

from __future__ import annotations

from streams.identity import execution_id
from streams.records import Backfill
from tests.services.timer.test_timer_logic import T_MIN, Timer, bump, cron_job

NOW = T_MIN + 3_600_000  # an hour after a whole minute
MINUTE_MS = 60_000


def backfilled(timer: Timer) -> list[int]:
    return [d["scheduled_for_ms"] for d in timer.dues() if d["trigger"] == "BACKFILL"]


def request(from_ms: int, to_ms: int, per_s: int = 50, at_ms: int = NOW) -> Backfill:
    return Backfill(from_ms=from_ms, to_ms=to_ms, per_s=per_s, requested_at_ms=at_ms)


def test_the_windows_ticks_run_now_with_their_own_execution_ids_at_the_rate() -> None:
    timer = Timer()
    job = cron_job("hourly", "* * * * *", T_MIN - 10 * MINUTE_MS, catchup="NONE")
    timer.submit(job, T_MIN - 10 * MINUTE_MS)
    window = (T_MIN - 30 * MINUTE_MS + 1, T_MIN - 20 * MINUTE_MS)  # 10 whole minutes
    timer.submit(bump(job, version=2, backfill=request(*window, per_s=4)), NOW)
    timer.punctuate(NOW)
    first = [T_MIN - 29 * MINUTE_MS + i * MINUTE_MS for i in range(4)]
    assert backfilled(timer) == first  # one second's worth
    timer.punctuate(NOW + 999)
    assert len(backfilled(timer)) == 4
    timer.run(NOW + 1_000, NOW + 3_000, 500)
    ticks = [T_MIN - 29 * MINUTE_MS + i * MINUTE_MS for i in range(10)]
    assert backfilled(timer) == ticks
    dues = [d for d in timer.dues() if d["trigger"] == "BACKFILL"]
    assert [d["execution_id"] for d in dues] == [execution_id("hourly", t) for t in ticks]
    assert all(d["fire_at_ms"] >= NOW for d in dues)


def test_the_same_window_twice_gives_the_same_execution_ids() -> None:
    timer = Timer()
    job = cron_job("j", "*/5 * * * *", T_MIN - MINUTE_MS)
    timer.submit(job, T_MIN - MINUTE_MS)
    window = (T_MIN - 60 * MINUTE_MS, T_MIN - 30 * MINUTE_MS)
    timer.submit(bump(job, version=2, backfill=request(*window)), NOW)
    timer.punctuate(NOW)
    once = backfilled(timer)
    timer.submit(bump(job, version=3, backfill=request(*window, at_ms=NOW + 5)), NOW + 5)
    timer.punctuate(NOW + 5)
    assert backfilled(timer) == once + once and len(once) == 6  # 13:15 to 13:40, every 5 min


def test_an_update_without_backfill_starts_none_and_a_stale_record_is_ignored() -> None:
    timer = Timer()
    job = cron_job("j", "* * * * *", T_MIN - MINUTE_MS)
    timer.submit(job, T_MIN - MINUTE_MS)
    with_backfill = bump(job, version=3, backfill=request(T_MIN - 3 * MINUTE_MS, T_MIN))
    timer.submit(with_backfill, NOW)
    timer.submit(bump(with_backfill, version=2), NOW)  # stale: already applied a newer one
    timer.submit(bump(job, version=4, status="PAUSED"), NOW)  # ingest cleared backfill
    timer.run(NOW, NOW + 5_000, 1_000)
    assert len(backfilled(timer)) == 4


def test_a_cancel_drops_the_rest_of_the_window_and_one_offs_are_not_backfilled() -> None:
    timer = Timer()
    job = cron_job("j", "* * * * *", T_MIN - MINUTE_MS)
    timer.submit(job, T_MIN - MINUTE_MS)
    timer.submit(bump(job, version=2, backfill=request(T_MIN - 60 * MINUTE_MS, T_MIN, 10)), NOW)
    timer.punctuate(NOW)
    timer.submit(bump(job, version=3, status="CANCELLED"), NOW + 10)
    timer.run(NOW + 1_000, NOW + 10_000, 1_000)
    assert len(backfilled(timer)) == 10
    assert all(key[-1] != ord("B") for key in timer.wheel.data)
