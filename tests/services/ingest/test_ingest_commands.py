"""Command records: pure functions from a request or a current state to the Job record."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.ingest.commands import (
    IDEMPOTENT_JOB_NAMESPACE,
    cancel_record,
    first_run_at_ms,
    job_id_for_key,
    next_version,
    pause_record,
    request_hash,
    resume_record,
    submit_record,
    trigger_record,
)
from services.ingest.exceptions import JobConflictError
from services.ingest.settings import DefaultRetry
from services.ingest.validation import parse_job_create
from streams.codec import Codec, RecordKind
from streams.records import Job

NOW_US = 1_800_000_000_123_456
NOW_MS = NOW_US // 1000
RUN_AT_MS = 1_801_476_000_000
DEFAULTS = DefaultRetry()


def create(**fields: Any) -> Any:
    base: dict[str, Any] = {"handler": "reports.nightly", "run_at": RUN_AT_MS}
    base.update(fields)
    return parse_job_create({k: v for k, v in base.items() if v is not None})


def submitted(**fields: Any) -> dict[str, Any]:
    return submit_record(create(**fields), job_id="j1", now_us=NOW_US, retry_defaults=DEFAULTS)


def test_job_id_for_key_is_deterministic_per_tenant_and_key() -> None:
    first = job_id_for_key("acme", "key-1")
    assert first == job_id_for_key("acme", "key-1")
    assert uuid.UUID(first).version == 5
    assert first != job_id_for_key("acme", "key-2")
    assert first != job_id_for_key("other", "key-1")
    # the separator keeps ("a", "bc") and ("ab", "c") apart
    assert job_id_for_key("a", "bc") != job_id_for_key("ab", "c")


def test_request_hash_is_canonical() -> None:
    as_iso = create(run_at="2027-02-01T10:00:00Z", labels={"a": "1", "b": "2"})
    as_ms = create(run_at=RUN_AT_MS, labels={"b": "2", "a": "1"})
    assert request_hash(as_iso) == request_hash(as_ms)
    assert request_hash(as_ms) != request_hash(create(run_at=RUN_AT_MS + 1))
    assert request_hash(as_ms) != request_hash(create(handler="reports.weekly"))
    assert len(request_hash(as_ms)) == 64


@pytest.mark.parametrize(
    ("known", "now_us", "expected"),
    [(None, 10, 10), (5, 10, 10), (10, 10, 11), (99, 10, 100)],
)
def test_next_version(known: int | None, now_us: int, expected: int) -> None:
    assert next_version(known, now_us) == expected


def test_submit_record_is_a_valid_job_that_round_trips_the_codec() -> None:
    record = submit_record(
        create(
            payload={"x": 1},
            priority="HIGH",
            timeout_s=1.5,
            retry={"max_attempts": 5, "initial_backoff_s": 0.25},
            overlap="QUEUE_ONE",
            catchup="ALL",
            catchup_window_s=3600,
            jitter_s=2,
            tenant="acme",
            labels={"team": "data"},
        ),
        job_id="j1",
        now_us=NOW_US,
        retry_defaults=DEFAULTS,
        idempotency_key="k",
        hash_of_request="h",
    )
    Job.from_avro(record)
    codec = Codec.from_directory()
    assert codec.decode(RecordKind.JOB, codec.encode(RecordKind.JOB, record)) == record
    assert record == {
        "job_id": "j1",
        "version": NOW_US,
        "status": "SCHEDULED",
        "handler": "reports.nightly",
        "payload": b'{"x":1}',
        "run_at_ms": RUN_AT_MS,
        "cron": None,
        "depends_on": [],
        "priority": "HIGH",
        "timeout_ms": 1500,
        "retry": {
            "max_attempts": 5,
            "initial_backoff_ms": 250,
            "multiplier": 2.0,
            "max_backoff_ms": 300_000,
            "jitter_ratio": 0.1,
        },
        "overlap": "QUEUE_ONE",
        "catchup": "ALL",
        "catchup_window_ms": 3_600_000,
        "jitter_ms": 2000,
        "dag_wait_ms": 86_400_000,
        "tenant": "acme",
        "labels": {"team": "data"},
        "manual_fire_at_ms": None,
        "backfill": None,
        "idempotency_key": "k",
        "request_hash": "h",
        "created_at_ms": NOW_MS,
        "updated_at_ms": NOW_MS,
    }


def test_submit_record_of_a_cron_job() -> None:
    record = submitted(run_at=None, cron={"expression": "0 2 * * *", "timezone": "Asia/Tokyo"})
    assert record["run_at_ms"] is None
    assert record["cron"] == {
        "expression": "0 2 * * *",
        "timezone": "Asia/Tokyo",
        "start_ms": None,
        "end_ms": None,
        "fold_policy": "AUTO",
    }
    # 02:00 in Tokyo is 17:00Z; NOW is 08:00Z
    assert first_run_at_ms(record, NOW_MS) == 1_800_003_600_000 + 8 * 3_600_000


def test_first_run_of_one_off_and_dependent() -> None:
    assert first_run_at_ms(submitted(), NOW_MS) == RUN_AT_MS
    assert first_run_at_ms(submitted(run_at=None, depends_on=["up"]), NOW_MS) is None


def test_cancel_from_scheduled_and_paused_then_repeat() -> None:
    current = submitted()
    cancelled = cancel_record(current, NOW_US + 5)
    assert cancelled is not None
    assert cancelled["status"] == "CANCELLED"
    assert cancelled["version"] == NOW_US + 5
    assert cancelled["created_at_ms"] == current["created_at_ms"]
    unchanged = ("status", "version", "updated_at_ms")
    assert {k: v for k, v in cancelled.items() if k not in unchanged} == {
        k: v for k, v in current.items() if k not in unchanged
    }
    assert cancel_record(cancelled, NOW_US + 9) is None
    paused = pause_record(current, NOW_US + 1)
    assert paused is not None
    assert cancel_record(paused, NOW_US + 2) is not None


def test_version_increases_even_when_the_clock_is_behind_the_known_version() -> None:
    current = {**submitted(), "version": NOW_US + 1_000_000}  # written by a clock ahead
    assert cancel_record(current, NOW_US)["version"] == NOW_US + 1_000_001  # type: ignore[index]


def test_cancel_completed_is_a_conflict() -> None:
    with pytest.raises(JobConflictError, match="completed"):
        cancel_record({**submitted(), "status": "COMPLETED"}, NOW_US)


def test_pause_and_resume() -> None:
    current = submitted()
    paused = pause_record(current, NOW_US + 1)
    assert paused is not None and paused["status"] == "PAUSED"
    assert pause_record(paused, NOW_US + 2) is None
    resumed = resume_record(paused, NOW_US + 3)
    assert resumed is not None and resumed["status"] == "SCHEDULED"
    assert resumed["updated_at_ms"] == (NOW_US + 3) // 1000
    assert resume_record(resumed, NOW_US + 4) is None
    cancelled = cancel_record(current, NOW_US + 1)
    assert cancelled is not None
    with pytest.raises(JobConflictError, match="is CANCELLED; only a SCHEDULED job can be paused"):
        pause_record(cancelled, NOW_US + 2)
    with pytest.raises(JobConflictError, match="is CANCELLED; only a PAUSED job can be resumed"):
        resume_record(cancelled, NOW_US + 2)


def test_trigger_now_sets_a_manual_fire_and_keeps_the_status() -> None:
    paused = pause_record(submitted(), NOW_US + 1)
    assert paused is not None
    triggered = trigger_record(paused, NOW_US + 2_000)
    assert triggered["manual_fire_at_ms"] == (NOW_US + 2_000) // 1000
    assert triggered["status"] == "PAUSED"
    assert triggered["version"] == NOW_US + 2_000
    cancelled = cancel_record(submitted(), NOW_US + 3)
    assert cancelled is not None
    with pytest.raises(JobConflictError, match="CANCELLED"):
        trigger_record(cancelled, NOW_US + 4)
    with pytest.raises(JobConflictError, match="COMPLETED"):
        trigger_record({**submitted(), "status": "COMPLETED"}, NOW_US + 4)


_TEXT = st.characters(exclude_categories=["Cs"])  # what a str can encode to UTF-8


@given(st.text(_TEXT, max_size=70), st.text(_TEXT, max_size=300))
def test_job_id_for_key_is_uuid5_of_tenant_and_key(tenant: str, key: str) -> None:
    """The fast derivation must never change an id: repeats of old requests rely on it."""
    expected = str(uuid.uuid5(IDEMPOTENT_JOB_NAMESPACE, f"{tenant}\x00{key}"))
    assert job_id_for_key(tenant, key) == expected
