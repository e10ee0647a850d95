"""Backfill requests: a recurring job's ticks in a past (or any) window, run now.

Pure: :func:`plan_backfill` checks a request against the job and counts (and for a dry run
lists) the window's ticks, with the job's own schedule (``streams.schedule``: its time zone,
DST folds, start and end), the ticks the timer will emit. Writing the request is one Job
record whose ``backfill`` asks for it (:func:`services.ingest.commands.backfill_record`);
the timer emits each tick as an execution with trigger BACKFILL and the tick's own
execution id, so the same window backfilled twice runs nothing twice.

Bounds: ``from <= to``; at most ``max_ticks`` ticks per request (settings'
``max_backfill_ticks``; counting costs ~50 us a tick), a wider window is refused naming
``to`` and where it may end; ``rate`` (the record's ``per_s``) 1..10,000 ticks a second.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.ingest.cron import cron_spec
from services.ingest.exceptions import JobConflictError, JobRequestError
from services.ingest.validation import EpochMs
from streams.records import JobStatus
from streams.schedule import ticks_between

MAX_PER_S = 10_000
"""The schema's bound of ``Backfill.per_s`` (schemas/job.v2.avsc)."""
DEFAULT_PER_S = 50


class BackfillRequest(BaseModel):
    """``POST /api/jobs/{job_id}/backfill``: run the job's ticks in [from, to] now."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    from_ms: EpochMs = Field(alias="from", description="The window's first instant (inclusive)")
    to_ms: EpochMs = Field(alias="to", description="The window's last instant (inclusive)")
    rate: int = Field(
        default=DEFAULT_PER_S, ge=1, le=MAX_PER_S, description="Ticks run per second, at most"
    )
    dry_run: bool = Field(default=False, description="List the ticks; write nothing")


def parse_backfill(body: Mapping[str, Any]) -> BackfillRequest:
    """The request of ``body``; raises ``JobRequestError`` naming the fields."""
    try:
        return BackfillRequest.model_validate(body)
    except ValidationError as exc:
        errors = [
            {"type": e["type"], "loc": list(e["loc"]), "msg": e["msg"], "input": e["input"]}
            for e in exc.errors()
        ]
        raise JobRequestError(errors) from None


@dataclass(frozen=True, slots=True)
class BackfillPlan:
    """A checked request: how many ticks the window holds, and (dry run) which."""

    job_id: str
    from_ms: int
    to_ms: int
    per_s: int
    tick_count: int
    ticks: tuple[int, ...] | None
    written: bool = False


def plan_backfill(job: Mapping[str, Any], request: BackfillRequest, max_ticks: int) -> BackfillPlan:
    """Check ``request`` against the job and count its ticks.

    Raises ``JobRequestError`` at ``job_id`` (not a recurring job), ``to`` (before ``from``,
    or a window of more than ``max_ticks`` ticks), and ``JobConflictError`` for a job that
    is CANCELLED or COMPLETED (the timer acts on no backfill of those).
    """
    job_id, cron = job["job_id"], job.get("cron")
    if cron is None:
        kind = "a one-off (run_at)" if job.get("run_at_ms") is not None else "a DAG job"
        raise JobRequestError.at(
            ["job_id"],
            f"job {job_id} is {kind}: only a recurring job (cron) has ticks to backfill",
            job_id,
        )
    if job["status"] in (JobStatus.CANCELLED, JobStatus.COMPLETED):
        raise JobConflictError(
            job_id, f"job {job_id} is {job['status']}; the timer runs no backfill of it"
        )
    if request.from_ms > request.to_ms:
        raise JobRequestError.at(
            ["to"], "to is before from: give a window with from <= to", request.to_ms
        )
    spec = cron_spec(
        cron["expression"],
        cron["timezone"],
        cron.get("start_ms"),
        cron.get("end_ms"),
        str(cron["fold_policy"]),
    )
    ticks = ticks_between(spec, request.from_ms - 1, request.to_ms, max_ticks + 1)
    if len(ticks) > max_ticks:
        raise JobRequestError.at(
            ["to"],
            f"the window holds more than {max_ticks} ticks of {cron['expression']!r}; end it "
            f"at {ticks[max_ticks - 1]} (epoch ms) or earlier and backfill the rest in "
            "another request",
            request.to_ms,
        )
    return BackfillPlan(
        job_id,
        request.from_ms,
        request.to_ms,
        request.rate,
        len(ticks),
        tuple(ticks) if request.dry_run else None,
    )
