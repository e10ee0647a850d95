"""A client's blocking calls on their own thread, each waited for with a deadline (no broker)."""

from __future__ import annotations

import threading
import time

import pytest

from streams.kafka.calls import CallStuckError, ClientCalls


def test_a_call_returns_its_result_or_raises_its_exception_on_the_callers_side() -> None:
    calls = ClientCalls("test-calls")
    callers: list[str] = []

    def answer() -> int:
        callers.append(threading.current_thread().name)
        return 42

    def refuse() -> None:
        raise KeyError("refused")

    assert calls.run("answer", answer, 5.0) == 42
    with pytest.raises(KeyError, match="refused"):
        calls.run("refuse", refuse, 5.0)
    assert callers == ["test-calls"] and not calls.stuck
    calls.close(lambda: None, 5.0)


def test_a_call_past_its_wait_leaves_the_client_stuck_and_is_cleaned_up_after_it_returns() -> None:
    calls = ClientCalls("test-stuck")
    release, cleaned = threading.Event(), threading.Event()
    began = time.monotonic()
    with pytest.raises(CallStuckError, match=r"hang did not return within 0\.3 s"):
        calls.run("hang", release.wait, 0.3)
    assert 0.3 <= time.monotonic() - began < 2.0
    assert calls.stuck
    with pytest.raises(CallStuckError):  # a stuck client takes no more calls
        calls.run("next", lambda: None, 5.0)
    calls.abandon(cleaned.set)
    assert not cleaned.wait(0.3), "the cleanup ran while the stuck call was still running"
    release.set()  # the stuck call returns at last: only now is the client closed
    assert cleaned.wait(5.0)


def test_a_close_that_takes_too_long_is_left_to_finish_in_the_background() -> None:
    calls = ClientCalls("test-close")
    release, closed = threading.Event(), threading.Event()

    def slow_close() -> None:
        release.wait()
        closed.set()

    began = time.monotonic()
    calls.close(slow_close, 0.3)
    assert time.monotonic() - began < 2.0 and not closed.is_set()
    release.set()
    assert closed.wait(5.0)
