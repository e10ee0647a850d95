"""The timer's decisions on an in-memory store: fires, outcomes, policies, commands, results.

Pure logic only: the stores are a sorted dict fake of the processor's store transaction and
outputs are collected in a list. Every test checks the ledger rule of ARCHITECTURE.md
(invariant 1): each nominal tick gets exactly one outcome, a DueEvent or a result.
"""

from __future__ import annotations

import bisect
import copy
import dataclasses
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
from croniter import croniter

from services.timer import keys
from services.timer.drain import drain_due
from services.timer.inputs import handle_input
from services.timer.policies import (
    CANCELLED_REPLACED,
    MISSED_CATCHUP_NONE,
    MISSED_OUTSIDE_WINDOW,
    MISSED_SUPERSEDED,
    SKIPPED_QUEUE_FULL,
    SKIPPED_STILL_RUNNING,
    jitter_offset_ms,
)
from services.timer.scope import Scope, TimerEnv
from services.timer.settings import TimerSettings
from services.timer.state import load_state
from services.timer.wheel import WATERMARK_KEY
from streams.codec import Codec, RecordKind
from streams.dead_letters import value_of
from streams.identity import execution_id
from streams.records import (
    AttemptOutcome,
    CronSchedule,
    DueEvent,
    ExecutionStatus,
    Job,
    Priority,
    RetryRequest,
)
from streams.schedule import next_fire_after, parse_cron
from streams.settings import KafkaSettings

CODEC = Codec.from_directory()
T0 = 1_790_000_000_000  # 2026-09-21T14:13:20Z, a whole second
T_MIN = 1_790_000_040_000  # 2026-09-21T14:14:00Z, a whole minute


class FakeStore:
    """A sorted in-memory key-value store with the processor transaction's calls."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def set(self, key: bytes, value: bytes) -> None:
        if key not in self.data:
            bisect.insort(self._keys, key)
        self.data[key] = value

    def delete(self, key: bytes) -> None:
        if self.data.pop(key, None) is not None:
            del self._keys[bisect.bisect_left(self._keys, key)]

    def delete_many(self, keys: list[bytes]) -> None:
        for key in keys:
            self.delete(key)

    def iter_range(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        first = bisect.bisect_left(self._keys, start)
        last = bisect.bisect_left(self._keys, end)
        return [(k, self.data[k]) for k in self._keys[first:last][:limit]]

    def prefetch(self, keys: list[bytes]) -> None:
        """Nothing to read ahead in memory."""


def result_bytes(job_id: str, tick_ms: int, status: str, now_ms: int) -> bytes:
    """An encoded ExecutionResult of ``job_id``'s execution of ``tick_ms``."""
    record = {
        "execution_id": execution_id(job_id, tick_ms),
        "job_id": job_id,
        "scheduled_for_ms": tick_ms,
        "status": status,
        "recorded_at_ms": now_ms,
    }
    return CODEC.encode(RecordKind.EXECUTION_RESULT, record)


def timer_settings(**overrides: Any) -> TimerSettings:
    """The settings of the test timer; fire-ahead off unless ``overrides`` set it."""
    return TimerSettings(
        kafka=KafkaSettings(namespace="k."),
        instance_id="test-timer",
        **{"fire_ahead_ms": 0, **overrides},
    )


# Environments built once per (tag, overrides) by ``reused_env``: their readers and writers.
_BUILT_ENVS: dict[tuple[str, tuple[tuple[str, Any], ...]], TimerEnv] = {}


def reused_env(tag: str = "", **overrides: Any) -> TimerEnv:
    """A timer environment for ``overrides`` whose generated readers and writers are built
    and proven once per ``tag`` and ``overrides``, then shared by every environment this
    returns for them; its per-process state (dead letters, fire stats, tenant ranks and
    limits) is fresh each call.

    For property tests that build timers per example: building an environment generates,
    compiles and proves four record paths (~20 ms, most of such a test's time). The shared
    readers keep their memos from one example to the next, as a running timer's keep them
    from one record to the next. Tests of the start-up proof or of fallback counts build
    their own (``Timer()``); two timers compared in one example take different tags.
    """
    key = (tag, tuple(sorted(overrides.items())))
    built = _BUILT_ENVS.get(key)
    if built is None:
        built = _BUILT_ENVS[key] = TimerEnv.from_settings(timer_settings(**overrides), CODEC)
    return dataclasses.replace(
        built,
        dead_letters=Counter(),
        fire_stats=copy.deepcopy(built.fire_stats),
        tenant_ranks=copy.deepcopy(built.tenant_ranks),
        tenant_limits=copy.deepcopy(built.tenant_limits),
    )


class Timer:
    """One timer partition over fakes, driven by an explicit clock.

    Fire-ahead is off unless a test sets ``fire_ahead_ms``: these tests pin fire times to
    the millisecond (``test_fire_ahead.py`` tests the window)."""

    def __init__(self, *, env: TimerEnv | None = None, **overrides: Any) -> None:
        self.env = env or TimerEnv.from_settings(timer_settings(**overrides), CODEC)
        self.jobs = FakeStore()
        self.wheel = FakeStore()
        self.out: list[tuple[str, bytes | None, bytes | None]] = []
        self.offset = 0

    def scope(self, now_ms: int) -> Scope:
        return Scope(self.env, self.jobs, self.wheel, self._emit, now_ms)

    def _emit(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        self.out.append((topic, key, value))

    def feed(self, topic: str, key: bytes | None, value: bytes | None, now_ms: int) -> None:
        self.offset += 1
        handle_input(self.scope(now_ms), topic, 0, self.offset, key, value)

    def submit(self, job: Job, now_ms: int) -> None:
        value = CODEC.encode(RecordKind.JOB, job.to_avro())
        self.feed(self.env.jobs_topic, job.job_id.encode(), value, now_ms)

    def result(self, job_id: str, tick_ms: int, status: str, now_ms: int) -> None:
        value = result_bytes(job_id, tick_ms, status, now_ms)
        self.feed(self.env.results_topic, job_id.encode(), value, now_ms)

    def punctuate(self, now_ms: int) -> int:
        return drain_due(self.scope(now_ms), self.env.batch_size)

    def run(self, start_ms: int, end_ms: int, step_ms: int) -> None:
        for now_ms in range(start_ms, end_ms + 1, step_ms):
            self.punctuate(now_ms)

    def dues(self) -> list[dict[str, Any]]:
        return [
            CODEC.decode(RecordKind.DUE_EVENT, v)
            for t, _, v in self.out
            if t in self.env.due_topics and v is not None
        ]

    def results(self) -> list[dict[str, Any]]:
        return [
            CODEC.decode(RecordKind.EXECUTION_RESULT, v)
            for t, _, v in self.out
            if t == self.env.results_topic and v is not None
        ]

    def ledger(self) -> Counter[int]:
        """Outcomes per scheduled tick: DueEvents plus SKIPPED/MISSED/CANCELLED results."""
        ticks = [d["scheduled_for_ms"] for d in self.dues()]
        ticks += [r["scheduled_for_ms"] for r in self.results() if r["status"] != "CANCELLED"]
        return Counter(ticks)


def one_off(job_id: str, run_at_ms: int, version: int = 1, **fields: Any) -> Job:
    return Job(
        job_id=job_id,
        version=version,
        handler="test.handler",
        payload=b"\x01payload",
        run_at_ms=run_at_ms,
        created_at_ms=run_at_ms - 10_000,
        updated_at_ms=fields.pop("updated_at_ms", run_at_ms - 10_000),
        **fields,
    )


def bump(job: Job, **changes: Any) -> Job:
    """The job with ``changes`` applied, validated (model_copy would keep raw strings)."""
    return Job.model_validate({**job.model_dump(), **changes})


def cron_job(job_id: str, expression: str, updated_at_ms: int, **fields: Any) -> Job:
    timezone = fields.pop("timezone", "UTC")
    return Job(
        job_id=job_id,
        version=fields.pop("version", 1),
        handler="test.cron",
        cron=CronSchedule(expression=expression, timezone=timezone),
        created_at_ms=updated_at_ms,
        updated_at_ms=updated_at_ms,
        **fields,
    )


# --- one-off jobs -------------------------------------------------------------------------


def test_one_off_fires_once_at_its_time_with_spliced_bytes_equal_to_avro() -> None:
    timer = Timer()
    timer.submit(one_off("a", T0 + 5_000, priority="HIGH", jitter_ms=0), T0)
    timer.run(T0, T0 + 4_990, 10)
    assert timer.dues() == []
    timer.run(T0 + 5_000, T0 + 8_000, 10)
    [(topic, key, value)] = timer.out
    assert topic == "k.due.high" and key == b"a" and value is not None
    due = CODEC.decode(RecordKind.DUE_EVENT, value)
    assert due["execution_id"] == execution_id("a", T0 + 5_000) == "a@1790000005000"
    assert (due["scheduled_for_ms"], due["fire_at_ms"], due["emitted_at_ms"]) == (
        T0 + 5_000,
        T0 + 5_000,
        T0 + 5_000,
    )
    assert due["attempt"] == 1 and due["trigger"] == "SCHEDULE" and due["payload"] == b"\x01payload"
    assert value == CODEC.encode(RecordKind.DUE_EVENT, due)  # splicing == fastavro's bytes
    DueEvent.from_avro(due)  # and a valid record by the model's rules


def test_one_off_jitter_moves_the_fire_not_the_scheduled_time() -> None:
    timer = Timer()
    timer.submit(one_off("j", T0 + 60_000, jitter_ms=20_000), T0)
    timer.run(T0, T0 + 90_000, 100)
    [due] = timer.dues()
    offset = jitter_offset_ms(execution_id("j", T0 + 60_000), 20_000)
    assert due["scheduled_for_ms"] == T0 + 60_000
    assert due["fire_at_ms"] == T0 + 60_000 + offset
    assert due["fire_at_ms"] <= due["emitted_at_ms"] < due["fire_at_ms"] + 100


def test_one_off_completes_and_is_deleted_after_retention() -> None:
    timer = Timer(one_off_retention_ms=60_000)
    timer.submit(one_off("c", T0 + 1_000), T0)
    timer.run(T0, T0 + 1_000, 10)
    assert len(timer.dues()) == 1
    timer.result("c", T0 + 1_000, "STARTED", T0 + 1_100)
    timer.result("c", T0 + 1_000, "SUCCEEDED", T0 + 2_000)
    state = load_state(timer.scope(T0 + 2_000), b"c")
    assert state is not None and state.completed and state.running == []
    timer.run(T0 + 2_000, T0 + 61_990, 1_000)
    assert [o for o in timer.out if o[0] == "k.jobs"] == []
    timer.punctuate(T0 + 62_000)
    assert timer.out[-1] == ("k.jobs", b"c", None)
    timer.feed("k.jobs", b"c", None, T0 + 62_100)  # the tombstone comes back as input
    timer.punctuate(T0 + 62_200)  # idle: collects the fired fast entry
    assert set(timer.jobs.data) == {WATERMARK_KEY} and timer.wheel.data == {}


def test_one_off_late_beyond_window_is_missed_and_catchup_none_misses_after_grace() -> None:
    timer = Timer(misfire_grace_ms=5_000)
    timer.submit(one_off("w", T0, catchup_window_ms=60_000), T0)
    timer.submit(one_off("n", T0, catchup="NONE"), T0)
    timer.submit(one_off("g", T0 + 100_000, catchup="NONE"), T0)
    timer.punctuate(T0 + 100_000)  # down for 100 s
    by_job = {r["job_id"]: r for r in timer.results()}
    assert by_job["w"]["status"] == "MISSED" and by_job["w"]["reason"] == MISSED_OUTSIDE_WINDOW
    assert by_job["n"]["status"] == "MISSED" and by_job["n"]["reason"] == MISSED_CATCHUP_NONE
    assert [d["job_id"] for d in timer.dues()] == ["g"]  # on time: none is not a miss


def test_hot_bucket_drains_oldest_first_in_bounded_batches() -> None:
    timer = Timer(batch_size=5_000)
    for i in range(12_000):
        timer.submit(one_off(f"h{i:05d}", T0 + 1_000 + (i % 3)), T0)
    counts = [timer.punctuate(T0 + 2_000) for _ in range(4)]
    assert counts == [5_000, 5_000, 2_000, 0]
    fired = [d["scheduled_for_ms"] for d in timer.dues()]
    assert fired == sorted(fired) and len(set(d["execution_id"] for d in timer.dues())) == 12_000


# --- cron jobs: no drift, catch-up --------------------------------------------------------


def test_cron_ticks_match_croniter_over_1000_ticks_of_an_uneven_clock() -> None:
    timer = Timer()
    timer.submit(cron_job("c", "*/7 * * * * *", T0, overlap="ALLOW", catchup="ALL"), T0)
    now_ms, steps = T0, [3, 10, 250, 999, 1_001, 6_999, 7_000, 13]
    i = fired_count = 0
    while fired_count < 1_000:
        now_ms += steps[i % len(steps)]
        i += 1
        fired_count += timer.punctuate(now_ms)
    start = datetime.fromtimestamp(T0 / 1000, UTC)
    reference = croniter("*/7 * * * * *", start, second_at_beginning=True)
    expected = [int(reference.get_next(float) * 1000) for _ in range(1_000)]
    fired = [d["scheduled_for_ms"] for d in timer.dues()][:1_000]
    assert fired == expected
    assert all(d["emitted_at_ms"] - d["fire_at_ms"] < 7_000 for d in timer.dues())
    assert timer.results() == []
    assert set(timer.ledger().values()) == {1}


def test_cron_across_dst_follows_next_fire_after_chain() -> None:
    start = 1_793_491_200_000  # 2026-11-01T00:00Z; New York falls back at 06:00Z
    end = start + 12 * 3_600_000
    timer = Timer()
    job = cron_job("ny", "*/20 * * * *", start, timezone="America/New_York", overlap="ALLOW")
    timer.submit(job, start)
    timer.run(start, end, 60_000)
    spec = parse_cron("*/20 * * * *", "America/New_York")
    expected: list[int] = []
    tick = next_fire_after(spec, start)
    while tick is not None and tick <= end:
        expected.append(tick)
        tick = next_fire_after(spec, tick)
    assert [d["scheduled_for_ms"] for d in timer.dues()] == expected
    assert len(expected) == 3 * 12  # both passes of the repeated hour fire ('*' hour field)


@pytest.mark.parametrize(
    ("policy", "fired", "missed"),
    [
        ("ALL", 10, {}),
        ("LATEST", 1, {MISSED_SUPERSEDED: 9}),
        ("NONE", 0, {MISSED_CATCHUP_NONE: 10}),
    ],
)
def test_catchup_policies_give_every_missed_tick_one_outcome(
    policy: str, fired: int, missed: dict[str, int]
) -> None:
    timer = Timer(misfire_grace_ms=1_000)
    timer.submit(cron_job("m", "0 * * * * *", T_MIN - 1, catchup=policy, overlap="ALLOW"), T_MIN)
    timer.punctuate(T_MIN + 9 * 60_000 + 30_000)  # down for 9.5 minutes
    assert len(timer.dues()) == fired
    assert Counter(r["reason"] for r in timer.results()) == Counter(missed)
    assert timer.ledger() == Counter(T_MIN + i * 60_000 for i in range(10))
    if policy == "LATEST":
        assert timer.dues()[0]["scheduled_for_ms"] == T_MIN + 9 * 60_000


def test_catchup_longer_than_one_batch_continues_and_latest_fires_only_the_newest() -> None:
    timer = Timer(max_catchup_ticks=3)
    timer.submit(cron_job("b", "* * * * * *", T0 - 1, catchup="LATEST"), T0)
    now_ms = T0 + 9_500
    for i in range(5):  # each batch leaves the rest for the next punctuation
        timer.punctuate(now_ms + i)
    assert [d["scheduled_for_ms"] for d in timer.dues()] == [T0 + 9_000]
    assert len(timer.results()) == 9 and set(timer.ledger().values()) == {1}


def test_catchup_window_splits_outside_and_inside() -> None:
    timer = Timer()
    job = cron_job(
        "w", "0 * * * * *", T_MIN - 1, catchup="ALL", catchup_window_ms=120_000, overlap="ALLOW"
    )
    timer.submit(job, T_MIN - 1)
    timer.punctuate(T_MIN + 5 * 60_000 + 1)  # down for 5 minutes
    assert [d["scheduled_for_ms"] for d in timer.dues()] == [T_MIN + 240_000, T_MIN + 300_000]
    assert [(r["scheduled_for_ms"], r["reason"]) for r in timer.results()] == [
        (T_MIN + i * 60_000, MISSED_OUTSIDE_WINDOW) for i in range(4)
    ]


def test_a_job_first_seen_late_replays_at_most_its_catchup_window() -> None:
    timer = Timer()
    job = cron_job(
        "old", "0 * * * * *", T_MIN - 36_000_000, catchup="ALL", overlap="ALLOW",
        catchup_window_ms=120_000,
    )  # fmt: skip
    timer.submit(job, T_MIN + 1)
    timer.punctuate(T_MIN + 1)
    assert [d["scheduled_for_ms"] for d in timer.dues()] == [T_MIN - 60_000, T_MIN]
    assert timer.results() == []


# --- overlap policies ---------------------------------------------------------------------


def _every_10s(policy: str) -> Timer:
    timer = Timer()
    timer.submit(cron_job("o", "*/10 * * * * *", T_MIN - 1, overlap=policy), T_MIN - 1)
    return timer


def test_overlap_skip_skips_while_running_and_fires_after_it_ends() -> None:
    timer = _every_10s("SKIP")
    timer.punctuate(T_MIN)
    timer.result("o", T_MIN, "STARTED", T_MIN + 5)
    timer.punctuate(T_MIN + 10_000)
    timer.result("o", T_MIN, "SUCCEEDED", T_MIN + 15_000)
    timer.punctuate(T_MIN + 20_000)
    assert [d["scheduled_for_ms"] for d in timer.dues()] == [T_MIN, T_MIN + 20_000]
    [skipped] = timer.results()
    assert (skipped["scheduled_for_ms"], skipped["status"], skipped["reason"]) == (
        T_MIN + 10_000,
        "SKIPPED",
        SKIPPED_STILL_RUNNING,
    )


def test_overlap_queue_one_holds_one_tick_and_skips_the_next() -> None:
    timer = _every_10s("QUEUE_ONE")
    timer.punctuate(T_MIN)
    timer.punctuate(T_MIN + 10_000)  # queued
    timer.punctuate(T_MIN + 20_000)  # one already queued: skipped
    assert [d["scheduled_for_ms"] for d in timer.dues()] == [T_MIN]
    timer.result("o", T_MIN, "SUCCEEDED", T_MIN + 25_000)  # the queued one goes out now
    assert [d["scheduled_for_ms"] for d in timer.dues()] == [T_MIN, T_MIN + 10_000]
    assert timer.dues()[1]["emitted_at_ms"] == T_MIN + 25_000
    assert [(r["scheduled_for_ms"], r["reason"]) for r in timer.results()] == [
        (T_MIN + 20_000, SKIPPED_QUEUE_FULL)
    ]
    assert timer.ledger() == Counter(T_MIN + i * 10_000 for i in range(3))


def test_overlap_allow_fires_every_tick() -> None:
    timer = _every_10s("ALLOW")
    timer.run(T_MIN, T_MIN + 30_000, 10_000)
    assert len(timer.dues()) == 4 and timer.results() == []


def test_overlap_replace_cancels_the_running_execution() -> None:
    timer = _every_10s("REPLACE")
    timer.punctuate(T_MIN)
    timer.punctuate(T_MIN + 10_000)
    assert [d["scheduled_for_ms"] for d in timer.dues()] == [T_MIN, T_MIN + 10_000]
    [cancelled] = timer.results()
    assert cancelled["execution_id"] == execution_id("o", T_MIN)
    assert (cancelled["status"], cancelled["reason"]) == ("CANCELLED", CANCELLED_REPLACED)


# --- commands -----------------------------------------------------------------------------


def test_pause_keeps_ticking_with_skipped_paused_and_resume_fires_again() -> None:
    timer = Timer()
    job = cron_job("p", "*/10 * * * * *", T_MIN - 1, overlap="ALLOW")
    timer.submit(job, T_MIN - 1)
    timer.punctuate(T_MIN)
    paused = bump(job, version=2, status="PAUSED", updated_at_ms=T_MIN + 1)
    timer.submit(paused, T_MIN + 1)
    timer.run(T_MIN + 10_000, T_MIN + 20_000, 10_000)
    resumed = bump(paused, version=3, status="SCHEDULED", updated_at_ms=T_MIN + 25_000)
    timer.submit(resumed, T_MIN + 25_000)
    timer.punctuate(T_MIN + 30_000)
    assert [d["scheduled_for_ms"] for d in timer.dues()] == [T_MIN, T_MIN + 30_000]
    assert [(r["scheduled_for_ms"], r["status"], r["reason"]) for r in timer.results()] == [
        (T_MIN + 10_000, "SKIPPED", "paused"),
        (T_MIN + 20_000, "SKIPPED", "paused"),
    ]
    assert timer.ledger() == Counter(T_MIN + i * 10_000 for i in range(4))


def test_cancel_removes_pending_fires_and_cancels_queued_and_manual_ones() -> None:
    timer = Timer()
    job = cron_job("x", "*/10 * * * * *", T_MIN - 1, overlap="QUEUE_ONE")
    timer.submit(job, T_MIN - 1)
    timer.run(T_MIN, T_MIN + 10_000, 10_000)  # fires T_MIN, queues T_MIN + 10 s
    manual = bump(job, version=2, manual_fire_at_ms=T_MIN + 60_000, updated_at_ms=T_MIN + 11)
    timer.submit(manual, T_MIN + 11)
    cancelled = bump(manual, version=3, status="CANCELLED", updated_at_ms=T_MIN + 12)
    timer.submit(cancelled, T_MIN + 12)
    assert timer.wheel.data == {}
    timer.run(T_MIN + 20_000, T_MIN + 120_000, 10_000)
    assert [d["scheduled_for_ms"] for d in timer.dues()] == [T_MIN]
    assert sorted((r["scheduled_for_ms"], r["status"]) for r in timer.results()) == [
        (T_MIN + 10_000, "CANCELLED"),
        (T_MIN + 60_000, "CANCELLED"),
    ]


def test_stale_and_repeated_versions_are_ignored() -> None:
    timer = Timer()
    timer.submit(one_off("s", T0 + 5_000, version=2), T0)
    timer.submit(one_off("s", T0 + 1_000, version=1), T0 + 1)  # older: ignored
    timer.submit(one_off("s", T0 + 2_000, version=2), T0 + 2)  # same version: ignored
    timer.run(T0, T0 + 6_000, 100)
    assert [d["scheduled_for_ms"] for d in timer.dues()] == [T0 + 5_000]
    assert timer.dues()[0]["job_version"] == 2


def test_update_settles_overdue_ticks_under_the_old_definition_first() -> None:
    timer = Timer()
    job = cron_job("u", "0 * * * * *", T_MIN - 1, overlap="ALLOW")
    timer.submit(job, T_MIN - 1)
    # The timer lags: the T_MIN tick is not fired yet when an update arrives after it.
    updated = bump(job, version=2, handler="new.handler", updated_at_ms=T_MIN + 500)
    timer.submit(updated, T_MIN + 500)
    timer.punctuate(T_MIN + 60_000)
    assert [(d["scheduled_for_ms"], d["handler"]) for d in timer.dues()] == [
        (T_MIN, "test.cron"),
        (T_MIN + 60_000, "new.handler"),
    ]


def test_manual_trigger_fires_once_with_its_scheduled_for() -> None:
    timer = Timer()
    job = cron_job("m", "0 0 1 1 *", T0, manual_fire_at_ms=T0 + 1_000)
    timer.submit(job, T0 + 500)
    timer.run(T0 + 500, T0 + 2_000, 10)
    again = bump(job, version=2, updated_at_ms=T0 + 3_000)
    timer.submit(again, T0 + 3_000)  # same manual_fire_at_ms: already processed
    timer.run(T0 + 3_000, T0 + 5_000, 10)
    [due] = timer.dues()
    assert (due["trigger"], due["scheduled_for_ms"], due["execution_id"]) == (
        "MANUAL",
        T0 + 1_000,
        execution_id("m", T0 + 1_000),
    )


def test_manual_trigger_of_a_running_one_off_obeys_overlap() -> None:
    timer = Timer()
    job = one_off("r", T0 + 1_000)
    timer.submit(job, T0)
    timer.punctuate(T0 + 1_000)  # the fast path fires it
    trigger = bump(job, version=2, manual_fire_at_ms=T0 + 2_000)
    timer.submit(trigger, T0 + 1_500)
    timer.punctuate(T0 + 2_000)
    assert len(timer.dues()) == 1
    [skipped] = timer.results()
    assert (skipped["status"], skipped["trigger"]) == ("SKIPPED", "MANUAL")


def test_dependent_jobs_are_not_fired_by_the_timer() -> None:
    timer = Timer()
    timer.submit(bump(one_off("d", T0 + 1_000), run_at_ms=None, depends_on=["up"]), T0)
    timer.run(T0, T0 + 5_000, 100)
    assert timer.out == [] and timer.wheel.data == {}


def test_a_job_with_two_schedule_kinds_is_dead_lettered_not_fired() -> None:
    timer = Timer()
    timer.submit(one_off("d", T0 + 1_000, depends_on=["up"]), T0)
    timer.run(T0, T0 + 5_000, 100)
    [(topic, key, value)] = timer.out
    dead = CODEC.decode(RecordKind.DEAD_LETTER, value_of(value))
    assert topic == "k.dlq" and key is None and timer.wheel.data == {}
    assert dead["reason"] == (
        "Job must have exactly one of run_at_ms, cron, depends_on (it has run_at_ms, depends_on)"
    )


def test_tombstone_deletes_the_job_and_its_pending_fires() -> None:
    timer = Timer()
    timer.submit(cron_job("t", "*/10 * * * * *", T_MIN - 1), T_MIN - 1)
    timer.feed("k.jobs", b"t", None, T_MIN - 1)
    timer.run(T_MIN, T_MIN + 60_000, 10_000)
    assert timer.out == [] and timer.jobs.data == {} and timer.wheel.data == {}


# --- retries and bad input ----------------------------------------------------------------


def _retry_request(job_id: str, tick_ms: int, fire_at_ms: int) -> RetryRequest:
    due = DueEvent(
        execution_id=execution_id(job_id, tick_ms),
        job_id=job_id,
        job_version=1,
        scheduled_for_ms=tick_ms,
        fire_at_ms=fire_at_ms,
        attempt=2,
        handler="test.handler",
        timeout_ms=1_000,
        priority=Priority.LOW,
        emitted_at_ms=tick_ms + 10,
        history=[AttemptOutcome(attempt=1, status=ExecutionStatus.FAILED, error="boom")],
    )
    return RetryRequest(due=due, requested_at_ms=tick_ms + 20)


def test_retry_fires_the_carried_due_event_as_is_at_its_time() -> None:
    timer = Timer()
    timer.submit(one_off("r", T0), T0)
    request = _retry_request("r", T0, T0 + 5_000)
    value = CODEC.encode(RecordKind.RETRY_REQUEST, request.to_avro())
    timer.feed("k.retry", b"r", value, T0 + 100)
    timer.run(T0, T0 + 4_990, 10)
    assert len(timer.dues()) == 1  # the first attempt only
    timer.punctuate(T0 + 5_000)
    topic, key, carried = timer.out[-1]
    assert (topic, key) == ("k.due.low", b"r")
    assert carried == CODEC.encode(RecordKind.DUE_EVENT, request.due.to_avro())


def test_retry_of_a_cancelled_job_ends_cancelled() -> None:
    timer = Timer()
    job = one_off("rc", T0)
    timer.submit(job, T0)
    timer.punctuate(T0)
    request = _retry_request("rc", T0, T0 + 5_000)
    timer.feed("k.retry", b"rc", CODEC.encode(RecordKind.RETRY_REQUEST, request.to_avro()), T0)
    timer.submit(bump(job, version=2, status="CANCELLED"), T0 + 1)
    timer.punctuate(T0 + 5_000)
    [result] = timer.results()
    assert (result["status"], result["attempt"], result["scheduled_for_ms"]) == (
        "CANCELLED",
        2,
        T0,
    )


@pytest.mark.parametrize(
    ("topic", "key", "value"),
    [
        ("k.jobs", b"bad", b"not avro at all"),
        ("k.job-results", b"bad", None),
        ("k.retry", b"bad", b"\xc3\x01" + b"\x00" * 8),
        ("k.jobs", b"other-key", "job"),
    ],
)
def test_undecodable_input_goes_to_the_dlq_and_processing_continues(
    topic: str, key: bytes, value: bytes | str | None
) -> None:
    timer = Timer()
    if value == "job":
        value = CODEC.encode(RecordKind.JOB, one_off("bad", T0).to_avro())
    assert not isinstance(value, str)
    timer.feed(topic, key, value, T0)
    [(dlq_topic, dlq_key, dlq_value)] = timer.out
    assert dlq_topic == "k.dlq" and dlq_key is None and dlq_value is not None
    letter = CODEC.decode(RecordKind.DEAD_LETTER, dlq_value)
    assert letter["kind"] == "UNDECODABLE" and letter["reason"]
    assert (letter["source_topic"], letter["source_partition"], letter["source_offset"]) == (
        topic,
        0,
        1,
    )
    assert (letter["raw_key"], letter["raw_value"]) == (key, value)
    timer.submit(one_off("good", T0 + 10), T0)
    timer.punctuate(T0 + 10)
    assert [d["job_id"] for d in timer.dues()] == ["good"]


def test_an_unschedulable_job_goes_to_the_dlq() -> None:
    timer = Timer()
    timer.submit(cron_job("bad-cron", "61 * * * *", T0), T0)
    [(topic, _, value)] = timer.out
    assert topic == "k.dlq" and value is not None
    assert "61 * * * *" in CODEC.decode(RecordKind.DEAD_LETTER, value)["reason"]
    assert timer.jobs.data == {}


def test_wheel_entries_are_time_ordered_and_round_trip() -> None:
    entries = [
        keys.schedule_key(T0 + 5, b"z", keys.NO_RANK),
        keys.schedule_key(T0 + 4, b"y", 7),
        keys.manual_key(T0 + 1, b"job\x00S", T0 + 1),
        keys.retry_key(T0 + 2, b"a", T0 - 9),
        keys.tombstone_key(T0 + 3, b"\xffT"),
    ]
    assert [keys.parse_key(k).fire_ms for k in sorted(entries)] == [
        T0 + 1, T0 + 2, T0 + 3, T0 + 4, T0 + 5
    ]  # fmt: skip
    ranked = keys.parse_key(keys.schedule_key(T0 + 4, b"y", 7))
    assert (ranked.job_id, ranked.kind, ranked.rank) == (b"y", keys.SCHEDULE, 7)
    assert keys.parse_key(keys.schedule_key(T0 + 5, b"z", keys.NO_RANK)).rank == keys.NO_RANK
    parsed = keys.parse_key(keys.retry_key(T0 + 2, b"a", T0 - 9))
    assert (parsed.job_id, parsed.kind, parsed.tick_ms) == (b"a", keys.RETRY, T0 - 9)
    assert keys.parse_key(keys.manual_key(T0 + 1, b"job\x00S", T0 + 1)).job_id == b"job\x00S"


# --- the fired-through watermark ----------------------------------------------------------


def test_entries_due_before_the_watermark_still_fire() -> None:
    timer = Timer()
    timer.submit(one_off("zz-late-key", T0 + 5_000), T0)
    timer.punctuate(T0 + 5_000)  # the watermark moves past T0 + 5 s
    timer.submit(one_off("aa-past", T0 + 1_000), T0 + 5_001)  # due in the past, sorts first
    job = cron_job("aa-manual", "0 0 1 1 *", T0, manual_fire_at_ms=T0 + 2_000)
    timer.submit(job, T0 + 5_002)
    request = _retry_request("zz-late-key", T0 + 5_000, T0 + 3_000)
    value = CODEC.encode(RecordKind.RETRY_REQUEST, request.to_avro())
    timer.feed("k.retry", b"zz-late-key", value, T0 + 5_003)
    timer.punctuate(T0 + 5_010)
    fired = [(d["job_id"], d["scheduled_for_ms"], d["attempt"]) for d in timer.dues()]
    assert sorted(fired) == [
        ("aa-manual", T0 + 2_000, 1),
        ("aa-past", T0 + 1_000, 1),
        ("zz-late-key", T0 + 5_000, 1),
        ("zz-late-key", T0 + 5_000, 2),
    ]
    [past] = [d for d in timer.dues() if d["job_id"] == "aa-past"]
    assert past["fire_at_ms"] == T0 + 1_000  # the real fire time, not the later key's


def test_fired_fast_entries_are_collected_when_idle_and_still_count_as_fired() -> None:
    timer = Timer(batch_size=2)
    for i in range(5):
        timer.submit(one_off(f"f{i}", T0 + 1_000), T0)
    for step in range(3):
        timer.punctuate(T0 + 1_000 + step)
    assert len(timer.dues()) == 5 and len(timer.wheel.data) == 5  # fired, not yet deleted
    for step in range(3):
        timer.punctuate(T0 + 2_000 + step)  # idle: two deletes per punctuation
    assert timer.wheel.data == {}
    timer.result("f3", T0 + 1_000, "SUCCEEDED", T0 + 3_000)
    state = load_state(timer.scope(T0 + 3_000), b"f3")
    assert state is not None and state.completed and state.last_tick_ms == T0 + 1_000
    assert len(timer.dues()) == 5


def test_a_manual_fire_in_the_same_batch_turns_the_fast_entry_slow_without_a_double_fire() -> None:
    timer = Timer()
    job = one_off("mf", T0 + 2_000)  # overlap SKIP
    timer.submit(job, T0)
    timer.submit(bump(job, version=2, manual_fire_at_ms=T0 + 1_000), T0 + 1)
    timer.punctuate(T0 + 3_000)  # one scan holds the manual entry, then the fast one
    timer.punctuate(T0 + 3_010)
    assert [(d["scheduled_for_ms"], d["trigger"]) for d in timer.dues()] == [(T0 + 1_000, "MANUAL")]
    assert [(r["scheduled_for_ms"], r["reason"]) for r in timer.results()] == [
        (T0 + 2_000, SKIPPED_STILL_RUNNING)
    ]
