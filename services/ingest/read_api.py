"""The read routes of the REST API: lists of jobs, execution histories, and replays.

Everything comes from the :class:`~services.ingest.view.StatusView` (RocksDB), never from
a topic scan; each page is bounded (see :mod:`services.ingest.job_index`). Bad parameters
answer 422 naming them (``loc`` ``[query, <name>]`` or ``[path, <name>]``); unknown ids
answer 404 naming the id. A replay is produced by the executor's dead-letter tool
(``streams.dlq.replay``, one code path with ``kafkron dlq replay``) once the view
knows the dead letter, so an unknown id never costs a read of the ``dlq`` topic.
"""

from __future__ import annotations

import re
import time
from typing import Annotated, Any

from fastapi import FastAPI, Path, Query, Request, Response

from services.ingest.access import Caller, CallerOf
from services.ingest.client import KafkronClient
from services.ingest.create_lane import unprocessable
from services.ingest.exceptions import (
    ExecutionNotFoundError,
    JobNotFoundError,
    JobRequestError,
    ViewNotReadyError,
)
from services.ingest.job_index import InvalidCursorError, JobFilter
from services.ingest.json_bytes import json_bytes
from services.ingest.presenters import execution_body, iso
from services.ingest.settings import IngestSettings
from services.ingest.validation import JOB_ID_PATTERN, LABEL_KEY_PATTERN, TENANT_PATTERN
from services.ingest.view import StatusView
from streams.codec import Codec
from streams.dlq import replay
from streams.exceptions import KafkronError
from streams.identity import HANDLER_NAME_PATTERN
from streams.records import JobStatus

MAX_PAGE = 500
_LABEL_KEY = re.compile(LABEL_KEY_PATTERN)


def invalid(where: str, name: str, message: str, value: Any) -> Response:
    """A 422 with one error at ``[where, name]``, shaped like FastAPI's own."""
    error = JobRequestError.at([name], message, value).errors
    body = json_bytes(unprocessable(error, where))
    return Response(body, status_code=422, media_type="application/json")


def view_of(request: Request) -> StatusView:
    view: StatusView = request.app.state.view
    return view


def client_of(request: Request) -> KafkronClient:
    client: KafkronClient = request.app.state.client
    return client


def known_job(request: Request, job_id: str, timeout_s: float, caller: Caller) -> dict[str, Any]:
    """The job as the view knows it, after it read this instance's writes of it; another
    tenant's job is not known to ``caller`` (the same 404 as a missing one)."""
    view = view_of(request)
    # Read-your-writes for commands this instance wrote (no broker round trip).
    written = client_of(request).written_through(job_id)
    if written and not view.wait_for_offsets(written, timeout_s):
        raise ViewNotReadyError(f"the status view has not yet read job {job_id}'s last write")
    job = view.job(job_id)
    if job is None or not caller.sees_job(job):
        raise JobNotFoundError(job_id)
    return job


def owned_job(request: Request, job_id: str, timeout_s: float, caller: Caller) -> None:
    """Before a command on ``job_id``: JobNotFoundError when it is another tenant's (the
    command itself answers for a missing job, and the admin's is not looked up twice)."""
    if caller.tenant is not None:
        known_job(request, job_id, timeout_s, caller)


def _labels(values: list[str]) -> tuple[tuple[str, str], ...] | str:
    """The ``label`` parameters as (key, value) pairs, or the message of a bad one."""
    pairs = []
    for value in values:
        key, colon, label_value = value.partition(":")
        if not colon or not _LABEL_KEY.fullmatch(key):
            return (
                f"label {value!r} is not key:value with a label key ({LABEL_KEY_PATTERN}); "
                "e.g. label=team:data"
            )
        pairs.append((key, label_value))
    return tuple(pairs)


def json_answer(body: Any) -> Response:
    """``body`` as JSON by orjson: FastAPI's ``jsonable_encoder`` would walk every value of
    a page first (about as long again as building it)."""
    return Response(json_bytes(body), media_type="application/json")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def install_reads(app: FastAPI, settings: IngestSettings, codec: Codec) -> None:
    """Add the read routes and the replay route to ``app``."""

    @app.get("/api/jobs", response_model=None)
    async def list_jobs(
        request: Request,
        caller: CallerOf,
        status: JobStatus | None = None,
        tenant: Annotated[str | None, Query(pattern=TENANT_PATTERN)] = None,
        handler: Annotated[str | None, Query(pattern=HANDLER_NAME_PATTERN, max_length=200)] = None,
        label: Annotated[list[str] | None, Query(max_length=16)] = None,
        id_prefix: Annotated[str | None, Query(pattern=JOB_ID_PATTERN)] = None,
        cursor: Annotated[str | None, Query(max_length=600)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    ) -> dict[str, Any] | Response:
        """Jobs in job id order, filtered (all given filters apply; ``label`` may repeat;
        ``id_prefix``: ids starting with it), cursor-paginated; stable under concurrent
        writes."""
        # Runs in the event loop, not the threadpool: a page is about 1 ms of CPU, mostly
        # Python holding the GIL, so a thread adds a hop and no parallelism; its work is
        # bounded (job_index.PAGE_BUDGET keys read).
        labels = _labels(label or [])
        if isinstance(labels, str):
            return invalid("query", "label", labels, label)
        if caller.tenant is not None and tenant not in (None, caller.tenant):
            return json_answer({"items": [], "next_cursor": None})  # another tenant's: none
        tenant = caller.tenant or tenant
        where = JobFilter(status and status.value, tenant, handler, labels, id_prefix or "")
        try:
            items, next_cursor = view_of(request).jobs_json(where, cursor, limit, now_ms())
        except InvalidCursorError as exc:
            return invalid("query", "cursor", str(exc), cursor)
        # Each item is pre-rendered JSON (services.ingest.list_rows): the page is a join.
        body = b'{"items":[%s],"next_cursor":%s}' % (b",".join(items), json_bytes(next_cursor))
        return Response(body, media_type="application/json")

    @app.get("/api/jobs/{job_id}/executions", response_model=None)
    def job_executions(
        job_id: str,
        request: Request,
        caller: CallerOf,
        cursor: Annotated[str | None, Query(max_length=600)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
    ) -> dict[str, Any] | Response:
        """The job's kept executions, newest first, each with every attempt."""
        known_job(request, job_id, settings.view_catch_up_timeout_s, caller)
        try:
            found, next_cursor = view_of(request).execution_page(job_id, cursor, limit)
        except InvalidCursorError as exc:
            return invalid("query", "cursor", str(exc), cursor)
        return json_answer(
            {"items": [execution_body(e) for e in found], "next_cursor": next_cursor}
        )

    @app.get("/api/executions/{execution_id}")
    def get_execution(
        request: Request,
        caller: CallerOf,
        execution_id: Annotated[str, Path(max_length=200)],
    ) -> dict[str, Any]:
        """One execution: its newest state and every attempt kept."""
        view = view_of(request)
        found = view.execution(execution_id)
        if found is None:
            raise ExecutionNotFoundError(execution_id)
        if caller.tenant is not None and not caller.sees_job(view.job(found["job_id"])):
            raise ExecutionNotFoundError(execution_id)  # another tenant's: as if missing
        return execution_body(found)

    @app.post("/api/dead-letter/{execution_id}/replay")
    def replay_dead_letter(
        request: Request,
        caller: CallerOf,
        execution_id: Annotated[str, Path(max_length=200)],
    ) -> dict[str, Any]:
        """Run a dead execution again: attempt 1, trigger REPLAY, same execution id."""
        dead = view_of(request).dead_letter_of(execution_id)
        if dead is None or not caller.sees(dead.get("tenant")):
            raise ExecutionNotFoundError(execution_id, "dead letter of execution")
        try:
            event = replay(settings.kafka, codec, execution_id)
        except KafkronError as exc:
            if exc.retryable or exc.__class__ is not KafkronError:
                raise
            raise ExecutionNotFoundError(execution_id, "dead letter of execution") from exc
        return {
            "execution_id": event["execution_id"],
            "job_id": event["job_id"],
            "attempt": event["attempt"],
            "trigger": event["trigger"],
            "fire_at": iso(event["fire_at_ms"]),
        }
