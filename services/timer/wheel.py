"""Where wheel entries go, and the fired-through watermark that spares a delete per fire.

A drain scans the wheel from the watermark ``W`` and, when done, stores the key after the
last entry it settled as the new ``W``. Fast entries (see ``state.py``) are not deleted
when they fire: every fast entry below ``W`` has fired, so a fire costs one produce, not
a produce plus a changelog tombstone. Idle punctuations delete those leftovers in bounded
batches (:func:`collect_fired`).

This holds because nothing unsettled ever sits below ``W``: slow entries are deleted when
settled, and :func:`place_ms` puts every new entry after ``W`` and, during a drain, after
the scan's bound, so the running scan cannot step over it. An entry that would be due in
the past therefore fires at the next punctuation; the DueEvent keeps its real ``fire_at``.
"""

from __future__ import annotations

from services.timer.scope import Scope

WATERMARK_KEY = b"\xffwheel.fired-through"
"""In the ``jobs`` store; ``\\xff`` never starts a UTF-8 job id."""

_TIME_LEN = 8


def watermark(scope: Scope) -> bytes:
    """The fired-through watermark (b"" before the first drain), read once per scope."""
    if scope.fired_through is None:
        scope.fired_through = scope.jobs.get(WATERMARK_KEY) or b""
    return scope.fired_through


def place_ms(scope: Scope, fire_ms: int) -> int:
    """The time a new entry due at ``fire_ms`` is keyed under (never below the watermark)."""
    mark = watermark(scope)
    floor_ms = int.from_bytes(mark[:_TIME_LEN], "big") + 1 if mark else 0
    return max(fire_ms, floor_ms, scope.placement_floor_ms)


def is_fired(scope: Scope, key: bytes) -> bool:
    """True when ``key`` (a fast entry) lies below the watermark: it fired."""
    return key < watermark(scope)


def save_watermark(scope: Scope) -> None:
    """Persist the watermark the drain advanced in memory."""
    if scope.fired_through is not None:
        scope.jobs.set(WATERMARK_KEY, scope.fired_through)


def collect_fired(scope: Scope, limit: int, start: bytes = b"") -> tuple[int, bytes]:
    """Delete up to ``limit`` fired fast entries in [``start``, watermark).

    Returns how many, and the key a next collection may start from: everything from
    ``start`` up to it is collected. Starting there instead of at the first key spares the
    scan over RocksDB's deletion markers of every earlier collection (until compaction),
    which after a herd made each idle punctuation step over up to all of the herd's keys.
    """
    mark = watermark(scope)
    if not mark or start >= mark:
        return 0, start
    leftovers = scope.wheel.iter_range(start, mark, limit)
    scope.wheel.delete_many([key for key, _ in leftovers])
    if len(leftovers) < limit:
        return len(leftovers), mark
    return len(leftovers), leftovers[-1][0] + b"\x00"
