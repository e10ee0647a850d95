"""The status view's RocksDB: jobs, their indexes, execution histories, dead letters.

Key layout (one RocksDB, raw bytes; prefixes keep the kinds apart; job ids never contain
``\\0``):

* ``j\\0<job_id>``: 8-byte big-endian version + the Job record's Avro bytes as consumed
* ``s\\0<job_id>``: JSON ``[record status, run_at_ms, outcome]``, the job's
  :class:`~services.ingest.lifecycle.Lifecycle` (its shown status: COMPLETED one-offs)
* ``x\\0<term><job_id>``: the job's term list; its index keys
  (:mod:`services.ingest.job_index`)
* ``k\\0<term>``: 8-byte count of the jobs under a term (which term a filtered page scans)
* ``h\\0<job_id>\\0<scheduled_for:8><execution_id>``: JSON of one execution with every
  attempt (:mod:`services.ingest.attempts`); a job's newest are its last keys
* ``l\\0<job_id>``: the job's newest kept execution (its ``h`` key's last position):
  2-byte length + ``<scheduled_for:8><execution_id>`` + 4-byte length + the same JSON as
  its ``h`` value + its ``last_execution`` of a jobs page, rendered
  (:mod:`services.ingest.list_rows`), written with it at apply time, so a page of jobs is
  one multi-get (no seek per job)
* ``w\\0<job_id>``: the job's item of a jobs page, pre-rendered from its record
  (:func:`services.ingest.list_rows.row_parts`), written with the record
* ``n\\0<job_id>``: 8-byte count of the job's ``h`` keys (at most ``executions_kept``)
* ``r\\0<job_id>``: JSON object ``{execution_id: attempt}`` of executions STARTED without
  an outcome yet (RUNNING); absent when none
* ``d\\0<dead_at_ms:8><partition:4><offset:8>``: JSON summary of one dead letter
* ``D\\0<execution_id>``: the ``d`` key of the execution's newest dead letter
* ``u\\0<job_id>``: JSON list of the job's ``depends_on`` (only for jobs that have one), so
  an update or a tombstone finds the edges to drop without decoding the old record
* ``c\\0<upstream>\\0<dependent>``: empty; one per edge, the reverse index of ``depends_on``
  (job ids never contain ``\\0``), read by a prefix scan for a job's direct dependents
* ``o\\0<topic>\\0<partition>``: 8-byte next offset to consume, written in the same
  WriteBatch as the data it covers, so a restart resumes exactly there
* ``m\\0undecodable``: 8-byte count of records skipped because they did not decode
* ``m\\0format``: the layout's version; a store of another version is emptied on open and
  rebuilt from the topics (the view is a cache of them)

Writes go through a :class:`~services.ingest.view_batch.ViewBatch`: it reads its own
pending writes, then commits them in one WriteBatch together with the offsets.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from rocksdict import BlockBasedOptions, Cache, Options, Rdict, WriteBatch

from services.ingest.exceptions import ViewInUseError
from services.ingest.job_index import (
    INDEX,
    PAGE_BUDGET,
    TERM_COUNT,
    InvalidCursorError,
    JobFilter,
    decode_cursor,
    encode_cursor,
    page_of_matches,
)
from services.ingest.json_bytes import json_bytes
from services.ingest.lifecycle import Lifecycle
from services.ingest.list_rows import RowJoiner
from services.ingest.presenters import job_summary
from streams.codec import Codec
from streams.identity import split_execution_id
from streams.job_reader import JobReader

if TYPE_CHECKING:
    from services.ingest.view_batch import ViewBatch

__all__ = ["InvalidCursorError", "JobRow", "ViewStore"]

U64 = struct.Struct(">Q")
DLQ_KEY = struct.Struct(">QIQ")
JOB, HISTORY, COUNT, LIFE, RUNNING = b"j\0", b"h\0", b"n\0", b"s\0", b"r\0"
NEWEST, ROW = b"l\0", b"w\0"
DLQ, DEAD_BY_ID, OFFSET, META = b"d\0", b"D\0", b"o\0", b"m\0"
UPSTREAMS, CHILD = b"u\0", b"c\0"
UNDECODABLE = META + b"undecodable"
_FORMAT, _FORMAT_VERSION = META + b"format", b"5"
_DLQ_END = DLQ + b"\xff" * DLQ_KEY.size
_TICK_BIAS = 1 << 63  # ticks as unsigned: negative ones sort before positive ones


def history_prefix(job_id: str) -> bytes:
    """The prefix of a job's execution keys."""
    return HISTORY + job_id.encode() + b"\0"


def history_key(job_id: str, scheduled_for_ms: int, execution_id: str) -> bytes:
    """The key of one execution: its job's executions sort by (scheduled_for, id)."""
    tick = U64.pack(scheduled_for_ms + _TICK_BIAS)
    return history_prefix(job_id) + tick + execution_id.encode()


U16, U32 = struct.Struct(">H"), struct.Struct(">I")


def newest_value(position: bytes, execution_json: bytes, rendered: bytes) -> bytes:
    """The ``l`` value of an execution at ``position`` (its ``h`` key after the prefix),
    with its ``last_execution`` JSON of a jobs page."""
    head = U16.pack(len(position)) + position + U32.pack(len(execution_json))
    return head + execution_json + rendered


def split_newest(value: bytes) -> tuple[bytes, bytes]:
    """The position and the execution JSON of an ``l`` value."""
    end = U16.size + U16.unpack_from(value)[0]
    json_end = end + U32.size + U32.unpack_from(value, end)[0]
    return value[U16.size : end], value[end + U32.size : json_end]


def newest_rendered(value: bytes) -> tuple[bytes, bytes]:
    """The position and the rendered ``last_execution`` of an ``l`` value."""
    end = U16.size + U16.unpack_from(value)[0]
    json_end = end + U32.size + U32.unpack_from(value, end)[0]
    return value[U16.size : end], value[json_end:]


def offset_key(topic: str, partition: int) -> bytes:
    return OFFSET + topic.encode() + b"\0" + str(partition).encode()


def encode_dlq_cursor(key: bytes) -> str:
    """The opaque cursor of a dead-letter key."""
    return base64.urlsafe_b64encode(key[len(DLQ) :]).decode().rstrip("=")


def decode_dlq_cursor(cursor: str) -> bytes:
    """The dead-letter key of a cursor; raises ``InvalidCursorError``."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raise InvalidCursorError("cursor is not one this API returned") from None
    if len(raw) != DLQ_KEY.size:
        raise InvalidCursorError("cursor is not one this API returned")
    return DLQ + raw


@dataclass(frozen=True, slots=True)
class JobRow:
    """One job of a page: its record, lifecycle (None: not derived yet), newest execution."""

    job: dict[str, Any]
    lifecycle: Lifecycle | None
    last_execution: dict[str, Any] | None


def view_options(block_cache_mb: int) -> Options:
    """The view's RocksDB options: a Bloom filter in each table file and an LRU block
    cache of ``block_cache_mb``.

    rocksdict holds the GIL through each call, so every block a get reads (a pread and a
    Snappy decompression) is time the API's event loop waits while the view's thread
    applies results; on a busy machine, a thread preempted inside such a call holds the
    loop for the preemption. Many keys the view and a page ask for are absent (a first
    execution's history, count and running keys, the newest execution of a job that never
    ran): the filter answers those without reading a data block in each level. RocksDB's
    default cache (32 MB) holds a small part of a store of 1M jobs (0.7 GB on disk,
    Snappy-compressed). Measured in bench/HISTORY.md (2026-12-05, issue 18).
    """
    table = BlockBasedOptions()
    table.set_bloom_filter(10, False)  # ~1% false positives, 10 bits a key
    table.set_block_cache(Cache(block_cache_mb * 1024 * 1024))
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_block_based_table_factory(table)
    return options


class ViewStore:
    """The view's RocksDB on disk; reads are safe from any thread, one writer at a time.

    ``recent_executions`` is how many executions :meth:`executions` returns (a job's
    page), ``executions_kept`` how many the store keeps per job, ``attempts_kept`` how
    many attempts per execution.
    """

    def __init__(
        self,
        path: Path,
        codec: Codec,
        *,
        recent_executions: int,
        executions_kept: int = 100,
        attempts_kept: int = 100,
        block_cache_mb: int = 256,
    ) -> None:
        path.mkdir(parents=True, exist_ok=True)
        try:
            self._db = Rdict(str(path), options=view_options(block_cache_mb))
        except Exception as exc:  # rocksdict raises a bare Exception carrying RocksDB's status
            if "lock" in str(exc).lower():
                raise ViewInUseError(path, str(exc)) from exc
            raise
        self.codec = codec
        # Every create passes through apply_job: the exact Job reader costs a quarter of
        # fastavro's generic one here (it falls back to the codec for anything else).
        self.job_reader = JobReader(codec)
        self.recent_executions = recent_executions
        self.executions_kept = executions_kept
        self.attempts_kept = attempts_kept
        self._check_format()

    def _check_format(self) -> None:
        """Empty a store of another layout (it is rebuilt from the topics' start)."""
        if self.get(_FORMAT) == _FORMAT_VERSION:
            return
        batch = WriteBatch(raw_mode=True)
        batch.delete_range(b"", b"\xff" * 8)
        batch.put(_FORMAT, _FORMAT_VERSION)
        self._db.write(batch)

    def close(self) -> None:
        """Close the RocksDB (flushes the memtable)."""
        self._db.close()

    def get(self, key: bytes) -> bytes | None:
        value = self._db.get(key)
        return None if value is None else bytes(value)

    def keys_from(self, start: bytes, prefix: bytes) -> Iterator[bytes]:
        """The stored keys with ``prefix`` from ``start`` on, in order."""
        for raw_key in self._db.keys(from_key=start):
            key = bytes(raw_key)  # type: ignore[arg-type]  # raw mode: keys are bytes
            if not key.startswith(prefix):
                return
            yield key

    # jobs --------------------------------------------------------------------------------

    def job(self, job_id: str) -> dict[str, Any] | None:
        """The job's current record (decoded Job dict), or None."""
        stored = self.get(JOB + job_id.encode())
        return None if stored is None else self.job_reader.decode(stored[8:])

    def lifecycle(self, job_id: str) -> Lifecycle | None:
        """What the job's shown status follows from, or None for an unknown job."""
        stored = self.get(LIFE + job_id.encode())
        return None if stored is None else Lifecycle.from_json(orjson.loads(stored))

    def job_page(
        self, where: JobFilter, cursor: str | None, limit: int
    ) -> tuple[list[JobRow], str | None]:
        """A page of jobs matching ``where`` in job id order (each with its lifecycle and
        newest execution), and the next page's cursor."""
        start = b"" if cursor is None else decode_cursor(cursor)
        ids, following = self._page_ids(where, start, limit, JOB)
        keys: list[Any] = [p + i.encode() for p in (JOB, LIFE, NEWEST) for i in ids]
        found: list[Any] = (self._db.get(keys) or []) if ids else []  # one multi-get
        count = len(ids)
        rows = []
        for stored, life, newest in zip(
            found[:count], found[count : 2 * count], found[2 * count :], strict=True
        ):
            if stored is None:
                continue  # deleted since the index was read
            rows.append(
                JobRow(
                    self.job_reader.decode(bytes(stored)[8:]),
                    None if life is None else Lifecycle.from_json(orjson.loads(life)),
                    None if newest is None else orjson.loads(split_newest(bytes(newest))[1]),
                )
            )
        return rows, None if following is None else encode_cursor(following)

    def job_page_json(
        self, where: JobFilter, cursor: str | None, limit: int, now_ms: int
    ) -> tuple[list[bytes], str | None]:
        """The items of :meth:`job_page` as JSON (each ``json_bytes(job_summary(...))`` at
        ``now_ms``), joined from the pre-rendered ``w`` and ``l`` values: no record decoded
        (only a row whose parts did not render is built from its record)."""
        start = b"" if cursor is None else decode_cursor(cursor)
        # Without filters the scan is of the rows themselves: it holds their values.
        scanned: list[bytes] | None = None if where.terms() else []
        ids, following = self._page_ids(where, start, limit, ROW, scanned)
        tables = (LIFE, NEWEST) if scanned is not None else (ROW, LIFE, NEWEST)
        keys: list[Any] = [p + i.encode() for p in tables for i in ids]
        found: list[Any] = (self._db.get(keys) or []) if ids else []  # one multi-get
        count = len(ids)
        if scanned is not None:
            found = [*scanned, *found]
        joiner = RowJoiner(now_ms)
        items = []
        for job_id, parts, life, newest in zip(
            ids, found[:count], found[count : 2 * count], found[2 * count :], strict=True
        ):
            if parts is None:
                continue  # deleted since the index was read
            life = None if life is None else bytes(life)
            last = None if newest is None else newest_rendered(bytes(newest))
            item = joiner.row(bytes(parts), life, last)
            if not item:
                item = self._item_of_record(job_id, life, newest, now_ms)
            if item:
                items.append(item)
        return items, None if following is None else encode_cursor(following)

    def _page_ids(
        self,
        where: JobFilter,
        start: bytes,
        limit: int,
        table: bytes,
        values: list[bytes] | None = None,
    ) -> tuple[list[str], bytes | None]:
        """The ids of a page and the next page's position: a scan of ``table`` without
        filters (its values appended to ``values``), else one scan of the filter's rarest
        term (fewest jobs by the ``k`` counts) checking the others on each job's term list."""
        terms = where.terms()
        id_prefix = where.id_prefix.encode()
        if not terms:
            return page_of_matches(
                self._db.iter(), table, frozenset(), start, limit, PAGE_BUDGET, id_prefix, values
            )
        rarest = terms[0]
        if len(set(terms)) > 1:
            counts: list[Any] = self._db.get([TERM_COUNT + t for t in terms]) or []
            sizes = [0 if c is None else U64.unpack(bytes(c))[0] for c in counts]
            rarest = terms[sizes.index(min(sizes))]
        others = frozenset(terms) - {rarest}
        return page_of_matches(
            self._db.iter(), INDEX + rarest, others, start, limit, PAGE_BUDGET, id_prefix
        )

    def _item_of_record(self, job_id: str, life: bytes | None, newest: Any, now_ms: int) -> bytes:
        """A page item built from the Job record (empty when the job is gone)."""
        job = self.job(job_id)
        if job is None:
            return b""
        lifecycle = None if life is None else Lifecycle.from_json(orjson.loads(life))
        last = None if newest is None else orjson.loads(split_newest(bytes(newest))[1])
        return json_bytes(job_summary(job, lifecycle, last, now_ms))

    # executions --------------------------------------------------------------------------

    def executions(self, job_id: str, limit: int | None = None) -> list[dict[str, Any]]:
        """The job's newest executions, newest first (``recent_executions`` by default)."""
        found, _ = self.execution_page(job_id, None, limit or self.recent_executions)
        return found

    def execution_page(
        self, job_id: str, cursor: str | None, limit: int
    ) -> tuple[list[dict[str, Any]], str | None]:
        """A page of the job's executions, newest first, and the next page's cursor."""
        prefix = history_prefix(job_id)
        if cursor is None:
            start, skip = prefix + b"\xff", False
        else:
            start, skip = prefix + decode_cursor(cursor, min_length=9, text=False), True
        found: list[dict[str, Any]] = []
        last = b""
        for key, value in self._scan_back(start, prefix, skip_start=skip):
            if len(found) == limit:
                return found, encode_cursor(last[len(prefix) :])
            found.append(orjson.loads(value))
            last = key
        return found, None

    def execution(self, execution_id: str) -> dict[str, Any] | None:
        """One execution with every attempt kept, or None (also for a malformed id)."""
        try:
            job_id, tick = split_execution_id(execution_id)
        except ValueError:
            return None
        stored = self.get(history_key(job_id, tick, execution_id))
        return None if stored is None else dict(orjson.loads(stored))

    def running(self, job_id: str) -> dict[str, int]:
        """Executions of the job STARTED without an outcome yet: execution_id -> attempt."""
        stored = self.get(RUNNING + job_id.encode())
        return {} if stored is None else dict(orjson.loads(stored))

    def dependents(self, job_id: str, limit: int) -> list[str]:
        """The jobs whose ``depends_on`` names ``job_id`` (sorted, at most ``limit``)."""
        prefix = CHILD + job_id.encode() + b"\0"
        found: list[str] = []
        for key in self.keys_from(prefix, prefix):
            if len(found) == limit:
                break
            found.append(key[len(prefix) :].decode())
        return found

    # dead letters ------------------------------------------------------------------------

    def dead_letters(
        self, cursor: str | None, limit: int, tenant: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """A page of dead letters, newest first, and the cursor of the next page (or None).

        With ``tenant``, only that tenant's (never an undecodable record's); a page then
        stops after ``PAGE_BUDGET`` entries looked at, with what it found and a cursor."""
        start = _DLQ_END if cursor is None else decode_dlq_cursor(cursor)
        items: list[dict[str, Any]] = []
        last_key = b""
        entries = self._scan_back(start, DLQ, skip_start=cursor is not None)
        for scanned, (key, value) in enumerate(entries):
            if len(items) == limit or scanned == PAGE_BUDGET:
                return items, encode_dlq_cursor(last_key)
            item = orjson.loads(value)
            if tenant is None or item.get("tenant") == tenant:
                items.append(item)
            last_key = key
        return items, None

    def dead_letter_of(self, execution_id: str) -> dict[str, Any] | None:
        """The newest dead letter of an execution, or None when the view knows none."""
        key = self.get(DEAD_BY_ID + execution_id.encode())
        stored = None if key is None else self.get(key)
        return None if stored is None else dict(orjson.loads(stored))

    def _scan_back(
        self, start: bytes, prefix: bytes, *, skip_start: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        it = self._db.iter()
        it.seek_for_prev(start)
        if skip_start and it.valid() and bytes(it.key()) == start:
            it.prev()
        while it.valid():
            key = bytes(it.key())
            if not key.startswith(prefix):
                return
            yield key, bytes(it.value())
            it.prev()

    # offsets and writes ------------------------------------------------------------------

    def offsets(self) -> dict[tuple[str, int], int]:
        """The stored next offset of every partition the view has consumed."""
        result: dict[tuple[str, int], int] = {}
        for raw_key, value in self._db.items(from_key=OFFSET):
            key = bytes(raw_key)  # type: ignore[arg-type]  # raw mode: keys are bytes
            if not key.startswith(OFFSET):
                break
            topic, _, partition = key[len(OFFSET) :].rpartition(b"\0")
            result[(topic.decode(), int(partition))] = U64.unpack(value)[0]
        return result

    def undecodable_count(self) -> int:
        """How many records the view skipped because they did not decode."""
        stored = self.get(UNDECODABLE)
        return 0 if stored is None else int(U64.unpack(stored)[0])

    def begin(self) -> ViewBatch:
        """A batch of writes to commit atomically with the offsets they cover."""
        from services.ingest.view_batch import ViewBatch

        return ViewBatch(self)

    def write(self, pending: Mapping[bytes, bytes | None]) -> None:
        batch = WriteBatch(raw_mode=True)
        for key, value in pending.items():
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        self._db.write(batch)
