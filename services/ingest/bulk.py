"""The bulk path of ``submit_many``: validate and encode many similar jobs without pydantic.

Profiling ``submit_many`` showed ~70 us per job, almost all in pydantic validation, building
the record dict and fastavro encoding. Bulk loads create many jobs that differ only in
``job_id``, ``run_at`` and ``payload``. So requests are grouped by everything else (their
*shape*): each shape is validated once by the real models (:class:`JobCreate` and
:func:`check_limits`) and its constant fields are Avro-encoded once. Per job, only the
varying fields are checked and encoded. Both encoders are generated from the Job schema
(:func:`~streams.avro_writer.generate_spliced_writer`): the runs of constant fields, and the
template splicing a job's fields between them (a keyed create's key and hash among those).

The fast path accepts or defers, it never rejects: whenever a request is not plainly valid
it returns None and the caller validates it with pydantic, which names the bad field. The
first job of every shape is also encoded by the Codec and compared byte for byte; any
difference disables the fast path for that shape (so a schema change cannot corrupt
records, it only makes bulk loads slower).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import json.encoder
import logging
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from json.encoder import encode_basestring
from typing import Any

import orjson

from services.ingest.commands import job_id_for_key, request_hash, submit_record
from services.ingest.exceptions import JobRequestError
from services.ingest.settings import IngestSettings
from services.ingest.validation import (
    JOB_ID_PATTERN,
    MAX_EPOCH_MS,
    MAX_PAYLOAD_DEPTH,
    JobCreate,
    check_limits,
    parse_job_create,
    to_epoch_ms,
)
from streams.avro_writer import SplicedWriter, generate_spliced_writer
from streams.codec import SINGLE_OBJECT_MAGIC, Codec, RecordKind
from streams.exceptions import ConfigurationError, UnsupportedSchemaError

log = logging.getLogger(__name__)

_VARYING_REQUEST_FIELDS = frozenset({"job_id", "run_at", "payload", "payload_b64"})
_MAX_SHAPES = 1024
_JOB_ID = re.compile(JOB_ID_PATTERN)
_SCALARS = (str, int, float, bool, type(None))
_SCALAR_TYPES: frozenset[type] = frozenset(_SCALARS)
# Payload values orjson writes exactly as json.dumps does (floats differ: 1e16 vs 1e+16).
_PLAIN_SCALAR_TYPES: frozenset[type] = frozenset((str, int, bool, type(None)))
_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
# The C encoder json.dumps uses, built once instead of per call (saves ~1 us per job).
_C_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_CHUNKS = (
    None
    if _C_MAKE_ENCODER is None
    else _C_MAKE_ENCODER(None, None, encode_basestring, None, ":", ",", False, False, False)
)
# What commands.canonical_request dumps with: keys sorted, NaN allowed, not ASCII-only.
_CANONICAL = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))
_CANONICAL_CHUNKS = (
    None
    if _C_MAKE_ENCODER is None
    else _C_MAKE_ENCODER(None, None, encode_basestring, None, ":", ",", True, False, True)
)
# The Job fields that differ per job of a shape, and where the encoders read them from (the
# rest is encoded once per shape: streams.avro_writer.generate_spliced_writer).
_PER_JOB = ("job_id", "version", "payload", "run_at_ms", "created_at_ms", "updated_at_ms")
_PARAMS = ("job_id", "version", "payload", "run_at", "now_ms")
_SOURCES = {"run_at_ms": "run_at", "created_at_ms": "now_ms", "updated_at_ms": "now_ms"}
# A keyed create also sets its idempotency key and request hash.
_PER_KEYED_JOB = (*_PER_JOB, "idempotency_key", "request_hash")
_KEYED_PARAMS = (*_PARAMS, "key", "hash_of_request")
_KEYED_SOURCES = {**_SOURCES, "idempotency_key": "key", "request_hash": "hash_of_request"}
_NEW_SHAPE: Any = object()  # what the shape cache answers for a shape not seen yet


def _canonical_text(value: Any) -> str:
    """json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)."""
    if _CANONICAL_CHUNKS is None:
        return _CANONICAL.encode(value)
    return "".join(_CANONICAL_CHUNKS(value, 0))


def _json_text(value: Any) -> str:
    """json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))."""
    if _CHUNKS is None:
        return _JSON.encode(value)
    return "".join(_CHUNKS(value, 0))


# Shapes ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _KeyedShape:
    """What a keyed create of one shape adds: the job id's tenant, the constant part of the
    canonical request (as ``commands.canonical_request`` dumps it) and the encoded runs of
    the Job's constant fields around the key's."""

    tenant: str
    canonical_base: dict[str, Any]
    runs: tuple[bytes, ...]
    verified: list[bool]  # [False] until the first keyed job matched the slow path


@dataclass(frozen=True, slots=True)
class _Shape:
    """What is constant for all requests of one shape, validated once."""

    runs: tuple[bytes, ...]  # the encoded runs of the Job's constant fields
    has_run_at: bool
    depends_on: frozenset[str]
    cron_end_ms: int | None
    verified: list[bool]  # [False] until the first job matched the Codec byte for byte
    keyed: _KeyedShape | None = None


def _freeze(value: Any, levels: int = MAX_PAYLOAD_DEPTH) -> Any:
    """A hashable, type-exact stand-in for a JSON-like value (1, 1.0 and True differ).

    Raises TypeError (like an unhashable value) past ``levels`` of nesting, before
    recursing: such a request goes to pydantic, which names the field."""
    if isinstance(value, dict | list):
        if levels <= 0:
            raise TypeError("nested too deep for the fast path")
        if isinstance(value, dict):
            return (dict, tuple((k, _freeze(v, levels - 1)) for k, v in value.items()))
        return (list, tuple(_freeze(v, levels - 1) for v in value))
    return (type(value), value)


def _is_json(
    value: Any, scalars: frozenset[type] = _SCALAR_TYPES, below: int = MAX_PAYLOAD_DEPTH - 1
) -> bool:
    """True for plain JSON data: exact dict (str keys), list, and ``scalars`` (by default
    str, int, float, bool, None; :data:`_PLAIN_SCALAR_TYPES` leaves out floats, for what
    orjson writes byte for byte as json.dumps), nesting at most MAX_PAYLOAD_DEPTH lists and
    dicts (deeper is for pydantic to reject, naming the field).

    ``below`` is how many levels may nest inside ``value``; it is checked before recursing,
    and only for a container inside a container, so flat payloads pay nothing for it."""
    kind = type(value)
    if kind is dict:
        for k, v in value.items():
            if type(k) is not str or (
                type(v) not in scalars and (below <= 0 or not _is_json(v, scalars, below - 1))
            ):
                return False
        return True
    if kind is list:
        return all(
            type(v) in scalars or (below > 0 and _is_json(v, scalars, below - 1)) for v in value
        )
    return kind in scalars


# Byte i of a random UUID's bytes 6 and 8 mapped to its version (4) and variant (10xx) form.
_VERSION_4 = bytes((b & 0x0F) | 0x40 for b in range(256))
_VARIANT_RFC = bytes((b & 0x3F) | 0x80 for b in range(256))
# Where the 32 hex digits of a UUID go in its 36-character form (the rest are dashes).
_UUID_DIGITS = [p for p in range(36) if p not in (8, 13, 18, 23)]


def fast_job_ids(count: int) -> Iterator[str]:
    """Random (version 4) UUID strings, faster than ``uuid.uuid4()`` one at a time.

    All at once with C-level strided copies (~0.4 us per id instead of ~0.8 us formatting
    each): set the version and variant bits of every id's random bytes, hex them, then
    scatter the digits into dashed 36-character slots.
    """
    raw = bytearray(os.urandom(16 * count))
    raw[6::16] = raw[6::16].translate(_VERSION_4)
    raw[8::16] = raw[8::16].translate(_VARIANT_RFC)
    digits = binascii.hexlify(raw)
    text = bytearray(b"-" * (37 * count))
    for source, target in enumerate(_UUID_DIGITS):
        text[target::37] = digits[source::32]
    text[36::37] = b" " * count
    return iter(text.decode("ascii").split())


class BulkJobBuilder:
    """Turns create requests into (job_id, encoded Job) fast; falls back to pydantic."""

    def __init__(self, settings: IngestSettings, codec: Codec) -> None:
        self._settings = settings
        self._codec = codec
        self._plain = _job_writer(codec, _PER_JOB, _PARAMS, _SOURCES)
        self._keyed = _job_writer(codec, _PER_KEYED_JOB, _KEYED_PARAMS, _KEYED_SOURCES)
        # Only called while the fast path is on, i.e. with a plain encoder.
        self._plain_encode = self._plain.encode if self._plain is not None else _no_encoder
        self._shapes: dict[Any, _Shape | None] = {}
        self._grace_ms = int(settings.run_at_grace_s * 1000)
        self._max_payload = settings.max_payload_bytes
        if self._plain is None:
            log.warning(
                "no Job encoder for the schema's per-job fields; bulk loads use the slow path"
            )

    def build(self, request: Any, job_id: str, now_us: int) -> tuple[str, bytes]:
        """``request`` validated and encoded at version ``now_us``; raises JobRequestError."""
        if self._plain is not None and type(request) is dict:
            fast = self._fast(request, job_id, now_us, None)
            if fast is not None:
                return fast[0], fast[1]
        return self._slow(request, job_id, now_us)

    def build_all(
        self, requests: Sequence[Any], now_us: int
    ) -> tuple[list[str], list[tuple[bytes, bytes]], list[dict[str, Any]]]:
        """Every request validated and encoded (request ``i`` at version ``now_us + i``, so a
        later duplicate job id wins): their job ids, (key, value) records and errors, each
        error's ``loc`` starting with its request's index. One loop here instead of a
        ``build`` call per job (saves a call and a tuple per job at ~100K jobs/s)."""
        ids: list[str] = []
        records: list[tuple[bytes, bytes]] = []
        errors: list[dict[str, Any]] = []
        fast = self._fast if self._plain is not None else None
        fresh_ids = fast_job_ids(len(requests))
        for index, (request, fresh_id) in enumerate(zip(requests, fresh_ids, strict=True)):
            version = now_us + index
            built = (
                fast(request, fresh_id, version, None)
                if fast is not None and type(request) is dict
                else None
            )
            if built is None:
                try:
                    job_id, value = self._slow(request, fresh_id, version)
                except JobRequestError as exc:
                    errors.extend({**e, "loc": [index, *e["loc"]]} for e in exc.errors)
                    continue
            else:
                job_id, value, _ = built
            ids.append(job_id)
            records.append((job_id.encode(), value))
        return ids, records, errors

    def build_keyed(
        self, request: Any, idempotency_key: str, now_us: int
    ) -> tuple[str, bytes, str] | None:
        """A create with an Idempotency-Key on the fast path: (job id, encoded Job, request
        hash), equal to what ``creates.plan_create`` and ``encode_create`` give; None when
        the request needs the pydantic path (which also names any bad field)."""
        if (
            self._keyed is None
            or type(request) is not dict
            or "job_id" in request
            or "payload_b64" in request
        ):
            return None
        fast = self._fast(request, "", now_us, idempotency_key)
        if fast is None or fast[2] is None:
            return None
        return fast[0], fast[1], fast[2]

    def _slow_keyed(self, request: Any, key: str, now_us: int) -> tuple[str, bytes, str]:
        create = parse_job_create(request)
        check_limits(create, self._settings, now_us // 1000)
        job_id, hash_of_request = job_id_for_key(create.tenant, key), request_hash(create)
        record = submit_record(
            create,
            job_id=job_id,
            now_us=now_us,
            retry_defaults=self._settings.default_retry,
            idempotency_key=key,
            hash_of_request=hash_of_request,
        )
        return job_id, self._codec.encode(RecordKind.JOB, record), hash_of_request

    def _slow(self, request: Any, job_id: str, now_us: int) -> tuple[str, bytes]:
        create = parse_job_create(request)
        check_limits(create, self._settings, now_us // 1000)
        job_id = create.job_id or job_id
        record = submit_record(
            create, job_id=job_id, now_us=now_us, retry_defaults=self._settings.default_retry
        )
        return job_id, self._codec.encode(RecordKind.JOB, record)

    def _fast(
        self, request: dict[str, Any], job_id: str, now_us: int, key: str | None = None
    ) -> tuple[str, bytes, str | None] | None:
        """One job on the fast path, or None to defer to pydantic. Kept in one function on
        purpose: at ~100K jobs/s every call and attribute lookup shows in the profile.

        With an idempotency ``key`` the job id derives from it and the record carries the
        key and the request hash (returned third)."""
        try:
            shape_key = tuple(
                [
                    (k, v is not None)
                    if k in _VARYING_REQUEST_FIELDS
                    else (k, type(v), v)
                    if type(v) in _SCALAR_TYPES
                    else (k, _freeze(v))
                    for k, v in request.items()
                ]
            )
        except TypeError:  # something unhashable, e.g. a set: let pydantic say what is wrong
            return None
        shapes = self._shapes
        shape = shapes.get(shape_key, _NEW_SHAPE)  # one hash of the key, not two
        if shape is _NEW_SHAPE:
            shape = self._new_shape(request, shape_key, now_us)
        if shape is None:
            return None
        keyed = shape.keyed
        if key is not None:
            if keyed is None:
                return None
            job_id = job_id_for_key(keyed.tenant, key)
        now_ms = now_us // 1000
        given_id = request.get("job_id")
        if given_id is not None:
            if type(given_id) is not str or _JOB_ID.fullmatch(given_id) is None:
                return None
            job_id = given_id
        if shape.depends_on and job_id in shape.depends_on:
            return None
        run_at = None
        if shape.has_run_at:
            run_at = request["run_at"]
            if type(run_at) is str:
                try:
                    run_at = to_epoch_ms(run_at)
                except ValueError:
                    return None
            if (
                type(run_at) is not int
                or not now_ms - self._grace_ms <= run_at <= MAX_EPOCH_MS
                or run_at < 0
            ):
                return None
        if shape.cron_end_ms is not None and shape.cron_end_ms <= now_ms:
            return None
        payload = self._payload(request)
        if payload is None:
            return None
        size = len(payload)
        if size > self._max_payload:
            return None
        if key is None:
            hash_of_request = None
            encoded = self._plain_encode(shape.runs, job_id, now_us, payload, run_at, now_ms)
        else:
            if keyed is None or self._keyed is None:
                return None
            hash_of_request = self._request_hash(keyed, request, run_at)
            if hash_of_request is None:
                return None
            encoded = self._keyed.encode(
                keyed.runs, job_id, now_us, payload, run_at, now_ms, key, hash_of_request
            )
        if key is not None and keyed is not None:
            if not keyed.verified[0]:
                slow = self._slow_keyed(request, key, now_us)
                if slow != (job_id, encoded, hash_of_request):
                    log.error("keyed bulk encoder differs from the pydantic path for a job "
                              "shape; slow path used")  # fmt: skip
                    if shape_key in shapes:
                        shapes[shape_key] = replace(shape, keyed=None)
                    return None
                keyed.verified[0] = True
            return job_id, encoded, hash_of_request
        if not shape.verified[0]:
            if encoded != self._slow(request, job_id, now_us)[1]:
                log.error("bulk encoder differs from the Codec for a job shape; slow path used")
                self._shapes[shape_key] = None
                return None
            shape.verified[0] = True
        return job_id, encoded, None

    @staticmethod
    def _request_hash(
        keyed: _KeyedShape, request: dict[str, Any], run_at: int | None
    ) -> str | None:
        """``commands.request_hash`` of the request without pydantic: the shape's constant
        fields as pydantic dumped them, and the per-job ones as given (run_at normalised)."""
        body = dict(keyed.canonical_base)
        if "run_at" in request:
            body["run_at"] = run_at
        if "payload" in request:
            body["payload"] = request["payload"]
        try:
            text = _canonical_text(body).encode("utf-8")
        except (TypeError, ValueError, RecursionError):
            return None
        return hashlib.sha256(text).hexdigest()

    @staticmethod
    def _payload(request: dict[str, Any]) -> bytes | None:
        data = request.get("payload_b64")
        if data is not None:
            if request.get("payload") is not None or type(data) is not str:
                return None
            try:
                return base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                return None
        value = request.get("payload")
        if value is None:
            return b""
        if _is_json(value, _PLAIN_SCALAR_TYPES):
            try:
                return orjson.dumps(value)  # ~0.2 us instead of ~0.9 us
            except TypeError:  # ints beyond 64 bits, lone surrogates
                pass
        try:
            if not _is_json(value):
                return None
            return _json_text(value).encode("utf-8")
        except (TypeError, ValueError, RecursionError):  # also a lone surrogate's encode
            return None

    def _new_shape(self, request: dict[str, Any], key: Any, now_us: int) -> _Shape | None:
        """Validate a request's constant fields once (with stand-ins for the per-job ones)."""
        probe = {k: v for k, v in request.items() if k not in _VARYING_REQUEST_FIELDS}
        has_run_at = request.get("run_at") is not None
        if has_run_at:
            probe["run_at"] = now_us // 1000 + 86_400_000
        try:
            create = parse_job_create(probe)
            check_limits(create, self._settings, now_us // 1000)
            template = submit_record(
                create, job_id="shape", now_us=now_us, retry_defaults=self._settings.default_retry
            )
            assert self._plain is not None  # the fast path is off without it
            runs = self._plain.encode_runs(template)
            keyed = self._keyed_shape(create, template, has_run_at)
        except (JobRequestError, ValueError, KeyError, TypeError, AttributeError):
            shape = None
        else:
            shape = _Shape(
                runs,
                has_run_at,
                frozenset(create.depends_on or ()),
                create.cron.end if create.cron else None,
                [False],
                keyed,
            )
        if len(self._shapes) < _MAX_SHAPES:
            self._shapes[key] = shape
        return shape

    def _keyed_shape(
        self, create: JobCreate, template: dict[str, Any], has_run_at: bool
    ) -> _KeyedShape | None:
        """The keyed part of a shape, or None when the schema has no encoder for keyed jobs."""
        if self._keyed is None:
            return None
        base = create.model_dump(mode="json", exclude_unset=True)
        if has_run_at:
            del base["run_at"]  # the probe's stand-in; each job puts its own
        return _KeyedShape(create.tenant, base, self._keyed.encode_runs(template), [False])


def _no_encoder(*args: Any) -> bytes:
    raise AssertionError("the bulk path is off without a Job encoder")


def _job_writer(
    codec: Codec, per_job: tuple[str, ...], params: tuple[str, ...], sources: dict[str, str]
) -> SplicedWriter | None:
    """The Job encoder of a shape's runs and ``per_job`` fields spliced, generated from the
    codec's writer schema; None (the fast path steps aside) when it cannot be generated."""
    kind = RecordKind.JOB
    try:
        return generate_spliced_writer(
            codec.writer_schema(kind),
            per_job,
            prefix=SINGLE_OBJECT_MAGIC + codec.writer_fingerprint(kind),
            params=params,
            sources=sources,
            sequential=("version", "run_at_ms"),  # differ per job: no memo
        )
    except (UnsupportedSchemaError, ConfigurationError) as exc:
        log.warning("no generated Job encoder for %s: %s", per_job, exc)
        return None
