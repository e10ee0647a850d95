"""An execution's attempts as the view folds results into them (pure)."""

from __future__ import annotations

import itertools
from typing import Any

from services.ingest.attempts import merged_execution

CLOCK = itertools.count(1_000)


def result(attempt: int, status: str, trigger: str = "SCHEDULE", **fields: Any) -> dict[str, Any]:
    return {"execution_id": "j@1", "job_id": "j", "scheduled_for_ms": 1, "attempt": attempt,
            "status": status, "trigger": trigger, "recorded_at_ms": next(CLOCK),
            **fields}  # fmt: skip


def fold(*results: dict[str, Any], kept: int = 100) -> dict[str, Any]:
    execution: dict[str, Any] | None = None
    for one in results:
        execution = merged_execution(execution, one, kept)
    assert execution is not None
    return execution


def shape(execution: dict[str, Any]) -> list[tuple[int, str, str]]:
    return [(a["attempt"], a["status"], a["trigger"]) for a in execution["attempts"]]


def test_each_attempt_once_with_its_own_fields() -> None:
    execution = fold(
        result(1, "STARTED", worker_id="w1", started_at_ms=10),
        result(1, "FAILED", error="boom", finished_at_ms=11, next_attempt_at_ms=20),
        result(2, "STARTED", "RETRY", worker_id="w2", started_at_ms=20),
        result(2, "SUCCEEDED", "RETRY", finished_at_ms=21),
    )
    assert shape(execution) == [(1, "FAILED", "SCHEDULE"), (2, "SUCCEEDED", "RETRY")]
    first, second = execution["attempts"]
    assert (first["worker_id"], first["started_at_ms"], first["error"]) == ("w1", 10, "boom")
    assert first["next_attempt_at_ms"] == 20
    assert (second["worker_id"], second["started_at_ms"]) == ("w2", 20)
    assert (execution["status"], execution["attempt"], execution["finished_at_ms"]) == (
        "SUCCEEDED", 2, 21,
    )  # fmt: skip


def test_a_late_started_never_hides_the_outcome() -> None:
    execution = fold(result(1, "SUCCEEDED", finished_at_ms=5), result(1, "STARTED", worker_id="w"))
    assert shape(execution) == [(1, "SUCCEEDED", "SCHEDULE")]
    assert execution["attempts"][0]["worker_id"] == "w"
    late = fold(result(1, "DEAD_LETTER"), result(1, "FAILED", error="x"))
    replayed_late = fold(
        result(1, "SUCCEEDED", "REPLAY", recorded_at_ms=9),
        result(1, "STARTED", "REPLAY", recorded_at_ms=5, worker_id="w"),
    )
    assert shape(replayed_late) == [(1, "SUCCEEDED", "REPLAY")]
    assert late["status"] == "DEAD_LETTER" and late["attempts"][0]["error"] == "x"


def test_a_replay_starts_a_new_round_and_keeps_the_old_one() -> None:
    execution = fold(
        result(1, "FAILED", error="a"),
        result(2, "DEAD_LETTER", "RETRY", error="b"),
        result(1, "STARTED", "REPLAY"),
        result(1, "FAILED", "REPLAY", error="c"),
        result(2, "SUCCEEDED", "RETRY"),
    )
    assert shape(execution) == [
        (1, "FAILED", "SCHEDULE"), (2, "DEAD_LETTER", "RETRY"),
        (1, "FAILED", "REPLAY"), (2, "SUCCEEDED", "RETRY"),
    ]  # fmt: skip
    again = fold(result(1, "DEAD_LETTER"), result(1, "STARTED", "REPLAY"),
                 result(1, "DEAD_LETTER", "REPLAY"), result(1, "STARTED", "REPLAY"))  # fmt: skip
    assert shape(again) == [(1, "DEAD_LETTER", "SCHEDULE"), (1, "DEAD_LETTER", "REPLAY"),
                            (1, "STARTED", "REPLAY")]  # fmt: skip


def test_attempts_are_bounded_oldest_dropped() -> None:
    execution = fold(*(result(n, "FAILED") for n in range(1, 8)), kept=3)
    assert [a["attempt"] for a in execution["attempts"]] == [5, 6, 7]
