"""The dashboard's live window of outcomes and start lateness (pure; no Kafka)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.ingest.recent_outcomes import (
    LATENESS_BOUNDS_MS,
    RecentOutcomes,
    lateness_bucket,
    quantile_ms,
)

NOW_MS = 1_800_000_000_000  # a whole second
NOW_S = NOW_MS // 1000


def result(
    status: str,
    recorded_s: int,
    *,
    lateness_ms: int | None = None,
    attempt: int = 1,
    trigger: str = "SCHEDULE",
) -> dict[str, Any]:
    """An ExecutionResult recorded in second ``recorded_s``; started ``lateness_ms`` after
    its tick (in the same second) when given."""
    recorded_ms = recorded_s * 1000 + 500
    started: int | None = None
    scheduled = recorded_ms - 1000
    if lateness_ms is not None:
        started = recorded_s * 1000 + 100
        scheduled = started - lateness_ms
    return {
        "status": status,
        "attempt": attempt,
        "trigger": trigger,
        "scheduled_for_ms": scheduled,
        "started_at_ms": started,
        "recorded_at_ms": recorded_ms,
    }


def test_outcomes_are_counted_per_second_by_kind() -> None:
    window = RecentOutcomes(window_s=60)
    window.add_results(
        [
            result("SUCCEEDED", NOW_S - 3),
            result("SUCCEEDED", NOW_S - 3),
            result("FAILED", NOW_S - 3),
            result("TIMED_OUT", NOW_S - 2),
            result("DEAD_LETTER", NOW_S - 2),
            result("SKIPPED", NOW_S - 1),
            result("UPSTREAM_FAILED", NOW_S - 1),
            result("STARTED", NOW_S - 1),  # no outcome
        ],
        NOW_MS,
    )
    series = window.series(NOW_MS, 4)
    assert series["from_s"] == NOW_S - 4 and series["seconds"] == 4
    assert series["outcomes"] == {
        "succeeded": [0, 2, 0, 0],
        "failed": [0, 1, 1, 0],
        "dead_letter": [0, 0, 1, 0],
        "other": [0, 0, 0, 2],
    }
    assert series["window"]["outcomes"] == {
        "succeeded": 2, "failed": 2, "dead_letter": 1, "other": 2,
    }  # fmt: skip


def test_lateness_counts_first_attempts_fired_on_time_only() -> None:
    window = RecentOutcomes(window_s=60)
    second = NOW_S - 1
    window.add_results(
        [
            result("SUCCEEDED", second, lateness_ms=3),
            result("DEAD_LETTER", second, lateness_ms=7, trigger="MANUAL"),
            result("STARTED", second, lateness_ms=900),  # its attempt's end counts, not this
            result("SUCCEEDED", second, lateness_ms=5_000, attempt=2, trigger="RETRY"),
            result("SUCCEEDED", second, lateness_ms=60_000, trigger="REPLAY"),
            result("SUCCEEDED", second, lateness_ms=9_000, trigger="DAG"),
            result("SUCCEEDED", second, lateness_ms=86_400_000, trigger="BACKFILL"),
        ],
        NOW_MS,
    )
    series = window.series(NOW_MS, 1)
    assert series["window"]["lateness_count"] == 2
    assert series["lateness_ms"] == {"p50": [3], "p99": [7], "max": [7]}
    assert series["window"]["lateness_max_ms"] == 7


def test_an_early_start_counts_as_on_time() -> None:
    window = RecentOutcomes(window_s=10)
    window.add_results([result("SUCCEEDED", NOW_S - 1, lateness_ms=-40)], NOW_MS)
    assert window.series(NOW_MS, 1)["lateness_ms"] == {"p50": [0], "p99": [0], "max": [0]}


def test_results_older_than_the_window_or_far_ahead_are_not_counted() -> None:
    window = RecentOutcomes(window_s=10)
    window.add_results(
        [
            result("SUCCEEDED", NOW_S - 10),  # the oldest second shown
            result("SUCCEEDED", NOW_S - 11),  # a restarted view reading history
            result("SUCCEEDED", NOW_S + 5),  # a writer's clock a little ahead
            result("SUCCEEDED", NOW_S + 6),  # ... too far ahead
        ],
        NOW_MS,
    )
    assert window.series(NOW_MS, 10)["outcomes"]["succeeded"] == [1] + [0] * 9
    ahead_ms = NOW_MS + 6_000
    assert window.series(ahead_ms, 10)["outcomes"]["succeeded"] == [0] * 9 + [1]


def test_seconds_that_left_the_window_are_not_shown_again() -> None:
    window = RecentOutcomes(window_s=10)
    window.add_results([result("SUCCEEDED", NOW_S - 5, lateness_ms=50)], NOW_MS)
    later_ms = NOW_MS + 16_000
    for second in range(NOW_S + 6, NOW_S + 16):  # a later window, over the old slots
        window.add_results([result("FAILED", second, lateness_ms=2)], later_ms)
    window.add_results([result("SUCCEEDED", NOW_S - 5)], later_ms)  # arrives late
    series = window.series(later_ms, 10)
    assert series["outcomes"]["failed"] == [1] * 10
    assert sum(series["outcomes"]["succeeded"]) == 0
    assert series["window"]["lateness_max_ms"] == 2
    past = window.series(NOW_MS, 10)  # a time whose seconds were overwritten
    assert sum(past["outcomes"]["succeeded"]) == 0 and past["window"]["lateness_count"] == 0


def test_an_empty_second_has_no_lateness() -> None:
    window = RecentOutcomes(window_s=10)
    series = window.series(NOW_MS, 3)
    assert series["lateness_ms"] == {"p50": [None] * 3, "p99": [None] * 3, "max": [None] * 3}
    assert series["window"]["lateness_p99_ms"] is None


@pytest.mark.parametrize("seconds", [0, 11])
def test_series_refuses_seconds_outside_the_window(seconds: int) -> None:
    with pytest.raises(ValueError, match="seconds"):
        RecentOutcomes(window_s=10).series(NOW_MS, seconds)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-100, 200_000), min_size=1, max_size=300), st.floats(0.01, 1.0))
def test_quantiles_bound_the_true_one_within_a_bucket(values: list[int], q: float) -> None:
    buckets = [0] * (len(LATENESS_BOUNDS_MS) + 1)
    for value in values:
        buckets[lateness_bucket(max(0, value))] += 1
    top = max(0, *values)
    estimate = quantile_ms(buckets, top, q)
    ranked = sorted(max(0, v) for v in values)
    true = ranked[max(1, round(q * len(ranked))) - 1]
    assert estimate is not None and true <= estimate <= top
    assert estimate <= max(true * 1.25, true + 1) or estimate == top


def test_bucket_bounds_are_inclusive() -> None:
    for index, bound in enumerate(LATENESS_BOUNDS_MS):
        assert lateness_bucket(bound) == index
        assert lateness_bucket(bound + 1) == index + 1
