"""The writes of one consumed batch to the status view's RocksDB (layout: ``view_store``).

A :class:`ViewBatch` reads its own pending writes before the store, and ``commit`` writes
them in one WriteBatch with the offsets they cover. Every apply is idempotent.

Bounds: a job keeps at most ``executions_kept`` executions (``n\\0<job_id>`` counts
them). A new one over the bound drops the job's oldest kept one (stored, or added by this
batch), or is not kept itself when it is older still (an old tick arriving late).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from services.ingest.attempts import is_final, merged_execution
from services.ingest.job_index import STATUS, TERM_COUNT, index_key, term, terms_in, terms_of
from services.ingest.lifecycle import Lifecycle
from services.ingest.list_rows import last_execution_json, row_parts
from services.ingest.view_store import (
    CHILD,
    COUNT,
    DEAD_BY_ID,
    DLQ,
    DLQ_KEY,
    JOB,
    LIFE,
    NEWEST,
    ROW,
    RUNNING,
    U64,
    UNDECODABLE,
    UPSTREAMS,
    ViewStore,
    history_key,
    history_prefix,
    newest_value,
    offset_key,
    split_newest,
)
from streams.codec import RecordKind
from streams.exceptions import InvalidRecordError
from streams.identity import execution_id as execution_id_of
from streams.records import ExecutionStatus

_STARTED = ExecutionStatus.STARTED.value


class ViewBatch:
    """Pending writes of one consumed batch; ``commit`` writes them in one WriteBatch."""

    def __init__(self, store: ViewStore) -> None:
        self._store = store
        self._codec = store.codec
        self._pending: dict[bytes, bytes | None] = {}
        self._undecodable = 0
        # Executions this batch added, by job: the bound drops the oldest kept one,
        # which may not be stored yet.
        self._added: dict[str, list[bytes]] = {}
        # The decoded results of this batch, for the view's live throughput and lateness.
        self.results: list[dict[str, Any]] = []

    def _get(self, key: bytes) -> bytes | None:
        if key in self._pending:
            return self._pending[key]
        return self._store.get(key)

    def consumed(self, topic: str, partition: int, offset: int) -> None:
        """Record that everything up to ``offset`` of the partition is applied."""
        self._pending[offset_key(topic, partition)] = U64.pack(offset + 1)

    def undecodable(self) -> None:
        """Count one skipped record."""
        self._undecodable += 1

    # jobs --------------------------------------------------------------------------------

    def apply_job(self, key: bytes | None, value: bytes | None) -> None:
        """A record of ``jobs``: newer versions replace the state, a tombstone deletes it."""
        if value is None:
            if key is not None:
                self._delete_job(key)
            return
        record = self._store.job_reader.decode(value)
        reason = self._codec.bounds.key_reason(self._codec.record_name(RecordKind.JOB), key, record)
        if reason is not None:
            raise InvalidRecordError(reason)  # the timer dead-letters it: never a job
        job_id = record["job_id"]
        job = job_id.encode()
        stored = self._get(JOB + job)
        if stored is not None and U64.unpack(stored[:8])[0] >= record["version"]:
            return  # a stale or repeated command never overwrites a newer one
        self._pending[JOB + job] = U64.pack(record["version"]) + value
        self._pending[ROW + job] = row_parts(record)
        life = Lifecycle.of_job(record, self._outcome(job_id, record.get("run_at_ms")))
        old_terms = [] if stored is None else self._terms_of_stored(job, stored)
        self._replace_terms(job_id, old_terms, terms_of(record, life.shown))
        self._pending[LIFE + job] = orjson.dumps(life.to_json())
        depends_on = record["depends_on"]
        if depends_on or stored is not None:  # a brand-new job without edges costs nothing
            self._replace_edges(job, depends_on)

    def _outcome(self, job_id: str, run_at_ms: int | None) -> str | None:
        """The final status of a one-off's execution, or None (not ended, not a one-off)."""
        if run_at_ms is None:
            return None
        stored = self._get(history_key(job_id, run_at_ms, execution_id_of(job_id, run_at_ms)))
        status = None if stored is None else orjson.loads(stored)["status"]
        return status if is_final(status) else None

    def _terms_of_stored(self, job: bytes, stored: bytes) -> list[bytes]:
        old = self._store.job_reader.decode(stored[8:])
        life = self._get(LIFE + job)
        shown = old["status"] if life is None else Lifecycle.from_json(orjson.loads(life)).shown
        return terms_of(old, shown)

    def _replace_terms(self, job_id: str, old: Sequence[bytes], new: Sequence[bytes]) -> None:
        """Index the job under ``new`` instead of ``old``: each key's value is the whole
        new term list (so every kept key is rewritten when one term changes), and the
        counts of the terms gained and lost follow."""
        if set(old) == set(new):
            return
        joined = b"".join(new)
        for gone in set(old) - set(new):
            self._pending[index_key(gone, job_id)] = None
            self._count_term(gone, -1)
        for added in new:
            self._pending[index_key(added, job_id)] = joined
        for added in set(new) - set(old):
            self._count_term(added, 1)

    def _count_term(self, term_bytes: bytes, change: int) -> None:
        key = TERM_COUNT + term_bytes
        stored = self._get(key)
        count = (0 if stored is None else U64.unpack(stored)[0]) + change
        self._pending[key] = U64.pack(count) if count > 0 else None

    def _delete_job(self, job: bytes) -> None:
        stored = self._get(JOB + job)
        job_id = job.decode()
        if stored is not None:
            self._replace_terms(job_id, self._terms_of_stored(job, stored), ())
        for prefix in (JOB, ROW, LIFE, RUNNING, COUNT, NEWEST):
            self._pending[prefix + job] = None
        prefix = history_prefix(job_id)
        for key in self._store.keys_from(prefix, prefix):
            self._pending[key] = None
        for key in self._added.pop(job_id, ()):
            self._pending[key] = None
        self._replace_edges(job, ())

    def _replace_edges(self, job: bytes, depends_on: Sequence[str]) -> None:
        """Keep the reverse index of ``depends_on`` equal to the job's current edges."""
        key = UPSTREAMS + job
        stored = self._get(key)
        old = set() if stored is None else set(orjson.loads(stored))
        new = set(depends_on)
        if old == new:
            return
        for upstream in old - new:
            self._pending[CHILD + upstream.encode() + b"\0" + job] = None
        for upstream in new - old:
            self._pending[CHILD + upstream.encode() + b"\0" + job] = b""
        self._pending[key] = orjson.dumps(sorted(new)) if new else None

    # results -----------------------------------------------------------------------------

    def apply_result(self, value: bytes) -> None:
        """A record of ``job-results``: merged into the execution's history, the running
        executions and (for a one-off's own execution) the job's shown status."""
        result = self._codec.decode(RecordKind.EXECUTION_RESULT, value)
        job_id, tick = result["job_id"], result["scheduled_for_ms"]
        key = history_key(job_id, tick, result["execution_id"])
        stored = self._get(key)
        if stored is not None or self._room_for(job_id, key):
            known = None if stored is None else orjson.loads(stored)
            merged = merged_execution(known, result, self._store.attempts_kept)
            execution_json = orjson.dumps(merged)
            self._pending[key] = execution_json
            self._follow_newest(job_id, key, merged, execution_json)
            self._follow_outcome(job_id, tick, merged["status"])
        self._track_running(job_id.encode(), result)
        self.results.append(result)

    def _room_for(self, job_id: str, key: bytes) -> bool:
        """Count a new execution of the job, dropping its oldest one over the bound; False
        when the new one is older than every kept one (then it is not kept)."""
        added = self._added.setdefault(job_id, [])
        count_key = COUNT + job_id.encode()
        stored = self._get(count_key)
        count = 0 if stored is None else U64.unpack(stored)[0]
        if count < self._store.executions_kept:
            self._pending[count_key] = U64.pack(count + 1)
            added.append(key)
            return True
        kept = [k for k in (self._oldest_stored(job_id), min(added, default=None)) if k]
        if kept and key < min(kept):
            return False
        if kept:  # (none: the count was behind a tombstone's deletes; it stays as it is)
            oldest = min(kept)
            self._pending[oldest] = None
            if oldest in added:
                added.remove(oldest)
        added.append(key)
        return True

    def _oldest_stored(self, job_id: str) -> bytes | None:
        """The job's oldest execution key in the store not dropped by this batch."""
        prefix = history_prefix(job_id)
        for key in self._store.keys_from(prefix, prefix):
            if key not in self._pending or self._pending[key] is not None:
                return key
        return None

    def _follow_newest(
        self, job_id: str, key: bytes, merged: Mapping[str, Any], execution_json: bytes
    ) -> None:
        """Keep ``l\\0<job_id>`` the job's newest kept execution: the one of the largest
        key (an older tick arriving late, or a repeat of an older one, leaves it), with its
        ``last_execution`` of a jobs page rendered."""
        newest_key = NEWEST + job_id.encode()
        position = key[len(history_prefix(job_id)) :]
        stored = self._get(newest_key)
        if stored is None or position >= split_newest(stored)[0]:
            rendered = last_execution_json(merged)
            self._pending[newest_key] = newest_value(position, execution_json, rendered)

    def _follow_outcome(self, job_id: str, tick: int, status: str) -> None:
        """A one-off's own execution decides its shown status (COMPLETED when it ended)."""
        stored = self._get(LIFE + job_id.encode())
        if stored is None:
            return
        life = Lifecycle.from_json(orjson.loads(stored))
        if life.run_at_ms != tick:
            return
        after = Lifecycle(life.record_status, life.run_at_ms, status if is_final(status) else None)
        if after == life:
            return
        self._pending[LIFE + job_id.encode()] = orjson.dumps(after.to_json())
        if after.shown != life.shown:
            old, new = term(STATUS, life.shown), term(STATUS, after.shown)
            joined = self._get(index_key(old, job_id))  # the job's term list
            kept = [] if joined is None else sorted(terms_in(joined) - {old})
            self._replace_terms(job_id, [old, *kept], [new, *kept])

    def _track_running(self, job: bytes, result: Mapping[str, Any]) -> None:
        key = RUNNING + job
        stored = self._get(key)
        running: dict[str, int] = {} if stored is None else orjson.loads(stored)
        execution_id, attempt = result["execution_id"], result["attempt"]
        if result["status"] == _STARTED:
            running[execution_id] = attempt
        elif execution_id in running and attempt >= running[execution_id]:
            del running[execution_id]
        self._pending[key] = orjson.dumps(running) if running else None

    # dead letters ------------------------------------------------------------------------

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
        key = DLQ + DLQ_KEY.pack(max(dead["dead_at_ms"], 0), partition, offset)
        self._pending[key] = orjson.dumps(summary)
        if summary["execution_id"] is not None:
            self._pending[DEAD_BY_ID + summary["execution_id"].encode()] = key

    def commit(self) -> None:
        """Write every pending change, the offsets and the skip count in one WriteBatch."""
        if self._undecodable:
            total = self._store.undecodable_count() + self._undecodable
            self._pending[UNDECODABLE] = U64.pack(total)
        self._store.write(self._pending)
        self._pending = {}
        self._undecodable = 0
