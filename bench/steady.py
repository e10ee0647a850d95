"""Steady firing: R one-off jobs a second coming due for D seconds, one timer, one executor.

Run: ``.venv/bin/python -m bench.steady [--rate 2000] [--duration-s 60] [--fire-ahead-ms 200]``
(``--fire-ahead-ms 0`` fires nothing early: the timer's behaviour before fire-ahead).
``--baseline-root DIR --repeat N`` alternates runs of this checkout's timer and DIR's (e.g.
``git archive HEAD | tar -x -C DIR``), N each, after one raw pipe measurement;
``--profile x.svg`` runs py-spy on the timer during the window.

Issue 3's target: 2K jobs/s coming due for 60 s, lateness p50 <= 10 ms and p99 <= 50 ms.
All ``rate * duration`` one-offs (handler ``examples.noop``, no jitter, so ``fire_at`` =
``run_at`` = ``scheduled_for``) are created before the window (raw Job records, the timer
applies them first), with ``run_at`` spread evenly over the window. A timer (``TimerProcess``,
``KAFKRON_TIMER_FIRE_AHEAD_MS``) and an executor (``bench.e2e_herd.ExecutorChild``) run as
child processes; a canary per partition proves both live.

Headline: **start lateness**, when the job runs: each SUCCEEDED result's ``started_at_ms``
(the executor's clock when the handler starts) minus the job's ``fire_at_ms``; read from
``job-results`` ``read_committed``. Next to it, for the DueEvents (read from ``due.*``
``read_committed``): when each became visible minus ``fire_at_ms`` (negative: visible that
long before it was due, the fire-ahead at work; includes the transaction commit), the
record's Kafka timestamp (the timer's produce, before the commit) and ``emitted_at_ms``
minus ``fire_at_ms``. Printed with the raw pipe baseline of the same run (the load as a
share of raw produce) and CPU per job of timer, executor and broker. Every topic of the run
is deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.ab import add_ab_options, announced_runs, timer_sides
from bench.cli import add_env_options, options_from_args
from bench.e2e_herd import (
    CODEC,
    EXECUTOR_ENV,
    HANDLER,
    ExecutorChild,
    ResultLog,
    wait_until_serving,
)
from bench.herd import (
    ROOT,
    DueReader,
    Profiler,
    TimerProcess,
    fresh_namespace,
    job_record,
    local_broker_pid,
    now_ms,
    percentile,
    process_cpu_s,
    produce_jobs,
    wait_until_applied,
)
from bench.pipe import measure_pipe
from streams.codec import RecordKind
from streams.settings import KafkaSettings

PREFIX = "steady-"
_READ_POLL_S = 0.002  # the DueEvent reader's wait per poll: read_at is at most this late


@dataclass(frozen=True)
class SteadyOptions:
    """One steady run: its load and the children's extra environment."""

    rate: int = 2_000
    duration_s: float = 60.0
    partitions: int = 12
    fire_ahead_ms: int = 200
    timer_env: dict[str, str] | None = None
    executor_env: dict[str, str] | None = None
    timer_root: Path = ROOT  # whose timer runs: this checkout or a baseline tree
    label: str = ""  # printed before the figures (e.g. "baseline ")
    profile: Path | None = None  # py-spy the timer during the window to this file


@dataclass
class Measured:
    """What one steady run read back."""

    events: list[dict[str, Any]]  # DueEvents, decoded, with read_at_ms and kafka_ts_ms
    results: list[dict[str, Any]]  # the jobs' ExecutionResults
    cpu: dict[str, float]


def run_steady(
    bootstrap: str, options: SteadyOptions, raw_produce_per_s: float | None = None
) -> None:
    """One steady run in a fresh namespace (deleted after); measures the raw pipe unless given."""
    jobs = int(options.rate * options.duration_s)
    if raw_produce_per_s is None:
        raw_produce_per_s = _raw_produce_per_s(bootstrap, jobs)
    with fresh_namespace(bootstrap, "steady", options.partitions) as settings:
        due_reader = DueReader(settings)
        results = ResultLog(settings, PREFIX)
        try:
            measured = _fire_steadily(settings, due_reader, results, jobs, options)
        finally:
            due_reader.close()
            results.close()
    report(measured, jobs, options, raw_produce_per_s)


def _raw_produce_per_s(bootstrap: str, jobs: int) -> float:
    pipe = measure_pipe(bootstrap, max(jobs, 100_000))
    print(f"raw pipe: produce {pipe.produce_per_s:,.0f}/s, consume {pipe.consume_per_s:,.0f}/s")
    return pipe.produce_per_s


def _fire_steadily(
    settings: KafkaSettings,
    due_reader: DueReader,
    results: ResultLog,
    jobs: int,
    options: SteadyOptions,
) -> Measured:
    timer_env = {"KAFKRON_TIMER_FIRE_AHEAD_MS": str(options.fire_ahead_ms)}
    timer_env.update(options.timer_env or {})
    timer = TimerProcess(settings, "steady-timer-0", settings.state_dir, **timer_env)
    timer.root = options.timer_root
    executor_env = {**EXECUTOR_ENV, **(options.executor_env or {})}
    executor = ExecutorChild(settings, "steady-executor-0", settings.state_dir, **executor_env)
    profiler: Profiler | None = None
    try:
        timer.start()
        executor.start()
        wait_until_serving(settings, results)
        # The timer applies ~5-10K creates/s here: the window opens once all are applied.
        window_start_ms = now_ms() + int((10 + jobs * 200e-6) * 1000)
        created = now_ms()
        rate = options.rate
        produce_jobs(
            settings,
            (
                job_record(
                    f"{PREFIX}{i:07d}",
                    created,
                    run_at_ms=window_start_ms + i * 1000 // rate,
                    handler=HANDLER,
                )
                for i in range(jobs)
            ),
        )
        applied_ms = wait_until_applied(settings, window_start_ms + 600_000)
        if applied_ms > window_start_ms:
            print("** LATE: the timer applied the creates after the window opened **")
        print(f"created {jobs:,} one-offs; window opens {window_start_ms - applied_ms} ms later")
        while now_ms() < window_start_ms - 1_000:
            due_reader.poll(0.05)
            results.poll(0.0)
        del due_reader.values[:]  # canaries: not part of the figures
        del due_reader.kafka_ts_ms[:]
        broker = local_broker_pid()
        pids = {"timer": timer.pid, "executor": executor.pid, "broker": broker}
        before = {name: process_cpu_s(pid) for name, pid in pids.items()}
        if options.profile is not None:
            profiler = Profiler(timer.pid, options.profile)
        deadline = time.monotonic() + jobs / rate + 120
        # One SUCCEEDED each (decoded only once that many results are here): a run has a
        # STARTED too only if it still waited at a commit.
        while (
            len(due_reader.values) < jobs
            or len(results.values) < jobs
            or len(results.tally().succeeded) < jobs
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"read {len(due_reader.values)} DueEvents and {len(results.values)} results "
                    f"of {jobs} jobs"
                )
            due_reader.poll(_READ_POLL_S)
            results.poll(0.0)
        after = {name: process_cpu_s(pid) for name, pid in pids.items()}
        if profiler is not None:
            profiler.stop()
            profiler = None
        cpu = {f"{name}_s": after[name] - before[name] for name in pids}
        cpu["timer_rss_mb"] = timer.peak_rss_mb()
        cpu["executor_rss_mb"] = executor.peak_rss_mb()
    finally:
        if profiler is not None:
            profiler.stop()
        executor.stop()
        timer.stop()
    events = [e for e in due_reader.events() if e["job_id"].startswith(PREFIX)]
    return Measured(events, list(_decoded(results)), cpu)


def _decoded(results: ResultLog) -> list[dict[str, Any]]:
    return [CODEC.decode(RecordKind.EXECUTION_RESULT, v) for v in results.values]


def _spread(values: list[int]) -> str:
    late = sorted(values)
    return (
        f"p1 {percentile(late, 0.01)}, p50 {percentile(late, 0.5)}, "
        f"p99 {percentile(late, 0.99)}, max {late[-1]}"
    )


def report(measured: Measured, jobs: int, options: SteadyOptions, raw_produce_per_s: float) -> None:
    events, results, cpu = measured.events, measured.results, measured.cpu
    fired = Counter(e["execution_id"] for e in events)
    statuses = Counter(r["status"] for r in results)
    started = [r for r in results if r["status"] == "SUCCEEDED"]  # each says when it started
    starts = Counter(r["execution_id"] for r in started)
    rate = options.rate
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"{options.label}timer from {options.timer_root}; load average {load}")
    print(
        f"steady: {rate:,} jobs/s for {jobs / rate:.0f} s, fire-ahead {options.fire_ahead_ms} "
        f"ms; {len(fired):,} of {jobs:,} fired, {sum(n - 1 for n in fired.values())} repeated; "
        f"results {dict(statuses)}, {sum(n - 1 for n in starts.values())} succeeded twice"
    )
    # One-offs without jitter: fire_at_ms == scheduled_for_ms, which results carry.
    start_late = [r["started_at_ms"] - r["scheduled_for_ms"] for r in started]
    print(f"  START lateness (started_at - fire_at) ms: {_spread(start_late)}")
    early = sum(1 for v in start_late if v < 0)
    print(f"    started before fire_at: {early} (must be 0)")
    for name, field in (
        ("visible (read_committed - fire_at)", "read_at_ms"),
        ("Kafka timestamp - fire_at", "kafka_ts_ms"),
        ("emitted_at - fire_at", "emitted_at_ms"),
    ):
        late = [e[field] - e["fire_at_ms"] for e in events]
        print(f"  DueEvent {name:36} ms: {_spread(late)}")
    visible = [e["read_at_ms"] - e["fire_at_ms"] for e in events]
    ahead = sum(1 for v in visible if v < 0)
    print(
        f"    visible before fire_at: {ahead / len(visible):.1%} of DueEvents "
        f"(reader granularity {_READ_POLL_S * 1000:.0f} ms)"
    )
    print(
        f"  load {rate / raw_produce_per_s:.4f} of the same run's raw produce "
        f"({raw_produce_per_s:,.0f}/s)"
    )
    print(
        f"  CPU per job: timer {cpu['timer_s'] / jobs * 1e6:.0f} us, executor "
        f"{cpu['executor_s'] / jobs * 1e6:.0f} us, broker {cpu['broker_s'] / jobs * 1e6:.0f} us "
        f"(shared machine); peak RSS timer {cpu['timer_rss_mb']:.0f} MiB, executor "
        f"{cpu['executor_rss_mb']:.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=2_000, help="jobs coming due per second")
    parser.add_argument("--duration-s", type=float, default=60.0)
    parser.add_argument("--fire-ahead-ms", type=int, default=200, help="the timer's setting")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--partitions", type=int, default=12)
    add_env_options(parser, "timer", "executor")
    add_ab_options(parser, "timer", "runs")
    parser.add_argument("--profile", type=Path, default=None, help="py-spy the timer to this .svg")
    args = parser.parse_args()
    options = options_from_args(SteadyOptions, args)
    profile = args.profile and args.profile.with_stem(f"{args.profile.stem}-baseline")
    sides = timer_sides(options, args.baseline_root, profile=profile)
    raw_produce_per_s = _raw_produce_per_s(args.bootstrap, int(args.rate * args.duration_s))
    for side in announced_runs(sides, args.repeat):
        run_steady(args.bootstrap, side, raw_produce_per_s)


if __name__ == "__main__":
    main()
