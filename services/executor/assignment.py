"""The due partitions this executor owns: their dedup stores, pause state and run tokens.

Pauses and resumes are queued for the consume thread (:class:`Consuming`).

A due partition (topic, number) is *owned* from its assignment to its release. Partition
number N of every due topic shares dedup partition N, which is opened and restored from its
changelog on the first assignment of any topic of N; until it is restored, those due
partitions stay paused. A partition is also paused while its priority lane's buffer is full.

Each owned partition holds a *token*; a run remembers the token it started under and
produces its outcome only if the token is still current, so a run of a partition that was
released (or rewound after an aborted transaction) leaves nothing behind.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from typing import Protocol

from confluent_kafka import TopicPartition

from services.executor.consuming import Consuming
from services.executor.dedup import DedupStore
from streams.state.recovery import Recovery

log = logging.getLogger(__name__)

TP = tuple[str, int]


class Token:
    """Identity of one period of ownership of one partition (compared with ``is``)."""

    __slots__ = ()


class Ownership(Protocol):
    """What a run asks of the partitions' ownership (:class:`Assignment`)."""

    def token_to_start(self, tp: TP) -> Token | None: ...

    def is_current(self, tp: TP, token: Token) -> bool: ...


class Assignment:
    """Owned due partitions, kept consistent with the consumer's pause state."""

    def __init__(self, consuming: Consuming, dedup: DedupStore, recovery: Recovery) -> None:
        self._consuming = consuming
        self._dedup = dedup
        self._recovery = recovery
        self._topics: dict[int, set[str]] = {}  # partition number -> owned due topics
        self._restoring: set[int] = set()
        self._tokens: dict[TP, Token] = {}
        self._closing: set[TP] = set()
        self._paused_topics: frozenset[str] = frozenset()
        self._paused: set[TP] = set()

    @property
    def owned(self) -> list[TP]:
        return list(self._tokens)

    def restoring(self, tp: TP) -> bool:
        """True when ``tp`` is owned but its dedup partition is still restoring."""
        return tp in self._tokens and tp[1] in self._restoring

    def token_to_start(self, tp: TP) -> Token | None:
        """The token to start a run under; None when ``tp`` may not start runs now."""
        if tp[1] in self._restoring or tp in self._closing:
            return None
        return self._tokens.get(tp)

    def is_current(self, tp: TP, token: Token) -> bool:
        """True while the ownership a run started under lasts."""
        return self._tokens.get(tp) is token

    def assigned(self, tps: Iterable[TP]) -> None:
        """Take ownership: open and start restoring new dedup partitions, pause until done."""
        for topic, number in tps:
            self._tokens[(topic, number)] = Token()
            topics = self._topics.setdefault(number, set())
            if not topics:
                self._dedup.store.open_partition(number)
                self._recovery.start(self._dedup.store, number)
                if self._recovery.pending(number):
                    self._restoring.add(number)
            topics.add(topic)
        self._recovery.end_round()  # says so now when none of them had anything to read
        self._sync_pauses()

    def stop_starting(self, tps: Iterable[TP]) -> None:
        """Revoke began: no new runs for ``tps``; runs in progress may still finish."""
        self._closing.update(t for t in tps if t in self._tokens)

    def released(self, tps: Iterable[TP]) -> list[int]:
        """Give up ``tps``; close dedup partitions no longer owned; returns their numbers."""
        closed = []
        for tp in tps:
            self._tokens.pop(tp, None)
            self._closing.discard(tp)
            self._paused.discard(tp)
            topics = self._topics.get(tp[1])
            if topics is None:
                continue
            topics.discard(tp[0])
            if not topics:
                del self._topics[tp[1]]
                self._restoring.discard(tp[1])
                self._recovery.cancel(tp[1])
                self._dedup.close_partition(tp[1])
                closed.append(tp[1])
        return closed

    def renew_tokens(self) -> None:
        """Invalidate every run in progress (the transaction was aborted)."""
        for tp in self._tokens:
            self._tokens[tp] = Token()

    def step_restore(self) -> bool:
        """Apply one bounded restore batch; True while any dedup partition is restoring."""
        if not self._restoring:
            return False
        done = self._recovery.step(0.0)
        if done:
            self._restoring -= done
            log.debug("dedup partitions %s restored", sorted(done))
            self._sync_pauses()
        return bool(self._restoring)

    def pause_topics(self, topics: Collection[str]) -> None:
        """Keep exactly the partitions of ``topics`` paused (their lanes are full)."""
        self._paused_topics = frozenset(topics)
        self._sync_pauses()

    def _sync_pauses(self) -> None:
        wanted = {
            tp for tp in self._tokens if tp[1] in self._restoring or tp[0] in self._paused_topics
        }
        pause, resume = wanted - self._paused, self._paused - wanted
        if pause:
            paused = [TopicPartition(t, p) for t, p in pause]
            self._consuming.queue(lambda consumer: consumer.pause(paused))
        if resume:
            resumed = [TopicPartition(t, p) for t, p in resume]
            self._consuming.queue(lambda consumer: consumer.resume(resumed))
        self._paused = wanted
