"""Each job's item of ``GET /api/jobs`` as JSON bytes, rendered when the view applies it.

A page joins stored bytes instead of decoding 100 Job records and building their
summaries. ``w\\0<job_id>`` holds what of the item follows from the Job record
(:func:`row_parts`, rendered by the view when it applies the record) and the newest
execution's ``l\\0<job_id>`` value ends with the item's ``last_execution``
(:func:`last_execution_json`, rendered when the newest execution changes). What depends
on the request's time or on another key is filled in per page by :class:`RowJoiner`:
``status`` and ``outcome`` from the job's lifecycle (``s\\0<job_id>``), and ``next_run_at``
(a cron's next tick after now; a one-off's ``run_at`` until its execution exists). The
bytes equal ``json_bytes(job_summary(...))`` of the same state.

A part that cannot be rendered (a time outside years 1-9999) is stored empty: such a row
is built by ``job_summary`` at read time, as every row was before (and fails as it did).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import orjson

from services.ingest.cron import first_tick_after
from services.ingest.json_bytes import json_bytes
from services.ingest.lifecycle import Lifecycle
from services.ingest.presenters import attempt_body, cron_body, iso, schedule_type
from streams.records import JobStatus

_PARTS = struct.Struct(">HHH")  # lengths of meta, head and middle; the tail is the rest
_TICK = struct.Struct(">Q")
_TICK_BIAS = 1 << 63  # as in view_store's history keys
_SCHEDULED = JobStatus.SCHEDULED.value
_NO_NEXT = b'"next_run_at":null,'
_NO_LAST = b'"last_execution":null,'


def row_parts(job: Mapping[str, Any]) -> bytes:
    """The ``w`` value of a Job record: ``meta`` (``[status, run_at_ms, cron]``, what
    ``next_run_at`` and the status follow from), then the item's JSON before ``status``,
    between ``outcome`` and ``next_run_at``, and after ``last_execution``; empty when a
    part does not render."""
    try:
        meta = json_bytes([job["status"], job.get("run_at_ms"), job.get("cron")])
        head = json_bytes({"job_id": job["job_id"], "type": schedule_type(job)})[:-1] + b","
        middle = json_bytes(
            {
                "handler": job["handler"],
                "tenant": job["tenant"],
                "labels": dict(job["labels"]),
                "run_at": iso(job.get("run_at_ms")),
                "cron": cron_body(job.get("cron")),
                "depends_on": list(job["depends_on"]),
            }
        )
        tail = json_bytes({"updated_at": iso(job["updated_at_ms"])})[1:]
    except ValueError:
        return b""
    middle = b"," + middle[1:-1] + b","
    return _PARTS.pack(len(meta), len(head), len(middle)) + meta + head + middle + tail


def last_execution_json(execution: Mapping[str, Any]) -> bytes:
    """The item's ``last_execution`` of the job's newest execution; empty when it does not
    render."""
    try:
        return json_bytes(attempt_body(execution))
    except ValueError:
        return b""


class RowJoiner:
    """Builds the items of one page (one request time), caching what rows share: the
    status part of a lifecycle and the ``next_run_at`` of a cron (the same for every job of
    that cron and status)."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms
        self._statuses: dict[bytes, tuple[str, bytes]] = {}
        self._metas: dict[bytes, tuple[str, int | None, bytes | None]] = {}

    def row(self, parts: bytes, life: bytes | None, newest: tuple[bytes, bytes] | None) -> bytes:
        """The item of a job from its ``w`` value, ``s`` value and newest execution's
        (position, rendered ``last_execution``), or empty when it must be built from the
        record (a part did not render)."""
        if not parts or (newest is not None and not newest[1]):
            return b""
        meta_len, head_len, middle_len = _PARTS.unpack_from(parts)
        head_at = _PARTS.size + meta_len
        middle_at = head_at + head_len
        tail_at = middle_at + middle_len
        record_status, run_at_ms, next_part = self._meta(parts[_PARTS.size : head_at])
        if next_part is None:  # a scheduled one-off: due until its execution exists
            fired = newest is not None and _tick_of(newest[0]) == run_at_ms
            next_part = _NO_NEXT if fired else _next_part(run_at_ms)
        return b"".join(
            (
                parts[head_at:middle_at],
                self._status(life, record_status),
                parts[middle_at:tail_at],
                next_part,
                _NO_LAST if newest is None else b'"last_execution":' + newest[1] + b",",
                parts[tail_at:],
            )
        )

    def _meta(self, meta: bytes) -> tuple[str, int | None, bytes | None]:
        """The record status, run_at and ``next_run_at`` part (None: a scheduled one-off's,
        which depends on its newest execution)."""
        found = self._metas.get(meta)
        if found is None:
            status, run_at_ms, cron = orjson.loads(meta)
            if status != _SCHEDULED:
                next_part: bytes | None = _NO_NEXT
            elif run_at_ms is not None:
                next_part = None
            elif cron is not None:
                next_part = _next_part(first_tick_after(cron, self.now_ms))
            else:
                next_part = _NO_NEXT
            found = self._metas[meta] = (status, run_at_ms, next_part)
        return found

    def _status(self, life: bytes | None, record_status: str) -> bytes:
        """``"status":..,"outcome":..`` of the lifecycle, or of the record's status when the
        lifecycle is missing or of another record (``presenters._status_fields``)."""
        if life is not None:
            found = self._statuses.get(life)
            if found is None:
                lifecycle = Lifecycle.from_json(orjson.loads(life))
                shown = {"status": lifecycle.shown, "outcome": lifecycle.outcome}
                part = json_bytes(shown)[1:-1]
                found = self._statuses[life] = (lifecycle.record_status, part)
            if found[0] == record_status:
                return found[1]
        return json_bytes({"status": record_status, "outcome": None})[1:-1]


def _next_part(next_ms: int | None) -> bytes:
    return b'"next_run_at":' + json_bytes(iso(next_ms)) + b","


def _tick_of(position: bytes) -> int:
    """The scheduled_for of a newest execution's position (its history key's tail)."""
    return int(_TICK.unpack_from(position)[0]) - _TICK_BIAS
