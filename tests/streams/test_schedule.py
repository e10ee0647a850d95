"""Cron parsing, tick computation and the DST policy of streams.schedule.

Examples are checked against hand-computed UTC instants; property tests compare with an
independent brute-force reference (scan every minute or second) and with croniter itself.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, available_timezones

import pytest
from croniter import croniter
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from streams.exceptions import KafkronError, ScheduleError
from streams.schedule import (
    CronSpec,
    FoldPolicy,
    next_fire_after,
    parse_cron,
    ticks_between,
)

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
ZONES = sorted(available_timezones() - {"localtime", "posixrules"})
# Zones with unusual transitions, drawn often so DST cases come up in every run: 30-minute
# and 2-hour shifts, negative DST, midnight transitions, a skipped day (Apia, 2011-12-30).
ODD_DST_ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Antarctica/Troll",
    "Pacific/Apia",
    "Europe/Dublin",
    "America/Santiago",
    "America/Havana",
    "Africa/Casablanca",
    "Pacific/Chatham",
    "America/St_Johns",
    "Asia/Tehran",
    "Asia/Gaza",
    "Antarctica/Casey",
]
PROPERTY_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def utc_ms(text: str) -> int:
    """Epoch ms of an ISO time written in UTC, e.g. '2026-03-29T01:00'."""
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def ticks(spec: CronSpec, after: str, until: str) -> list[str]:
    return [iso(t) for t in ticks_between(spec, utc_ms(after), utc_ms(until), 100)]


# --- examples: hand-computed UTC instants around the 2026 transitions -------------------
# Europe/Berlin: 2026-03-29 02:00 CET -> 03:00 CEST at 01:00Z;
#                2026-10-25 03:00 CEST -> 02:00 CET at 01:00Z.
# America/New_York: 2026-03-08 02:00 EST -> 03:00 EDT at 07:00Z;
#                   2026-11-01 02:00 EDT -> 01:00 EST at 06:00Z.

EXAMPLES = [
    # Spring forward, fixed hour: the gap tick fires once at the end of the gap.
    ("30 2 * * *", "Europe/Berlin", "AUTO", "2026-03-28T00:00", "2026-03-30T12:00",
     ["2026-03-28T01:30:00", "2026-03-29T01:00:00", "2026-03-30T00:30:00"]),
    ("*/15 2 * * *", "Europe/Berlin", "AUTO", "2026-03-29T00:00", "2026-03-30T00:10",
     ["2026-03-29T01:00:00", "2026-03-30T00:00:00"]),
    ("15 2 * * *", "America/New_York", "AUTO", "2026-03-07T12:00", "2026-03-09T12:00",
     ["2026-03-08T07:00:00", "2026-03-09T06:15:00"]),
    # Spring forward, '*' hour: 02:00 collapses into the real 03:00 tick, 02:30 shifts.
    ("0 * * * *", "Europe/Berlin", "AUTO", "2026-03-28T23:30", "2026-03-29T02:00",
     ["2026-03-29T00:00:00", "2026-03-29T01:00:00", "2026-03-29T02:00:00"]),
    ("30 * * * *", "Europe/Berlin", "AUTO", "2026-03-29T00:00", "2026-03-29T02:00",
     ["2026-03-29T00:30:00", "2026-03-29T01:00:00", "2026-03-29T01:30:00"]),
    # Fall back, fixed hour: once, at the first occurrence (EVERY forces both).
    ("30 2 * * *", "Europe/Berlin", "AUTO", "2026-10-24T12:00", "2026-10-26T12:00",
     ["2026-10-25T00:30:00", "2026-10-26T01:30:00"]),
    ("30 2 * * *", "Europe/Berlin", "EVERY", "2026-10-24T12:00", "2026-10-26T12:00",
     ["2026-10-25T00:30:00", "2026-10-25T01:30:00", "2026-10-26T01:30:00"]),
    ("30 1 * * *", "America/New_York", "AUTO", "2026-10-31T12:00", "2026-11-02T12:00",
     ["2026-11-01T05:30:00", "2026-11-02T06:30:00"]),
    # Fall back, '*' or step hour: every real hour, both passes of the repeated hour.
    ("0 * * * *", "America/New_York", "AUTO", "2026-11-01T04:30", "2026-11-01T07:00",
     ["2026-11-01T05:00:00", "2026-11-01T06:00:00", "2026-11-01T07:00:00"]),
    ("0 * * * *", "America/New_York", "FIRST", "2026-11-01T04:30", "2026-11-01T07:00",
     ["2026-11-01T05:00:00", "2026-11-01T07:00:00"]),
    ("0 * * * *", "Europe/Berlin", "AUTO", "2026-10-24T23:30", "2026-10-25T02:00",
     ["2026-10-25T00:00:00", "2026-10-25T01:00:00", "2026-10-25T02:00:00"]),
    ("0 1-23/2 * * *", "America/New_York", "AUTO", "2026-11-01T04:30", "2026-11-01T08:00",
     ["2026-11-01T05:00:00", "2026-11-01T06:00:00", "2026-11-01T08:00:00"]),
    ("*/30 * * * *", "America/New_York", "AUTO", "2026-11-01T04:45", "2026-11-01T07:00",
     ["2026-11-01T05:00:00", "2026-11-01T05:30:00", "2026-11-01T06:00:00",
      "2026-11-01T06:30:00", "2026-11-01T07:00:00"]),
    ("0 0-23 * * *", "America/New_York", "AUTO", "2026-11-01T04:30", "2026-11-01T07:00",
     ["2026-11-01T05:00:00", "2026-11-01T06:00:00", "2026-11-01T07:00:00"]),
    # 6 fields, seconds first. croniter itself fires the gap tick at 03:00:30 CEST.
    ("30 30 2 * * *", "Europe/Berlin", "AUTO", "2026-03-28T12:00", "2026-03-30T12:00",
     ["2026-03-29T01:00:00", "2026-03-30T00:30:30"]),
    ("0 */30 1 * * *", "America/New_York", "AUTO", "2026-11-01T04:45", "2026-11-02T07:00",
     ["2026-11-01T05:00:00", "2026-11-01T05:30:00", "2026-11-02T06:00:00",
      "2026-11-02T06:30:00"]),
    ("15 0 * * * *", "America/New_York", "AUTO", "2026-11-01T04:30", "2026-11-01T07:00",
     ["2026-11-01T05:00:15", "2026-11-01T06:00:15"]),
    ("*/20 59 1 * * *", "America/New_York", "AUTO", "2026-03-08T06:30", "2026-03-08T08:00",
     ["2026-03-08T06:59:00", "2026-03-08T06:59:20", "2026-03-08T06:59:40"]),
    ("*/20 0 2 * * *", "America/New_York", "AUTO", "2026-03-08T06:30", "2026-03-09T12:00",
     ["2026-03-08T07:00:00", "2026-03-09T06:00:00", "2026-03-09T06:00:20",
      "2026-03-09T06:00:40"]),
]  # fmt: skip


@pytest.mark.parametrize(("expression", "zone", "fold", "after", "until", "expected"), EXAMPLES)
def test_dst_examples(
    expression: str, zone: str, fold: str, after: str, until: str, expected: list[str]
) -> None:
    spec = parse_cron(expression, zone, fold_policy=fold)
    assert ticks(spec, after, until) == expected


def test_from_inside_a_fold() -> None:
    # 06:10Z is 01:10 EST, the second pass of New York's repeated hour.
    every_half_hour = parse_cron("*/30 * * * *", "America/New_York")
    assert iso(next_fire_after(every_half_hour, utc_ms("2026-11-01T06:10")) or 0) == (
        "2026-11-01T06:30:00"
    )
    first_only = parse_cron("*/30 * * * *", "America/New_York", fold_policy="FIRST")
    assert iso(next_fire_after(first_only, utc_ms("2026-11-01T06:10")) or 0) == (
        "2026-11-01T07:00:00"
    )
    # 05:10Z is 01:10 EDT, the first pass: the next hourly tick is 01:00 EST.
    hourly = parse_cron("0 * * * *", "America/New_York")
    assert iso(next_fire_after(hourly, utc_ms("2026-11-01T05:10")) or 0) == "2026-11-01T06:00:00"


def test_fold_policy_resolution() -> None:
    assert not parse_cron("0 1 * * *", "UTC").fires_every_fold
    assert not parse_cron("0 1-3 * * *", "UTC").fires_every_fold
    assert parse_cron("0 * * * *", "UTC").fires_every_fold
    assert parse_cron("0 */2 * * *", "UTC").fires_every_fold
    assert parse_cron("0 0 0-23/3 * * *", "UTC").fires_every_fold
    assert parse_cron("0 0-23 * * *", "UTC").fires_every_fold
    assert parse_cron("0 1 * * *", "UTC", fold_policy="EVERY").fires_every_fold
    assert not parse_cron("0 * * * *", "UTC", fold_policy=FoldPolicy.FIRST).fires_every_fold


def test_start_inclusive_end_exclusive() -> None:
    start, end = utc_ms("2026-01-01T10:00"), utc_ms("2026-01-01T10:03")
    spec = parse_cron("* * * * *", "UTC", start_ms=start, end_ms=end)
    assert next_fire_after(spec, 0) == start
    assert ticks_between(spec, 0, end + HOUR_MS, 10) == [start, start + 60_000, start + 120_000]
    assert next_fire_after(spec, start + 120_000) is None
    assert ticks_between(spec, 0, end, 2) == [start, start + 60_000]
    assert ticks_between(spec, 0, end, 0) == []
    with pytest.raises(ValueError, match="limit"):
        ticks_between(spec, 0, end, -1)


def test_sub_second_after_and_leap_day() -> None:
    every_second = parse_cron("* * * * * *", "UTC")
    assert next_fire_after(every_second, 1_000_500) == 1_001_000
    assert next_fire_after(every_second, 1_000_000) == 1_001_000
    leap = parse_cron("0 12 29 2 *", "Europe/Berlin")
    assert iso(next_fire_after(leap, utc_ms("2026-01-01T00:00")) or 0) == "2028-02-29T11:00:00"


def test_spec_is_frozen_and_normalized() -> None:
    spec = parse_cron("  0   9 * *  1-5 ", "Europe/Berlin")
    assert spec.expression == "0 9 * * 1-5"
    assert spec == parse_cron("0 9 * * 1-5", "Europe/Berlin")
    with pytest.raises(AttributeError):
        spec.timezone = "UTC"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"expression": "* * * *"}, "has 4 fields; accepted: 5 fields"),
        ({"expression": "0 0 1 1 * 2026 7"}, "has 7 fields"),
        ({"expression": "@daily"}, "aliases such as @daily"),
        ({"expression": ""}, "has 0 fields"),
        ({"expression": "61 * * * *"}, "is invalid .*accepted: 5 fields"),
        ({"expression": "* * * * 9"}, "is invalid"),
        ({"expression": "*/0 * * * *"}, "is invalid"),
        ({"expression": "0 0 * JANUARY *"}, "is invalid"),
        ({"expression": "H * * * *"}, "hashed 'H' field"),
        ({"expression": "0 0 30 2 *"}, "never fires"),
        ({"timezone": "Mars/Olympus_Mons"}, "not a known IANA time zone.*Europe/Berlin"),
        ({"timezone": "utc"}, "case-sensitive"),
        ({"timezone": "America"}, "not a known IANA time zone"),
        ({"timezone": "/etc/passwd"}, "not a known IANA time zone"),
        ({"timezone": ""}, "not a known IANA time zone"),
        ({"timezone": "localtime"}, "not accepted"),
        ({"start_ms": 10, "end_ms": 10}, "start_ms 10 is not before end_ms 10"),
        ({"start_ms": 11, "end_ms": 10}, "must be earlier than end_ms"),
        ({"fold_policy": "SOMETIMES"}, "fold_policy 'SOMETIMES' is unknown; accepted: AUTO"),
    ],
)
def test_validation_errors(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"expression": "0 9 * * *", "timezone": "UTC", **kwargs}
    with pytest.raises(ScheduleError, match=message) as caught:
        parse_cron(**arguments)  # type: ignore[arg-type]
    assert isinstance(caught.value, KafkronError)
    assert not caught.value.retryable


def test_day_names_are_not_mistaken_for_hash_fields() -> None:
    assert parse_cron("0 9 * * THU", "UTC").expression == "0 9 * * THU"
    assert parse_cron("0 9 L * *", "UTC") is not None
    assert parse_cron("0 9 ? * MON#2", "UTC") is not None


# --- an independent reference: generated cron fields with their value sets -------------


@dataclass(frozen=True)
class Field:
    text: str
    values: frozenset[int]


@dataclass(frozen=True)
class Cron:
    """A generated expression together with the sets its fields mean."""

    seconds: Field | None
    minutes: Field
    hours: Field
    days: Field
    months: Field
    weekdays: Field  # 0 = Sunday

    @property
    def text(self) -> str:
        fields = [self.minutes, self.hours, self.days, self.months, self.weekdays]
        return " ".join(f.text for f in ([self.seconds] if self.seconds else []) + fields)

    def every_hour(self) -> bool:
        hour = self.hours.text
        return hour == "*" or "/" in hour or len(self.hours.values) == 24

    def matches(self, wall: datetime) -> bool:
        second_ok = wall.second in self.seconds.values if self.seconds else wall.second == 0
        in_day = wall.day in self.days.values
        in_weekday = wall.isoweekday() % 7 in self.weekdays.values
        if self.days.text != "*" and self.weekdays.text != "*":
            day_ok = in_day or in_weekday  # classic cron: OR when both are restricted
        else:
            day_ok = in_day and in_weekday
        return (
            second_ok
            and wall.microsecond == 0
            and wall.minute in self.minutes.values
            and wall.hour in self.hours.values
            and wall.month in self.months.values
            and day_ok
        )


def star(low: int, high: int) -> st.SearchStrategy[Field]:
    return st.just(Field("*", frozenset(range(low, high + 1))))


def field_of(low: int, high: int) -> st.SearchStrategy[Field]:
    """Any of '*', 'a', 'a-b', '*/n', 'a-b/n', 'a,b,c' within [low, high]."""
    value = st.integers(low, high)
    pair = st.integers(low, high - 1).flatmap(
        lambda a: st.tuples(st.just(a), st.integers(a + 1, high))
    )
    step = st.integers(1, high - low)
    return st.one_of(
        star(low, high),
        value.map(lambda v: Field(str(v), frozenset({v}))),
        pair.map(lambda ab: Field(f"{ab[0]}-{ab[1]}", frozenset(range(ab[0], ab[1] + 1)))),
        step.map(lambda n: Field(f"*/{n}", frozenset(range(low, high + 1, n)))),
        st.tuples(pair, step).map(
            lambda p: Field(
                f"{p[0][0]}-{p[0][1]}/{p[1]}", frozenset(range(p[0][0], p[0][1] + 1, p[1]))
            )
        ),
        st.lists(value, min_size=2, max_size=4, unique=True).map(
            lambda vs: Field(",".join(map(str, sorted(vs))), frozenset(vs))
        ),
    )


SECONDS = st.sampled_from(
    [
        Field("0", frozenset({0})),
        Field("30", frozenset({30})),
        Field("*/15", frozenset({0, 15, 30, 45})),
        Field("0,45", frozenset({0, 45})),
        Field("10-50/20", frozenset({10, 30, 50})),
        Field("7", frozenset({7})),
    ]
)
DAYS = st.one_of(
    star(1, 31), star(1, 31), st.integers(1, 28).map(lambda d: Field(str(d), frozenset({d})))
)
WEEKDAYS = st.one_of(
    star(0, 6),
    star(0, 6),
    st.just(Field("1-5", frozenset(range(1, 6)))),
    st.just(Field("0,6", frozenset({0, 6}))),
)


@st.composite
def crons(draw: st.DrawFn, dense: bool = False, month_any: bool = True) -> Cron:
    """A generated cron; ``dense`` keeps it firing several times a day for short windows."""
    with_seconds = draw(st.booleans())
    every_few_hours = st.integers(1, 3).map(lambda n: Field(f"*/{n}", frozenset(range(0, 24, n))))
    hours = draw(
        st.one_of(star(0, 23), every_few_hours, field_of(0, 23)) if dense else field_of(0, 23)
    )
    months = star(1, 12) if month_any else field_of(1, 12)
    return Cron(
        seconds=draw(SECONDS) if with_seconds else None,
        minutes=draw(field_of(0, 59)),
        hours=hours,
        days=draw(star(1, 31) if dense else DAYS),
        months=draw(months),
        weekdays=draw(star(0, 6) if dense else WEEKDAYS),
    )


def offset_ms(instant_ms: int, zone: ZoneInfo) -> int:
    local = datetime.fromtimestamp(instant_ms / 1000, UTC).astimezone(zone)
    offset = local.utcoffset()
    assert offset is not None
    return int(offset.total_seconds() * 1000)


def local_wall(instant_ms: int, zone: ZoneInfo) -> datetime:
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=instant_ms)).astimezone(zone)


@functools.cache
def transitions(zone_name: str, year: int) -> tuple[int, ...]:
    """Offset changes of a zone in a year (epoch ms), found by a daily scan and bisection."""
    zone = ZoneInfo(zone_name)
    found = []
    day_ms = utc_ms(f"{year}-01-01T00:00")
    previous = offset_ms(day_ms, zone)
    for _ in range(367):
        low, day_ms = day_ms, day_ms + DAY_MS
        current = offset_ms(day_ms, zone)
        if current != previous:
            high = day_ms
            while high - low > 1:
                middle = (low + high) // 2
                low, high = (low, middle) if offset_ms(middle, zone) == current else (middle, high)
            found.append(high)
        previous = current
    return tuple(found)


def gap_has_match(cron: Cron, zone: ZoneInfo, transition_ms: int, step_ms: int) -> bool:
    """Whether a wall time skipped by the spring-forward transition matches the cron."""
    # Wall times as "ms since the epoch on the local clock": the gap is [start, end).
    gap_start_ms = transition_ms + offset_ms(transition_ms - 1, zone)
    gap_end_ms = transition_ms + offset_ms(transition_ms, zone)
    wall_ms = -(-gap_start_ms // step_ms) * step_ms
    while wall_ms < gap_end_ms:
        if cron.matches(datetime(1970, 1, 1) + timedelta(milliseconds=wall_ms)):
            return True
        wall_ms += step_ms
    return False


def brute_force(
    cron: Cron, zone: ZoneInfo, fold: FoldPolicy, after_ms: int, until_ms: int
) -> list[int]:
    """Every tick in (after_ms, until_ms] by scanning each second or minute of real time."""
    every = fold is FoldPolicy.EVERY or (fold is FoldPolicy.AUTO and cron.every_hour())
    step_ms = 1000 if cron.seconds else 60_000
    expected = set()
    instant_ms = (after_ms // step_ms + 1) * step_ms
    previous_offset = offset_ms(instant_ms - step_ms, zone)
    while instant_ms <= until_ms:
        local = local_wall(instant_ms, zone)
        current_offset = offset_ms(instant_ms, zone)
        if current_offset > previous_offset:  # spring forward within the last step
            transition_ms = instant_ms - step_ms + 1000  # tzdata changes on whole seconds
            while offset_ms(transition_ms, zone) != current_offset:
                transition_ms += 1000
            if transition_ms > after_ms and gap_has_match(cron, zone, transition_ms, step_ms):
                expected.add(transition_ms)
        previous_offset = current_offset
        if cron.matches(local.replace(tzinfo=None)) and (every or local.fold == 0):
            expected.add(instant_ms)
        instant_ms += step_ms
    return sorted(expected)


@st.composite
def windows_near_transitions(
    draw: st.DrawFn, max_lead_ms: int = 3 * HOUR_MS, always_near: bool = False
) -> tuple[str, int]:
    """A zone and an instant, usually shortly before one of the zone's offset changes."""
    zone = draw(st.one_of(st.sampled_from(ZONES), st.sampled_from(ODD_DST_ZONES)))
    year = draw(st.integers(2000, 2040))
    changes = transitions(zone, year)
    if changes and (always_near or draw(st.sampled_from([True, True, True, False]))):
        return zone, draw(st.sampled_from(changes)) - draw(st.integers(0, max_lead_ms))
    return zone, utc_ms(f"{year}-01-01T00:00") + draw(st.integers(0, 364 * DAY_MS))


@settings(PROPERTY_SETTINGS, max_examples=120)
@given(
    cron=crons(dense=True),
    where=windows_near_transitions(max_lead_ms=HOUR_MS, always_near=True),
    fold=st.sampled_from(list(FoldPolicy)),
)
def test_no_tick_is_skipped_versus_brute_force(
    cron: Cron, where: tuple[str, int], fold: FoldPolicy
) -> None:
    zone_name, after_ms = where
    span_ms = 2 * HOUR_MS if cron.seconds else 6 * HOUR_MS
    spec = parse_cron(cron.text, zone_name, fold_policy=fold)
    zone = ZoneInfo(zone_name)
    actual = ticks_between(spec, after_ms, after_ms + span_ms, 100_000)
    assert actual == brute_force(cron, zone, fold, after_ms, after_ms + span_ms)
    # Record how often the interesting cases occur (see --hypothesis-show-statistics).
    if any(local_wall(t, zone).fold for t in actual):
        event("second pass of a fold fired")
    if any(not cron.matches(local_wall(t, zone).replace(tzinfo=None)) for t in actual):
        event("gap-shifted tick fired")


@PROPERTY_SETTINGS
@given(
    cron=crons(month_any=False),
    where=windows_near_transitions(),
    fold=st.sampled_from(list(FoldPolicy)),
)
def test_ticks_increase_and_match_the_wall_clock(
    cron: Cron, where: tuple[str, int], fold: FoldPolicy
) -> None:
    zone_name, after_ms = where
    zone = ZoneInfo(zone_name)
    spec = parse_cron(cron.text, zone_name, fold_policy=fold)
    found = ticks_between(spec, after_ms, after_ms + 10 * 366 * DAY_MS, 300)
    assume(found)
    assert all(a < b for a, b in zip([after_ms, *found], found, strict=False))
    step_ms = 1000 if cron.seconds else 60_000
    for tick_ms in found:
        local = local_wall(tick_ms, zone)
        if cron.matches(local.replace(tzinfo=None)):
            assert local.fold == 0 or spec.fires_every_fold
        else:  # gap-shifted: exactly the first instant after a gap that held a match
            assert offset_ms(tick_ms, zone) > offset_ms(tick_ms - 1, zone), iso(tick_ms)
            assert gap_has_match(cron, zone, tick_ms, step_ms)


def croniter_ticks(expression: str, zone: ZoneInfo, from_ms: int, count: int) -> list[int]:
    cron = croniter(expression, local_wall(from_ms, zone), second_at_beginning=True)
    return [round(cron.get_next(float) * 1000) for _ in range(count)]


@settings(PROPERTY_SETTINGS, max_examples=20)
@given(
    cron=crons(month_any=False),
    zone_name=st.sampled_from(["UTC", "Asia/Tokyo", "Asia/Kolkata", "Etc/GMT+5", *ZONES]),
    start_ms=st.integers(utc_ms("2000-01-01T00:00"), utc_ms("2039-01-01T00:00")),
)
def test_no_drift_over_1000_ticks_versus_croniter(
    cron: Cron, zone_name: str, start_ms: int
) -> None:
    """Chaining next_fire_after from each scheduled tick reproduces croniter's sequence.

    The two may differ only within a day of a DST transition, where this module's policy
    deliberately differs from croniter's.
    """
    zone = ZoneInfo(zone_name)
    spec = parse_cron(cron.text, zone_name)
    first_ms = next_fire_after(spec, start_ms)
    assume(first_ms is not None)
    assert first_ms is not None
    chained = [first_ms]
    for _ in range(999):
        following = next_fire_after(spec, chained[-1])
        assert following is not None
        chained.append(following)
    reference = [first_ms, *croniter_ticks(cron.text, zone, first_ms, 999)]
    horizon_ms = min(chained[-1], reference[-1])
    years = range(int(iso(first_ms)[:4]), int(iso(horizon_ms)[:4]) + 1)
    changes = [t for year in years for t in transitions(zone_name, year)]
    differing = set(chained) ^ set(reference)
    for tick_ms in differing:
        if tick_ms <= horizon_ms:
            assert any(abs(tick_ms - t) <= DAY_MS for t in changes), iso(tick_ms)
    if not changes:
        assert chained == reference


def test_no_drift_across_dst_in_new_york() -> None:
    """1,000 chained ticks of a 5-minute job across the fall-back equal the real sequence."""
    spec = parse_cron("*/5 * * * *", "America/New_York")
    tick_ms = utc_ms("2026-10-31T20:00")
    chained = []
    for _ in range(1000):
        tick_ms = next_fire_after(spec, tick_ms) or 0
        chained.append(tick_ms)
    # In real time a */5 job with a '*' hour fires every 5 minutes straight through the fold.
    assert chained == [utc_ms("2026-10-31T20:05") + 300_000 * k for k in range(1000)]


@settings(PROPERTY_SETTINGS, max_examples=80)
@given(
    cron=crons(dense=True),
    where=windows_near_transitions(max_lead_ms=HOUR_MS, always_near=True),
    fold=st.sampled_from(list(FoldPolicy)),
    offsets_ms=st.lists(st.integers(-HOUR_MS, 3 * HOUR_MS), min_size=1, max_size=30),
)
def test_a_remembered_answer_equals_a_fresh_computation(
    cron: Cron, where: tuple[str, int], fold: FoldPolicy, offsets_ms: list[int]
) -> None:
    """next_fire_after reuses its last answer for later anchors before that tick (bulk loads
    of one schedule ask with nearby anchors): any sequence of anchors near a DST change gets
    what a spec that never answered before computes."""
    zone_name, around_ms = where
    shared = parse_cron(cron.text, zone_name, fold_policy=fold)
    for offset_ms in offsets_ms:
        fresh = parse_cron(cron.text, zone_name, fold_policy=fold)
        after_ms = around_ms + offset_ms
        assert next_fire_after(shared, after_ms) == next_fire_after(fresh, after_ms)
        tick_ms = next_fire_after(fresh, after_ms)
        if tick_ms is not None:  # an anchor just before the answer, then the answer itself
            assert next_fire_after(shared, tick_ms - 1) == tick_ms
            assert next_fire_after(shared, tick_ms) == next_fire_after(fresh, tick_ms)
