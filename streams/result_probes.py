"""ExecutionResult probe records for the hand-written result encoder and reader.

:class:`~services.executor.result_bytes.ResultEncoder` and
:class:`~streams.result_reader.ResultReader` each prove at start-up that they agree with the
codec on these records; here they are written once, with the two deliberate differences as
parameters: how wide a varint the caller handles, and whether ``attempt`` reaches the Avro
int's largest value.
"""

from __future__ import annotations

from typing import Any

from streams.records import ExecutionStatus, Trigger

_INT_MAX = 2**31 - 1
_LONG_BOUND = 2**63  # Avro longs lie in [-2**63, 2**63)


def result_probes(max_varint_bytes: int, int_max_attempts: bool = False) -> list[dict[str, Any]]:
    """One result per status and trigger, in shapes other than the executors' common one.

    Each optional field null and not, empty, short and long (two-byte length) strings, short
    varints and the widest ones of at most ``max_varint_bytes`` bytes (the longs of largest
    magnitude that fit, capped at Avro's 10). With ``int_max_attempts``, every other record's
    ``attempt`` is near 2**31 - 1.
    """
    # A zig-zag varint of n bytes holds 7n bits: values of magnitude up to 2**(7n - 1).
    bound = min(2 ** (7 * max_varint_bytes - 1), _LONG_BOUND)
    records = []
    for i, status in enumerate(ExecutionStatus):
        for j, trigger in enumerate(Trigger):
            some = (i + j) % 2 == 0
            records.append(
                {
                    "execution_id": f"jöb-{i}@{-(10**12) - j}",
                    "job_id": f"jöb-{i}" * (j + 1) * 20,
                    "scheduled_for_ms": -(10**12) - j if some else bound // 2 + i,
                    "attempt": _INT_MAX - i if int_max_attempts and not some else i * 100 + j - 3,
                    "status": status.value,
                    "reason": "r" * (i * 30) if some else None,
                    "error": None if some else "e€" * (j * 50),
                    "worker_id": "w" if some else None,
                    "started_at_ms": 1_780_000_000_123 + i if some else None,
                    "finished_at_ms": None if some else -1,
                    "next_attempt_at_ms": 63 + j if some else None,
                    "trigger": trigger.value,
                    "job_version": bound - 1 if some else -bound,
                    "recorded_at_ms": 64 * j + i,
                }
            )
    return records
