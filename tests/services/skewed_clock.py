"""Run a module with this process's wall clock shifted: ``python -m tests.services.skewed_clock
SKEW_MS MODULE [ARGS...]`` (a host whose clock is wrong, for ``test_clock_skew.py``).

``faketime`` (libfaketime, Debian's package) would shift the C library's clock too, but
librdkafka hangs or fails its metadata requests under it (tried with libfaketime.so.1 and
libfaketimeMT.so.1, with and without FAKETIME_DONT_FAKE_MONOTONIC: most runs time out).
So the shift is made where kafkron used to read the wall clock: Python's ``time.time`` and
``time.time_ns``, before anything of kafkron
is imported. Monotonic clocks are left alone, as on a real host whose wall clock is off.
"""

from __future__ import annotations

import runpy
import sys
import time


def shift_wall_clock(skew_ms: int) -> None:
    skew_ns = skew_ms * 1_000_000
    real_time_ns, real_time = time.time_ns, time.time
    time.time_ns = lambda: real_time_ns() + skew_ns
    time.time = lambda: real_time() + skew_ns / 1e9


if __name__ == "__main__":
    shift_wall_clock(int(sys.argv[1]))
    module, sys.argv = sys.argv[2], [sys.argv[2], *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
