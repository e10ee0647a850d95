"""Partition leaders that moved: what ListOffsets answers meanwhile, and how to catch up.

When a partition's leader changes (its broker restarted or died, a topic was just created),
an AdminClient's ListOffsets answers with a leader error until the client learns the new
leader and its epoch. librdkafka does not flag these retriable, and its AdminClient keeps
the old leader epoch until its next periodic metadata refresh
(``topic.metadata.refresh.interval.ms``, 5 minutes): after a broker restart every call
answered FENCED_LEADER_EPOCH for those 5 minutes, and a restoring timer and executor gave
up and exited. Asking for the topic's metadata (:func:`refresh_leaders`) updates the cache
at once, and the next call succeeds.

:data:`LEADER_MOVED` is the one list of those "no leader known now" codes and
:func:`retriable_offsets_error` the one check of whether a failed offsets query is tried again
(the restore's :mod:`streams.state.recovery`, the migration's
:mod:`streams.migration.jobs_topic`, the status view's ``latest_offsets`` in
:mod:`services.ingest.view`).
"""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

LEADER_MOVED = frozenset(
    {
        # The broker asked is no longer the leader: the client's metadata is out of date.
        KafkaError.NOT_LEADER_FOR_PARTITION,
        # The partition has no leader right now (an election, or a topic just created).
        KafkaError.LEADER_NOT_AVAILABLE,
        # A topic created a moment ago that this broker does not know yet.
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        # The client's leader epoch is older than the broker's: a stale cache (see above).
        KafkaError.FENCED_LEADER_EPOCH,
        # The client's leader epoch is newer than the broker's: it has not caught up yet.
        KafkaError.UNKNOWN_LEADER_EPOCH,
        # A leader just elected has no high watermark yet for the offset asked for.
        KafkaError.OFFSET_NOT_AVAILABLE,
        # librdkafka's own "Failed to query partition leaders: No leaders found" (an
        # AdminClient's ListOffsets): its metadata holds the partition without a leader, as
        # for about a second after a broker that just came back (its previous registration
        # fenced) answers. _NOENT is librdkafka's generic "no such entry": only offsets
        # queries are checked against this set.
        KafkaError._NOENT,
    }
)
"""Error codes of an offsets query meaning "no leader known now (it moved or is being
elected)": try again, an AdminClient after :func:`refresh_leaders`."""


def leader_moved(exc: KafkaException) -> bool:
    """Whether ``exc`` is one of :data:`LEADER_MOVED`."""
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and error.code() in LEADER_MOVED


def retriable_offsets_error(exc: KafkaException) -> bool:
    """Whether an offsets query that raised ``exc`` is worth trying again (an AdminClient's
    after :func:`refresh_leaders`): librdkafka flags the error retriable, or it is one of
    :data:`LEADER_MOVED` (which librdkafka does not)."""
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and (error.retriable() or leader_moved(exc))


def refresh_leaders(admin: AdminClient, topics: Iterable[str], timeout_s: float = 5.0) -> None:
    """Ask for ``topics``' metadata, so that ``admin`` learns their current leaders; best
    effort (a broker that does not answer now is asked again by the caller's next retry)."""
    for topic in sorted(set(topics)):
        try:
            admin.list_topics(topic=topic, timeout=timeout_s)
        except KafkaException:
            return
