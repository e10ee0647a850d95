"""Timer intake: how fast one timer takes in creates from ``jobs``, real Kafka.

Run: ``.venv/bin/python -m bench.intake [--jobs 200000] [--kind oneoff|cron] [--profile x.svg]``.

Measures, in one run on one broker: the raw pipe (``bench.pipe.measure_pipe``) for the same
record count; then loads N creates into ``jobs`` *before* any timer runs (one-offs due in
30 days through ``KafkronClient.submit_many``, their run times spread over ``--spread-s``;
or cron jobs whose schedule starts in 30 days, a few expressions in a few zones, as raw
Job records), starts one timer process (``python -m services.timer.main``, as
``bench.herd`` does) and polls its group's committed offsets on ``jobs`` until they reach
the high watermarks. Nothing comes due, so the timer only applies creates: decode, state,
wheel entry, changelog, commit.

Reported: creates/s from the first commit the poll sees to the last (the steady intake,
start-up and group join excluded), and from the timer's start (everything included); its
ratio to the raw consume rate of the same run; the timer's CPU time per create over the
steady window (all threads, and its Python thread alone) and the broker's; the timer's
RSS. ``--profile x.svg`` runs py-spy on the timer over the steady window. On shared cores
the rates follow the CPU the timer gets; the CPU time per create is the steadier figure.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from bench.cli import add_env_options, options_from_args
from bench.herd import (
    Profiler,
    TimerProcess,
    fresh_namespace,
    job_record,
    local_broker_pid,
    now_ms,
    process_cpu_s,
    produce_jobs,
    submit_one_offs,
)
from bench.pipe import measure_pipe
from services.ingest.client import KafkronClient
from services.ingest.settings import IngestSettings
from streams.settings import KafkaSettings
from streams.topics import TopicNames

DAY_MS = 86_400_000
CRON_EXPRESSIONS = ("0 * * * *", "*/15 * * * *", "0 0 * * *", "30 2 * * 1-5", "0 9 1 * *")
CRON_ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo")
_POLL_S = 0.1


@dataclass(frozen=True)
class IntakeOptions:
    """One intake run: what to load and how to watch the timer."""

    jobs: int = 200_000
    kind: str = "oneoff"  # or "cron"
    # One-offs' run times spread over this long (each job its own); 0: all at one instant.
    spread_s: float = 86_400.0
    partitions: int = 12
    profile: Path | None = None
    native: bool = False
    idle: bool = False  # py-spy --idle: waits too, where the wall-clock time goes
    timer_env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 1_800.0


@dataclass(frozen=True)
class IntakeFigures:
    """What one run measured; rates in creates per second."""

    jobs: int
    raw_consume_per_s: float
    steady_per_s: float
    overall_per_s: float
    timer_cpu_us_per_create: float
    main_thread_cpu_us_per_create: float  # the Python thread; the rest is librdkafka's
    broker_cpu_us_per_create: float
    rss_mb: float

    @property
    def ratio_to_raw_consume(self) -> float:
        return self.steady_per_s / self.raw_consume_per_s


def cron_jobs(count: int, created_ms: int) -> Iterator[dict[str, object]]:
    """``count`` cron Job records starting in 30 days, cycling expressions and zones."""
    start_ms = created_ms + 30 * DAY_MS
    for i in range(count):
        cron = {
            "expression": CRON_EXPRESSIONS[i % len(CRON_EXPRESSIONS)],
            "timezone": CRON_ZONES[(i // len(CRON_EXPRESSIONS)) % len(CRON_ZONES)],
            "start_ms": start_ms,
            "end_ms": None,
            "fold_policy": "AUTO",
        }
        yield job_record(f"intake-{i:08d}", created_ms, cron=cron)


def load_jobs(settings: KafkaSettings, options: IntakeOptions) -> str:
    """Put ``options.jobs`` creates on ``jobs``; returns how they were written."""
    if options.kind == "cron":
        produce_jobs(settings, cron_jobs(options.jobs, now_ms()))
        return "raw cron records"
    ids = [f"intake-{i:08d}" for i in range(options.jobs)]
    first_ms = now_ms() + 30 * DAY_MS
    if options.spread_s <= 0:
        return submit_one_offs(settings, ids, first_ms) + ", one run time"
    step_ms = max(1, int(options.spread_s * 1000 / options.jobs))
    with KafkronClient(IngestSettings(kafka=settings)) as client:
        for start in range(0, len(ids), 10_000):
            client.submit_many(
                [
                    {"job_id": job_id, "handler": "bench.noop", "run_at": first_ms + i * step_ms}
                    for i, job_id in enumerate(ids[start : start + 10_000], start)
                ]
            )
    return f"ingest, run times {step_ms} ms apart"


class OffsetWatch:
    """The timer group's committed offsets on ``jobs`` against the high watermarks."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.group = f"{settings.namespace}timer"
        topic = TopicNames(settings.namespace).jobs
        self.partitions = [TopicPartition(topic, p) for p in range(settings.partitions)]
        self._admin = AdminClient(settings.client_config())
        probe = Consumer(settings.client_config(**{"group.id": f"probe-{uuid.uuid4().hex[:6]}"}))
        try:
            self.ends = {
                tp.partition: probe.get_watermark_offsets(tp, timeout=30)[1]
                for tp in self.partitions
            }
        finally:
            probe.close()
        self.total = sum(self.ends.values())

    def committed(self) -> int:
        """Records committed by the group, summed over partitions (capped at each end)."""
        request = [ConsumerGroupTopicPartitions(self.group, self.partitions)]
        result = self._admin.list_consumer_group_offsets(request)[self.group].result()
        return sum(
            min(max(tp.offset, 0), self.ends[tp.partition]) for tp in result.topic_partitions
        )


def main_thread_cpu_s(pid: int) -> float:
    """CPU time (user + system) of the main thread of ``pid`` so far, in seconds."""
    try:
        stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
    except OSError:
        return float("nan")
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_intake(bootstrap: str, options: IntakeOptions) -> IntakeFigures:
    """One run: raw pipe, load, one timer, watch its commits; prints and returns the figures."""
    pipe = measure_pipe(bootstrap, options.jobs)
    print(f"raw pipe: produce {pipe.produce_per_s:,.0f}/s, consume {pipe.consume_per_s:,.0f}/s")
    with fresh_namespace(bootstrap, "intake", options.partitions) as settings:
        loaded_at = time.monotonic()
        how = load_jobs(settings, options)
        print(f"loaded {options.jobs:,} {options.kind} creates ({how}) in "
              f"{time.monotonic() - loaded_at:.1f} s")  # fmt: skip
        figures = _watch_timer(settings, options, pipe.consume_per_s)
    _print(figures)
    return figures


def _watch_timer(
    settings: KafkaSettings, options: IntakeOptions, raw_consume_per_s: float
) -> IntakeFigures:
    watch = OffsetWatch(settings)
    timer = TimerProcess(settings, "intake-timer-0", settings.state_dir, **options.timer_env)
    broker = local_broker_pid()
    started = time.monotonic()
    timer.start()
    profiler: Profiler | None = None
    first: tuple[float, int, float, float, float] | None = None  # time, committed, CPU times
    try:
        deadline = started + options.timeout_s
        while True:
            if timer.process is not None and timer.process.poll() is not None:
                raise RuntimeError(f"the timer exited:\n{timer.log()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the timer did not take in {watch.total} creates in time")
            committed = watch.committed()
            sample = (
                time.monotonic(),
                committed,
                timer.cpu_s(),
                process_cpu_s(broker),
                main_thread_cpu_s(timer.pid),
            )
            if first is None and committed > 0:
                first = sample
                if options.profile is not None:
                    profiler = Profiler(
                        timer.pid, options.profile, native=options.native, idle=options.idle
                    )
            if committed >= watch.total:
                break
            time.sleep(_POLL_S)
        rss_mb = timer.peak_rss_mb()
    finally:
        if profiler is not None:
            profiler.stop()
        timer.stop()
    assert first is not None
    steady = watch.total - first[1]
    elapsed_s = max(sample[0] - first[0], 1e-3)
    return IntakeFigures(
        jobs=watch.total,
        raw_consume_per_s=raw_consume_per_s,
        steady_per_s=steady / elapsed_s if steady else float("nan"),
        overall_per_s=watch.total / (sample[0] - started),
        timer_cpu_us_per_create=(sample[2] - first[2]) / max(steady, 1) * 1e6,
        broker_cpu_us_per_create=(sample[3] - first[3]) / max(steady, 1) * 1e6,
        main_thread_cpu_us_per_create=(sample[4] - first[4]) / max(steady, 1) * 1e6,
        rss_mb=rss_mb,
    )


def _print(f: IntakeFigures) -> None:
    print(f"timer intake of {f.jobs:,} creates:")
    print(f"  steady (first commit seen -> all committed): {f.steady_per_s:,.0f} creates/s")
    print(f"  overall (timer start -> all committed):      {f.overall_per_s:,.0f} creates/s")
    print(f"  ratio to the same run's raw consume:         {f.ratio_to_raw_consume:.3f}")
    print(
        f"  CPU per create: timer {f.timer_cpu_us_per_create:.1f} us "
        f"(its Python thread {f.main_thread_cpu_us_per_create:.1f} us, the rest librdkafka's), "
        f"broker {f.broker_cpu_us_per_create:.1f} us"
    )
    print(f"  timer peak RSS: {f.rss_mb:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--kind", choices=("oneoff", "cron"), default="oneoff")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument(
        "--spread-s",
        type=float,
        default=86_400.0,
        help="one-offs' run times spread over this many seconds (0: one instant, a herd)",
    )
    parser.add_argument("--profile", type=Path, default=None, help="py-spy the timer to .svg")
    parser.add_argument("--native", action="store_true", help="py-spy --native (C frames)")
    parser.add_argument("--idle", action="store_true", help="py-spy --idle (waits too)")
    add_env_options(parser, "timer")
    args = parser.parse_args()
    options = options_from_args(IntakeOptions, args)
    run_intake(args.bootstrap, options)


if __name__ == "__main__":
    main()
