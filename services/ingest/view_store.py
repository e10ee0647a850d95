"""The status view's RocksDB: job state, recent executions, running executions, dead letters.

Key layout (one RocksDB, raw bytes; prefixes keep the kinds apart):

* ``j\\0<job_id>``: 8-byte big-endian version + the Job record's Avro bytes as consumed
* ``e\\0<job_id>``: JSON list of the job's recent executions, newest ``scheduled_for`` first
* ``r\\0<job_id>``: JSON object ``{execution_id: attempt}`` of executions STARTED without
  an outcome yet (RUNNING); absent when none
* ``d\\0<dead_at_ms:8><partition:4><offset:8>``: JSON summary of one dead letter
* ``u\\0<job_id>``: JSON list of the job's ``depends_on`` (only for jobs that have one), so
  an update or a tombstone finds the edges to drop without decoding the old record
* ``c\\0<upstream>\\0<dependent>``: empty; one per edge, the reverse index of ``depends_on``
  (job ids never contain ``\\0``), read by a prefix scan for a job's direct dependents
* ``o\\0<topic>\\0<partition>``: 8-byte next offset to consume, written in the same
  WriteBatch as the data it covers, so a restart resumes exactly there
* ``m\\0undecodable``: 8-byte count of records skipped because they did not decode

Writes go through a :class:`ViewBatch`: it reads its own pending writes, then commits them
in one WriteBatch together with the offsets.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rocksdict import Options, Rdict, WriteBatch

from services.ingest.exceptions import ViewInUseError
from streams.codec import Codec, RecordKind
from streams.exceptions import InvalidRecordError
from streams.job_reader import JobReader
from streams.records import ExecutionStatus

_U64 = struct.Struct(">Q")
_DLQ_KEY = struct.Struct(">QIQ")
_JOB, _EXECS, _RUNNING, _DLQ, _OFFSET, _META = b"j\0", b"e\0", b"r\0", b"d\0", b"o\0", b"m\0"
_UPSTREAMS, _CHILD = b"u\0", b"c\0"
_UNDECODABLE = _META + b"undecodable"
_DLQ_END = _DLQ + b"\xff" * _DLQ_KEY.size

_EXECUTION_FIELDS = (
    "execution_id", "scheduled_for_ms", "attempt", "status", "trigger", "reason", "error",
    "worker_id", "started_at_ms", "finished_at_ms", "next_attempt_at_ms", "recorded_at_ms",
)  # fmt: skip


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _offset_key(topic: str, partition: int) -> bytes:
    return _OFFSET + topic.encode() + b"\0" + str(partition).encode()


class InvalidCursorError(ValueError):
    """A dead-letter cursor that this view did not hand out."""


def encode_cursor(key: bytes) -> str:
    """The opaque cursor of a dead-letter key."""
    return base64.urlsafe_b64encode(key[len(_DLQ) :]).decode().rstrip("=")


def decode_cursor(cursor: str) -> bytes:
    """The dead-letter key of a cursor; raises ``InvalidCursorError``."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raise InvalidCursorError("cursor is not one this API returned") from None
    if len(raw) != _DLQ_KEY.size:
        raise InvalidCursorError("cursor is not one this API returned")
    return _DLQ + raw


class ViewStore:
    """The view's RocksDB on disk; reads are safe from any thread, one writer at a time."""

    def __init__(self, path: Path, codec: Codec, *, recent_executions: int) -> None:
        path.mkdir(parents=True, exist_ok=True)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        try:
            self._db = Rdict(str(path), options=options)
        except Exception as exc:  # rocksdict raises a bare Exception carrying RocksDB's status
            if "lock" in str(exc).lower():
                raise ViewInUseError(path, str(exc)) from exc
            raise
        self._codec = codec
        # Every create passes through apply_job: the exact Job reader costs a quarter of
        # fastavro's generic one here (it falls back to the codec for anything else).
        self.job_reader = JobReader(codec)
        self.recent_executions = recent_executions

    def close(self) -> None:
        """Close the RocksDB (flushes the memtable)."""
        self._db.close()

    def get(self, key: bytes) -> bytes | None:
        value = self._db.get(key)
        return None if value is None else bytes(value)

    def job(self, job_id: str) -> dict[str, Any] | None:
        """The job's current record (decoded Job dict), or None."""
        stored = self.get(_JOB + job_id.encode())
        return None if stored is None else self.job_reader.decode(stored[8:])

    def executions(self, job_id: str) -> list[dict[str, Any]]:
        """The job's recent executions, newest first (at most ``recent_executions``)."""
        stored = self.get(_EXECS + job_id.encode())
        return [] if stored is None else list(json.loads(stored))

    def running(self, job_id: str) -> dict[str, int]:
        """Executions of the job STARTED without an outcome yet: execution_id -> attempt."""
        stored = self.get(_RUNNING + job_id.encode())
        return {} if stored is None else dict(json.loads(stored))

    def dependents(self, job_id: str, limit: int) -> list[str]:
        """The jobs whose ``depends_on`` names ``job_id`` (sorted, at most ``limit``)."""
        prefix = _CHILD + job_id.encode() + b"\0"
        found: list[str] = []
        for raw_key in self._db.keys(from_key=prefix):
            key = bytes(raw_key)  # type: ignore[arg-type]  # raw mode: keys are bytes
            if not key.startswith(prefix) or len(found) == limit:
                break
            found.append(key[len(prefix) :].decode())
        return found

    def dead_letters(
        self, cursor: str | None, limit: int
    ) -> tuple[list[dict[str, Any]], str | None]:
        """A page of dead letters, newest first, and the cursor of the next page (or None)."""
        start = _DLQ_END if cursor is None else decode_cursor(cursor)
        items: list[dict[str, Any]] = []
        last_key = b""
        for key, value in self._scan_back(start, skip_start=cursor is not None):
            if len(items) == limit:
                return items, encode_cursor(last_key)
            items.append(json.loads(value))
            last_key = key
        return items, None

    def _scan_back(self, start: bytes, *, skip_start: bool) -> Iterator[tuple[bytes, bytes]]:
        it = self._db.iter()
        it.seek_for_prev(start)
        if skip_start and it.valid() and bytes(it.key()) == start:
            it.prev()
        while it.valid():
            key = bytes(it.key())
            if not key.startswith(_DLQ):
                return
            yield key, bytes(it.value())
            it.prev()

    def offsets(self) -> dict[tuple[str, int], int]:
        """The stored next offset of every partition the view has consumed."""
        result: dict[tuple[str, int], int] = {}
        for raw_key, value in self._db.items(from_key=_OFFSET):
            key = bytes(raw_key)  # type: ignore[arg-type]  # raw mode: keys are bytes
            if not key.startswith(_OFFSET):
                break
            topic, _, partition = key[len(_OFFSET) :].rpartition(b"\0")
            result[(topic.decode(), int(partition))] = _U64.unpack(value)[0]
        return result

    def undecodable_count(self) -> int:
        """How many records the view skipped because they did not decode."""
        stored = self.get(_UNDECODABLE)
        return 0 if stored is None else int(_U64.unpack(stored)[0])

    def begin(self) -> ViewBatch:
        """A batch of writes to commit atomically with the offsets they cover."""
        return ViewBatch(self)

    def write(self, pending: Mapping[bytes, bytes | None]) -> None:
        batch = WriteBatch(raw_mode=True)
        for key, value in pending.items():
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        self._db.write(batch)


class ViewBatch:
    """Pending writes of one consumed batch; ``commit`` writes them in one WriteBatch."""

    def __init__(self, store: ViewStore) -> None:
        self._store = store
        self._codec = store._codec
        self._pending: dict[bytes, bytes | None] = {}
        self._undecodable = 0

    def _get(self, key: bytes) -> bytes | None:
        if key in self._pending:
            return self._pending[key]
        return self._store.get(key)

    def consumed(self, topic: str, partition: int, offset: int) -> None:
        """Record that everything up to ``offset`` of the partition is applied."""
        self._pending[_offset_key(topic, partition)] = _U64.pack(offset + 1)

    def undecodable(self) -> None:
        """Count one skipped record."""
        self._undecodable += 1

    def apply_job(self, key: bytes | None, value: bytes | None) -> None:
        """A record of ``jobs``: newer versions replace the state, a tombstone deletes it."""
        if value is None:
            if key is not None:
                for prefix in (_JOB, _EXECS, _RUNNING):
                    self._pending[prefix + key] = None
                self._replace_edges(key, ())
            return
        record = self._store.job_reader.decode(value)
        reason = self._codec.bounds.key_reason(self._codec.record_name(RecordKind.JOB), key, record)
        if reason is not None:
            raise InvalidRecordError(reason)  # the timer dead-letters it: never a job
        job_key = _JOB + record["job_id"].encode()
        stored = self._get(job_key)
        if stored is not None and _U64.unpack(stored[:8])[0] >= record["version"]:
            return  # a stale or repeated command never overwrites a newer one
        self._pending[job_key] = _U64.pack(record["version"]) + value
        depends_on = record["depends_on"]
        if depends_on or stored is not None:  # a brand-new job without edges costs nothing
            self._replace_edges(record["job_id"].encode(), depends_on)

    def _replace_edges(self, job: bytes, depends_on: Sequence[str]) -> None:
        """Keep the reverse index of ``depends_on`` equal to the job's current edges."""
        key = _UPSTREAMS + job
        stored = self._get(key)
        old = set() if stored is None else set(json.loads(stored))
        new = set(depends_on)
        if old == new:
            return
        for upstream in old - new:
            self._pending[_CHILD + upstream.encode() + b"\0" + job] = None
        for upstream in new - old:
            self._pending[_CHILD + upstream.encode() + b"\0" + job] = b""
        self._pending[key] = _dumps(sorted(new)) if new else None

    def apply_result(self, value: bytes) -> None:
        """A record of ``job-results``: merged into recent and running executions."""
        result = self._codec.decode(RecordKind.EXECUTION_RESULT, value)
        job = result["job_id"].encode()
        self._merge_execution(job, {name: result.get(name) for name in _EXECUTION_FIELDS})
        self._track_running(job, result)

    def _merge_execution(self, job: bytes, summary: dict[str, Any]) -> None:
        key = _EXECS + job
        stored = self._get(key)
        executions: list[dict[str, Any]] = [] if stored is None else json.loads(stored)
        for i, known in enumerate(executions):
            if known["execution_id"] == summary["execution_id"]:
                if summary["started_at_ms"] is None:
                    summary["started_at_ms"] = known.get("started_at_ms")
                executions[i] = summary
                break
        else:
            executions.append(summary)
        executions.sort(key=lambda e: (e["scheduled_for_ms"], e["execution_id"]), reverse=True)
        self._pending[key] = _dumps(executions[: self._store.recent_executions])

    def _track_running(self, job: bytes, result: Mapping[str, Any]) -> None:
        key = _RUNNING + job
        stored = self._get(key)
        running: dict[str, int] = {} if stored is None else json.loads(stored)
        execution_id, attempt = result["execution_id"], result["attempt"]
        if result["status"] == ExecutionStatus.STARTED:
            running[execution_id] = attempt
        elif execution_id in running and attempt >= running[execution_id]:
            del running[execution_id]
        self._pending[key] = _dumps(running) if running else None

    def apply_dead_letter(self, partition: int, offset: int, value: bytes) -> None:
        """A record of ``dlq``: one entry of the dead-letter list."""
        dead = self._codec.decode(RecordKind.DEAD_LETTER, value)
        execution = dead.get("execution") or {}
        summary = {
            "job_id": execution.get("job_id"),
            "execution_id": execution.get("execution_id"),
            "kind": dead["kind"],
            "reason": dead["reason"],
            "last_error": dead.get("last_error"),
            "attempts": execution.get("attempt"),
            "scheduled_for_ms": execution.get("scheduled_for_ms"),
            "handler": execution.get("handler"),
            "tenant": execution.get("tenant"),
            "dead_at_ms": dead["dead_at_ms"],
            "source_topic": dead.get("source_topic"),
            "source_partition": dead.get("source_partition"),
            "source_offset": dead.get("source_offset"),
        }
        key = _DLQ + _DLQ_KEY.pack(max(dead["dead_at_ms"], 0), partition, offset)
        self._pending[key] = _dumps(summary)

    def commit(self) -> None:
        """Write every pending change, the offsets and the skip count in one WriteBatch."""
        if self._undecodable:
            total = self._store.undecodable_count() + self._undecodable
            self._pending[_UNDECODABLE] = _U64.pack(total)
        self._store.write(self._pending)
        self._pending = {}
        self._undecodable = 0
