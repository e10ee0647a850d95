"""The executor's metrics (metrics.py over stats.py) and its one log line per failed attempt
(failure_logs.py): pure logic, no broker."""

from __future__ import annotations

import logging

import pytest
from prometheus_client.core import Metric

from services.executor.failure_logs import failure_kind, log_failed_attempt
from services.executor.handlers import HandlerRegistry
from services.executor.loop import ExecutorLoop
from services.executor.metrics import ExecutorCollector, executor_families
from services.executor.outcomes import attempt_outputs
from services.executor.runner import RunOutcome, RunStatus
from services.executor.settings import ExecutorSettings
from services.executor.stats import ExecutorStats
from streams.codec import Codec
from streams.settings import KafkaSettings
from tests.services.executor.test_service_kit import due_event

SECRET = b"card=4111-1111-1111-1111"


def samples(families: list[Metric]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_outcomes_timeouts_dead_letters_and_decode_failures_come_from_the_counters() -> None:
    stats = ExecutorStats(succeeded=7, retries_scheduled=3, dead_lettered=2, timed_out=1)
    stats.undecodable = 4
    stats.undecodable_by_topic.update({"k.due.high": 1, "k.due.low": 3})
    got = samples(list(executor_families(stats, 0)))
    executions = "kafkron_executor_executions_total"
    assert got[(executions, (("outcome", "succeeded"),))] == 7
    assert got[(executions, (("outcome", "retry_scheduled"),))] == 3
    assert got[(executions, (("outcome", "dead_letter"),))] == 2
    assert got[("kafkron_executor_timeouts_total", ())] == 1
    assert got[("kafkron_dead_letters_total", (("kind", "execution"),))] == 2
    assert got[("kafkron_dead_letters_total", (("kind", "undecodable"),))] == 4
    assert got[("kafkron_decode_failures_total", (("topic", "k.due.low"),))] == 3


def test_quick_runs_count_in_the_first_handler_bucket_and_the_others_where_they_fall() -> None:
    stats = ExecutorStats()
    for ran_ms in (1, 30, 30, 4_000):
        stats.handler_ms.observe(ran_ms)
    got = samples(list(executor_families(stats, quick_runs=10)))
    name = "kafkron_executor_handler_duration_seconds"
    assert got[(name + "_bucket", (("le", "0.001"),))] == 11
    assert got[(name + "_bucket", (("le", "0.025"),))] == 11
    assert got[(name + "_bucket", (("le", "0.05"),))] == 13
    assert got[(name + "_bucket", (("le", "5.0"),))] == 14
    assert got[(name + "_count", ())] == 14
    assert got[(name + "_sum", ())] == pytest.approx(4.061)
    assert stats.handler_ms.counts[0] == 1  # the families never change the counters


def test_a_loop_not_started_shows_zero_gauges() -> None:
    settings = ExecutorSettings(kafka=KafkaSettings(namespace="k."), worker_id="w", metrics_port=0)
    loop = ExecutorLoop(settings, HandlerRegistry(), Codec.from_directory())
    got = samples(list(ExecutorCollector(loop).collect()))
    assert got[("kafkron_executor_runs_in_flight", ())] == 0
    assert got[("kafkron_executor_held_records", ())] == 0
    assert got[("kafkron_executor_buffered_records", ())] == 0
    assert got[("kafkron_executor_handler_duration_seconds_count", ())] == 0


def outcome(status: RunStatus, error: str, *, retryable: bool = True) -> RunOutcome:
    return RunOutcome(status, error, retryable, None, 1_000, 1_250)


def test_a_failed_attempt_with_attempts_left_logs_one_warning_with_its_retry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    event = due_event("job-1", 5_000, max_attempts=3, payload=SECRET)
    failed = outcome(RunStatus.FAILED, f"ValueError: bad input {SECRET!r}")
    outputs = attempt_outputs(event, failed, "w", 2_000)
    with caplog.at_level(logging.INFO):
        log_failed_attempt(event, failed, outputs)
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert "job-1@5000" in message and "FAILED" in message and "ValueError" in message
    assert "attempt 2 in" in message
    assert "4111" not in caplog.text  # neither the payload nor the handler's message
    fields = record.__dict__
    assert (fields["job_id"], fields["execution_id"], fields["attempt"]) == (
        "job-1",
        "job-1@5000",
        1,
    )
    assert fields["reason"] == "attempt 1 FAILED: ValueError"


def test_the_last_attempt_logs_one_error_with_the_dead_letter_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    event = due_event("job-2", 6_000, max_attempts=1, payload=SECRET)
    timed_out = outcome(RunStatus.TIMED_OUT, "examples.sleep did not finish within 0.2s")
    outputs = attempt_outputs(event, timed_out, "w", 2_000)
    assert outputs.dead_letter is not None
    with caplog.at_level(logging.INFO):
        log_failed_attempt(event, timed_out, outputs)
    (record,) = caplog.records
    assert record.levelno == logging.ERROR
    assert "job-2@6000 (job job-2) dead-lettered" in record.getMessage()
    assert "did not finish within 0.2s" in record.getMessage()
    assert record.__dict__["reason"] == outputs.dead_letter["reason"]
    assert "4111" not in caplog.text


def test_what_a_failure_logs_of_its_error() -> None:
    assert failure_kind(outcome(RunStatus.FAILED, "KeyError: 'secret'")) == "KeyError"
    assert failure_kind(outcome(RunStatus.FAILED, "Boom")) == "Boom"
    assert failure_kind(outcome(RunStatus.FAILED, "not a type: x")) == "an error"
    deadline = "h did not finish within 1.0s; its thread was abandoned"
    assert failure_kind(outcome(RunStatus.TIMED_OUT, deadline)) == deadline
