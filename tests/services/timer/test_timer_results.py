"""Applying ``job-results`` cheaply changes nothing: the fast paths against the full ones.

Four shortcuts serve the two results of nearly every execution (see ``state.py`` and
``results.py``): the ResultReader instead of the codec, a STARTED answered from the stored
state's tail (:func:`started_is_known`), a one-off's run time stored with its state (no Job
decode per SUCCEEDED), and the SUCCEEDED of a fired fast one-off re-encoding the tail alone
(:func:`complete_fired_one_off`). Each is checked here against what the full path does, on
the in-memory fakes of ``test_timer_logic``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from services.timer import keys
from services.timer.results import apply_result, apply_to_state
from services.timer.retention import retain
from services.timer.state import (
    TimerState,
    complete_fired_one_off,
    decode_state,
    encode_state,
    load_state,
    started_is_known,
)
from services.timer.wheel import WATERMARK_KEY
from streams.codec import RecordKind
from streams.result_reader import ResultFields
from tests.services.timer.test_stored_state import format_1_bytes
from tests.services.timer.test_timer_logic import (
    CODEC,
    T0,
    T_MIN,
    Timer,
    bump,
    cron_job,
    one_off,
    result_bytes,
    reused_env,
)


class CodecTimer(Timer):
    """The fake timer decoding ``job-results`` with the codec (the service, and ``Timer``,
    read them with the ResultReader)."""

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        assert self.env.result_reader is not None
        self.env = dataclasses.replace(self.env, result_reader=None)


def _scenario(timer: Timer) -> None:
    """Results of every kind the timer acts on: fast one-offs, cron overlap, manual, retries."""
    for i in range(6):
        timer.submit(one_off(f"h{i}", T0 + 1_000), T0)
    timer.submit(one_off("late-start", T0 + 1_000, overlap="ALLOW"), T0)
    queue = cron_job("q", "*/10 * * * * *", T_MIN - 1, overlap="QUEUE_ONE")
    timer.submit(queue, T_MIN - 1)
    timer.punctuate(T0 + 1_000)
    for i in range(6):
        timer.result(f"h{i}", T0 + 1_000, "STARTED", T0 + 1_100)
    timer.result("h0", T0 + 1_000, "FAILED", T0 + 1_150)  # an attempt: changes nothing
    timer.result("h1", T0 + 1_000, "SUCCEEDED", T0 + 1_200)
    timer.result("h1", T0 + 1_000, "SUCCEEDED", T0 + 1_250)  # repeated
    timer.result("h2", T0 + 1_000, "DEAD_LETTER", T0 + 1_300)
    timer.result("h3", T0 + 5_000, "STARTED", T0 + 1_300)  # a tick the timer did not emit
    timer.result("h3", T0 + 5_000, "SUCCEEDED", T0 + 1_400)
    timer.result("nobody", T0 + 1_000, "STARTED", T0 + 1_400)  # unknown job
    timer.result("nobody", T0 + 1_000, "SUCCEEDED", T0 + 1_400)
    timer.result("late-start", T0 + 1_000, "SUCCEEDED", T0 + 1_500)  # before its STARTED
    timer.result("late-start", T0 + 1_000, "STARTED", T0 + 1_500)
    timer.run(T_MIN, T_MIN + 20_000, 10_000)  # fires T_MIN, queues +10 s, skips +20 s
    timer.result("q", T_MIN, "STARTED", T_MIN + 20_100)
    timer.result("q", T_MIN, "SUCCEEDED", T_MIN + 20_200)  # the queued tick goes out
    timer.result("q", T_MIN + 10_000, "STARTED", T_MIN + 20_300)
    manual = bump(queue, version=2, manual_fire_at_ms=T_MIN + 21_000, updated_at_ms=T_MIN + 20_400)
    timer.submit(manual, T_MIN + 20_400)
    timer.punctuate(T_MIN + 21_000)
    timer.result("q", T_MIN + 10_000, "SUCCEEDED", T_MIN + 21_100)
    timer.feed(timer.env.results_topic, b"h4", b"\xc3\x01garbage", T_MIN + 21_200)
    timer.feed(timer.env.results_topic, b"h5", None, T_MIN + 21_200)
    wrong_key = result_bytes("h4", T0 + 1_000, "SUCCEEDED", T_MIN + 21_300)
    timer.feed(timer.env.results_topic, b"h5", wrong_key, T_MIN + 21_300)


def test_the_reader_changes_no_output_and_no_state() -> None:
    """The same inputs through the codec and through the reader: equal stores and outputs."""
    with_codec, with_reader = CodecTimer(), Timer()
    _scenario(with_codec)
    _scenario(with_reader)
    assert with_reader.out == with_codec.out
    assert with_reader.jobs.data == with_codec.jobs.data
    assert with_reader.wheel.data == with_codec.wheel.data
    dead = [v for t, _, v in with_reader.out if t == "k.dlq"]
    assert len(dead) == 3  # garbage, a null value, a key that is not the job id


def test_a_started_the_timer_emitted_is_answered_without_loading_the_state() -> None:
    timer = Timer()
    timer.submit(one_off("f", T0 + 1_000), T0)
    timer.punctuate(T0 + 1_000)  # a fast fire: the stored state still says "pending"
    scope = timer.scope(T0 + 1_100)
    assert started_is_known(scope, b"f", T0 + 1_000)
    assert not started_is_known(scope, b"f", T0 + 2_000)  # not in flight: load the state
    stored = dict(timer.jobs.data)
    timer.result("f", T0 + 1_000, "STARTED", T0 + 1_100)
    assert timer.jobs.data == stored


def test_a_started_before_the_fast_entry_fired_turns_it_slow() -> None:
    """An executor running a tick the timer has not fired yet (a manual trigger elsewhere)."""
    timer = Timer()
    timer.submit(one_off("early", T0 + 5_000), T0)
    scope = timer.scope(T0 + 100)
    assert not started_is_known(scope, b"early", T0 + 5_000)
    timer.result("early", T0 + 5_000, "STARTED", T0 + 100)
    state = load_state(timer.scope(T0 + 200), b"early")
    assert state is not None and state.running == [T0 + 5_000] and not state.fast
    timer.punctuate(T0 + 5_000)  # overlap SKIP: the tick is SKIPPED, not fired twice
    assert timer.dues() == []
    assert [r["status"] for r in timer.results()] == ["SKIPPED"]


def test_a_one_off_completes_without_decoding_its_job() -> None:
    timer = Timer()
    timer.submit(one_off("c", T0 + 1_000), T0)
    timer.punctuate(T0 + 1_000)
    timer.env = _no_job_decoding(timer.env)
    timer.result("c", T0 + 1_000, "STARTED", T0 + 1_100)
    timer.result("c", T0 + 1_000, "SUCCEEDED", T0 + 1_200)
    state = load_state(timer.scope(T0 + 1_300), b"c")
    assert state is not None and state.completed and state.running == []
    assert state.tombstone_fire_ms == T0 + 1_200 + timer.env.one_off_retention_ms
    assert keys.tombstone_key(state.tombstone_fire_ms, b"c") in timer.wheel.data


def test_states_stored_in_format_1_still_load_and_complete() -> None:
    """States stored before ``timer_state.v1.avsc`` (format 1, here from before the run time
    was kept: it is derived from the Job) load as they were, and are saved as the record."""
    timer = Timer()
    timer.submit(one_off("old", T0 + 1_000), T0)
    timer.submit(cron_job("old-cron", "0 0 1 1 *", T0), T0)
    for job_id in (b"old", b"old-cron"):
        state = load_state(timer.scope(T0), job_id)
        assert state is not None and state.sched_fire_ms is not None
        # Stored before ranks: the entry has the legacy key (services/timer/keys.py).
        ranked = keys.schedule_key(state.sched_fire_ms, job_id, state.sched_rank)
        entry = timer.wheel.data[ranked]
        timer.wheel.delete(ranked)
        timer.wheel.set(keys.schedule_key(state.sched_fire_ms, job_id, keys.NO_RANK), entry)
        state.sched_rank = keys.NO_RANK
        timer.jobs.data[job_id] = format_1_bytes(state, with_run_at=False)
        assert load_state(timer.scope(T0), job_id) == state
    timer.punctuate(T0 + 1_000)  # a fast fire: the stored state is left as it was
    assert timer.jobs.data[b"old"][:1] == b"\x01"
    timer.result("old", T0 + 1_000, "SUCCEEDED", T0 + 1_200)
    state = load_state(timer.scope(T0 + 1_300), b"old")
    assert state is not None and state.completed and state.one_off_run_at_ms == T0 + 1_000
    assert timer.jobs.data[b"old"][:2] == b"\xc3\x01"  # saved as the record
    timer.result("old-cron", T0 + 1_000, "SUCCEEDED", T0 + 1_300)  # a cron job never completes
    cron_state = load_state(timer.scope(T0 + 1_400), b"old-cron")
    assert cron_state is not None and not cron_state.completed
    assert cron_state.one_off_run_at_ms is None


def test_an_updated_one_off_completes_only_at_its_new_run_time() -> None:
    timer = Timer()
    job = one_off("u", T0 + 1_000)
    timer.submit(job, T0)
    timer.submit(bump(job, version=2, run_at_ms=T0 + 9_000, updated_at_ms=T0 + 1), T0 + 1)
    timer.result("u", T0 + 1_000, "SUCCEEDED", T0 + 2)  # the old run time: not this one-off's
    state = load_state(timer.scope(T0 + 3), b"u")
    assert state is not None and not state.completed
    assert state.one_off_run_at_ms == T0 + 9_000
    timer.punctuate(T0 + 9_000)
    timer.result("u", T0 + 9_000, "SUCCEEDED", T0 + 9_100)
    state = load_state(timer.scope(T0 + 9_200), b"u")
    assert state is not None and state.completed


# --- started_is_known is exact: True exactly when load_state finds the tick in flight --------

ticks = st.sampled_from([T0 + 1_000, T0 + 2_000, T0 + 3_000, T0 + 4_000])


@settings(max_examples=400, deadline=None)
@given(
    running=st.lists(ticks, max_size=4, unique=True),
    fast=st.booleans(),
    sched_tick_ms=st.none() | ticks,
    sched_fire_ms=st.none() | ticks,
    entry_in_wheel=st.booleans(),
    watermark_ms=st.none() | st.sampled_from([T0 + 500, T0 + 2_500, T0 + 5_000]),
    max_running=st.integers(1, 4),
    asked_ms=ticks,
    sched_rank=st.sampled_from([keys.NO_RANK, 0, 300]),
)
def test_started_is_known_agrees_with_load_state(
    running: list[int],
    fast: bool,
    sched_tick_ms: int | None,
    sched_fire_ms: int | None,
    entry_in_wheel: bool,
    watermark_ms: int | None,
    max_running: int,
    asked_ms: int,
    sched_rank: int,
) -> None:
    timer = Timer(env=reused_env(max_running_per_job=max_running))
    job_bytes = CODEC.encode(RecordKind.JOB, one_off("p", T0 + 1_000).to_avro())
    state = TimerState(
        "p", 1, "SCHEDULED", job_bytes, T0 + 1_000, sched_tick_ms, sched_fire_ms, fast
    )
    state.running = running[-max_running:]
    state.sched_rank = sched_rank  # NO_RANK: a legacy key
    timer.jobs.set(b"p", encode_state(timer.scope(T0), state))
    if watermark_ms is not None:
        timer.jobs.set(WATERMARK_KEY, keys.pack_ms(watermark_ms))
    if entry_in_wheel and sched_fire_ms is not None:
        timer.wheel.set(keys.schedule_key(sched_fire_ms, b"p", sched_rank), b"F")
    loaded = load_state(timer.scope(T0 + 6_000), b"p")
    assert loaded is not None
    known = started_is_known(timer.scope(T0 + 6_000), b"p", asked_ms)
    assert known == (asked_ms in loaded.running)


def test_started_is_known_for_an_unknown_job_and_a_full_running_list() -> None:
    timer = Timer(max_running_per_job=2)
    scope = timer.scope(T0)
    assert started_is_known(scope, b"missing", T0)
    job_bytes = CODEC.encode(RecordKind.JOB, one_off("a", T0 + 1_000, overlap="ALLOW").to_avro())
    # Two in flight and a fired fast entry: loading adds its tick and drops the oldest one.
    state = TimerState("a", 1, "SCHEDULED", job_bytes, T0 + 1_000, T0 + 3_000, T0 + 3_000, True)
    state.running = [T0 + 1_000, T0 + 2_000]
    timer.jobs.set(b"a", encode_state(timer.scope(T0), state))
    timer.jobs.set(WATERMARK_KEY, keys.pack_ms(T0 + 4_000))
    assert not started_is_known(timer.scope(T0 + 4_000), b"a", T0 + 1_000)  # dropped
    assert started_is_known(timer.scope(T0 + 4_000), b"a", T0 + 2_000)
    assert started_is_known(timer.scope(T0 + 4_000), b"a", T0 + 3_000)
    apply_result(timer.scope(T0 + 4_000), b"a", ResultFields("a", T0 + 1_000, "STARTED"))
    loaded = load_state(timer.scope(T0 + 4_000), b"a")
    assert loaded is not None and loaded.running == [T0 + 3_000, T0 + 1_000]


def _no_job_decoding(env: Any) -> Any:
    """The env with a Job decoder that fails the test if called."""

    def refuse(data: bytes) -> dict[str, Any]:
        raise AssertionError("the Job was decoded")

    class NoDecode(type(env)):  # type: ignore[misc]
        def decode_job(self, data: bytes) -> dict[str, Any]:
            return refuse(data)

    fields = {name: getattr(env, name) for name in env.__dataclass_fields__}
    return NoDecode(**fields)


# An executor run that ends without waiting publishes only its final result: no STARTED.


def _fast_one_off_finished(with_started: bool) -> Timer:
    timer = Timer(one_off_retention_ms=60_000)
    timer.submit(one_off("n", T0 + 1_000), T0)
    timer.punctuate(T0 + 1_000)  # a fast fire: the stored state still says "pending"
    if with_started:
        timer.result("n", T0 + 1_000, "STARTED", T0 + 1_100)
    timer.result("n", T0 + 1_000, "SUCCEEDED", T0 + 1_200)
    return timer


def test_a_final_result_without_started_finishes_a_one_off_as_with_it() -> None:
    alone, after_started = _fast_one_off_finished(False), _fast_one_off_finished(True)
    assert alone.jobs.data == after_started.jobs.data
    assert alone.wheel.data == after_started.wheel.data
    state = load_state(alone.scope(T0 + 1_300), b"n")
    assert state is not None and state.completed and state.running == []
    assert state.tombstone_fire_ms == T0 + 1_200 + 60_000
    alone.run(T0 + 2_000, T0 + 61_000, 1_000)
    assert [o for o in alone.out if o[0] == "k.jobs"] == []
    alone.punctuate(T0 + 61_200)
    assert alone.out[-1] == ("k.jobs", b"n", None)  # deleted after the retention
    assert len(alone.dues()) == 1


def test_a_final_result_without_started_ends_the_run_of_a_cron_job() -> None:
    """Overlap SKIP: the next tick fires once the run that never said STARTED ended."""
    timer = Timer()
    timer.submit(cron_job("o", "*/10 * * * * *", T_MIN - 1, overlap="SKIP"), T_MIN - 1)
    timer.punctuate(T_MIN)
    timer.punctuate(T_MIN + 10_000)  # still in flight: skipped
    timer.result("o", T_MIN, "SUCCEEDED", T_MIN + 15_000)
    state = load_state(timer.scope(T_MIN + 15_000), b"o")
    assert state is not None and state.running == [] and not state.completed
    timer.punctuate(T_MIN + 20_000)
    assert [d["scheduled_for_ms"] for d in timer.dues()] == [T_MIN, T_MIN + 20_000]
    assert [(r["scheduled_for_ms"], r["status"]) for r in timer.results()] == [
        (T_MIN + 10_000, "SKIPPED")
    ]


# --- a final result of a fired fast one-off re-encodes the stored tail: exactly the full path

_FINAL_OR_STARTED = ["SUCCEEDED", "DEAD_LETTER", "SKIPPED", "CANCELLED", "STARTED", "FAILED"]
# Ids of other lengths, and ones that held what looks like a state's tail in format 1.
job_ids = st.sampled_from(
    ["p", 'q"uo,te', "ünï" * 50, 'x",1,2,true,null,[],null,[],null,false,null,3]']
)


# Each field of a state: what a herd's fired fast one-off has, and any value it may hold.
_HERD_CASE: dict[str, tuple[Any, st.SearchStrategy[Any]]] = {
    "cron": (False, st.booleans()),
    "run_at_ms": (T0 + 1_000, ticks),
    "stored_as": ("record", st.sampled_from(["record", "format 1", "format 1 without run time"])),
    "running": ([], st.lists(ticks, max_size=3, unique=True)),
    "fast": (True, st.booleans()),
    "sched_tick_ms": (T0 + 1_000, st.none() | ticks),
    "last_tick_ms": (None, st.none() | ticks),
    "queued": (None, st.none() | st.tuples(ticks, st.sampled_from(["SCHEDULE", "MANUAL"]))),
    "completed": (False, st.booleans()),
    "tombstone_fire_ms": (None, st.none() | ticks),
    "status": ("SUCCEEDED", st.sampled_from(_FINAL_OR_STARTED)),
    "asked_ms": (T0 + 1_000, ticks),
}
_FIELD_NAMES = st.sampled_from(sorted(_HERD_CASE))


@settings(max_examples=600, deadline=None)
@given(
    data=st.data(),
    job_id=job_ids,
    changed=st.just(set()) | st.sets(_FIELD_NAMES, max_size=2) | st.sets(_FIELD_NAMES),
    sched_fire_ms=st.none() | ticks,
    entry_in_wheel=st.booleans(),
    watermark_ms=st.none() | st.sampled_from([T0 + 500, T0 + 2_500, T0 + 5_000]),
    max_running=st.integers(1, 3),
    sched_rank=st.sampled_from([keys.NO_RANK, 0, 300]),
)
def test_results_change_the_stores_as_applying_them_to_the_loaded_state_does(
    data: st.DataObject,
    job_id: str,
    changed: set[str],
    sched_fire_ms: int | None,
    entry_in_wheel: bool,
    watermark_ms: int | None,
    max_running: int,
    sched_rank: int,
) -> None:
    """``apply_result`` (with its shortcuts) against ``apply_to_state``: the same stored
    bytes, wheel and outputs, for the herd's case, states a few fields away from it, and any
    state (every field changed)."""
    v = {
        name: data.draw(anything, label=name) if name in changed else herd_value
        for name, (herd_value, anything) in _HERD_CASE.items()
    }
    job = cron_job(job_id, "0 0 1 1 *", T0) if v["cron"] else one_off(job_id, v["run_at_ms"])
    job_bytes = CODEC.encode(RecordKind.JOB, job.to_avro())
    run_at_ms = None if v["cron"] else job.run_at_ms
    state = TimerState(
        job_id, 1, "SCHEDULED", job_bytes, run_at_ms, v["sched_tick_ms"], sched_fire_ms, v["fast"]
    )
    state.running, state.queued = v["running"][-max_running:], v["queued"]
    state.completed, state.last_tick_ms = v["completed"], v["last_tick_ms"]
    state.tombstone_fire_ms = v["tombstone_fire_ms"]
    if v["stored_as"] == "record":  # format 1 has no rank: its entry has the legacy key
        state.sched_rank = sched_rank
    key = job_id.encode()
    timers = []
    for side in ("shortcut", "full"):
        env = reused_env(side, max_running_per_job=max_running, one_off_retention_ms=60_000)
        timer = Timer(env=env)
        if v["stored_as"] == "record":
            timer.jobs.set(key, encode_state(timer.scope(T0), state))
        else:
            with_run_at = v["stored_as"] == "format 1"
            timer.jobs.set(key, format_1_bytes(state, with_run_at=with_run_at))
        if watermark_ms is not None:
            timer.jobs.set(WATERMARK_KEY, keys.pack_ms(watermark_ms))
        if entry_in_wheel and sched_fire_ms is not None:
            timer.wheel.set(keys.schedule_key(sched_fire_ms, key, state.sched_rank), b"F")
        timers.append(timer)
    shortcut, full = timers
    now_ms = T0 + 6_000
    status, asked_ms = v["status"], v["asked_ms"]
    apply_result(shortcut.scope(now_ms), key, ResultFields(job_id, asked_ms, status))
    if status != "FAILED":  # an attempt failure changes nothing
        apply_to_state(full.scope(now_ms), key, status, asked_ms)
    assert shortcut.jobs.data == full.jobs.data
    assert shortcut.wheel.data == full.wheel.data
    assert shortcut.out == full.out


def test_a_herds_finished_one_off_completes_from_its_stored_bytes() -> None:
    """The shortcut serves the herd's case (a fired fast one-off), and only it."""
    timer = Timer(one_off_retention_ms=60_000)
    for job_id in ("done", "still-pending"):
        timer.submit(one_off(job_id, T0 + 1_000), T0)
    timer.submit(one_off("later", T0 + 9_000), T0)
    timer.punctuate(T0 + 1_000)
    scope = timer.scope(T0 + 1_200)
    assert complete_fired_one_off(scope, b"done", T0 + 1_000, retain)
    assert not complete_fired_one_off(scope, b"later", T0 + 9_000, retain)  # not fired yet
    assert not complete_fired_one_off(scope, b"still-pending", T0 + 2_000, retain)  # other tick
    assert not complete_fired_one_off(scope, b"nobody", T0 + 1_000, retain)
    state = load_state(timer.scope(T0 + 1_300), b"done")
    assert state is not None and state.completed and state.running == [] and not state.fast
    assert state.last_tick_ms == T0 + 1_000
    assert (state.sched_tick_ms, state.sched_fire_ms) == (None, None)
    assert state.tombstone_fire_ms == T0 + 1_200 + 60_000
    assert state.one_off_run_at_ms == T0 + 1_000
    assert state.job_bytes == CODEC.encode(RecordKind.JOB, one_off("done", T0 + 1_000).to_avro())
    # Completed: a repeated result finds nothing to do and changes nothing.
    stored = dict(timer.jobs.data)
    assert not complete_fired_one_off(scope, b"done", T0 + 1_000, retain)
    apply_result(scope, b"done", ResultFields("done", T0 + 1_000, "SUCCEEDED"))
    assert timer.jobs.data == stored


@settings(max_examples=300, deadline=None)
@given(
    job_id=st.text(min_size=1, max_size=30),
    version=st.integers(1, 2**40),
    status=st.sampled_from(["SCHEDULED", "PAUSED"]),
    last_tick_ms=st.none() | ticks,
    manual=st.lists(st.tuples(ticks, ticks), max_size=2),
    manual_done_ms=st.none() | ticks,
    tombstone_fire_ms=st.none() | ticks,
)
def test_completing_a_fired_one_off_is_decoding_changing_and_encoding_its_state(
    job_id: str,
    version: int,
    status: str,
    last_tick_ms: int | None,
    manual: list[tuple[int, int]],
    manual_done_ms: int | None,
    tombstone_fire_ms: int | None,
) -> None:
    """The tail the shortcut writes gives the bytes of the decoded state, changed as the fire
    and the result change it, encoded whole: whatever the fields it leaves alone hold."""
    timer = Timer(env=reused_env(one_off_retention_ms=60_000))
    job_bytes = CODEC.encode(RecordKind.JOB, one_off(job_id, T0 + 1_000).to_avro())
    pending = TimerState(
        job_id, version, status, job_bytes, T0 + 1_000, T0 + 1_000, T0 + 1_000, True,
        last_tick_ms, manual=manual, manual_done_ms=manual_done_ms,
        tombstone_fire_ms=tombstone_fire_ms,
    )  # fmt: skip
    key = job_id.encode()
    scope = timer.scope(T0 + 1_200)
    timer.jobs.set(key, encode_state(scope, pending))
    timer.jobs.set(WATERMARK_KEY, keys.pack_ms(T0 + 1_001))  # the fast entry fired
    before = decode_state(scope, timer.jobs.data[key])
    assert complete_fired_one_off(scope, key, T0 + 1_000, retain)
    after = dataclasses.replace(
        before,
        sched_tick_ms=None,
        sched_fire_ms=None,
        fast=False,
        last_tick_ms=T0 + 1_000,
        running=[],
        completed=True,
        tombstone_fire_ms=T0 + 1_200 + 60_000,
    )
    assert timer.jobs.data[key] == encode_state(scope, after)
