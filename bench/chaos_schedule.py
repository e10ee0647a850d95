"""The fault schedule of a chaos run (``bench.chaos``), drawn from ``random.Random(seed)``:
the same seed and options give the same schedule, so a seed reproduces a run's faults.

A fault is a SIGKILL (the target started again ``held_s`` later) or a SIGSTOP (continued
``held_s`` later, always past the group session timeout, so the group moves its partitions
and the process wakes up as a zombie) of one service instance (``a-timer``, ``b-executor``,
``a-dag``...), or a SIGKILL of one broker node of a cluster (``broker-2``, started again
``held_s`` later; one node at a time, so the quorum and min ISR 2 hold).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

KILL, STOP = "kill", "stop"
BROKER_PREFIX = "broker-"
RESTART_S = 4.0
"""A killed service is not chosen again for this long after its restart (its boot)."""


@dataclass(frozen=True)
class Fault:
    """One fault: ``target`` gets ``kind`` at ``at_s`` (seconds from the workload's first
    tick) and is restarted or continued at ``at_s + held_s``."""

    at_s: float
    target: str
    kind: str
    held_s: float

    @property
    def end_s(self) -> float:
        return self.at_s + self.held_s

    @property
    def is_broker(self) -> bool:
        return self.target.startswith(BROKER_PREFIX)


@dataclass(frozen=True)
class ScheduleSpec:
    """What a schedule is drawn for."""

    duration_s: float
    services: Sequence[str]  # instance names, e.g. ("a-timer", "b-timer", "a-executor")
    brokers: int = 0  # nodes that may be killed (a cluster's; 0: none)
    herd_at_s: float | None = None  # one fault starts within 1 s after the herd's instant
    session_timeout_s: float = 6.0
    gap_s: tuple[float, float] = (6.0, 12.0)  # between two faults' starts
    kill_down_s: tuple[float, float] = (0.5, 4.0)
    stop_past_session_s: tuple[float, float] = (1.0, 5.0)
    broker_down_s: tuple[float, float] = (3.0, 8.0)
    quiet_tail_s: float = 8.0  # no fault starts in the workload's last seconds


def make_schedule(seed: int, spec: ScheduleSpec) -> list[Fault]:
    """The faults of a run, by start time; a target is never faulted while a fault of its
    own (or, for brokers, of any broker) is still on."""
    rng = random.Random(seed)
    brokers = [f"{BROKER_PREFIX}{n}" for n in range(1, spec.brokers + 1)]
    targets = [*spec.services, *brokers]
    starts: list[float] = []
    at = rng.uniform(2.0, 5.0)
    while at < spec.duration_s - spec.quiet_tail_s:
        starts.append(at)
        at += rng.uniform(*spec.gap_s)
    if spec.herd_at_s is not None and spec.herd_at_s < spec.duration_s - spec.quiet_tail_s:
        herd_fault_s = spec.herd_at_s + rng.uniform(0.0, 1.0)
        starts = [s for s in starts if abs(s - herd_fault_s) >= spec.gap_s[0] / 2]
        starts = sorted([*starts, herd_fault_s])
    free_at = dict.fromkeys(targets, 0.0)
    faults: list[Fault] = []
    for start in starts:
        brokers_free = all(free_at[b] <= start for b in brokers)
        free = [t for t in targets if free_at[t] <= start and (t not in brokers or brokers_free)]
        if not free:
            continue
        target = rng.choice(free)
        if target in brokers:
            kind, held = KILL, rng.uniform(*spec.broker_down_s)
        elif rng.random() < 0.5:
            kind, held = KILL, rng.uniform(*spec.kill_down_s)
        else:
            kind, held = STOP, spec.session_timeout_s + rng.uniform(*spec.stop_past_session_s)
        fault = Fault(round(start, 3), target, kind, round(held, 3))
        faults.append(fault)
        free_at[target] = fault.end_s + RESTART_S
    return faults


def describe(faults: Sequence[Fault]) -> str:
    """The schedule, one fault a line."""
    return "\n".join(
        f"  t+{f.at_s:6.2f} s  {f.kind:4}  {f.target:12}  for {f.held_s:5.2f} s" for f in faults
    )
