"""The REST API of kafkron (seed design 002): create, inspect and command jobs.

Writes go through :class:`~services.ingest.client.KafkronClient`; reads come from the
:class:`~services.ingest.view.StatusView`, never from topics. Validation errors answer 422
in FastAPI's shape (``detail: [{loc, msg, type}]``, ``loc`` naming the field).

Creates (``POST /api/jobs`` and ``POST /api/jobs/batch``) are the hot path: they run on the
event loop (:mod:`services.ingest.async_creates`, no thread per request, concurrent creates
share the producer's batches, each answers once its record is durable) and are served by a
pure ASGI middleware (:mod:`services.ingest.create_lane`) documented in OpenAPI by
:mod:`services.ingest.openapi`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import orjson
from fastapi import FastAPI, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from services.ingest.access import BearerAuth, Caller, CallerOf, tenant_reads
from services.ingest.api_docs import install_api_docs
from services.ingest.async_creates import AsyncCreates
from services.ingest.backfill import BackfillPlan, parse_backfill
from services.ingest.client import CommandReceipt, KafkronClient
from services.ingest.create_lane import CreateLane, unprocessable
from services.ingest.dag_runs import ViewReads, dag_run_body, recent_runs, run_nodes
from services.ingest.dashboard import install_dashboard
from services.ingest.exceptions import (
    ExecutionNotFoundError,
    JobConflictError,
    JobNotFoundError,
    JobRequestError,
    ViewNotReadyError,
)
from services.ingest.json_bytes import json_bytes
from services.ingest.openapi import BACKFILL_BODY, document_creates
from services.ingest.presenters import dead_letter_body, iso, job_body
from services.ingest.read_api import (
    client_of,
    install_reads,
    json_answer,
    known_job,
    owned_job,
    view_of,
)
from services.ingest.settings import IngestSettings
from services.ingest.validation import JOB_ID_PATTERN, MAX_EPOCH_MS
from services.ingest.view import StatusView
from services.ingest.view_store import InvalidCursorError
from streams.api_tokens import TokenTable
from streams.codec import Codec
from streams.exceptions import KafkaDeliveryError
from streams.kafka.connection import broker_connection_log


def _unprocessable(errors: list[dict[str, Any]], prefix: str) -> Response:
    body = json_bytes(unprocessable(errors, prefix))
    return Response(body, status_code=422, media_type="application/json")


def _invalid(prefix: str, loc: list[str], message: str, kind: str, value: Any) -> Response:
    """A 422 with one error, shaped like FastAPI's own."""
    return _unprocessable(JobRequestError.at(loc, message, value, kind).errors, prefix)


def _install_error_handlers(app: FastAPI) -> None:
    def handler(status: int) -> Any:
        async def handle(request: Request, exc: Exception) -> JSONResponse:
            headers = {"Retry-After": "1"} if status == 503 else None
            return JSONResponse({"detail": str(exc)}, status_code=status, headers=headers)

        return handle

    async def request_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, JobRequestError)
        return _unprocessable(exc.errors, "body")

    async def delivery_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, KafkaDeliveryError)
        status = 503 if exc.retryable else 500
        return await handler(status)(request, exc)  # type: ignore[no-any-return]

    app.add_exception_handler(JobRequestError, request_error)
    app.add_exception_handler(JobNotFoundError, handler(404))
    app.add_exception_handler(ExecutionNotFoundError, handler(404))
    app.add_exception_handler(JobConflictError, handler(409))
    app.add_exception_handler(ViewNotReadyError, handler(503))
    app.add_exception_handler(KafkaDeliveryError, delivery_error)


def _command_body(receipt: CommandReceipt) -> dict[str, Any]:
    body: dict[str, Any] = {"job_id": receipt.job_id, "status": receipt.status}
    if receipt.manual_fire_at_ms is not None:
        body["manual_fire_at"] = iso(receipt.manual_fire_at_ms)
    return body


def _backfill_body(plan: BackfillPlan) -> dict[str, Any]:
    body: dict[str, Any] = {
        "job_id": plan.job_id,
        "from": iso(plan.from_ms),
        "to": iso(plan.to_ms),
        "rate": plan.per_s,
        "ticks": plan.tick_count,
        "dry_run": plan.ticks is not None,
        "written": plan.written,
        "estimated_duration_s": round(plan.tick_count / plan.per_s, 3),
    }
    if plan.ticks is not None:
        body["tick_times"] = [{"at": iso(t), "at_ms": t} for t in plan.ticks]
    return body


def create_app(settings: IngestSettings) -> FastAPI:
    """The ingest API; its lifespan starts the status view and the producer and stops them.

    With ``settings.tokens_file`` its routes need a bearer token (:mod:`.access`); a file
    that cannot be read is a ``ConfigurationError`` here, before anything starts."""
    codec = Codec.from_directory()
    tokens = None if settings.tokens_file is None else TokenTable(settings.tokens_file)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        with broker_connection_log(settings.kafka):  # one line when a broker goes, one back
            view = StatusView(settings, codec).start()
            client = KafkronClient(settings, lookup=view, codec=codec)
            app.state.view, app.state.client = view, client
            app.state.creates = AsyncCreates(client, view, settings, codec)
            try:
                yield
            finally:
                try:
                    client.close()
                finally:
                    view.close()

    # /docs and /redoc serve their files themselves (api_docs), never from a CDN.
    app = FastAPI(title="kafkron", version="1", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.add_middleware(CreateLane, settings=settings)
    app.add_middleware(BearerAuth, tokens=tokens, routes=lambda: app.routes)  # outermost
    app.state.tokens = tokens
    app.openapi = document_creates(app)  # type: ignore[method-assign]
    _install_error_handlers(app)

    def reads_of(request: Request, caller: Caller) -> ViewReads:
        view = view_of(request)
        limit = min(settings.recent_executions_per_job, settings.executions_kept_per_job)
        return tenant_reads(ViewReads(view.job, view.executions, view.dependents, limit), caller)

    catch_up_s = settings.view_catch_up_timeout_s
    install_reads(app, settings, codec)
    install_dashboard(app, settings)
    install_api_docs(app)

    @app.get("/api/jobs/{job_id}", response_model=None)
    def get_job(job_id: str, request: Request, caller: CallerOf) -> Response:
        """The job's definition, status (COMPLETED one-offs with their outcome), next run,
        recent executions with their attempts and (of a dependent) recent DAG runs and the
        newest one's state."""
        view = view_of(request)
        job = known_job(request, job_id, catch_up_s, caller)
        now_ms = time.time_ns() // 1_000_000
        executions, running = view.executions(job_id), view.running(job_id)
        body = job_body(job, executions, running, now_ms, view.lifecycle(job_id))
        runs = recent_runs(job, reads_of(request, caller))
        body["dag_runs"] = runs
        body["dag_state"] = (
            {"run_key": runs[0]["run_key"], "status": runs[0]["status"]} if runs else None
        )
        return json_answer(body)

    @app.get("/api/dag-runs/{root_job_id}/{run_key_ms}", response_model=None)
    def get_dag_run(
        request: Request,
        caller: CallerOf,
        root_job_id: Annotated[str, Path(pattern=JOB_ID_PATTERN)],
        run_key_ms: Annotated[int, Path(ge=0, le=MAX_EPOCH_MS)],
    ) -> dict[str, Any] | Response:
        """Every job of one DAG run: the root, its transitive dependents, their statuses."""
        root = known_job(request, root_job_id, catch_up_s, caller)
        if root["depends_on"]:
            message = (
                f"job {root_job_id} is not a root: it depends on "
                f"{', '.join(root['depends_on'])}; a DAG run is named by a root without "
                "depends_on (one of its transitive upstreams)"
            )
            return _invalid("path", ["root_job_id"], message, "value_error", root_job_id)
        nodes, truncated = run_nodes(root_job_id, run_key_ms, reads_of(request, caller))
        return dag_run_body(root_job_id, run_key_ms, nodes, truncated)

    @app.delete("/api/jobs/{job_id}")
    def cancel_job(job_id: str, request: Request, caller: CallerOf) -> dict[str, Any]:
        """Cancel (compare-and-set to CANCELLED); 409 while an execution is RUNNING."""
        owned_job(request, job_id, catch_up_s, caller)
        return _command_body(client_of(request).cancel(job_id))

    @app.post("/api/jobs/{job_id}/trigger")
    def trigger_job(job_id: str, request: Request, caller: CallerOf) -> dict[str, Any]:
        """Fire the job once now, besides its schedule."""
        owned_job(request, job_id, catch_up_s, caller)
        return _command_body(client_of(request).trigger_now(job_id))

    @app.post("/api/jobs/{job_id}/pause")
    def pause_job(job_id: str, request: Request, caller: CallerOf) -> dict[str, Any]:
        """Stop firing the job until it is resumed."""
        owned_job(request, job_id, catch_up_s, caller)
        return _command_body(client_of(request).pause(job_id))

    @app.post("/api/jobs/{job_id}/resume")
    def resume_job(job_id: str, request: Request, caller: CallerOf) -> dict[str, Any]:
        """Fire a paused job again from its next tick."""
        owned_job(request, job_id, catch_up_s, caller)
        return _command_body(client_of(request).resume(job_id))

    @app.post(
        "/api/jobs/{job_id}/backfill",
        response_model=None,
        openapi_extra={"requestBody": BACKFILL_BODY},
    )
    async def backfill_job(
        job_id: str, request: Request, caller: CallerOf
    ) -> dict[str, Any] | Response:
        """Run a recurring job's ticks in [from, to] now (trigger BACKFILL, at most ``rate``
        a second); a dry run lists them and writes nothing."""
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            return _invalid("body", [], f"not a JSON object: {exc}", "json_invalid", None)
        if not isinstance(body, dict):
            return _invalid("body", [], "give a JSON object", "dict_type", body)
        try:
            backfill = parse_backfill(body)
            # Where a missing job answers 404 (after the body's checks): another tenant's too.
            await run_in_threadpool(owned_job, request, job_id, catch_up_s, caller)
            # Counting the window's ticks is CPU work: off the event loop.
            plan = await run_in_threadpool(client_of(request).backfill, job_id, backfill)
        except JobRequestError as exc:
            if exc.errors[0]["loc"] == ["job_id"]:
                return _unprocessable(exc.errors, "path")
            return _unprocessable(exc.errors, "body")
        return _backfill_body(plan)

    @app.get("/api/dead-letter", response_model=None)
    def dead_letters(
        request: Request,
        caller: CallerOf,
        cursor: Annotated[str | None, Query(max_length=64)] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 20,
    ) -> dict[str, Any] | Response:
        """Dead-lettered executions and records, newest first, cursor-paginated."""
        try:
            items, next_cursor = view_of(request).dead_letters(cursor, limit, caller.tenant)
        except InvalidCursorError as exc:
            return _invalid("query", ["cursor"], str(exc), "value_error", cursor)
        return {"items": [dead_letter_body(i) for i in items], "next_cursor": next_cursor}

    @app.get("/healthz", response_model=None)
    def healthz(request: Request) -> JSONResponse:
        """200 when the view is caught up and consuming and the producer is healthy."""
        view, client = view_of(request), client_of(request)
        checks = {
            "view_ready": view.ready,
            "view_consuming": view.alive and view.last_error is None,
            "producer": client.healthy,
        }
        body = {
            "status": "ok" if all(checks.values()) else "unavailable",
            **checks,
            "view_error": view.last_error,
            "undecodable_records": view.undecodable_count(),
        }
        return JSONResponse(body, status_code=200 if all(checks.values()) else 503)

    return app
