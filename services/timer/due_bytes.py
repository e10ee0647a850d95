"""DueEvent bytes without a generic Avro encode per fire: a stored prefix plus a spliced tail.

A one-off's DueEvent is fully known when it is scheduled except ``emitted_at_ms``, which is
the second-to-last field of the schema (``history`` is last and empty on a first attempt).
The wheel stores the encoded record up to ``emitted_at_ms``; a fire appends the zig-zag
varint of now and the empty array. The prefixes are written by encoders generated from the
writer schema's fields before ``emitted_at_ms`` (:func:`~streams.avro_writer.generate_writer`),
the fields the jobs of one kind share (``attempt`` to ``tenant``) encoded once per values.
:class:`DueEventBytes` proves at start-up, with the codec's own encoder, that this layout
holds for the writer schema in use; when it does not (a future schema adds a field after
``history``), splicing is switched off and every fire encodes normally; when only the
generated encoders disagree, prefixes come from the codec.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from services.timer.policies import jitter_offset_ms
from streams.avro_binary import avro_long
from streams.avro_writer import generate_writer
from streams.codec import SINGLE_OBJECT_MAGIC, Codec, RecordKind
from streams.exceptions import ConfigurationError, UnsupportedSchemaError
from streams.fast_path import FastPath
from streams.identity import execution_id
from streams.probe_records import probe_records

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


# What the jobs of one kind share, encoded once per values (a bulk load's jobs share handler,
# retry policy and tenant: a create then encodes only its ids and times).
_SHARED_RUN = ("attempt", "tenant")
# The first attempt's fields as a template reads them: from the Job dict and the arguments.
_FIRST_ATTEMPT = {
    "execution_id": "exec_id",
    "job_version": "job['version']",
    "scheduled_for_ms": "tick_ms",
    "fire_at_ms": "fire_ms",
    "trigger": "trigger",
}


class DueEventBytes:
    """Builds stored DueEvent prefixes and the per-instant tail that completes them."""

    def __init__(self, codec: Codec) -> None:
        self._codec = codec
        self._prefix, self._first_attempt = self._generated()
        self.spliceable = self._layout_holds(self._codec_prefix)
        self.generated = (
            self.spliceable and self._prefix is not None and self._layout_holds(self._prefix)
        )
        self.fast_path = FastPath(
            "the generated DueEvent prefixes (services/timer/due_bytes.py)", self.generated
        )
        self._tail_ms = -1
        self._tail = b""

    def prefix(self, record: Mapping[str, Any]) -> bytes:
        """The encoded ``record`` up to (not including) ``emitted_at_ms``; needs ``spliceable``."""
        if self._prefix is None or not self.generated:
            return self._codec_prefix(record)
        return self._prefix(record)

    def first_attempt_prefix(
        self, job: Mapping[str, Any], tick_ms: int, fire_at_ms: int, trigger: str
    ) -> bytes:
        """:meth:`prefix` of ``due_event_record(job, tick_ms, fire_at_ms, trigger, ...)``."""
        exec_id = execution_id(job["job_id"], tick_ms)
        if self._first_attempt is None or not self.generated:
            return self._codec_prefix(
                due_event_record(job, tick_ms, fire_at_ms, trigger, 0, exec_id)
            )
        return self._first_attempt(job, exec_id, tick_ms, fire_at_ms, trigger)

    def tail(self, emitted_at_ms: int) -> bytes:
        """The bytes that complete a prefix for a fire at ``emitted_at_ms`` (cached per ms)."""
        if emitted_at_ms != self._tail_ms:
            self._tail = avro_long(emitted_at_ms) + _EMPTY_ARRAY
            self._tail_ms = emitted_at_ms
        return self._tail

    def _generated(self) -> tuple[Callable[..., bytes] | None, Callable[..., bytes] | None]:
        """The encoders of a DueEvent up to ``emitted_at_ms``, generated from the writer
        schema: of a record dict, and of a first attempt from its Job; None when the schema
        has what they cannot write."""
        schema = self._codec.writer_schema(RecordKind.DUE_EVENT)
        names = [str(f["name"]) for f in schema["fields"]]
        if "emitted_at_ms" not in names or not set(_SHARED_RUN) <= set(names):
            return None, None
        head = {**schema, "fields": schema["fields"][: names.index("emitted_at_ms")]}
        header = SINGLE_OBJECT_MAGIC + self._codec.writer_fingerprint(RecordKind.DUE_EVENT)
        try:
            prefix = generate_writer(head, attribute=False, prefix=header, memos=[_SHARED_RUN])
            first_attempt = generate_writer(
                head,
                attribute=False,
                prefix=header,
                params=("job", "exec_id", "tick_ms", "fire_ms", "trigger"),
                sources=_FIRST_ATTEMPT,
                constants={"attempt": 1},
                memos=[_SHARED_RUN],
            )
        except (UnsupportedSchemaError, ConfigurationError):
            return None, None
        return prefix.encode, first_attempt.encode

    def _codec_prefix(self, record: Mapping[str, Any]) -> bytes:
        encoded = self._codec.encode(
            RecordKind.DUE_EVENT, {**record, "emitted_at_ms": 0, "history": []}
        )
        return encoded[:-2]  # avro_long(0) and the empty history are one byte each

    def _layout_holds(self, prefix: Callable[[Mapping[str, Any]], bytes]) -> bool:
        """Does ``prefix`` + tail equal the codec's bytes, for DueEvents of every priority,
        trigger and extreme value (the probe records of the schema), and (generated) a first
        attempt's prefix of a Job's probes, for every trigger, the prefix of its record?"""
        codec, kind = self._codec, RecordKind.DUE_EVENT
        tail = avro_long(_PROBE_EMITTED_MS) + _EMPTY_ARRAY
        try:
            events = probe_records(codec.writer_schema(kind), codec.bounds)
            for event in events:
                probe = {**event, "emitted_at_ms": _PROBE_EMITTED_MS, "history": []}
                if codec.encode(kind, probe) != prefix(probe) + tail:
                    return False
            if prefix is not self._prefix or self._first_attempt is None:
                return True
            jobs = probe_records(codec.writer_schema(RecordKind.JOB), codec.bounds)
            for job in jobs:
                for trigger in dict.fromkeys(event["trigger"] for event in events):
                    exec_id = execution_id(job["job_id"], -1)
                    record = due_event_record(job, -1, 2**40, trigger, _PROBE_EMITTED_MS, exec_id)
                    whole = codec.encode(kind, record)
                    first = self._first_attempt(job, exec_id, -1, 2**40, trigger)
                    if first != whole[: -len(tail)]:
                        return False
        except (LookupError, AttributeError, TypeError, ValueError):
            return False  # fields the generated code does not have
        return True
