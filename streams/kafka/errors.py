"""One place that decides what a Kafka error means: retry the call, abort the transaction, or stop.

librdkafka flags each error (``retriable()``, ``txn_requires_abort()``, ``fatal()``); callers
branch on :class:`ErrorKind` instead of reading those flags in many places.
"""

from __future__ import annotations

from enum import StrEnum

from confluent_kafka import KafkaError, KafkaException

from streams.exceptions import KafkaDeliveryError, KafkronError


class ErrorKind(StrEnum):
    """What to do about a Kafka error."""

    RETRIABLE = "retriable"  # call again; the transaction is still usable
    ABORT_TRANSACTION = "abort_transaction"  # abort, rewind the input, redo the work
    FATAL = "fatal"  # this producer (or consumer) instance can never succeed again
    DENIED = "denied"  # the broker refused this principal: stop until an ACL is added


_ACLS_HINT = (
    "print the ACLs each service needs with 'kafkron acls --service <timer|executor|dag|api> "
    "--principal User:<name>' and add the missing one (README, 'Kafka ACLs')"
)
DENIED_ACTIONS: dict[int, str] = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "A topic ACL is missing: this principal needs Read "
    "on each topic it consumes, Write on each topic it produces to (Create on its changelog "
    "prefix when it creates its changelogs, DescribeConfigs on the due topics for an executor)",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "A group ACL is missing: this principal needs Read "
    "on its consumer group (and AlterConfigs and DescribeConfigs to set the group's session, "
    "Describe on <group>.restore; the API: Describe on the PREFIXED group "
    "'kafkron-ingest-view-')",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "A transactional-id ACL is missing: this "
    "principal needs Write and Describe on the PREFIXED transactional id '<group>.'",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "A cluster ACL is missing for this request",
    KafkaError.SASL_AUTHENTICATION_FAILED: "SASL authentication failed: check sasl.mechanism, "
    "sasl.username and sasl.password in KAFKRON_LIBRDKAFKA and that the user's SCRAM "
    "credentials exist on the cluster",
    KafkaError._AUTHENTICATION: "Authentication with the broker failed: check the SASL/SSL "
    "settings in KAFKRON_LIBRDKAFKA",
}
"""The broker's refusals of this principal, each with what the operator must grant."""


class KafkaAccessError(KafkronError):
    """The broker refused this client's principal (a missing ACL, failed authentication);
    retrying cannot help, so the service stops and says which ACL to add."""

    retryable = False


def denied_message(action: str, error: KafkaError) -> str | None:
    """What to tell the operator when ``error`` is a refusal of access; None otherwise."""
    what = DENIED_ACTIONS.get(error.code())
    if what is None:
        return None
    hint = "" if error.code() in _AUTHENTICATION_CODES else f"; {_ACLS_HINT}"
    said = error.str().rstrip(". ")
    return f"{action} was denied by the broker: {error.name()}: {said}. {what}{hint}"


_AUTHENTICATION_CODES = frozenset(
    {KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._AUTHENTICATION}
)


def raise_if_denied(action: str, error: KafkaError) -> None:
    """Raise :class:`KafkaAccessError` when ``error`` is a refusal of access (a consumer's
    error event, an admin request's answer): librdkafka retries those forever otherwise."""
    message = denied_message(action, error)
    if message is not None:
        raise KafkaAccessError(message)


def denied_error(action: str, exc: BaseException) -> KafkaAccessError | None:
    """The refusal an admin request's exception carries, as the error that stops a service;
    None when ``exc`` is no refusal of access."""
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    message = denied_message(action, error) if isinstance(error, KafkaError) else None
    return None if message is None else KafkaAccessError(message)


def classify(error: KafkaError) -> ErrorKind:
    """The kind of one KafkaError; anything librdkafka does not flag counts as fatal."""
    if error.code() in DENIED_ACTIONS:
        return ErrorKind.DENIED
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
            ErrorKind.DENIED: "",
        }[self.kind]
        denied = denied_message(action, error)
        super().__init__(
            denied or f"{action} failed: {error.name()}: {error.str()} ({hint})",
            retryable=self.kind not in (ErrorKind.FATAL, ErrorKind.DENIED),
        )

    @property
    def requires_abort(self) -> bool:
        """True when the open transaction must be aborted before anything else."""
        return self.kind is ErrorKind.ABORT_TRANSACTION

    @property
    def fatal(self) -> bool:
        """True when the client instance must be replaced."""
        return self.kind is ErrorKind.FATAL

    @property
    def denied(self) -> bool:
        """True when the broker refused this principal: stop, an ACL must be added first."""
        return self.kind is ErrorKind.DENIED

    def access_error(self) -> KafkaAccessError:
        """The refusal as the error that stops a service (only when :attr:`denied`)."""
        return KafkaAccessError(str(self))


class CommitOutcomeUnknownError(KafkronError):
    """A ``commit_transaction`` that neither finished nor failed before its deadline: the
    broker may have the commit, so the work must not be redone here. The service stops and
    the partitions' next owner resumes from what the broker committed."""

    retryable = False

    def __init__(self, cause: KafkaOperationError) -> None:
        super().__init__(
            f"the transaction's commit did not finish ({cause}): the broker may have committed "
            "it, so this process stops instead of running its work again; restart it (its "
            "partitions' next owner resumes from what the broker committed)"
        )


def stuck_error(action: str, waited_s: float) -> KafkaOperationError:
    """A call the client has not returned from ``waited_s`` after it was made, past its own
    timeout (:mod:`streams.kafka.calls`): fatal to that client, which must be replaced."""
    return KafkaOperationError(
        action,
        KafkaError(
            KafkaError._TIMED_OUT,
            f"no return within {waited_s:.1f} s, past the call's own timeout: the client is "
            "stuck in it (librdkafka #5456)",
            fatal=True,
        ),
    )


def operation_error(action: str, exc: KafkaException) -> KafkaOperationError:
    """Wrap the KafkaError a KafkaException carries, naming the step that failed."""
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if error is None:
        error = KafkaError(KafkaError._FAIL, str(exc), fatal=True)
    return KafkaOperationError(action, error)


_MAX_CAUSES = 4  # how deep to look for the KafkaException behind a SystemError
# Codes a produce() of a fenced or fatally failed client raises (without the fatal flag).
_CLIENT_FAILED = frozenset({KafkaError._FATAL, KafkaError._FENCED})


def kafka_exception(exc: BaseException | None) -> KafkaException | None:
    """The KafkaException behind ``exc`` (itself, or the cause of a SystemError), if any."""
    for _ in range(_MAX_CAUSES):
        if exc is None or isinstance(exc, KafkaException):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def refused_error(topic: str, partition: int | None, exc: KafkaException) -> KafkronError:
    """What a produce() that raised ``exc`` means: the client failed (abort, replace it), the
    transaction failed underneath (abort and reprocess), access was denied, or a caller bug."""
    error = exc.args[0] if exc.args else None
    if isinstance(error, KafkaError) and (
        error.fatal() or error.txn_requires_abort() or error.code() in _CLIENT_FAILED
    ):
        # A fenced or fatally failed client refuses every produce with _FATAL, without
        # librdkafka's fatal flag: that is the client's state, not the record's fault.
        return operation_error(f"produce to {topic}", exc)
    if isinstance(error, KafkaError) and error.code() == KafkaError._STATE:
        # The transaction failed underneath (e.g. an earlier record without a delivery
        # callback timed out): abort it and reprocess, as a latched error would.
        return KafkaOperationError(
            f"produce to {topic}",
            KafkaError(KafkaError._STATE, str(error), txn_requires_abort=True),
        )
    denied = denied_error(f"produce to {topic}", exc)
    if denied is not None:  # the topic's metadata answered TOPIC_AUTHORIZATION_FAILED
        return denied
    # Refused locally (unknown topic or partition, record too large): a caller bug.
    return KafkronError(
        f"produce to {topic} partition {partition} was refused: {exc}; check the "
        "topic name, the partition number and the record size"
    )
