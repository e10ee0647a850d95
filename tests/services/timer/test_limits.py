"""Per-tenant executions/s limits: the reservation clock, its settings, and the timer keeping it.

The clock (``services/timer/limits.py``) splits a tenant's limit over the partitions of
``jobs``; a fire (``throttle.py``) is emitted for its slot or held, durably, in a wheel entry
there. Every test checks that each tick still gets exactly one outcome.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest
from pydantic import ValidationError

from services.timer import keys
from services.timer.in_flight import COUNT_PREFIX, PARK_PREFIX, RUN_PREFIX, InFlightLimits
from services.timer.limits import CLOCK_PREFIX, TenantLimits
from services.timer.metrics import TimerCollector
from services.timer.settings import TimerSettings
from services.timer.throttle import release_unheld
from streams.identity import execution_id
from streams.runtime_stats import RuntimeStats
from tests.services.timer.test_timer_logic import (
    T0,
    T_MIN,
    FakeStore,
    Timer,
    bump,
    cron_job,
    one_off,
)

PARTITIONS = 12  # KafkaSettings' default: the Timer fake's
LIMITED = {"a": {"executions_per_s": 120}}  # 10/s per partition: a slot every 100 ms


def test_slots_are_spaced_by_the_partition_share_and_unlimited_tenants_pass() -> None:
    limits = TenantLimits({"a": 120, "*": 1200}, PARTITIONS)
    store = FakeStore()
    slots = [limits.reserve(store, 0, "a", T0) for _ in range(5)]
    assert slots == [T0, T0 + 100, T0 + 200, T0 + 300, T0 + 400]
    # Other tenants share "*" per tenant, and per partition each has its own clock.
    assert [limits.reserve(store, 0, "x", T0) for _ in range(3)] == [T0, T0 + 10, T0 + 20]
    assert limits.reserve(store, 1, "a", T0) == T0
    assert limits.throttled["a"] == 4 and limits.delay_ms["a"] == 100 + 200 + 300 + 400
    # Idle time is not banked: an arrival after the next slot gets its own time.
    assert limits.reserve(store, 0, "a", T0 + 5_000) == T0 + 5_000
    assert limits.reserve(store, 0, "a", T0 + 5_000) == T0 + 5_100
    unlimited = TenantLimits({"a": 120}, PARTITIONS)
    assert unlimited.interval_us("b") is None
    assert [unlimited.reserve(store, 0, "b", T0) for _ in range(3)] == [T0, T0, T0]
    assert not TenantLimits({}, PARTITIONS).active


def test_a_fractional_share_rounds_the_interval_up() -> None:
    limits = TenantLimits({"a": 7}, PARTITIONS)  # 12 / 7 s = 1714.28... ms
    assert limits.interval_us("a") == 1_714_286
    slots = [limits.reserve(FakeStore(), 0, "a", T0) for _ in range(1)]
    store = FakeStore()
    slots = [limits.reserve(store, 0, "a", T0) for _ in range(8)]
    # 8 slots in one partition span at least 7 intervals: never more than the share.
    assert slots[-1] - slots[0] >= 7 * 12_000 / 7


def test_the_clock_is_stored_at_flush_and_read_by_the_next_owner() -> None:
    store = FakeStore()
    first = TenantLimits({"a": 120}, PARTITIONS)
    for _ in range(3):
        first.reserve(store, 4, "a", T0)
    assert store.get(CLOCK_PREFIX + b"a") is None  # nothing stored before the drain's end
    first.flush(store, 4)
    assert store.get(CLOCK_PREFIX + b"a") is not None
    second = TenantLimits({"a": 120}, PARTITIONS)  # a restart, or the partition's next owner
    assert second.reserve(store, 4, "a", T0) == T0 + 300
    # forget drops the memory: the stored clock is read again (here: the first one's).
    first.forget(4)
    assert first.reserve(store, 4, "a", T0) == T0 + 300


def test_limits_are_read_from_json_and_bad_ones_are_refused_naming_the_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "KAFKRON_TIMER_TENANT_LIMITS",
        '{"*": {"executions_per_s": 500}, "batch": {"executions_per_s": 50}}',
    )
    settings = TimerSettings()
    assert settings.tenant_limits["batch"].executions_per_s == 50
    assert settings.tenant_limits["*"].executions_per_s == 500
    monkeypatch.setenv("KAFKRON_TIMER_TENANT_LIMITS", '{"batch": {"executions_per_sec": 50}}')
    with pytest.raises(ValidationError, match="executions_per_sec"):
        TimerSettings()
    monkeypatch.setenv("KAFKRON_TIMER_TENANT_LIMITS", '{"batch": {"executions_per_s": 0}}')
    with pytest.raises(ValidationError, match="batch"):
        TimerSettings()


def fires_by_tenant(timer: Timer) -> dict[str, list[dict[str, Any]]]:
    by_tenant: dict[str, list[dict[str, Any]]] = {}
    for due in timer.dues():
        by_tenant.setdefault(due["tenant"], []).append(due)
    return by_tenant


def held_keys(timer: Timer) -> list[bytes]:
    return [k for k in timer.wheel.data if keys.parse_key(k).kind == keys.HELD]


def submit_herd(timer: Timer, a_jobs: int, b_jobs: int, **fields: Any) -> None:
    for i in range(a_jobs):
        timer.submit(one_off(f"a-{i:04d}", T0, tenant="a", **fields), T0 - 5_000)
    for i in range(b_jobs):
        timer.submit(one_off(f"b-{i:04d}", T0, tenant="b", **fields), T0 - 5_000)


def assert_limited_spacing(fires: list[dict[str, Any]], interval_ms: int) -> None:
    at = sorted(due["fire_at_ms"] for due in fires)
    assert all(later - earlier >= interval_ms for earlier, later in itertools.pairwise(at))


def test_a_limited_tenants_herd_fires_once_each_at_its_slots_and_the_other_on_time() -> None:
    timer = Timer(tenant_limits=LIMITED, fire_ahead_ms=200)
    submit_herd(timer, 30, 5)
    timer.run(T0 - 500, T0 + 3_500, 10)
    fires = fires_by_tenant(timer)
    assert len(fires["a"]) == 30 and len(fires["b"]) == 5
    assert Counter(d["execution_id"] for d in timer.dues()).most_common(1)[0][1] == 1
    assert timer.ledger() == Counter({T0: 35})  # one outcome per job, none MISSED
    assert all(d["fire_at_ms"] == T0 for d in fires["b"])
    assert all(d["scheduled_for_ms"] == T0 for d in fires["a"])
    assert_limited_spacing(fires["a"], 100)
    assert max(d["fire_at_ms"] for d in fires["a"]) == T0 + 29 * 100
    # Emitted no earlier than the fire-ahead window before the slot (held, not busy-fired).
    assert all(d["emitted_at_ms"] >= d["fire_at_ms"] - 200 for d in fires["a"])
    limits = timer.env.tenant_limits
    assert limits.throttled["a"] == 29 and limits.held["a"] >= 25 and not limits.throttled["b"]
    # Each held fire was written once and read once: none is left in the wheel.
    assert not held_keys(timer) and not [k for k in timer.wheel.data if k.endswith(b"s")]


def test_a_held_entry_survives_a_restart_and_the_clock_goes_on_where_it_was() -> None:
    timer = Timer(tenant_limits=LIMITED, fire_ahead_ms=200)
    submit_herd(timer, 20, 0)
    timer.run(T0 - 500, T0 + 700, 10)
    fired_before = len(timer.dues())
    assert 0 < fired_before < 20
    assert len(held_keys(timer)) == 20 - fired_before
    # A new process: fresh memory (clocks, ranks), the same stores (restored changelogs).
    restarted = Timer(tenant_limits=LIMITED, fire_ahead_ms=200)
    restarted.jobs, restarted.wheel, restarted.out = timer.jobs, timer.wheel, timer.out
    restarted.submit(one_off("a-late", T0 + 800, tenant="a"), T0 + 710)
    restarted.run(T0 + 710, T0 + 4_000, 10)
    fires = fires_by_tenant(restarted)["a"]
    assert len(fires) == 21
    assert Counter(d["execution_id"] for d in fires).most_common(1)[0][1] == 1
    assert_limited_spacing(fires, 100)  # the late job queued after the held ones
    assert max(d["fire_at_ms"] for d in fires) == T0 + 20 * 100


def test_a_wait_longer_than_the_misfire_grace_is_not_a_miss() -> None:
    timer = Timer(
        tenant_limits={"a": {"executions_per_s": 12}}, misfire_grace_ms=500, fire_ahead_ms=0
    )  # a slot per second per partition
    for i in range(5):
        timer.submit(one_off(f"a-{i}", T0, tenant="a", catchup="NONE"), T0 - 5_000)
    timer.run(T0, T0 + 5_000, 50)
    assert [r for r in timer.results() if r["status"] == "MISSED"] == []
    assert sorted(d["fire_at_ms"] for d in timer.dues()) == [T0 + i * 1000 for i in range(5)]


def test_limited_cron_jobs_fire_every_tick_at_its_own_slot_and_none_is_missed() -> None:
    timer = Timer(tenant_limits={"a": {"executions_per_s": 12}})  # 1 s slots
    for i in range(3):  # catch-up LATEST (the default): a wait for the limit is no misfire
        job = cron_job(f"c-{i}", "* * * * * *", T0 - 1_000, tenant="a")
        timer.submit(bump(job, overlap="ALLOW"), T0 - 1_000)
    timer.run(T0 - 1_000, T0 + 8_000, 50)
    # 3 jobs ticking every second against 1 fire/s: the backlog grows, nothing is lost.
    outcomes = Counter((d["job_id"], d["scheduled_for_ms"]) for d in timer.dues())
    assert set(outcomes.values()) == {1}
    assert timer.results() == []  # no MISSED, no SKIPPED
    assert {d["job_id"] for d in timer.dues()} == {"c-0", "c-1", "c-2"}
    assert all(d["fire_at_ms"] >= d["scheduled_for_ms"] for d in timer.dues())
    assert_limited_spacing(timer.dues(), 1000)
    # Every tick due by the end was settled when due: it fired or waits in the wheel.
    assert len(timer.dues()) + len(held_keys(timer)) == 3 * 9


def test_a_held_fire_of_a_cancelled_or_deleted_job_ends_cancelled_once() -> None:
    timer = Timer(tenant_limits=LIMITED)
    submit_herd(timer, 4, 0)
    timer.punctuate(T0)  # a-0000 fires, three are held
    assert len(timer.dues()) == 1 and len(held_keys(timer)) == 3
    timer.submit(one_off("a-0001", T0, version=2, tenant="a", status="CANCELLED"), T0 + 10)
    timer.result("a-0000", T0, "SUCCEEDED", T0 + 20)  # a result saves its state: nothing moves
    timer.run(T0 + 20, T0 + 1_000, 10)
    assert sorted(d["job_id"] for d in timer.dues()) == ["a-0000", "a-0002", "a-0003"]
    [cancelled] = timer.results()
    assert (cancelled["job_id"], cancelled["status"]) == ("a-0001", "CANCELLED")
    # A first attempt never emitted: attempt 0, as every fire's outcome that is not a run.
    assert (cancelled["reason"], cancelled["attempt"]) == ("job cancelled", 0)
    assert timer.ledger() == Counter({T0: 3})  # and a-0001's CANCELLED: one outcome each
    assert not held_keys(timer)


def test_a_held_fire_keeps_its_execution_id_and_is_emitted_when_its_slot_comes() -> None:
    timer = Timer(tenant_limits=LIMITED, fire_ahead_ms=200)
    submit_herd(timer, 6, 0)
    timer.run(T0 - 200, T0 + 600, 10)
    for due in timer.dues():
        assert due["execution_id"] == execution_id(due["job_id"], T0)
        assert due["fire_at_ms"] - 200 <= due["emitted_at_ms"] <= due["fire_at_ms"]


def test_a_held_fire_an_overlap_replace_cancelled_is_dropped_not_run() -> None:
    timer = Timer(tenant_limits={"a": {"executions_per_s": 0.12}})  # a slot per 100 s
    job = cron_job("r", "*/10 * * * * *", T_MIN - 10_000, tenant="a", overlap="REPLACE")
    timer.submit(job, T_MIN - 10_000)
    timer.run(T_MIN, T_MIN + 130_000, 1_000)
    fired = Counter(d["scheduled_for_ms"] for d in timer.dues())
    cancelled = Counter(
        r["scheduled_for_ms"] for r in timer.results() if r["status"] == "CANCELLED"
    )
    assert fired[T_MIN] == 1 and cancelled[T_MIN] == 1  # emitted, then replaced (as before)
    # The tick held for +100 s was replaced at +20 s: CANCELLED once, never emitted.
    assert cancelled[T_MIN + 10_000] == 1 and fired[T_MIN + 10_000] == 0
    assert all(n == 1 for n in cancelled.values()) and all(n == 1 for n in fired.values())


def test_without_limits_nothing_changes_and_the_metrics_name_each_tenant() -> None:
    timer = Timer()
    assert not timer.env.tenant_limits.active
    submit_herd(timer, 5, 5)
    timer.punctuate(T0)
    assert all(d["fire_at_ms"] == T0 for d in timer.dues()) and len(timer.dues()) == 10
    limited = Timer(tenant_limits=LIMITED)
    submit_herd(limited, 5, 1)
    limited.run(T0, T0 + 100, 10)
    collector = TimerCollector(
        limited.env.fire_stats, Counter(), RuntimeStats(), limited.env.tenant_limits
    )
    samples = {
        (s.name, s.labels.get("tenant")): s.value
        for family in collector.collect()
        for s in family.samples
    }
    assert samples[("kafkron_timer_tenant_throttled_total", "a")] == 4
    assert samples[("kafkron_timer_tenant_held_total", "a")] == 4  # fire-ahead 0: all held
    assert samples[("kafkron_timer_tenant_throttle_delay_seconds_total", "a")] == pytest.approx(1.0)
    assert ("kafkron_timer_tenant_throttled_total", "b") not in samples
    assert keys.due_bound(T0) > keys.pack_ms(T0)


# --- in-flight limits ------------------------------------------------------------------------

IN_FLIGHT = {"a": {"in_flight": 24}}  # 2 runs in flight per partition


def test_in_flight_shares_split_over_the_partitions_with_one_at_least() -> None:
    limits = InFlightLimits({"a": 24, "small": 5, "*": 120}, PARTITIONS)
    assert (limits.share("a"), limits.share("small"), limits.share("zz")) == (2, 1, 10)
    assert InFlightLimits({"a": 24}, PARTITIONS).share("b") is None
    assert not InFlightLimits({}, PARTITIONS).active


def parked_keys(timer: Timer) -> list[bytes]:
    return [k for k in timer.jobs.data if k.startswith(PARK_PREFIX)]


def finish(timer: Timer, job_id: str, now_ms: int) -> None:
    """The execution of ``job_id``'s one pending tick starts and succeeds."""
    [tick_ms] = {d["scheduled_for_ms"] for d in timer.dues() if d["job_id"] == job_id}
    timer.result(job_id, tick_ms, "STARTED", now_ms)
    timer.result(job_id, tick_ms, "SUCCEEDED", now_ms + 1)


def test_a_tenant_at_its_in_flight_share_parks_and_each_finish_lets_the_oldest_out() -> None:
    timer = Timer(tenant_limits=IN_FLIGHT)
    for i in range(6):  # fire times 0, 10, ... 50 ms after T0: the park keeps that order
        timer.submit(one_off(f"a-{i}", T0 + 10 * i, tenant="a"), T0 - 5_000)
    for i in range(3):
        timer.submit(one_off(f"b-{i}", T0, tenant="b"), T0 - 5_000)
    timer.run(T0, T0 + 100, 10)
    fired = [d["job_id"] for d in timer.dues()]
    assert sorted(fired) == ["a-0", "a-1", "b-0", "b-1", "b-2"]  # b has no limit
    assert len(parked_keys(timer)) == 4
    assert timer.env.tenant_limits.in_flight.in_flight() == {"a": 2}
    finish(timer, "b-0", T0 + 200)  # another tenant's finish frees none of a's runs
    assert len(timer.dues()) == 5
    finish(timer, "a-1", T0 + 300)
    assert [d["job_id"] for d in timer.dues()][5:] == ["a-2"]
    assert timer.dues()[-1]["emitted_at_ms"] == T0 + 301  # in the finishing result's scope
    finish(timer, "a-1", T0 + 310)  # a duplicate result frees nothing
    assert len(timer.dues()) == 6
    for step, job_id in enumerate(["a-0", "a-2", "a-3"]):
        finish(timer, job_id, T0 + 400 + step * 10)
    assert [d["job_id"] for d in timer.dues()][6:] == ["a-3", "a-4", "a-5"]
    assert not parked_keys(timer)
    assert Counter(d["execution_id"] for d in timer.dues()).most_common(1)[0][1] == 1
    for job_id in ("a-4", "a-5"):
        finish(timer, job_id, T0 + 600)
    assert timer.env.tenant_limits.in_flight.in_flight() == {"a": 0}
    assert not [k for k in timer.jobs.data if k.startswith(RUN_PREFIX)]


def test_parked_fires_and_counts_survive_a_restart() -> None:
    timer = Timer(tenant_limits=IN_FLIGHT)
    for i in range(4):
        timer.submit(one_off(f"a-{i}", T0 + i, tenant="a"), T0 - 5_000)
    timer.run(T0, T0 + 50, 10)
    assert len(timer.dues()) == 2
    restarted = Timer(tenant_limits=IN_FLIGHT)  # fresh memory, the same stores
    restarted.jobs, restarted.wheel, restarted.out = timer.jobs, timer.wheel, timer.out
    restarted.run(T0 + 60, T0 + 100, 10)
    assert len(restarted.dues()) == 2  # still at its share: the stored count says so
    finish(restarted, "a-0", T0 + 200)
    finish(restarted, "a-1", T0 + 210)
    assert [d["job_id"] for d in restarted.dues()] == ["a-0", "a-1", "a-2", "a-3"]


def test_a_parked_fire_of_a_cancelled_job_ends_cancelled_and_the_next_goes_out() -> None:
    timer = Timer(tenant_limits={"a": {"in_flight": 12}})  # 1 per partition
    for i in range(3):
        timer.submit(one_off(f"a-{i}", T0 + i, tenant="a"), T0 - 5_000)
    timer.run(T0, T0 + 50, 10)
    timer.submit(one_off("a-1", T0 + 1, version=2, tenant="a", status="CANCELLED"), T0 + 60)
    finish(timer, "a-0", T0 + 100)
    assert [d["job_id"] for d in timer.dues()] == ["a-0", "a-2"]
    cancelled = [r for r in timer.results() if r["status"] == "CANCELLED"]
    assert [r["job_id"] for r in cancelled] == ["a-1"]
    assert timer.env.tenant_limits.in_flight.in_flight() == {"a": 1}


def test_both_limits_a_held_fire_at_its_slot_waits_for_a_free_run() -> None:
    timer = Timer(tenant_limits={"a": {"executions_per_s": 120, "in_flight": 12}})
    submit_herd(timer, 3, 0)
    timer.run(T0, T0 + 500, 10)
    assert [d["job_id"] for d in timer.dues()] == ["a-0000"]  # slots at +100, +200 passed
    assert len(parked_keys(timer)) == 2 and not held_keys(timer)
    finish(timer, "a-0000", T0 + 600)
    finish(timer, "a-0001", T0 + 700)
    dues = timer.dues()
    assert [d["job_id"] for d in dues] == ["a-0000", "a-0001", "a-0002"]
    assert [d["fire_at_ms"] for d in dues] == [T0, T0 + 100, T0 + 200]  # the slots kept


def restarted_with(timer: Timer, **overrides: Any) -> Timer:
    """A timer of other settings over ``timer``'s stores and outputs (a restart)."""
    restarted = Timer(**overrides)
    restarted.jobs, restarted.wheel, restarted.out = timer.jobs, timer.wheel, timer.out
    return restarted


class ReadCounting(FakeStore):
    """The jobs store, counting the reads of each key (a fire through its job's state reads
    the job; a fast entry does not)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: Counter[bytes] = Counter()

    def get(self, key: bytes) -> bytes | None:
        self.reads[key] += 1
        return super().get(key)


@pytest.mark.parametrize("limits", [LIMITED, {"a": {"in_flight": 24}}, {"*": {"in_flight": 99}}])
def test_with_limits_only_a_limited_tenants_entries_go_through_their_jobs_state(
    limits: dict[str, Any],
) -> None:
    timer = Timer(tenant_limits=limits)
    timer.jobs = ReadCounting()
    submit_herd(timer, 5, 5)
    timer.submit(one_off("aa-0", T0, tenant="aa"), T0 - 5_000)  # a name ending like "a"'s
    timer.jobs.reads.clear()
    timer.run(T0, T0 + 1_000, 10)
    assert Counter(d["execution_id"] for d in timer.dues()).most_common(1)[0][1] == 1
    read = {key.decode() for key in timer.jobs.reads if key[:1] != b"\xff"}
    every_tenant = "*" in limits  # a default limits every tenant: all through their state
    assert read == {
        job_id
        for job_id in (f"{t}-{i:04d}" for t in "ab" for i in range(5))
        if job_id.startswith("a-") or every_tenant
    } | ({"aa-0"} if every_tenant else set())
    fired_b = [d for d in timer.dues() if d["tenant"] == "b"]
    assert len(fired_b) == 5 and all(d["fire_at_ms"] == T0 for d in fired_b)


def test_a_limit_removed_at_a_restart_lets_its_parked_fires_out() -> None:
    """Parked fires waited for results of their tenant's counted runs; with the limit gone
    (limits are read at start) nothing counts runs any more, so they go out at once."""
    timer = Timer(tenant_limits=IN_FLIGHT)
    for i in range(5):
        timer.submit(one_off(f"a-{i}", T0 + i, tenant="a"), T0 - 5_000)
    timer.submit(one_off("a-gone", T0 + 9, tenant="a"), T0 - 5_000)
    timer.run(T0, T0 + 50, 10)
    assert len(timer.dues()) == 2 and len(parked_keys(timer)) == 4
    timer.submit(one_off("a-gone", T0 + 9, version=2, tenant="a", status="CANCELLED"), T0 + 60)
    unlimited = restarted_with(timer)
    assert release_unheld(unlimited.scope(T0 + 100))
    fired = [d["job_id"] for d in unlimited.dues()]
    assert fired == ["a-0", "a-1", "a-2", "a-3", "a-4"]  # in fire-time order
    assert [r["job_id"] for r in unlimited.results() if r["status"] == "CANCELLED"] == ["a-gone"]
    assert not parked_keys(unlimited)
    assert not [k for k in unlimited.jobs.data if k.startswith((RUN_PREFIX, COUNT_PREFIX))]
    assert release_unheld(unlimited.scope(T0 + 110)) and len(unlimited.dues()) == 5


def test_a_limit_raised_at_a_restart_lets_out_what_the_new_share_allows_in_batches() -> None:
    timer = Timer(tenant_limits={"a": {"in_flight": 12}})  # 1 per partition
    for i in range(6):
        timer.submit(one_off(f"a-{i}", T0 + i, tenant="a"), T0 - 5_000)
    timer.run(T0, T0 + 50, 10)
    assert len(timer.dues()) == 1 and len(parked_keys(timer)) == 5
    raised = restarted_with(timer, tenant_limits={"a": {"in_flight": 48}})  # 4 per partition
    assert not release_unheld(raised.scope(T0 + 100), batch=2)  # more to look at next time
    assert [d["job_id"] for d in raised.dues()] == ["a-0", "a-1", "a-2"]
    assert release_unheld(raised.scope(T0 + 110), batch=2)  # at its share: results go on
    assert [d["job_id"] for d in raised.dues()] == ["a-0", "a-1", "a-2", "a-3"]
    assert len(parked_keys(raised)) == 2
    assert raised.env.tenant_limits.in_flight.in_flight() == {"a": 4}
    finish(raised, "a-0", T0 + 200)
    assert [d["job_id"] for d in raised.dues()][4:] == ["a-4"]


def test_in_flight_limits_are_read_from_json_and_zero_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KAFKRON_TIMER_TENANT_LIMITS", '{"*": {"in_flight": 200}}')
    assert TimerSettings().tenant_limits["*"].in_flight == 200
    monkeypatch.setenv("KAFKRON_TIMER_TENANT_LIMITS", '{"batch": {"in_flight": 0}}')
    with pytest.raises(ValidationError, match="batch"):
        TimerSettings()
