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
from fastapi.responses import JSONResponse

from services.ingest.async_creates import AsyncCreates
from services.ingest.client import CommandReceipt, KafkronClient
from services.ingest.create_lane import CreateLane, unprocessable
from services.ingest.dag_runs import ViewReads, dag_run_body, recent_runs, run_nodes
from services.ingest.exceptions import (
    JobConflictError,
    JobNotFoundError,
    JobRequestError,
    ViewNotReadyError,
)
from services.ingest.openapi import document_creates
from services.ingest.presenters import dead_letter_body, iso, job_body
from services.ingest.settings import IngestSettings
from services.ingest.validation import JOB_ID_PATTERN, MAX_EPOCH_MS
from services.ingest.view import StatusView
from services.ingest.view_store import InvalidCursorError
from streams.codec import Codec
from streams.exceptions import KafkaDeliveryError


def _unprocessable(errors: list[dict[str, Any]], prefix: str) -> Response:
    body = orjson.dumps(unprocessable(errors, prefix))
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
    app.add_exception_handler(JobConflictError, handler(409))
    app.add_exception_handler(ViewNotReadyError, handler(503))
    app.add_exception_handler(KafkaDeliveryError, delivery_error)


def _command_body(receipt: CommandReceipt) -> dict[str, Any]:
    body: dict[str, Any] = {"job_id": receipt.job_id, "status": receipt.status}
    if receipt.manual_fire_at_ms is not None:
        body["manual_fire_at"] = iso(receipt.manual_fire_at_ms)
    return body


def create_app(settings: IngestSettings) -> FastAPI:
    """The ingest API; its lifespan starts the status view and the producer and stops them."""
    codec = Codec.from_directory()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
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

    app = FastAPI(title="kafkron", version="1", lifespan=lifespan)
    app.add_middleware(CreateLane, settings=settings)
    app.openapi = document_creates(app)  # type: ignore[method-assign]
    _install_error_handlers(app)

    def client_of(request: Request) -> KafkronClient:
        client: KafkronClient = request.app.state.client
        return client

    def view_of(request: Request) -> StatusView:
        view: StatusView = request.app.state.view
        return view

    def reads_of(request: Request) -> ViewReads:
        view = view_of(request)
        limit = settings.recent_executions_per_job
        return ViewReads(view.job, view.executions, view.dependents, limit)

    def known_job(request: Request, job_id: str) -> dict[str, Any]:
        """The job as the view knows it, after it read this instance's writes of it."""
        view = view_of(request)
        # Read-your-writes for commands this instance wrote (no broker round trip).
        written = client_of(request).written_through(job_id)
        if written and not view.wait_for_offsets(written, settings.view_catch_up_timeout_s):
            raise ViewNotReadyError(f"the status view has not yet read job {job_id}'s last write")
        job = view.job(job_id)
        if job is None:
            raise JobNotFoundError(job_id)
        return job

    @app.get("/api/jobs/{job_id}")
    def get_job(job_id: str, request: Request) -> dict[str, Any]:
        """The job's definition, state, next run, recent executions and (of a dependent)
        recent DAG runs."""
        view = view_of(request)
        job = known_job(request, job_id)
        now_ms = time.time_ns() // 1_000_000
        body = job_body(job, view.executions(job_id), view.running(job_id), now_ms)
        body["dag_runs"] = recent_runs(job, reads_of(request))
        return body

    @app.get("/api/dag-runs/{root_job_id}/{run_key_ms}", response_model=None)
    def get_dag_run(
        request: Request,
        root_job_id: Annotated[str, Path(pattern=JOB_ID_PATTERN)],
        run_key_ms: Annotated[int, Path(ge=0, le=MAX_EPOCH_MS)],
    ) -> dict[str, Any] | Response:
        """Every job of one DAG run: the root, its transitive dependents, their statuses."""
        root = known_job(request, root_job_id)
        if root["depends_on"]:
            message = (
                f"job {root_job_id} is not a root: it depends on "
                f"{', '.join(root['depends_on'])}; a DAG run is named by a root without "
                "depends_on (one of its transitive upstreams)"
            )
            return _invalid("path", ["root_job_id"], message, "value_error", root_job_id)
        nodes, truncated = run_nodes(root_job_id, run_key_ms, reads_of(request))
        return dag_run_body(root_job_id, run_key_ms, nodes, truncated)

    @app.delete("/api/jobs/{job_id}")
    def cancel_job(job_id: str, request: Request) -> dict[str, Any]:
        """Cancel (compare-and-set to CANCELLED); 409 while an execution is RUNNING."""
        return _command_body(client_of(request).cancel(job_id))

    @app.post("/api/jobs/{job_id}/trigger")
    def trigger_job(job_id: str, request: Request) -> dict[str, Any]:
        """Fire the job once now, besides its schedule."""
        return _command_body(client_of(request).trigger_now(job_id))

    @app.post("/api/jobs/{job_id}/pause")
    def pause_job(job_id: str, request: Request) -> dict[str, Any]:
        """Stop firing the job until it is resumed."""
        return _command_body(client_of(request).pause(job_id))

    @app.post("/api/jobs/{job_id}/resume")
    def resume_job(job_id: str, request: Request) -> dict[str, Any]:
        """Fire a paused job again from its next tick."""
        return _command_body(client_of(request).resume(job_id))

    @app.get("/api/dead-letter", response_model=None)
    def dead_letters(
        request: Request,
        cursor: Annotated[str | None, Query(max_length=64)] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 20,
    ) -> dict[str, Any] | Response:
        """Dead-lettered executions and records, newest first, cursor-paginated."""
        try:
            items, next_cursor = view_of(request).dead_letters(cursor, limit)
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
