"""The one exception root of kafkron and the errors shared by every service."""

from __future__ import annotations


class KafkronError(Exception):
    """Root of every error kafkron raises on purpose.

    ``retryable`` tells a caller whether trying the same thing again may succeed;
    ``retry_after_s`` optionally says how long to wait first.
    """

    retryable: bool = False
    retry_after_s: float | None = None

    def __init__(
        self, message: str, *, retryable: bool | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message)
        if retryable is not None:
            self.retryable = retryable
        if retry_after_s is not None:
            self.retry_after_s = retry_after_s


class ConfigurationError(KafkronError):
    """A setting is missing or contradicts another; the message names it."""


class UnsupportedSchemaError(ConfigurationError):
    """A schema uses what the code generated from schemas (``streams/avro_reader.py``,
    ``streams/avro_writer.py``) has no exact code for: a logical type, a record that contains
    itself, a name it cannot resolve, or a type the writer does not encode. Its records are
    left to the codec, or the caller says which generator to extend."""


class BrokerError(KafkronError):
    """The local Kafka broker could not be fetched, formatted, started or stopped."""


class TopicLayoutError(KafkronError):
    """Topics exist with a layout (partition counts, cleanup) kafkron cannot work with."""


class DecodeError(KafkronError):
    """Bytes could not be decoded into a kafkron record (garbage, unknown schema, bad field)."""


class InvalidRecordError(DecodeError):
    """A record decoded but breaks a semantic bound of ``schemas/bounds.json`` (a negative
    attempt, an id too long, two schedule kinds, a key that is not its job id, ...).

    A subclass of :class:`DecodeError`: every consumer treats it as unusable input, dead-lettered
    with the reason and never acted on.
    """


class KafkaDeliveryError(KafkronError):
    """A produce, flush, commit or transaction step failed at the broker."""


class EncodeError(KafkronError):
    """A record does not fit its Avro schema (missing, extra or mistyped field)."""


class ScheduleError(KafkronError):
    """A job's schedule (cron, time zone, window, policy) is invalid.

    Not retryable: the same input fails the same way. The message names what is wrong and
    what is accepted, because ingest returns it to API users as a 422.
    """

    retryable = False

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)
