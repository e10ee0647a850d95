"""ExecutionResult bytes without fastavro on the hot path: two per execution.

:class:`ResultEncoder` writes the Avro single-object encoding of an ExecutionResult field by
field, in the layout of ``execution_result.v1.avsc``. At start-up it encodes probe records
covering every status, trigger and null/non-null union branch both ways and compares them
with ``Codec.encode``; if any differs (the writer schema changed), it uses the codec for
every record instead. ``tests/services/executor/test_service_outcomes.py`` checks the bytes
against fastavro for random records.

The STARTED and SUCCEEDED results of a run are spliced from a template instead
(:meth:`ResultEncoder.started`, :meth:`ResultEncoder.succeeded`): the ids, scheduled time,
attempt and job version are the DueEvent's own bytes (:class:`~services.executor.due_view.
DueView`), the worker id is encoded once, and the time once per millisecond
(:class:`AvroClock`). ``tests/services/executor/test_due_view.py`` checks them against
``started_result`` / ``attempt_outputs`` encoded by fastavro.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from streams.avro_binary import avro_long, avro_string
from streams.codec import SINGLE_OBJECT_MAGIC, Codec, RecordKind
from streams.fast_path import FastPath
from streams.records import ExecutionStatus, Trigger
from streams.result_probes import result_probes

if TYPE_CHECKING:
    from services.executor.due_view import DueView

_NULL = b"\x00"
_SOME = b"\x02"  # union branch 1, zig-zag encoded


def _optional_string(value: str | None) -> bytes:
    return _NULL if value is None else _SOME + avro_string(value)


def _optional_long(value: int | None) -> bytes:
    return _NULL if value is None else _SOME + avro_long(value)


class AvroClock:
    """The wall clock in epoch milliseconds and its Avro long, encoded once per millisecond."""

    __slots__ = ("ms", "raw")

    def __init__(self) -> None:
        self.ms = -1
        self.raw = b""

    def now(self) -> bytes:
        """Read the clock; returns the Avro encoding of the new :attr:`ms`."""
        ms = time.time_ns() // 1_000_000
        if ms != self.ms:
            self.ms = ms
            self.raw = avro_long(ms)
        return self.raw


class ResultEncoder:
    """Encodes ExecutionResult dicts exactly as ``codec`` does, faster when it can.

    With a ``worker_id``, :meth:`started` and :meth:`succeeded` splice a run's results
    from its DueEvent's bytes (only while :attr:`spliced`; else encode the dicts).
    """

    def __init__(self, codec: Codec, worker_id: str = "") -> None:
        self._codec = codec
        self._header = SINGLE_OBJECT_MAGIC + codec.writer_fingerprint(RecordKind.EXECUTION_RESULT)
        self._status = {s.value: avro_long(i) for i, s in enumerate(ExecutionStatus)}
        self._trigger = {t.value: avro_long(i) for i, t in enumerate(Trigger)}
        self._trigger_by_index = [self._trigger[t.value] for t in Trigger]
        worker = _optional_string(worker_id)
        # status, reason, error, worker_id, and the union branch of started_at_ms
        self._started_status = self._status["STARTED"] + _NULL + _NULL + worker + _SOME
        self._succeeded_status = self._status["SUCCEEDED"] + _NULL + _NULL + worker + _SOME
        self.spliced = all(self._splice(r) == codec.encode(RecordKind.EXECUTION_RESULT, r)
                           for r in _probes())  # fmt: skip
        self.fast_path = FastPath(
            "the spliced ExecutionResult encoder (services/executor/result_bytes.py)", self.spliced
        )

    def started(self, view: DueView, now: bytes) -> bytes:
        """The STARTED result of ``view``'s attempt at ``now`` (Avro long epoch ms)."""
        return b"".join(
            (
                self._header,
                view.raw_ids,
                view.raw_scheduled_for_ms,
                view.raw_attempt,
                self._started_status,
                now,  # started_at_ms
                b"\x00\x00",  # finished_at_ms, next_attempt_at_ms: null
                self._trigger_by_index[view.trigger],
                view.raw_job_version,
                now,  # recorded_at_ms
            )
        )

    def succeeded(self, view: DueView, started: bytes, now: bytes) -> bytes:
        """The SUCCEEDED result of an attempt that started at ``started`` and ended ``now``."""
        return b"".join(
            (
                self._header,
                view.raw_ids,
                view.raw_scheduled_for_ms,
                view.raw_attempt,
                self._succeeded_status,
                started,
                _SOME,
                now,  # finished_at_ms
                _NULL,  # next_attempt_at_ms
                self._trigger_by_index[view.trigger],
                view.raw_job_version,
                now,  # recorded_at_ms
            )
        )

    def encode(self, record: Mapping[str, Any]) -> bytes:
        """The single-object encoding of ``record`` (every field present, as outcomes builds)."""
        if self.spliced:
            return self._splice(record)
        self.fast_path.fell_back()
        return self._codec.encode(RecordKind.EXECUTION_RESULT, record)

    def _splice(self, r: Mapping[str, Any]) -> bytes:
        return b"".join(
            (
                self._header,
                avro_string(r["execution_id"]),
                avro_string(r["job_id"]),
                avro_long(r["scheduled_for_ms"]),
                avro_long(r["attempt"]),
                self._status[r["status"]],
                _optional_string(r["reason"]),
                _optional_string(r["error"]),
                _optional_string(r["worker_id"]),
                _optional_long(r["started_at_ms"]),
                _optional_long(r["finished_at_ms"]),
                _optional_long(r["next_attempt_at_ms"]),
                self._trigger[r["trigger"]],
                avro_long(r["job_version"]),
                avro_long(r["recorded_at_ms"]),
            )
        )


def _probes() -> list[dict[str, Any]]:
    """Every status and trigger, every union branch, and the widest (10-byte) varints."""
    return result_probes(max_varint_bytes=10)
