"""Jitter, catch-up and overlap decisions of services.timer.policies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.timer.policies import (
    CANCELLED_REPLACED,
    MISSED_CATCHUP_NONE,
    MISSED_OUTSIDE_WINDOW,
    MISSED_SUPERSEDED,
    SKIPPED_QUEUE_FULL,
    SKIPPED_STILL_RUNNING,
    CatchupPlan,
    CatchupPolicy,
    OverlapDecision,
    OverlapPolicy,
    decide_overlap,
    jitter_offset_ms,
    overlap_skip_reason,
    plan_catchup,
)
from streams.identity import execution_id

NOW_MS = 1_800_000_000_000
HOUR_MS = 3_600_000
REPO_ROOT = Path(__file__).resolve().parents[3]

# --- jitter ----------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    job_id=st.text(min_size=1, max_size=40),
    tick_ms=st.integers(0, 2**42),
    jitter_ms=st.integers(0, 10**9),
)
def test_jitter_is_bounded_and_deterministic(job_id: str, tick_ms: int, jitter_ms: int) -> None:
    execution = execution_id(job_id, tick_ms)
    offset_ms = jitter_offset_ms(execution, jitter_ms)
    assert -jitter_ms <= offset_ms <= jitter_ms
    assert jitter_offset_ms(execution, jitter_ms) == offset_ms


def test_jitter_zero_and_negative() -> None:
    assert jitter_offset_ms("job@1", 0) == 0
    with pytest.raises(ValueError, match="jitter_ms must be >= 0"):
        jitter_offset_ms("job@1", -1)


def test_jitter_is_stable_across_processes() -> None:
    """A fresh interpreter (with its own hash() salt) picks the same offsets."""
    ids = [execution_id("reports.nightly", 1_700_000_000_000 + k * 60_000) for k in range(20)]
    here = [jitter_offset_ms(value, 30_000) for value in ids]
    code = (
        "from services.timer.policies import jitter_offset_ms as j;"
        f"print([j(v, 30_000) for v in {ids!r}])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO_ROOT)},
    )
    assert result.stdout.strip() == repr(here)


def test_jitter_spreads_over_the_whole_range() -> None:
    offsets = [jitter_offset_ms(execution_id("job", k), 10) for k in range(2_000)]
    assert set(offsets) == set(range(-10, 11))
    assert abs(sum(offsets) / len(offsets)) < 1


# --- catch-up --------------------------------------------------------------------------


def test_catchup_all_fires_every_tick_in_the_window() -> None:
    old, recent, newest = NOW_MS - 3 * HOUR_MS, NOW_MS - HOUR_MS, NOW_MS - 1
    plan = plan_catchup(CatchupPolicy.ALL, [recent, old, newest], NOW_MS, 2 * HOUR_MS)
    assert plan == CatchupPlan(fire=[recent, newest], missed=[(old, MISSED_OUTSIDE_WINDOW)])


def test_catchup_latest_fires_only_the_newest() -> None:
    old, recent, newest = NOW_MS - 3 * HOUR_MS, NOW_MS - HOUR_MS, NOW_MS - 1
    plan = plan_catchup("LATEST", [old, recent, newest], NOW_MS, 2 * HOUR_MS)
    assert plan.fire == [newest]
    assert plan.missed == [(old, MISSED_OUTSIDE_WINDOW), (recent, MISSED_SUPERSEDED)]
    assert MISSED_SUPERSEDED == "superseded by a later tick (catch-up=latest)"


def test_catchup_latest_with_everything_too_old_fires_nothing() -> None:
    plan = plan_catchup(CatchupPolicy.LATEST, [NOW_MS - 5 * HOUR_MS], NOW_MS, HOUR_MS)
    assert plan == CatchupPlan(fire=[], missed=[(NOW_MS - 5 * HOUR_MS, MISSED_OUTSIDE_WINDOW)])


def test_catchup_none_fires_nothing() -> None:
    plan = plan_catchup(CatchupPolicy.NONE, [NOW_MS - 1, NOW_MS - 2], NOW_MS, HOUR_MS)
    assert plan == CatchupPlan(
        fire=[], missed=[(NOW_MS - 2, MISSED_CATCHUP_NONE), (NOW_MS - 1, MISSED_CATCHUP_NONE)]
    )


def test_catchup_window_edges() -> None:
    edge = NOW_MS - HOUR_MS
    assert plan_catchup("ALL", [edge], NOW_MS, HOUR_MS).fire == [edge]
    assert plan_catchup("ALL", [edge - 1], NOW_MS, HOUR_MS).fire == []
    assert plan_catchup("ALL", [NOW_MS], NOW_MS, 0).fire == [NOW_MS]
    assert plan_catchup("ALL", [], NOW_MS, HOUR_MS) == CatchupPlan()
    with pytest.raises(ValueError, match="window_ms"):
        plan_catchup("ALL", [], NOW_MS, -1)
    with pytest.raises(ValueError):
        plan_catchup("SOME", [], NOW_MS, HOUR_MS)


@settings(max_examples=200, deadline=None)
@given(
    policy=st.sampled_from(list(CatchupPolicy)),
    ticks_ms=st.lists(st.integers(NOW_MS - 10 * HOUR_MS, NOW_MS + HOUR_MS), max_size=30),
    window_ms=st.integers(0, 12 * HOUR_MS),
)
def test_catchup_ledger_has_every_tick_exactly_once(
    policy: CatchupPolicy, ticks_ms: list[int], window_ms: int
) -> None:
    plan = plan_catchup(policy, ticks_ms, NOW_MS, window_ms)
    planned = plan.fire + [tick_ms for tick_ms, _ in plan.missed]
    assert sorted(planned) == sorted(set(ticks_ms))
    assert plan.fire == sorted(plan.fire)
    assert all(NOW_MS - tick_ms <= window_ms for tick_ms in plan.fire)
    for tick_ms, reason in plan.missed:
        if reason == MISSED_OUTSIDE_WINDOW:
            assert NOW_MS - tick_ms > window_ms
    if policy is CatchupPolicy.NONE:
        assert plan.fire == []
    if policy is CatchupPolicy.LATEST:
        assert len(plan.fire) <= 1
        assert all(tick_ms < fired for fired in plan.fire for tick_ms, _ in plan.missed)


# --- overlap ---------------------------------------------------------------------------

FIRE, SKIP, QUEUE, REPLACE = (
    OverlapDecision.FIRE,
    OverlapDecision.SKIP,
    OverlapDecision.QUEUE,
    OverlapDecision.REPLACE,
)


@pytest.mark.parametrize(
    ("policy", "running", "queued", "expected"),
    [
        ("SKIP", False, False, FIRE),
        ("SKIP", True, False, SKIP),
        ("SKIP", True, True, SKIP),
        ("QUEUE_ONE", False, False, FIRE),
        ("QUEUE_ONE", True, False, QUEUE),
        ("QUEUE_ONE", True, True, SKIP),
        ("QUEUE_ONE", False, True, SKIP),
        ("ALLOW", False, False, FIRE),
        ("ALLOW", True, False, FIRE),
        ("ALLOW", True, True, FIRE),
        ("REPLACE", False, False, FIRE),
        ("REPLACE", True, False, REPLACE),
    ],
)
def test_decide_overlap(
    policy: str, running: bool, queued: bool, expected: OverlapDecision
) -> None:
    assert decide_overlap(policy, running, queued) is expected
    assert decide_overlap(OverlapPolicy(policy), running, queued) is expected


def test_skip_reasons() -> None:
    assert overlap_skip_reason(OverlapPolicy.SKIP) == SKIPPED_STILL_RUNNING
    assert overlap_skip_reason("QUEUE_ONE") == SKIPPED_QUEUE_FULL
    assert "overlap=replace" in CANCELLED_REPLACED
    for never_skips in ("ALLOW", "REPLACE"):
        with pytest.raises(ValueError, match="never skips"):
            overlap_skip_reason(never_skips)


@given(policy=st.sampled_from(list(OverlapPolicy)), running=st.booleans(), queued=st.booleans())
def test_overlap_never_runs_two_unless_allowed(
    policy: OverlapPolicy, running: bool, queued: bool
) -> None:
    decision = decide_overlap(policy, running, queued)
    if decision is OverlapDecision.SKIP:
        assert overlap_skip_reason(policy)
    if running and decision is OverlapDecision.FIRE:
        assert policy is OverlapPolicy.ALLOW
