"""A Job record reader 2-4x cheaper than the generic codec, for hot loops that decode Jobs.

The timer decodes every create it takes in; fastavro's generic reader costs ~14 us for a
Job (27 fields, unions, a nested record, a map). :class:`JobReader` reads the Job schema
it was written for field by field, and caches decoded fields by their bytes: the fields
from ``status`` to ``request_hash`` but ``run_at_ms`` (what the one-offs of one bulk load or
the jobs of one cron schedule share: they differ in id, version, run time and stamps), and
within them ``priority`` to ``request_hash``. A cached entry is keyed by bytes that once
parsed to exactly those fields, so equal bytes at the same place parse the same.

It is exact or unused: it serves only records whose fingerprint is the codec's writer
schema for Job when that schema is also the reader schema (no resolution), and only after
proving, at construction, that it decodes probe records exactly as the codec does. Any
other record, and any record it cannot parse or cannot be sure of (a varint longer than 9
bytes: see :func:`~streams.avro_binary.read_long`), goes to :meth:`Codec.decode` (which
raises the usual :class:`DecodeError` for garbage).
"""

from __future__ import annotations

import struct
from typing import Any

from streams.avro_binary import read_long
from streams.bounds import Check
from streams.codec import HEADER_LEN, Codec, RecordKind
from streams.exceptions import DecodeError, InvalidRecordError
from streams.fast_path import FastPath

_STATUS = ("SCHEDULED", "PAUSED", "CANCELLED", "COMPLETED")
_PRIORITY = ("HIGH", "NORMAL", "LOW")
_OVERLAP = ("SKIP", "QUEUE_ONE", "ALLOW", "REPLACE")
_CATCHUP = ("ALL", "LATEST", "NONE")
_FOLD = ("AUTO", "FIRST", "EVERY")
_DOUBLE = struct.Struct("<d").unpack_from
_MAX_CACHED = 4096
_MAX_CACHED_BYTES = 512


def _text(data: bytes, pos: int) -> tuple[str, int]:
    size, pos = read_long(data, pos)
    if size < 0:
        raise ValueError("negative string length")
    end = pos + size
    if end > len(data):
        raise ValueError("string past the end")
    return data[pos:end].decode(), end


def _blob(data: bytes, pos: int) -> tuple[bytes, int]:
    size, pos = read_long(data, pos)
    if size < 0:
        raise ValueError("negative bytes length")
    end = pos + size
    if end > len(data):
        raise ValueError("bytes past the end")
    return data[pos:end], end


def _optional_long(data: bytes, pos: int) -> tuple[int | None, int]:
    branch = data[pos]
    if branch == 0:
        return None, pos + 1
    if branch != 2:
        raise ValueError("bad union branch")
    return read_long(data, pos + 1)


def _optional_text(data: bytes, pos: int) -> tuple[str | None, int]:
    branch = data[pos]
    if branch == 0:
        return None, pos + 1
    if branch != 2:
        raise ValueError("bad union branch")
    return _text(data, pos + 1)


def _block_count(data: bytes, pos: int) -> tuple[int, int]:
    count, pos = read_long(data, pos)
    if count < 0:  # a negative count is followed by the block's size in bytes
        _, pos = read_long(data, pos)
        count = -count
    return count, pos


def _texts(data: bytes, pos: int) -> tuple[list[str], int]:
    items: list[str] = []
    count, pos = _block_count(data, pos)
    while count:
        for _ in range(count):
            item, pos = _text(data, pos)
            items.append(item)
        count, pos = _block_count(data, pos)
    return items, pos


def _text_map(data: bytes, pos: int) -> tuple[dict[str, str], int]:
    items: dict[str, str] = {}
    count, pos = _block_count(data, pos)
    while count:
        for _ in range(count):
            key, pos = _text(data, pos)
            items[key], pos = _text(data, pos)
        count, pos = _block_count(data, pos)
    return items, pos


def _enum(symbols: tuple[str, ...], data: bytes, pos: int) -> tuple[str, int]:
    index, pos = read_long(data, pos)
    if index < 0:
        raise ValueError("negative enum index")
    return symbols[index], pos


def _cron(data: bytes, pos: int) -> tuple[dict[str, Any] | None, int]:
    branch = data[pos]
    pos += 1
    if branch == 0:
        return None, pos
    if branch != 2:
        raise ValueError("bad union branch")
    expression, pos = _text(data, pos)
    timezone, pos = _text(data, pos)
    start_ms, pos = _optional_long(data, pos)
    end_ms, pos = _optional_long(data, pos)
    fold, pos = _enum(_FOLD, data, pos)
    cron = {
        "expression": expression,
        "timezone": timezone,
        "start_ms": start_ms,
        "end_ms": end_ms,
        "fold_policy": fold,
    }
    return cron, pos


def _shared_fields(data: bytes, pos: int) -> tuple[dict[str, Any], int]:
    """Fields ``priority`` to ``request_hash``, the part the jobs of one load share."""
    priority, pos = _enum(_PRIORITY, data, pos)
    timeout_ms, pos = read_long(data, pos)
    max_attempts, pos = read_long(data, pos)
    initial_backoff_ms, pos = read_long(data, pos)
    multiplier = _DOUBLE(data, pos)[0]
    max_backoff_ms, pos = read_long(data, pos + 8)
    jitter_ratio = _DOUBLE(data, pos)[0]
    overlap, pos = _enum(_OVERLAP, data, pos + 8)
    catchup, pos = _enum(_CATCHUP, data, pos)
    catchup_window_ms, pos = read_long(data, pos)
    jitter_ms, pos = read_long(data, pos)
    tenant, pos = _text(data, pos)
    labels, pos = _text_map(data, pos)
    manual_fire_at_ms, pos = _optional_long(data, pos)
    idempotency_key, pos = _optional_text(data, pos)
    request_hash, pos = _optional_text(data, pos)
    fields = {
        "priority": priority,
        "timeout_ms": timeout_ms,
        "retry": {
            "max_attempts": max_attempts,
            "initial_backoff_ms": initial_backoff_ms,
            "multiplier": multiplier,
            "max_backoff_ms": max_backoff_ms,
            "jitter_ratio": jitter_ratio,
        },
        "overlap": overlap,
        "catchup": catchup,
        "catchup_window_ms": catchup_window_ms,
        "jitter_ms": jitter_ms,
        "tenant": tenant,
        "labels": labels,
        "manual_fire_at_ms": manual_fire_at_ms,
        "idempotency_key": idempotency_key,
        "request_hash": request_hash,
    }
    return fields, pos


def _remember(cache: dict[Any, dict[str, Any]], key: Any, fields: dict[str, Any]) -> None:
    if len(cache) >= _MAX_CACHED:
        cache.clear()  # bounded; a load of one shape refills it at once
    cache[key] = fields


def _skip_status_handler_payload(data: bytes, pos: int) -> int:
    """Where ``run_at_ms`` starts, skipping ``status``, ``handler`` and ``payload`` unread."""
    _, pos = read_long(data, pos)
    size, pos = read_long(data, pos)
    size, pos = read_long(data, pos + size)
    return pos + size


def _last_two_longs_start(data: bytes) -> int:
    """Where the last two varints (``created_at_ms``, ``updated_at_ms``) seem to start.

    Scanning back over continuation bytes; wrong only when the byte before them is a
    string's non-ASCII last byte, which the shared-fields cache then simply misses.
    """
    pos = len(data) - 2
    while pos > HEADER_LEN and data[pos] & 0x80:  # updated_at_ms's leading bytes
        pos -= 1
    pos -= 1  # before created_at_ms's last byte
    while pos > HEADER_LEN and data[pos] & 0x80:  # created_at_ms's leading bytes
        pos -= 1
    return pos + 1


# Fields per record (the rest is a cached body's), and the schedule kinds with them so that
# the one-schedule-kind rule is checked per record.
_RECORD_FIELDS = (
    "job_id", "version", "run_at_ms", "created_at_ms", "updated_at_ms", "cron", "depends_on"
)  # fmt: skip
_BODY_FIELDS = (
    "status", "handler", "payload", "cron", "depends_on", "priority", "timeout_ms", "retry",
    "overlap", "catchup", "catchup_window_ms", "jitter_ms", "tenant", "labels",
    "manual_fire_at_ms", "idempotency_key", "request_hash",
)  # fmt: skip


def _raise_if_invalid(reason: str | None) -> None:
    if reason is not None:
        raise InvalidRecordError(reason)


class JobReader:
    """Decodes Job records like ``codec.decode(RecordKind.JOB, data)``, faster (see module)."""

    def __init__(self, codec: Codec) -> None:
        self._codec = codec
        self._fingerprint = codec.writer_fingerprint(RecordKind.JOB)
        # Decoded fields by their bytes: ``version`` to ``request_hash`` (jobs that differ
        # only in id and stamps: a herd, cron jobs), and ``priority`` to ``request_hash``.
        self._bodies: dict[tuple[bytes, bytes], dict[str, Any]] = {}
        self._shared: dict[bytes, dict[str, Any]] = {}
        # Bytes of the last record's two stamps (None: none yet) and their values.
        self._last_stamps: bytes | None = None
        self._last_stamp_values = (0, 0)
        self.enabled = self._resolution_free() and self._proven()
        self.fast_path = FastPath("the fast Job reader (streams/job_reader.py)", self.enabled)
        # The bounds (schemas/bounds.json) of the fields a cached body holds are checked when
        # the body is parsed, the rest per record.
        name = codec.record_name(RecordKind.JOB)
        self._check_body: Check | None = codec.bounds.checker(name, fields=_BODY_FIELDS)
        self._check_record: Check | None = codec.bounds.checker(name, fields=_RECORD_FIELDS)

    def decode(self, data: bytes) -> dict[str, Any]:
        """The Job in ``data``; raises :class:`DecodeError` when it is not one, and its
        subclass :class:`InvalidRecordError` when it breaks a bound (``schemas/bounds.json``)."""
        if self.enabled and data[2:HEADER_LEN] == self._fingerprint and data[:2] == b"\xc3\x01":
            try:
                return self._read(data, self._check_body, self._check_record)
            except (IndexError, ValueError, struct.error):
                pass  # the codec names what is wrong with it
        self.fast_path.fell_back()
        return self._codec.decode(RecordKind.JOB, data)

    def _read(
        self, data: bytes, check_body: Check | None = None, check_record: Check | None = None
    ) -> dict[str, Any]:
        job_id, pos = _text(data, HEADER_LEN)
        version, pos = read_long(data, pos)  # ingest versions creates by their microsecond
        split = _last_two_longs_start(data)
        # The body key is every byte from status to request_hash but run_at_ms's, so the
        # one-offs of one shape share it whatever their run times.
        run_at_pos = _skip_status_handler_payload(data, pos)
        run_at_ms, after_run_at = _optional_long(data, run_at_pos)
        body_key = (data[pos:run_at_pos], data[after_run_at:split])
        body = self._bodies.get(body_key)
        if body is None:
            body, parsed_run_at, end = self._body(data, pos, split)
            if check_body is not None:
                _raise_if_invalid(check_body(body))
            # Cache only bytes known to parse to exactly these fields (see the module doc).
            if (
                end == split
                and parsed_run_at == (run_at_pos, after_run_at)
                and len(body_key[0]) + len(body_key[1]) <= _MAX_CACHED_BYTES
            ):
                _remember(self._bodies, body_key, body)
        else:
            end = split
        stamps = data[end:]
        if stamps == self._last_stamps:  # a bulk load stamps its jobs with its millisecond
            created_at_ms, updated_at_ms = self._last_stamp_values
        else:
            created_at_ms, end = read_long(data, end)
            updated_at_ms, end = read_long(data, end)
            if end != len(data):
                raise ValueError("bytes left after the record")
            self._last_stamps = stamps
            self._last_stamp_values = (created_at_ms, updated_at_ms)
        job = {"job_id": job_id, "version": version, **body}
        job["run_at_ms"] = run_at_ms
        job["created_at_ms"] = created_at_ms
        job["updated_at_ms"] = updated_at_ms
        # Fresh containers per record, as the codec returns: callers may mutate theirs.
        if job["cron"] is not None:
            job["cron"] = dict(job["cron"])
        job["depends_on"] = list(job["depends_on"])
        job["retry"] = dict(job["retry"])
        job["labels"] = dict(job["labels"])
        if check_record is not None:
            _raise_if_invalid(check_record(job))
        return job

    def _body(
        self, data: bytes, pos: int, split: int
    ) -> tuple[dict[str, Any], tuple[int, int], int]:
        """Fields ``status`` to ``request_hash`` but ``run_at_ms`` from ``pos``, where
        ``run_at_ms`` was (start, end), and the position after ``request_hash``."""
        status, pos = _enum(_STATUS, data, pos)
        handler, pos = _text(data, pos)
        payload, pos = _blob(data, pos)
        run_at_pos = pos
        _, pos = _optional_long(data, pos)
        run_at = (run_at_pos, pos)
        cron, pos = _cron(data, pos)
        if data[pos] == 0:
            depends_on: list[str] = []
            pos += 1
        else:
            depends_on, pos = _texts(data, pos)
        shared_key = data[pos:split]
        shared = self._shared.get(shared_key)
        if shared is None:
            shared, end = _shared_fields(data, pos)
            if end == split and len(shared_key) <= _MAX_CACHED_BYTES:
                _remember(self._shared, shared_key, shared)
        else:
            end = split
        body = {
            "status": status,
            "handler": handler,
            "payload": payload,
            "run_at_ms": None,  # per record (keeps the schema's field order)
            "cron": cron,
            "depends_on": depends_on,
            **shared,
        }
        return body, run_at, end

    def _resolution_free(self) -> bool:
        """True when Job records of the writer schema decode without schema resolution."""
        return self._codec.writer_version(RecordKind.JOB) == self._codec.reader_version(
            RecordKind.JOB
        )

    def _proven(self) -> bool:
        """Do probe records covering every branch decode exactly as the codec decodes them?"""
        try:
            for probe in _probes():
                data = self._codec.encode(RecordKind.JOB, probe)
                for _ in range(3):  # the second and third reads come from the caches
                    if self._read(data) != self._codec.decode(RecordKind.JOB, data, check=False):
                        return False
        except (DecodeError, IndexError, ValueError, KeyError, struct.error):
            return False
        finally:
            self._bodies.clear()
            self._shared.clear()
            self._last_stamps = None
        return True


def _probes() -> list[dict[str, Any]]:
    base: dict[str, Any] = {
        "job_id": "probe-é",
        "version": 7,
        "status": "PAUSED",
        "handler": "probe.handler",
        "payload": b"\x00\x01\xff",
        "run_at_ms": 1_780_000_000_123,
        "cron": None,
        "depends_on": [],
        "priority": "LOW",
        "timeout_ms": 60_000,
        "retry": {
            "max_attempts": 3,
            "initial_backoff_ms": 1000,
            "multiplier": 2.5,
            "max_backoff_ms": 300_000,
            "jitter_ratio": -0.0,
        },
        "overlap": "QUEUE_ONE",
        "catchup": "NONE",
        "catchup_window_ms": 86_400_000,
        "jitter_ms": 250,
        "tenant": "t",
        "labels": {},
        "manual_fire_at_ms": None,
        "idempotency_key": None,
        "request_hash": None,
        "created_at_ms": 1_780_000_000_000,
        "updated_at_ms": -5,
    }
    cron = {
        "expression": "*/5 * * * *",
        "timezone": "Europe/Berlin",
        "start_ms": 1,
        "end_ms": None,
        "fold_policy": "EVERY",
    }
    return [
        base,
        {
            **base,
            "status": "CANCELLED",
            "run_at_ms": None,
            "cron": cron,
            "depends_on": ["a", "bé"],
            "priority": "HIGH",
            "overlap": "REPLACE",
            "labels": {"k": "v", "é": ""},
            "manual_fire_at_ms": 3,
            "idempotency_key": "key",
            "request_hash": "hashé",
        },
    ]
