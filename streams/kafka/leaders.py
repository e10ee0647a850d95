"""Partition leaders that moved: what ListOffsets answers meanwhile, and how to catch up.

When a partition's leader changes (its broker restarted or died, a topic was just created),
an AdminClient's ListOffsets answers with a leader error until the client learns the new
leader and its epoch. librdkafka does not flag these retriable, and its AdminClient keeps
the old leader epoch until its next periodic metadata refresh
(``topic.metadata.refresh.interval.ms``, 5 minutes): after a broker restart every call
answered FENCED_LEADER_EPOCH for those 5 minutes, and a restoring timer and executor gave
up and exited. Asking for the topic's metadata (:func:`refresh_leaders`) updates the cache
at once, and the next call succeeds.
"""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

LEADER_MOVED = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
    }
)
"""Error codes meaning "the leader moved or is being elected": retry after a refresh."""


def leader_moved(exc: KafkaException) -> bool:
    """Whether ``exc`` is one of :data:`LEADER_MOVED`."""
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and error.code() in LEADER_MOVED


def refresh_leaders(admin: AdminClient, topics: Iterable[str], timeout_s: float = 5.0) -> None:
    """Ask for ``topics``' metadata, so that ``admin`` learns their current leaders; best
    effort (a broker that does not answer now is asked again by the caller's next retry)."""
    for topic in sorted(set(topics)):
        try:
            admin.list_topics(topic=topic, timeout=timeout_s)
        except KafkaException:
            return
