"""A job's status as the API shows it: the Job record's, or COMPLETED for an ended one-off.

The Job record says SCHEDULED, PAUSED, CANCELLED (or COMPLETED); nothing rewrites it when
a one-off's execution ends, so the view derives it: a SCHEDULED one-off whose execution
(``<job_id>@<run_at_ms>``) has a final status shows COMPLETED, with that status as its
``outcome``. A replay of that execution makes it SCHEDULED again until the replay ends.
The view keeps, per job, the record's status, the one-off's run_at and that outcome
(``Lifecycle``), so a result decides the shown status without decoding the Job record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streams.records import JobStatus

_SCHEDULED, _COMPLETED = JobStatus.SCHEDULED.value, JobStatus.COMPLETED.value


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """What the shown status of a job follows from."""

    record_status: str
    run_at_ms: int | None
    outcome: str | None

    @property
    def shown(self) -> str:
        """SCHEDULED, PAUSED, CANCELLED or COMPLETED."""
        if self.record_status == _SCHEDULED and self.outcome is not None:
            return _COMPLETED
        return self.record_status

    def to_json(self) -> list[Any]:
        return [self.record_status, self.run_at_ms, self.outcome]

    @classmethod
    def from_json(cls, value: list[Any]) -> Lifecycle:
        return cls(value[0], value[1], value[2])

    @classmethod
    def of_job(cls, job: Mapping[str, Any], outcome: str | None) -> Lifecycle:
        """The lifecycle of a Job record whose one-off execution has ``outcome`` (final
        status or None); only one-offs have an outcome."""
        run_at = job.get("run_at_ms")
        return cls(job["status"], run_at, outcome if run_at is not None else None)
