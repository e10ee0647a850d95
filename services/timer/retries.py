"""Retries: a RetryRequest waits in the wheel and re-emits its next-attempt DueEvent as is.

The executor decides the attempt, backoff and history; the timer only holds the wait. A
retry of a job that was cancelled or deleted meanwhile ends as CANCELLED instead, so the
execution still gets exactly one final outcome.
"""

from __future__ import annotations

from typing import Any

from services.timer import keys
from services.timer.scope import PRIORITY_INDEX, Scope
from services.timer.throttle import active_state
from services.timer.wheel import place_ms
from streams.codec import RecordKind

_MARKER = b"R"
RETRY = "RETRY"  # the trigger of a retry's DueEvent
_HEADER = 2  # marker, priority index


def accept_retry(scope: Scope, request: dict[str, Any]) -> None:
    """Put a decoded RetryRequest in the wheel at its next attempt's ``fire_at_ms``."""
    due = request["due"]
    job_id = due["job_id"].encode()
    value = (
        _MARKER
        + bytes([PRIORITY_INDEX[due["priority"]]])
        + scope.env.codec.encode(RecordKind.DUE_EVENT, due)
    )
    key = keys.retry_key(place_ms(scope, due["fire_at_ms"]), job_id, due["scheduled_for_ms"])
    scope.wheel.set(key, value)


def fire_retry(scope: Scope, key: bytes, value: bytes) -> None:
    """Emit the carried DueEvent, or CANCELLED when its job is no longer active."""
    parsed = keys.parse_key(key)
    scope.wheel.delete(key)
    if active_state(scope, parsed.job_id, value[_HEADER:], retry=True) is not None:
        scope.emit_raw(scope.env.due_topics[value[1]], parsed.job_id, value[_HEADER:])
        scope.env.fire_stats.add(RETRY, scope.now_ms - parsed.fire_ms)
