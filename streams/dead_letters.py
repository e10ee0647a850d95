"""The dead letter of an input record that cannot be used: its raw bytes, where it came from, why.

Every consumer of kafkron's topics routes a record it cannot decode, or that breaks a bound
(``schemas/bounds.json``), to ``dlq`` this way and goes on with the next record.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

from streams.codec import Codec, RecordKind
from streams.exceptions import DecodeError

log = logging.getLogger(__name__)


def undecodable_dead_letter(
    codec: Codec,
    reason: str,
    topic: str,
    partition: int,
    offset: int | None,
    key: bytes | None,
    value: bytes | None,
    dead_at_ms: int,
) -> bytes:
    """The encoded UNDECODABLE DeadLetter of one input record."""
    record = {
        "kind": "UNDECODABLE",
        "reason": reason,
        "source_topic": topic,
        "source_partition": partition,
        "source_offset": offset,
        "raw_key": key,
        "raw_value": value,
        "dead_at_ms": dead_at_ms,
    }
    return codec.encode(RecordKind.DEAD_LETTER, record)


def value_of(value: bytes | None) -> bytes:
    """``value``; raises DecodeError for a null value (a tombstone where none is expected)."""
    if value is None:
        raise DecodeError("record has a null value where a kafkron record is expected")
    return value


def check_key(key: bytes, job_id: str) -> None:
    """Raise DecodeError when a record's Kafka ``key`` is not its job id."""
    if key != job_id.encode():
        raise DecodeError(
            f"record key {key!r} is not its job id {job_id!r}; producers must key every record "
            "by job id so that a job's records share one partition"
        )


def route_to_dlq(
    codec: Codec,
    emit: Callable[[str, bytes | None, bytes | None], None],
    counts: Counter[str],
    dlq_topic: str,
    reason: str,
    source: tuple[str, int, int | None, bytes | None, bytes | None],
    dead_at_ms: int,
) -> None:
    """Emit the UNDECODABLE dead letter of the input record ``source`` (topic, partition,
    offset, key, value) with ``emit``; log it once (never its value) and count it by topic."""
    topic, partition, offset, key, value = source
    log.warning(
        "%s[%d]@%s dead-lettered, not a usable record: %s", topic, partition, offset, reason,
        extra={"topic": topic, "partition": partition, "offset": offset, "reason": reason},
    )  # fmt: skip
    counts[topic] += 1
    data = undecodable_dead_letter(codec, reason, topic, partition, offset, key, value, dead_at_ms)
    emit(dlq_topic, None, data)
