"""Reads of the status view first: its applying thread steps aside while a read runs.

The API's event loop and the view's applying thread share the GIL (rocksdict holds it
through every RocksDB call). While both want it, the loop gets it back from a thread in
Python code only after the switch interval, and not at all while that thread is
preempted by the OS: measured under ``bench.api_reads`` (bench/HISTORY.md, 2026-12-05
"keep the view's RocksDB calls from holding the GIL"), the view's own RocksDB calls were
short (no get over 10 ms, writes of a slice ~1 ms), and the loop's stalls came with the
view thread holding the GIL in Python between them. So the applying thread checks
between records whether a read is running, and if so waits (the GIL released) until it
ends, for at most a bounded time per slice, so reads cannot hold the view back for long.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class ReadsFirst:
    """Counts the reads in progress; :meth:`step_aside` waits for them to end."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reads = 0
        self._no_reads = threading.Event()
        self._no_reads.set()

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Mark a read of the view in progress for the length of the block."""
        with self._lock:
            self._reads += 1
            self._no_reads.clear()
        try:
            yield
        finally:
            with self._lock:
                self._reads -= 1
                if self._reads == 0:
                    self._no_reads.set()

    def step_aside(self, until_monotonic_s: float) -> None:
        """Wait while a read is in progress, at most until ``until_monotonic_s``
        (``time.monotonic()``); returns at once when none is."""
        if self._no_reads.is_set():
            return
        left_s = until_monotonic_s - time.monotonic()
        if left_s > 0:
            self._no_reads.wait(left_s)
