"""Outcomes a handler signals by raising, and the errors the executor raises about handlers.

Retryability is an attribute (``retryable``, ``retry_after_s``) inherited from
:class:`~streams.exceptions.KafkronError`, so the executor decides retry versus dead letter
from the exception alone. Any other exception a handler raises counts as retryable: the
job's ``max_attempts`` bounds how often it is tried.
"""

from __future__ import annotations

from collections.abc import Iterable

from streams.exceptions import KafkronError

_MAX_NAMES_IN_MESSAGE = 20


class HandlerError(KafkronError):
    """Base of every outcome a handler (or the executor on its behalf) reports by raising."""


class NonRetryableError(HandlerError):
    """Trying again cannot succeed (bad payload, rejected request): dead-letter at once."""

    retryable = False

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class RetryableError(HandlerError):
    """A transient failure: retry with backoff, waiting at least ``retry_after_s`` if given."""

    retryable = True

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message, retryable=True, retry_after_s=retry_after_s)


class SyncHandlersStuckError(RetryableError):
    """A sync handler was not run: too many handler threads hang past their deadlines."""

    def __init__(self, stuck: int, limit: int, *, retry_after_s: float = 60.0) -> None:
        super().__init__(
            f"not run: {stuck} sync handler threads hang past their deadlines (limit {limit}), "
            "so this executor takes no sync work until some return. Fix the handler that hangs "
            "(its attempts are TIMED_OUT with 'thread abandoned'), then restart the executor to "
            "free the threads",
            retry_after_s=retry_after_s,
        )


class HandlerTimeoutError(HandlerError):
    """The attempt ran past its deadline. Retryable: the next attempt gets a fresh deadline."""

    retryable = True

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True)


class HandlerNotFoundError(NonRetryableError):
    """A job names a handler this executor's operator did not register."""

    def __init__(self, name: str, registered: Iterable[str]) -> None:
        names = sorted(registered)
        shown = ", ".join(names[:_MAX_NAMES_IN_MESSAGE]) or "none"
        if len(names) > _MAX_NAMES_IN_MESSAGE:
            shown += f" and {len(names) - _MAX_NAMES_IN_MESSAGE} more"
        super().__init__(
            f"no handler named {name!r} is registered on this executor (registered: {shown}); "
            "register it through the 'kafkron.handlers' entry-point group or a "
            "'name=package.module:attr' handler spec, or fix the job's handler name"
        )
        self.handler_name = name
