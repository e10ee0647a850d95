"""ExecutionResult bytes without fastavro on the hot path: two per execution.

:class:`ResultEncoder` encodes ExecutionResults with code generated from the codec's writer
schema (:func:`~streams.avro_writer.generate_writer`): a dict with every field, or a run's
STARTED and SUCCEEDED results as templates (:meth:`ResultEncoder.started`,
:meth:`ResultEncoder.succeeded`) whose ids, scheduled time, attempt and job version are the
DueEvent's own bytes (:class:`~services.executor.due_view.DueView`), whose status, reason,
error and worker id are encoded once, and whose times are encoded once per millisecond
(:class:`AvroClock`).

Exact or unused: at start-up it encodes probe records derived from the schemas
(:mod:`streams.probe_records`: every status, trigger, union branch, extreme longs), and the
templates of views of probe DueEvents, and compares them with ``Codec.encode``; if any
differs (the writer schema changed), it uses the codec for every record instead.
``tests/services/executor/test_service_outcomes.py`` and ``test_due_view.py`` check the bytes
against fastavro for random records.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from services.executor.due_view import DueReader, DueView
from streams import clock
from streams.avro_binary import avro_long
from streams.avro_writer import generate_writer
from streams.codec import SINGLE_OBJECT_MAGIC, Codec, RecordKind
from streams.exceptions import UnsupportedSchemaError
from streams.fast_path import FastPath
from streams.probe_records import probe_records as schema_probes
from streams.records import Trigger

# The fields a template takes from a DueView, already encoded (execution_id..job_id as one).
_FROM_VIEW: dict[str | tuple[str, str], str] = {
    ("execution_id", "job_id"): "view.raw_ids",
    "scheduled_for_ms": "view.raw_scheduled_for_ms",
    "attempt": "view.raw_attempt",
    "job_version": "view.raw_job_version",
}


class AvroClock:
    """The wall clock in epoch milliseconds and its Avro long, encoded once per millisecond."""

    __slots__ = ("ms", "raw")

    def __init__(self) -> None:
        self.ms = -1
        self.raw = b""

    def now(self) -> bytes:
        """Read the clock; returns the Avro encoding of the new :attr:`ms`."""
        ms = time.monotonic_ns() // 1_000_000 + clock.base_ms  # clock.now_ms(), inlined
        if ms != self.ms:
            self.ms = ms
            self.raw = avro_long(ms)
        return self.raw


class ResultEncoder:
    """Encodes ExecutionResult dicts exactly as ``codec`` does, faster when it can.

    With a ``worker_id``, :meth:`started` and :meth:`succeeded` splice a run's results
    from its DueEvent's bytes (only while :attr:`spliced`; else encode the dicts).
    """

    started: Callable[[DueView, bytes], bytes]
    """The STARTED result of ``view``'s attempt at ``now`` (Avro long epoch ms)."""
    succeeded: Callable[[DueView, bytes, bytes], bytes]
    """The SUCCEEDED result of an attempt that started at ``started`` and ended ``now``."""

    def __init__(self, codec: Codec, worker_id: str = "") -> None:
        self._codec = codec
        kind = RecordKind.EXECUTION_RESULT
        schema, header = codec.writer_schema(kind), codec.writer_fingerprint(kind)
        header = SINGLE_OBJECT_MAGIC + header
        triggers = {"kafkron.Trigger": range(len(Trigger))}  # a view holds the index
        try:
            self._encode = generate_writer(schema, attribute=False, prefix=header).encode
            self.started = generate_writer(
                schema,
                prefix=header,
                params=("view", "now"),
                sources={"trigger": "view.trigger"},
                encoded={**_FROM_VIEW, "started_at_ms": "now", "recorded_at_ms": "now"},
                constants=_outcome("STARTED", worker_id, finished=False),
                enum_values=triggers,
            ).encode
            self.succeeded = generate_writer(
                schema,
                prefix=header,
                params=("view", "started", "now"),
                sources={"trigger": "view.trigger"},
                encoded={
                    **_FROM_VIEW,
                    "started_at_ms": "started",
                    "finished_at_ms": "now",
                    "recorded_at_ms": "now",
                },
                constants=_outcome("SUCCEEDED", worker_id, finished=True),
                enum_values=triggers,
            ).encode
            self.spliced = self._agrees(worker_id)
        except (UnsupportedSchemaError, LookupError, AttributeError, TypeError, ValueError):
            self.spliced = False  # a schema it writes no code for, or fields the probes lack
        self.fast_path = FastPath(
            "the generated ExecutionResult encoder (services/executor/result_bytes.py)",
            self.spliced,
        )

    def encode(self, record: Mapping[str, Any]) -> bytes:
        """The single-object encoding of ``record`` (every field present, as outcomes builds)."""
        if self.spliced:
            return self._encode(record)
        self.fast_path.fell_back()
        return self._codec.encode(RecordKind.EXECUTION_RESULT, record)

    def _agrees(self, worker_id: str) -> bool:
        """Do the encoder and the templates write the probes' bytes as the codec does? The
        templates are tried on views of DueEvents covering every trigger and extreme numbers."""
        codec, kind = self._codec, RecordKind.EXECUTION_RESULT
        probes = schema_probes(codec.writer_schema(kind), codec.bounds)
        if any(self._encode(r) != codec.encode(kind, r) for r in probes):
            return False
        reader = DueReader(codec)
        for event in schema_probes(codec.writer_schema(RecordKind.DUE_EVENT), codec.bounds):
            view = reader.from_record(event, codec.encode(RecordKind.DUE_EVENT, event))
            echoed = {name: event[name] for name in _ECHOED}
            started, now = event["scheduled_for_ms"], event["emitted_at_ms"]
            expected = {
                **echoed,
                **_outcome("STARTED", worker_id, finished=False),
                "started_at_ms": started,
                "recorded_at_ms": started,
            }
            if self.started(view, avro_long(started)) != codec.encode(kind, expected):
                return False
            expected = {
                **echoed,
                **_outcome("SUCCEEDED", worker_id, finished=True),
                "started_at_ms": started,
                "finished_at_ms": now,
                "recorded_at_ms": now,
            }
            spliced = self.succeeded(view, avro_long(started), avro_long(now))
            if spliced != codec.encode(kind, expected):
                return False
        return True


_ECHOED = ("execution_id", "job_id", "scheduled_for_ms", "attempt", "trigger", "job_version")


def _outcome(status: str, worker_id: str, *, finished: bool) -> dict[str, Any]:
    """The fields a template fixes: the status, no reason or error, the worker, and no
    finish (STARTED) and no next attempt."""
    fixed: dict[str, Any] = {
        "status": status,
        "reason": None,
        "error": None,
        "worker_id": worker_id,
        "next_attempt_at_ms": None,
    }
    if not finished:
        fixed["finished_at_ms"] = None
    return fixed
