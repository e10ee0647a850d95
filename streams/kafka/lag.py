"""Consumer lag per assigned partition from the consumer's own state: no broker request.

The high watermark is the one librdkafka cached from its last fetch of the partition; the
position is the offset after the last record handed to the application. A partition that
has not handed over a record since it was assigned has no position yet: it is left out
rather than guessed (its committed offset would need a broker round trip). Under
``read_committed`` the lag includes the records of transactions still open.
"""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, KafkaException

log = logging.getLogger(__name__)


def consumer_lag(consumer: Consumer) -> dict[tuple[str, int], int]:
    """Records behind the end of each assigned partition that has a position, by (topic,
    partition). Call it on the thread that consumes (it reads the consumer's state)."""
    try:
        assigned = consumer.assignment()
        positions = consumer.position(assigned) if assigned else []
    except KafkaException as exc:  # closed or being rebalanced: no sample this time
        log.debug("consumer lag not sampled: %s", exc)
        return {}
    lag: dict[tuple[str, int], int] = {}
    for tp in positions:
        if tp.offset < 0:
            continue  # nothing consumed since assigned
        try:
            watermarks = consumer.get_watermark_offsets(tp, cached=True)
        except KafkaException:
            continue
        if watermarks is not None and watermarks[1] >= 0:  # -1001: not fetched yet
            lag[(tp.topic, tp.partition)] = max(0, watermarks[1] - tp.offset)
    return lag
