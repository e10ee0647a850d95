"""One log line per failed attempt: its retry, or its dead letter, with the reason.

Called once per attempt that did not succeed, after its records were produced. A timeout is
such a failure (status TIMED_OUT). The line names the execution, its job and attempt (as
fields too, for ``KAFKRON_LOG_FORMAT=json``) and why; never the payload, nor the text of a
handler's exception, which may quote it: only the exception's type. The full error is on
``job-results`` and in the dead letter (``kafkron dlq``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from services.executor.outcomes import AttemptOutputs
from services.executor.runner import RunOutcome, RunStatus

log = logging.getLogger(__name__)


def failure_kind(outcome: RunOutcome) -> str:
    """What went wrong, safe to log: our own timeout message, or the exception's type."""
    error = outcome.error or ""
    if outcome.status is RunStatus.TIMED_OUT:
        return error or "timed out"
    kind = error.split(":", 1)[0].strip()  # runner's "Type: message"
    return kind if kind.isidentifier() else "an error"


def log_failed_attempt(
    event: Mapping[str, Any], outcome: RunOutcome, outputs: AttemptOutputs
) -> None:
    """Log the failed attempt of ``event`` once: WARNING with its retry, ERROR when dead."""
    attempt: int = event["attempt"]
    kind = failure_kind(outcome)
    fields: dict[str, Any] = {
        "job_id": event["job_id"],
        "execution_id": event["execution_id"],
        "attempt": attempt,
    }
    if outputs.retry_request is not None:
        delay_s = (
            outputs.retry_request["due"]["fire_at_ms"] - outputs.result["recorded_at_ms"]
        ) / 1000
        reason = f"attempt {attempt} {outcome.status.value}: {kind}"
        log.warning(
            "execution %s (job %s) attempt %d %s: %s; retry as attempt %d in %.1f s",
            event["execution_id"], event["job_id"], attempt, outcome.status.value, kind,
            attempt + 1, delay_s, extra={**fields, "reason": reason},
        )  # fmt: skip
    elif outputs.dead_letter is not None:
        reason = str(outputs.dead_letter["reason"])
        log.error(
            "execution %s (job %s) dead-lettered: %s (%s)",
            event["execution_id"], event["job_id"], reason, kind,
            extra={**fields, "reason": reason},
        )  # fmt: skip
