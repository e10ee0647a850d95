from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, NamedTuple

from streams import clock
from streams.topics import Priority


class HandlerContext(NamedTuple):
    """One attempt of one execution, as handed to a handler (immutable).

    ``execution_id`` is the idempotency key. Kafka delivery is at-least-once: after a crash
    or rebalance the same attempt may run again, and every retry (``attempt`` + 1) is the
    same execution. A handler makes its effect happen once by keying it on
    ``execution_id``, never on ``attempt`` or the wall clock: send it as the
    ``Idempotency-Key`` of an API call, use it as the primary key of the row it inserts
    (``INSERT ... ON CONFLICT (execution_id) DO NOTHING``), name the output file after it,
    or record it in the same database transaction as the effect and skip the work when it
    is already recorded. The id is deterministic from (``job_id``, ``scheduled_for_ms``), so
    a replayed window yields the same ids and is deduplicated the same way.

    ``deadline_monotonic_s`` (compare with :func:`time.monotonic`) and
    ``deadline_epoch_ms`` (for remote systems) mark when the executor reports the attempt
    TIMED_OUT; a handler should give up, or pass the deadline on, before then.

    A named tuple: its fields are read by name and cannot be assigned, and one is made per
    run for ~0.4 us (a frozen dataclass with slots cost ~1 us: each field set through
    ``object.__setattr__`` or its slot descriptor).
    """

    execution_id: str
    job_id: str
    handler: str
    scheduled_for_ms: int
    attempt: int
    deadline_monotonic_s: float
    deadline_epoch_ms: int
    payload: bytes
    priority: Priority
    worker_id: str

    def remaining_s(self) -> float:
        """Seconds left before the deadline; 0.0 once it has passed."""
        return max(0.0, self.deadline_monotonic_s - time.monotonic())

    @classmethod
    def for_attempt(
        cls,
        *,
        execution_id: str,
        job_id: str,
        handler: str,
        scheduled_for_ms: int,
        attempt: int,
        payload: bytes,
        priority: Priority,
        worker_id: str,
        timeout_s: float,
        now_monotonic_s: float | None = None,
        now_epoch_ms: int | None = None,
    ) -> HandlerContext:
        """A context whose deadline is ``timeout_s`` from now (or from the given clocks),
        in whole milliseconds (a DueEvent's ``timeout_ms``): :meth:`of_run` by keyword."""
        return cls.of_run(
            execution_id,
            job_id,
            handler,
            scheduled_for_ms,
            attempt,
            payload,
            priority,
            worker_id,
            round(timeout_s * 1000),
            time.monotonic() if now_monotonic_s is None else now_monotonic_s,
            clock.now_ms() if now_epoch_ms is None else now_epoch_ms,
        )

    @classmethod
    def of_run(
        cls,
        execution_id: str,
        job_id: str,
        handler: str,
        scheduled_for_ms: int,
        attempt: int,
        payload: bytes,
        priority: Priority,
        worker_id: str,
        timeout_ms: int,
        now_monotonic_s: float,
        now_epoch_ms: int,
    ) -> HandlerContext:
        """The context of one run, its deadline ``timeout_ms`` after the given clocks
        (positional: the executor's hot path builds one per run)."""
        return _new(
            cls,
            (
                execution_id,
                job_id,
                handler,
                scheduled_for_ms,
                attempt,
                now_monotonic_s + timeout_ms / 1000,
                now_epoch_ms + timeout_ms,
                payload,
                priority,
                worker_id,
            ),
        )

    @classmethod
    def from_due_event(
        cls,
        event: Mapping[str, Any],
        *,
        worker_id: str,
        now_monotonic_s: float | None = None,
        now_epoch_ms: int | None = None,
    ) -> HandlerContext:
        """The context of a decoded ``DueEvent`` record; the deadline is its ``timeout_ms``."""
        return cls.for_attempt(
            execution_id=event["execution_id"],
            job_id=event["job_id"],
            handler=event["handler"],
            scheduled_for_ms=event["scheduled_for_ms"],
            attempt=event["attempt"],
            payload=event.get("payload", b""),
            priority=Priority(event.get("priority", Priority.NORMAL.value)),
            worker_id=worker_id,
            timeout_s=event["timeout_ms"] / 1000,
            now_monotonic_s=now_monotonic_s,
            now_epoch_ms=now_epoch_ms,
        )


_new = tuple.__new__  # the tuple without the named tuple's keyword-argument __new__
