"""Errors of the command line; each maps to an exit code scripts can rely on."""

from __future__ import annotations

from streams.exceptions import KafkronError


class RefusedError(KafkronError):
    """The API or the cluster refused the command, or could not be reached (exit code 1).

    ``status_code`` is the HTTP status of a refusal by the API, None otherwise.
    """

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message, retryable=status_code in (None, 503))
        self.status_code = status_code
