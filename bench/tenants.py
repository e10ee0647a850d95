"""Tenant fairness in a herd: a big tenant's herd and a small one's due at one instant.

Run: ``flock /tmp/kafkron-bench.lock .venv/bin/python -m bench.tenants --a-jobs 1000000
--b-jobs 10000`` (``--a-jobs 200000 --b-jobs 2000`` for a quick run).

Each run starts a timer (``bench.herd.TimerProcess``) and ``--executors`` executors
(``bench.e2e_herd.ExecutorChild``) in a fresh namespace, proves them live with a canary per
partition, then creates tenant A's one-offs and then tenant B's (raw Job records on ``jobs``,
B's ids sorting after A's: in job-id order every B fire comes after A's in its partition),
all due at one instant, and waits until the timer has taken in every create before it.
Reported from the ``job-results`` read back ``read_committed``: B's start lateness
(``started_at_ms - scheduled_for_ms``) p50/p99/max and A's, and A's drain time (the instant
to A's last start). Runs alternate between weighted draining on and off
(``KAFKRON_TIMER_FAIR_TENANTS``), so the figures of both come from the same session and the
ratios (on / off) are the result; every execution must have exactly one SUCCEEDED.

``--limit RATE`` compares per-tenant limits instead (``services/timer/limits.py``): runs
alternate between tenant A limited to RATE executions/s (``KAFKRON_TIMER_TENANT_LIMITS``)
and no limit, weighted draining on in both; the ratios are limited / unlimited, and A's
drain time against A / RATE says whether the limit held. ``--in-flight N`` limits A's runs
in flight instead (or as well: ``services/timer/in_flight.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from bench.cli import add_env_options
from bench.e2e_herd import (
    EXECUTOR_ENV,
    HANDLER,
    ExecutorChild,
    Intake,
    ResultLog,
    due_reader,
    jobs_end_offsets,
    wait_for_intake,
    wait_until_serving,
)
from bench.herd import TimerProcess, fresh_namespace, job_record, now_ms, percentile, produce_jobs
from streams.codec import Codec, RecordKind
from streams.settings import KafkaSettings

CODEC = Codec.from_directory()
PREFIX = "tn-"


@dataclass(frozen=True)
class DuePositions:
    """Where the timer put each tenant's DueEvents (``due.normal``, read back after the run):
    emission times (record timestamps) after the herd's first and, per partition, the position
    of B's last DueEvent among the herd's over B's count there (the bound for 2 tenants of
    weight 1 is 2)."""

    b_emitted_ms: list[int]
    a_last_emitted_ms: int
    b_last_position_ratio: float  # max over partitions of (B's last position + 1) / n_B

    def line(self) -> str:
        b = self.b_emitted_ms
        return (
            f"B emitted p50 {percentile(b, 0.5)} ms, p99 {percentile(b, 0.99)} ms after the "
            f"herd's first DueEvent, A's last {self.a_last_emitted_ms} ms; B's last position "
            f"/ n_B per partition, max {self.b_last_position_ratio:.2f}"
        )


def scan_due(settings: KafkaSettings) -> DuePositions:
    """Read ``due.normal`` from the start to its end (read_committed) and place the herd."""
    consumer = due_reader(
        settings, "tenants-due", **{"enable.partition.eof": True, "fetch.max.bytes": 52_428_800}
    )
    seen: dict[int, list[tuple[int, bytes, int]]] = {}  # partition -> (offset, key, ts)
    at_eof: set[int | None] = set()
    deadline = time.monotonic() + 300
    key_prefix = PREFIX.encode()
    while len(at_eof) < settings.partitions and time.monotonic() < deadline:
        for message in consumer.consume(num_messages=50_000, timeout=0.5):
            if message.error() is not None:
                at_eof.add(message.partition())
                continue
            key = message.key()
            if key is not None and key.startswith(key_prefix):
                row = (message.offset() or 0, key, message.timestamp()[1])
                seen.setdefault(message.partition() or 0, []).append(row)
    consumer.close()
    b_emitted, a_last, ratio = [], 0, 0.0
    b_mark = f"{PREFIX}b-".encode()
    first_ms = min((ts for rows in seen.values() for _, _, ts in rows), default=0)
    for rows in seen.values():
        rows.sort()
        b_positions = [i for i, (_, key, _) in enumerate(rows) if key.startswith(b_mark)]
        for _, key, ts in rows:
            if key.startswith(b_mark):
                b_emitted.append(ts - first_ms)
            else:
                a_last = max(a_last, ts - first_ms)
        if b_positions:
            ratio = max(ratio, (b_positions[-1] + 1) / len(b_positions))
    return DuePositions(sorted(b_emitted) or [0], a_last, ratio)


@dataclass(frozen=True)
class TenantFigures:
    """One run's start lateness of each tenant and A's drain time."""

    fair: bool
    limit_per_s: float | None  # tenant A's executions/s limit, None: no limit
    b_late_ms: list[int]
    a_late_ms: list[int]
    a_drain_ms: int  # the instant to A's last start
    duplicates: int
    intake_spare_s: float
    due: DuePositions
    in_flight: int | None = None  # tenant A's in-flight limit, None: no limit

    def line(self) -> str:
        b, a = self.b_late_ms, self.a_late_ms
        limits = [f"{self.limit_per_s:g}/s"] if self.limit_per_s else []
        limits += [f"{self.in_flight} in flight"] if self.in_flight else []
        limit = f"A limited to {', '.join(limits)}" if limits else "no limit"
        return (
            f"weighted draining {'on ' if self.fair else 'off'}, {limit}: B start lateness ms p50 "
            f"{percentile(b, 0.5)}, p99 {percentile(b, 0.99)}, max {b[-1]}; A p50 "
            f"{percentile(a, 0.5)}, p99 {percentile(a, 0.99)}; "
            f"A drain {self.a_drain_ms / 1000:.2f} s (intake done {self.intake_spare_s:.1f} s "
            f"before the instant, duplicates {self.duplicates})\n    timer: {self.due.line()}"
        )


def run_once(
    bootstrap: str,
    args: argparse.Namespace,
    fair: bool,
    limit_per_s: float | None = None,
    in_flight: int | None = None,
) -> TenantFigures:
    """One run in a fresh namespace, weighted draining on or off, A limited or not."""
    with fresh_namespace(bootstrap, "tenants", args.partitions) as settings:
        log_dir = settings.state_dir
        timer_env = {"KAFKRON_TIMER_FAIR_TENANTS": "true" if fair else "false"}
        limit: dict[str, float] = {}
        if limit_per_s is not None:
            limit["executions_per_s"] = limit_per_s
        if in_flight is not None:
            limit["in_flight"] = in_flight
        if limit:
            timer_env["KAFKRON_TIMER_TENANT_LIMITS"] = json.dumps({"a": limit})
        timer = TimerProcess(settings, "tenants-timer-0", log_dir, **timer_env)
        executors = [
            ExecutorChild(
                settings, f"tenants-executor-{i}", log_dir, **{**EXECUTOR_ENV, **args.executor_env}
            )
            for i in range(args.executors)
        ]
        results = None
        try:
            timer.start()
            for executor in executors:
                executor.start()
            results = ResultLog(settings, PREFIX)
            wait_until_serving(settings, results)
            figures = _fire(settings, args, fair, limit_per_s, results)
            return dataclasses.replace(figures, in_flight=in_flight)
        finally:
            if results is not None:
                results.close()
            for process in [*executors, timer]:
                process.stop(timeout_s=60)


def _fire(
    settings: KafkaSettings,
    args: argparse.Namespace,
    fair: bool,
    limit_per_s: float | None,
    results: ResultLog,
) -> TenantFigures:
    jobs = args.a_jobs + args.b_jobs
    lead_s = args.lead_s if args.lead_s is not None else 10 + jobs / 20_000
    base = jobs_end_offsets(settings)
    created = now_ms()
    instant_ms = created + int(lead_s * 1000)
    for tenant, count in (("a", args.a_jobs), ("b", args.b_jobs)):  # A's creates first
        produce_jobs(
            settings,
            (
                job_record(
                    f"{PREFIX}{tenant}-{i:07d}",
                    created,
                    run_at_ms=instant_ms,
                    tenant=tenant,
                    handler=HANDLER,
                )
                for i in range(count)
            ),
        )
    applied_ms = wait_for_intake(settings, Intake(base, jobs_end_offsets(settings)), instant_ms)
    limited_s = args.a_jobs / limit_per_s if limit_per_s else 0.0
    results.wait_all_succeeded(jobs, max(180.0, jobs / 2000) + limited_s)
    results.poll(1.0)  # late duplicates, if any
    late: dict[str, list[int]] = {"a": [], "b": []}
    succeeded: Counter[str] = Counter()
    a_last_start_ms = 0
    for value in results.values:
        result: dict[str, Any] = CODEC.decode(RecordKind.EXECUTION_RESULT, value)
        if result["status"] != "SUCCEEDED":
            continue
        succeeded[result["execution_id"]] += 1
        tenant = result["job_id"][len(PREFIX)]
        started_ms = result["started_at_ms"]
        late[tenant].append(started_ms - result["scheduled_for_ms"])
        if tenant == "a":
            a_last_start_ms = max(a_last_start_ms, started_ms)
    if len(succeeded) != jobs:
        raise RuntimeError(f"{len(succeeded):,} of {jobs:,} executions SUCCEEDED")
    return TenantFigures(
        fair=fair,
        limit_per_s=limit_per_s,
        b_late_ms=sorted(late["b"]),
        a_late_ms=sorted(late["a"]),
        a_drain_ms=a_last_start_ms - instant_ms,
        duplicates=sum(n - 1 for n in succeeded.values() if n > 1),
        intake_spare_s=(instant_ms - applied_ms) / 1000,
        due=scan_due(settings),
    )


def ratios(runs: list[TenantFigures], by_limit: bool = False) -> str:
    """B's p50/p99 and A's drain time, weighted draining on / off, or with A's limit / without
    (``by_limit``): medians over the runs."""

    def median(values: list[float]) -> float:
        ordered = sorted(values)
        return ordered[len(ordered) // 2]

    def figure(on: bool, pick: Any) -> float:
        def limited(r: TenantFigures) -> bool:
            return r.limit_per_s is not None or r.in_flight is not None

        side = limited if by_limit else (lambda r: r.fair)
        return median([float(pick(r)) for r in runs if side(r) == on])

    picks = {
        "B p99 emitted (after the herd's first)": lambda r: percentile(r.due.b_emitted_ms, 0.99),
        "A last emitted (after the herd's first)": lambda r: r.due.a_last_emitted_ms,
        "B p50 start lateness": lambda r: percentile(r.b_late_ms, 0.5),
        "B p99 start lateness": lambda r: percentile(r.b_late_ms, 0.99),
        "A p99 start lateness": lambda r: percentile(r.a_late_ms, 0.99),
        "A drain time": lambda r: r.a_drain_ms,
    }
    lines = []
    for name, pick in picks.items():
        on, off = figure(True, pick), figure(False, pick)
        lines.append(
            f"  {name}: on {on:.0f} ms, off {off:.0f} ms, ratio on/off {on / max(off, 1):.3f}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a-jobs", type=int, default=1_000_000)
    parser.add_argument("--b-jobs", type=int, default=10_000)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--executors", type=int, default=1)
    parser.add_argument("--lead-s", type=float, default=None)
    parser.add_argument("--repeat", type=int, default=1, help="pairs of runs (on, off)")
    parser.add_argument(
        "--in-flight",
        type=int,
        default=None,
        help="tenant A's runs in flight: pairs of runs with and without it (draining fair)",
    )
    parser.add_argument(
        "--limit",
        type=float,
        default=None,
        help="tenant A's executions/s: pairs of runs with and without it (draining fair)",
    )
    add_env_options(parser, "executor")
    args = parser.parse_args()
    print(
        f"A {args.a_jobs:,} and B {args.b_jobs:,} one-offs at one instant, {args.partitions} "
        f"partitions, {args.executors} executor(s), load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    runs: list[TenantFigures] = []
    for pair in range(args.repeat):
        # Alternate which side goes first, so drifting load hits both alike.
        for on in (True, False) if pair % 2 == 0 else (False, True):
            started = time.monotonic()
            if args.limit is not None or args.in_flight is not None:
                figures = run_once(
                    args.bootstrap,
                    args,
                    True,
                    args.limit if on else None,
                    args.in_flight if on else None,
                )
            else:
                figures = run_once(args.bootstrap, args, on)
            runs.append(figures)
            print(
                f"run {len(runs)} ({time.monotonic() - started:.0f} s): {figures.line()}",
                flush=True,
            )
    by_limit = args.limit is not None or args.in_flight is not None
    print(f"{'limited / unlimited' if by_limit else 'on / off'} in this session:")
    print(ratios(runs, by_limit=by_limit), flush=True)
    if args.limit:
        print(f"  A at its limit would drain in {args.a_jobs / args.limit:.2f} s", flush=True)


if __name__ == "__main__":
    main()
