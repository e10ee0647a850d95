"""DueEvent bytes without a generic Avro encode per fire: a stored prefix plus a spliced tail.

A one-off's DueEvent is fully known when it is scheduled except ``emitted_at_ms``, which is
the second-to-last field of the schema (``history`` is last and empty on a first attempt).
The wheel stores the encoded record up to ``emitted_at_ms``; a fire appends the zig-zag
varint of now and the empty array. :class:`DueEventBytes` proves at start-up, with the
codec's own encoder, that this layout holds for the writer schema in use; when it does not
(a future schema adds a field after ``history``), splicing is switched off and every fire
encodes normally.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

from services.timer.policies import jitter_offset_ms
from streams.avro_binary import avro_long
from streams.codec import SINGLE_OBJECT_MAGIC, Codec, RecordKind
from streams.fast_path import FastPath
from streams.identity import execution_id

_EMPTY_ARRAY = b"\x00"
_PROBE_EMITTED_MS = 1_780_000_000_123


def fire_at_ms(job: Mapping[str, Any], tick_ms: int) -> int:
    """When ``tick_ms`` of ``job`` fires: the tick plus the execution's deterministic jitter."""
    jitter_ms: int = job["jitter_ms"]
    if jitter_ms <= 0:
        return tick_ms
    return tick_ms + jitter_offset_ms(execution_id(job["job_id"], tick_ms), jitter_ms)


def due_event_record(
    job: Mapping[str, Any],
    tick_ms: int,
    fire_at_ms: int,
    trigger: str,
    emitted_at_ms: int,
    execution_id: str,
) -> dict[str, Any]:
    """The first attempt's DueEvent of ``job`` (a decoded Job dict) for ``tick_ms``."""
    return {
        "execution_id": execution_id,
        "job_id": job["job_id"],
        "job_version": job["version"],
        "scheduled_for_ms": tick_ms,
        "fire_at_ms": fire_at_ms,
        "attempt": 1,
        "handler": job["handler"],
        "payload": job["payload"],
        "timeout_ms": job["timeout_ms"],
        "priority": job["priority"],
        "retry": job["retry"],
        "trigger": trigger,
        "tenant": job["tenant"],
        "emitted_at_ms": emitted_at_ms,
        "history": [],
    }


_PRIORITIES = ("HIGH", "NORMAL", "LOW")
_TRIGGERS = ("SCHEDULE", "MANUAL", "RETRY", "REPLAY", "DAG", "BACKFILL")
_PRIORITY_BYTES = {name: avro_long(i) for i, name in enumerate(_PRIORITIES)}
_TRIGGER_BYTES = {name: avro_long(i) for i, name in enumerate(_TRIGGERS)}
_DOUBLE = struct.Struct("<d")


def _avro_text(value: str | bytes) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return avro_long(len(data)) + data


def hand_prefix(header: bytes, record: Mapping[str, Any]) -> bytes:
    """``record`` encoded by hand up to ``emitted_at_ms``, field by field as DueEvent v1 says.

    About three times cheaper than a generic encode; :class:`DueEventBytes` uses it only
    after proving it equal to the codec's bytes at start-up.
    """
    return b"".join(
        (
            header,
            _avro_text(record["execution_id"]),
            _avro_text(record["job_id"]),
            avro_long(record["job_version"]),
            avro_long(record["scheduled_for_ms"]),
            avro_long(record["fire_at_ms"]),
            _job_part(record),
        )
    )


def _job_part(record: Mapping[str, Any]) -> bytes:
    """The fields from ``attempt`` to ``tenant``: what the jobs of one kind share."""
    retry = record["retry"]
    return b"".join(
        (
            avro_long(record["attempt"]),
            _avro_text(record["handler"]),
            _avro_text(record["payload"]),
            avro_long(record["timeout_ms"]),
            _PRIORITY_BYTES[record["priority"]],
            avro_long(retry["max_attempts"]),
            avro_long(retry["initial_backoff_ms"]),
            _DOUBLE.pack(retry["multiplier"]),
            avro_long(retry["max_backoff_ms"]),
            _DOUBLE.pack(retry["jitter_ratio"]),
            _TRIGGER_BYTES[record["trigger"]],
            _avro_text(record["tenant"]),
        )
    )


_MAX_CACHED_PAYLOAD = 256
_MAX_CACHED_PARTS = 4096


class DueEventBytes:
    """Builds stored DueEvent prefixes and the per-instant tail that completes them."""

    def __init__(self, codec: Codec) -> None:
        self._codec = codec
        self._header = SINGLE_OBJECT_MAGIC + codec.writer_fingerprint(RecordKind.DUE_EVENT)
        self.spliceable = self._layout_holds(self._codec_prefix)
        self.hand_encoded = self.spliceable and self._layout_holds(self._hand_prefix)
        self.fast_path = FastPath(
            "the hand-encoded DueEvent prefixes (services/timer/due_bytes.py)", self.hand_encoded
        )
        self._tail_ms = -1
        self._tail = b""
        # Encoded attempt..tenant by their values: a bulk load's jobs share handler, retry
        # policy and tenant, so a create encodes only its ids and times (~4x cheaper).
        self._parts: dict[tuple[Any, ...], bytes] = {}
        self._last_scheduled_ms: int | None = None
        self._last_scheduled = b""

    def prefix(self, record: Mapping[str, Any]) -> bytes:
        """The encoded ``record`` up to (not including) ``emitted_at_ms``; needs ``spliceable``."""
        if not self.hand_encoded:
            return self._codec_prefix(record)
        return self._spliced(
            record["execution_id"],
            record["job_id"],
            record["job_version"],
            record["scheduled_for_ms"],
            record["fire_at_ms"],
            self._part(record, record["attempt"], record["trigger"]),
        )

    def first_attempt_prefix(
        self, job: Mapping[str, Any], tick_ms: int, fire_at_ms: int, trigger: str
    ) -> bytes:
        """:meth:`prefix` of ``due_event_record(job, tick_ms, fire_at_ms, trigger, ...)``."""
        exec_id = execution_id(job["job_id"], tick_ms)
        if not self.hand_encoded:
            return self._codec_prefix(
                due_event_record(job, tick_ms, fire_at_ms, trigger, 0, exec_id)
            )
        part = self._part(job, 1, trigger)
        return self._spliced(exec_id, job["job_id"], job["version"], tick_ms, fire_at_ms, part)

    def _part(self, fields: Mapping[str, Any], attempt: int, trigger: str) -> bytes:
        """The encoded ``attempt`` to ``tenant`` (cached by value: see ``_parts``)."""
        payload = fields["payload"]
        if len(payload) > _MAX_CACHED_PAYLOAD:
            return _job_part({**fields, "attempt": attempt, "trigger": trigger})
        retry = fields["retry"]
        multiplier, jitter_ratio = retry["multiplier"], retry["jitter_ratio"]
        if not (multiplier and jitter_ratio):  # 0.0 == -0.0 but their bytes differ
            multiplier, jitter_ratio = _DOUBLE.pack(multiplier), _DOUBLE.pack(jitter_ratio)
        key = (
            attempt,
            fields["handler"],
            payload,
            fields["timeout_ms"],
            fields["priority"],
            retry["max_attempts"],
            retry["initial_backoff_ms"],
            multiplier,
            retry["max_backoff_ms"],
            jitter_ratio,
            trigger,
            fields["tenant"],
        )
        part = self._parts.get(key)
        if part is None:
            if len(self._parts) >= _MAX_CACHED_PARTS:
                self._parts.clear()
            part = self._parts[key] = _job_part({**fields, "attempt": attempt, "trigger": trigger})
        return part

    def _spliced(
        self,
        exec_id: str,
        job_id: str,
        version: int,
        scheduled_ms: int,
        fire_ms: int,
        part: bytes,
    ) -> bytes:
        if scheduled_ms == self._last_scheduled_ms:  # a herd or a cron tick shares it
            scheduled = self._last_scheduled
        else:
            scheduled = avro_long(scheduled_ms)
            self._last_scheduled_ms, self._last_scheduled = scheduled_ms, scheduled
        return b"".join(
            (
                self._header,
                _avro_text(exec_id),
                _avro_text(job_id),
                avro_long(version),
                scheduled,
                scheduled if fire_ms == scheduled_ms else avro_long(fire_ms),
                part,
            )
        )

    def tail(self, emitted_at_ms: int) -> bytes:
        """The bytes that complete a prefix for a fire at ``emitted_at_ms`` (cached per ms)."""
        if emitted_at_ms != self._tail_ms:
            self._tail = avro_long(emitted_at_ms) + _EMPTY_ARRAY
            self._tail_ms = emitted_at_ms
        return self._tail

    def _codec_prefix(self, record: Mapping[str, Any]) -> bytes:
        encoded = self._codec.encode(
            RecordKind.DUE_EVENT, {**record, "emitted_at_ms": 0, "history": []}
        )
        return encoded[:-2]  # avro_long(0) and the empty history are one byte each

    def _hand_prefix(self, record: Mapping[str, Any]) -> bytes:
        return hand_prefix(self._header, record)

    def _layout_holds(self, prefix: Callable[[Mapping[str, Any]], bytes]) -> bool:
        """Does ``prefix`` + tail equal the codec's bytes, for every priority and trigger?"""
        for priority in _PRIORITIES:
            for trigger in _TRIGGERS:
                probe = _probe(priority, trigger)
                whole = self._codec.encode(RecordKind.DUE_EVENT, probe)
                if whole != prefix(probe) + avro_long(_PROBE_EMITTED_MS) + _EMPTY_ARRAY:
                    return False
        return True


def _probe(priority: str, trigger: str) -> dict[str, Any]:
    job = {
        "job_id": "probe-é",
        "version": 7,
        "handler": "probe.handler",
        "payload": b"\x00\x01",
        "timeout_ms": 1000,
        "priority": priority,
        "retry": {
            "max_attempts": 3,
            "initial_backoff_ms": 1000,
            "multiplier": 2.5,
            "max_backoff_ms": 300_000,
            "jitter_ratio": 0.1,
        },
        "tenant": "t",
    }
    return due_event_record(job, -1, 2**40, trigger, _PROBE_EMITTED_MS, "probe-é@-1")
