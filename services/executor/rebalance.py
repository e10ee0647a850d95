"""Rebalance callbacks, which librdkafka calls on the consume thread, run on the event loop.

The executor keeps all its state on its event loop's thread. A callback fired inside
``consume()`` hands its work to the loop and blocks until it is done, so the partitions
change hands only after the loop released them (a revoke first waits for runs there).
A callback fired on the loop's own thread (``consumer.close()``) does the work at once,
without the wait.

Around the loop's work, on the callback's thread, a callback takes the group metadata and
makes the consumer calls the loop queued (e.g. pausing partitions that restore first): see
:mod:`services.executor.consuming` for why the loop never calls the consumer itself.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from services.executor.assignment import TP
from services.executor.consuming import Consuming

Step = Callable[[list[TP]], None]
Wait = Callable[[list[TP]], Coroutine[Any, Any, None]]


class RebalanceBridge:
    """``on_assign``, ``on_revoke`` and ``on_lost`` for ``Consumer.subscribe``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        assigned: Step,
        revoked: Step,
        lost: Step,
        before_revoke: Wait,
        consuming: Consuming,
    ) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._assigned, self._revoked, self._lost = assigned, revoked, lost
        self._before_revoke = before_revoke
        self._consuming = consuming

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_assign(partitions)
        self._on_loop(consumer, self._assigned, None, partitions)

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        try:
            self._on_loop(consumer, self._revoked, self._before_revoke, partitions)
        finally:
            consumer.incremental_unassign(partitions)

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        try:
            self._on_loop(consumer, self._lost, None, partitions)
        finally:
            consumer.incremental_unassign(partitions)

    def _on_loop(
        self, consumer: Consumer, step: Step, wait: Wait | None, partitions: list[TopicPartition]
    ) -> None:
        tps = [(tp.topic, tp.partition) for tp in partitions]
        self._consuming.refresh_metadata(consumer)
        if threading.get_ident() == self._loop_thread:
            step(tps)
        else:

            async def work() -> None:
                if wait is not None:
                    await wait(tps)
                step(tps)

            asyncio.run_coroutine_threadsafe(work(), self._loop).result()
        self._consuming.run_queued(consumer)
