"""The timer's per-job policies as pure decisions: jitter, catch-up after downtime, overlap.

Nothing here reads clocks or state: callers pass what they know and record the decision
(with its reason string on the SKIPPED, MISSED or CANCELLED outcome) in the same Kafka
transaction that advances the job.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from streams.records import CatchupPolicy as CatchupPolicy
from streams.records import OverlapPolicy as OverlapPolicy

# Reasons recorded on MISSED outcomes by plan_catchup.
MISSED_OUTSIDE_WINDOW = "outside catch-up window"
MISSED_SUPERSEDED = "superseded by a later tick (catch-up=latest)"
MISSED_CATCHUP_NONE = "catch-up=none"

# Reasons recorded on SKIPPED outcomes by decide_overlap's callers, and on the CANCELLED
# outcome of the execution a REPLACE decision cancels.
SKIPPED_STILL_RUNNING = "previous execution still running (overlap=skip)"
SKIPPED_QUEUE_FULL = "an execution is already queued behind the running one (overlap=queue_one)"
CANCELLED_REPLACED = "replaced by the execution of a later tick (overlap=replace)"

_JITTER_PERSON = b"kafkron-jitter"  # domain-separates this hash from any other use of blake2b


def jitter_offset_ms(execution_id: str, jitter_ms: int) -> int:
    """A deterministic offset in ``[-jitter_ms, +jitter_ms]`` for one execution.

    Derived from blake2b of the execution id (not ``hash()``, which is salted per process),
    so every timer instance and every replay picks the same offset for the same execution.
    """
    if jitter_ms < 0:
        raise ValueError(f"jitter_ms must be >= 0, got {jitter_ms}")
    if jitter_ms == 0:
        return 0
    digest = hashlib.blake2b(
        execution_id.encode("utf-8"), digest_size=8, person=_JITTER_PERSON
    ).digest()
    # 64 bits against a span of at most ~2^43 ms (278 years) keeps the modulo bias < 2^-20.
    return int.from_bytes(digest, "big") % (2 * jitter_ms + 1) - jitter_ms


@dataclass(frozen=True)
class CatchupPlan:
    """The fire ledger for missed ticks: each tick is either fired or recorded as MISSED.

    ``fire`` is oldest first; ``missed`` holds ``(tick_ms, reason)`` pairs, oldest first.
    """

    fire: list[int] = field(default_factory=list)
    missed: list[tuple[int, str]] = field(default_factory=list)


def plan_catchup(
    policy: CatchupPolicy | str, missed_ticks_ms: Iterable[int], now_ms: int, window_ms: int
) -> CatchupPlan:
    """Decide which missed ticks fire now and which are recorded as MISSED, with reasons.

    A tick is inside the window when ``now_ms - tick_ms <= window_ms`` (so a tick not yet in
    the past counts as inside). Each distinct input tick appears exactly once in the plan;
    a duplicate is the same execution, so it is planned once.
    """
    policy = CatchupPolicy(policy)
    if window_ms < 0:
        raise ValueError(f"window_ms must be >= 0, got {window_ms}")
    ticks_ms = sorted(set(missed_ticks_ms))
    if policy is CatchupPolicy.NONE:
        return CatchupPlan(missed=[(tick_ms, MISSED_CATCHUP_NONE) for tick_ms in ticks_ms])
    oldest_in_window_ms = now_ms - window_ms
    outside = [
        (tick_ms, MISSED_OUTSIDE_WINDOW) for tick_ms in ticks_ms if tick_ms < oldest_in_window_ms
    ]
    inside = [tick_ms for tick_ms in ticks_ms if tick_ms >= oldest_in_window_ms]
    if policy is CatchupPolicy.ALL or not inside:
        return CatchupPlan(fire=inside, missed=outside)
    superseded = [(tick_ms, MISSED_SUPERSEDED) for tick_ms in inside[:-1]]
    return CatchupPlan(fire=inside[-1:], missed=outside + superseded)


class OverlapDecision(StrEnum):
    """What the timer does with a due tick.

    FIRE: emit the due event now. SKIP: record the tick SKIPPED with
    :func:`overlap_skip_reason`. QUEUE: hold the tick and fire it when the running execution
    finishes. REPLACE: fire now and cancel the running execution (its outcome is CANCELLED
    with :data:`CANCELLED_REPLACED`).
    """

    FIRE = "FIRE"
    SKIP = "SKIP"
    QUEUE = "QUEUE"
    REPLACE = "REPLACE"


def decide_overlap(policy: OverlapPolicy | str, running: bool, queued: bool) -> OverlapDecision:
    """Apply a job's overlap policy to a due tick, given whether an execution runs or waits.

    SKIP skips while one runs; QUEUE_ONE queues while one runs and none waits, and skips
    when one already waits (a waiting tick is the next to run, so a new one would overlap
    it); ALLOW always fires; REPLACE fires and cancels the running one.
    """
    policy = OverlapPolicy(policy)
    if policy is OverlapPolicy.ALLOW:
        return OverlapDecision.FIRE
    if policy is OverlapPolicy.QUEUE_ONE and queued:
        return OverlapDecision.SKIP
    if not running:
        return OverlapDecision.FIRE
    if policy is OverlapPolicy.SKIP:
        return OverlapDecision.SKIP
    if policy is OverlapPolicy.QUEUE_ONE:
        return OverlapDecision.QUEUE
    return OverlapDecision.REPLACE


def overlap_skip_reason(policy: OverlapPolicy | str) -> str:
    """The reason recorded on a SKIPPED outcome that :func:`decide_overlap` caused."""
    policy = OverlapPolicy(policy)
    if policy is OverlapPolicy.SKIP:
        return SKIPPED_STILL_RUNNING
    if policy is OverlapPolicy.QUEUE_ONE:
        return SKIPPED_QUEUE_FULL
    raise ValueError(f"overlap policy {policy.value} never skips a tick")
