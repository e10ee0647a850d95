"""OwnWrites: claims, and when the records the view has not read are all this process's."""

from __future__ import annotations

import asyncio

import pytest

from services.ingest.own_writes import OwnWrites

TP = ("jobs", 3)
OTHER = ("jobs", 4)


class Positions:
    """The status view's next offset per partition, set by the test."""

    def __init__(self) -> None:
        self.at: dict[tuple[str, int], int] = {}

    def __call__(self, tp: tuple[str, int]) -> int:
        return self.at.get(tp, 0)


def run(test: object) -> None:
    asyncio.run(test())  # type: ignore[operator]


def test_covers_only_when_every_unread_offset_is_our_own() -> None:
    async def test() -> None:
        view = Positions()
        own = OwnWrites(view)
        view.at[TP] = 10
        assert own.covers({TP: 10})  # nothing unread
        assert not own.covers({TP: 11})  # offset 10 is nobody's we know
        a, b = own.claim("a"), own.claim("b")
        own.written([(a, TP, 10), (b, TP, 12)])
        assert own.covers({TP: 11})
        assert not own.covers({TP: 13})  # 11 is someone else's (another process, a marker)
        assert not own.covers({TP: 11, OTHER: 1})
        view.at[TP] = 12  # the view read 10 and 11: a check drops claim a (the view answers)
        assert own.covers({TP: 13})
        assert own.get("a") is None and own.get("b") is b
        view.at[TP] = 13
        assert own.covers({TP: 13}) and own.get("b") is None
        assert len(own) == 0

    run(test)


def test_claims_settle_and_release() -> None:
    async def test() -> None:
        own = OwnWrites(Positions())
        claim = own.claim("j")
        with pytest.raises(AssertionError):
            own.claim("j")  # one claim per job id
        assert own.get("j") is claim and not claim.settled.done()
        own.written([(claim, TP, 0)])
        assert claim.settled.result() is None and own.get("j") is claim
        failed = own.claim("k")
        own.release(failed)
        assert own.get("k") is None and failed.settled.result() is None

    run(test)


def test_listeners_run_when_offsets_are_known() -> None:
    async def test() -> None:
        own = OwnWrites(Positions())
        calls: list[int] = []
        own.add_listener(lambda: calls.append(1))
        own.written([(own.claim("x"), TP, 0)])
        assert calls == [1]

    run(test)
