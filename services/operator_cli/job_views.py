"""``kafkron list | show | history``: jobs and their executions as the API's status view
knows them, as tables (``--json``: the API's bodies, pages joined)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import click

from services.operator_cli.config import Target
from services.operator_cli.job_actions import job_path, parse_labels
from services.operator_cli.options import json_option, target_options
from services.operator_cli.output import console, fields, human_time, now_ms, print_json, table
from services.operator_cli.rest import ApiClient
from streams.records import JobStatus

MAX_PAGE = 500


def read_pages(
    api: ApiClient, path: str, params: dict[str, Any], limit: int, every: bool
) -> dict[str, Any]:
    """``{"items", "next_cursor"}``: one page of ``limit`` items, or every page (``every``)."""
    items: list[Any] = []
    cursor = params.pop("cursor", None)
    while True:
        page = api.get(path, {**params, "cursor": cursor, "limit": limit})
        items.extend(page.get("items", []))
        cursor = page.get("next_cursor")
        if not every or not cursor:
            return {"items": items, "next_cursor": cursor}


def _paging(command: Any) -> Any:
    options = [
        click.option(
            "--limit",
            type=click.IntRange(1, MAX_PAGE),
            default=50,
            show_default=True,
            help="items per page",
        ),
        click.option("--cursor", help="start at this page (the next_cursor of another)"),
        click.option("--all", "every", is_flag=True, help="follow next_cursor to the last page"),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _more(listing: dict[str, Any]) -> None:
    if listing["next_cursor"]:
        click.echo(f"more: --cursor {listing['next_cursor']}")


@click.command(name="list")
@click.option("--status", type=click.Choice([s.value for s in JobStatus], case_sensitive=False))
@click.option("--tenant")
@click.option("--label", "labels", multiple=True, help="KEY=VALUE (repeatable: all must match)")
@click.option("--handler")
@_paging
@target_options(api=True)
@json_option
def list_jobs(
    target: Target,
    as_json: bool,
    status: str | None,
    tenant: str | None,
    labels: tuple[str, ...],
    handler: str | None,
    limit: int,
    cursor: str | None,
    every: bool,
) -> int:
    """List jobs, filtered by status, tenant, labels and handler, a page at a time."""
    label = [f"{k}:{v}" for k, v in parse_labels(labels).items()] or None
    params = {
        "status": status and status.upper(),
        "tenant": tenant,
        "label": label,
        "handler": handler,
        "cursor": cursor,
    }
    with ApiClient(target.api_url, token=target.token) as api:
        listing = read_pages(api, "/api/jobs", params, limit, every)
    if as_json:
        print_json(listing)
        return 0
    now = now_ms()
    rows = [
        (
            j.get("job_id"),
            j.get("handler"),
            j.get("type"),
            status_text(j),
            human_time(j.get("next_run_at"), now),
            last_run_text(j.get("last_execution"), now),
            j.get("tenant"),
        )
        for j in listing["items"]
    ]
    headers = ["JOB", "HANDLER", "TYPE", "STATUS", "NEXT RUN", "LAST RUN", "TENANT"]
    console().print(table(headers, rows))
    click.echo(f"{len(rows)} job(s)")
    _more(listing)
    return 0


def status_text(job: dict[str, Any]) -> str:
    """``SCHEDULED``, or ``COMPLETED (DEAD_LETTER)`` with a one-off's outcome."""
    outcome = job.get("outcome")
    return f"{job.get('status')} ({outcome})" if outcome else str(job.get("status"))


def last_run_text(execution: dict[str, Any] | None, now: int) -> str | None:
    """The newest execution's status and when it was recorded."""
    if not execution:
        return None
    return f"{execution.get('status')} {human_time(execution.get('recorded_at'), now)}"


def schedule_text(job: dict[str, Any]) -> str:
    """The job's schedule in one line."""
    cron = job.get("cron")
    if cron:
        return f"cron {cron['expression']} ({cron['timezone']})"
    if job.get("run_at"):
        return f"once at {job['run_at']}"
    return f"after {', '.join(job.get('depends_on') or [])}"


def _execution_rows(executions: list[dict[str, Any]], now: int) -> list[tuple[Any, ...]]:
    return [
        (
            e.get("execution_id"),
            human_time(e.get("scheduled_for"), now),
            e.get("attempt"),
            e.get("status"),
            e.get("trigger"),
            e.get("worker_id"),
            human_time(e.get("finished_at"), now),
            e.get("error") or e.get("reason"),
        )
        for e in executions
    ]


_EXECUTION_HEADERS = [
    "EXECUTION",
    "SCHEDULED FOR",
    "ATTEMPT",
    "STATUS",
    "TRIGGER",
    "WORKER",
    "FINISHED",
    "ERROR",
]


@click.command()
@click.argument("job_id")
@target_options(api=True)
@json_option
def show(target: Target, as_json: bool, job_id: str) -> int:
    """Show one job: definition, status, next run and recent executions."""
    with ApiClient(target.api_url, token=target.token) as api:
        job: dict[str, Any] = api.get(job_path(job_id))
    if as_json:
        print_json(job)
        return 0
    now = now_ms()
    out = console()
    labels = ", ".join(f"{k}={v}" for k, v in (job.get("labels") or {}).items())
    out.print(
        fields(
            [
                ("job", job.get("job_id")),
                ("status", status_text(job)),
                ("handler", job.get("handler")),
                ("schedule", schedule_text(job)),
                ("next run", human_time(job.get("next_run_at"), now)),
                ("priority", job.get("priority")),
                ("tenant", job.get("tenant")),
                ("labels", labels or None),
                ("running", ", ".join(job.get("running_executions") or []) or None),
                ("updated", human_time(job.get("updated_at"), now)),
            ]
        )
    )
    executions = job.get("recent_executions") or []
    click.echo(f"\nrecent executions ({len(executions)}):")
    out.print(table(_EXECUTION_HEADERS, _execution_rows(executions, now)))
    return 0


@click.command()
@click.argument("job_id", required=False)
@click.option("--execution", "execution_id", help="every attempt of this one execution instead")
@_paging
@target_options(api=True)
@json_option
def history(
    target: Target,
    as_json: bool,
    job_id: str | None,
    execution_id: str | None,
    limit: int,
    cursor: str | None,
    every: bool,
) -> int:
    """A job's executions, newest first; with --execution, every attempt of one execution."""
    if (job_id is None) == (execution_id is None):
        raise click.UsageError("give a JOB_ID or --execution EXECUTION_ID (one of them)")
    with ApiClient(target.api_url, token=target.token) as api:
        if execution_id is not None:
            execution = api.get(f"/api/executions/{quote(execution_id, safe='')}")
            return _print_attempts(execution, as_json)
        assert job_id is not None
        path = job_path(job_id, "executions")
        listing = read_pages(api, path, {"cursor": cursor}, limit, every)
    if as_json:
        print_json(listing)
        return 0
    console().print(table(_EXECUTION_HEADERS, _execution_rows(listing["items"], now_ms())))
    click.echo(f"{len(listing['items'])} execution(s)")
    _more(listing)
    return 0


def _print_attempts(execution: dict[str, Any], as_json: bool) -> int:
    if as_json:
        print_json(execution)
        return 0
    now = now_ms()
    attempts = execution.get("attempts") or []
    click.echo(f"execution {execution.get('execution_id')}: {execution.get('status')}")
    rows = [
        (
            a.get("attempt"),
            a.get("status"),
            human_time(a.get("started_at"), now),
            human_time(a.get("finished_at"), now),
            a.get("worker_id"),
            human_time(a.get("next_attempt_at"), now),
            a.get("error") or a.get("reason"),
        )
        for a in attempts
    ]
    headers = ["ATTEMPT", "STATUS", "STARTED", "FINISHED", "WORKER", "NEXT ATTEMPT", "ERROR"]
    console().print(table(headers, rows))
    return 0


COMMANDS = [list_jobs, show, history]
