"""What the timer counts for its metrics (fire_stats.py, metrics.py): fires and lateness
counted per drain agree with counting each fire, the due backlog, and the exposition."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.core import Metric

from services.timer import keys
from services.timer.fire_stats import LATENESS_BOUNDS_MS, FireStats, late_ms_sum
from services.timer.metrics import TimerCollector
from services.timer.scope import TimerEnv
from services.timer.service import TimerHooks
from services.timer.settings import TimerSettings
from streams.codec import Codec
from streams.runtime_stats import Buckets, RuntimeStats
from streams.settings import KafkaSettings
from tests.services.timer.test_timer_hooks import FakeContext, creates
from tests.services.timer.test_timer_logic import T0, Timer, cron_job, one_off

CODEC = Codec.from_directory()


def naive(fire_times_ms: list[int], now_ms: int) -> Buckets:
    buckets = Buckets(LATENESS_BOUNDS_MS)
    for fire_ms in fire_times_ms:
        buckets.observe(max(0, now_ms - fire_ms))
    return buckets


def wheel_entries(fire_times_ms: list[int]) -> list[tuple[bytes, bytes]]:
    """Sorted wheel items as a scan returns them (distinct job ids, one per time)."""
    return sorted(
        (keys.schedule_key(fire_ms, b"job-%d" % i, i % 3), b"F")
        for i, fire_ms in enumerate(fire_times_ms)
    )


@given(
    st.lists(st.integers(min_value=-400_000, max_value=1_000), max_size=300),
    st.integers(min_value=0, max_value=300),
)
def test_counting_a_sorted_run_at_once_equals_counting_each_fire(
    offsets_ms: list[int], prefix: int
) -> None:
    now_ms = T0
    entries = wheel_entries([now_ms + offset for offset in offsets_ms])
    count = min(prefix, len(entries))
    stats = FireStats()
    stats.add_sorted(entries, count, now_ms)
    expected = naive([keys.parse_key(key).fire_ms for key, _ in entries[:count]], now_ms)
    got = stats.lateness.get("SCHEDULE", Buckets(LATENESS_BOUNDS_MS))
    assert got.counts == expected.counts
    assert got.total == expected.total


@given(st.lists(st.sampled_from([T0 - 3_000, T0 - 7, T0 - 1, T0]), max_size=500))
def test_the_late_sum_of_a_run_sharing_few_fire_times_is_exact(times_ms: list[int]) -> None:
    entries = wheel_entries(times_ms)
    assert late_ms_sum(entries, 0, len(entries), T0) == sum(T0 - t for t in sorted(times_ms))


def lateness_of_dues(timer: Timer) -> Counter[str]:
    return Counter(d["trigger"] for d in timer.dues())


def test_a_drain_counts_every_fire_once_fast_and_slow_alike_with_its_lateness() -> None:
    timer = Timer(misfire_grace_ms=1_000)
    for i in range(40):  # fast entries: on-time one-offs, spread over 300 ms
        timer.submit(one_off(f"fast-{i:02d}", T0 + 1_000 + 8 * i), T0)
    # slow entries among them: a cron job's ticks and a one-off late beyond the grace
    timer.submit(cron_job("cron", "* * * * * *", T0, overlap="ALLOW", catchup="ALL"), T0)
    timer.submit(one_off("late", T0 - 5_000, catchup_window_ms=600_000), T0)
    timer.submit(one_off("missed", T0 - 5_000, catchup="NONE"), T0)
    for now_ms in (T0 + 1_150, T0 + 1_400, T0 + 3_000):
        timer.punctuate(now_ms)
    dues = timer.dues()
    assert Counter(d["job_id"].split("-")[0] for d in dues)["fast"] == 40
    stats = timer.env.fire_stats
    assert {t: b.count for t, b in stats.lateness.items()} == dict(lateness_of_dues(timer))
    expected = Buckets(LATENESS_BOUNDS_MS)
    for due in dues:
        expected.observe(max(0, due["emitted_at_ms"] - due["fire_at_ms"]))
    merged = Buckets(LATENESS_BOUNDS_MS)
    for buckets in stats.lateness.values():
        merged.counts = [a + b for a, b in zip(merged.counts, buckets.counts, strict=True)]
        merged.total += buckets.total
    assert merged.counts == expected.counts and merged.total == expected.total
    assert stats.outcomes == Counter({"MISSED": 1})


def test_the_due_backlog_is_how_long_the_oldest_unfired_entry_has_been_due() -> None:
    env = TimerEnv.from_settings(
        TimerSettings(
            kafka=KafkaSettings(namespace="k."), instance_id="b", batch_size=5, fire_ahead_ms=0
        ),
        CODEC,
    )
    hooks, ctx = TimerHooks(env), FakeContext()
    records = creates(12)  # one-offs due at T0 + 3,600,000 + i
    hooks.on_records(ctx, env.jobs_topic, 2, records)  # type: ignore[arg-type]
    due_ms = T0 + 3_600_000
    hooks.on_punctuate(ctx, 2, due_ms + 100)  # type: ignore[arg-type]
    assert env.fire_stats.backlog_ms == {2: 100 - 5}  # the 6th entry, due at +5, is left
    hooks.on_punctuate(ctx, 2, due_ms + 200)  # type: ignore[arg-type]
    hooks.on_punctuate(ctx, 2, due_ms + 300)  # type: ignore[arg-type]
    assert env.fire_stats.backlog_ms == {2: 0}
    assert env.fire_stats.lateness["SCHEDULE"].count == 12
    hooks.on_revoked(2)
    assert env.fire_stats.backlog_ms == {}


def samples(families: list[Metric]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_the_collector_shows_fires_lateness_outcomes_backlog_and_dead_letters() -> None:
    stats = FireStats()
    stats.add("SCHEDULE", 3)
    stats.add("SCHEDULE", 40)
    stats.add("RETRY", 70_000)
    stats.outcomes["SKIPPED"] += 2
    stats.backlog_ms[1] = 1_500
    dead = Counter({"k.jobs": 2, "k.retry": 1})
    got = samples(list(TimerCollector(stats, dead, RuntimeStats()).collect()))
    assert got[("kafkron_timer_fires_total", (("trigger", "SCHEDULE"),))] == 2
    assert got[("kafkron_timer_fires_total", (("trigger", "RETRY"),))] == 1
    schedule = (("le", "0.005"), ("trigger", "SCHEDULE"))
    assert got[("kafkron_timer_fire_lateness_seconds_bucket", schedule)] == 1
    retry_inf = (("le", "+Inf"), ("trigger", "RETRY"))
    assert got[("kafkron_timer_fire_lateness_seconds_bucket", retry_inf)] == 1
    retry_300 = (("le", "300.0"), ("trigger", "RETRY"))
    assert got[("kafkron_timer_fire_lateness_seconds_bucket", retry_300)] == 1
    sum_key = ("kafkron_timer_fire_lateness_seconds_sum", (("trigger", "SCHEDULE"),))
    assert got[sum_key] == pytest.approx(0.043)
    assert got[("kafkron_timer_outcomes_total", (("status", "SKIPPED"),))] == 2
    assert got[("kafkron_timer_due_backlog_seconds", (("partition", "1"),))] == 1.5
    assert got[("kafkron_decode_failures_total", (("topic", "k.jobs"),))] == 2
    assert got[("kafkron_dead_letters_total", (("kind", "undecodable"),))] == 3
