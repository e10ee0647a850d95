"""Read-before-create for the API's event loop: wait until the view saw a partition's end.

A create with an Idempotency-Key (or an explicit job id) must know whether its job already
exists, on any API instance. So it asks the broker for the end of the job's ``jobs``
partition (ListOffsets, the high watermark: a record another process wrote above a
transaction still open there counts too) and waits until the status view has applied up
to there. With many
such creates at once, one ListOffsets request per round answers all of them: requests join
the next round, which starts in the next turn of the loop unless ``_MAX_ROUNDS_IN_FLIGHT``
rounds are still in flight (a round that started before a request arrived could miss a
write that was acknowledged just before it, so it never answers that request). Two rounds
in flight instead of one cut the average wait from about 1.5 round trips to about one.
The wait itself is a future woken by the view's consumer thread.

A ``covered`` predicate may end the wait sooner: when every record the view has not read
below the end is one this process wrote itself (:class:`~services.ingest.own_writes.OwnWrites`),
so the job is known without reading them. Call :meth:`AsyncCatchUp.recheck` when it changes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from confluent_kafka import KafkaException

from services.ingest.exceptions import ViewNotReadyError
from services.ingest.view import StatusView, TopicPartitionKey

Offsets = dict[TopicPartitionKey, int]
_MAX_ROUNDS_IN_FLIGHT = 2


@dataclass
class _Round:
    """One ListOffsets request for the union of the partitions its requests need."""

    future: asyncio.Future[Offsets]
    partitions: set[TopicPartitionKey] = field(default_factory=set)


def _retrieve(future: asyncio.Future[Offsets]) -> None:
    if not future.cancelled():
        future.exception()  # a round whose waiters all timed out: mark its error seen


class AsyncCatchUp:
    """Coalesced ``wait_until_caught_up`` for one event loop and one status view."""

    def __init__(
        self,
        view: StatusView,
        covered: Callable[[Mapping[TopicPartitionKey, int]], bool] | None = None,
    ) -> None:
        self._view = view
        self._covered = covered
        self._loop = asyncio.get_running_loop()
        self._next: _Round | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        self._launch_scheduled = False
        self._waiters: list[tuple[Mapping[TopicPartitionKey, int], asyncio.Future[None]]] = []
        view.add_advance_listener(self._on_advance)

    async def caught_up(self, partitions: Collection[TopicPartitionKey], timeout_s: float) -> bool:
        """True once the view applied everything acknowledged on ``partitions`` when called
        (transactions open then must have ended); False when ``timeout_s`` passed first."""
        deadline = self._loop.time() + timeout_s
        round_ = self._join(partitions)
        try:
            # A future, not a coroutine: wait_for then needs no task of its own.
            offsets = await asyncio.wait_for(asyncio.shield(round_), timeout_s)
        except TimeoutError:
            return False
        targets = {tp: offsets[tp] for tp in partitions}
        if self._done(targets):
            return True
        waiter: asyncio.Future[None] = self._loop.create_future()
        entry = (targets, waiter)
        self._waiters.append(entry)
        try:
            # Checked again after registering: an advance before this line found no waiter.
            if self._done(targets):
                return True
            await asyncio.wait_for(waiter, max(0.0, deadline - self._loop.time()))
            return True
        except TimeoutError:
            return False
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)

    def _join(self, partitions: Collection[TopicPartitionKey]) -> asyncio.Future[Offsets]:
        """The future end offsets of the next round, which will include ``partitions``."""
        if self._next is None:
            self._next = _Round(self._loop.create_future())
            self._next.future.add_done_callback(_retrieve)
            if len(self._in_flight) < _MAX_ROUNDS_IN_FLIGHT and not self._launch_scheduled:
                self._launch_scheduled = True
                self._loop.call_soon(self._launch)
        round_ = self._next
        round_.partitions.update(partitions)
        return round_.future

    def _launch(self) -> None:
        self._launch_scheduled = False
        if self._next is None or len(self._in_flight) >= _MAX_ROUNDS_IN_FLIGHT:
            return  # launched when a round in flight ends
        round_, self._next = self._next, None
        task = self._loop.create_task(self._run(round_))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _run(self, round_: _Round) -> None:
        try:
            offsets = await self._view.latest_offsets_async(round_.partitions)
        except KafkaException as exc:
            round_.future.set_exception(
                ViewNotReadyError(
                    f"could not read the end offsets of the jobs topic: {exc}; retry shortly",
                    retry_after_s=1.0,
                )
            )
        except Exception as exc:
            round_.future.set_exception(exc)
        else:
            round_.future.set_result(offsets)
        finally:
            self._in_flight.discard(asyncio.current_task())
            if self._next is not None:
                self._launch()

    def _on_advance(self) -> None:
        """In the view's thread, after a batch: wake the loop when someone waits."""
        if self._waiters:
            with contextlib.suppress(RuntimeError):  # the loop is closed
                self._loop.call_soon_threadsafe(self._wake)

    def recheck(self) -> None:
        """On the loop: wake the waiters whose targets are now reached or covered."""
        self._wake()

    def _done(self, targets: Mapping[TopicPartitionKey, int]) -> bool:
        # Positions only grow: reading them without the view's lock is safe (and keeps
        # this loop off the lock the view's thread takes after every batch).
        position = self._view.position
        if all(position(tp) >= end for tp, end in targets.items()):
            return True
        covered = self._covered
        return covered is not None and covered(targets)

    def _wake(self) -> None:
        for targets, waiter in list(self._waiters):
            if not waiter.done() and self._done(targets):
                waiter.set_result(None)
