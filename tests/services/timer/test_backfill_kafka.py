"""A backfill end to end on the real broker (issue 18): timer and executor as child processes.

The same window backfilled twice runs each tick's execution once: the second backfill emits
the same execution ids, which the executor's dedup store knows.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from bench.dag_runs import ResultsReader, handler_specs
from bench.herd import TimerProcess, job_record, produce_jobs
from services.executor.settings import DEFAULT_HANDLER_SPECS
from streams.codec import RecordKind
from streams.identity import execution_id
from streams.settings import KafkaSettings
from tests.services.executor.test_service_kit import (
    EFFECT_SPEC,
    ExecutorProcess,
    TopicReader,
    effects,
    now_ms,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

MINUTE_MS = 60_000


def test_a_window_backfilled_twice_runs_each_tick_once(
    topics: KafkaSettings, tmp_path: Path
) -> None:
    timer = TimerProcess(topics, "bf-timer", tmp_path)
    executor = ExecutorProcess(
        topics,
        "bf-executor",
        tmp_path,
        KAFKRON_EXECUTOR_HANDLER_SPECS=handler_specs(EFFECT_SPEC, *DEFAULT_HANDLER_SPECS),
    )
    timer.start()
    executor.start()
    reader = ResultsReader(topics)
    dues = TopicReader(topics, ["due.normal"])
    try:
        job_id = f"bf-{uuid.uuid4().hex[:6]}"
        created = now_ms()
        this_minute = created // MINUTE_MS * MINUTE_MS
        cron = {
            "expression": "* * * * *",
            "timezone": "UTC",
            "start_ms": None,
            "end_ms": None,
            "fold_policy": "EVERY",
        }
        job = job_record(job_id, created, handler="tests.effect", cron=cron, catchup="NONE")
        window = {"from_ms": this_minute - 12 * MINUTE_MS, "to_ms": this_minute - 3 * MINUTE_MS}
        ticks = list(range(window["from_ms"], window["to_ms"] + 1, MINUTE_MS))
        wanted = [execution_id(job_id, t) for t in ticks]
        for version in (1, 2):
            backfill = {**window, "per_s": 4, "requested_at_ms": now_ms()}
            produce_jobs(topics, [{**job, "version": version, "backfill": backfill}])
            reader.wait(
                lambda o: all(o.final(e) == "SUCCEEDED" for e in wanted),
                120,
                f"the 10 backfilled ticks SUCCEEDED (backfill {version})",
            )

        def emitted() -> list[str]:
            events = dues.decoded("due.normal", RecordKind.DUE_EVENT)
            return [d["execution_id"] for d in events if d["trigger"] == "BACKFILL"]

        dues.wait_for(lambda _: sorted(emitted()) == sorted(wanted * 2), 60, "both backfills")
        quiet_until = time.monotonic() + 3.0  # the second backfill's DueEvents are consumed
        while time.monotonic() < quiet_until:
            reader.poll(0.2)
        counted = effects(executor.effects_path)
        assert [counted[("start", e)] for e in wanted] == [1] * len(ticks)
        for execution in wanted:
            statuses = reader.outcomes.statuses(execution)
            assert statuses.count("SUCCEEDED") == 1, (execution, statuses)
            triggers = {r["trigger"] for r in reader.outcomes.by_execution[execution]}
            assert triggers == {"BACKFILL"}
    finally:
        dues.close()
        reader.close()
        executor.stop()
        timer.stop()
