"""Local wall-clock time versus instants in an IANA zone, with DST gaps and folds made explicit.

Cron fields name local wall-clock times; the timer fires at instants (epoch ms). Most wall
times name exactly one instant. In a spring-forward *gap* a wall time names none, and in a
fall-back *fold* (the repeated hour) it names two. These helpers say which case applies and
find the transition instant, using only :mod:`zoneinfo` (no cron knowledge here).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

_EPOCH = datetime(1970, 1, 1)
_ONE_MS = timedelta(milliseconds=1)


def naive_to_ms(naive: datetime) -> int:
    """Milliseconds from the epoch to ``naive`` read as if it were UTC (exact integer)."""
    return (naive.replace(tzinfo=None) - _EPOCH) // _ONE_MS


def wall_of_ms(instant_ms: int, zone: ZoneInfo) -> datetime:
    """The naive local wall time of an instant; ``fold=1`` marks the second pass of a fold."""
    utc = (_EPOCH + timedelta(milliseconds=instant_ms)).replace(tzinfo=UTC)
    # astimezone() goes through ZoneInfo.fromutc, which sets fold; replace() keeps it.
    return utc.astimezone(zone).replace(tzinfo=None)


def utc_offset_ms(instant_ms: int, zone: ZoneInfo) -> int:
    """The zone's UTC offset in effect at an instant, in ms."""
    utc = (_EPOCH + timedelta(milliseconds=instant_ms)).replace(tzinfo=UTC)
    offset = utc.astimezone(zone).utcoffset()
    assert offset is not None  # a ZoneInfo always has an offset
    return offset // _ONE_MS


@dataclass(frozen=True, slots=True)
class WallInstants:
    """The instants one local wall time names.

    ``first_ms`` is the only instant of an ordinary wall time, the earlier pass of a wall
    time inside a fold, or, for a wall time inside a gap, the transition instant that ends
    the gap (the first valid instant after it). ``second_ms`` is the later pass of a fold.
    """

    first_ms: int
    second_ms: int | None = None
    in_gap: bool = False


def instants_of_wall(wall: datetime, zone: ZoneInfo) -> WallInstants:
    """Classify a naive local wall time as ordinary, in a fold (two instants) or in a gap."""
    as_utc_ms = naive_to_ms(wall)
    offset0 = wall.replace(tzinfo=zone, fold=0).utcoffset()
    offset1 = wall.replace(tzinfo=zone, fold=1).utcoffset()
    assert offset0 is not None and offset1 is not None
    if offset0 == offset1:
        return WallInstants(as_utc_ms - offset0 // _ONE_MS)
    # PEP 495: the offsets differ only in a gap or a fold. In a fold both readings map back
    # to the same wall time; in a gap neither does.
    t0_ms = as_utc_ms - offset0 // _ONE_MS
    t1_ms = as_utc_ms - offset1 // _ONE_MS
    low_ms, high_ms = min(t0_ms, t1_ms), max(t0_ms, t1_ms)
    if wall_of_ms(t0_ms, zone) == wall.replace(fold=0):
        return WallInstants(low_ms, high_ms)
    return WallInstants(transition_ms(zone, low_ms, high_ms), in_gap=True)


def transition_ms(zone: ZoneInfo, low_ms: int, high_ms: int) -> int:
    """The first instant in ``(low_ms, high_ms]`` that has the offset in effect at ``high_ms``.

    Assumes one offset change in the interval (a DST gap or fold spans one transition).
    zoneinfo has no public transition list, so binary-search it: ~22 offset lookups per hour
    of interval, and only ever run at a transition.
    """
    target_ms = utc_offset_ms(high_ms, zone)
    while high_ms - low_ms > 1:
        middle_ms = (low_ms + high_ms) // 2
        if utc_offset_ms(middle_ms, zone) == target_ms:
            high_ms = middle_ms
        else:
            low_ms = middle_ms
    return high_ms


@dataclass(frozen=True, slots=True)
class Fold:
    """The repeated wall-clock span ``[start_wall, end_wall)`` of a fall-back transition."""

    start_wall: datetime
    end_wall: datetime


def fold_containing(instant_ms: int, zone: ZoneInfo) -> Fold | None:
    """The fold whose repeated wall span contains the instant's wall time, or None."""
    instants = instants_of_wall(wall_of_ms(instant_ms, zone), zone)
    if instants.second_ms is None:
        return None
    changed_at_ms = transition_ms(zone, instants.first_ms, instants.second_ms)
    offset_before_ms = utc_offset_ms(instants.first_ms, zone)
    offset_after_ms = utc_offset_ms(instants.second_ms, zone)
    start = _EPOCH + timedelta(milliseconds=changed_at_ms + offset_after_ms)
    end = _EPOCH + timedelta(milliseconds=changed_at_ms + offset_before_ms)
    return Fold(start, end)
