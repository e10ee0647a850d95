"""CreateBatches: single creates of one loop turn share a create_many; each keeps its answer.

Pure logic on a small fake ``create_many`` (the real one, on the broker, is exercised by
``test_ingest_keyed.py`` through the same ``AsyncCreates.create``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from services.ingest.create_batches import CreateBatches, Item, OnAnswer, Outcome
from services.ingest.creates import SubmitReceipt
from services.ingest.exceptions import JobConflictError


class FakeCreateMany:
    """Answers each item with a receipt named after its request; requests named in
    ``held`` answer only once ``release`` is set (like a wait on another claim)."""

    def __init__(self, held: frozenset[str] = frozenset()) -> None:
        self.calls: list[list[Item]] = []
        self.held = held
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.cancelled = False

    async def __call__(self, items: Sequence[Item], on_answer: OnAnswer) -> list[Outcome]:
        self.calls.append(list(items))
        self.started.set()
        outcomes: list[Outcome] = []
        try:
            await asyncio.sleep(0.01)  # the write
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        for index, (request, key) in enumerate(items):
            outcome: Outcome = (
                JobConflictError(request, "another body")
                if key == "conflict"
                else SubmitReceipt(request, "SCHEDULED", None)
            )
            outcomes.append(outcome)
            if request not in self.held:
                on_answer(index, outcome)
        await self.release.wait()
        for index, (request, _) in enumerate(items):
            if request in self.held:
                on_answer(index, outcomes[index])
        return outcomes


def run(test: Any) -> None:
    asyncio.run(asyncio.wait_for(test(), 10))


def test_creates_of_one_turn_share_one_call_and_keep_their_answers() -> None:
    async def test() -> None:
        fake = FakeCreateMany()
        fake.release.set()
        batches = CreateBatches(fake)
        answers = await asyncio.gather(
            *(batches.create(f"job-{i}", "conflict" if i == 3 else f"k{i}") for i in range(8))
        )
        assert len(fake.calls) == 1 and len(fake.calls[0]) == 8
        for i, answer in enumerate(answers):
            if i == 3:
                assert isinstance(answer, JobConflictError)
            else:
                assert isinstance(answer, SubmitReceipt) and answer.job_id == f"job-{i}"
        later = await batches.create("job-late", None)  # a later turn: a new batch
        assert isinstance(later, SubmitReceipt) and len(fake.calls) == 2

    run(test)


def test_an_item_waiting_on_another_claim_does_not_hold_up_its_batch() -> None:
    async def test() -> None:
        fake = FakeCreateMany(held=frozenset({"job-waits"}))
        batches = CreateBatches(fake)
        waits = asyncio.ensure_future(batches.create("job-waits", "k"))
        quick = asyncio.ensure_future(batches.create("job-quick", "q"))
        answer = await quick
        assert isinstance(answer, SubmitReceipt) and answer.job_id == "job-quick"
        assert not waits.done()
        fake.release.set()
        assert (await waits).job_id == "job-waits"  # type: ignore[union-attr]

    run(test)


def test_a_cancelled_lone_create_stops_its_batch() -> None:
    async def test() -> None:
        fake = FakeCreateMany()
        batches = CreateBatches(fake)
        lone = asyncio.ensure_future(batches.create("job-lone", "k"))
        await fake.started.wait()
        lone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await lone
        await asyncio.sleep(0.02)
        assert fake.cancelled

    run(test)


def test_a_cancelled_create_among_others_lets_the_batch_write() -> None:
    async def test() -> None:
        fake = FakeCreateMany()
        fake.release.set()
        batches = CreateBatches(fake)
        gone = asyncio.ensure_future(batches.create("job-gone", "a"))
        stays = asyncio.ensure_future(batches.create("job-stays", "b"))
        await fake.started.wait()
        gone.cancel()
        answer = await stays
        assert isinstance(answer, SubmitReceipt) and not fake.cancelled
        assert gone.cancelled()

    run(test)


def test_a_create_cancelled_at_once_leaves_no_dead_batch() -> None:
    async def test() -> None:
        fake = FakeCreateMany()
        fake.release.set()
        batches = CreateBatches(fake)
        lone = asyncio.ensure_future(batches.create("job-early", "k"))
        await asyncio.sleep(0)  # its create() ran and opened a batch
        lone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await lone
        answer = await batches.create("job-next", "n")  # would hang on a dead batch
        assert isinstance(answer, SubmitReceipt) and answer.job_id == "job-next"

    run(test)


def test_an_unexpected_error_reaches_every_create_of_the_batch() -> None:
    async def test() -> None:
        async def broken(items: Sequence[Item], on_answer: OnAnswer) -> list[Outcome]:
            raise RuntimeError("bug")

        batches = CreateBatches(broken)
        answers = await asyncio.gather(
            batches.create("a", None), batches.create("b", None), return_exceptions=True
        )
        assert all(isinstance(a, RuntimeError) for a in answers)

    run(test)


def test_keyed_and_unkeyed_creates_gather_apart() -> None:
    """An unkeyed create never waits for the view catch-up a keyed batch needs."""

    async def test() -> None:
        fake = FakeCreateMany()
        fake.release.set()
        batches = CreateBatches(fake)
        await asyncio.gather(
            batches.create("keyed-1", "k1"),
            batches.create("fresh-1", None),
            batches.create("keyed-2", "k2"),
            batches.create("fresh-2", None),
        )
        assert sorted(sorted(r for r, _ in call) for call in fake.calls) == [
            ["fresh-1", "fresh-2"],
            ["keyed-1", "keyed-2"],
        ]

    run(test)
