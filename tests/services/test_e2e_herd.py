"""The herd end to end on the real broker: 100K one-offs due at one instant, each run once.

Issue 4's proof: jobs go in through ingest's bulk client (``submit_many``), one timer
process fires them, one executor process runs them, and every one reaches SUCCEEDED exactly
once on ``job-results`` (read ``read_committed``), with no FAILED, TIMED_OUT or DEAD_LETTER.
The handler is ``tests.effect`` (``record_effect`` of the executor's test kit), so the runs
of each execution are also counted from the handler's own effect log.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from bench.e2e_herd import (
    EXECUTOR_ENV,
    ResultLog,
    Tally,
    submit_named_one_offs,
    wait_until_serving,
)
from bench.herd import TimerProcess
from streams.identity import execution_id
from streams.settings import KafkaSettings

from .executor.test_service_kit import ExecutorProcess, effects, now_ms

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

JOBS = 100_000
LEAD_MS = 15_000  # submit (~1-2 s) and the timer's intake (6K-50K creates/s here)
RESULTS_DEADLINE_S = 300.0


def herd_through_timer_and_executor(
    topics: KafkaSettings, tmp_path: Path, job_ids: list[str], instant_ms: int
) -> tuple[Tally, ExecutorProcess]:
    """Start a timer and an executor, submit the herd, read results until each SUCCEEDED."""
    timer = TimerProcess(topics, "e2e-timer", tmp_path)
    executor = ExecutorProcess(topics, "e2e-executor", tmp_path, **EXECUTOR_ENV)
    results: ResultLog | None = None
    try:
        timer.start()
        executor.start()
        results = ResultLog(topics)
        wait_until_serving(topics, results, timeout_s=120)
        submit_named_one_offs(topics, job_ids, instant_ms, handler="tests.effect")
        results.wait_all_succeeded(len(job_ids), RESULTS_DEADLINE_S)
        quiet_until = time.monotonic() + 2.0  # a late duplicate would show up here
        while time.monotonic() < quiet_until:
            results.poll(0.2)
        return results.tally(), executor
    finally:
        if results is not None:
            results.close()
        executor.stop(timeout_s=60)
        timer.stop(timeout_s=60)


@pytest.mark.timeout(600)
def test_a_herd_of_100k_one_offs_due_at_one_instant_all_succeed_exactly_once(
    topics: KafkaSettings, tmp_path: Path
) -> None:
    job_ids = [f"herd-{i:06d}" for i in range(JOBS)]
    instant_ms = now_ms() + LEAD_MS
    started = time.monotonic()
    tally, executor = herd_through_timer_and_executor(topics, tmp_path, job_ids, instant_ms)
    finished_s = time.monotonic() - started

    expected = {execution_id(j, instant_ms) for j in job_ids}
    duplicates = tally.duplicates()
    assert not duplicates, f"{len(duplicates)} executions SUCCEEDED twice: {list(duplicates)[:5]}"
    assert set(tally.succeeded) == expected, (
        f"{len(expected - set(tally.succeeded))} executions never SUCCEEDED, "
        f"{len(set(tally.succeeded) - expected)} unexpected ones did"
    )
    assert tally.succeeded_jobs == Counter(dict.fromkeys(job_ids, 1))
    failed = {s: n for s, n in tally.statuses.items() if s not in ("STARTED", "SUCCEEDED")}
    assert not failed, f"unexpected outcomes {failed}: {tally.problems}"
    assert len(tally.start_lateness_ms) == JOBS  # one per SUCCEEDED

    runs = effects(executor.effects_path)
    started_runs = [runs[("start", e)] for e in expected]
    assert min(started_runs) >= 1  # every handler ran; more only after an aborted commit
    assert all(runs[("done", e)] >= 1 for e in expected)
    late = sorted(tally.start_lateness_ms)
    print(
        f"\ne2e herd: {JOBS} one-offs, each SUCCEEDED once; "
        f"{sum(n > 1 for n in started_runs)} handler runs repeated (aborted commits); start "
        f"lateness p50 {late[len(late) // 2]} ms, p99 {late[int(len(late) * 0.99)]} ms; "
        f"last SUCCEEDED {(tally.last_recorded_ms - instant_ms) / 1000:.1f} s after the "
        f"instant; {finished_s:.0f} s in all"
    )
