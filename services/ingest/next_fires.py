"""A job's next nominal fires, as the dashboard's job page lists them.

Ticks of the cron in its time zone (within ``start``/``end``), each strictly after the one
before, from now; a one-off's ``run_at`` until it fired; nothing for a job that is not
SCHEDULED (paused, cancelled, completed) or that runs after its upstreams (a dependent has
no schedule of its own). Nominal: jitter and catch-up policies are left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.ingest.cron import first_tick_after
from services.ingest.presenters import next_run_ms
from streams.records import JobStatus


def next_fires_ms(
    job: Mapping[str, Any], executions: list[dict[str, Any]], now_ms: int, count: int
) -> list[int]:
    """Up to ``count`` next fire times (epoch ms) of a Job record, soonest first."""
    if job["status"] != JobStatus.SCHEDULED or count < 1:
        return []
    cron = job.get("cron")
    if cron is None:  # a one-off (its run_at until an execution of it exists) or a dependent
        once = next_run_ms(job, executions, now_ms)
        return [] if once is None else [once]
    fires: list[int] = []
    after_ms = now_ms
    while len(fires) < count:
        tick = first_tick_after(cron, after_ms)
        if tick is None:  # past the cron's end
            break
        fires.append(tick)
        after_ms = tick
    return fires
