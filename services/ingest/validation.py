"""Job requests as callers send them, validated field by field (pydantic).

Every error names its field in ``loc``, like FastAPI's own 422 bodies. Static rules live on
the models; rules that need the settings or the clock (payload size, run_at not too far in
the past, resolved retry policy) live in :func:`check_limits`.

A JSON payload nests arrays and objects at most :data:`MAX_PAYLOAD_DEPTH` levels deep,
checked without recursion before anything recursive (pydantic, ``json.dumps``, echoing the
input in an error) sees it: hostile nesting answers 422 naming ``payload``, never a
RecursionError.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    PrivateAttr,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from services.ingest.cron import ScheduleError, cron_spec
from services.ingest.exceptions import JobRequestError
from services.ingest.settings import IngestSettings
from streams.identity import HANDLER_NAME_MAX_LENGTH, HANDLER_NAME_PATTERN
from streams.identity import TENANT_PATTERN as TENANT_PATTERN  # one rule: jobs and tokens
from streams.records import CatchupPolicy, FoldPolicy, OverlapPolicy
from streams.topics import Priority

# Safe in URLs and logs, and free of '@' (execution ids are "<job_id>@<tick>").
JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
LABEL_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$"
MAX_DEPENDENCIES = 100
MAX_LABELS = 64
MAX_TIMEOUT_S = 7 * 86_400.0
MAX_WINDOW_S = 366 * 86_400.0
DEFAULT_DAG_WAIT_S = 86_400.0
"""How long a DAG run of a dependent waits for its upstreams before it ends MISSED."""
MAX_BACKOFF_S = 7 * 86_400.0
MAX_EPOCH_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
# How many levels of arrays and objects a JSON payload may nest ([[1]] is 2, a scalar 0).
# Real payloads nest a handful; 64 leaves room for any of them and stays far below every
# recursive step a payload goes through: pydantic's JsonValue gives up at 255 levels,
# orjson writes 254, CPython's json and repr recurse up to the 1,000-frame limit.
MAX_PAYLOAD_DEPTH = 64
# Standard base64 (RFC 4648 section 4) with padding: what ``payload_b64`` takes.
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"

Loc = tuple[str | int, ...]


def field_error(loc: Loc, message: str, value: Any) -> InitErrorDetails:
    """One pydantic error at ``loc``; the message goes through ctx so braces stay literal."""
    return InitErrorDetails(
        type=PydanticCustomError("value_error", "{reason}", {"reason": message}),
        loc=loc,
        input=value,
    )


def _raise(title: str, errors: Sequence[InitErrorDetails]) -> None:
    raise ValidationError.from_exception_data(title, list(errors))


def to_epoch_ms(value: Any) -> Any:
    """An instant given as epoch milliseconds or as ISO-8601 with a zone, as epoch ms."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.upper())  # RFC 3339 allows 't' and 'z'
        except ValueError:
            raise ValueError(
                f"{value!r} is not an ISO-8601 instant; use e.g. '2026-07-12T02:00:00Z' "
                "or epoch milliseconds"
            ) from None
        if parsed.tzinfo is None:
            raise ValueError(
                f"{value!r} has no time zone; add one ('Z' or '+02:00') or use epoch milliseconds"
            )
        return int(parsed.timestamp() * 1000)
    raise ValueError("expected epoch milliseconds (an integer) or an ISO-8601 string with a zone")


_CONTAINERS = (dict, list, tuple)


def nests_deeper_than(value: Any, limit: int) -> bool:
    """True when ``value`` nests lists, tuples and dicts more than ``limit`` levels deep.

    Iterative (a stack of containers, scalars never pushed), so any depth is safe to ask.
    """
    if not isinstance(value, _CONTAINERS):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, _CONTAINERS))
    return False


def too_deep_message(limit: int = MAX_PAYLOAD_DEPTH) -> str:
    """What a 422 says about a value nested more than ``limit`` levels deep."""
    return (
        f"nests arrays and objects more than {limit} levels deep; flatten it, or store the "
        "data elsewhere and pass a reference"
    )


def _bounded_depth(value: Any) -> Any:
    if nests_deeper_than(value, MAX_PAYLOAD_DEPTH):
        raise PydanticCustomError("value_error", "{reason}", {"reason": too_deep_message()})
    return value


def _upper(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


def _decode_b64(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not valid base64 (standard alphabet, with padding)") from None


# run_at, cron.start and cron.end: the JSON schema of what to_epoch_ms takes.
_EPOCH_MS_SCHEMA = {
    "anyOf": [
        {"type": "integer", "minimum": 0, "maximum": MAX_EPOCH_MS},
        {"type": "string", "format": "date-time"},
    ],
    "description": "Epoch milliseconds, or an ISO-8601 (RFC 3339) date-time with a zone "
    "('2026-07-12T02:00:00Z', '2026-07-12T04:00:00+02:00'); no leap second (:60)",
}

EpochMs = Annotated[
    int,
    BeforeValidator(to_epoch_ms),
    Field(ge=0, le=MAX_EPOCH_MS),
    WithJsonSchema(_EPOCH_MS_SCHEMA),
]
# A JSON value (the default JsonValue, which recurses) whose depth is checked first.
Payload = Annotated[
    JsonValue,
    BeforeValidator(_bounded_depth),
    WithJsonSchema(
        {
            "description": "Any JSON value, nesting arrays and objects at most "
            f"{MAX_PAYLOAD_DEPTH} levels deep; stored as its UTF-8 JSON"
        }
    ),
]
Base64Bytes = Annotated[
    bytes,
    BeforeValidator(_decode_b64),
    WithJsonSchema(
        {
            "type": "string",
            "format": "byte",
            "contentEncoding": "base64",
            "pattern": BASE64_PATTERN,
            "description": "Bytes in standard base64 (alphabet A-Z a-z 0-9 + /, with '=' "
            "padding; not base64url)",
        }
    ),
]
JobId = Annotated[str, StringConstraints(pattern=JOB_ID_PATTERN)]
LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY_PATTERN)]
LabelValue = Annotated[str, StringConstraints(max_length=256)]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_bytes="base64")


class CronRequest(_Request):
    """A recurring schedule: expression, IANA time zone, optional [start, end) window."""

    expression: str = Field(min_length=1, max_length=200)
    timezone: str = Field(default="UTC", min_length=1, max_length=64)
    start: EpochMs | None = None
    end: EpochMs | None = None
    fold_policy: Annotated[FoldPolicy, BeforeValidator(_upper)] = FoldPolicy.AUTO

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            cron_spec("* * * * *", value)
        except ScheduleError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _valid_schedule(self) -> CronRequest:
        if self.start is not None and self.end is not None and self.start >= self.end:
            _raise("CronRequest", [field_error(("end",), "end must be after start", self.end)])
        try:
            cron_spec(self.expression, self.timezone, self.start, self.end, self.fold_policy.value)
        except ScheduleError as exc:
            _raise("CronRequest", [field_error(("expression",), str(exc), self.expression)])
        return self


class RetryRequest(_Request):
    """Retry policy; omitted fields take the service's defaults."""

    max_attempts: int | None = Field(default=None, ge=1, le=1000)
    initial_backoff_s: float | None = Field(default=None, ge=0, le=MAX_BACKOFF_S)
    multiplier: float | None = Field(default=None, ge=1, le=100)
    max_backoff_s: float | None = Field(default=None, ge=0, le=MAX_BACKOFF_S)
    jitter_ratio: float | None = Field(default=None, ge=0, le=1)


def _given(name: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """A JSON schema matching objects where ``name`` is present and not null (or, given
    ``schema``, matches it)."""
    return {"required": [name], "properties": {name: schema or {"not": {"type": "null"}}}}


# The model validators' rules in JSON Schema, so that OpenAPI tools honour them: exactly one
# schedule kind (a null one is not given), and never both payload forms.
_MODEL_RULES: dict[str, Any] = {
    "oneOf": [_given("run_at"), _given("cron"), _given("depends_on")],
    "not": {"allOf": [_given("payload"), _given("payload_b64", {"type": "string"})]},
}


class JobCreate(_Request):
    """A request to create a job: exactly one of ``run_at``, ``cron`` or ``depends_on``
    (present and not null), and at most one of ``payload`` and ``payload_b64``."""

    model_config = ConfigDict(json_schema_extra=_MODEL_RULES)

    job_id: JobId | None = None
    handler: str = Field(max_length=HANDLER_NAME_MAX_LENGTH, pattern=HANDLER_NAME_PATTERN)
    payload: Payload = None
    payload_b64: Base64Bytes | None = None
    run_at: EpochMs | None = None
    cron: CronRequest | None = None
    depends_on: list[JobId] | None = Field(default=None, min_length=1, max_length=MAX_DEPENDENCIES)
    priority: Annotated[Priority, BeforeValidator(_upper)] = Priority.NORMAL
    timeout_s: float = Field(default=300.0, ge=0.001, le=MAX_TIMEOUT_S)  # whole ms: >= 1 ms
    retry: RetryRequest | None = None
    overlap: Annotated[OverlapPolicy, BeforeValidator(_upper)] = OverlapPolicy.SKIP
    catchup: Annotated[CatchupPolicy, BeforeValidator(_upper)] = CatchupPolicy.LATEST
    catchup_window_s: float = Field(default=86_400.0, ge=0, le=MAX_WINDOW_S)
    jitter_s: float = Field(default=0.0, ge=0, le=86_400.0)
    dag_wait_s: float = Field(default=DEFAULT_DAG_WAIT_S, ge=0.001, le=MAX_WINDOW_S)
    tenant: str = Field(default="default", pattern=TENANT_PATTERN)
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=MAX_LABELS)

    _payload_bytes: bytes = PrivateAttr(default=b"")

    @property
    def payload_bytes(self) -> bytes:
        """The payload as stored on the Job: UTF-8 JSON of ``payload``, or ``payload_b64``."""
        return self._payload_bytes

    @model_validator(mode="after")
    def _one_schedule_kind(self) -> JobCreate:
        given = [
            name
            for name, value in (("run_at", self.run_at), ("cron", self.cron))
            if value is not None
        ]
        if self.depends_on:
            given.append("depends_on")
        if not given:
            _raise(
                "JobCreate",
                [
                    field_error(
                        (), "give exactly one schedule kind: run_at, cron or depends_on", None
                    )
                ],
            )
        if len(given) > 1:
            message = f"give exactly one schedule kind, got {' and '.join(given)}"
            _raise("JobCreate", [field_error((name,), message, None) for name in given[1:]])
        if "dag_wait_s" in self.model_fields_set and not self.depends_on:
            _raise(
                "JobCreate",
                [
                    field_error(
                        ("dag_wait_s",),
                        "dag_wait_s applies only to a job with depends_on",
                        self.dag_wait_s,
                    )
                ],
            )
        if self.job_id is not None and self.depends_on and self.job_id in self.depends_on:
            _raise(
                "JobCreate",
                [field_error(("depends_on",), "a job cannot depend on itself", self.depends_on)],
            )
        self._payload_bytes = self._serialize_payload()
        return self

    def _serialize_payload(self) -> bytes:
        if self.payload_b64 is not None:
            if self.payload is not None:
                _raise(
                    "JobCreate",
                    [field_error(("payload_b64",), "give payload or payload_b64, not both", None)],
                )
            return self.payload_b64
        if self.payload is None:
            return b""
        try:
            text = json.dumps(
                self.payload, ensure_ascii=False, allow_nan=False, separators=(",", ":")
            )
        except ValueError as exc:
            _raise("JobCreate", [field_error(("payload",), f"not JSON: {exc}", None)])
        return text.encode("utf-8")


def pydantic_errors(exc: ValidationError, prefix: Loc = ()) -> list[dict[str, Any]]:
    """``exc``'s errors as JSON-safe dicts shaped like FastAPI's (``type, loc, msg, input``)."""
    errors: list[dict[str, Any]] = []
    for error in exc.errors(include_url=False):
        item: dict[str, Any] = {
            "type": error["type"],
            "loc": [*prefix, *error["loc"]],
            "msg": error["msg"],
            "input": _json_safe(error.get("input")),
        }
        if "ctx" in error:
            item["ctx"] = {k: _json_safe(v) for k, v in error["ctx"].items()}
        errors.append(item)
    return errors


def _json_safe(value: Any) -> Any:
    """``value`` as JSON can carry it; None for one nested deeper than a payload may be
    (an error does not echo such an input: copying or writing it would recurse that deep)."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if nests_deeper_than(value, MAX_PAYLOAD_DEPTH):
        return None
    return _json_copy(value)


def _json_copy(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dict):
        return {str(k): _json_copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_copy(v) for v in value]
    return str(value)


def parse_job_create(body: Any) -> JobCreate:
    """Validate a request body (a decoded JSON value) into a JobCreate.

    Raises ``JobRequestError`` whose errors name each bad field.
    """
    if isinstance(body, JobCreate):
        return body
    try:
        return JobCreate.model_validate(body)
    except ValidationError as exc:
        raise JobRequestError(pydantic_errors(exc)) from None


def check_limits(create: JobCreate, settings: IngestSettings, now_ms: int) -> None:
    """Rules that need the settings or the clock; raises ``JobRequestError`` naming fields."""
    errors: list[dict[str, Any]] = []

    def fail(loc: Loc, message: str, value: Any = None) -> None:
        errors.append(
            {"type": "value_error", "loc": list(loc), "msg": message, "input": _json_safe(value)}
        )

    size = len(create.payload_bytes)
    if size > settings.max_payload_bytes:
        field = "payload_b64" if create.payload_b64 is not None else "payload"
        fail(
            (field,),
            f"payload is {size} bytes, over the limit of {settings.max_payload_bytes};"
            " store large data elsewhere and pass a reference",
        )
    grace_ms = int(settings.run_at_grace_s * 1000)
    if create.run_at is not None and create.run_at < now_ms - grace_ms:
        fail(
            ("run_at",),
            f"run_at is {(now_ms - create.run_at) / 1000:.0f} s in the past "
            f"(at most {settings.run_at_grace_s:g} s allowed); use a future time or "
            "trigger the job now instead",
            create.run_at,
        )
    if create.cron is not None and create.cron.end is not None and create.cron.end <= now_ms:
        fail(("cron", "end"), "end is in the past: the schedule would never fire", create.cron.end)
    retry = create.retry
    if retry is not None:
        defaults = settings.default_retry
        initial = retry.initial_backoff_s
        maximum = retry.max_backoff_s
        initial = defaults.initial_backoff_s if initial is None else initial
        maximum = defaults.max_backoff_s if maximum is None else maximum
        if maximum < initial:
            fail(
                ("retry", "max_backoff_s"),
                f"max_backoff_s ({maximum:g}) is below initial_backoff_s ({initial:g})",
                maximum,
            )
    if errors:
        raise JobRequestError(errors)
