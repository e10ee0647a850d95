"""``POST /api/jobs`` and ``POST /api/jobs/batch`` as one pure ASGI middleware.

Creates are the API's hot path. Measured here (2 shared cores, uvicorn with httptools and
uvloop), a bare FastAPI endpoint costs 150-190 us of server CPU per request, a bare
Starlette route 85-100 us, a pure ASGI handler 42-55 us: FastAPI's request handling alone
costs as much as the create itself. So these two endpoints are served here, in front of
FastAPI's router (after its error middleware, so an unexpected error still answers 500);
:mod:`services.ingest.api` documents them in the OpenAPI schema.

:func:`serve_creates_first` puts the same lane in front of the whole FastAPI app for uvicorn
(``services.ingest.main``): FastAPI's own outer layers (its telemetry hooks, which look up
OpenTelemetry providers per request, and its body limit) cost ~10% of a create here.

Answers are the ones the FastAPI routes gave: 201/200 with ``job_id``, ``status`` and
``next_run_at``; 422 in FastAPI's shape (``detail: [{type, loc, msg, input}]``, ``loc``
starting with ``body`` or ``header``); 409, 413, and 503 with ``Retry-After``.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from services.ingest.access import Caller, bind_tenant, scope_caller
from services.ingest.async_creates import AsyncCreates
from services.ingest.batch import (
    MAX_IDEMPOTENCY_KEY_LENGTH,
    BatchTooLargeError,
    error_status,
    outcome_answer,
    parse_batch,
    receipt_body,
)
from services.ingest.exceptions import JobRequestError
from services.ingest.json_bytes import json_bytes
from services.ingest.settings import IngestSettings
from services.ingest.validation import MAX_PAYLOAD_DEPTH, too_deep_message
from streams.exceptions import KafkronError

log = logging.getLogger(__name__)

CREATE_PATH = "/api/jobs"
BATCH_PATH = "/api/jobs/batch"
_PATHS = frozenset({CREATE_PATH, BATCH_PATH})
# JSON framing around the payload limit: the other fields of a request are small.
_BODY_OVERHEAD_BYTES = 64 * 1024
# How deep a body may nest when orjson cannot read it: a payload at its depth limit inside
# the body ({"payload": ...}) or a batch ({"items": [{"job": {"payload": ...}}]}).
_MAX_CREATE_DEPTH = MAX_PAYLOAD_DEPTH + 1
_MAX_BATCH_DEPTH = MAX_PAYLOAD_DEPTH + 4

Answer = tuple[int, Any, float | None]  # status, JSON body, Retry-After seconds


class NestedTooDeepError(ValueError):
    """A body orjson could not read nests deeper than json.loads may safely recurse.

    ``path`` leads from the body to the first array or object past the limit."""

    def __init__(self, path: list[str | int], limit: int) -> None:
        self.path, self.limit = path, limit
        super().__init__(f"nested more than {limit} levels deep at {path}")


def decode_json(raw: bytes, max_depth: int) -> Any:
    """A request body as JSON; raises ValueError (with the position) when it is not JSON.

    orjson reads bodies nested up to 1,024 levels (validation then bounds each field). What
    it refuses goes to json.loads: what only json reads (NaN, lone surrogates: validation
    then names the field), else its error. So does a body with a run of 19 digits: orjson
    reads an integer beyond 64 bits as a float without an error (2**70 would be stored as
    1.1805916207174113e+21), json.loads reads it exactly. json.loads recurses once per
    level, so it only gets bodies nested at most ``max_depth`` levels; deeper ones raise
    NestedTooDeepError."""
    if _LONG_DIGITS.search(raw) is None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    path = too_deep_path(raw, max_depth)
    if path is not None:
        raise NestedTooDeepError(path, max_depth)
    return json.loads(raw)


# Every integer orjson reads as a float (below -2**63 or above 2**64 - 1) has 19 digits or
# more; digits in a string or a float's mantissa match too and only cost json.loads's speed.
_LONG_DIGITS = re.compile(rb"\d{19}")


# The tokens that matter for nesting: strings (whose brackets do not count), brackets,
# and the separators that move to the next key or index.
_JSON_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}:,]', re.DOTALL)


def too_deep_path(raw: bytes, max_depth: int) -> list[str | int] | None:
    """Where ``raw`` (JSON text, maybe invalid) first opens an array or object more than
    ``max_depth`` levels deep: the keys and indexes leading to it; None if nowhere.

    A scan of tokens with an explicit stack, so any nesting is safe to measure."""
    path: list[str | int] = []  # per open container: the key or index being read
    kinds: list[bytes] = []
    last_string = ""
    for match in _JSON_TOKENS.finditer(raw):
        token = match.group()
        first = token[:1]
        if first == b'"':
            last_string = _string_of(token)
        elif first in b"[{":
            if len(kinds) >= max_depth:
                return path
            kinds.append(first)
            path.append(0 if first == b"[" else "")
        elif first in b"]}":
            if kinds:
                kinds.pop()
                path.pop()
        elif first == b":" and kinds and kinds[-1] == b"{":
            path[-1] = last_string
        elif first == b"," and kinds and kinds[-1] == b"[":
            index = path[-1]
            path[-1] = index + 1 if isinstance(index, int) else 0
    return None


def _string_of(token: bytes) -> str:
    try:
        text: str = json.loads(token)
    except ValueError:  # a bad escape: the key as written is still a fine pointer
        return token[1:-1].decode("utf-8", "replace")
    return text


def unprocessable(errors: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
    """A 422 body: ``errors`` with ``prefix`` (``body``, ``header``, ``query``) on each loc."""
    return {"detail": [{**e, "loc": [prefix, *e["loc"]]} for e in errors]}


def error_answer(error: KafkronError) -> Answer:
    """What a single create answers for ``error``."""
    if isinstance(error, JobRequestError):
        return 422, unprocessable(error.errors, "body"), None
    status = error_status(error)
    retry_after = (error.retry_after_s or 1.0) if status == 503 else None
    return status, {"detail": str(error)}, retry_after


class CreateLane:
    """ASGI middleware answering the two create endpoints; everything else passes through."""

    def __init__(self, app: ASGIApp, settings: IngestSettings) -> None:
        self.app = app
        self._max_body_bytes = settings.max_payload_bytes * 2 + _BODY_OVERHEAD_BYTES
        self._max_batch_body_bytes = settings.max_batch_body_bytes
        self._max_batch_items = settings.max_batch_items

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_create(scope):
            await self.app(scope, receive, send)  # GET /api/jobs/batch reads job "batch"
            return
        answer = await self.answer(scope, receive)
        if answer is not None:
            await _send(send, answer)

    async def answer(self, scope: Scope, receive: Receive) -> Answer | None:
        """The answer to a create request (``is_create``); None when the client went away."""
        path = scope["path"]
        creates: AsyncCreates = scope["app"].state.creates
        limit = self._max_body_bytes if path == CREATE_PATH else self._max_batch_body_bytes
        raw = await _read_body(scope, receive, limit)
        if raw is None:
            return None
        if isinstance(raw, int):
            return 413, {"detail": f"request body of {raw} bytes is over {limit}"}, None
        caller = scope_caller(scope)
        if caller is None:  # refuse rather than create with nobody's tenant
            raise RuntimeError("creates need BearerAuth in front of the create lane")
        if path == CREATE_PATH:
            return await self._create(scope, raw, creates, caller)
        return await self._batch(raw, creates, caller)

    async def _create(
        self, scope: Scope, raw: bytes, creates: AsyncCreates, caller: Caller
    ) -> Answer:
        key = _header(scope, b"idempotency-key")
        if key is not None and not 0 < len(key) <= MAX_IDEMPOTENCY_KEY_LENGTH:
            message = f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} characters"
            error = JobRequestError.at(["idempotency-key"], message, None, "string_too_long")
            return 422, unprocessable(error.errors, "header"), None
        try:
            body = decode_json(raw, _MAX_CREATE_DEPTH)
        except NestedTooDeepError as exc:
            return _too_deep(exc, fields_at=1)
        except ValueError as exc:
            return _json_invalid(exc)
        try:
            receipt = await creates.create(bind_tenant(body, caller), key)
        except KafkronError as exc:
            return error_answer(exc)
        return (201 if receipt.created else 200), receipt_body(receipt), None

    async def _batch(self, raw: bytes, creates: AsyncCreates, caller: Caller) -> Answer:
        try:
            body = decode_json(raw, _MAX_BATCH_DEPTH)
            valid, envelope_errors = parse_batch(body, self._max_batch_items)
        except NestedTooDeepError as exc:
            return _too_deep(exc, fields_at=4)
        except BatchTooLargeError as exc:
            error = {"type": "too_long", "loc": ["body", "items"], "msg": str(exc),
                     "input": None, "ctx": {"max_length": exc.limit}}  # fmt: skip
            return 413, {"detail": [error]}, None
        except JobRequestError as exc:
            return 422, unprocessable(exc.errors, "body"), None
        except ValueError as exc:
            return _json_invalid(exc)
        if caller.tenant is not None:
            valid = _bound_to_tenant(valid, envelope_errors, caller)
        outcomes = await creates.create_many([(job, key) for _, job, key in valid])
        answers: list[Any] = [None] * (len(valid) + len(envelope_errors))
        for index, errors in envelope_errors.items():
            answers[index] = {"index": index, "status_code": 422,
                              **unprocessable(errors, "body")}  # fmt: skip
        for (index, _, _), outcome in zip(valid, outcomes, strict=True):
            answers[index] = outcome_answer(index, outcome)
        failed = sum(1 for answer in answers if answer["status_code"] >= 400)
        return 200, {"items": answers, "failed": failed}, None


def _bound_to_tenant(
    valid: list[tuple[int, Any, str | None]],
    envelope_errors: dict[int, list[dict[str, Any]]],
    caller: Caller,
) -> list[tuple[int, Any, str | None]]:
    """The batch's items with the caller's tenant; those naming another get their 422 in
    ``envelope_errors`` (at ``["items", index, "job", "tenant"]``)."""
    bound = []
    for index, job, key in valid:
        try:
            bound.append((index, bind_tenant(job, caller), key))
        except JobRequestError as exc:
            envelope_errors[index] = [
                {**e, "loc": ["items", index, "job", *e["loc"]]} for e in exc.errors
            ]
    return bound


def is_create(scope: Scope) -> bool:
    """True for ``POST /api/jobs`` and ``POST /api/jobs/batch``."""
    return scope["type"] == "http" and scope["method"] == "POST" and scope.get("path") in _PATHS


def serve_creates_first(app: Any, settings: IngestSettings) -> ASGIApp:
    """An ASGI app answering creates with a :class:`CreateLane` before ``app`` (the FastAPI
    app of ``services.ingest.api``, which serves everything else and keeps the lane inside
    for whoever calls it directly). An unexpected error answers 500 and is logged."""
    lane = CreateLane(app, settings)

    async def front(scope: Scope, receive: Receive, send: Send) -> None:
        if not is_create(scope):
            await app(scope, receive, send)
            return
        scope["app"] = app
        try:
            answer = await lane.answer(scope, receive)
        except Exception:
            log.exception("create request failed")
            answer = 500, {"detail": "Internal Server Error"}, None
        if answer is not None:
            await _send(send, answer)

    return front


def _too_deep(exc: NestedTooDeepError, fields_at: int) -> Answer:
    """The 422 naming the field (``fields_at`` keys and indexes into the body) whose value
    nests too deep for the body to be read."""
    error = JobRequestError.at(exc.path[:fields_at], too_deep_message(), None)
    return 422, unprocessable(error.errors, "body"), None


def _json_invalid(exc: ValueError) -> Answer:
    error = JobRequestError.at([], f"JSON decode error: {exc}", None, "json_invalid")
    return 422, unprocessable(error.errors, "body"), None


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


async def _read_body(scope: Scope, receive: Receive, max_bytes: int) -> bytes | int | None:
    """The body; its (declared) size when over ``max_bytes``; None if the client left."""
    declared = _header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        return int(declared)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            return size
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _send(send: Send, answer: Answer) -> None:
    status, body, retry_after = answer
    payload = json_bytes(body)
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(payload)).encode())]  # fmt: skip
    if retry_after is not None:
        headers.append((b"retry-after", str(max(1, round(retry_after))).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
