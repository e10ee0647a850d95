"""DueEvent records as the timer writes them, for benchmarks and the executor's unit tests."""

from __future__ import annotations

from typing import Any


def due_event_record(job_id: str, at_ms: int, **fields: Any) -> dict[str, Any]:
    """A first-attempt DueEvent of ``job_id`` scheduled, fired and emitted at ``at_ms``
    (encodable as ``RecordKind.DUE_EVENT``); ``fields`` replace top-level fields."""
    record: dict[str, Any] = {
        "execution_id": f"{job_id}@{at_ms}",
        "job_id": job_id,
        "job_version": 1,
        "scheduled_for_ms": at_ms,
        "fire_at_ms": at_ms,
        "attempt": 1,
        "handler": "examples.noop",
        "payload": b"{}",
        "timeout_ms": 60_000,
        "priority": "NORMAL",
        "retry": {
            "max_attempts": 3,
            "initial_backoff_ms": 1000,
            "multiplier": 2.0,
            "max_backoff_ms": 300_000,
            "jitter_ratio": 0.1,
        },
        "trigger": "SCHEDULE",
        "tenant": "default",
        "emitted_at_ms": at_ms,
        "history": [],
    }
    record.update(fields)
    return record
