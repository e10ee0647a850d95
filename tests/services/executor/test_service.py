"""The executor process's event loop choice, and deadlines on uvloop's coarser clock."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from services.executor.deadlines import Deadlines
from services.executor.service import loop_factory

from .test_deadlines import guarded


def test_auto_and_uvloop_pick_uvloop_and_asyncio_picks_the_default() -> None:
    assert loop_factory("auto") is uvloop.new_event_loop
    assert loop_factory("uvloop") is uvloop.new_event_loop
    assert loop_factory("asyncio") is None


@pytest.mark.parametrize("choice", ["asyncio", "uvloop"])
def test_deadlines_expire_on_either_loop(choice: str) -> None:
    async def scenario() -> tuple[tuple[str, float], ...]:
        deadlines = Deadlines(asyncio.get_running_loop())
        results = await asyncio.gather(
            guarded(deadlines, 5, 0.1), guarded(deadlines, 0.02, 0.5), guarded(deadlines, 5, 0.25)
        )
        deadlines.close()
        return results

    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        (a, ta), (b, _), (c, tc) = runner.run(scenario())
    assert (a, b, c) == ("expired", "done", "expired")
    assert 0.09 <= ta < 0.3 and 0.24 <= tc < 0.45
