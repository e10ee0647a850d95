from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.executor.offsets import OffsetTracker, PartitionOffsets


class Model:
    """Brute force: the lowest started-but-unfinished offset, else max started + 1."""

    def __init__(self) -> None:
        self.started: set[int] = set()
        self.finished: set[int] = set()

    def committable(self) -> int | None:
        running = self.started - self.finished
        if running:
            return min(running)
        return max(self.started) + 1 if self.started else None


# An op is ("start", gap before the next offset) or ("finish", which in-flight offset).
ops = st.lists(
    st.one_of(
        st.tuples(st.just("start"), st.integers(1, 3)),
        st.tuples(st.just("finish"), st.integers(0, 10**6)),
    ),
    max_size=300,
)


@settings(max_examples=300, deadline=None)
@given(ops=ops, first=st.integers(0, 10**12))
def test_committable_matches_the_brute_force_model(ops: list[tuple[str, int]], first: int) -> None:
    tracker, model = PartitionOffsets(), Model()
    next_offset = first
    for op, arg in ops:
        running = sorted(model.started - model.finished)
        if op == "start":
            tracker.started(next_offset)
            model.started.add(next_offset)
            next_offset += arg
        elif running:
            offset = running[arg % len(running)]
            tracker.finished(offset)
            model.finished.add(offset)
        assert tracker.committable() == model.committable()
        assert tracker.in_flight() == len(model.started - model.finished)


# Also ("pass", gap): started and finished at once; ("hold", gap): passed, then held.
ops_with_passes = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["start", "pass", "hold"]), st.integers(1, 3)),
        st.tuples(st.just("finish"), st.integers(0, 10**6)),
    ),
    max_size=300,
)


@settings(max_examples=300, deadline=None)
@given(ops=ops_with_passes, first=st.integers(0, 10**12))
def test_passed_and_held_offsets_match_the_model(ops: list[tuple[str, int]], first: int) -> None:
    tracker, model = PartitionOffsets(), Model()
    next_offset = first
    for op, arg in ops:
        running = sorted(model.started - model.finished)
        if op == "finish":
            if running:
                offset = running[arg % len(running)]
                tracker.finished(offset)
                model.finished.add(offset)
        else:
            if op == "start":
                tracker.started(next_offset)
            else:
                tracker.passed(next_offset)
                if op == "hold":
                    tracker.hold(next_offset)
            model.started.add(next_offset)
            if op == "pass":
                model.finished.add(next_offset)
            next_offset += arg
        assert tracker.committable() == model.committable()
        assert tracker.in_flight() == len(model.started - model.finished)


def test_pass_and_hold_misuse_is_refused() -> None:
    offsets = PartitionOffsets()
    offsets.passed(5)
    with pytest.raises(ValueError, match="increasing"):
        offsets.passed(5)
    with pytest.raises(ValueError, match="passed last"):
        offsets.hold(4)
    offsets.hold(5)
    with pytest.raises(ValueError, match="passed last"):
        offsets.hold(5)  # held twice
    offsets.passed(6)
    assert offsets.committable() == 5
    offsets.finished(5)
    assert offsets.committable() == 7


def test_examples() -> None:
    offsets = PartitionOffsets()
    assert offsets.committable() is None
    offsets.started(10)
    offsets.started(11)
    offsets.started(14)  # a gap: transaction markers or compaction
    assert offsets.committable() == 10
    offsets.finished(11)
    assert offsets.committable() == 10
    offsets.finished(10)
    assert offsets.committable() == 14
    offsets.finished(14)
    assert offsets.committable() == 15  # nothing in flight: one past the highest started


def test_out_of_order_finish_commits_past_the_highest_not_the_last() -> None:
    offsets = PartitionOffsets()
    offsets.started(1)
    offsets.started(2)
    offsets.finished(2)
    offsets.finished(1)
    assert offsets.committable() == 3


def test_misuse_is_refused() -> None:
    offsets = PartitionOffsets()
    offsets.started(5)
    with pytest.raises(ValueError, match="increasing"):
        offsets.started(5)
    with pytest.raises(ValueError, match="not in flight"):
        offsets.finished(4)
    offsets.finished(5)
    with pytest.raises(ValueError, match="not in flight"):
        offsets.finished(5)
    offsets.reset()
    assert offsets.committable() is None
    offsets.started(0)  # after a reset (a seek) lower offsets are fine again
    assert offsets.committable() == 0


def test_many_out_of_order_finishes_stay_linear() -> None:
    offsets = PartitionOffsets()
    n = 200_000
    for offset in range(n):
        offsets.started(offset)
    for offset in reversed(range(1, n)):
        offsets.finished(offset)
        assert offsets.committable() == 0
    offsets.finished(0)
    assert offsets.committable() == n


def test_tracker_reports_only_advanced_positions_and_forgets_dropped_partitions() -> None:
    tracker: OffsetTracker[tuple[str, int]] = OffsetTracker()
    a, b = ("due.high", 0), ("due.low", 3)
    tracker.started(a, 0)
    tracker.started(a, 1)
    tracker.started(b, 7)
    assert tracker.to_commit() == {a: 0, b: 7}
    tracker.mark_committed({a: 0, b: 7})
    assert tracker.to_commit() == {}
    assert tracker.finished(a, 0)
    assert tracker.to_commit() == {a: 1}
    tracker.mark_committed({a: 1})
    tracker.drop(b)
    assert b not in tracker
    assert tracker.finished(b, 7) is False  # a result of a revoked partition is not recorded
    assert tracker.to_commit() == {}
