"""OpenAPI of the create endpoints, which :mod:`services.ingest.create_lane` serves.

They are not FastAPI routes (see that module for why), so FastAPI does not document them;
this adds their paths, and the schemas of their bodies from the pydantic models that
validate them (``JobCreate``) or describe them (``JobBatch``, ``BatchAnswer``).

FastAPI documents its own routes with 200 and 422 only; this adds the answers of the API's
exception handlers (404, 409, 503) to the routes that give them, so that the spec lists
every status a client can get, and the bodies of the routes that return plain dicts
(``GET /api/jobs/{job_id}``'s DAG runs, ``GET /api/dag-runs/...``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from services.ingest.backfill import BackfillRequest
from services.ingest.batch import (
    MAX_IDEMPOTENCY_KEY_LENGTH,
    BatchAnswer,
    CreatedJob,
    JobBatch,
)
from services.ingest.create_lane import BATCH_PATH, CREATE_PATH
from services.ingest.dag_runs import DagRun, JobDetails
from services.ingest.read_models import (
    BackfillAnswer,
    Execution,
    ExecutionPage,
    JobPage,
    Replayed,
)
from services.ingest.validation import JobCreate

_MODELS: list[type[BaseModel]] = [
    JobCreate,
    JobBatch,
    CreatedJob,
    BatchAnswer,
    JobDetails,
    DagRun,
    JobPage,
    ExecutionPage,
    Execution,
    Replayed,
    BackfillAnswer,
    BackfillRequest,
]


def _json_of(model: type[BaseModel], description: str) -> dict[str, Any]:
    schema = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _message(description: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"detail": {}}}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_TOO_LARGE = _message("The body is over its size limit (batch: over max_batch_items items)")
_INVALID = _message("Validation error: detail lists {type, loc, msg, input}, loc naming the field")
_RETRY = _message("Not written in time or the view is behind: retry (Retry-After)")
_NOT_FOUND = _message("No job with this id is known: check the id, or retry if it is brand new")
_CONFLICT = _message("The command contradicts the job's state (the detail says how)")
_INVALID_CREATE = _message(
    "Validation error: detail lists {type, loc, msg, input}, loc naming the field. A job "
    "with depends_on that nothing could run is refused at loc [body, depends_on], the "
    "message naming the jobs: an upstream (direct or transitive) that does not exist or is "
    "cancelled, a cycle (its path), or roots (upstreams without depends_on) that do not "
    "share one schedule (the same cron expression and time zone, or the same run_at)"
)
_JOB_ID = "/api/jobs/{job_id}"
BACKFILL_BODY = {"required": True, **_json_of(BackfillRequest, "The window and the rate")}
DAG_RUN_PATH = "/api/dag-runs/{root_job_id}/{run_key_ms}"
_COMMAND_ERRORS = {"404": _NOT_FOUND, "409": _CONFLICT, "503": _RETRY}
# The answers of the exception handlers (services.ingest.api), by FastAPI route.
ROUTE_ERRORS: dict[tuple[str, str], dict[str, Any]] = {
    (_JOB_ID, "get"): {
        "200": _json_of(JobDetails, "The job; a dependent's with its newest DAG runs"),
        "404": _NOT_FOUND,
        "503": _RETRY,
    },
    (DAG_RUN_PATH, "get"): {
        "200": _json_of(DagRun, "Every job of the run, each after its upstreams"),
        "404": _message("No job with this root_job_id is known (the detail names it)"),
        "503": _RETRY,
        "422": _message(
            "loc [path, run_key_ms]: not an integer of epoch milliseconds; loc [path, "
            "root_job_id]: not a job id, or a job with depends_on (not a root)"
        ),
    },
    (_JOB_ID, "delete"): _COMMAND_ERRORS,
    (f"{_JOB_ID}/trigger", "post"): _COMMAND_ERRORS,
    (f"{_JOB_ID}/pause", "post"): _COMMAND_ERRORS,
    (f"{_JOB_ID}/resume", "post"): _COMMAND_ERRORS,
    ("/api/jobs", "get"): {
        "200": _json_of(JobPage, "A page of jobs in job id order"),
        "422": _message(
            "loc [query, status|tenant|handler|id_prefix|limit]: not a valid value; "
            "[query, label]: not key:value; [query, cursor]: not a cursor this API returned"
        ),
    },
    (f"{_JOB_ID}/executions", "get"): {
        "200": _json_of(ExecutionPage, "A page of the job's executions, newest first"),
        "404": _NOT_FOUND,
        "422": _message("loc [query, cursor] or [query, limit]: not a valid value"),
        "503": _RETRY,
    },
    ("/api/executions/{execution_id}", "get"): {
        "200": _json_of(Execution, "The execution with every attempt kept"),
        "404": _message("No execution with this id is known to the view (the detail names it)"),
    },
    ("/api/dead-letter/{execution_id}/replay", "post"): {
        "200": _json_of(Replayed, "The replay was written to the due topic"),
        "404": _message("No dead letter of this execution is known (the detail names it)"),
        "503": _RETRY,
    },
    (f"{_JOB_ID}/backfill", "post"): {
        "200": _json_of(BackfillAnswer, "Counted (dry run: listed) or written"),
        "404": _NOT_FOUND,
        "409": _CONFLICT,
        "422": _message(
            "loc [path, job_id]: not a recurring (cron) job; [body, to]: before from, or a "
            "window of more than max_backfill_ticks ticks (the message says where it may "
            "end); [body, from|to|rate|dry_run]: not a valid value; [body]: not a JSON object"
        ),
        "503": _RETRY,
    },
    ("/healthz", "get"): {
        "503": {
            "description": "Not ready: the body's checks say which failed",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    },
}

PATHS: dict[str, Any] = {
    CREATE_PATH: {
        "post": {
            "tags": ["jobs"],
            "summary": "Create a job",
            "operationId": "create_job",
            "description": "Durable on answer. A repeat with the same Idempotency-Key and "
            "body answers the first answer with 200; the same key with another body is 409.",
            "parameters": [
                {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "required": False,
                    "schema": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_IDEMPOTENCY_KEY_LENGTH,
                    },
                }
            ],
            "requestBody": {"required": True, **_json_of(JobCreate, "The job to create")},
            "responses": {
                "201": _json_of(CreatedJob, "Created"),
                "200": _json_of(CreatedJob, "A repeat of an earlier create: its answer"),
                "409": _message("The key was used with another body, or the job_id exists"),
                "413": _TOO_LARGE,
                "422": _INVALID_CREATE,
                "503": _RETRY,
            },
        }
    },
    BATCH_PATH: {
        "post": {
            "tags": ["jobs"],
            "summary": "Create many jobs, answered per item",
            "operationId": "create_jobs_batch",
            "description": "Up to max_batch_items creates, each with its own optional "
            "idempotency key. Answers 200 with one answer per item in request order, each "
            "with the status_code a single create would have answered (201, 200 for a "
            "repeat, 409, 422 with loc [body, items, index, job, field], 503 to retry); a "
            "bad item never holds up the others. Every 201/200 item is durable. An item "
            "with depends_on may name jobs of earlier items of the batch (not later ones); "
            "one nothing could run is a 422 at [body, items, index, job, depends_on].",
            "requestBody": {"required": True, **_json_of(JobBatch, "The creates")},
            "responses": {
                "200": _json_of(BatchAnswer, "Every item's answer"),
                "413": _TOO_LARGE,
                "422": _INVALID,
            },
        }
    },
}


def document_creates(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """``app.openapi`` plus the create endpoints, their schemas and the error answers."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            paths = schema.setdefault("paths", {})
            for (path, method), responses in ROUTE_ERRORS.items():
                paths[path][method]["responses"].update(responses)
            for path, operations in PATHS.items():  # /api/jobs also has FastAPI's GET
                paths.setdefault(path, {}).update(operations)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in _MODELS:
                found = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(found.pop("$defs", {}))
                components[model.__name__] = found
        return app.openapi_schema  # type: ignore[return-value]

    return openapi
