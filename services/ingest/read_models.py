"""The bodies the read, replay and backfill routes answer, as OpenAPI documents them.

The routes build plain dicts (``services.ingest.presenters``); these models describe them
for ``services.ingest.openapi``, and the schemathesis test checks every answer against them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Attempt(_Open):
    """One attempt of an execution."""

    attempt: int
    status: str
    trigger: str
    reason: str | None
    error: str | None
    worker_id: str | None
    started_at: str | None
    finished_at: str | None
    next_attempt_at: str | None = Field(description="When the next attempt fires (a retry)")
    recorded_at: str | None


class Execution(Attempt):
    """One execution: its newest attempt's fields and every attempt kept, oldest first (a
    replay after a dead letter starts a new round: attempt 1 again, trigger REPLAY)."""

    execution_id: str
    job_id: str | None
    scheduled_for: str | None
    attempts: list[Attempt]


class LastExecution(Attempt):
    """A job's newest execution (newest attempt's fields)."""

    execution_id: str
    scheduled_for: str | None


class JobSummary(_Open):
    """One job of ``GET /api/jobs``; ``GET /api/jobs/{id}`` has the rest."""

    job_id: str
    type: str = Field(description="one_off, recurring or dependent")
    status: str = Field(description="SCHEDULED, PAUSED, CANCELLED or COMPLETED")
    outcome: str | None = Field(description="A COMPLETED one-off's final execution status")
    handler: str
    tenant: str
    labels: dict[str, str]
    run_at: str | None
    cron: dict[str, Any] | None
    depends_on: list[str]
    next_run_at: str | None
    last_execution: LastExecution | None
    updated_at: str


class JobPage(BaseModel):
    """A page of jobs in job id order; pass ``next_cursor`` for the next (None: the end).
    A page may hold fewer than ``limit`` items and still have a next one (its scan was
    bounded)."""

    items: list[JobSummary]
    next_cursor: str | None


class ExecutionPage(BaseModel):
    """A page of a job's executions, newest first."""

    items: list[Execution]
    next_cursor: str | None


class Replayed(BaseModel):
    """The replay written to the due topic (it runs like any due execution)."""

    execution_id: str
    job_id: str
    attempt: int
    trigger: str
    fire_at: str | None


class BackfillTick(BaseModel):
    """One tick of a dry run."""

    at: str | None
    at_ms: int


class BackfillAnswer(BaseModel):
    """What a backfill counted (and, for a dry run, listed) or wrote."""

    job_id: str
    from_: str | None = Field(alias="from")
    to: str | None
    rate: int
    ticks: int = Field(description="How many ticks the window holds")
    dry_run: bool
    written: bool = Field(description="True when the backfill was written (not a dry run)")
    estimated_duration_s: float = Field(description="ticks / rate")
    tick_times: list[BackfillTick] | None = Field(default=None, description="Dry run only")
