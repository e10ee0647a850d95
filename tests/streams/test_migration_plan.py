"""The migration's plan (streams/migration/plan.py): every nominal fire of a job belongs to
exactly one namespace, the old one before the cut-over and the new one from it on."""

from __future__ import annotations

from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from streams.codec import Codec, RecordKind
from streams.migration.plan import (
    Placement,
    drain_horizon_ms,
    leaves_fires_in_old,
    plan_move,
    restore_record,
)
from streams.schedule import parse_cron, ticks_between

CODEC = Codec.from_directory()
T0 = 1_800_000_000_000  # a whole minute
WINDOW_MS = 20 * 60_000
EXPRESSIONS = ("* * * * * *", "*/7 * * * * *", "0 * * * * *", "*/5 * * * *", "13 */2 * * * *")


def job_record(**fields: Any) -> dict[str, Any]:
    """A Job record as the codec decodes it (every default filled in), valid by its bounds."""
    record = {"job_id": "job-1", "version": 1_000, "handler": "h", "created_at_ms": T0 - 1,
              "updated_at_ms": T0 - 1, **fields}  # fmt: skip
    return CODEC.decode(RecordKind.JOB, CODEC.encode(RecordKind.JOB, record))


def cron(expression: str, start_ms: int | None = None, end_ms: int | None = None) -> dict[str, Any]:
    return {"expression": expression, "timezone": "UTC", "start_ms": start_ms, "end_ms": end_ms,
            "fold_policy": "AUTO"}  # fmt: skip


def fires(record: dict[str, Any] | None) -> set[int]:
    """The nominal fires of a record in [T0, T0 + WINDOW_MS]; none for no record."""
    if record is None or record["status"] in ("CANCELLED", "COMPLETED"):
        return set()
    if record["cron"] is None:
        run_at = record["run_at_ms"]
        return {run_at} if run_at is not None and T0 <= run_at <= T0 + WINDOW_MS else set()
    c = record["cron"]
    spec = parse_cron(c["expression"], c["timezone"], c["start_ms"], c["end_ms"])
    return set(ticks_between(spec, T0 - 1, T0 + WINDOW_MS, 10_000))


optional_ms = st.none() | st.integers(T0, T0 + WINDOW_MS)


@settings(max_examples=300, deadline=None)
@given(
    expression=st.sampled_from(EXPRESSIONS),
    start_ms=optional_ms,
    end_ms=optional_ms,
    cutover_ms=st.integers(T0, T0 + WINDOW_MS),
    status=st.sampled_from(["SCHEDULED", "PAUSED"]),
)
def test_each_tick_of_a_recurring_job_fires_in_exactly_one_namespace(
    expression: str, start_ms: int | None, end_ms: int | None, cutover_ms: int, status: str
) -> None:
    assume(start_ms is None or end_ms is None or start_ms < end_ms)
    job = job_record(cron=cron(expression, start_ms, end_ms), status=status)
    move = plan_move(job, cutover_ms, stamp_ms=T0 - 1)
    old = None if move.delete_old else (move.old_record or job)
    old_fires, new_fires = fires(old), fires(move.new_record)
    assert old_fires | new_fires == fires(job)
    assert not old_fires & new_fires
    assert all(t < cutover_ms for t in old_fires)
    assert all(t >= cutover_ms for t in new_fires)
    # Records written are valid jobs, the next version, updated at the stamp.
    for record in (move.old_record, move.new_record):
        if record is not None:
            assert CODEC.decode(RecordKind.JOB, CODEC.encode(RecordKind.JOB, record)) == record
            assert record["version"] == job["version"] + 1
            assert record["updated_at_ms"] == T0 - 1 and record["backfill"] is None
    assert leaves_fires_in_old(move.placement, job) == (move.placement is not Placement.MOVES)


@given(run_at_ms=st.integers(T0, T0 + WINDOW_MS), cutover_ms=st.integers(T0, T0 + WINDOW_MS))
def test_a_one_off_fires_in_exactly_one_namespace(run_at_ms: int, cutover_ms: int) -> None:
    job = job_record(run_at_ms=run_at_ms, manual_fire_at_ms=T0 - 5)
    move = plan_move(job, cutover_ms, stamp_ms=T0 - 1)
    old = None if move.delete_old else job
    assert len(fires(old)) + len(fires(move.new_record)) == 1
    if run_at_ms < cutover_ms:
        assert move.placement is Placement.STAYS and move.new_record is None
        assert not move.changes_old
    else:
        assert move.placement is Placement.MOVES and move.delete_old
        assert move.new_record is not None and move.new_record["run_at_ms"] == run_at_ms
        assert move.new_record["manual_fire_at_ms"] is None  # the old namespace's trigger


def test_dependents_and_inactive_jobs_are_copied_and_left_alone_in_the_old_namespace() -> None:
    dependent = job_record(depends_on=["root"], manual_fire_at_ms=T0)
    cancelled = job_record(cron=cron("* * * * * *"), status="CANCELLED")
    for job in (dependent, cancelled):
        move = plan_move(job, T0 + 60_000, stamp_ms=T0)
        assert move.placement is Placement.COPIED and not move.changes_old
        assert move.new_record is not None
        assert move.new_record["manual_fire_at_ms"] is None
        stamped = ("version", "updated_at_ms", "manual_fire_at_ms")
        copied = {k: v for k, v in move.new_record.items() if k not in stamped}
        assert copied == {k: v for k, v in job.items() if k not in stamped}
    assert leaves_fires_in_old(Placement.COPIED, dependent)
    assert not leaves_fires_in_old(Placement.COPIED, cancelled)


def test_a_rollback_restores_the_original_as_the_version_after_the_cut() -> None:
    job = job_record(cron=cron("* * * * * *", end_ms=T0 + WINDOW_MS))
    move = plan_move(job, T0 + 1_000, stamp_ms=T0)
    assert move.old_record is not None and move.old_record["cron"]["end_ms"] == T0 + 1_000
    restored = restore_record(job, stamp_ms=T0 + 5)
    assert restored["version"] == move.old_record["version"] + 1
    assert restored["cron"] == job["cron"] and fires(restored) == fires(job)


def test_the_drain_horizon_covers_attempts_backoffs_jitter_and_dag_waits() -> None:
    retry = {"max_attempts": 4, "initial_backoff_ms": 1_000, "multiplier": 3.0,
             "max_backoff_ms": 5_000, "jitter_ratio": 0.1}  # fmt: skip
    job = job_record(run_at_ms=T0, retry=retry, timeout_ms=2_000, jitter_ms=700)
    # backoffs 1 s, 3 s, 5 s (capped) = 9 s, +10 % jitter; four 2 s timeouts; the fire's jitter
    assert drain_horizon_ms(job) == 700 + 4 * 2_000 + 9_900
    dependent = job_record(depends_on=["root"], retry=retry, timeout_ms=2_000, dag_wait_ms=60_000)
    assert drain_horizon_ms(dependent) == 60_000 + 4 * 2_000 + 9_900
