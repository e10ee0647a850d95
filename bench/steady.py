"""Steady firing: R one-off jobs a second coming due for D seconds, one timer, real Kafka.

Run: ``.venv/bin/python -m bench.steady [--rate 2000] [--duration-s 60]``.

Issue 3's target: 2K jobs/s coming due for 60 s, fire lateness p50 <= 10 ms and p99 <= 50 ms.
All ``rate * duration`` one-offs are created before the window (raw Job records, the timer
applies them first), with ``run_at`` spread evenly over the window. Lateness is measured as a
user sees it: when the DueEvent becomes visible to a ``read_committed`` reader of ``due.*``
minus its ``fire_at_ms`` (this includes the transaction commit), and, for comparison, from
the record's Kafka timestamp (set when the timer produced it, so without the commit) and
from its ``emitted_at_ms``. Printed with the raw pipe baseline of the same run (the load
as a share of raw produce) and the timer's CPU per fire.

Reuses ``bench.herd``'s helpers (topics, reader, timer process, waits, cleanup).
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections import Counter
from typing import Any

from bench.herd import (
    DueReader,
    TimerProcess,
    bench_settings,
    delete_namespace,
    job_record,
    local_broker_pid,
    now_ms,
    parse_env,
    percentile,
    process_cpu_s,
    produce_jobs,
    wait_until_applied,
    wait_until_live,
)
from bench.pipe import measure_pipe
from streams.admin import ensure_topics
from streams.settings import KafkaSettings

_READ_POLL_S = 0.002  # the reader's wait per poll: read_at is at most this late


def run_steady(
    bootstrap: str, rate: int, duration_s: float, partitions: int, timer_env: dict[str, str]
) -> None:
    jobs = int(rate * duration_s)
    pipe = measure_pipe(bootstrap, max(jobs, 100_000))
    print(f"raw pipe: produce {pipe.produce_per_s:,.0f}/s, consume {pipe.consume_per_s:,.0f}/s")
    settings = bench_settings(bootstrap, "steady", partitions)
    namespace, state_dir = settings.namespace, settings.state_dir
    try:
        ensure_topics(settings)
        reader = DueReader(settings)
        try:
            events, cpu = _fire_steadily(settings, reader, rate, jobs, timer_env)
        finally:
            reader.close()
    finally:
        delete_namespace(bootstrap, namespace)
        shutil.rmtree(state_dir, ignore_errors=True)
    report(events, jobs, rate, pipe.produce_per_s, cpu)


def _fire_steadily(
    settings: KafkaSettings,
    reader: DueReader,
    rate: int,
    jobs: int,
    timer_env: dict[str, str],
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    timer = TimerProcess(settings, "steady-timer-0", settings.state_dir, **timer_env).start()
    try:
        wait_until_live(settings, reader)
        started_with = len(reader.values)
        # The timer applies ~5-10K creates/s here: the window opens once all are applied.
        window_start_ms = now_ms() + int((10 + jobs * 200e-6) * 1000)
        created = now_ms()
        produce_jobs(
            settings,
            (
                job_record(f"steady-{i:07d}", created, run_at_ms=window_start_ms + i * 1000 // rate)
                for i in range(jobs)
            ),
        )
        applied_ms = wait_until_applied(settings, window_start_ms + 600_000)
        if applied_ms > window_start_ms:
            print("** LATE: the timer applied the creates after the window opened **")
        print(f"created {jobs:,} one-offs; window opens {window_start_ms - applied_ms} ms later")
        while now_ms() < window_start_ms - 200:
            reader.poll(0.05)
        broker = local_broker_pid()
        before = timer.cpu_s(), process_cpu_s(broker)
        deadline = time.monotonic() + jobs / rate + 120
        while len(reader.values) < started_with + jobs:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {len(reader.values) - started_with} of {jobs}")
            reader.poll(_READ_POLL_S)
        after = timer.cpu_s(), process_cpu_s(broker)
        cpu = {"timer_s": after[0] - before[0], "broker_s": after[1] - before[1]}
        cpu["rss_mb"] = timer.peak_rss_mb()
    finally:
        timer.stop()
    events = [e for e in reader.events() if e["job_id"].startswith("steady-")]
    return events, cpu


def report(
    events: list[dict[str, Any]],
    jobs: int,
    rate: int,
    raw_produce_per_s: float,
    cpu: dict[str, float],
) -> None:
    fired = Counter(e["execution_id"] for e in events)
    print(
        f"steady: {rate:,} jobs/s for {jobs / rate:.0f} s; {len(fired):,} of {jobs:,} fired, "
        f"{sum(n - 1 for n in fired.values())} repeated"
    )
    for name, field in (
        ("visible (read_committed - fire_at)", "read_at_ms"),
        ("Kafka timestamp - fire_at", "kafka_ts_ms"),
        ("emitted_at - fire_at", "emitted_at_ms"),
    ):
        late = sorted(e[field] - e["fire_at_ms"] for e in events)
        print(
            f"  lateness {name:36} ms: p50 {percentile(late, 0.5)}, "
            f"p99 {percentile(late, 0.99)}, max {late[-1]}"
        )
    print(
        f"  reader granularity: {_READ_POLL_S * 1000:.0f} ms; "
        f"load {rate / raw_produce_per_s:.4f} of the same run's raw produce "
        f"({raw_produce_per_s:,.0f}/s)"
    )
    print(
        f"  CPU per fire: timer {cpu['timer_s'] / jobs * 1e6:.0f} us, broker "
        f"{cpu['broker_s'] / jobs * 1e6:.0f} us (shared machine); timer peak RSS "
        f"{cpu['rss_mb']:.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=2_000, help="jobs coming due per second")
    parser.add_argument("--duration-s", type=float, default=60.0)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument(
        "--timer-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment of the timer, e.g. KAFKRON_TIMER_PUNCTUATE_INTERVAL_MS=5",
    )
    args = parser.parse_args()
    timer_env = parse_env(args.timer_env)
    run_steady(args.bootstrap, args.rate, args.duration_s, args.partitions, timer_env)


if __name__ == "__main__":
    main()
