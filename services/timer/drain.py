"""One punctuation of one partition: fire its due wheel entries, oldest first, within a budget.

Key order is fire-time order, and within one fire time the tenants' scheduled entries take
turns (their keys carry a tenant rank: ``keys.py``, ``fairness.py``), so a small tenant's
herd is not queued behind a big one's.

The hot path is an on-time one-off with nothing in flight (a *fast* entry): its value holds
the DueEvent encoded up to ``emitted_at_ms``, so firing it is one concatenation and one
produce: no state read or write (``state.py``) and no delete (``wheel.py``: the drain
advances the fired-through watermark once per batch instead). Every other entry goes
through the job's state.

While a tenant limit is configured (``limits.py``), every due scheduled entry goes the slow
way (its fire needs the job's tenant and a slot: ``throttle.py``); with none, the drain
checks that once.

Fast fires are counted for the metrics once per drain, not per fire: the ones before the
first slow entry are a prefix of the scan, in fire-time order (``fire_stats.py``).
"""

from __future__ import annotations

from services.timer import keys
from services.timer.backfill import fire_backfill
from services.timer.fire_stats import fire_ms_of
from services.timer.firing import fire_manual, fire_schedule
from services.timer.retention import fire_retention, write_retention
from services.timer.retries import fire_retry
from services.timer.scope import Scope
from services.timer.state import FAST_MARKER, FAST_VALUE_HEADER, load_state, save_state
from services.timer.throttle import fire_held
from services.timer.wheel import collect_fired, save_watermark, watermark

_SCHEDULE = keys.SCHEDULE
_RANKED = keys.RANKED
_RANKED_ID_AT = keys.RANKED_ID_AT
_NO_FAST = b"\xff" * 9
"""Above every wheel key: no entry fires fast (a tenant limit reads each one's tenant)."""


def drain_due(scope: Scope, budget: int, *, collect: bool = True) -> int:
    """Fire due entries until about ``budget`` records are emitted; returns records emitted.

    A job whose catch-up settles many ticks may overshoot the budget by up to
    ``max_catchup_ticks`` records; the scan itself never reads more than ``budget`` + 1 keys
    (the one after a full batch says how long the backlog has been due: ``unfired_ms``).
    With nothing due and ``collect``, it deletes up to ``budget`` fired fast entries instead
    (the caller turns that off while other partitions still have fires to drain).
    """
    now_ms = scope.now_ms
    write_retention(scope)  # a retention entry this scope opened may be due (no retention)
    due_bound = keys.due_bound(scope.horizon_ms)
    entries = scope.wheel.iter_range(watermark(scope), due_bound, budget + 1)
    scope.unfired_ms = None
    if not entries:
        if collect:
            collect_fired(scope, budget)
        return 0
    scope.placement_floor_ms = scope.horizon_ms + 1
    # A fast entry keyed at or after this fires on time (within the misfire grace): keys
    # start with the big-endian fire time, so one bytes comparison decides it.
    on_time_from = keys.pack_ms(now_ms - scope.env.misfire_grace_ms)
    limited = scope.env.tenant_limits.active  # the one check per drain when none is set
    # With limits, a fast entry of a limited tenant (its stored DueEvent ends with the
    # tenant's name) goes through its job's state; other tenants' entries fire as usual.
    limited_ends: tuple[bytes, ...] = ()
    if limited:
        suffixes = scope.env.limited_suffixes
        if suffixes is None:  # every tenant is limited
            on_time_from = _NO_FAST
        else:
            limited_ends = suffixes
    due_topics = scope.env.due_topics
    tail = scope.env.due_bytes.tail(now_ms)
    out: list[tuple[str, bytes | None, bytes | None]] = []
    emit = out.append
    fast = 0
    last_key = b""
    # Settling a slow entry may move a later fast entry of the same job (it turns slow when
    # an execution starts); from then on, fast entries of this scan are checked first.
    moved_possible = False
    fire_stats = scope.env.fire_stats
    prefix = -1  # fast fires before the first slow entry: entries[:prefix]
    for key, value in entries:
        if fast + scope.emitted >= budget:
            scope.unfired_ms = fire_ms_of(key)
            break
        last_key = key
        kind = key[-1]
        if (
            (kind == _RANKED or kind == _SCHEDULE)  # noqa: SIM109 (two int compares, compiled)
            and value[0] == FAST_MARKER
            and key >= on_time_from
            and not (limited_ends and value.endswith(limited_ends))
        ):
            if moved_possible:
                if scope.wheel.get(key) != value:
                    continue
                fire_stats.add_key(key, now_ms)  # past the prefix: counted one by one
            job_id = key[_RANKED_ID_AT:-1] if kind == _RANKED else key[8:-1]
            emit((due_topics[value[1]], job_id, value[FAST_VALUE_HEADER:] + tail))
            fast += 1
        else:
            if not moved_possible:
                prefix = fast
            if out:  # keep the output order of the scan
                scope.emit_all(out)
                out.clear()
            scope.fired_through = key  # entries before this one are settled
            fire_entry(scope, key, value)
            moved_possible = True
    if out:
        scope.emit_all(out)
    fire_stats.add_sorted(entries, fast if prefix < 0 else prefix, now_ms)
    if last_key:
        scope.fired_through = last_key + b"\x00"
        save_watermark(scope)
    if limited:
        scope.env.tenant_limits.flush(scope.jobs, scope.partition)
    return fast + scope.emitted


def fire_entry(scope: Scope, key: bytes, value: bytes) -> None:
    """Settle one due entry through its job's state; a stray entry is just removed."""
    parsed = keys.parse_key(key)
    if parsed.kind == keys.RETRY:
        fire_retry(scope, key, value)
        return
    if parsed.kind == keys.TOMBSTONE:
        fire_retention(scope, key, value)  # lists many jobs: none of them is the key's own
        return
    if parsed.kind == keys.HELD:
        fire_held(scope, key, value)  # a DueEvent that waited for its tenant's limit
        return
    if parsed.kind == keys.BACKFILL:
        fire_backfill(scope, key, value)  # reads the job's state, never writes it
        return
    state = load_state(scope, parsed.job_id)
    if state is None or (
        parsed.kind == keys.SCHEDULE
        and (state.sched_fire_ms != parsed.fire_ms or state.sched_rank != parsed.rank)
    ):
        scope.wheel.delete(key)  # a stray entry: its job is gone or a command moved it
        return
    if parsed.kind == keys.SCHEDULE:
        fire_schedule(scope, state)  # removes the entry itself
    else:
        scope.wheel.delete(key)
        assert parsed.kind == keys.MANUAL and parsed.tick_ms is not None
        fire_manual(scope, state, parsed.tick_ms)
    save_state(scope, state)
