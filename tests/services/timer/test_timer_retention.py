"""Finished one-offs share retention entries (``retention.py``) and are still deleted exactly.

The one-offs finished in one scope (the service's run of ``job-results`` records) are listed
in one wheel entry; each is tombstoned after the retention unless it was deleted, re-created
or given a new run time meanwhile. Legacy single entries (value ``b"T"``) keep working.
"""

from __future__ import annotations

from pathlib import Path

from services.timer import keys
from services.timer.drain import drain_due
from services.timer.inputs import apply_input, finish_inputs, handle_input
from services.timer.retention import (
    MAX_JOBS_PER_ENTRY,
    SINGLE,
    encode_listed,
    listed_jobs,
)
from services.timer.scope import Scope
from services.timer.state import load_state
from services.timer.wheel import WATERMARK_KEY
from streams.state.partition import PartitionStore
from streams.state.transaction import StoreTransaction
from tests.services.timer.test_timer_logic import (
    T0,
    Timer,
    bump,
    one_off,
    result_bytes,
)

RETENTION_MS = 60_000


def _finish_in_one_scope(
    timer: Timer, job_ids: list[str], tick_ms: int, now_ms: int, *, as_a_run: bool = False
) -> Scope:
    """SUCCEEDED of each job in one scope, each record handled alone or ``as_a_run`` (the
    service's run of results: ``finish_inputs`` once at the end)."""
    scope = timer.scope(now_ms)
    apply = apply_input if as_a_run else handle_input
    for job_id in job_ids:
        value = result_bytes(job_id, tick_ms, "SUCCEEDED", now_ms)
        timer.offset += 1
        apply(scope, timer.env.results_topic, 0, timer.offset, job_id.encode(), value)
    if as_a_run:
        finish_inputs(scope)
    return scope


def _fired_one_offs(timer: Timer, job_ids: list[str], run_at_ms: int) -> None:
    for job_id in job_ids:
        timer.submit(one_off(job_id, run_at_ms), T0)
    while timer.punctuate(run_at_ms):
        pass
    assert len(timer.dues()) == len(job_ids)


def _retention_entries(timer: Timer) -> dict[bytes, list[bytes]]:
    return {
        key: listed_jobs(key, value)
        for key, value in timer.wheel.data.items()
        if key[-1] == keys.TOMBSTONE
    }


def _tombstoned(timer: Timer) -> list[bytes | None]:
    return [key for topic, key, value in timer.out if topic == "k.jobs" and value is None]


def test_one_offs_finished_together_share_one_entry_and_are_all_deleted_after_retention() -> None:
    timer = Timer(one_off_retention_ms=RETENTION_MS)
    ids = [f"j{i}" for i in range(5)]
    _fired_one_offs(timer, ids, T0 + 1_000)
    _finish_in_one_scope(timer, ids, T0 + 1_000, T0 + 2_000)
    fire_ms = T0 + 2_000 + RETENTION_MS
    assert _retention_entries(timer) == {
        keys.tombstone_key(fire_ms, b"j0"): [j.encode() for j in ids]
    }
    for job_id in ids:
        state = load_state(timer.scope(T0 + 2_000), job_id.encode())
        assert state is not None and state.completed and state.tombstone_fire_ms == fire_ms
    timer.run(T0 + 2_000, fire_ms - 10, 1_000)
    assert _tombstoned(timer) == []
    timer.punctuate(fire_ms)
    assert _tombstoned(timer) == [j.encode() for j in ids]
    assert _retention_entries(timer) == {}
    for job_id in ids:  # the tombstones come back as input and delete the states
        timer.feed("k.jobs", job_id.encode(), None, fire_ms + 100)
    timer.punctuate(fire_ms + 200)  # idle: collects the fired fast entries
    assert set(timer.jobs.data) == {WATERMARK_KEY} and timer.wheel.data == {}


def test_a_job_updated_or_recreated_before_its_shared_entry_fires_is_not_deleted() -> None:
    timer = Timer(one_off_retention_ms=RETENTION_MS)
    ids = ["a", "b", "c", "d"]
    _fired_one_offs(timer, ids, T0 + 1_000)
    _finish_in_one_scope(timer, ids, T0 + 1_000, T0 + 2_000)
    fire_ms = T0 + 2_000 + RETENTION_MS
    # "a" (the entry's key) runs again later; "b" is deleted and created anew; "c" is
    # deleted for good. Only "d" is still finished when the entry fires.
    timer.submit(bump(one_off("a", T0 + 1_000), version=2, run_at_ms=fire_ms + 50_000), T0 + 3_000)
    timer.feed("k.jobs", b"b", None, T0 + 3_000)
    timer.submit(one_off("b", fire_ms + 50_000), T0 + 3_100)
    timer.feed("k.jobs", b"c", None, T0 + 3_200)
    assert keys.tombstone_key(fire_ms, b"a") in timer.wheel.data  # shared: it stays
    timer.run(T0 + 3_000, fire_ms, 1_000)
    assert _tombstoned(timer) == [b"d"]
    timer.out.clear()
    for job_id in (b"a", b"b"):
        state = load_state(timer.scope(fire_ms), job_id)
        assert state is not None and not state.completed and state.tombstone_fire_ms is None
        assert state.sched_tick_ms == fire_ms + 50_000
    assert load_state(timer.scope(fire_ms), b"c") is None
    timer.run(fire_ms, fire_ms + 50_000, 1_000)  # a and b run again, nothing else happens
    assert sorted(d["job_id"] for d in timer.dues()) == ["a", "b"]
    assert _tombstoned(timer) == []


def test_an_entry_of_one_job_goes_when_that_job_is_deleted() -> None:
    timer = Timer(one_off_retention_ms=RETENTION_MS)
    _fired_one_offs(timer, ["solo"], T0 + 1_000)
    timer.result("solo", T0 + 1_000, "SUCCEEDED", T0 + 2_000)
    assert keys.tombstone_key(T0 + 2_000 + RETENTION_MS, b"solo") in timer.wheel.data
    timer.feed("k.jobs", b"solo", None, T0 + 3_000)
    assert _retention_entries(timer) == {}


def test_more_finished_jobs_than_one_entry_holds_open_further_entries() -> None:
    timer = Timer(one_off_retention_ms=RETENTION_MS)
    ids = [f"m{i:04d}" for i in range(MAX_JOBS_PER_ENTRY * 2 + 3)]
    _fired_one_offs(timer, ids, T0 + 1_000)
    _finish_in_one_scope(timer, ids, T0 + 1_000, T0 + 2_000)
    entries = _retention_entries(timer)
    assert sorted(len(listed) for listed in entries.values()) == [
        3,
        MAX_JOBS_PER_ENTRY,
        MAX_JOBS_PER_ENTRY,
    ]
    assert sorted(j for listed in entries.values() for j in listed) == [i.encode() for i in ids]
    assert timer.punctuate(T0 + 2_000 + RETENTION_MS) == 2 * MAX_JOBS_PER_ENTRY  # the budget
    timer.punctuate(T0 + 2_000 + RETENTION_MS + 10)
    assert sorted(j for j in _tombstoned(timer) if j is not None) == [i.encode() for i in ids]


def test_a_second_scope_with_the_same_fire_time_keeps_the_jobs_listed_before() -> None:
    """Two runs of results within one ms: the second must not overwrite the first's list."""
    timer = Timer(one_off_retention_ms=RETENTION_MS)
    ids = ["x", "y", "z"]
    _fired_one_offs(timer, ids, T0 + 1_000)
    _finish_in_one_scope(timer, ["x", "y"], T0 + 1_000, T0 + 2_000)
    timer.feed("k.jobs", b"x", None, T0 + 2_000)  # x alone is not its entry's only job
    timer.submit(one_off("x", T0 + 1_000, version=1), T0 + 2_000)  # created anew
    timer.punctuate(T0 + 2_000)
    _finish_in_one_scope(timer, ["x", "z"], T0 + 1_000, T0 + 2_000)
    entries = _retention_entries(timer)
    assert entries == {
        keys.tombstone_key(T0 + 2_000 + RETENTION_MS, b"x"): [b"x", b"y", b"x", b"z"]
    }
    timer.out.clear()
    timer.punctuate(T0 + 2_000 + RETENTION_MS)
    assert _tombstoned(timer) == [b"x", b"y", b"z"]  # x once: its state says so once


def test_a_run_of_results_lists_its_jobs_as_handling_each_record_alone_does() -> None:
    """A run writes each entry's value once at its end (or when the next entry opens)."""
    timers = [Timer(one_off_retention_ms=RETENTION_MS) for _ in range(2)]
    ids = [f"m{i:04d}" for i in range(MAX_JOBS_PER_ENTRY + 7)]
    for as_a_run, timer in zip((False, True), timers, strict=True):
        _fired_one_offs(timer, ids, T0 + 1_000)
        _finish_in_one_scope(timer, ids[:5], T0 + 1_000, T0 + 2_000, as_a_run=as_a_run)
        _finish_in_one_scope(timer, ids[5:], T0 + 1_000, T0 + 2_000, as_a_run=as_a_run)
    alone, run = timers
    assert run.jobs.data == alone.jobs.data and run.wheel.data == alone.wheel.data
    entries = _retention_entries(run).values()
    assert sorted(len(listed) for listed in entries) == [2, 5, MAX_JOBS_PER_ENTRY]


def test_an_entry_read_before_its_run_ends_lists_the_jobs_of_the_run_so_far() -> None:
    """A drain or a delete command in the scope of a run sees the ids not yet written."""
    timer = Timer(one_off_retention_ms=0)  # the entry is due at once
    _fired_one_offs(timer, ["p", "q"], T0 + 1_000)
    scope = timer.scope(T0 + 2_000)
    for offset, job_id in enumerate(["p", "q"]):
        value = result_bytes(job_id, T0 + 1_000, "SUCCEEDED", T0 + 2_000)
        apply_input(scope, timer.env.results_topic, 0, offset, job_id.encode(), value)
    timer.out.clear()
    drain_due(scope, 100)
    assert _tombstoned(timer) == [b"p", b"q"]
    # A one-off finished and deleted in one run: its entry (its job's alone) goes with it.
    timer = Timer(one_off_retention_ms=RETENTION_MS)
    _fired_one_offs(timer, ["solo"], T0 + 1_000)
    scope = timer.scope(T0 + 2_000)
    value = result_bytes("solo", T0 + 1_000, "SUCCEEDED", T0 + 2_000)
    apply_input(scope, timer.env.results_topic, 0, 1, b"solo", value)
    apply_input(scope, timer.env.jobs_topic, 0, 2, b"solo", None)
    finish_inputs(scope)
    assert _retention_entries(timer) == {}


def test_a_legacy_single_entry_still_deletes_its_job() -> None:
    """An entry written before batching (value b"T", the key's job alone)."""
    timer = Timer(one_off_retention_ms=RETENTION_MS)
    _fired_one_offs(timer, ["old"], T0 + 1_000)
    timer.result("old", T0 + 1_000, "SUCCEEDED", T0 + 2_000)
    fire_ms = T0 + 2_000 + RETENTION_MS
    key = keys.tombstone_key(fire_ms, b"old")
    assert timer.wheel.data[key] == encode_listed([b"old"])
    timer.wheel.data[key] = SINGLE  # as the previous code wrote it
    timer.punctuate(fire_ms)
    assert _tombstoned(timer) == [b"old"] and _retention_entries(timer) == {}


def test_a_shared_entry_is_one_wheel_write_in_a_real_store_transaction(tmp_path: Path) -> None:
    """On RocksDB through the processor's transaction: N finished one-offs, one wheel record."""
    jobs_store = PartitionStore(tmp_path / "jobs", 0, "c.jobs")
    wheel_store = PartitionStore(tmp_path / "wheel", 0, "c.wheel")
    offsets = iter(range(1, 100))

    def begin(timer: Timer) -> tuple[StoreTransaction, StoreTransaction]:
        jobs, wheel = jobs_store.begin(), wheel_store.begin()
        timer.jobs, timer.wheel = jobs, wheel  # type: ignore[assignment]
        return jobs, wheel

    def commit(txn: StoreTransaction) -> list[tuple[bytes, bytes | None]]:
        records: list[tuple[bytes, bytes | None]] = []
        txn.prepare(_Changelog(records))
        txn.flush(next(offsets))
        return records

    try:
        timer = Timer(one_off_retention_ms=RETENTION_MS)
        ids = [f"r{i:03d}" for i in range(200)]
        jobs, wheel = begin(timer)
        _fired_one_offs(timer, ids, T0 + 1_000)
        commit(jobs), commit(wheel)
        jobs, wheel = begin(timer)
        _finish_in_one_scope(timer, ids, T0 + 1_000, T0 + 2_000)
        assert len(commit(jobs)) == len(ids)  # the states
        wheel_records = commit(wheel)
        assert len(wheel_records) == 1
        key, value = wheel_records[0]
        assert value is not None and listed_jobs(key, value) == [j.encode() for j in ids]
        assert wheel_store.get(key) == value
    finally:
        jobs_store.close()
        wheel_store.close()


class _Changelog:
    def __init__(self, sink: list[tuple[bytes, bytes | None]]) -> None:
        self.sink = sink

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, partition: int | None = None
    ) -> None:
        assert key is not None
        self.sink.append((key, value))
