"""Keys of the dag processor's stores, ordered so that range reads find what they need.

- ``edges`` (in the upstream's partition): ``len(upstream) | upstream | dependent`` -> b"".
  The dependents of one upstream are one range: its length-prefixed id, then any bytes
  below ``0xff`` (which UTF-8 never contains).
- ``nodes`` (in the dependent's partition): the dependent's id -> its Job record's bytes.
- ``runs`` (in the dependent's partition): ``len(dependent) | dependent | run_key_ms`` -> DagRun.
- ``ends`` (in the upstream's partition): ``len(upstream) | upstream | run_key_ms`` -> the
  final status of the upstream's execution of that run (recent runs only).
- ``deadlines`` (in the dependent's partition): ``due_ms | run key`` -> a :data:`MISS` or
  :data:`FORGET` mark: a wheel, read in time order.
"""

from __future__ import annotations

import struct

MISS = b"M"
"""Deadline mark: the run is MISSED now if it is still open."""
FORGET = b"F"
"""Deadline mark: the run's retention is over; delete its state."""

_LONG = struct.Struct(">q")
_AFTER_UTF8 = b"\xff"


def _prefix(job_id: str) -> bytes:
    data = job_id.encode()
    return len(data).to_bytes(2, "big") + data


def edge_key(upstream: str, dependent: str) -> bytes:
    """The ``edges`` key of ``dependent`` depending on ``upstream``."""
    return _prefix(upstream) + dependent.encode()


def dependents_range(upstream: str) -> tuple[bytes, bytes]:
    """The ``edges`` key range holding every dependent of ``upstream``."""
    prefix = _prefix(upstream)
    return prefix, prefix + _AFTER_UTF8


def dependent_of_edge(key: bytes, upstream: str) -> str:
    """The dependent named by an ``edges`` key of ``upstream``."""
    return key[len(_prefix(upstream)) :].decode()


def run_key(dependent: str, run_key_ms: int) -> bytes:
    """The ``runs`` key of one run of ``dependent``."""
    return _prefix(dependent) + _LONG.pack(run_key_ms)


def split_run_key(key: bytes) -> tuple[str, int]:
    """The (dependent, run_key_ms) of a ``runs`` key."""
    length = int.from_bytes(key[:2], "big")
    return key[2 : 2 + length].decode(), _LONG.unpack_from(key, 2 + length)[0]


def end_key(upstream: str, run_key_ms: int) -> bytes:
    """The ``ends`` key of ``upstream``'s execution of one run (the same layout as ``runs``)."""
    return run_key(upstream, run_key_ms)


def ends_range(upstream: str, before_ms: int | None = None) -> tuple[bytes, bytes]:
    """The ``ends`` key range of ``upstream`` (runs before ``before_ms`` only, if given)."""
    prefix = _prefix(upstream)
    return prefix, prefix + (_AFTER_UTF8 if before_ms is None else _LONG.pack(max(before_ms, 0)))


def deadline_key(due_ms: int, run: bytes) -> bytes:
    """The ``deadlines`` key of a run key ``run`` due at ``due_ms``."""
    return _LONG.pack(due_ms) + run


def split_deadline_key(key: bytes) -> tuple[int, bytes]:
    """The (due_ms, run key) of a ``deadlines`` key."""
    return _LONG.unpack_from(key)[0], key[_LONG.size :]


def deadlines_until(now_ms: int) -> tuple[bytes, bytes]:
    """The ``deadlines`` key range due by ``now_ms`` (inclusive)."""
    return _LONG.pack(0), _LONG.pack(now_ms + 1)
