"""Single creates that arrive together go through one ``create_many``.

Under load, uvicorn starts the requests of many connections in the same event-loop turn.
Each single create costs a round of fixed work besides its own record: a delivery group and
its future, a claim round, a catch-up with the status view for a keyed create, the own-write
bookkeeping. Gathering the creates that reach :meth:`CreateBatches.create` before the next
turn into one ``create_many`` call shares that work (measured: ~20 us of server CPU per
create at 64 connections), and adds no wait: a batch starts in the very next turn.

Creates with an Idempotency-Key and creates without one gather in separate batches: a keyed
batch first waits for the status view to catch up, which a create with a fresh job id needs
not wait for.

Every create keeps its own outcome: ``create_many`` answers items one by one, and an item
that waits for another request's claim (the same key, in flight) answers when that claim
settles without holding up the others of its batch. A caller cancelled while it waits
stops its batch only when it is the batch's one item (as a create that is not batched
would stop); otherwise the batch goes on and its record may be written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from services.ingest.creates import SubmitReceipt
from streams.exceptions import KafkronError

Outcome = SubmitReceipt | KafkronError
Item = tuple[Any, str | None]  # (request, Idempotency-Key)
OnAnswer = Callable[[int, Outcome], None]
CreateMany = Callable[[Sequence[Item], OnAnswer], Awaitable[list[Outcome]]]


class _Batch:
    __slots__ = ("items", "task", "waiters")

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.waiters: list[asyncio.Future[Outcome]] = []
        self.task: asyncio.Task[None] | None = None


class CreateBatches:
    """Gathers single creates per event-loop turn and runs them through ``create_many``
    (which calls ``on_answer(index, outcome)`` once per item as soon as it is known)."""

    def __init__(self, create_many: CreateMany) -> None:
        self._create_many = create_many
        self._loop = asyncio.get_running_loop()
        self._open: dict[bool, _Batch] = {}  # by "keyed"

    async def create(self, request: Any, idempotency_key: str | None) -> Outcome:
        """The create's outcome (a receipt, or the error a single create would raise)."""
        keyed = idempotency_key is not None
        batch = self._open.get(keyed)
        if batch is None:
            batch = self._open[keyed] = _Batch()
            batch.task = self._loop.create_task(self._run(batch, keyed))
        waiter: asyncio.Future[Outcome] = self._loop.create_future()
        batch.items.append((request, idempotency_key))
        batch.waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if len(batch.waiters) == 1 and batch.task is not None:
                if self._open.get(keyed) is batch:
                    del self._open[keyed]  # its task may never start: nobody may join it
                batch.task.cancel()  # alone in its batch: stop the create itself
            raise

    async def _run(self, batch: _Batch, keyed: bool) -> None:
        if self._open.get(keyed) is batch:
            del self._open[keyed]  # later creates start the next batch
        waiters = batch.waiters

        def on_answer(index: int, outcome: Outcome) -> None:
            if not waiters[index].done():
                waiters[index].set_result(outcome)

        try:
            await self._create_many(batch.items, on_answer)
        except BaseException as exc:
            for waiter in waiters:
                if not waiter.done():
                    if isinstance(exc, asyncio.CancelledError):
                        waiter.cancel()
                    else:
                        waiter.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
