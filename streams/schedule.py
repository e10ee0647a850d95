"""Cron schedules in an IANA time zone: parse and validate them, and compute their ticks.

Ticks are epoch milliseconds. Each tick is computed from the previous *scheduled* tick
(``next_fire_after(spec, tick)``), never from when a run finished, so schedules do not drift.
croniter enumerates the local wall-clock times that match the expression (run naive, so its
own DST handling never applies); this module maps those wall times to instants with an
explicit DST policy:

* **Spring forward (gap)**: a wall time that does not exist fires once, at the first valid
  instant after the gap, i.e. the transition instant. Europe/Berlin 2026-03-29,
  ``30 2 * * *`` fires at 03:00 CEST (01:00Z). Several gap times (``*/15 2 * * *``), and a
  real tick at the same instant (``0 * * * *`` at 03:00), collapse into that one fire. This
  holds for every hour field, so ``30 * * * *`` fires 01:30 CET, 03:00 CEST, 03:30 CEST.
* **Fall back (fold)**: a wall time inside the repeated span names two instants.
  ``fold_policy`` decides: ``FIRST`` fires the first occurrence only, ``EVERY`` fires both
  (every real occurrence), ``AUTO`` (default) is ``EVERY`` when the hour field means "every
  hour" (``*``, any step such as ``*/2`` or ``0-23/3``, or a list or range naming all 24
  hours) and ``FIRST`` for a fixed hour field (``1``, ``1-3``, ``0,12``).
  America/New_York 2026-11-01: ``0 * * * *`` fires 01:00 EDT (05:00Z) and 01:00 EST
  (06:00Z); ``30 1 * * *`` fires once, 01:30 EDT (05:30Z).

Ticks of one schedule are strictly increasing. ``start_ms`` is inclusive and ``end_ms``
exclusive: a tick ``t`` is in the schedule when ``start_ms <= t < end_ms``.
Six-field expressions put seconds first (Quartz/Spring style); day-of-month and
day-of-week combine with OR when both are restricted (classic cron).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from streams.exceptions import ScheduleError
from streams.records import FoldPolicy as FoldPolicy
from streams.walltime import fold_containing, instants_of_wall, wall_of_ms

_ACCEPTED_FORMS = (
    "accepted: 5 fields 'minute hour day-of-month month day-of-week' or 6 fields with "
    "seconds first 'second minute hour day-of-month month day-of-week'; each field is '*', "
    "a number, a range 'a-b', a step '*/n' or 'a-b/n', or a comma list of these "
    "(JAN-DEC and SUN-SAT names, and L, W, # and ? in the day fields, are allowed)"
)
# These names resolve to whatever the host is configured with, so two timer processes
# could disagree about the same job.
_HOST_DEPENDENT_ZONES = frozenset({"localtime", "posixrules"})
# A candidate wall time can be unusable only at a DST transition; this bounds that search.
_MAX_WALLS_PER_LOOKUP = 1_000
_ONE_MS = timedelta(milliseconds=1)
# croniter's 'H' (hashed) fields need a hash id; a lone h, not the h in 'thu'.
_HASHED_FIELD = re.compile(r"(?<![a-z])h(?![a-z])")
_VALIDATION_START = datetime(2000, 1, 1)


@dataclass(frozen=True)
class CronSpec:
    """A validated cron schedule; build it with :func:`parse_cron`, not directly."""

    expression: str
    timezone: str
    start_ms: int | None
    end_ms: int | None
    fold_policy: FoldPolicy
    has_seconds: bool
    # fold_policy resolved against the hour field: True when both passes of a fold fire.
    fires_every_fold: bool
    zone: ZoneInfo = field(repr=False, compare=False)
    # A parsed croniter used as a template: parsing costs ~280 us, copying it ~4 us, and a
    # copy per call keeps this frozen value safe to share between threads.
    cron_template: croniter = field(repr=False, compare=False)
    # The last answer of next_fire_after as (after_ms, tick_ms), to answer again cheaply.
    last_answer: list[tuple[int, int | None]] = field(
        default_factory=list, repr=False, compare=False
    )


def parse_cron(
    expression: str,
    timezone: str,
    start_ms: int | None = None,
    end_ms: int | None = None,
    fold_policy: FoldPolicy | str = FoldPolicy.AUTO,
) -> CronSpec:
    """Validate a cron schedule and return it ready for tick computation.

    Raises :class:`ScheduleError` naming what is wrong and what is accepted.
    """
    fields = expression.split() if isinstance(expression, str) else []
    if len(fields) not in (5, 6):
        raise ScheduleError(
            f"cron expression {expression!r} has {len(fields)} fields; {_ACCEPTED_FORMS} "
            "(aliases such as @daily and a year field are not supported)"
        )
    normalized = " ".join(fields)
    if any(_HASHED_FIELD.search(value.lower()) for value in fields):
        raise ScheduleError(
            f"cron expression {expression!r} uses a hashed 'H' field, which is not supported; "
            + _ACCEPTED_FORMS
        )
    policy = _parse_fold_policy(fold_policy)
    zone = _load_zone(timezone)
    if start_ms is not None and end_ms is not None and start_ms >= end_ms:
        raise ScheduleError(
            f"schedule start_ms {start_ms} is not before end_ms {end_ms}; "
            "start_ms must be earlier than end_ms (end_ms is exclusive), or omit either"
        )
    template = _build_cron(expression, normalized)
    hour_field = fields[2] if len(fields) == 6 else fields[1]
    return CronSpec(
        expression=normalized,
        timezone=timezone,
        start_ms=start_ms,
        end_ms=end_ms,
        fold_policy=policy,
        has_seconds=len(fields) == 6,
        fires_every_fold=_fires_every_fold(policy, hour_field, template),
        zone=zone,
        cron_template=template,
    )


def next_fire_after(spec: CronSpec, after_ms: int) -> int | None:
    """The first tick strictly after ``after_ms`` within start/end, or None if there is none.

    Pass the previous *scheduled* tick to get the following one.
    """
    remembered = spec.last_answer[:1]  # one atomic read: other threads may replace it
    if remembered:
        known_after_ms, known_tick_ms = remembered[0]
        # The answer is the smallest tick after after_ms: with none in (known_after_ms,
        # known_tick_ms), every after_ms in [known_after_ms, known_tick_ms) has that answer.
        if known_after_ms <= after_ms and (known_tick_ms is None or after_ms < known_tick_ms):
            return known_tick_ms
    tick_ms = _next_tick_within(spec, after_ms)
    spec.last_answer[:] = [(after_ms, tick_ms)]
    return tick_ms


def _next_tick_within(spec: CronSpec, after_ms: int) -> int | None:
    """The first tick strictly after ``after_ms`` within start/end, computed (croniter)."""
    if spec.start_ms is not None:
        after_ms = max(after_ms, spec.start_ms - 1)
    tick_ms = _next_tick(spec, after_ms)
    if tick_ms is None or (spec.end_ms is not None and tick_ms >= spec.end_ms):
        return None
    return tick_ms


def ticks_between(spec: CronSpec, after_ms: int, until_ms: int, limit: int) -> list[int]:
    """The ticks in ``(after_ms, until_ms]``, oldest first, at most ``limit`` of them."""
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    ticks: list[int] = []
    cursor_ms = after_ms
    while len(ticks) < limit:
        tick_ms = next_fire_after(spec, cursor_ms)
        if tick_ms is None or tick_ms > until_ms:
            break
        ticks.append(tick_ms)
        cursor_ms = tick_ms
    return ticks


def _next_tick(spec: CronSpec, after_ms: int) -> int | None:
    """The first tick after ``after_ms`` ignoring start/end; handles an instant in a fold."""
    zone = spec.zone
    scan_from = wall_of_ms(after_ms, zone)
    second_pass_ms: int | None = None
    fold = fold_containing(after_ms, zone)
    if fold is not None:
        if scan_from.fold == 1 and not spec.fires_every_fold:
            # On the second pass the rest of the repeated span already fired on the first.
            scan_from = fold.end_wall - _ONE_MS
        elif scan_from.fold == 0 and spec.fires_every_fold:
            # Still on the first pass: the repeated span's second pass comes after every
            # first-pass instant, so its earliest matching wall time is a candidate too.
            wall = _next_wall(spec, fold.start_wall - _ONE_MS)
            if wall is not None and wall < fold.end_wall:
                second_pass_ms = instants_of_wall(wall, zone).second_ms
    first_ms = _first_instant_after(spec, scan_from, after_ms)
    candidates = [ms for ms in (first_ms, second_pass_ms) if ms is not None]
    return min(candidates, default=None)


def _first_instant_after(spec: CronSpec, scan_from: datetime, after_ms: int) -> int | None:
    """Walk matching wall times after ``scan_from`` to the first instant after ``after_ms``."""
    for _ in range(_MAX_WALLS_PER_LOOKUP):
        wall = _next_wall(spec, scan_from)
        if wall is None:
            return None
        instants = instants_of_wall(wall, spec.zone)
        if instants.first_ms > after_ms:
            return instants.first_ms
        if (
            spec.fires_every_fold
            and instants.second_ms is not None
            and instants.second_ms > after_ms
        ):
            return instants.second_ms
        scan_from = wall
    raise ScheduleError(
        f"no tick of {spec.expression!r} in {spec.timezone} found after {after_ms} ms within "
        f"{_MAX_WALLS_PER_LOOKUP} candidate wall times; this is a bug, please report it"
    )


def _next_wall(spec: CronSpec, after: datetime) -> datetime | None:
    """The first naive wall time after ``after`` matching the expression, or None."""
    cron = copy.copy(spec.cron_template)
    try:
        wall = cron.get_next(datetime, start_time=after)
    except CroniterBadDateError:  # no match within croniter's 50-year search horizon
        return None
    assert isinstance(wall, datetime)
    return wall


def _parse_fold_policy(value: FoldPolicy | str) -> FoldPolicy:
    try:
        return FoldPolicy(value)
    except ValueError:
        accepted = ", ".join(policy.value for policy in FoldPolicy)
        raise ScheduleError(f"fold_policy {value!r} is unknown; accepted: {accepted}") from None


def _load_zone(name: str) -> ZoneInfo:
    hint = "use an IANA time zone name such as 'UTC', 'Europe/Berlin' or 'America/New_York'"
    if not isinstance(name, str) or name in _HOST_DEPENDENT_ZONES:
        raise ScheduleError(f"time zone {name!r} is not accepted; {hint}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        # OSError covers a name that is a directory of the zone database ('America').
        raise ScheduleError(
            f"time zone {name!r} is not a known IANA time zone; {hint} (names are case-sensitive)"
        ) from None


def _build_cron(expression: str, normalized: str) -> croniter:
    try:
        template = croniter(
            normalized, _VALIDATION_START, ret_type=datetime, second_at_beginning=True
        )
        # A well-formed expression can still name no date at all ('0 0 30 2 *').
        copy.copy(template).get_next(datetime)
    except CroniterBadDateError:
        raise ScheduleError(
            f"cron expression {expression!r} never fires (no date matches its day and month "
            "fields); check the day-of-month against the month"
        ) from None
    except (CroniterError, ValueError, TypeError, KeyError, IndexError) as exc:
        raise ScheduleError(
            f"cron expression {expression!r} is invalid ({exc}); " + _ACCEPTED_FORMS
        ) from None
    return template


def _fires_every_fold(policy: FoldPolicy, hour_field: str, template: croniter) -> bool:
    if policy is not FoldPolicy.AUTO:
        return policy is FoldPolicy.EVERY
    hours = template.expanded[1]
    every_hour = hours == ["*"] or len(hours) == 24
    return hour_field == "*" or "/" in hour_field or every_hour
