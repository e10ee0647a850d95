"""Backpressure: a full lane stops consuming at once and is paused only if it stays full."""

from __future__ import annotations

import pytest

from services.executor.backpressure import Backpressure
from streams.topics import Priority


def test_nothing_blocked_consumes_and_pauses_nothing() -> None:
    pressure = Backpressure(pause_after_ms=500)
    pressure.update(set(), now_s=10.0)
    assert pressure.consume_allowed(10.0)
    assert pressure.paused_lanes(10.0) == frozenset()
    assert pressure.pause_due_s(10.0) is None


def test_a_full_lane_stops_consuming_then_is_paused_after_the_bound() -> None:
    pressure = Backpressure(pause_after_ms=500)
    pressure.update({Priority.NORMAL}, now_s=10.0)
    assert not pressure.consume_allowed(10.0)
    assert not pressure.consume_allowed(10.499)
    assert pressure.paused_lanes(10.499) == frozenset()
    assert pressure.pause_due_s(10.2) == pytest.approx(10.5)
    # Still full at the bound: pause that lane, consume the others; nothing more is due.
    assert pressure.consume_allowed(10.5)
    assert pressure.paused_lanes(10.5) == {Priority.NORMAL}
    assert pressure.pause_due_s(10.5) is None


def test_the_bound_runs_from_the_first_full_lane_not_the_latest_change() -> None:
    pressure = Backpressure(pause_after_ms=500)
    pressure.update({Priority.LOW}, now_s=10.0)
    pressure.update({Priority.LOW, Priority.HIGH}, now_s=10.4)
    assert not pressure.consume_allowed(10.45)
    pressure.others_waiting()  # a probe found records of NORMAL: pause now, nothing due
    assert pressure.paused_lanes(10.45) == {Priority.LOW, Priority.HIGH}
    assert pressure.pause_due_s(10.45) is None
    assert pressure.paused_lanes(10.5) == {Priority.LOW, Priority.HIGH}


def test_room_again_resumes_everything_and_restarts_the_bound() -> None:
    pressure = Backpressure(pause_after_ms=500)
    pressure.update({Priority.NORMAL}, now_s=10.0)
    assert pressure.paused_lanes(11.0) == {Priority.NORMAL}
    pressure.update(set(), now_s=11.0)
    assert pressure.consume_allowed(11.0) and pressure.paused_lanes(11.0) == frozenset()
    pressure.update({Priority.NORMAL}, now_s=12.0)
    assert not pressure.consume_allowed(12.2)
    assert pressure.pause_due_s(12.2) == pytest.approx(12.5)


def test_zero_pauses_at_once_as_before_and_a_negative_bound_is_refused() -> None:
    pressure = Backpressure(pause_after_ms=0)
    pressure.update({Priority.HIGH}, now_s=1.0)
    assert pressure.consume_allowed(1.0) and pressure.paused_lanes(1.0) == {Priority.HIGH}
    with pytest.raises(ValueError, match="pause_after_ms"):
        Backpressure(pause_after_ms=-1)
