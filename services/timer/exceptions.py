"""Errors the timer service raises about job schedules."""

from __future__ import annotations

from streams.exceptions import KafkronError


class ScheduleError(KafkronError):
    """A job's schedule (cron, time zone, window, policy) is invalid.

    Not retryable: the same input fails the same way. The message names what is wrong and
    what is accepted, because ingest returns it to API users as a 422.
    """

    retryable = False

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)
