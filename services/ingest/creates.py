"""One create, step by step, without I/O: shared by the blocking client and the async API.

A create is planned (:func:`plan_create`: validate, hash, pick the job id), then either
answered from the job that already exists under that id (:func:`answer_repeat`) or turned
into the Job record to write (:func:`encode_create`). The callers do the I/O in between:
look the job id up in the status view, produce the record, wait until it is durable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from services.ingest.commands import (
    first_run_at_ms,
    job_id_for_key,
    new_job_id,
    request_hash,
    submit_record,
)
from services.ingest.exceptions import JobConflictError, JobRequestError
from services.ingest.settings import IngestSettings
from services.ingest.validation import JobCreate, check_limits, parse_job_create
from streams.codec import Codec, RecordKind
from streams.records import JobStatus

JobRequest = JobCreate | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class SubmitReceipt:
    """The answer to a create: ``created`` is False when it repeated an earlier create."""

    job_id: str
    status: str
    next_run_at_ms: int | None
    created: bool = True


@dataclass(frozen=True, slots=True)
class PlannedCreate:
    """A validated create and the job id it writes; ``lookup`` when a repeat is possible.

    ``prebuilt`` holds the encoded record and answer when the bulk encoder built them
    (then ``create`` is None: the request never went through pydantic).
    """

    create: JobCreate | None
    job_id: str
    request_hash: str
    idempotency_key: str | None
    prebuilt: tuple[bytes, SubmitReceipt] | None = None

    @property
    def lookup(self) -> bool:
        """True when the id is derived from the request, so the job may already exist."""
        return self.idempotency_key is not None or (
            self.create is not None and self.create.job_id is not None
        )


def plan_create(job: JobRequest, idempotency_key: str | None) -> PlannedCreate:
    """Validate ``job`` (``JobRequestError`` names bad fields) and pick its job id."""
    create = parse_job_create(job)
    job_id = create.job_id
    if job_id is None:
        job_id = (
            new_job_id()
            if idempotency_key is None
            else job_id_for_key(create.tenant, idempotency_key)
        )
    return PlannedCreate(create, job_id, request_hash(create), idempotency_key)


def answer_repeat(existing: Mapping[str, Any], planned: PlannedCreate) -> SubmitReceipt:
    """The first answer when ``planned`` repeats the create of ``existing``, else a conflict."""
    return _repeat_or_conflict(
        existing["job_id"],
        existing.get("idempotency_key"),
        existing.get("request_hash"),
        lambda: first_run_at_ms(existing, existing["created_at_ms"]),
        planned,
    )


def answer_repeat_of(
    first: PlannedCreate, first_receipt: SubmitReceipt, planned: PlannedCreate
) -> SubmitReceipt:
    """Like :func:`answer_repeat` when ``first`` was written a moment ago (same batch)."""
    return _repeat_or_conflict(
        first.job_id,
        first.idempotency_key,
        first.request_hash,
        lambda: first_receipt.next_run_at_ms,
        planned,
    )


def answer_repeat_of_written(
    job_id: str,
    first_key: str | None,
    first_hash: str | None,
    first_next_run_ms: int | None,
    planned: PlannedCreate,
) -> SubmitReceipt:
    """Like :func:`answer_repeat` for a job whose first create wrote these values."""
    return _repeat_or_conflict(job_id, first_key, first_hash, lambda: first_next_run_ms, planned)


def _repeat_or_conflict(
    job_id: str,
    existing_key: str | None,
    existing_hash: str | None,
    first_run: Callable[[], int | None],
    planned: PlannedCreate,
) -> SubmitReceipt:
    key = planned.idempotency_key
    if existing_key == key:
        if existing_hash == planned.request_hash:
            return SubmitReceipt(job_id, JobStatus.SCHEDULED.value, first_run(), created=False)
        if key is not None:
            raise JobConflictError(
                job_id,
                f"Idempotency-Key {key!r} was already used with another request "
                f"body (job {job_id}); send the original body, or use a new key for a new job",
            )
    raise JobConflictError(
        job_id, f"job {job_id} already exists; choose another job_id or leave it out"
    )


def encode_create(
    planned: PlannedCreate, settings: IngestSettings, codec: Codec, now_us: int
) -> tuple[bytes, SubmitReceipt]:
    """The encoded Job record of a new job and the answer once it is written.

    Raises ``JobRequestError`` for rules that need the clock (run_at too far in the past,
    a schedule without a tick after now).
    """
    if planned.prebuilt is not None:
        return planned.prebuilt
    create = planned.create
    assert create is not None
    check_limits(create, settings, now_us // 1000)
    record = submit_record(
        create,
        job_id=planned.job_id,
        now_us=now_us,
        retry_defaults=settings.default_retry,
        idempotency_key=planned.idempotency_key,
        hash_of_request=planned.request_hash,
    )
    next_run = first_run_at_ms(record, now_us // 1000)
    if create.cron is not None and next_run is None:
        raise JobRequestError.at(
            ["cron"], "the schedule has no tick after now; check expression, start and end"
        )
    value = codec.encode(RecordKind.JOB, record)
    return value, SubmitReceipt(planned.job_id, JobStatus.SCHEDULED.value, next_run)
