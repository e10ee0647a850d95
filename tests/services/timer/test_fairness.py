"""Tenant-fair order within one fire time: the ranks, the bound, and the drain that keeps it.

The bound (``services/timer/fairness.py``): in one partition the ``i``-th entry of tenant
``t`` at an instant fires after at most ``sum_u min(n_u, w_u * (i // w_t + 1))`` entries of
that instant, whatever the order the creates came in and whatever the job ids.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from services.timer import keys
from services.timer.fairness import TenantRanks
from services.timer.settings import TimerSettings
from services.timer.state import decode_state, encode_state
from services.timer.stored_state import TimerState
from streams.codec import Codec, RecordKind
from tests.services.timer.test_stored_state import STATES, record_of, timer_states
from tests.services.timer.test_timer_logic import (
    CODEC,
    T0,
    T_MIN,
    Timer,
    bump,
    cron_job,
    one_off,
)

# Tenants: name -> (entries at the instant, weight).
tenant_sets = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d", "e"]),
    st.tuples(st.integers(min_value=1, max_value=60), st.integers(min_value=1, max_value=4)),
    min_size=1,
    max_size=4,
)


def bound(tenants: dict[str, tuple[int, int]], tenant: str, ordinal: int) -> int:
    """How many entries of the instant may fire up to and including ``tenant``'s ``ordinal``-th."""
    rank = ordinal // tenants[tenant][1]
    return sum(min(n, w * (rank + 1)) for n, w in tenants.values())


def intake_order(tenants: dict[str, tuple[int, int]], seed: int) -> list[tuple[str, bytes]]:
    """Every (tenant, job id) of the instant, in a shuffled intake order, with random ids."""
    rng = random.Random(seed)
    entries = [
        (tenant, b"%08x-%d" % (rng.getrandbits(32), i))
        for tenant, (n, _) in tenants.items()
        for i in range(n)
    ]
    rng.shuffle(entries)
    return entries


@given(tenant_sets, st.integers(min_value=0, max_value=2**16))
def test_one_instants_keys_keep_the_bound_for_every_tenant(
    tenants: dict[str, tuple[int, int]], seed: int
) -> None:
    ranks = TenantRanks({t: w for t, (_, w) in tenants.items()})
    ordinals: Counter[str] = Counter()
    keyed = []
    for tenant, job_id in intake_order(tenants, seed):
        key = keys.schedule_key(T0, job_id, ranks.rank(3, T0, tenant))
        keyed.append((key, tenant, ordinals[tenant]))
        ordinals[tenant] += 1
    keyed.sort()
    for position, (_, tenant, ordinal) in enumerate(keyed):
        assert position < bound(tenants, tenant, ordinal)
    # Equal weights: all n entries of a tenant within the first T * n, whatever the others had.
    if all(w == 1 for _, w in tenants.values()):
        last: dict[str, int] = {tenant: position for position, (_, tenant, _) in enumerate(keyed)}
        for tenant, (n, _) in tenants.items():
            assert last[tenant] < len(tenants) * n


def test_ranks_count_per_partition_instant_and_tenant_and_a_lost_counter_restarts() -> None:
    ranks = TenantRanks({"big": 2}, max_instants=4)
    assert [ranks.rank(0, T0, "big") for _ in range(5)] == [0, 0, 1, 1, 2]
    assert [ranks.rank(0, T0, "small") for _ in range(2)] == [0, 1]
    assert ranks.rank(1, T0, "small") == 0  # another partition
    assert ranks.rank(0, T0 + 1, "small") == 0  # another instant
    assert len(ranks) == 4
    ranks.rank(0, T0 + 2, "x")  # full: the half with the earliest fire times goes
    assert len(ranks) <= 3 and ranks.rank(0, T0 + 2, "x") == 1
    ranks.forget(0)
    assert ranks.rank(0, T0 + 2, "x") == 0
    assert TenantRanks(enabled=False).rank(0, T0, "a") == 0
    with pytest.raises(ValueError, match="weights are >= 1"):
        TenantRanks({"a": 0})


def test_weights_below_one_are_refused_by_the_settings() -> None:
    with pytest.raises(ValidationError):
        TimerSettings(tenant_weights={"a": 0})
    assert TimerSettings(tenant_weights={"a": 3}).tenant_weights == {"a": 3}


def _due_order(timer: Timer) -> list[tuple[str, int]]:
    return [(d["job_id"], d["scheduled_for_ms"]) for d in timer.dues()]


@settings(max_examples=40, deadline=None)
@given(tenant_sets, st.integers(min_value=0, max_value=2**16), st.integers(1, 17))
def test_a_drain_fires_each_job_once_within_the_bound(
    tenants: dict[str, tuple[int, int]], seed: int, batch_size: int
) -> None:
    timer = Timer(batch_size=batch_size, tenant_weights={t: w for t, (_, w) in tenants.items()})
    order = intake_order(tenants, seed)
    tenant_of = {job_id.decode(): tenant for tenant, job_id in order}
    for tenant, job_id in order:
        timer.submit(one_off(job_id.decode(), T0 + 1_000, tenant=tenant, jitter_ms=0), T0)
    timer.submit(one_off("later", T0 + 1_001, jitter_ms=0), T0)  # the next instant: after all
    while timer.punctuate(T0 + 1_001):
        pass
    fired = _due_order(timer)
    assert Counter(job_id for job_id, _ in fired) == Counter([*tenant_of, "later"])
    assert fired[-1] == ("later", T0 + 1_001)
    ordinals: Counter[str] = Counter()
    for position, (fired_id, _) in enumerate(fired[:-1]):
        tenant = tenant_of[fired_id]
        assert position < bound(tenants, tenant, ordinals[tenant])
        ordinals[tenant] += 1


def test_without_fair_tenants_one_instant_fires_in_job_id_order() -> None:
    timer = Timer(fair_tenants=False)
    for job_id, tenant in [("a2", "a"), ("b1", "b"), ("a1", "a"), ("b0", "b")]:
        timer.submit(one_off(job_id, T0 + 1_000, tenant=tenant, jitter_ms=0), T0)
    timer.punctuate(T0 + 1_000)
    assert [job_id for job_id, _ in _due_order(timer)] == ["a1", "a2", "b0", "b1"]
    fair = Timer()
    for job_id, tenant in [("a2", "a"), ("a1", "a"), ("a0", "a"), ("b1", "b")]:
        fair.submit(one_off(job_id, T0 + 1_000, tenant=tenant, jitter_ms=0), T0)
    fair.punctuate(T0 + 1_000)
    assert [job_id for job_id, _ in _due_order(fair)] == ["a2", "b1", "a1", "a0"]


def _as_v1(timer: Timer, job_id: bytes) -> None:
    """Store the job's state as timer_state v1 (no rank) and its entry under the legacy key,
    as a timer before ranks left them (in RocksDB and in the changelog a restore reads)."""
    scope = timer.scope(T0)
    state = decode_state(scope, timer.jobs.data[job_id])
    assert state.sched_fire_ms is not None and state.sched_rank >= 0
    ranked = keys.schedule_key(state.sched_fire_ms, job_id, state.sched_rank)
    value = timer.wheel.data[ranked]
    timer.wheel.delete(ranked)
    timer.wheel.set(keys.schedule_key(state.sched_fire_ms, job_id, keys.NO_RANK), value)
    state.sched_rank = keys.NO_RANK
    pins: dict[RecordKind, int] = {RecordKind.TIMER_STATE: 1}
    v1 = Codec.from_directory(writer_versions=pins, reader_versions=pins)
    record = {k: v for k, v in record_of(state).items() if k != "sched_rank"}
    data = v1.encode(RecordKind.TIMER_STATE, record)
    assert data[2:10] != encode_state(scope, state)[2:10]  # another fingerprint
    timer.jobs.set(job_id, data)


def test_a_v1_state_with_a_legacy_key_is_moved_and_fires_once() -> None:
    timer = Timer()
    job = one_off("old", T0 + 1_000, jitter_ms=0)
    timer.submit(job, T0)
    timer.submit(one_off("new", T0 + 1_000, jitter_ms=0), T0)
    _as_v1(timer, b"old")
    loaded = decode_state(timer.scope(T0), timer.jobs.data[b"old"])
    assert loaded.sched_rank == keys.NO_RANK and loaded.sched_fire_ms == T0 + 1_000
    timer.submit(bump(job, version=2, run_at_ms=T0 + 2_000), T0 + 10)  # moves the legacy entry
    assert keys.schedule_key(T0 + 1_000, b"old", keys.NO_RANK) not in timer.wheel.data
    moved = decode_state(timer.scope(T0), timer.jobs.data[b"old"])
    assert moved.sched_rank >= 0  # written again with a rank
    timer.run(T0 + 1_000, T0 + 2_000, 10)
    assert sorted(_due_order(timer)) == [("new", T0 + 1_000), ("old", T0 + 2_000)]


def test_a_v1_state_fires_from_its_legacy_key_and_completes() -> None:
    timer = Timer()
    timer.submit(one_off("old", T0 + 1_000, jitter_ms=0), T0)
    _as_v1(timer, b"old")
    timer.run(T0 + 1_000, T0 + 1_100, 10)
    assert _due_order(timer) == [("old", T0 + 1_000)]
    timer.result("old", T0 + 1_000, "SUCCEEDED", T0 + 1_200)
    timer.run(T0 + 1_200, T0 + 3_000, 10)
    state: Any = decode_state(timer.scope(T0), timer.jobs.data[b"old"])
    assert state.completed and state.sched_fire_ms is None
    assert _due_order(timer) == [("old", T0 + 1_000)]  # once
    assert CODEC.writer_version(RecordKind.TIMER_STATE) == 2


def test_a_v1_cron_state_fires_from_its_legacy_key_through_the_slow_path() -> None:
    timer = Timer()
    timer.submit(cron_job("c", "* * * * *", T0), T0)
    _as_v1(timer, b"c")
    timer.run(T_MIN - 10, T_MIN + 10, 10)
    timer.result("c", T_MIN, "SUCCEEDED", T_MIN + 20)
    timer.run(T_MIN + 20, T_MIN + 60_000, 10)
    assert _due_order(timer) == [("c", T_MIN), ("c", T_MIN + 60_000)]
    state = decode_state(timer.scope(T0), timer.jobs.data[b"c"])
    assert state.sched_rank >= 0  # its next tick is keyed with a rank
    assert keys.schedule_key(T_MIN, b"c", keys.NO_RANK) not in timer.wheel.data


@given(state=timer_states)
def test_the_stored_rank_is_read_on_the_way_to_the_tail(state: TimerState) -> None:
    data = STATES.encode(state)
    rank, tail_at = STATES.rank_and_tail_at(data)
    assert tail_at == STATES.tail_at(data)
    if tail_at >= 0:
        assert rank == state.sched_rank
        fields = STATES.tail_fields(data[tail_at:])  # None: longs it leaves to the codec
        assert fields is None or STATES.encode_tail(fields) == data[tail_at:]
