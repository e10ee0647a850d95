from __future__ import annotations

from collections import Counter

import pytest
from confluent_kafka import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from services.executor.lane_buffers import Buffered, LaneBuffers
from services.executor.lanes import DEFAULT_MAX_PASSES, LANES, MIN_MAX_PASSES, LaneSelector
from streams.topics import Priority

HIGH, NORMAL, LOW = Priority.HIGH, Priority.NORMAL, Priority.LOW
ALL = frozenset(LANES)
LANE_TOPICS = {f"due.{lane.value.lower()}": lane for lane in LANES}

work_sets = st.frozensets(st.sampled_from(LANES))
bounds = st.fixed_dictionaries({lane: st.integers(MIN_MAX_PASSES, 12) for lane in LANES})


def simulate(selector: LaneSelector, steps: list[frozenset[Priority]]) -> dict[Priority, int]:
    """Longest run of picks that passed over each lane while it had work."""
    run = dict.fromkeys(LANES, 0)
    longest = dict.fromkeys(LANES, 0)
    for has_work in steps:
        chosen = selector.pick(has_work)
        for lane in LANES:
            run[lane] = run[lane] + 1 if lane in has_work and lane is not chosen else 0
            longest[lane] = max(longest[lane], run[lane])
    return longest


@settings(max_examples=300, deadline=None)
@given(max_passes=bounds, steps=st.lists(work_sets, max_size=400))
def test_no_lane_with_work_is_passed_over_more_than_its_bound(
    max_passes: dict[Priority, int], steps: list[frozenset[Priority]]
) -> None:
    longest = simulate(LaneSelector(max_passes), steps)
    for lane in LANES:
        assert longest[lane] <= max_passes[lane], (lane, longest, max_passes)


@settings(max_examples=300, deadline=None)
@given(max_passes=bounds, steps=st.lists(work_sets, max_size=200))
def test_picks_a_lane_with_work_and_higher_priority_unless_one_is_overdue(
    max_passes: dict[Priority, int], steps: list[frozenset[Priority]]
) -> None:
    selector = LaneSelector(max_passes)
    for has_work in steps:
        before = {lane: selector.passes(lane) for lane in LANES}
        chosen = selector.pick(has_work)
        if not has_work:
            assert chosen is None
            continue
        assert chosen in has_work
        highest = next(lane for lane in LANES if lane in has_work)
        if chosen is not highest:
            # Only an overdue lane may jump the queue: its threshold is max_passes - (n - 2).
            assert before[chosen] >= max_passes[chosen] - (len(LANES) - 2)


@pytest.mark.parametrize("bound", [2, 3, 5, 9])
def test_the_bound_is_tight_when_all_lanes_are_saturated(bound: int) -> None:
    max_passes = {HIGH: bound, NORMAL: bound, LOW: bound}
    longest = simulate(LaneSelector(max_passes), [ALL] * 1000)
    assert longest[LOW] == bound  # reached, never exceeded


def test_strict_priority_while_nobody_waits_long() -> None:
    selector = LaneSelector()
    assert [selector.pick({HIGH, LOW}) for _ in range(3)] == [HIGH, HIGH, HIGH]
    assert selector.pick({NORMAL, LOW}) is NORMAL
    assert selector.pick({LOW}) is LOW
    assert selector.pick(set()) is None


def test_a_waiting_low_event_gets_its_turn_under_a_flood_of_high() -> None:
    selector = LaneSelector({LOW: 4})
    picks = [selector.pick({HIGH, LOW}) for _ in range(10)]
    assert picks == [HIGH, HIGH, HIGH, LOW, HIGH, HIGH, HIGH, LOW, HIGH, HIGH]


def test_saturated_shares_follow_priority_with_the_defaults() -> None:
    selector = LaneSelector()
    shares = Counter(selector.pick(ALL) for _ in range(10_000))
    assert shares[HIGH] > shares[NORMAL] > shares[LOW] > 0
    longest = simulate(LaneSelector(), [ALL] * 10_000)
    assert all(longest[lane] <= DEFAULT_MAX_PASSES[lane] for lane in LANES)


def test_reset_forgets_waiting() -> None:
    selector = LaneSelector({LOW: 3})
    selector.pick({HIGH, LOW})
    assert selector.passes(LOW) == 1
    selector.reset()
    assert selector.passes(LOW) == 0


def test_a_bound_below_lanes_minus_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        LaneSelector({NORMAL: 1})


def messages(records: list[Buffered]) -> list[Message]:
    """``records`` as the Messages they are: these tests requeue no held run."""
    found = [r for r in records if isinstance(r, Message)]
    assert len(found) == len(records), records
    return found


def message(record: Buffered | None) -> Message | None:
    """:func:`messages` of one record taken (None: nothing to take)."""
    return None if record is None else messages([record])[0]


def drained(buffers: LaneBuffers) -> list[Message]:
    """Every record left, taken one by one."""
    taken = []
    while (record := buffers.take()) is not None:
        taken.append(record)
    return messages(taken)


class ReferenceBuffers:
    """LaneBuffers as first written: a selector pick for every record taken."""

    def __init__(self, max_passes: dict[Priority, int]) -> None:
        self.selector = LaneSelector(max_passes)
        self.lanes: dict[Priority, list[tuple[int, int]]] = {lane: [] for lane in LANES}

    def take(self) -> tuple[int, int] | None:
        lane = self.selector.pick([lane for lane in LANES if self.lanes[lane]])
        return None if lane is None else self.lanes[lane].pop(0)

    def discard(self, partitions: set[int]) -> None:
        for lane in LANES:
            self.lanes[lane] = [r for r in self.lanes[lane] if r[0] not in partitions]


class PairedBuffers:
    """A LaneBuffers and its ReferenceBuffers, fed the same adds, discards and clears."""

    def __init__(
        self, topics: dict[str, Priority], capacity: int, max_passes: dict[Priority, int]
    ) -> None:
        self.topics = topics
        self.max_passes = max_passes
        self.buffers = LaneBuffers(topics, capacity, max_passes)
        self.reference = ReferenceBuffers(max_passes)
        self._topic_of = {lane: topic for topic, lane in topics.items()}
        self._serial = 0

    def add(self, topic: str, partition: int, offset: int) -> None:
        self.buffers.add(Message(topic=topic, partition=partition, offset=offset))
        self.reference.lanes[self.topics[topic]].append((partition, offset))

    def add_next(self, lane_index: int, partition: int) -> None:
        """Add a record to ``LANES[lane_index]``, its offset one past the last one added."""
        self._serial += 1
        self.add(self._topic_of[LANES[lane_index]], partition, self._serial)

    def discard(self, pairs: list[tuple[str, int]]) -> None:
        self.buffers.discard(pairs)
        self.reference.discard({partition for _, partition in pairs})

    def apply(self, op: str, a: int, b: int) -> None:
        """One of the ops the strategies draw that both sides take alike, then compare sizes."""
        if op == "add":
            self.add_next(a, b)
        elif op == "discard":
            self.discard([(topic, a) for topic in self.topics])
        elif op == "clear":
            self.buffers.clear()
            self.reference = ReferenceBuffers(self.max_passes)
        else:
            raise AssertionError(f"not a shared op: {op}")
        self.assert_same_size()

    def assert_same_size(self) -> None:
        assert len(self.buffers) == sum(len(r) for r in self.reference.lanes.values())


# ("add", lane index, partition), ("take", n), ("discard", partition), ("clear", 0)
add_op = st.tuples(st.just("add"), st.integers(0, 2), st.integers(0, 1))
discard_op = st.tuples(st.just("discard"), st.integers(0, 1), st.just(0))
buffer_ops = st.lists(
    st.one_of(
        add_op,
        st.tuples(st.just("take"), st.integers(1, 5), st.just(0)),
        discard_op,
        st.tuples(st.just("clear"), st.just(0), st.just(0)),
    ),
    max_size=300,
)


@settings(max_examples=400, deadline=None)
@given(max_passes=bounds, ops=buffer_ops)
def test_lane_buffers_take_exactly_what_a_pick_per_record_takes(
    max_passes: dict[Priority, int], ops: list[tuple[str, int, int]]
) -> None:
    """The one-lane shortcut (no selector call) never changes which record comes next."""
    paired = PairedBuffers(LANE_TOPICS, 10**6, max_passes)
    for op, a, b in ops:
        if op != "take":
            paired.apply(op, a, b)
            continue
        for _ in range(a):
            taken = message(paired.buffers.take())
            got = None if taken is None else (taken.partition(), taken.offset())
            assert got == paired.reference.take()
        paired.assert_same_size()


def test_passes_left_by_a_discard_still_count_after_a_one_lane_spell() -> None:
    """Emptied by a revoke, the buffers keep the passes a real pick would still see."""
    topics = {"h": HIGH, "n": NORMAL, "l": LOW}
    bounds = {HIGH: 2, NORMAL: 4, LOW: 32}
    paired = PairedBuffers(topics, 100, bounds)

    def take(n: int) -> list[tuple[int | None, int | None]]:
        taken = [message(paired.buffers.take()) for _ in range(n)]
        got = [(m.partition(), m.offset()) for m in taken if m is not None]
        expected: list[tuple[int | None, int | None]] = []
        expected.extend(r for r in (paired.reference.take() for _ in range(n)) if r is not None)
        assert got == expected
        return got

    for offset in range(10):
        paired.add("h", 0, offset)
    paired.add("n", 1, 100)
    assert take(3) == [(0, 0), (0, 1), (0, 2)]  # NORMAL passed over 3 times: now overdue
    paired.discard([("h", 0), ("n", 1)])
    paired.add("h", 2, 200)  # one lane holds records ...
    paired.add("n", 2, 201)  # ... then two: NORMAL's passes still count
    assert take(2) == [(2, 201), (2, 200)]


# as buffer_ops, plus ("run", limit, records kept of it; the rest is put back)
run_ops = st.lists(
    st.one_of(add_op, st.tuples(st.just("run"), st.integers(1, 6), st.integers(1, 6)), discard_op),
    max_size=300,
)


@settings(max_examples=400, deadline=None)
@given(max_passes=bounds, ops=run_ops)
def test_a_run_taken_then_partly_put_back_is_what_a_take_per_kept_record_takes(
    max_passes: dict[Priority, int], ops: list[tuple[str, int, int]]
) -> None:
    """take_run(n) is up to n take() calls of one partition; what it puts back comes next."""
    paired = PairedBuffers(LANE_TOPICS, 10**6, max_passes)
    for op, a, b in ops:
        if op != "run":
            paired.apply(op, a, b)
            continue
        run = paired.buffers.take_run(a)
        assert len(run) <= a
        assert len({(m.topic(), m.partition()) for m in run}) <= 1
        kept = min(b, len(run))
        paired.buffers.put_back(run[kept:])
        got = [(m.partition(), m.offset()) for m in messages(run[:kept])]
        assert got == [paired.reference.take() for _ in range(kept)]
        if not run:
            assert paired.reference.take() is None
        paired.assert_same_size()


def test_a_run_never_passes_over_a_lane_beyond_its_starvation_bound() -> None:
    """While two lanes hold records a run is one record: the selector decides each."""
    topics = {"h": HIGH, "n": NORMAL, "l": LOW}
    bounds = {HIGH: 2, NORMAL: 2, LOW: 32}
    paired = PairedBuffers(topics, 100, bounds)
    for offset in range(10):
        paired.add("h", 0, offset)
    paired.add("n", 0, 100)
    taken: list[tuple[int | None, int | None]] = []
    while run := messages(paired.buffers.take_run(10)):
        taken.extend((m.partition(), m.offset()) for m in run)
    assert taken == [paired.reference.take() for _ in range(11)]
    assert taken.index((0, 100)) <= 2  # passed over at most twice
    assert paired.reference.take() is None


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 6)), max_size=20))
def test_add_many_is_add_of_each(batches: list[tuple[int, int]]) -> None:
    """The loop buffers a consumed run of one partition with add_many: as add() each."""
    names = {lane: topic for topic, lane in LANE_TOPICS.items()}
    one_by_one, many = LaneBuffers(LANE_TOPICS, 8), LaneBuffers(LANE_TOPICS, 8)
    serial = 0
    for lane_index, count in batches:
        topic = names[LANES[lane_index]]
        run = [Message(topic=topic, partition=0, offset=serial + i) for i in range(count)]
        serial += count
        for message in run:
            one_by_one.add(message)
        many.add_many(topic, run)
        assert len(many) == len(one_by_one)
        assert many.full_lanes() == one_by_one.full_lanes()
    order = [(m.topic(), m.offset()) for m in drained(one_by_one)]
    assert [(m.topic(), m.offset()) for m in drained(many)] == order
