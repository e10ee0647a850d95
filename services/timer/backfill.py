"""Backfills: a recurring job's past ticks in a window, run now with their own execution ids.

Ingest writes a Job record whose ``backfill`` asks for the cron ticks in [from_ms, to_ms]
at most ``per_s`` a second (and clears it with any other update, so a record's backfill is
acted on once). The timer walks the window in slices: a wheel entry ``BACKFILL`` keyed by
the next tick fires, emits up to one second's worth of ticks as DueEvents with trigger
BACKFILL (execution ids ``<job_id>@<tick>``, the ids the ticks had or would have had), and
places the next slice one second later. The same window backfilled twice yields the same
execution ids, so the executors' dedup runs none of them twice. Backfilled runs do not
count as running for the overlap policy (they are past ticks, not the schedule's own), and
a pause does not stop an explicit backfill; a cancel or delete does (the rest of the
window is dropped).
"""

from __future__ import annotations

import logging
import struct
from typing import Any

from services.timer import keys
from services.timer.firing import cron_spec_of
from services.timer.scope import Scope
from services.timer.state import TimerState, load_state
from services.timer.wheel import place_ms
from streams.schedule import next_fire_after

log = logging.getLogger(__name__)

BACKFILL = "BACKFILL"
_CURSOR = struct.Struct(">qi")  # to_ms, per_s


def accept_backfill(scope: Scope, state: TimerState, job: dict[str, Any]) -> None:
    """Start the backfill a newly applied Job record carries, if any."""
    request = job["backfill"]
    if request is None:
        return
    spec = cron_spec_of(job)
    if spec is None:
        log.warning("%s: backfill of a job without a cron ignored", state.job_id)
        return
    first_ms = next_fire_after(spec, request["from_ms"] - 1)
    if first_ms is None or first_ms > request["to_ms"]:
        return
    value = _CURSOR.pack(request["to_ms"], request["per_s"])
    key = keys.backfill_key(place_ms(scope, scope.now_ms), state.key, first_ms)
    scope.wheel.set(key, value)


def fire_backfill(scope: Scope, key: bytes, value: bytes) -> None:
    """Emit one slice of a backfill (its wheel entry is due) and place the next one."""
    scope.wheel.delete(key)
    parsed = keys.parse_key(key)
    assert parsed.tick_ms is not None
    state = load_state(scope, parsed.job_id)
    if state is None or state.status in ("CANCELLED", "COMPLETED"):
        return
    job = state.job(scope)
    spec = cron_spec_of(job)
    if spec is None:
        return
    to_ms, per_s = _CURSOR.unpack(value)
    tick_ms: int | None = parsed.tick_ms
    emitted = 0
    while tick_ms is not None and tick_ms <= to_ms and emitted < per_s:
        scope.emit_due(job, tick_ms, scope.now_ms, BACKFILL)
        emitted += 1
        tick_ms = next_fire_after(spec, tick_ms)
    if tick_ms is not None and tick_ms <= to_ms:
        next_key = keys.backfill_key(place_ms(scope, scope.now_ms + 1_000), state.key, tick_ms)
        scope.wheel.set(next_key, value)
