"""A Kafka client's blocking calls on a thread of their own, each waited for with a deadline.

librdkafka promises that a transactional call returns within the timeout it is given. Its
``send_offsets_to_transaction`` can wait forever (librdkafka #5456 and #5511, open in 2.16):
the group coordinator request inside it never checks its own timeout, and when the broker it
waits for was decommissioned (a re-bootstrap after every connection dropped decommissions
the brokers it knew), no broker state change ever wakes it. Seen as an executor cut from the
broker for 15 s: its event loop sat in that call (gdb: ``rd_kafka_txn_op_req0``, a condition
wait without timeout) and never came back after the network did.

So the caller never makes such a call itself: :class:`ClientCalls` makes them, one at a time,
on a daemon thread, and :meth:`ClientCalls.run` waits for each at most the time it is given.
A call still running then raises :class:`CallStuckError` and the client must be replaced:
:meth:`ClientCalls.abandon` queues the old client's close behind the stuck call (the client is
closed if the call ever returns, and never while it runs: that would free what it waits on).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from streams.exceptions import KafkronError

_T = TypeVar("_T")
log = logging.getLogger(__name__)
_Call = tuple[Callable[[], Any], "Future[Any]"]


class CallStuckError(KafkronError):
    """A client call did not return within the time it was given; the client is unusable."""

    def __init__(self, action: str, waited_s: float) -> None:
        super().__init__(
            f"{action} did not return within {waited_s:.1f} s: the client is stuck in it "
            "and must be replaced"
        )
        self.action = action
        self.waited_s = waited_s


class ClientCalls:
    """One client's blocking calls, made in order on one daemon thread named ``name``."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._stuck = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    @property
    def stuck(self) -> bool:
        """True once a call outlived the time it was given (it may still be running)."""
        return self._stuck

    def run(self, action: str, call: Callable[[], _T], wait_s: float) -> _T:
        """``call()``'s result (or exception), waited for at most ``wait_s`` seconds.

        Raises :class:`CallStuckError` when it has not returned by then (it goes on running).
        """
        if self._stuck:
            raise CallStuckError(action, 0.0)
        future: Future[Any] = Future()
        self._calls.put((call, future))
        try:
            done: _T = future.result(timeout=wait_s)
        except TimeoutError:
            if future.done():  # it finished at the deadline: not stuck
                result: _T = future.result()
                return result
            self._stuck = True
            raise CallStuckError(action, wait_s) from None
        return done

    def abandon(self, cleanup: Callable[[], object]) -> None:
        """Give up on this client: ``cleanup()`` runs after the calls queued before it (a
        stuck one included, if it ever returns), then the thread ends. Nothing waits."""
        future: Future[object] = Future()
        future.add_done_callback(_log_failed_cleanup)
        self._calls.put((cleanup, future))
        self._calls.put(None)

    def close(self, cleanup: Callable[[], object], wait_s: float) -> None:
        """Run ``cleanup()`` (the client's close) and end the thread; wait at most ``wait_s``
        for it, then leave it to finish by itself. Raises what ``cleanup()`` raised."""
        try:
            if self._stuck:
                self.abandon(cleanup)
                return
            self.run("close", cleanup, wait_s)
        except CallStuckError:
            log.warning(
                "a Kafka client did not close within %.0f s; it finishes in the background",
                wait_s,
            )
        finally:
            self._calls.put(None)

    def _serve(self) -> None:
        while True:
            item = self._calls.get()
            if item is None:
                return
            call, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(call())
            except BaseException as exc:  # handed to the caller, who raises it
                future.set_exception(exc)


def _log_failed_cleanup(future: Future[object]) -> None:
    exc = future.exception()
    if exc is not None:
        log.warning("closing an abandoned Kafka client failed: %r", exc)
