"""One place that decides what a Kafka error means: retry the call, abort the transaction, or stop.

librdkafka flags each error (``retriable()``, ``txn_requires_abort()``, ``fatal()``); callers
branch on :class:`ErrorKind` instead of reading those flags in many places.
"""

from __future__ import annotations

from enum import StrEnum

from confluent_kafka import KafkaError, KafkaException

from streams.exceptions import KafkaDeliveryError


class ErrorKind(StrEnum):
    """What to do about a Kafka error."""

    RETRIABLE = "retriable"  # call again; the transaction is still usable
    ABORT_TRANSACTION = "abort_transaction"  # abort, rewind the input, redo the work
    FATAL = "fatal"  # this producer (or consumer) instance can never succeed again


def classify(error: KafkaError) -> ErrorKind:
    """The kind of one KafkaError; anything librdkafka does not flag counts as fatal."""
    if error.fatal():
        return ErrorKind.FATAL
    if error.txn_requires_abort():
        return ErrorKind.ABORT_TRANSACTION
    if error.retriable():
        return ErrorKind.RETRIABLE
    return ErrorKind.FATAL


class KafkaOperationError(KafkaDeliveryError):
    """A produce, delivery, offset or transaction step failed; ``kind`` says what to do next."""

    def __init__(self, action: str, error: KafkaError) -> None:
        self.kind = classify(error)
        self.code = error.code()
        self.error_name = error.name()
        hint = {
            ErrorKind.RETRIABLE: "it is transient; the step can be tried again",
            ErrorKind.ABORT_TRANSACTION: "abort the transaction and reprocess from the last commit",
            ErrorKind.FATAL: "recreate the client; if it repeats, check that no other process "
            "uses the same instance id and that the broker allows the transaction timeout",
        }[self.kind]
        super().__init__(
            f"{action} failed: {error.name()}: {error.str()} ({hint})",
            retryable=self.kind is not ErrorKind.FATAL,
        )

    @property
    def requires_abort(self) -> bool:
        """True when the open transaction must be aborted before anything else."""
        return self.kind is ErrorKind.ABORT_TRANSACTION

    @property
    def fatal(self) -> bool:
        """True when the client instance must be replaced."""
        return self.kind is ErrorKind.FATAL


def operation_error(action: str, exc: KafkaException) -> KafkaOperationError:
    """Wrap the KafkaError a KafkaException carries, naming the step that failed."""
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if error is None:
        error = KafkaError(KafkaError._FAIL, str(exc), fatal=True)
    return KafkaOperationError(action, error)
