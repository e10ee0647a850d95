"""The timer's side of DAG runs: the dag processor's verdicts on ``dag-releases`` (no broker)."""

from __future__ import annotations

from typing import Any

import pytest

from streams.codec import RecordKind
from streams.identity import execution_id
from streams.records import Job
from tests.services.timer.test_timer_logic import CODEC, T0, Timer, bump

K = T0 - 60_000  # the run key: the root tick, a minute before the release


def dependent(**fields: Any) -> Job:
    return Job(
        job_id="join",
        version=fields.pop("version", 1),
        handler="test.join",
        depends_on=["extract", "load-refs"],
        overlap=fields.pop("overlap", "ALLOW"),
        created_at_ms=T0 - 100_000,
        updated_at_ms=T0 - 100_000,
        **fields,
    )


def release(timer: Timer, verdict: str, run_key_ms: int = K, reason: str | None = None) -> None:
    record = {
        "job_id": "join",
        "run_key_ms": run_key_ms,
        "verdict": verdict,
        "reason": reason,
        "upstream_execution_ids": [],
        "emitted_at_ms": T0,
    }
    value = CODEC.encode(RecordKind.DAG_RELEASE, record)
    timer.feed(timer.env.releases_topic, b"join", value, T0)


def test_a_dependent_never_fires_by_itself() -> None:
    timer = Timer()
    timer.submit(dependent(), T0 - 100_000)
    timer.run(T0 - 100_000, T0 + 100_000, 1_000)
    assert timer.out == []


def test_a_run_release_fires_the_run_now_as_the_execution_of_its_run_key() -> None:
    timer = Timer()
    timer.submit(dependent(priority="HIGH"), T0 - 100_000)
    release(timer, "RUN")
    [due] = timer.dues()
    assert due["execution_id"] == execution_id("join", K)
    assert (due["scheduled_for_ms"], due["fire_at_ms"], due["trigger"]) == (K, T0, "DAG")
    assert timer.out[0][0] == "k.due.high"
    timer.result("join", K, "SUCCEEDED", T0 + 5)
    release(timer, "RUN", K + 2_000)  # the next run fires too
    assert [d["scheduled_for_ms"] for d in timer.dues()] == [K, K + 2_000]


@pytest.mark.parametrize("verdict", ["UPSTREAM_FAILED", "MISSED"])
def test_a_failed_or_missed_verdict_is_the_runs_outcome_with_its_reason(verdict: str) -> None:
    timer = Timer()
    timer.submit(dependent(), T0 - 100_000)
    release(timer, verdict, reason="upstream extract@1 ended DEAD_LETTER")
    assert timer.dues() == []
    [result] = timer.results()
    assert (result["execution_id"], result["status"], result["trigger"]) == (
        execution_id("join", K),
        verdict,
        "DAG",
    )
    assert result["reason"] == "upstream extract@1 ended DEAD_LETTER"


@pytest.mark.parametrize(
    ("status", "outcome", "reason"),
    [("PAUSED", "SKIPPED", "paused"), ("CANCELLED", "CANCELLED", "job cancelled")],
)
def test_a_paused_or_cancelled_dependents_run_is_skipped_or_cancelled(
    status: str, outcome: str, reason: str
) -> None:
    timer = Timer()
    job = dependent()
    timer.submit(job, T0 - 100_000)
    timer.submit(bump(job, version=2, status=status), T0 - 50_000)
    release(timer, "RUN")
    assert timer.dues() == []
    [result] = timer.results()
    assert (result["status"], result["reason"], result["trigger"]) == (outcome, reason, "DAG")


def test_the_overlap_policy_holds_for_dependents() -> None:
    timer = Timer()
    timer.submit(dependent(overlap="SKIP"), T0 - 100_000)
    release(timer, "RUN")
    release(timer, "RUN", K + 2_000)  # the first run is still going
    assert [d["scheduled_for_ms"] for d in timer.dues()] == [K]
    [skipped] = timer.results()
    assert (skipped["scheduled_for_ms"], skipped["status"]) == (K + 2_000, "SKIPPED")


def test_a_release_for_a_job_the_timer_does_not_have_changes_nothing() -> None:
    timer = Timer()
    release(timer, "RUN")
    assert timer.out == []
