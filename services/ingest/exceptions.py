"""Errors the ingest service raises; the API maps each to one HTTP status."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from streams.exceptions import KafkronError


class IngestError(KafkronError):
    """Root of ingest's errors."""


class JobRequestError(IngestError):
    """A job request failed validation; ``errors`` look like pydantic's (``loc``, ``msg``).

    Not retryable: the same request fails the same way. The API answers 422 with them.
    """

    def __init__(self, errors: Sequence[dict[str, Any]]) -> None:
        self.errors = list(errors)
        summary = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<request>'}: {e['msg']}" for e in self.errors
        )
        super().__init__(f"invalid job request: {summary}", retryable=False)

    @classmethod
    def at(
        cls, loc: Sequence[str | int], message: str, value: Any = None, kind: str = "value_error"
    ) -> JobRequestError:
        """One error at ``loc`` (e.g. ``["cron", "end"]``), shaped like pydantic's."""
        return cls([{"type": kind, "loc": list(loc), "msg": message, "input": value}])


class JobNotFoundError(IngestError):
    """No job with this id is known to the status view (404)."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(
            f"job {job_id!r} is not known; check the id, or wait if it was created a moment ago",
            retryable=False,
        )


class JobConflictError(IngestError):
    """The command contradicts the job's current state (409): the message says which."""

    def __init__(self, job_id: str, message: str) -> None:
        self.job_id = job_id
        super().__init__(message, retryable=False)


class ViewNotReadyError(IngestError):
    """The status view did not catch up in time; retry shortly (503)."""

    retryable = True


class ViewInUseError(IngestError):
    """Another process has the status view's RocksDB open (the API, or another client)."""

    def __init__(self, path: object, cause: str) -> None:
        self.path = path
        super().__init__(
            f"the status view at {path} is open in another process ({cause}). The API and each "
            "client that looks up job state need a view directory of their own: set "
            "KAFKRON_INGEST_VIEW_DIR (IngestSettings.view_dir) for one of them",
            retryable=False,
        )


class ExecutionNotFoundError(IngestError):
    """No execution (or no dead letter of one) with this id is known to the view (404)."""

    def __init__(self, execution_id: str, what: str = "execution") -> None:
        self.execution_id = execution_id
        super().__init__(
            f"{what} {execution_id!r} is not known to the status view; check the id "
            "(<job_id>@<scheduled_for_ms>), list a job's with GET /api/jobs/{id}/executions "
            "or the dead letters with GET /api/dead-letter",
            retryable=False,
        )
