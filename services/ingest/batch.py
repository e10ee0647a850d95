"""``POST /api/jobs/batch``: the request envelope, its per-item answers, and their OpenAPI.

The envelope is checked by hand rather than by a pydantic body model: a model would turn
one bad item into a 422 for the whole request, and this endpoint answers per item. The
pydantic models below document the shapes in OpenAPI (and are tested to match them).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from services.ingest.creates import SubmitReceipt
from services.ingest.exceptions import (
    JobConflictError,
    JobNotFoundError,
    JobRequestError,
    ViewNotReadyError,
)
from services.ingest.presenters import iso
from services.ingest.validation import JobCreate
from streams.exceptions import KafkaDeliveryError, KafkronError

MAX_IDEMPOTENCY_KEY_LENGTH = 200


class CreatedJob(BaseModel):
    """The answer to a create: 201 when created, 200 when it repeated an earlier create."""

    job_id: str
    status: str
    next_run_at: str | None = Field(description="ISO-8601 UTC; null for a DAG job")


class BatchItem(BaseModel):
    """One create of a batch, with its own optional idempotency key."""

    model_config = ConfigDict(extra="forbid")

    job: JobCreate
    idempotency_key: str | None = Field(
        default=None, min_length=1, max_length=MAX_IDEMPOTENCY_KEY_LENGTH
    )


class JobBatch(BaseModel):
    """Up to ``max_batch_items`` creates (a setting, 1,000 by default)."""

    model_config = ConfigDict(extra="forbid")

    items: list[BatchItem]


class BatchItemAnswer(BaseModel):
    """Per item: ``status_code`` is what a single create would have answered.

    201 or 200 carry ``job_id``, ``status`` and ``next_run_at``; 422 carries ``detail`` as
    a list of errors whose ``loc`` is ``["body", "items", index, "job", field...]``; 409,
    500 and 503 carry ``detail`` as a message (503: retry the item, it may be written).
    """

    index: int
    status_code: int
    job_id: str | None = None
    status: str | None = None
    next_run_at: str | None = None
    detail: JsonValue = None


class BatchAnswer(BaseModel):
    """Every item's answer, in request order, and how many did not succeed."""

    items: list[BatchItemAnswer]
    failed: int


def receipt_body(receipt: SubmitReceipt) -> dict[str, Any]:
    """The JSON body of a create's answer."""
    return {
        "job_id": receipt.job_id,
        "status": receipt.status,
        "next_run_at": iso(receipt.next_run_at_ms),
    }


def parse_batch(
    body: Any, max_items: int
) -> tuple[list[tuple[int, Any, str | None]], dict[int, list[dict[str, Any]]]]:
    """The envelope's items as (index, job request, key), and per-index envelope errors.

    Raises ``JobRequestError`` (loc relative to ``body``) when the envelope itself is not
    an object with an ``items`` list; :class:`BatchTooLargeError` over ``max_items``.
    """
    if not isinstance(body, dict):
        raise JobRequestError.at([], "expected an object with an items list", None, "dict_type")
    unknown = sorted(set(body) - {"items"})
    if unknown:
        raise JobRequestError.at([unknown[0]], "unknown field", None, "extra_forbidden")
    items = body.get("items")
    if not isinstance(items, list):
        raise JobRequestError.at(["items"], "expected a list of items", None, "list_type")
    if len(items) > max_items:
        raise BatchTooLargeError(len(items), max_items)
    valid: list[tuple[int, Any, str | None]] = []
    errors: dict[int, list[dict[str, Any]]] = {}
    for index, item in enumerate(items):
        problem = _item_problem(item)
        if problem is None:
            valid.append((index, item["job"], item.get("idempotency_key")))
        else:
            errors[index] = [{**problem, "loc": ["items", index, *problem["loc"]]}]
    return valid, errors


def _item_problem(item: Any) -> dict[str, Any] | None:
    if not isinstance(item, dict):
        return _error([], "expected an object with job and idempotency_key", "dict_type")
    unknown = sorted(set(item) - {"job", "idempotency_key"})
    if unknown:
        return _error([unknown[0]], "unknown field; an item has job and idempotency_key",
                      "extra_forbidden")  # fmt: skip
    if "job" not in item:
        return _error(["job"], "Field required", "missing")
    key = item.get("idempotency_key")
    if key is not None and not (
        isinstance(key, str) and 0 < len(key) <= MAX_IDEMPOTENCY_KEY_LENGTH
    ):
        message = (
            f"idempotency_key must be a string of 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} characters"
        )
        return _error(["idempotency_key"], message, "string_type")
    return None


def _error(loc: list[str], message: str, kind: str) -> dict[str, Any]:
    return {"type": kind, "loc": loc, "msg": message, "input": None}


class BatchTooLargeError(KafkronError):
    """More items than ``max_batch_items`` in one batch (413)."""

    def __init__(self, count: int, limit: int) -> None:
        self.count, self.limit = count, limit
        super().__init__(
            f"body.items has {count} items, at most {limit} allowed per batch; split it",
            retryable=False,
        )


def outcome_answer(index: int, outcome: SubmitReceipt | KafkronError) -> dict[str, Any]:
    """One item's answer (see :class:`BatchItemAnswer`)."""
    if isinstance(outcome, SubmitReceipt):
        return {"index": index, "status_code": 201 if outcome.created else 200,
                **receipt_body(outcome)}  # fmt: skip
    if isinstance(outcome, JobRequestError):
        detail = [{**e, "loc": ["body", "items", index, "job", *e["loc"]]} for e in outcome.errors]
        return {"index": index, "status_code": 422, "detail": detail}
    return {"index": index, "status_code": error_status(outcome), "detail": str(outcome)}


def error_status(error: KafkronError) -> int:
    """The HTTP status of an ingest error (as the API's exception handlers answer it)."""
    if isinstance(error, JobNotFoundError):
        return 404
    if isinstance(error, JobConflictError):
        return 409
    if isinstance(error, ViewNotReadyError):
        return 503
    if isinstance(error, KafkaDeliveryError):
        return 503 if error.retryable else 500
    return 500
