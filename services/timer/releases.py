"""Applying the dag processor's verdicts (``dag-releases``) on runs of dependent jobs.

The dag processor counts upstream completions; the timer stays the only writer of DueEvents.
A RUN verdict fires the dependent's execution ``<job_id>@<run_key_ms>`` (trigger DAG) under
the same rules as any fire: a CANCELLED or COMPLETED job's run ends CANCELLED, a PAUSED one's
SKIPPED ("paused"), and the overlap policy decides between a DueEvent, SKIPPED, a queued fire
or a replacement. UPSTREAM_FAILED and MISSED verdicts become the run's outcome, with the
dag processor's reason, on ``job-results``.
"""

from __future__ import annotations

import logging
from typing import Any

from services.timer.firing import CANCELLED_JOB, DAG, settle_fire
from services.timer.scope import Scope
from services.timer.state import load_state, save_state

log = logging.getLogger(__name__)


def apply_release(scope: Scope, release: dict[str, Any]) -> None:
    """Apply one DagRelease: fire the dependent's run, or record its outcome."""
    job_id, run_key_ms = release["job_id"], release["run_key_ms"]
    state = load_state(scope, job_id.encode())
    if state is None:
        log.info("%s: release of run %d for a job the timer does not have", job_id, run_key_ms)
        return
    verdict = release["verdict"]
    if verdict != "RUN":
        reason = release["reason"] or verdict.lower()
        scope.emit_outcome(
            job_id, run_key_ms, verdict, reason, trigger=DAG, job_version=state.version
        )
        return
    if state.status in ("CANCELLED", "COMPLETED"):
        scope.emit_outcome(
            job_id, run_key_ms, "CANCELLED", CANCELLED_JOB, trigger=DAG, job_version=state.version
        )
        return
    settle_fire(scope, state, state.job(scope), run_key_ms, DAG)
    save_state(scope, state)
