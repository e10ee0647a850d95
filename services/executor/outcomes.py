"""What one attempt leaves behind: ExecutionResult, RetryRequest and DeadLetter records.

Pure functions from a decoded DueEvent and a :class:`RunOutcome` to the records the loop
produces, as dicts ``Codec.encode`` takes. Every execution ends in exactly one final result
(SUCCEEDED or DEAD_LETTER); a failed attempt that may be retried gets a FAILED or TIMED_OUT
result with ``next_attempt_at_ms`` and a RetryRequest carrying the next attempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from services.executor.backoff import RetryPolicy, retry_delay_ms, should_retry
from services.executor.runner import RunOutcome, RunStatus


class AttemptOutputs(NamedTuple):
    """The records one finished attempt produces; ``final`` when the execution is over."""

    result: dict[str, Any]
    retry_request: dict[str, Any] | None
    dead_letter: dict[str, Any] | None

    @property
    def final(self) -> bool:
        return self.retry_request is None


def _result(
    event: Mapping[str, Any], status: str, worker_id: str, now_ms: int, **fields: Any
) -> dict[str, Any]:
    record = {
        "execution_id": event["execution_id"],
        "job_id": event["job_id"],
        "scheduled_for_ms": event["scheduled_for_ms"],
        "attempt": event["attempt"],
        "status": status,
        "reason": None,
        "error": None,
        "worker_id": worker_id,
        "started_at_ms": None,
        "finished_at_ms": None,
        "next_attempt_at_ms": None,
        "trigger": event["trigger"],
        "job_version": event["job_version"],
        "recorded_at_ms": now_ms,
    }
    record.update(fields)
    return record


def started_result(event: Mapping[str, Any], worker_id: str, started_at_ms: int) -> dict[str, Any]:
    """The STARTED result of an attempt that begins now."""
    return _result(event, "STARTED", worker_id, started_at_ms, started_at_ms=started_at_ms)


def attempt_outputs(
    event: Mapping[str, Any], outcome: RunOutcome, worker_id: str, now_ms: int
) -> AttemptOutputs:
    """The result of ``event``'s attempt, plus a RetryRequest or a DeadLetter when it failed.

    A retry fires ``retry_delay_ms`` after ``now_ms`` (exponential backoff with the
    execution's deterministic jitter, at least a handler's ``retry_after_s``). The dead
    letter carries the last attempt's DueEvent with every attempt, the last included, in
    its ``history``.
    """
    times = {"started_at_ms": outcome.started_at_ms, "finished_at_ms": outcome.finished_at_ms}
    if outcome.status is RunStatus.SUCCEEDED:
        return AttemptOutputs(_result(event, "SUCCEEDED", worker_id, now_ms, **times), None, None)
    attempt: int = event["attempt"]
    history = [*event["history"], outcome.attempt_record(attempt, worker_id)]
    policy = RetryPolicy.from_record(event["retry"])
    if should_retry(policy, attempt, outcome.retryable):
        delay_ms = retry_delay_ms(
            policy, attempt, event["execution_id"], retry_after_s=outcome.retry_after_s
        )
        next_at_ms = now_ms + delay_ms
        result = _result(
            event, outcome.status.value, worker_id, now_ms, error=outcome.error,
            next_attempt_at_ms=next_at_ms, **times,
        )  # fmt: skip
        next_attempt = {
            **event,
            "attempt": attempt + 1,
            "trigger": "RETRY",
            "fire_at_ms": next_at_ms,
            "emitted_at_ms": now_ms,
            "history": history,
        }
        return AttemptOutputs(result, {"due": next_attempt, "requested_at_ms": now_ms}, None)
    reason = dead_letter_reason(outcome, attempt, policy.max_attempts)
    result = _result(
        event, "DEAD_LETTER", worker_id, now_ms, reason=reason, error=outcome.error, **times
    )
    dead_letter = {
        "kind": "EXECUTION",
        "reason": reason,
        "execution": {**event, "history": history},
        "last_error": outcome.error,
        "source_topic": None,
        "source_partition": None,
        "source_offset": None,
        "raw_key": None,
        "raw_value": None,
        "dead_at_ms": now_ms,
    }
    return AttemptOutputs(result, None, dead_letter)


def dead_letter_reason(outcome: RunOutcome, attempt: int, max_attempts: int) -> str:
    """Why an execution is dead, in words an operator can act on."""
    if not outcome.retryable:
        return (
            f"attempt {attempt} {outcome.status.value} with a non-retryable error; fix the cause, "
            "then replay it with 'kafkron dlq replay'"
        )
    return (
        f"attempt {attempt} of {max_attempts} {outcome.status.value}; no attempts left. Fix the "
        "cause, then replay it with 'kafkron dlq replay'"
    )


def undecodable_dead_letter(
    reason: str,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    now_ms: int,
) -> dict[str, Any]:
    """An UNDECODABLE dead letter: the raw record and where it was read."""
    return {
        "kind": "UNDECODABLE",
        "reason": reason,
        "execution": None,
        "last_error": None,
        "source_topic": topic,
        "source_partition": partition,
        "source_offset": offset,
        "raw_key": key,
        "raw_value": value,
        "dead_at_ms": now_ms,
    }
