"""When to retry a failed attempt: exponential backoff with deterministic jitter."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schemas import field_defaults

_DEFAULTS = field_defaults("kafkron.RetryPolicy")  # the schema's, written nowhere else


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A job's retry policy: the ``RetryPolicy`` record of ``DueEvent``, with its defaults."""

    max_attempts: int = _DEFAULTS["max_attempts"]
    initial_backoff_ms: int = _DEFAULTS["initial_backoff_ms"]
    multiplier: float = _DEFAULTS["multiplier"]
    max_backoff_ms: int = _DEFAULTS["max_backoff_ms"]
    jitter_ratio: float = _DEFAULTS["jitter_ratio"]

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> RetryPolicy:
        """The policy of a decoded Avro ``RetryPolicy`` record (missing fields: defaults)."""
        defaults = cls()
        return cls(
            max_attempts=int(record.get("max_attempts", defaults.max_attempts)),
            initial_backoff_ms=int(record.get("initial_backoff_ms", defaults.initial_backoff_ms)),
            multiplier=float(record.get("multiplier", defaults.multiplier)),
            max_backoff_ms=int(record.get("max_backoff_ms", defaults.max_backoff_ms)),
            jitter_ratio=float(record.get("jitter_ratio", defaults.jitter_ratio)),
        )


def should_retry(policy: RetryPolicy, attempt: int, retryable: bool) -> bool:
    """True when the failed ``attempt`` (1-based) may be followed by another one."""
    return retryable and attempt < policy.max_attempts


def jitter_unit(execution_id: str, attempt: int) -> float:
    """A number in [-1, 1) fixed by (execution_id, attempt): the same on every executor."""
    digest = hashlib.blake2b(
        f"{execution_id}\x00{attempt}".encode(), digest_size=8, person=b"kafkron-backoff"
    ).digest()
    return int.from_bytes(digest, "big") / 2**63 - 1.0


def base_delay_ms(policy: RetryPolicy, attempt: int) -> float:
    """``min(max_backoff_ms, initial_backoff_ms * multiplier ** (attempt - 1))``, no jitter."""
    cap = max(0.0, float(policy.max_backoff_ms))
    initial = max(0.0, float(policy.initial_backoff_ms))
    if initial == 0.0:
        return 0.0
    try:
        raw = initial * max(0.0, policy.multiplier) ** max(0, attempt - 1)
    except OverflowError:
        return cap
    return cap if math.isnan(raw) else min(cap, raw)


def retry_delay_ms(
    policy: RetryPolicy, attempt: int, execution_id: str, *, retry_after_s: float | None = None
) -> int:
    """Milliseconds to wait after the failed ``attempt`` (1-based) before the next one.

    The capped exponential delay, scaled by ``1 ± jitter_ratio`` (ratio clamped to [0, 1])
    with a jitter fixed by (execution_id, attempt), so a re-processed failure schedules the
    same retry time. A handler's ``retry_after_s`` raises the delay, up to
    ``max_backoff_ms``.
    """
    ratio = min(1.0, max(0.0, policy.jitter_ratio))
    delay = base_delay_ms(policy, attempt) * (1.0 + ratio * jitter_unit(execution_id, attempt))
    if retry_after_s is not None and retry_after_s > 0:
        delay = max(delay, min(retry_after_s * 1000.0, float(policy.max_backoff_ms)))
    return max(0, round(delay))
