"""Closing a transactional producer's client that is being replaced or released.

A client stuck in a call is closed after that call returns, if ever (never while it runs:
that would free what the call waits on); a fenced or failed one drops what it still holds
first (it can neither abort nor flush); a close that takes longer than a few seconds is left
running on the call thread.
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException, Producer

from streams.kafka.calls import ClientCalls
from streams.kafka.errors import kafka_exception, operation_error

log = logging.getLogger(__name__)
_CLOSE_WAIT_S = 10.0


def discard_client(client: Producer, calls: ClientCalls, fatal: bool) -> None:
    """Close ``client`` on its call thread; ``fatal``: it is fenced, failed or stuck."""
    if calls.stuck:
        log.warning("the stuck producer is left to close when its call returns")
        calls.abandon(lambda: close_quietly(client))
        return

    def close() -> None:
        # A fenced client cannot abort or flush; drop what it still holds, then close it.
        if fatal:
            client.purge()
        client.close()

    try:
        calls.close(close, _CLOSE_WAIT_S)
    except (KafkaException, SystemError) as exc:
        cause = kafka_exception(exc)
        if not (fatal or (cause is not None and operation_error("close", cause).fatal)):
            raise  # a fatal client reports its fatal error again on close


def close_quietly(client: Producer) -> None:
    """Close an abandoned client: drop what it holds (its transaction is aborted by the new
    client's registration), then release it. Being fenced by then, it reports so on close."""
    try:
        client.purge()
        client.close()
    except (KafkaException, SystemError) as exc:
        log.info("closed the replaced producer, which reported: %s", kafka_exception(exc) or exc)
