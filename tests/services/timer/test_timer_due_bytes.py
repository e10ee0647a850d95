"""Spliced DueEvent bytes (a stored prefix plus a per-instant tail) equal the codec's bytes."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from services.timer.due_bytes import DueEventBytes, due_event_record
from streams.codec import Codec, RecordKind
from streams.identity import execution_id

CODEC = Codec.from_directory()
BYTES = DueEventBytes(CODEC)
longs = st.integers(-(2**63), 2**63 - 1)
ints = st.integers(-(2**31), 2**31 - 1)
doubles = st.floats(allow_nan=False)

jobs = st.fixed_dictionaries(
    {
        "job_id": st.text(),
        "version": longs,
        "handler": st.text(),
        "payload": st.binary(),
        "timeout_ms": longs,
        "priority": st.sampled_from(["HIGH", "NORMAL", "LOW"]),
        "retry": st.fixed_dictionaries(
            {
                "max_attempts": ints,
                "initial_backoff_ms": longs,
                "multiplier": doubles,
                "max_backoff_ms": longs,
                "jitter_ratio": doubles,
            }
        ),
        "tenant": st.text(),
    }
)


def test_both_encoders_are_proven_at_start_up() -> None:
    assert BYTES.spliceable and BYTES.generated


@given(
    job=jobs,
    tick=longs,
    fire_at=longs,
    emitted=longs,
    trigger=st.sampled_from(["SCHEDULE", "MANUAL", "RETRY", "REPLAY", "DAG", "BACKFILL"]),
    execution_id=st.text(),
)
def test_spliced_bytes_equal_the_codec_bytes(
    job: dict[str, Any], tick: int, fire_at: int, emitted: int, trigger: str, execution_id: str
) -> None:
    record = due_event_record(job, tick, fire_at, trigger, emitted, execution_id)
    expected = CODEC.encode(RecordKind.DUE_EVENT, record)
    assert BYTES.prefix(record) + BYTES.tail(emitted) == expected
    assert CODEC.decode(RecordKind.DUE_EVENT, expected, check=False) == record


@given(
    job=jobs,
    tick=longs,
    fire_at=longs,
    trigger=st.sampled_from(["SCHEDULE", "MANUAL", "RETRY", "REPLAY", "DAG", "BACKFILL"]),
)
def test_first_attempt_prefix_equals_the_prefix_of_its_record(
    job: dict[str, Any], tick: int, fire_at: int, trigger: str
) -> None:
    """Built from the job without the record dict, twice (the second from the part cache)."""
    record = due_event_record(job, tick, fire_at, trigger, 0, execution_id(job["job_id"], tick))
    for _ in range(2):
        assert BYTES.first_attempt_prefix(job, tick, fire_at, trigger) == BYTES.prefix(record)
    assert BYTES.prefix(record) == CODEC.encode(RecordKind.DUE_EVENT, record)[:-2]


def test_large_payloads_are_spliced_without_the_part_cache() -> None:
    job = {
        "job_id": "big",
        "version": 1,
        "handler": "h",
        "payload": bytes(range(256)) * 4,
        "timeout_ms": 1,
        "priority": "LOW",
        "retry": {
            "max_attempts": 1,
            "initial_backoff_ms": 1,
            "multiplier": -0.0,
            "max_backoff_ms": 1,
            "jitter_ratio": 0.0,
        },
        "tenant": "t",
    }
    record = due_event_record(job, 5, 6, "MANUAL", 7, execution_id("big", 5))
    expected = CODEC.encode(RecordKind.DUE_EVENT, record)
    assert BYTES.first_attempt_prefix(job, 5, 6, "MANUAL") + BYTES.tail(7) == expected
