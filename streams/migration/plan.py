"""Which fires of a job stay in the old namespace and which move to the new one: pure.

One instant, the cut-over ``cutover_ms``, splits every job's nominal fires: a fire scheduled
before it belongs to the old namespace, one at or after it to the new one, so each fire has
one namespace and is fired there once. Per job (:func:`plan_move`):

- **recurring, across the cut-over** (SPLIT): the old record gets ``end = cutover_ms`` (the
  cron window's end is exclusive), the new one ``start = cutover_ms`` (inclusive): the
  ticks before it fire in the old namespace, the rest in the new one;
- **every fire before** (STAYS: a one-off whose ``run_at`` is earlier, a recurring job
  whose ``end`` is not later): the old namespace fires and finishes it; it is not copied;
- **every fire at or after** (MOVES: a later one-off, a recurring job starting then or
  later): deleted from the old namespace (a tombstone: its scheduled fire goes without an
  outcome, as a deleted job's does), created in the new one;
- **no schedule of its own, or no fires** (COPIED: a DAG dependent; a CANCELLED or
  COMPLETED job): copied, the old record left as it is. A dependent runs once per run of
  its roots in its own namespace, and the roots' ticks are split like every other job's,
  so each DAG run happens in one namespace; an inactive job fires nowhere, and its copy
  keeps its id and idempotency key known to the new namespace.

Copies carry no ``manual_fire_at_ms`` and no ``backfill``: a trigger or backfill accepted
before the migration is the old namespace's, which has it. Every record written is the
job's next version, stamped ``updated_at_ms = stamp_ms`` (before the cut-over, so the new
timer schedules a copy from the cut-over on, see ``services/timer/commands.py``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

JobRecord = dict[str, Any]
_INACTIVE = ("CANCELLED", "COMPLETED")


class Placement(StrEnum):
    """Where a job's fires go (see the module docstring)."""

    SPLIT = "split"
    STAYS = "stays"
    MOVES = "moves"
    COPIED = "copied"


@dataclass(frozen=True)
class JobMove:
    """What the migration writes for one job: ``old_record`` (a new version for the old
    namespace) or ``delete_old`` (a tombstone there), and ``new_record`` for the new one."""

    job_id: str
    placement: Placement
    old_record: JobRecord | None
    delete_old: bool
    new_record: JobRecord | None

    @property
    def changes_old(self) -> bool:
        """True when the old namespace gets a record for this job (the cut)."""
        return self.old_record is not None or self.delete_old


def placement_of(job: JobRecord, cutover_ms: int) -> Placement:
    """Where ``job``'s fires go when the cut-over is at ``cutover_ms``."""
    if job["status"] in _INACTIVE or job["depends_on"]:
        return Placement.COPIED
    cron = job["cron"]
    if cron is None:
        run_at_ms: int | None = job["run_at_ms"]
        if run_at_ms is None:
            return Placement.COPIED
        return Placement.STAYS if run_at_ms < cutover_ms else Placement.MOVES
    start_ms, end_ms = cron["start_ms"], cron["end_ms"]
    if end_ms is not None and end_ms <= cutover_ms:
        return Placement.STAYS
    if start_ms is not None and start_ms >= cutover_ms:
        return Placement.MOVES
    return Placement.SPLIT


def plan_move(job: JobRecord, cutover_ms: int, stamp_ms: int) -> JobMove:
    """The records the migration writes for ``job`` (a decoded Job record)."""
    placement = placement_of(job, cutover_ms)
    job_id: str = job["job_id"]
    if placement is Placement.STAYS:
        return JobMove(job_id, placement, None, False, None)
    new_record = next_version(job, stamp_ms)
    new_record["manual_fire_at_ms"] = None
    if placement is Placement.SPLIT:
        old_record = next_version(job, stamp_ms)
        old_record["cron"]["end_ms"] = cutover_ms
        new_record["cron"]["start_ms"] = cutover_ms
        return JobMove(job_id, placement, old_record, False, new_record)
    return JobMove(job_id, placement, None, placement is Placement.MOVES, new_record)


def next_version(job: JobRecord, stamp_ms: int, step: int = 1) -> JobRecord:
    """A copy of ``job`` as its version + ``step``, updated at ``stamp_ms``, without a backfill
    request (every record but a backfill's own carries none: the timer acts on one once)."""
    record = copy.deepcopy(job)
    record["version"] = job["version"] + step
    record["updated_at_ms"] = stamp_ms
    record["backfill"] = None
    return record


def restore_record(job: JobRecord, stamp_ms: int) -> JobRecord:
    """``job`` as it was before the cut, as the version after the cut's (a rollback)."""
    return next_version(job, stamp_ms, step=2)


def drain_horizon_ms(job: JobRecord) -> int:
    """How long after a fire of ``job`` the old namespace may still work on it: the fire's
    jitter, every attempt's timeout and the retries' backoffs (with their jitter) and, for
    a DAG dependent, how long a run waits for its upstreams."""
    retry = job["retry"]
    attempts = max(1, retry["max_attempts"])
    delay_ms, backoff_ms = float(retry["initial_backoff_ms"]), 0.0
    for _ in range(attempts - 1):
        backoff_ms += min(float(retry["max_backoff_ms"]), delay_ms)
        delay_ms = min(float(retry["max_backoff_ms"]), delay_ms * retry["multiplier"])
    backoff_ms *= 1 + retry["jitter_ratio"]
    wait_ms = job["dag_wait_ms"] if job["depends_on"] else 0
    return int(job["jitter_ms"] + job["timeout_ms"] * attempts + backoff_ms + wait_ms)


def leaves_fires_in_old(placement: Placement, job: JobRecord) -> bool:
    """True when the old namespace still fires (or runs DAG runs of) ``job`` after the cut."""
    if placement in (Placement.SPLIT, Placement.STAYS):
        return True
    return placement is Placement.COPIED and bool(job["depends_on"])
