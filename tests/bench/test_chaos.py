"""``bench.chaos``: the seeded fault schedule, the workload, the ledger's checks on made-up
ledgers, the dedup handler, and a short chaos run on the running broker (SIGKILL and SIGSTOP
past the session timeout of kafkron's services only) whose ledger must be clean."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from itertools import pairwise
from pathlib import Path

import pytest

from bench.chaos import (
    HERD,
    Applied,
    ChaosFigures,
    ChaosPlan,
    build_workload,
    cron_job_ids,
    recovery_ms,
    report,
    run_chaos,
)
from bench.chaos_schedule import KILL, STOP, Fault, ScheduleSpec, make_schedule
from bench.effects import EFFECTS_ENV, dedup_effect, effects
from bench.fault_ledger import Ledger
from services.executor.context import HandlerContext
from services.ingest.producer import partition_for_key
from streams.topics import Priority

SERVICES = ("a-timer", "b-timer", "a-dag", "a-executor", "b-executor")
SPEC = ScheduleSpec(duration_s=150.0, services=SERVICES, herd_at_s=45.0)


def test_same_seed_same_schedule_and_other_seeds_differ() -> None:
    assert make_schedule(7, SPEC) == make_schedule(7, SPEC)
    schedules = {tuple(make_schedule(seed, SPEC)) for seed in range(10)}
    assert len(schedules) == 10


def test_schedule_within_the_run_one_fault_on_the_herd_and_both_kinds() -> None:
    for seed in range(20):
        faults = make_schedule(seed, SPEC)
        assert len(faults) >= 8, faults
        assert [f.at_s for f in faults] == sorted(f.at_s for f in faults)
        assert all(0 < f.at_s < SPEC.duration_s - SPEC.quiet_tail_s for f in faults)
        assert any(45.0 <= f.at_s <= 46.0 for f in faults), "no fault during the herd"
        assert {f.target for f in faults} <= set(SERVICES)
        assert {f.kind for f in faults} <= {KILL, STOP}
    every = [f for seed in range(20) for f in make_schedule(seed, SPEC)]
    assert {f.kind for f in every} == {KILL, STOP}
    assert {f.target for f in every} == set(SERVICES)


def test_a_stop_outlasts_the_session_and_a_target_has_one_fault_at_a_time() -> None:
    for seed in range(20):
        faults = make_schedule(seed, SPEC)
        for fault in faults:
            if fault.kind == STOP:
                assert fault.held_s > SPEC.session_timeout_s
            later = [f for f in faults if f.target == fault.target and f.at_s > fault.at_s]
            assert all(f.at_s > fault.end_s for f in later), (fault, later)


def test_brokers_are_killed_one_at_a_time_only_when_asked() -> None:
    assert not any(f.is_broker for seed in range(10) for f in make_schedule(seed, SPEC))
    spec = ScheduleSpec(duration_s=300.0, services=SERVICES, brokers=3)
    brokers = [f for seed in range(10) for f in make_schedule(seed, spec) if f.is_broker]
    assert brokers and all(f.kind == KILL for f in brokers)
    for seed in range(10):
        down = [f for f in make_schedule(seed, spec) if f.is_broker]
        for a, b in pairwise(down):
            assert b.at_s > a.end_s, (a, b)


def test_plan_instances_and_targets() -> None:
    plan = ChaosPlan(timers=2, executors=3, dags=1)
    assert plan.instances() == {
        "a": ("timer", "dag", "executor"),
        "b": ("timer", "executor"),
        "c": ("executor",),
    }
    assert plan.targets() == [
        "a-timer", "a-dag", "a-executor", "b-timer", "b-executor", "c-executor"
    ]  # fmt: skip
    assert plan.schedule() == ChaosPlan(timers=2, executors=3, dags=1).schedule()
    assert plan.schedule() != ChaosPlan(seed=2, timers=2, executors=3, dags=1).schedule()


def test_workload_fires_every_partition_every_second_plus_herd_and_dag() -> None:
    plan = ChaosPlan(duration_s=10.0, partitions=4, cron_per_partition=2, herd=50)
    jobs = cron_job_ids(4, 2)
    assert Counter(partition_for_key(j.encode(), 4) for j in jobs) == dict.fromkeys(range(4), 2)
    workload = build_workload(plan, 1_000_000_000_000)
    assert workload.end_ms - workload.first_ms == 10_000
    assert workload.herd_ms == workload.first_ms + 3_000
    by_job = Counter(job for job, _ in workload.expected.values())
    assert all(by_job[j] == 10 for j in jobs)
    assert sum(j.startswith(HERD) for j in by_job) == 50
    assert by_job["c-dag-root"] == by_job["c-dag-child-1"] == by_job["c-dag-child-2"] == 5
    assert len(workload.requests) == 8 + 3 + 50


def _ledger(finals: dict[str, list[int]]) -> Ledger:
    ledger = Ledger()
    for execution, times in finals.items():
        ledger.finals[execution] = len(times)
        ledger.final_at_ms[execution] = times
        ledger.statuses["SUCCEEDED"] += len(times)
    return ledger


def test_the_checks_find_lost_doubled_unexpected_and_doubled_effects() -> None:
    plan = ChaosPlan(duration_s=4.0, partitions=2, cron_per_partition=1, herd=0)
    workload = build_workload(plan, 1_000_000_000_000)
    executions = sorted(workload.expected)
    lost, doubled = executions[0], executions[1]
    finals = {e: [1] for e in executions[2:]} | {doubled: [1, 2], "c-cron-999@0": [1]}
    runs = Counter({("effect", e): 1 for e in executions[1:]})
    runs[("effect", executions[2])] = 2
    runs[("start", executions[3])] = 3
    figures = ChaosFigures(plan, workload, [], _ledger(finals), runs)
    assert figures.lost == [lost]
    assert figures.doubled == {doubled: 2}
    assert figures.unexpected == ["c-cron-999@0"]
    assert figures.doubled_effects == {executions[2]: 2}
    assert figures.without_effect == ["c-cron-999@0"]
    assert figures.reruns == (2, 1)
    assert len(figures.defects()) == 5
    assert "DEFECTS" in report(figures)
    clean = {e: [1] for e in executions}
    runs = Counter({("effect", e): 1 for e in executions})
    assert ChaosFigures(plan, workload, [], _ledger(clean), runs).defects() == []


def test_recovery_is_the_longest_wait_of_the_fires_after_the_fault() -> None:
    plan = ChaosPlan(duration_s=8.0, partitions=2, cron_per_partition=1, herd=0)
    first = 1_000_000_000_000
    workload = build_workload(plan, first)
    finals: dict[str, list[int]] = {}
    for execution, (job, tick) in workload.expected.items():
        stalled = partition_for_key(job.encode(), 2) == 1 and first + 2_000 <= tick < first + 5_000
        finals[execution] = [first + 5_200 if stalled else tick + 50, first + 9_000]
    ledger = _ledger(finals)
    # A fault at +1.5 s: partition 1's fires of +2, +3 and +4 s end together at +5.2 s.
    assert recovery_ms(ledger, workload, first + 1_500, first + 6_000) == 3_200
    assert recovery_ms(ledger, workload, first + 1_500, first + 2_500) == 3_200
    assert recovery_ms(ledger, workload, first + 5_000, first + 8_000) == 50  # nothing stalls
    assert recovery_ms(ledger, workload, first + 8_000, first + 9_000) is None  # no fire then


def test_dedup_handler_makes_its_effect_once_per_execution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "effects.log"
    monkeypatch.setenv(EFFECTS_ENV, str(path))

    def context(execution: str) -> HandlerContext:
        return HandlerContext.for_attempt(
            execution_id=execution, job_id="j", handler="chaos.dedup", scheduled_for_ms=0,
            attempt=1, payload=b"0", priority=Priority.NORMAL, worker_id="w", timeout_s=10.0,
        )  # fmt: skip

    for execution in ("j@1", "j@1", "j@2"):
        asyncio.run(dedup_effect(context(execution)))
    runs = effects(path)
    assert runs[("start", "j@1")] == 2 and runs[("done", "j@1")] == 2
    assert runs[("effect", "j@1")] == 1 and runs[("deduped", "j@1")] == 1
    assert runs[("effect", "j@2")] == 1 and runs[("deduped", "j@2")] == 0


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_short_chaos_run_keeps_the_ledger_clean(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    """2 timers, 2 executors and a dag processor under SIGKILLs and a SIGSTOP past the
    session timeout (seed 3: an executor killed, a timer killed during the herd, an executor
    stopped for 9.2 s): every fire one final outcome, each effect once."""
    plan = ChaosPlan(
        seed=3, duration_s=22.0, bootstrap=kafka_bootstrap, namespace=namespace, partitions=2,
        herd=300, settle_s=60.0,
    )  # fmt: skip
    schedule = plan.schedule()
    assert {f.kind for f in schedule} == {KILL, STOP}, schedule
    figures = run_chaos(plan, tmp_path)
    print("\n" + report(figures))
    assert [a.fault for a in figures.applied] == schedule
    assert all(isinstance(a, Applied) and a.end_ms is not None for a in figures.applied)
    assert not figures.defects(), report(figures) + _logs(tmp_path)
    assert figures.runs and sum(figures.ledger.finals.values()) == len(figures.workload.expected)


def _logs(work_dir: Path) -> str:
    return "".join(
        f"\n--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
        for p in sorted((work_dir / "logs").glob("*.log"))
        if os.path.getsize(p)
    )


def test_fault_end() -> None:
    fault = Fault(1.5, "a-timer", STOP, 7.25)
    assert fault.end_s == 8.75 and not fault.is_broker
    assert Fault(1.0, "broker-2", KILL, 3.0).is_broker
