"""JSON bodies of the REST API, built from the view's records (times as ISO-8601 UTC)."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from datetime import date
from functools import lru_cache
from typing import Any

from services.ingest.commands import first_run_at_ms
from services.ingest.lifecycle import Lifecycle
from streams.records import JobStatus

_DAY_S = 86_400
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


@lru_cache(maxsize=65_536)
def _iso_second(seconds: int) -> str:
    """``2026-07-12T02:00:00`` of the second ``seconds`` after the epoch (cached: the times
    of an execution, and of the results a view applies in one second, share few seconds)."""
    days, in_day = divmod(seconds, _DAY_S)
    minutes, second = divmod(in_day, 60)
    hour, minute = divmod(minutes, 60)
    day = date.fromordinal(_EPOCH_ORDINAL + days).isoformat()
    return f"{day}T{hour:02d}:{minute:02d}:{second:02d}"


def iso(ms: int | None) -> str | None:
    """Epoch ms as ``2026-07-12T02:00:00.000Z``; None stays None.

    Integer arithmetic, exact for every date (``datetime.fromtimestamp(ms / 1000)`` lost
    the last ms digit far in the future); ValueError outside years 1-9999."""
    if ms is None:
        return None
    seconds, millis = divmod(ms, 1000)
    return f"{_iso_second(seconds)}.{millis:03d}Z"


def schedule_type(job: Mapping[str, Any]) -> str:
    """``one_off``, ``recurring`` or ``dependent`` (the seed design's ``type``)."""
    if job.get("cron") is not None:
        return "recurring"
    return "one_off" if job.get("run_at_ms") is not None else "dependent"


def next_run_ms(
    job: Mapping[str, Any], executions: list[dict[str, Any]], now_ms: int
) -> int | None:
    """The next nominal fire of a job as the view knows it, or None when none is due.

    A one-off counts as fired once any execution for its run_at exists; a cron's next tick is
    the first after now (a late tick still due shows as past until it is recorded).
    """
    if job["status"] != JobStatus.SCHEDULED:
        return None
    if job.get("run_at_ms") is not None:
        fired = any(e["scheduled_for_ms"] == job["run_at_ms"] for e in executions)
        return None if fired else int(job["run_at_ms"])
    if job.get("cron") is not None:
        return first_run_at_ms(job, now_ms)
    return None


def _payload_fields(payload: bytes) -> dict[str, Any]:
    if not payload:
        return {"payload": None}
    try:
        return {"payload": json.loads(payload.decode("utf-8"))}
    except (UnicodeDecodeError, ValueError):
        return {"payload_b64": base64.b64encode(payload).decode()}


def cron_body(cron: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if cron is None:
        return None
    return {
        "expression": cron["expression"],
        "timezone": cron["timezone"],
        "start": iso(cron.get("start_ms")),
        "end": iso(cron.get("end_ms")),
        "fold_policy": cron["fold_policy"],
    }


def _status_fields(job: Mapping[str, Any], lifecycle: Lifecycle | None) -> dict[str, Any]:
    """``status`` as the job's life goes (COMPLETED one-offs) and its ``outcome``."""
    if lifecycle is None or lifecycle.record_status != job["status"]:
        lifecycle = Lifecycle.of_job(job, None)  # the view has not yet derived it
    return {"status": lifecycle.shown, "outcome": lifecycle.outcome}


def job_body(
    job: Mapping[str, Any],
    executions: list[dict[str, Any]],
    running: Mapping[str, int],
    now_ms: int,
    lifecycle: Lifecycle | None = None,
) -> dict[str, Any]:
    """GET /api/jobs/{id}: definition, state, next run and recent executions (each with
    its attempts)."""
    retry = job["retry"]
    return {
        "job_id": job["job_id"],
        "type": schedule_type(job),
        **_status_fields(job, lifecycle),
        "version": job["version"],
        "next_run_at": iso(next_run_ms(job, executions, now_ms)),
        "running_executions": sorted(running),
        "handler": job["handler"],
        **_payload_fields(job["payload"]),
        "run_at": iso(job.get("run_at_ms")),
        "cron": cron_body(job.get("cron")),
        "depends_on": list(job["depends_on"]),
        "priority": job["priority"],
        "timeout_s": job["timeout_ms"] / 1000,
        "retry": {
            "max_attempts": retry["max_attempts"],
            "initial_backoff_s": retry["initial_backoff_ms"] / 1000,
            "multiplier": retry["multiplier"],
            "max_backoff_s": retry["max_backoff_ms"] / 1000,
            "jitter_ratio": retry["jitter_ratio"],
        },
        "overlap": job["overlap"],
        "catchup": job["catchup"],
        "catchup_window_s": job["catchup_window_ms"] / 1000,
        "jitter_s": job["jitter_ms"] / 1000,
        "dag_wait_s": job["dag_wait_ms"] / 1000,
        "tenant": job["tenant"],
        "labels": dict(job["labels"]),
        "manual_fire_at": iso(job.get("manual_fire_at_ms")),
        "created_at": iso(job["created_at_ms"]),
        "updated_at": iso(job["updated_at_ms"]),
        "recent_executions": [execution_body(e) for e in executions],
    }


def job_summary(
    job: Mapping[str, Any],
    lifecycle: Lifecycle | None,
    last_execution: Mapping[str, Any] | None,
    now_ms: int,
) -> dict[str, Any]:
    """One item of GET /api/jobs: what a list shows of a job (its detail has the rest)."""
    newest = [dict(last_execution)] if last_execution is not None else []
    return {
        "job_id": job["job_id"],
        "type": schedule_type(job),
        **_status_fields(job, lifecycle),
        "handler": job["handler"],
        "tenant": job["tenant"],
        "labels": dict(job["labels"]),
        "run_at": iso(job.get("run_at_ms")),
        "cron": cron_body(job.get("cron")),
        "depends_on": list(job["depends_on"]),
        "next_run_at": iso(next_run_ms(job, newest, now_ms)),
        "last_execution": None if last_execution is None else attempt_body(last_execution),
        "updated_at": iso(job["updated_at_ms"]),
    }


def attempt_body(attempt: Mapping[str, Any]) -> dict[str, Any]:
    body = {
        "attempt": attempt["attempt"],
        "status": attempt["status"],
        "trigger": attempt["trigger"],
        "reason": attempt.get("reason"),
        "error": attempt.get("error"),
        "worker_id": attempt.get("worker_id"),
        "started_at": iso(attempt.get("started_at_ms")),
        "finished_at": iso(attempt.get("finished_at_ms")),
        "next_attempt_at": iso(attempt.get("next_attempt_at_ms")),
        "recorded_at": iso(attempt.get("recorded_at_ms")),
    }
    if "execution_id" in attempt:
        body = {
            "execution_id": attempt["execution_id"],
            "scheduled_for": iso(attempt["scheduled_for_ms"]),
            **body,
        }
    return body


def execution_body(execution: Mapping[str, Any]) -> dict[str, Any]:
    """One execution: its newest attempt's fields and ``attempts``, every attempt kept,
    oldest first (an execution replayed after its dead letter lists both rounds)."""
    body = attempt_body(execution)
    body["job_id"] = execution.get("job_id")
    body["attempts"] = [attempt_body(a) for a in execution.get("attempts", ())]
    return body


def dead_letter_body(item: Mapping[str, Any]) -> dict[str, Any]:
    """One item of GET /api/dead-letter."""
    body = {k: v for k, v in item.items() if not k.endswith("_ms")}
    body["scheduled_for"] = iso(item.get("scheduled_for_ms"))
    body["dead_at"] = iso(item.get("dead_at_ms"))
    return body
